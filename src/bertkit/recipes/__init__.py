"""Training recipes: explicit loops you can read on one screen each (``pretrain``, ``finetune``)."""
