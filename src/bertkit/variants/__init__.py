"""Variants of the registered architectures: each a small modeling module here that reuses its base's blocks.

A variant (an extra norm, a layer mix, a gate) is three things, none of them a copy of the base's modeling file:

- ``bertkit/variants/<name>.py``: its config class (the base's, with its own ``model_type``), its encoder (a
  subclass of the base's that overrides the base's seam, ``ModernBertModel.run_layers`` for ModernBERT: what each
  layer reads) and one two-line subclass per head naming that encoder (``encoder_class``), its config
  (``config_class``) and, when it adds weights, its checkpoint layout (``layout``: the roots of its extra keys);
- its entry in ``bertkit/models.py``'s ``REGISTRY``, made by ``models.variant(base, ...)`` from the base's entry: its
  ``model_type`` is then an ``--arch`` choice of ``bertkit pretrain``, and every loader, pipeline and the Encoder
  find its classes through the registry;
- how transformers loads its saved directory: ``remote_code``, a self-contained transformers modeling file in
  ``bertkit/resources/remote_code/`` that every save copies beside the weights, config.json's ``auto_map`` naming its
  classes (``AutoModel.from_pretrained(directory, trust_remote_code=True)``).

Its tests: at its initial values it computes exactly its base's outputs (the base's weights loaded where shared:
the proof that it reuses the blocks), its save/load round trip, transformers' load of its directory (the same
outputs), and a few steps of ``bertkit pretrain --arch <its model_type>``. docs/model.md ("Variants") walks through
one: ELC-BERT's layer mix on ModernBERT (``variants/modernbert_elc.py``).
"""
