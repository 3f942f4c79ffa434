"""An ``--objective mntp`` or ``mlm-clm`` model in ``transformers``: the directory its run saves (config.json with
``bertkit_objective: mntp``) loads in ``AutoModelForMaskedLM`` with bertkit's logits at every position (the class
and weights are the masked LM's: only the reading differs, which transformers' fill-mask pipeline does not follow)."""

import json

import pytest
import torch
from tinymodels import FINETUNE_VOCAB, read_vocab, tiny_config
from tinymodernbert import modernbert_config

transformers = pytest.importorskip("transformers")

from bertkit import Encoder  # noqa: E402
from bertkit.config import OBJECTIVE_KEY  # noqa: E402
from bertkit.modeling import BertForPreTraining  # noqa: E402
from bertkit.modeling_modernbert import ModernBertForMaskedLM  # noqa: E402
from bertkit.recipes.pretrain.objectives.mntp import MntpPretraining  # noqa: E402


def test_an_mntp_run_directory_loads_in_transformers_with_the_same_logits(tmp_path):
    vocab = read_vocab(FINETUNE_VOCAB)
    torch.manual_seed(0)
    base = ModernBertForMaskedLM(modernbert_config(vocab, local_attention=8))
    base.config.extra[OBJECTIVE_KEY] = "mntp"
    MntpPretraining(base, causal_ratio=1 / 16).save_pretrained(tmp_path)  # what the run's end writes
    assert json.loads((tmp_path / "config.json").read_text())[OBJECTIVE_KEY] == "mntp"
    theirs = transformers.AutoModelForMaskedLM.from_pretrained(tmp_path, attn_implementation="eager").eval()
    ids = torch.randint(5, len(vocab), (2, 20))
    mask = torch.ones(2, 20, dtype=torch.long)
    mask[1, 15:] = 0
    with torch.no_grad():
        ours = base.eval()(ids, mask).logits
        got = theirs(input_ids=ids, attention_mask=mask).logits
    real = mask.bool()
    torch.testing.assert_close(got[real], ours[real], atol=1e-5, rtol=0)


def test_an_mlm_clm_model_answers_fill_mask_as_transformers_pipeline_does(tmp_path):
    """``--objective mlm-clm`` saves a plain masked LM (no ``bertkit_objective``): transformers' own fill-mask
    pipeline gives bertkit's answers, token for token (the condition for a default objective, issue 62)."""
    vocab = read_vocab(FINETUNE_VOCAB)
    torch.manual_seed(0)
    base = BertForPreTraining(tiny_config(len(vocab), layers=2, max_position_embeddings=64))
    MntpPretraining(base, causal_ratio=1 / 16, reads_next=False).save_pretrained(tmp_path)
    (tmp_path / "vocab.txt").write_text("\n".join(vocab) + "\n", encoding="utf-8")
    assert OBJECTIVE_KEY not in json.loads((tmp_path / "config.json").read_text())
    model = transformers.BertForMaskedLM.from_pretrained(tmp_path).eval()
    pipe = transformers.pipeline(
        "fill-mask", model=model, tokenizer=transformers.BertTokenizer(str(tmp_path / "vocab.txt")), device="cpu"
    )
    ours = Encoder.from_pretrained(tmp_path, precision="fp32")
    for text in ("the movie was [MASK] .", "a [MASK] film"):
        got, want = ours.fill_mask([text], top_k=3)[0][0], pipe(text, top_k=3)
        assert [a["token_id"] for a in got] == [a["token"] for a in want]
        assert [a["score"] for a in got] == pytest.approx([a["score"] for a in want], abs=1e-5)


@pytest.mark.parametrize("arch", ["bert", "modernbert"])
def test_an_mntp_model_answers_fill_mask_in_transformers_pipeline_as_bertkit_does(tmp_path, arch):
    """The saved directory carries transformers' masked LM that reads a [MASK] at j from j - 1
    (``modeling_mntp.py``, ``auto_map``): transformers' own fill-mask pipeline, with ``trust_remote_code``, gives
    bertkit's answers token for token (the condition for ``mntp`` as a default objective, issue 62); the loss it
    computes from labels at j is the shifted read's."""
    vocab = read_vocab(FINETUNE_VOCAB)
    torch.manual_seed(0)
    if arch == "bert":
        base = BertForPreTraining(tiny_config(len(vocab), layers=2, max_position_embeddings=64))
    else:
        base = ModernBertForMaskedLM(modernbert_config(vocab, local_attention=8))
    base.config.extra[OBJECTIVE_KEY] = "mntp"
    MntpPretraining(base, causal_ratio=1 / 16).save_pretrained(tmp_path)
    (tmp_path / "vocab.txt").write_text("\n".join(vocab) + "\n", encoding="utf-8")
    assert (tmp_path / "modeling_mntp.py").is_file()
    model = transformers.AutoModelForMaskedLM.from_pretrained(
        tmp_path, trust_remote_code=True, attn_implementation="eager"
    ).eval()
    assert type(model).__name__ == ("BertMntpForMaskedLM" if arch == "bert" else "ModernBertMntpForMaskedLM")
    pipe = transformers.pipeline(
        "fill-mask", model=model, tokenizer=transformers.BertTokenizer(str(tmp_path / "vocab.txt")), device="cpu"
    )
    ours = Encoder.from_pretrained(tmp_path, precision="fp32")
    plain = transformers.AutoModelForMaskedLM.from_pretrained(tmp_path, attn_implementation="eager").eval()
    unshifted = transformers.pipeline("fill-mask", model=plain, tokenizer=pipe.tokenizer, device="cpu")
    for text in ("the movie was [MASK] .", "a [MASK] film"):
        got, want = ours.fill_mask([text], top_k=3)[0][0], pipe(text, top_k=3)
        assert [a["token_id"] for a in got] == [a["token"] for a in want]
        assert [a["score"] for a in got] == pytest.approx([a["score"] for a in want], abs=1e-5)
        assert [a["token"] for a in unshifted(text, top_k=3)] != [a["token"] for a in want]  # read at j: others
    ids = torch.randint(5, len(vocab), (1, 12))
    labels = torch.full_like(ids, -100)
    labels[0, 5] = 7
    with torch.no_grad():
        out = model(input_ids=ids, labels=labels)
        direct = plain(input_ids=ids).logits[0, 4]
    assert float(out.loss) == pytest.approx(float(torch.nn.functional.cross_entropy(direct[None], labels[0, 5:6])))
