"""Readers and writers for Router-R1 and GMTRouter record files (JSONL, JSON list, parquet).

A bad record is never dropped silently: ``strict=True`` rejects the whole file at the first problem
(``DataFileError`` names file, line or record index, and field); ``strict=False`` keeps the good
records and returns every bad one with its position in ``ReadResult.errors``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Generic, Iterator, TypeVar

from rlrouter.data.formats import FORMATS, RecordError

T = TypeVar("T")


class DataFileError(ValueError):
    """A data file could not be read. ``location`` is ``file:line`` (JSONL) or ``file:record N``."""

    def __init__(self, path: str | Path, location: str, field_path: str | None, message: str):
        self.path = str(path)
        self.location = location
        self.field = field_path
        self.message = message
        where = f"{self.path}:{location}"
        what = f"field '{field_path}': {message}" if field_path else message
        super().__init__(f"{where}: {what}")


@dataclass
class ReadResult(Generic[T]):
    records: list[T]
    errors: list[DataFileError] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.errors


def _raw_rows(path: Path) -> Iterator[tuple[str, Any]]:
    """Yield (location, raw object) pairs; a line that is not JSON yields a DataFileError instead."""
    suffix = path.suffix.lower()
    if suffix == ".parquet":
        import pyarrow.parquet as pq

        for i, row in enumerate(pq.read_table(path).to_pylist()):
            yield f"record {i}", row
        return
    text = path.read_text(encoding="utf-8")
    if suffix == ".json" or text.lstrip().startswith("["):
        try:
            data = json.loads(text)
        except json.JSONDecodeError as e:
            yield f"{e.lineno}", DataFileError(path, f"{e.lineno}", None, f"invalid JSON: {e.msg}")
            return
        if not isinstance(data, list):
            yield "1", DataFileError(path, "1", None, "expected a JSON list of records")
            return
        for i, row in enumerate(data):
            yield f"record {i}", row
        return
    for lineno, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            yield f"{lineno}", json.loads(line)
        except json.JSONDecodeError as e:
            yield f"{lineno}", DataFileError(path, f"{lineno}", None, f"invalid JSON: {e.msg}")


def read_records(path: str | Path, fmt: str, strict: bool = True) -> ReadResult:
    """Read a file of ``fmt`` records ("router_r1" or "gmtrouter")."""
    if fmt not in FORMATS:
        raise ValueError(f"format: unknown '{fmt}', expected one of {sorted(FORMATS)}")
    cls = FORMATS[fmt]
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"{path}: no such data file")
    result: ReadResult = ReadResult(records=[])
    for loc, raw in _raw_rows(path):
        if isinstance(raw, DataFileError):
            err = raw
        else:
            try:
                result.records.append(cls.from_dict(raw))
                continue
            except RecordError as e:
                err = DataFileError(path, loc, e.field, e.message)
        if strict:
            raise err
        result.errors.append(err)
    return result


def write_records(path: str | Path, records: list[Any]) -> Path:
    """Write records as JSONL (or parquet by suffix); atomic: a crash never leaves half a file."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    rows = [r.to_dict() for r in records]
    if path.suffix.lower() == ".parquet":
        import pyarrow as pa
        import pyarrow.parquet as pq

        pq.write_table(pa.Table.from_pylist(rows), tmp)
    else:
        with tmp.open("w", encoding="utf-8") as f:
            for row in rows:
                f.write(json.dumps(row, ensure_ascii=False) + "\n")
    tmp.replace(path)
    return path
