"""Shared test fixtures.

Tiers:
- default (tests/unit, tests/parity, tests/integration): only small fixtures the project ships.
- shared (tests/data and anything marked ``shared``): needs ``../shared/data``; skipped when it is absent.
"""

from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SHARED_DATA = ROOT.parent / "shared" / "data"
FIXTURES = Path(__file__).resolve().parent / "fixtures"


def pytest_collection_modifyitems(config, items):
    if SHARED_DATA.is_dir():
        return
    skip = pytest.mark.skip(reason=f"real data tier: {SHARED_DATA} is absent")
    for item in items:
        if "shared" in item.keywords or "/tests/data/" in str(item.fspath).replace("\\", "/"):
            item.add_marker(skip)


@pytest.fixture(scope="session")
def shared_data() -> Path:
    if not SHARED_DATA.is_dir():
        pytest.skip(f"{SHARED_DATA} is absent")
    return SHARED_DATA


@pytest.fixture(scope="session")
def fixtures_dir() -> Path:
    return FIXTURES


@pytest.fixture(scope="session")
def ft() -> Path:
    """tests/fixtures/finetune: small files in every fine-tuning task's format, and their vocab.txt."""
    return FIXTURES / "finetune"


@pytest.fixture(scope="session")
def vocab_file() -> Path:
    """tests/fixtures/tokenizer/vocab.txt: the tokenizer tests' shipped vocabulary."""
    return FIXTURES / "tokenizer" / "vocab.txt"


@pytest.fixture(scope="session")
def tf_dir() -> Path:
    """tests/fixtures/tf_checkpoint: a tiny Google TensorFlow checkpoint and its oracles (see its make_fixture.py)."""
    return FIXTURES / "tf_checkpoint"


@pytest.fixture
def tiny_config():
    """The BertModelTester config: batch 13, seq 7, vocab 99, hidden 32, 2 layers, 4 heads."""
    from bertkit import BertConfig

    return BertConfig(
        vocab_size=99,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=37,
        max_position_embeddings=512,
        type_vocab_size=2,
    )


ARCHS = ("bert", "modernbert")


@pytest.fixture(scope="session")
def finetune_base_of(tmp_path_factory):
    """``finetune_base_of(arch)``: the fine-tuning tests' tiny random base model of ``arch`` ("bert": 2 layers,
    tinymodels.finetune_base; "modernbert": 3 layers, two of them sliding-window, tinymodernbert) on
    tests/fixtures/finetune's vocabulary, built once per session."""
    made: dict[str, Path] = {}

    def get(arch: str) -> Path:
        if arch not in made:
            from tinymodels import finetune_base
            from tinymodernbert import fixture_vocab, make_modernbert_dir

            d = tmp_path_factory.mktemp(f"{arch}-base")
            made[arch] = finetune_base(d) if arch == "bert" else make_modernbert_dir(d, fixture_vocab(FIXTURES))
        return made[arch]

    return get


@pytest.fixture(scope="session")
def sst2_tuned_of(finetune_base_of, tmp_path_factory):
    """``sst2_tuned_of(arch)``: ``finetune_base_of(arch)`` fine-tuned on the SST-2 fixture for a few steps
    (tinymodels.finetune_quickly, on the CPU), built once per session; tests must not write into it."""
    made: dict[str, Path] = {}

    def get(arch: str) -> Path:
        if arch not in made:
            from tinymodels import finetune_quickly

            out = tmp_path_factory.mktemp(f"{arch}-sst2")
            train = FIXTURES / "finetune" / "sst2_train.tsv"
            made[arch] = finetune_quickly("sst2", train, None, finetune_base_of(arch), out, "--device", "cpu")
        return made[arch]

    return get


@pytest.fixture(scope="session")
def tiny_dir(finetune_base_of) -> Path:
    """The fine-tuning tests' tiny random BERT, ``finetune_base_of("bert")`` (read only)."""
    return finetune_base_of("bert")


@pytest.fixture(scope="session")
def random_ner_dir(tmp_path_factory) -> Path:
    """tinymodels.random_ner_head: a random BERT token classifier over IOB labels (read only)."""
    from tinymodels import random_ner_head

    return random_ner_head(tmp_path_factory.mktemp("ner"))


@pytest.fixture(scope="session")
def wide_dir(tmp_path_factory) -> Path:
    """tinymodels.finetune_base at ``WIDE`` (hidden 64): the int8 and ONNX export tests' tiny BERT (read only)."""
    from tinymodels import WIDE, finetune_base

    return finetune_base(tmp_path_factory.mktemp("wide"), **WIDE)


@pytest.fixture(scope="session")
def alice_corpus(tmp_path_factory) -> tuple[Path, Path]:
    """(the first ~40 KB of the bundled Alice, a 600-token vocab.txt trained on it): the pre-training runs' corpus."""
    import gzip

    from bertkit.commands.quickstart import bundled_corpus
    from bertkit.tokenization import train_vocab

    d = tmp_path_factory.mktemp("alice-corpus")
    alice = next(p for p in bundled_corpus() if "alice" in p.name)
    path = d / "alice.txt"
    path.write_text(gzip.decompress(alice.read_bytes()).decode("utf-8")[:40_000], encoding="utf-8")
    train_vocab([path], vocab_size=600, output=d / "vocab", show_progress=False)
    return path, d / "vocab" / "vocab.txt"
