"""Readers and writers for Router-R1 and GMTRouter record files (JSONL, JSON object or list, parquet).

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
    layout: str = ""
    """How the file held its records: one of ``LAYOUTS`` ("JSON" when it did not parse)."""

    @property
    def ok(self) -> bool:
        return not self.errors


LAYOUTS = ("JSON object", "JSON list", "JSONL", "parquet")
"""How a file holds its records; ``ReadResult.layout`` says which one was seen."""


def _json_rows(path: Path, data: Any) -> tuple[str, Iterator[tuple[str, Any]]]:
    if isinstance(data, dict):
        return "JSON object", iter([("record 0", data)])
    if isinstance(data, list):
        return "JSON list", ((f"record {i}", row) for i, row in enumerate(data))
    err = DataFileError(path, "1", None, f"expected a JSON object, a list of objects or JSONL, got "
                                         f"a JSON {type(data).__name__}")
    return "JSON", iter([("1", err)])


def _raw_rows(path: Path) -> tuple[str, Iterator[tuple[str, Any]]]:
    """(layout, rows): rows are (location, raw object) pairs; a line that is not JSON yields a
    DataFileError instead. A ``.json`` file holds one record object or a list of them; any other
    text file is JSONL, or one JSON document when it does not parse line by line (a record pasted
    pretty-printed)."""
    suffix = path.suffix.lower()
    if suffix == ".parquet":
        import pyarrow.parquet as pq

        return "parquet", ((f"record {i}", row) for i, row in enumerate(pq.read_table(path).to_pylist()))
    text = path.read_text(encoding="utf-8")
    stripped = text.lstrip()
    if suffix == ".json" or stripped.startswith("["):
        try:
            return _json_rows(path, json.loads(text))
        except json.JSONDecodeError as e:
            err = DataFileError(path, f"{e.lineno}", None, f"invalid JSON: {e.msg}")
            return "JSON", iter([(f"{e.lineno}", err)])
    first = next((ln for ln in text.splitlines() if ln.strip()), "")
    if stripped.startswith("{"):
        try:
            json.loads(first)
        except json.JSONDecodeError:
            try:
                return _json_rows(path, json.loads(text))
            except json.JSONDecodeError:
                pass  # neither: report it line by line below
    return "JSONL", _jsonl_rows(path, text)


def _jsonl_rows(path: Path, text: str) -> Iterator[tuple[str, Any]]:
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
    layout, rows = _raw_rows(path)
    result: ReadResult = ReadResult(records=[], layout=layout)
    for loc, raw in rows:
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
