"""An ``--objective mntp`` model in ``transformers``: the directory its run saves (config.json with
``bertkit_objective: mntp``) loads in ``AutoModelForMaskedLM`` with bertkit's logits at every position (the class
and weights are the masked LM's: only the reading differs, which transformers' fill-mask pipeline does not follow)."""

import json

import pytest
import torch
from tinymodels import FINETUNE_VOCAB, read_vocab
from tinymodernbert import modernbert_config

transformers = pytest.importorskip("transformers")

from bertkit.config import OBJECTIVE_KEY  # noqa: E402
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
