"""Build Router-R1 training and test sets: mix sources by weight, split by question, write parquet.

Router-R1 trains on a mix of NQ and HotpotQA; here the offline mix is GSM8K + MMLU (+ FanOutQA for
multi-hop). When a logged-outcome table is given, questions are kept only where every replayed
candidate has a logged outcome, and ``optimal_model`` is the cheapest candidate that was correct.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, Sequence

from rlrouter.data.formats import CandidateRef, RouterR1Record
from rlrouter.data.sources import MMLU_ANSWER_CUE, Question, load_source


class LoggedTable(Protocol):
    """What the builder needs of ``rlrouter.data.logged.LoggedOutcomes``."""

    models: list[str]
    scores: Any  # (N, M)

    def index(self, prompt: str) -> int | None: ...

    def model_index(self, model: str) -> int: ...


def find_row(logged: LoggedTable, query: str) -> int | None:
    """The logged row of a question; MMLU rows carry RouteLLM's trailing answer cue."""
    row = logged.index(query)
    if row is None:
        row = logged.index(query + MMLU_ANSWER_CUE)
    return row


@dataclass
class SourceSpec:
    """One source of the mix. ``weight`` is its share of the questions; 0 leaves it out."""

    name: str
    weight: float = 1.0
    path: str | None = None
    split: str | None = None
    """The dataset split to read (QA sets: ``train`` by default, ``test`` for Router-R1's test sets)."""
    feeds: str = "both"
    """Which built split the source's questions go to: ``both`` (split by question), ``train`` or ``test``
    (a source whose files are already split, e.g. RouterBench's ``*_train`` / ``*_test`` tables)."""

    def __post_init__(self) -> None:
        if not isinstance(self.weight, (int, float)) or self.weight < 0:
            raise ValueError(f"data.sources[{self.name}].weight: must be a number >= 0, got {self.weight!r}")
        if self.feeds not in ("both", "train", "test"):
            raise ValueError(f"data.sources[{self.name}].feeds: 'both', 'train' or 'test', got {self.feeds!r}")


@dataclass
class CandidateSpec:
    """A candidate as the dataset lists it; ``logged_as`` names its column in the logged outcomes."""

    name: str
    price_in: float
    price_out: float
    params_b: float = 0.0
    latency: float = 1.0
    logged_as: str | None = None


@dataclass
class BuildConfig:
    sources: list[SourceSpec]
    candidates: list[CandidateSpec]
    train_size: int = 512
    test_size: int = 128
    seed: int = 0
    out_dir: str = "data"
    require_logged: bool = True
    extra: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.sources or sum(s.weight for s in self.sources) <= 0:
            raise ValueError("data.sources: at least one source needs a weight > 0")
        for f in ("train_size", "test_size"):
            v = getattr(self, f)
            if not isinstance(v, int) or v < 0:
                raise ValueError(f"data.{f}: must be an int >= 0, got {v!r}")


def _allocate(total: int, weights: Sequence[float]) -> list[int]:
    """Split ``total`` into integer counts proportional to ``weights`` (largest remainder)."""
    s = sum(weights)
    if s <= 0:
        return [0] * len(weights)
    raw = [total * w / s for w in weights]
    counts = [int(r) for r in raw]
    order = sorted(range(len(raw)), key=lambda i: raw[i] - counts[i], reverse=True)
    for i in order[: total - sum(counts)]:
        counts[i] += 1
    return counts


def _to_record(q: Question, cands: list[CandidateSpec], logged: LoggedTable | None) -> RouterR1Record:
    optimal = None
    if logged is not None:
        row = find_row(logged, q.query)
        if row is not None:
            correct = [c for c in cands
                       if c.logged_as and logged.scores[row, logged.model_index(c.logged_as)] >= 0.5]
            if correct:
                optimal = min(correct, key=lambda c: (c.price_out, c.price_in)).name
    return RouterR1Record(
        query=q.query, query_type=q.query_type,
        candidate_models=[CandidateRef(c.name, c.price_out, c.latency) for c in cands],
        ground_truth=q.ground_truth, optimal_model=optimal, reasoning=q.reasoning)


def build(cfg: BuildConfig, logged: LoggedTable | None = None) -> dict[str, Any]:
    """Write ``train.parquet`` and ``test.parquet`` under ``cfg.out_dir``; returns the stats."""
    from datasets import Dataset

    rng = random.Random(cfg.seed)
    active = [s for s in cfg.sources if s.weight > 0]
    train_n = _allocate(cfg.train_size, [s.weight if s.feeds != "test" else 0.0 for s in active])
    test_n = _allocate(cfg.test_size, [s.weight if s.feeds != "train" else 0.0 for s in active])
    for split, size, counts in (("train", cfg.train_size, train_n), ("test", cfg.test_size, test_n)):
        if size and not sum(counts):
            raise ValueError(f"data.{split}_size: {size}, but no source with a weight feeds the {split} split "
                             "(data.sources[].feeds)")
    replayed = [c for c in cfg.candidates if c.logged_as]
    rows: dict[str, list[dict]] = {"train": [], "test": []}
    stats: dict[str, Any] = {"sources": {}}
    for spec, n_train, n_test in zip(active, train_n, test_n):
        questions = load_source(spec.name, spec.path, **({"split": spec.split} if spec.split else {}))
        available = len(questions)
        if logged is not None and cfg.require_logged and replayed:
            questions = [q for q in questions if find_row(logged, q.query) is not None]
        # Split by question before sampling: no question is in both train and test.
        questions = sorted(questions, key=lambda q: q.id)
        rng.shuffle(questions)
        if n_train + n_test > len(questions):
            raise ValueError(
                f"data.sources[{spec.name}]: asked for {n_train} train + {n_test} test questions, "
                f"only {len(questions)} usable (of {available}); lower data.train_size/test_size or the weight")
        for split, chunk in (("test", questions[:n_test]), ("train", questions[n_test:n_test + n_train])):
            for q in chunk:
                rec = _to_record(q, cfg.candidates, logged).to_dict()
                rec.update(id=q.id, source=q.source, sub_questions=json.dumps(q.sub_questions))
                rows[split].append(rec)
        stats["sources"][spec.name] = {"available": available, "usable": len(questions),
                                       "train": n_train, "test": n_test}
    out = Path(cfg.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    for split in ("train", "test"):
        rng.shuffle(rows[split])
        path = out / f"{split}.parquet"
        Dataset.from_list(rows[split]).to_parquet(str(path))
        stats[split] = {"rows": len(rows[split]), "path": str(path)}
    (out / "stats.json").write_text(json.dumps(stats, indent=2))
    return stats


def load_router_r1_split(path: str | Path) -> list[dict[str, Any]]:
    """Rows of a built split (parquet), each validated as a Router-R1 record."""
    from datasets import Dataset

    ds = Dataset.from_parquet(str(path))
    rows = ds.to_list()
    for i, r in enumerate(rows):
        base = {k: r[k] for k in ("query", "query_type", "candidate_models", "ground_truth",
                                  "optimal_model", "reasoning") if k in r}
        try:
            RouterR1Record.from_dict(base)
        except ValueError as e:
            raise ValueError(f"{path}:record {i}: {e}") from None
    return rows

