"""The fast sentence splitter against pysbd (the reference it follows) on shipped text, and its bounds."""

from __future__ import annotations

import gzip
from importlib import resources

import pytest

from bertkit.data.pretraining.corpus import paragraphs, strip_gutenberg
from bertkit.data.pretraining.splitter import boundary_agreement, sentence_boundaries, split_paragraph, split_paragraphs

pysbd = pytest.importorskip("pysbd")  # a run-time dependency of bertkit: always there


def _pysbd(texts: list[str]) -> list[list[str]]:
    seg = pysbd.Segmenter(language="en", clean=False)
    return [seg.segment(t) for t in texts]


def test_agrees_with_pysbd_on_a_bundled_book():
    """The first 300 paragraphs of the bundled Alice: at least 98% of pysbd's boundaries, and 98% of ours are
    pysbd's."""
    book = resources.files("bertkit") / "resources" / "corpus" / "alice_in_wonderland.txt.gz"
    lines = gzip.decompress(book.read_bytes()).decode("utf-8").splitlines()
    paras = [p for p in paragraphs(strip_gutenberg(lines)) if len(p) <= 4000][:300]
    assert len(paras) == 300
    recall, precision = boundary_agreement(_pysbd(paras), [split_paragraph(p) for p in paras])
    assert recall >= 0.98 and precision >= 0.98, (recall, precision)


@pytest.mark.parametrize(
    "text",
    [
        "He went home. and then he slept.",
        '"Hello!" said he. "Yes?" she asked. "No!" He left.',
        "Mr. Darcy came. Mrs. Bennet sat. St. Paul is big. Dr. Watson agreed.",
        "Wait... What? Oh!! No.",
        "He saw J. Smith there. And A. B. Cole.",
        '(He left.) She came. "I know." "You do?"',
        "It was 3 p.m. and he came. He sat.",
        '"Good!" (He nodded.) "Go."',
        'at the--" He dropped it.',
        "'What for?' said Alice. 'Because!' I cried.",
        "Ah! it was so. Oh! I see. Why? because.",
        "See p. 5 and no. 7. Done. e.g. this, i.e. that. Fine.",
        "Coffin?--Spouter?--Rather ominous. Yes.",
    ],
)
def test_rules_match_pysbd(text):
    (reference,) = _pysbd([text])
    assert sentence_boundaries(split_paragraph(text)) == sentence_boundaries(reference), (
        split_paragraph(text),
        reference,
    )


def test_sentences_keep_every_character_and_drop_no_text():
    text = 'It was "odd!" he said.  Then--quiet. (A note.) The end... Or not? Yes!'
    sentences = split_paragraph(text)
    assert len(sentences) >= 4 and "".join(sentences).replace(" ", "") == text.replace(" ", "")
    assert split_paragraph("   ") == [] and split_paragraph("No end here") == ["No end here"]


@pytest.mark.timeout(60)
def test_hostile_text_is_split_in_linear_time():
    """Runs of punctuation, unmatched quotes and a paragraph of 1 MB: no regular expression backtracks for ever
    (each would take hours if it were quadratic)."""
    texts = ["." * 300_000, "'" + "a " * 200_000, '"' * 100_000 + " x. Y.", ("Word. " * 200_000)]
    for text in texts:
        sentences = split_paragraphs([text])
        assert "".join(sentences).replace(" ", "") == text.replace(" ", "")
    assert len(split_paragraphs([texts[-1]])) == 200_000


def test_pysbd_stays_an_option():
    assert split_paragraphs(["Mr. Smith came. He sat."], "pysbd") == ["Mr. Smith came.", "He sat."]
    with pytest.raises(ValueError, match="splitter must be one of"):
        split_paragraphs(["x."], "nltk")
