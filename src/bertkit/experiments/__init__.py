"""Experiments in one command: the GLUE suite with its leaderboard files, the paper's ablations, layer probes,
training curves and attention maps.

- ``glue``: the suite (lr grid x seeds per task, official metrics, GLUE score, submission files);
- ``ablate``: pre-training ablations (NSP, mask rate, model size, steps), each variant fine-tuned;
- ``probe``: frozen-model linear probes per layer x pooling (and the paper's Table 7 for NER);
- ``plots``: the matplotlib figures (Agg backend), numbers always written beside them;
- ``attention``: attention maps of one head or a layer's heads;
- ``tensorboard``: metrics records -> TensorBoard event files, without TensorFlow or tensorboard installed.

Pre-training and fine-tuning are driven through the ``bertkit`` CLI (``bertkit.experiments.runner``) and read back
from the files they write, so a study is what a user would have typed by hand.
"""
