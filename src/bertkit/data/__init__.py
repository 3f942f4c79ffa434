"""Data: pre-training corpora, instances and memmap shards (``corpus``, ``pretraining``); task readers."""
