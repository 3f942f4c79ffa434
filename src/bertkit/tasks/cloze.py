"""A cloze probe: fill-mask sentences that a model which has read the bundled books should complete.

Each item is a sentence with one ``[MASK]`` and the words that fit it: a name after its title or first name
(``sherlock [MASK]`` -> holmes), or a frequent collocation (``a great [MASK] of`` -> deal). An item is scored only
when every accepted answer it needs is one token of the model's vocabulary (WordPiece may split a rare name); the
score is the share of scorable items whose top-1 (and top-5) guess is an accepted answer. No item is in the held-out
text by construction: the phrases are common in the books, which is what the probe asks the model to have learnt.

``bertkit quickstart`` prints the score; ``bertkit.tasks.cloze.cloze_probe(encoder)`` runs it on any model with an
MLM head.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

# (sentence, accepted answers): names from the five bundled books, then collocations of 19th-century prose
CLOZE_ITEMS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ('" i think so , " said sherlock [MASK] .', ("holmes",)),
    ('" you are right , my dear [MASK] , " said holmes .', ("watson",)),
    ("the ball was given by mr . [MASK] at netherfield .", ("bingley",)),
    ("elizabeth bennet did not like mr . [MASK] at first .", ("darcy",)),
    ("she was the daughter of mrs . [MASK] , and sister to jane .", ("bennet",)),
    ("lady [MASK] de bourgh was a proud woman .", ("catherine",)),
    ("the portrait of dorian [MASK] grew old .", ("gray",)),
    ("lord [MASK] wotton smiled at dorian .", ("henry",)),
    ('" off with her head ! " shouted the [MASK] .', ("queen",)),
    ("the mock [MASK] sighed deeply .", ("turtle",)),
    ("the march [MASK] and the hatter were having tea .", ("hare",)),
    ("the cheshire [MASK] grinned at alice .", ("cat",)),
    ("shere [MASK] the tiger hunted in the jungle .", ("khan",)),
    ("baloo the [MASK] taught mowgli the law of the jungle .", ("bear",)),
    ("bagheera the black [MASK] spoke softly .", ("panther",)),
    ("there was a great [MASK] of noise in the street .", ("deal",)),
    ("he shook his [MASK] and said nothing .", ("head",)),
    ("on the other [MASK] , she was very young .", ("hand",)),
    ("it was the first [MASK] that she had seen him .", ("time",)),
    ('" i beg your [MASK] , " said alice .', ("pardon",)),
    ("she burst into [MASK] and ran from the room .", ("tears",)),
    ("he walked out of the [MASK] and shut the door .", ("room", "house")),
    ("at the same [MASK] he heard a noise .", ("time", "moment")),
    ("i do not [MASK] what you mean .", ("know", "understand", "see")),
    ("good [MASK] , mr . holmes .", ("morning", "evening", "night", "day", "afternoon")),
    ("she could not help [MASK] at him .", ("laughing", "smiling", "looking")),
    ("he put his hand into his [MASK] and took out a letter .", ("pocket",)),
    ("it was a dark and stormy [MASK] .", ("night",)),
    ("they sat down to [MASK] at six o ' clock .", ("dinner", "tea", "supper", "breakfast")),
    ("for a [MASK] she did not answer .", ("moment", "minute", "while", "time")),
)


@dataclass
class ClozeScore:
    """``top1``/``top5``: items whose best (any of the 5 best) guess is accepted; ``scored`` of ``total`` items were
    scorable with this vocabulary; ``answers``: each scored item's (sentence, top guesses, hit)."""

    top1: int
    top5: int
    scored: int
    total: int
    answers: list[tuple[str, list[str], bool]] = field(default_factory=list)

    def line(self) -> str:
        return (
            f"cloze probe: {self.top1}/{self.scored} right at the top guess, {self.top5}/{self.scored} in the "
            f"top 5"
            + (
                f" ({self.total - self.scored} items skipped: answers not in the vocabulary)"
                if self.scored < self.total
                else ""
            )
        )


def cloze_probe(encoder, items: Sequence[tuple[str, Sequence[str]]] = CLOZE_ITEMS) -> ClozeScore:
    """Score ``encoder`` (a :class:`bertkit.features.Encoder` with an MLM head) on the cloze items."""
    vocab = encoder.tokenizer.vocab
    usable = [(s, [a for a in answers if a in vocab]) for s, answers in items]
    usable = [(s, answers) for s, answers in usable if answers]
    score = ClozeScore(0, 0, len(usable), len(items))
    if not usable:
        return score
    results = encoder.fill_mask([s for s, _ in usable], top_k=5)
    for (sentence, answers), per_mask in zip(usable, results):
        guesses = [g["token"] for g in per_mask[0]]
        hit = guesses[0] in answers
        score.top1 += hit
        score.top5 += any(g in answers for g in guesses)
        score.answers.append((sentence, guesses, hit))
    return score
