"""SQuAD v1.1 / v2.0 JSON reader.

Each question becomes a ``SquadExample`` holding its context, its gold answers (text + character offset) and,
for v2.0, ``is_impossible``. An answer whose text does not occur at its ``answer_start`` is an error naming the
file, the line of the question id in the file (or the article / paragraph / question) and the id.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field

from bertkit.data.tasks.readers import DataError, Examples, RowGuard, check_file, read_text


@dataclass
class SquadExample:
    qas_id: str
    question: str
    context: str
    answers: list[tuple[str, int]] = field(default_factory=list)  # (text, char start); train uses the first
    is_impossible: bool = False
    title: str = ""
    article: int = 0

    @property
    def answer_texts(self) -> list[str]:
        return [a for a, _ in self.answers]


def _line_of(raw: str, qid: str) -> int | str:
    """The 1-based line of a question id in the raw JSON text (SQuAD files are often one line: then 'id ...')."""
    i = raw.find(json.dumps(qid))
    if i < 0:
        return f"question {qid!r}"
    line = raw.count("\n", 0, i) + 1
    return line if raw.count("\n") > 0 else f"question {qid!r}"


def read_squad(
    path: str | os.PathLike, skip_bad_rows: bool = False, require_answers: bool = True
) -> tuple[Examples, str]:
    """Read a SQuAD JSON file. Returns (examples, version) with version ``"1.1"`` or ``"2.0"``.

    ``require_answers`` (training / evaluation) makes an answerable question without answers an error.
    The version comes from the file's ``version`` field, or ``2.0`` when any question has ``is_impossible``.
    """
    path = check_file(path)
    raw = read_text(path)
    try:
        data = json.loads(raw)
    except json.JSONDecodeError as e:
        raise DataError(path, e.lineno, f"not valid JSON ({e.msg})") from None
    except RecursionError:  # e.g. '[' x 100,000: the parser recurses once per level
        raise DataError(path, None, "JSON nested too deeply to read (a SQuAD file is 6 levels deep)") from None
    if not isinstance(data, dict) or not isinstance(data.get("data"), list):
        raise DataError(path, None, 'expected a SQuAD object {"version": ..., "data": [articles]}')
    guard = RowGuard(path, skip_bad_rows)
    out = Examples(path=path)
    any_impossible = False
    seen: dict[str, str] = {}  # question id -> where it was first read
    for a, article in enumerate(data["data"]):
        paragraphs = article.get("paragraphs") if isinstance(article, dict) else None
        if not isinstance(paragraphs, list):
            guard.bad(f"article {a}", "no 'paragraphs' list")
            continue
        for p, para in enumerate(paragraphs):
            if (
                not isinstance(para, dict)
                or not isinstance(para.get("context"), str)
                or not isinstance(para.get("qas"), list)
            ):
                guard.bad(f"article {a} paragraph {p}", "a paragraph needs a 'context' string and a 'qas' list")
                continue
            context = para["context"]
            for q, qa in enumerate(para["qas"]):
                where = f"article {a} paragraph {p} question {q}"
                if not isinstance(qa, dict) or "id" not in qa or not isinstance(qa.get("question"), str):
                    guard.bad(where, "a question needs an 'id' and a 'question' string")
                    continue
                qid = str(qa["id"])
                if not qa["question"].strip() or qid in seen:  # predictions and metrics are keyed by the id
                    why = f"id {qid} repeats {seen[qid]}'s" if qid in seen else "the question is empty"
                    guard.bad(_line_of(raw, qid), f"{where} (id {qid}): {why}")
                    continue
                seen[qid] = where
                impossible = bool(qa.get("is_impossible", False))
                any_impossible |= impossible
                answers = []
                bad = None
                for ans in qa.get("answers", []) or []:
                    try:
                        text, start = str(ans["text"]), int(ans["answer_start"])
                    except (KeyError, TypeError, ValueError):
                        bad = "an answer needs 'text' and an integer 'answer_start'"
                        break
                    if not text.strip() or start < 0:  # an empty span, or one counted from the end (a slice would)
                        bad = f"answer {text!r} at offset {start}: " + ("empty" if start >= 0 else "a negative offset")
                        break
                    if context[start : start + len(text)] != text:
                        found = context[start : start + len(text)]
                        bad = f"answer {text!r} does not occur at offset {start} of the context (found {found!r})"
                        break
                    answers.append((text, start))
                if bad is None and require_answers and not impossible and not answers:
                    bad = "an answerable question has no answers"
                if bad is not None:
                    line = _line_of(raw, qid)
                    guard.bad(line, f"{where} (id {qid}): {bad}")
                    continue
                out.append(
                    SquadExample(qid, qa["question"], context, answers, impossible, str(article.get("title", "")), a)
                )
    guard.report(len(out))
    out.skipped = guard.skipped
    version = str(data.get("version", ""))
    version = "2.0" if any_impossible or version.startswith(("v2", "2")) else "1.1"
    return out, version
