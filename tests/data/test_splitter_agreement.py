"""The default sentence splitter agrees with pysbd on at least 98% of sentence boundaries on the shared books."""

from __future__ import annotations

import pytest

from bertkit.data.pretraining.corpus import paragraphs, read_lines, strip_gutenberg
from bertkit.data.pretraining.splitter import boundary_agreement, split_paragraph


@pytest.mark.timeout(900)
def test_boundaries_agree_with_pysbd_on_the_gutenberg_books(shared_data):
    """Every sixth paragraph of each of the 12 books (pysbd takes minutes on all of them; every sixth is about
    4,200 paragraphs and 12 s), paragraphs pysbd can take whole (<= 4000 characters): recall and precision of our
    boundaries against pysbd's, per book and in all."""
    import pysbd

    books = shared_data / "corpus" / "gutenberg"
    seg = pysbd.Segmenter(language="en", clean=False)
    reference, ours = [], []
    per_book = {}
    for book in sorted(books.glob("*.txt")):
        paras = [p for p in paragraphs(strip_gutenberg(list(read_lines(book, warn=False))))[::6] if len(p) <= 4000]
        r, o = [seg.segment(p) for p in paras], [split_paragraph(p) for p in paras]
        per_book[book.name] = boundary_agreement(r, o)
        reference += r
        ours += o
    assert len(per_book) == 12 and len(reference) > 4000
    recall, precision = boundary_agreement(reference, ours)
    print(f"recall {recall:.4f} precision {precision:.4f}", per_book)
    assert recall >= 0.98 and precision >= 0.98, (recall, precision)
    assert all(r >= 0.95 and p >= 0.95 for r, p in per_book.values()), per_book
