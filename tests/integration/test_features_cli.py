"""bertkit embed / similarity / serve -h, run in-process through bertkit.cli.main."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest
from tinymodels import make_model_dir, one_thread  # noqa: F401  (one_thread: autouse fixture)

from bertkit import Encoder
from bertkit.cli import main

WORDS = "the a cat dog sat on mat bank river money went to i we , . ! ? big small red blue runs ran hello world".split()
VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + WORDS + ["##s", "##ing", "##ed"]
LINES = ["the cat sat on the mat", "hello world", "we went to the river bank ."]


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return make_model_dir(tmp_path_factory.mktemp("cli-model"), VOCAB, layers=4)


@pytest.fixture(scope="module")
def encoder(model_dir):
    return Encoder.from_pretrained(model_dir, precision="fp32")


def test_embed_npy_with_concatenated_layers(tmp_path, model_dir, encoder):
    src = tmp_path / "in.txt"
    src.write_text("\n".join(LINES) + "\n", encoding="utf-8")
    out = tmp_path / "out.npy"
    assert (
        main(
            [
                "embed",
                "--model",
                str(model_dir),
                "--input",
                str(src),
                "--output",
                str(out),
                "--layers",
                "-1,-2,-3,-4",
                "--pooling",
                "mean_max",
                "--precision",
                "fp32",
                "--quiet",
            ]
        )
        == 0
    )
    got = np.load(out)
    assert got.shape == (3, 4 * 32 * 2)
    np.testing.assert_allclose(
        got, encoder.encode(LINES, layers=[-1, -2, -3, -4], pooling="mean_max"), rtol=1e-5, atol=1e-6
    )
    assert [p.name for p in tmp_path.iterdir() if "tmp" in p.name] == []  # atomic write left no temp file


def test_embed_jsonl_pairs_and_per_token(tmp_path, model_dir, encoder):
    src = tmp_path / "in.tsv"
    src.write_text("the cat\tsat on the mat\na dog\tran\n", encoding="utf-8")
    out = tmp_path / "out.jsonl"
    assert (
        main(
            [
                "embed",
                "--model",
                str(model_dir),
                "--input",
                str(src),
                "--output",
                str(out),
                "--pooling",
                "none",
                "--precision",
                "fp32",
                "--quiet",
            ]
        )
        == 0
    )
    rows = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
    assert [r["pair"] for r in rows] == ["sat on the mat", "ran"]
    assert rows[0]["tokens"] == ["[CLS]", "the", "cat", "[SEP]", "sat", "on", "the", "mat", "[SEP]"]
    want = encoder.encode(["the cat", "a dog"], pairs=["sat on the mat", "ran"], pooling="none")
    for r, w in zip(rows, want):
        np.testing.assert_allclose(np.asarray(r["embedding"]), w, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize(
    "content,suffix,message",
    [
        ("a\n\nb\n", ".txt", "line 2: empty text"),
        ('{"text": "a"}\n{"text": 3}\n', ".jsonl", "line 2: expected an object"),
        ('{"text": "a"}\n{oops\n', ".jsonl", "line 2: not valid JSON"),
        ('{"text": "a"}\n[1, 2]\n', ".jsonl", "line 2: expected a JSON object, got list"),
        ("a\tb\nc\n", ".tsv", "line 2: some lines have a pair"),
    ],
)
def test_embed_bad_input_names_the_line(tmp_path, model_dir, capsys, content, suffix, message):
    src = tmp_path / f"in{suffix}"
    src.write_text(content, encoding="utf-8")
    out = tmp_path / "out.npy"
    assert main(["embed", "--model", str(model_dir), "--input", str(src), "--output", str(out), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert str(src) in err and message in err
    assert not out.exists()


def test_embed_refuses_per_token_npy_and_bad_layers(tmp_path, model_dir, capsys):
    src = tmp_path / "in.txt"
    src.write_text("the cat\n", encoding="utf-8")
    assert (
        main(
            [
                "embed",
                "--model",
                str(model_dir),
                "--input",
                str(src),
                "--output",
                str(tmp_path / "o.npy"),
                "--pooling",
                "none",
            ]
        )
        == 2
    )
    assert ".jsonl" in capsys.readouterr().err
    assert (
        main(
            [
                "embed",
                "--model",
                str(model_dir),
                "--input",
                str(src),
                "--output",
                str(tmp_path / "o.npy"),
                "--layers",
                "-9",
            ]
        )
        == 2
    )
    assert "out of range" in capsys.readouterr().err


def test_similarity_texts_and_word(model_dir, encoder, capsys):
    assert main(["similarity", "--model", str(model_dir), "--layers", "-1", *LINES[:2]]) == 0
    out = capsys.readouterr().out
    v = encoder.encode(LINES[:2], layers=-1)
    d = 1 - float(v[0] @ v[1] / np.linalg.norm(v[0]) / np.linalg.norm(v[1]))
    assert f"{d:9.4f}" in out
    sentences = ["we went to the river bank", "the bank of money", "i ran to the bank ."]
    assert main(["similarity", "--model", str(model_dir), "--word", "bank", *sentences]) == 0
    out = capsys.readouterr().out
    vecs, tokens = encoder.encode(sentences, pooling="none", show_tokens=True)
    bank = [v[t.index("bank")] for v, t in zip(vecs, tokens)]
    d01 = 1 - float(bank[0] @ bank[1] / np.linalg.norm(bank[0]) / np.linalg.norm(bank[1]))
    assert d01 > 1e-3 and f"{d01:9.4f}" in out  # the same word, different contexts, different vectors
    assert main(["similarity", "--model", str(model_dir), "--word", "bank", "a cat", "the bank"]) == 2
    assert "text 1" in capsys.readouterr().err


def test_fill_mask_command_prints_the_encoders_predictions(model_dir, encoder, capsys):
    texts = ["the [MASK] sat on the [MASK]", "a [MASK] dog"]
    assert main(["fill-mask", "--model", str(model_dir), "--top-k", "3", "--json", *texts]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    want = encoder.fill_mask(texts, top_k=3)
    assert [r["text"] for r in rows] == texts
    for row, per_text in zip(rows, want):
        assert [[p["token"] for p in m] for m in row["predictions"]] == [[p["token"] for p in m] for m in per_text]
        assert [[p["probability"] for p in m] for m in row["predictions"]] == [
            [round(p["score"], 5) for p in m] for m in per_text
        ]
    assert main(["fill-mask", "--model", str(model_dir), "no mask here"]) == 2
    assert "error: no [MASK] in 'no mask here'" in capsys.readouterr().err
    assert main(["fill-mask", "--model", str(model_dir), "--top-k", "0", "the [MASK]"]) == 2
    assert "--top-k" in capsys.readouterr().err


def test_embed_and_similarity_do_not_import_fastapi(tmp_path, model_dir):
    src = tmp_path / "in.txt"
    src.write_text("the cat\n", encoding="utf-8")
    code = (
        "import sys\nfrom bertkit.cli import main\n"
        f"assert main(['embed', '--model', {str(model_dir)!r}, '--input', {str(src)!r}, '--output', "
        f"{str(tmp_path / 'o.npy')!r}, '--quiet']) == 0\n"
        f"assert main(['similarity', '--model', {str(model_dir)!r}, 'the cat', 'a dog']) == 0\n"
        "print('fastapi' in sys.modules, 'bertkit.serve.app' in sys.modules)"
    )
    r = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.splitlines()[-1] == "False False"


@pytest.mark.parametrize("command", ["embed", "similarity", "fill-mask", "serve"])
def test_help(command, capsys):
    with pytest.raises(SystemExit) as exit_:
        main([command, "-h"])
    assert exit_.value.code == 0 and "--model" in capsys.readouterr().out


def test_embed_quantize_int8_is_close_to_fp32(tmp_path, model_dir):
    src = tmp_path / "in.txt"
    src.write_text("\n".join(LINES) + "\n", encoding="utf-8")
    for mode in ("fp32", "int8"):
        extra = ["--quantize", "int8"] if mode == "int8" else []
        assert (
            main(
                [
                    "embed",
                    "--model",
                    str(model_dir),
                    "--input",
                    str(src),
                    "--output",
                    str(tmp_path / f"{mode}.npy"),
                    "--precision",
                    "fp32",
                    "--quiet",
                    *extra,
                ]
            )
            == 0
        )
    a, b = np.load(tmp_path / "fp32.npy"), np.load(tmp_path / "int8.npy")
    assert not np.array_equal(a, b)
    cos = (a * b).sum(1) / np.linalg.norm(a, axis=1) / np.linalg.norm(b, axis=1)
    assert cos.min() > 0.99
