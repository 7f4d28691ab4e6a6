"""A user's own Router-R1 data (``data=records``): record files in, the training job's parquet out.

verl-style ``data.train_files`` / ``data.val_files`` (one path or a list; JSON object or list, JSONL,
parquet) hold either

* Router-R1 records (``query``, ``query_type``, ``candidate_models``, ``ground_truth``, ...);
  each record's ``candidate_models`` restricts and prices that question's routes, so every name must
  be one of the pool's candidates (matched as the protocol matches names: ignoring case); or
* QA rows as Router-R1's data scripts write them (``question``, ``golden_answers``): those may route to
  every pool candidate.

Without ``val_files``, ``test_size`` records are held out of the training files, by question, so no
question is in both splits. Every problem names the file, the record and the field.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rlrouter.data.formats import CandidateRef, RecordError, RouterR1Record
from rlrouter.data.io import DataFileError, _raw_rows
from rlrouter.data.question import question_id
from rlrouter.protocol import match_name


@dataclass
class RecordsConfig:
    """``conf/data/records.yaml``."""

    train_files: list[str]
    """The training records: one path or a list (verl's ``data.train_files``)."""
    val_files: list[str] = field(default_factory=list)
    """Validation records (verl's ``data.val_files``); empty: hold ``test_size`` out of the training files."""
    test_size: int = 128
    """Records held out for validation when ``val_files`` is empty."""
    train_size: int | None = None
    """Cap on training records (None: all)."""
    seed: int = 0
    out_dir: str = "data"

    def __post_init__(self) -> None:
        self.train_files = _paths(self.train_files, "data.train_files")
        if not self.train_files:
            raise ValueError("data.train_files: at least one file is required")
        self.val_files = _paths(self.val_files, "data.val_files")
        for f in ("test_size", "seed"):
            v = getattr(self, f)
            if isinstance(v, bool) or not isinstance(v, int) or v < 0:
                raise ValueError(f"data.{f}: must be an int >= 0, got {v!r}")
        if not self.val_files and self.test_size < 1:
            raise ValueError("data.test_size: must be >= 1 when data.val_files is empty (the evaluation split)")
        if self.train_size is not None and (isinstance(self.train_size, bool) or not isinstance(self.train_size, int)
                                            or self.train_size < 1):
            raise ValueError(f"data.train_size: must be an int >= 1 or null, got {self.train_size!r}")


def _paths(value: Any, field_path: str) -> list[str]:
    if value is None or value == "":
        return []
    if isinstance(value, (str, Path)):
        value = [value]
    if not isinstance(value, (list, tuple)) or not all(isinstance(v, (str, Path)) and str(v) for v in value):
        raise ValueError(f"{field_path}: expected a path or a list of paths, got {value!r}")
    return [str(v) for v in value]


def pool_record(raw: dict[str, Any], pool: dict[str, float]) -> RouterR1Record:
    """A Router-R1 record, or a QA row made one with every pool candidate (price = ``price_out``).
    A record's candidates are renamed to the pool's spelling; one the pool lacks is an error."""
    if "query" not in raw and "question" in raw:
        golds = raw.get("golden_answers", raw.get("ground_truth"))
        if isinstance(golds, str):
            golds = [golds]
        if not isinstance(golds, list) or not golds:
            raise RecordError("golden_answers", "expected a non-empty list of answers")
        raw = {"query": raw["question"], "query_type": str(raw.get("query_type") or raw.get("data_source") or "qa"),
               "candidate_models": [{"name": n, "cost": c, "latency": 1.0} for n, c in pool.items()],
               "ground_truth": golds}
    rec = RouterR1Record.from_dict(raw)
    cands = []
    for i, c in enumerate(rec.candidate_models):
        found = match_name(f"{c.name}:", list(pool))
        if found is None:
            raise RecordError(f"candidate_models[{i}].name", f"'{c.name}' is not a candidate of the pool "
                              f"{sorted(pool)}: the rollout could not call it (add it to pool.candidates)")
        cands.append(CandidateRef(name=found[0], cost=c.cost, latency=c.latency))
    optimal = rec.optimal_model
    if optimal:  # from_dict checked it is one of the record's names
        optimal = cands[[c.name for c in rec.candidate_models].index(optimal)].name
    return RouterR1Record(query=rec.query, query_type=rec.query_type, candidate_models=cands,
                          ground_truth=rec.ground_truth, optimal_model=optimal, reasoning=rec.reasoning)


def read_files(paths: list[str], pool: dict[str, float]) -> list[RouterR1Record]:
    """Every record of ``paths``; the first bad one stops with file, record and field."""
    out = []
    for path in paths:
        p = Path(path).expanduser()
        if not p.exists():
            raise FileNotFoundError(f"{p}: no such data file")
        _, rows = _raw_rows(p)
        for loc, raw in rows:
            if isinstance(raw, DataFileError):
                raise raw
            if not isinstance(raw, dict):
                raise DataFileError(p, loc, None, f"expected a record object, got {type(raw).__name__}")
            try:
                out.append(pool_record(raw, pool))
            except RecordError as e:
                raise DataFileError(p, loc, e.field, e.message) from None
    return out


def build_records(cfg: RecordsConfig, pool: dict[str, float]) -> dict[str, Any]:
    """Write ``train.parquet`` and ``test.parquet`` (the layout ``rlrouter.data.build`` writes)."""
    from datasets import Dataset

    rng = random.Random(cfg.seed)
    train = read_files(cfg.train_files, pool)
    if cfg.val_files:
        test = read_files(cfg.val_files, pool)
    else:
        queries = sorted({r.query for r in train})
        rng.shuffle(queries)
        held = set(queries[:cfg.test_size])
        if len(held) >= len(queries):
            raise ValueError(f"data.test_size: {cfg.test_size} would hold out all {len(queries)} questions of "
                             f"data.train_files; lower it or give data.val_files")
        test = [r for r in train if r.query in held]
        train = [r for r in train if r.query not in held]
    rng.shuffle(train)
    if cfg.train_size is not None:
        train = train[:cfg.train_size]
    out = Path(cfg.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    stats: dict[str, Any] = {"source": "records", "train_files": cfg.train_files, "val_files": cfg.val_files}
    for split, recs in (("train", train), ("test", test)):
        rows = [{**r.to_dict(), "id": question_id("records", r.query), "source": "records", "sub_questions": "[]"}
                for r in recs]
        path = out / f"{split}.parquet"
        Dataset.from_list(rows).to_parquet(str(path))
        stats[split] = {"rows": len(rows), "path": str(path)}
    (out / "stats.json").write_text(json.dumps(stats, indent=2))
    return stats
