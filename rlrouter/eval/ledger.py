"""The ledger of test readings: one JSONL line per reading of a test set or lockbox, by any job or benchmark.

A figure read on test data is honest only if the test was read once, after every choice. Every reading goes
through :func:`record_reading`, which appends the date, the test set's key (:func:`reading_key`: a digest
of what was read, its files or its question ids), the router types read, the figures and the command;
:func:`earlier_readings` lists what read the same test set before, so a report can say when its figures are a second look and the
docs say "read once" only where the ledger shows one reading. Writers: the pool evaluation
(``eval.ledger``), the two-model evaluation's lockbox reading (``eval.lockbox.ledger``) and
``benchmarks/bench_routing.py --evaluate`` (a trained policy on held-out logged questions).
"""

from __future__ import annotations

import datetime
import hashlib
import json
from pathlib import Path
from typing import Any, Iterable

from rlrouter.data.io import read_jsonl


def reading_key(parts: Iterable[Any]) -> str:
    """A short digest naming a test set: of its files' paths, or of its question ids (order ignored)."""
    return hashlib.sha256(json.dumps(sorted(str(p) for p in parts)).encode()).hexdigest()[:16]


def earlier_readings(path: str | Path | None, **match: Any) -> list[dict[str, Any]]:
    """The ledger's readings whose fields equal ``match`` (e.g. ``test_key=...``); none without a ledger."""
    if not path or not Path(path).exists():
        return []
    return [rec for _, rec in read_jsonl(Path(path)) if all(rec.get(k) == v for k, v in match.items())]


def record_reading(path: str | Path | None, **fields: Any) -> dict[str, Any] | None:
    """Append one reading (``fields`` plus the UTC date) to the ledger at ``path``; returns the record, or None
    without a ledger (a run that names none keeps no record, and says so in its report)."""
    if not path:
        return None
    rec = {"date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"), **fields}
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a", encoding="utf-8") as f:
        f.write(json.dumps(rec, sort_keys=True) + "\n")
    return rec
