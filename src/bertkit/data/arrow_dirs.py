"""``datasets.save_to_disk`` directories as corpus input: their Arrow files, read without the ``datasets`` package."""

from __future__ import annotations

import json
import logging
from pathlib import Path

logger = logging.getLogger("bertkit.data.corpus")


def is_hf_dataset(d: Path) -> bool:
    return (d / "state.json").is_file() or (d / "dataset_dict.json").is_file()


def hf_arrow_files(d: Path) -> list[Path]:
    """The Arrow files of a ``datasets.save_to_disk`` directory (a Dataset, or every split of a DatasetDict)."""
    from bertkit.data.corpus import CorpusError  # corpus imports this module

    if (d / "dataset_dict.json").is_file():
        try:
            splits = json.loads((d / "dataset_dict.json").read_text(encoding="utf-8"))["splits"]
        except (OSError, ValueError, KeyError, TypeError) as e:
            raise CorpusError(f"{d / 'dataset_dict.json'}: unreadable ({e})") from None
        logger.info(f"bertkit: {d}: a DatasetDict; reading its splits {', '.join(splits)}")
        return [f for s in splits for f in hf_arrow_files(d / s)]
    try:
        state = json.loads((d / "state.json").read_text(encoding="utf-8"))
        files = [d / entry["filename"] for entry in state["_data_files"]]
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise CorpusError(f"{d / 'state.json'}: not a datasets.save_to_disk directory ({e})") from None
    missing = [f for f in files if not f.is_file()]
    if missing:
        raise CorpusError(f"{d}: the dataset's file {missing[0].name} is missing")
    return files
