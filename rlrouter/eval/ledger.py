"""The ledger of test readings: one JSONL line per reading of a test set or lockbox, by any job or benchmark.

A figure read on test data is honest only if the test was read once, after every choice. Every reading goes
through :func:`record_reading`. A reading of questions is keyed by the questions read, not by the file they
came through: ``question_ids`` (RouterBench's ``sample_id`` as :func:`rlrouter.data.routerbench.routerbench_id`
spells it, else the data's own id) give the reading's ``test_key`` (a digest of the sorted ids), its
``questions`` count and ``question_digests`` (one short digest per question), so the pool evaluation's
reading of RouterBench's ``*_test`` tables and Router-R1's reading of a held-out parquet built from them
count together. :func:`readings_of` says how often the same questions, or any of them, were read before;
reports and the docs give that count beside each held-out figure. Writers: the pool evaluation
(``eval.ledger``), Router-R1's training job (``eval.ledger``), the two-model evaluation's lockbox reading
(``eval.lockbox.ledger``, keyed by its config's fingerprint), ``benchmarks/bench_routing.py --evaluate`` and
``benchmarks/bench_flywheel.py``.
"""

from __future__ import annotations

import datetime
import hashlib
import json
from pathlib import Path
from typing import Any, Iterable, Sequence

from rlrouter.data.io import read_jsonl


def reading_key(parts: Iterable[Any]) -> str:
    """A short digest naming a test set: of its question ids (order and repeats ignored)."""
    return hashlib.sha256(json.dumps(sorted({str(p) for p in parts})).encode()).hexdigest()[:16]


def question_digests(ids: Iterable[Any]) -> list[str]:
    """One 10-hex digest per distinct question id, sorted: what a reading stores to find overlaps later."""
    return sorted({hashlib.sha256(str(i).encode()).hexdigest()[:10] for i in ids})


def question_fields(ids: Iterable[Any]) -> dict[str, Any]:
    """The fields that key a reading by the questions read: ``test_key``, ``questions``, ``question_digests``."""
    ids = [str(i) for i in ids]
    if not ids:
        raise ValueError("ledger: a reading of no questions")
    return {"test_key": reading_key(ids), "questions": len(set(ids)), "question_digests": question_digests(ids)}


def readings_of(path: str | Path | None, ids: Iterable[Any]) -> dict[str, Any]:
    """How often these questions were read before, by the ledger at ``path``: ``same`` (readings of exactly
    these questions), ``overlapping`` (readings that read any of them, the same included), each a list of
    ``{"date", "command", "shared"}`` (``shared``: how many of these questions it read)."""
    ids = list(ids)
    key, mine = reading_key(ids), set(question_digests(ids))
    same, overlapping = [], []
    for rec in earlier_readings(path):
        digests = set(rec.get("question_digests") or [])
        shared = len(mine & digests) if digests else (len(mine) if rec.get("test_key") == key else 0)
        if not shared:
            continue
        row = {"date": rec.get("date"), "command": rec.get("command"), "shared": shared}
        overlapping.append(row)
        if rec.get("test_key") == key:
            same.append(row)
    return {"test_key": key, "questions": len(mine), "same": same, "overlapping": overlapping}


def earlier_readings(path: str | Path | None, **match: Any) -> list[dict[str, Any]]:
    """The ledger's readings whose fields equal ``match`` (e.g. ``test_key=...``); none without a ledger."""
    if not path or not Path(path).exists():
        return []
    return [rec for _, rec in read_jsonl(Path(path)) if all(rec.get(k) == v for k, v in match.items())]


def read_by(path: str | Path | None, router_types: Iterable[str]) -> set[str]:
    """The question digests (:func:`question_digests`) that any reading of the ledger at ``path`` by one of
    ``router_types`` read: what a lockbox for those routers must leave out."""
    wanted = set(router_types)
    return {d for rec in earlier_readings(path) if wanted & set(rec.get("router_types") or [])
            for d in rec.get("question_digests") or []}


def read_in_run(path: str | Path | None, run: str) -> set[str]:
    """The question digests that the readings of the ledger at ``path`` recorded for run ``run`` read."""
    return {d for rec in earlier_readings(path) if rec.get("run") == run for d in rec.get("question_digests") or []}


def unread(path: str | Path | None, ids: Sequence[Any], router_types: Iterable[str]) -> list[bool]:
    """Per question id of ``ids``: whether no reading of the ledger at ``path`` by one of ``router_types`` read it."""
    seen = read_by(path, router_types)
    return [question_digests([i])[0] not in seen for i in ids]


def record_reading(path: str | Path | None, question_ids: Iterable[Any] | None = None,
                   **fields: Any) -> dict[str, Any] | None:
    """Append one reading (``fields`` plus the UTC date, and with ``question_ids`` the fields that key it by the
    questions read: :func:`question_fields`) to the ledger at ``path``; returns the record without its
    digests, or None without a ledger (a run that names none keeps no record, and says so in its report)."""
    if not path:
        return None
    if question_ids is not None:
        fields = {**fields, **question_fields(question_ids)}
    rec = {"date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"), **fields}
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a", encoding="utf-8") as f:
        f.write(json.dumps(rec, sort_keys=True) + "\n")
    return {k: v for k, v in rec.items() if k != "question_digests"}
