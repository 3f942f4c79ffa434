"""Extractive question answering over a fine-tuned span head, by transformers' or Google's convention."""

from __future__ import annotations

import math
from collections.abc import Sequence

from bertkit.data.tasks.squad import SquadExample
from bertkit.errors import InputError
from bertkit.pipelines.base import QA_CONVENTIONS, Pipeline, _check_bool, _check_int, _check_text
from bertkit.tasks.squad import HF_MAX_ANSWER_LEN, HF_MAX_QUESTION_LEN, HF_MAX_SEQ_LEN, hf_answers, hf_features


class QuestionAnsweringPipeline(Pipeline):
    """Extractive QA: the best answer spans of a context.

    Two conventions (``convention``; the pipeline's default is set by ``load_pipeline(qa_convention=...)``):

    - ``hf`` (default): transformers' question-answering pipeline, as HF users and the HF inference API expect:
      ``doc_stride`` is the overlap between windows, spans score start x end probability within their window,
      answers are whole words of the context, equal answers of several windows add up (see
      :func:`bertkit.tasks.squad.hf_answers`); defaults 384 tokens, doc_stride min(max_seq_len / 2, 128), 64 question
      tokens, answers of at most 15 tokens;
    - ``google``: ``run_squad.py``'s, as ``bertkit predict`` writes it: ``doc_stride`` is the step between windows,
      a span is scored in the window where its start has the most context, n-best probabilities, the answer text by
      the fine-tuning's ``--answer-text`` (``get_final_text`` by default, which may keep a piece of a word); the
      defaults are the fine-tuning's (``finetune_config.json``).
    """

    kind = "qa"
    convention = "hf"

    def answer(
        self,
        question: str | Sequence[dict],
        context: str | None = None,
        top_k: int = 1,
        handle_impossible_answer: bool = False,
        doc_stride: int | None = None,
        max_answer_len: int | None = None,
        max_seq_len: int | None = None,
        max_question_len: int | None = None,
        align_to_words: bool = True,
        convention: str | None = None,
    ) -> dict | list:
        """``answer(question, context)`` -> ``{"answer", "score", "start", "end"}``; ``answer([{"question",
        "context"}, ...])`` -> a list of them. With ``top_k > 1`` each question gets a list of up to ``top_k``
        answers, best first. ``start``/``end`` are character offsets into the context (``context[start:end] ==
        answer`` wherever the answer is a slice of the context). ``handle_impossible_answer``: the empty answer
        ``""`` (start = end = 0) competes with the spans (a SQuAD 2.0 model). The other parameters are
        transformers' (see the class docstring for both conventions); a bad value raises InputError naming it."""

        convention = self.convention if convention is None else convention
        if convention not in QA_CONVENTIONS:
            raise InputError(f"convention must be one of {', '.join(QA_CONVENTIONS)}, got {convention!r}")
        top_k = _check_int("top_k", top_k, 1)
        handle_impossible_answer = _check_bool("handle_impossible_answer", handle_impossible_answer)
        align_to_words = _check_bool("align_to_words", align_to_words)
        limit = self.config.max_position_embeddings
        if max_seq_len is not None:
            max_seq_len = _check_int("max_seq_len", max_seq_len, 4, limit)
        if max_question_len is not None:
            max_question_len = _check_int("max_question_len", max_question_len, 1)
        if max_answer_len is not None:
            max_answer_len = _check_int("max_answer_len", max_answer_len, 1)
        if doc_stride is not None:
            doc_stride = _check_int("doc_stride", doc_stride, 0 if convention == "hf" else 1)
        if context is not None or isinstance(question, str):
            items, single = [{"question": question, "context": context}], True
        elif isinstance(question, dict):
            items, single = [question], True
        elif isinstance(question, list):
            items, single = question, False
        else:
            raise InputError(
                f"give a question and a context, or a list of {{question, context}} objects, got "
                f"{type(question).__name__}"
            )
        if not items:
            raise InputError("inputs is empty: give at least one {question, context}")
        examples = []
        for i, item in enumerate(items):
            if not isinstance(item, dict) or not {"question", "context"} <= set(item):
                raise InputError(f"inputs[{i}] must be an object with 'question' and 'context'")
            q = _check_text(item["question"], f"inputs[{i}].question")
            c = _check_text(item["context"], f"inputs[{i}].context")
            if not q.strip() or not c.strip():
                raise InputError(f"inputs[{i}]: question and context must not be empty")
            examples.append(SquadExample(qas_id=str(i), question=q, context=c))
        if convention == "hf":
            results = self._answer_hf(
                examples,
                top_k,
                handle_impossible_answer,
                doc_stride,
                max_answer_len,
                max_seq_len,
                max_question_len,
                align_to_words,
            )
        else:
            results = self._answer_google(
                examples,
                top_k,
                handle_impossible_answer,
                doc_stride,
                max_answer_len,
                max_seq_len,
                max_question_len,
                align_to_words,
            )
        results = [r[0] if top_k == 1 else r for r in results]
        return results[0] if single else results

    __call__ = answer

    def _answer_hf(
        self,
        examples,
        top_k,
        handle_impossible_answer,
        doc_stride,
        max_answer_len,
        max_seq_len,
        max_question_len,
        align_to_words,
    ) -> list[list[dict]]:
        max_seq_len = max_seq_len or min(HF_MAX_SEQ_LEN, self.config.max_position_embeddings)
        features = hf_features(
            examples, self.tokenizer, max_seq_len, doc_stride, max_question_len or HF_MAX_QUESTION_LEN
        )
        logits: list = [None] * len(features)
        for idx, out in self._run(features):
            start, end = out.start_logits.float().cpu().numpy(), out.end_logits.float().cpu().numpy()
            for row, i in enumerate(idx):
                n = len(features[i]["input_ids"])
                logits[i] = (start[row, :n], end[row, :n])
        answers = hf_answers(
            examples,
            features,
            logits,
            top_k,
            handle_impossible_answer,
            max_answer_len or HF_MAX_ANSWER_LEN,
            align_to_words,
        )
        if top_k == 1:  # a context without a span still answers (the empty answer, as Google's convention)
            answers = [a or [{"score": 0.0, "start": 0, "end": 0, "answer": ""}] for a in answers]
        return [
            [{"answer": a["answer"], "score": a["score"], "start": a["start"], "end": a["end"]} for a in x]
            for x in answers
        ]

    def _answer_google(
        self,
        examples,
        top_k,
        handle_impossible_answer,
        doc_stride,
        max_answer_len,
        max_seq_len,
        max_question_len,
        align_to_words,
    ) -> list[list[dict]]:
        import copy

        task = self.task
        overrides = {
            "doc_stride": doc_stride,
            "max_answer_length": max_answer_len,
            "max_seq_length": max_seq_len,
            "max_query_length": max_question_len,
        }
        overrides = {k: v for k, v in overrides.items() if v is not None}
        if handle_impossible_answer and task.version != "2.0":
            overrides["version"] = "2.0"
        if not align_to_words and task.answer_text == "words":
            overrides["answer_text"] = "chars"
        if overrides:
            task = copy.copy(task)
            for k, v in overrides.items():
                setattr(task, k, v)
            if task.max_seq_length - task.max_query_length - 3 < 1:
                raise InputError(
                    f"max_seq_len ({task.max_seq_length}) leaves no room for context after a "
                    f"{task.max_query_length}-token question"
                )
            task._words = None
        features = task.featurize(examples, self.tokenizer)
        preds = task.predict(self.model, examples, features, self.batch_size, self.precision, self.device)
        results = []
        for e, p in zip(examples, preds):
            ranked = [p["text"]] + [n["text"] for n in p["nbest"] if n["text"] != p["text"]]
            answers = []
            for text in ranked[:top_k]:
                best = next((n for n in p["nbest"] if n["text"] == text), None) or {}
                score = best.get("probability", 0.0)
                start, end = int(best.get("start", 0)), int(best.get("end", 0))
                if text and e.context[start:end] != text:
                    # Google's answer text (the default) may differ from the pieces' span (e.g. "Smith's" ->
                    # "Smith"): point at that text where it is, near the span
                    found = e.context.find(text, max(0, start - len(text)))
                    if found >= 0 and found <= end:
                        start, end = found, found + len(text)
                answers.append(
                    {"answer": text, "score": float(0.0 if math.isnan(score) else score), "start": start, "end": end}
                )
            results.append(answers)
        return results
