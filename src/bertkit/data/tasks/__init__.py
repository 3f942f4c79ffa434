"""The fine-tuning task readers: ``readers`` (the base every reader uses, and generic CSV / TSV / JSONL files),
``glue``, ``squad``, ``conll``, ``swag``. Shared by ``bertkit.tasks`` and ``bertkit.embeddings``."""
