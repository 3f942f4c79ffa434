"""In-process task pipelines: a fine-tuned model directory in, task answers out (what ``bertkit serve`` serves).

    clf = load_pipeline("runs/sst2")                      # the head is read from config.json "architectures"
    clf.predict("a gripping film")                        # [{"label": "1", "score": 0.97}]
    clf.predict([("a man eats", "someone eats")], return_all_scores=True)
    rr = load_pipeline("runs/reranker")
    rr.rerank("what is BERT?", ["a muppet", "a language model"])   # [{"index": 1, "score": 0.91}, ...]
    ner = load_pipeline("runs/conll")
    ner.ner("George Washington went to Washington")       # [{"entity_group": "PER", "score", "word", "start", "end"}]
    qa = load_pipeline("runs/squad")
    qa.answer("Where?", "The cat sat on the mat.")        # {"answer": "on the mat", "score", "start", "end"}
    qa.answer("Where?", "The cat sat on the mat.", top_k=2)   # a list of the 2 best answers

The calls' keyword arguments carry transformers' pipeline names and semantics (``function_to_apply``, ``top_k``,
``aggregation_strategy``, ``ignore_labels``, ``handle_impossible_answer``, ``doc_stride``...; docs/inference.md); a
bad value raises InputError naming it. QA answers by transformers' convention unless ``qa_convention="google"``
(``run_squad.py``'s, as ``bertkit predict``).

Heads (``architectures[0]`` in ``config.json``) -> pipeline:

    BertForSequenceClassification   TextClassificationPipeline  (.kind: classification, regression or rerank)
    BertForTokenClassification      TokenClassificationPipeline (also the feature-based tagger of ``finetune``)
    BertForQuestionAnswering        QuestionAnsweringPipeline

The task settings saved by ``bertkit finetune`` (``finetune_config.json``: labels, max_seq_length, doc stride...)
are used when present, so a pipeline tokenises, windows and post-processes exactly as ``bertkit predict`` does
(the same ``bertkit.tasks`` code runs). A Hugging Face model directory without that file gets the defaults: label
names from ``id2label`` (``LABEL_i`` when there are none), 512 tokens, SQuAD v1.1 windows.

Scores (as transformers' default ``function_to_apply``): softmax over the labels; a one-label model gives its sigmoid
(a reranker) or its raw value (a regression model fine-tuned with ``--regression`` / STS-B); ``raw_scores`` gives
the logits.
``quantize="int8"`` swaps every Linear for a dynamic int8 one (CPU; see :mod:`bertkit.quantize`);
``backend="onnx"`` runs the exported graph with ONNX Runtime instead of PyTorch. The forward pass on each backend and
the batch loop are :mod:`bertkit.runtime`'s; a pipeline tokenizes and windows before them and decodes the head's
outputs after.
"""

from __future__ import annotations

from bertkit.pipelines.base import (
    AGGREGATIONS,
    BACKENDS,
    DEFAULT_MAX_LENGTH,
    FUNCTIONS,
    HEAD_KEYS,
    HEADS,
    PIPELINE_ROLES,
    QA_CONVENTIONS,
    InputTooLongError,
    NoHeadError,
    Pipeline,
)
from bertkit.pipelines.classification import TextClassificationPipeline
from bertkit.pipelines.loading import load_pipeline, read_head
from bertkit.pipelines.qa import QuestionAnsweringPipeline
from bertkit.pipelines.tagging import TokenClassificationPipeline
from bertkit.tasks.tagging import _tag, group_entities, tokens_to_string  # noqa: F401 (public here too)

__all__ = [
    "AGGREGATIONS",
    "BACKENDS",
    "DEFAULT_MAX_LENGTH",
    "FUNCTIONS",
    "HEAD_KEYS",
    "HEADS",
    "PIPELINE_ROLES",
    "QA_CONVENTIONS",
    "InputTooLongError",
    "NoHeadError",
    "Pipeline",
    "QuestionAnsweringPipeline",
    "TextClassificationPipeline",
    "TokenClassificationPipeline",
    "group_entities",
    "load_pipeline",
    "read_head",
    "tokens_to_string",
]
