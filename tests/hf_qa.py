"""transformers' question-answering pipeline as the reference for bertkit's QA pipeline.

transformers 5 removed ``QuestionAnsweringPipeline``; the HF convention is the 4.x one (the issue measured 4.57). The
reference runs in a child process whose ``transformers`` has the pipeline: the installed one if it does, else one
installed apart, named by ``BERTKIT_TRANSFORMERS4`` (a ``pip install --target`` directory, prepended to the child's
``PYTHONPATH``):

    .venv/bin/pip install --target /tmp/tf4 --no-deps "transformers==4.57.1" "huggingface-hub>=0.34,<1.0" \\
        "tokenizers>=0.22,<=0.23.0" requests urllib3 idna charset-normalizer certifi
    BERTKIT_TRANSFORMERS4=/tmp/tf4 .venv/bin/python -m pytest tests/parity/test_pipeline_parameters.py

Tests that need it skip, naming this, when neither is there.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

CHILD = r"""
import json, sys, warnings
warnings.simplefilter("ignore")
import torch
torch.set_num_threads(1)
from transformers import BertForQuestionAnswering, BertTokenizerFast, QuestionAnsweringPipeline
import transformers
job = json.load(sys.stdin)
model = BertForQuestionAnswering.from_pretrained(job["dir"]).eval()
tok = BertTokenizerFast.from_pretrained(job["dir"], do_lower_case=job["lowercase"])
qa = QuestionAnsweringPipeline(model=model, tokenizer=tok, device=-1)
out = [[qa(question=x["question"], context=x["context"], **kwargs) for x in items] for items, kwargs in job["runs"]]
json.dump({"version": transformers.__version__, "answers": out}, sys.stdout, default=float)
"""


def _env() -> dict[str, str] | None:
    """The child's environment, or None when no transformers with the QA pipeline can be found."""
    env = dict(os.environ)
    extra = os.environ.get("BERTKIT_TRANSFORMERS4")
    if extra:
        env["PYTHONPATH"] = os.pathsep.join([extra] + [p for p in [env.get("PYTHONPATH")] if p])
        return env
    try:
        from transformers import QuestionAnsweringPipeline  # noqa: F401
    except ImportError:
        return None
    return env


def hf_qa_answers(directory: Path, runs: list[tuple[list[dict], dict]], lowercase: bool) -> list[list]:
    """For each run (items, pipeline keyword arguments), transformers' pipeline answers (a dict, or a list with
    top_k > 1) for each {question, context} of its items. One child process for all runs."""
    env = _env()
    if env is None:
        pytest.skip(
            "the reference is transformers 4.x's QuestionAnsweringPipeline (removed in 5): set "
            "BERTKIT_TRANSFORMERS4 to a directory holding transformers 4.x (see tests/hf_qa.py)"
        )
    job = {"dir": str(directory), "lowercase": lowercase, "runs": runs}
    done = subprocess.run(
        [sys.executable, "-c", CHILD],
        input=json.dumps(job),
        capture_output=True,
        text=True,
        check=False,
        env=env,
        timeout=1800,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout)
    assert result["version"].startswith("4."), result["version"]
    return result["answers"]
