"""The evaluation set: logged outcomes of every candidate on every prompt, with tokens and price.

An :class:`EvalSet` holds, per prompt and candidate, the logged score (correctness in {0, 1} or a
graded score in [0, 1]) and the USD cost of that call. Three sources feed it through one reader:

* RouteLLM's CSVs (a folder, a CSV or a URL): read by ``rlrouter.data.logged.load_routellm`` (the
  pool's reader), whose ``LoggedDataError`` names file, row, line and column.
* MT-Bench judgements in FastChat's layout (``question.jsonl`` + ``model_judgment/*_single.jsonl``):
  graded scores, the routed model's mean judgement / 10 (RouteLLM's MT-Bench protocol).
* RouterBench-style tables (CSV as RouterBench publishes it, parquet, or a pickle only with
  ``allow_pickle=True``): one row per prompt, a ``prompt`` column, ``eval_name`` (the task), and per
  candidate ``<model>`` (score), optionally ``<model>|model_response`` and ``<model>|total_cost``.
  Routers read the question without the few-shot examples (``question_text``).

Prices per candidate come from config (USD per 1M tokens). Token counts: RouteLLM logs none, so
they are estimated, prompt tokens from the prompt text, completion tokens from the logged response
when there is one, else from a per-task average in config (see docs/evaluation.md). A malformed
file raises :class:`rlrouter.data.io.DataFileError` naming the file, the row (0-based data row) and
the column.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from rlrouter.data.io import DataFileError, read_jsonl
from rlrouter.data.routerbench import (QUESTION_RULES, TableReport,
                                       is_routerbench_table, read_routerbench_table)
from rlrouter.pool.base import Candidate



@dataclass(frozen=True)
class TokenEstimate:
    """How tokens are estimated when the logs hold none.

    ``chars_per_token`` is OpenAI's rule of thumb for English (about 4 characters a token); it is
    applied to the prompt and to any logged response. ``completion_tokens`` gives the average
    completion length per task (the part of ``source`` before '/'), used where no response was
    logged; ``default_completion_tokens`` covers tasks not listed.
    """

    chars_per_token: float = 4.0
    completion_tokens: Mapping[str, float] = field(default_factory=dict)
    default_completion_tokens: float = 256.0

    def __post_init__(self) -> None:
        if not self.chars_per_token > 0:
            raise ValueError(f"tokens.chars_per_token: must be > 0, got {self.chars_per_token}")
        if self.default_completion_tokens < 0:
            raise ValueError("tokens.default_completion_tokens: must be >= 0")
        for k, v in self.completion_tokens.items():
            if v < 0:
                raise ValueError(f"tokens.completion_tokens.{k}: must be >= 0, got {v}")

    def count(self, text: str) -> int:
        return max(1, math.ceil(len(text) / self.chars_per_token))

    def completion(self, source: str, response: str | None) -> int:
        if response:
            return self.count(response)
        task = source.split("/", 1)[0]
        return int(round(self.completion_tokens.get(task, self.default_completion_tokens)))


@dataclass
class EvalSet:
    """Per prompt and candidate: logged score and cost. Shapes: N prompts, M candidates."""

    prompts: list[str]
    candidates: list[Candidate]
    scores: np.ndarray  # (N, M) in [0, 1]
    costs: np.ndarray  # (N, M) USD per call
    sources: list[str]  # (N,) task, e.g. "gsm8k" or "mmlu/anatomy"
    prompt_tokens: np.ndarray  # (N,)
    completion_tokens: np.ndarray  # (N, M)
    ids: list[str] | None = None  # (N,) the table's sample_id, where it has one
    responses: dict[str, list[str | None]] | None = None  # candidate -> (N,) logged reply, where logged

    def __post_init__(self) -> None:
        n, m = len(self.prompts), len(self.candidates)
        if n == 0:
            raise ValueError("eval set: no prompts")
        if m < 2:
            raise ValueError(f"eval set.candidates: routing needs >= 2 candidates, got {m}")
        self.scores = np.asarray(self.scores, dtype=np.float64)
        self.costs = np.asarray(self.costs, dtype=np.float64)
        for name in ("scores", "costs", "completion_tokens"):
            arr = getattr(self, name)
            if arr.shape != (n, m):
                raise ValueError(f"eval set.{name}: expected shape {(n, m)}, got {arr.shape}")
        if np.isnan(self.scores).any() or self.scores.min() < 0 or self.scores.max() > 1:
            raise ValueError("eval set.scores: every score must be a number in [0, 1]")
        if (self.costs < 0).any():
            raise ValueError("eval set.costs: must be >= 0")
        if len(self.sources) != n or len(self.prompt_tokens) != n:
            raise ValueError("eval set.sources / prompt_tokens: one per prompt")
        if self.ids is not None and len(self.ids) != n:
            raise ValueError("eval set.ids: one per prompt")
        for c, r in (self.responses or {}).items():
            if len(r) != n:
                raise ValueError(f"eval set.responses[{c}]: one per prompt, got {len(r)}")
        names = [c.name for c in self.candidates]
        if len(set(names)) != len(names):
            raise ValueError(f"eval set.candidates: duplicate names {names}")

    def __len__(self) -> int:
        return len(self.prompts)

    @property
    def names(self) -> list[str]:
        return [c.name for c in self.candidates]

    @property
    def tasks(self) -> list[str]:
        """Top-level task per prompt ("gsm8k", "mmlu"): the groups the report slices by."""
        return [s.split("/", 1)[0] for s in self.sources]

    def index(self, name: str) -> int:
        try:
            return self.names.index(name)
        except ValueError:
            raise KeyError(f"candidate '{name}' is not one of {self.names}") from None

    def subset(self, rows: Sequence[int] | np.ndarray) -> "EvalSet":
        rows = np.asarray(rows, dtype=np.int64)
        return EvalSet(prompts=[self.prompts[i] for i in rows], candidates=list(self.candidates),
                       scores=self.scores[rows], costs=self.costs[rows],
                       sources=[self.sources[i] for i in rows], prompt_tokens=self.prompt_tokens[rows],
                       completion_tokens=self.completion_tokens[rows],
                       ids=[self.ids[i] for i in rows] if self.ids is not None else None,
                       responses={c: [r[i] for i in rows] for c, r in self.responses.items()}
                       if self.responses else None)

    def aligned(self, names: Sequence[str], where: str = "eval set") -> "EvalSet":
        """The same rows with the candidate columns in the order of ``names``. Readers order candidates
        differently (RouteLLM keeps the CSV's column order, MT-Bench sorts), so two sets of the same
        candidates are compared as sets and aligned by name; other candidates are an error naming both."""
        names = list(names)
        if self.names == names:
            return self
        if sorted(self.names) != sorted(names):
            missing, extra = sorted(set(names) - set(self.names)), sorted(set(self.names) - set(names))
            raise ValueError(f"{where}: candidates {self.names} differ from {names} "
                             f"(missing {missing}, not expected {extra})")
        cols = np.array([self.names.index(n) for n in names])
        return EvalSet(prompts=list(self.prompts), candidates=[self.candidates[j] for j in cols],
                       scores=self.scores[:, cols], costs=self.costs[:, cols], sources=list(self.sources),
                       prompt_tokens=self.prompt_tokens, completion_tokens=self.completion_tokens[:, cols],
                       ids=self.ids, responses=self.responses)

    @staticmethod
    def concat(parts: Sequence["EvalSet"]) -> "EvalSet":
        first = parts[0]
        parts = [first, *(p.aligned(first.names, where=f"eval set part {i}") for i, p in enumerate(parts[1:], 1))]
        return EvalSet(prompts=[x for p in parts for x in p.prompts], candidates=list(first.candidates),
                       scores=np.concatenate([p.scores for p in parts]),
                       costs=np.concatenate([p.costs for p in parts]),
                       sources=[x for p in parts for x in p.sources],
                       prompt_tokens=np.concatenate([p.prompt_tokens for p in parts]),
                       completion_tokens=np.concatenate([p.completion_tokens for p in parts]),
                       ids=[x for p in parts for x in p.ids] if all(p.ids is not None for p in parts) else None,
                       responses={c: [x for p in parts for x in p.responses[c]] for c in first.responses
                                  if all(p.responses and c in p.responses for p in parts)}
                       if all(p.responses for p in parts) else None)


def make_candidates(names: Sequence[str], prices: Mapping[str, Mapping[str, float]]) -> list[Candidate]:
    """Candidates with their configured prices (USD per 1M tokens); a model without a price is an error."""
    out = []
    for name in names:
        if name not in prices:
            raise KeyError(f"eval.prices: no price for candidate '{name}' (known: {sorted(prices)})")
        p = prices[name]
        out.append(Candidate(name=name, price_in=float(p["input"]), price_out=float(p["output"]),
                             backend="replay"))
    return out


def build_eval_set(prompts: list[str], names: list[str], scores: np.ndarray, sources: list[str],
                   responses: Mapping[str, Sequence[str | None]] | None,
                   prices: Mapping[str, Mapping[str, float]], tokens: TokenEstimate,
                   logged_costs: np.ndarray | None = None, ids: Sequence[str] | None = None) -> EvalSet:
    """Price every (prompt, candidate) call; ``logged_costs`` (N, M) wins over the estimate where finite."""
    candidates = make_candidates(names, prices)
    n, m = len(prompts), len(names)
    prompt_tokens = np.array([tokens.count(p) for p in prompts], dtype=np.int64)
    completion = np.zeros((n, m), dtype=np.int64)
    costs = np.zeros((n, m), dtype=np.float64)
    for j, cand in enumerate(candidates):
        resp = responses.get(cand.name) if responses else None
        for i in range(n):
            completion[i, j] = tokens.completion(sources[i], resp[i] if resp is not None else None)
            costs[i, j] = cand.cost(int(prompt_tokens[i]), int(completion[i, j]))
    if logged_costs is not None:
        ok = np.isfinite(logged_costs)
        costs[ok] = logged_costs[ok]
    return EvalSet(prompts=list(prompts), candidates=candidates, scores=np.asarray(scores, dtype=np.float64),
                   costs=costs, sources=list(sources), prompt_tokens=prompt_tokens, completion_tokens=completion,
                   ids=list(ids) if ids is not None else None,
                   responses={c: list(r) for c, r in responses.items() if c in names} if responses else None)


# ---------------------------------------------------------------- RouterBench-style tables


def read_routerbench(path: str | Path, prices: Mapping[str, Mapping[str, float]] | None = None,
                     tokens: TokenEstimate | None = None, allow_pickle: bool = False,
                     candidates: Sequence[str] | None = None, blank_scores: str = "error",
                     repeated_ids: str = "keep", question: str = "last_block",
                     report: list[TableReport] | None = None) -> EvalSet:
    """A RouterBench-style table (``rlrouter.data.routerbench``) as an evaluation set.

    A logged ``<model>|total_cost`` is the call's cost; prices from config (``eval.prices``, USD per 1M
    tokens, times estimated tokens) cover candidates without one. Routers read
    ``question_text(prompt, question)``; tokens are counted on the whole prompt. The table's quirks go to
    ``report`` as a :class:`TableReport`.
    """
    if question not in QUESTION_RULES:
        raise ValueError(f"eval.question: expected one of {QUESTION_RULES}, got '{question}'")
    t = read_routerbench_table(path, candidates, blank_scores=blank_scores, repeated_ids=repeated_ids,
                               allow_pickle=allow_pickle, priced=list(prices or ()))
    if report is not None:
        report.append(t.report)
    # prices matter only where no cost was logged; zero prices keep Candidate valid there
    full_prices = {c: {"input": 0.0, "output": 0.0} for j, c in enumerate(t.candidates) if np.isfinite(t.costs[:, j]).all()}
    full_prices.update(prices or {})
    es = build_eval_set(t.prompts, t.candidates, t.scores, t.sources, t.responses or None, full_prices,
                        tokens or TokenEstimate(), logged_costs=t.costs, ids=t.ids)
    es.prompts = t.questions(question)  # tokens were counted on the whole prompt
    return es


# ---------------------------------------------------------------- MT-Bench (FastChat's format)


def _jsonl(path: Path) -> list[tuple[int, dict[str, Any]]]:
    """(1-based line, record) for every non-blank line of a JSON-lines file (the project's one reader)."""
    return list(read_jsonl(path))


def read_mtbench(path: str | Path, prices: Mapping[str, Mapping[str, float]],
                 tokens: TokenEstimate | None = None) -> EvalSet:
    """MT-Bench judgements in FastChat's layout, graded as RouteLLM does.

    ``path`` is a folder with ``question.jsonl`` (question_id, category, turns) and
    ``model_judgment/*_single.jsonl`` (question_id, model, judge, score, turn; FastChat's single-answer
    grading, scores 1-10, -1 where the judge's verdict could not be parsed, which is skipped). The
    router sees the first turn; a candidate's score on a question is the mean of its judgements (every
    judge and turn) divided by 10. Candidates are the judged models that ``prices`` names; each must be
    judged on every question. ``model_answer/<model>.jsonl``, when present, gives completion lengths.
    """
    root = Path(path)
    tokens = tokens or TokenEstimate()
    qfile = root / "question.jsonl"
    if not qfile.exists():
        raise FileNotFoundError(f"{root}: no question.jsonl (FastChat's MT-Bench layout)")
    prompts: dict[Any, str] = {}
    category: dict[Any, str] = {}
    for n, rec in _jsonl(qfile):
        turns = rec.get("turns")
        if "question_id" not in rec:
            raise DataFileError(qfile, f"line {n}", "question_id", "missing")
        if not isinstance(turns, list) or not turns or not isinstance(turns[0], str) or not turns[0].strip():
            raise DataFileError(qfile, f"line {n}", "turns", "expected a list whose first turn is a non-empty string")
        prompts[rec["question_id"]] = turns[0]
        category[rec["question_id"]] = str(rec.get("category", "unknown"))
    files = sorted((root / "model_judgment").glob("*_single.jsonl"))
    if not files:
        raise FileNotFoundError(f"{root}: no model_judgment/*_single.jsonl judgement files")
    if not prices:
        raise ValueError("eval.prices: MT-Bench judgements hold no prices; price the candidates to route between")
    judged: dict[tuple[Any, str], list[float]] = {}
    for f in files:
        for n, rec in _jsonl(f):
            for key in ("question_id", "model", "score"):
                if key not in rec:
                    raise DataFileError(f, f"line {n}", key, "missing")
            if rec["model"] not in prices:
                continue
            if rec["question_id"] not in prompts:
                raise DataFileError(f, f"line {n}", "question_id", f"{rec['question_id']!r} is not in {qfile.name}")
            try:
                score = float(rec["score"])
            except (TypeError, ValueError):
                raise DataFileError(f, f"line {n}", "score", f"{rec['score']!r} is not a number") from None
            if score == -1:
                continue  # FastChat's marker for a verdict it could not parse
            if not 0.0 <= score <= 10.0 or math.isnan(score):
                raise DataFileError(f, f"line {n}", "score", f"{score} is outside FastChat's 1-10 scale")
            judged.setdefault((rec["question_id"], rec["model"]), []).append(score)
    names = sorted({m for _, m in judged})
    if len(names) < 2:
        raise ValueError(f"{root}: judgements found for {names} among the priced models {sorted(prices)}; need >= 2")
    qids = list(prompts)
    scores = np.zeros((len(qids), len(names)))
    for i, q in enumerate(qids):
        for j, m in enumerate(names):
            if (q, m) not in judged:
                raise DataFileError(root / "model_judgment", f"question_id {q!r}", m, "no valid judgement for this model")
            scores[i, j] = float(np.mean(judged[(q, m)])) / 10.0
    responses: dict[str, list[str | None]] = {}
    for m in names:
        afile = root / "model_answer" / f"{m}.jsonl"
        if afile.exists():
            by_q = {}
            for _, rec in _jsonl(afile):
                turns = ((rec.get("choices") or [{}])[0] or {}).get("turns") or []
                by_q[rec.get("question_id")] = turns[0] if turns and isinstance(turns[0], str) else None
            responses[m] = [by_q.get(q) for q in qids]
    return build_eval_set([prompts[q] for q in qids], names, scores, [f"mt_bench/{category[q]}" for q in qids],
                          responses or None, prices, tokens)


# ---------------------------------------------------------------- RouteLLM CSVs


def read_routellm(path: str | Path, prices: Mapping[str, Mapping[str, float]],
                  tokens: TokenEstimate | None = None) -> EvalSet:
    """RouteLLM's logged outcomes (folder, CSV or URL) priced by config."""
    from rlrouter.data.logged import load_routellm

    logged = load_routellm(str(path))
    return build_eval_set(list(logged.prompts), list(logged.models), np.asarray(logged.scores, dtype=np.float64),
                          list(logged.source), logged.responses, prices, tokens or TokenEstimate())


def read_eval_set(path: str | Path, fmt: str = "auto", prices: Mapping[str, Mapping[str, float]] | None = None,
                  tokens: TokenEstimate | None = None, allow_pickle: bool = False,
                  **table: Any) -> EvalSet:
    """Read logged outcomes: ``fmt`` is "routellm", "routerbench", "mtbench" or "auto" (parquet/pkl, and
    CSVs whose header has RouterBench's ``|model_response`` / ``|total_cost`` columns, are RouterBench
    tables, a folder with ``question.jsonl`` is MT-Bench, anything else RouteLLM CSVs). ``table``: the
    RouterBench reader's options (candidates, blank_scores, repeated_ids, question, report)."""
    s = str(path)
    if fmt == "auto":
        if s.lower().endswith((".pkl", ".pickle")) or is_routerbench_table(s):
            fmt = "routerbench"
        elif (Path(s) / "question.jsonl").exists():
            fmt = "mtbench"
        else:
            fmt = "routellm"
    if fmt == "mtbench":
        return read_mtbench(path, prices or {}, tokens)
    if fmt == "routerbench":
        return read_routerbench(path, prices, tokens, allow_pickle=allow_pickle, **table)
    if fmt == "routellm":
        if not prices:
            raise ValueError("eval.prices: RouteLLM logs hold no prices; configure one per candidate")
        return read_routellm(path, prices, tokens)
    raise ValueError(f"eval.format: unknown '{fmt}', expected auto, routellm, routerbench or mtbench")
