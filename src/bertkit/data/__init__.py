"""Data, by subsystem: ``pretraining`` (the corpus pipeline: files -> sentences -> tokens -> shards -> instances)
and ``tasks`` (the fine-tuning task readers, shared by the task families and the embedding recipes)."""
