"""The one channel a training run speaks through: the logger ``bertkit.run`` (INFO), which ``bertkit``'s CLI prints
on stderr. Library code never prints; a recipe's progress lines, resume notes and dev results all go here."""

from __future__ import annotations

import logging

from bertkit.training.distributed import DistContext

logger = logging.getLogger("bertkit.run")


def say(message: str, ctx: DistContext | None = None, quiet: bool = False) -> None:
    """Log ``message`` on rank 0 unless ``quiet`` (or empty)."""
    if message and not quiet and (ctx is None or ctx.is_main):
        logger.info(message)
