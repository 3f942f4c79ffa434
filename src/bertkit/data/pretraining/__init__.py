"""The pre-training corpus pipeline, one way: ``corpus_files`` (which files a corpus names) -> ``corpus`` (files ->
documents and blocks; ``task_text``: task files' text columns) -> ``splitter`` (sentences) -> ``workers`` run by
``pipeline`` (tokens) -> ``prepare`` writing ``shards`` -> ``instances`` (MLM + NSP instances, masking, batches)."""
