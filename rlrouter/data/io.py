"""Readers and writers for Router-R1 and GMTRouter record files (JSONL, JSON object or list, parquet).

A bad record is never dropped silently: ``strict=True`` rejects the whole file at the first problem
(``DataFileError`` names file, line or record index, and field); ``strict=False`` keeps the good
records and returns every bad one with its position in ``ReadResult.errors``.

``read_jsonl`` is the one JSON-lines reader of the project: every JSONL file (records, question sets,
metrics logs) is read through it, so a malformed line is always reported the same way, as
``file:line: invalid JSON: ...``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Generic, Iterable, Iterator, Literal, TypeVar, overload

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


@overload
def read_jsonl(path: str | Path, *, keep_going: Literal[False] = False) -> Iterator[tuple[int, dict[str, Any]]]: ...


@overload
def read_jsonl(path: str | Path, *,
               keep_going: Literal[True]) -> Iterator[tuple[int, dict[str, Any] | DataFileError]]: ...


def read_jsonl(path: str | Path, *, keep_going: bool = False) -> Iterator[tuple[int, Any]]:
    """(line number, object) for every non-blank line of a JSON-lines file, numbered from 1 as an editor
    shows them, read lazily.

    A line that is not JSON, or is JSON but not an object, raises ``DataFileError`` with the file and the
    line (``train.jsonl:3: invalid JSON: Expecting value``), so the user can open the file at the bad line.
    With ``keep_going=True`` that line yields ``(line, DataFileError)`` in place of its object and
    reading goes on: for callers that report every bad line at once (``read_records(strict=False)``).
    """
    path = Path(path)
    with path.open(encoding="utf-8") as f:
        for lineno, line in enumerate(f, start=1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as e:
                err = DataFileError(path, str(lineno), None, f"invalid JSON: {e.msg}")
            else:
                if isinstance(row, dict):
                    yield lineno, row
                    continue
                err = DataFileError(path, str(lineno), None, f"expected a JSON object, got a JSON {type(row).__name__}")
            if not keep_going:
                raise err
            yield lineno, err


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
    return "JSONL", ((f"{lineno}", row) for lineno, row in read_jsonl(path, keep_going=True))


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


def write_jsonl(path: str | Path, rows: Iterable[dict[str, Any]]) -> Path:
    """Write dicts as a JSON-lines file, atomically: a crash never leaves half a file."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    with tmp.open("w", encoding="utf-8") as f:
        for row in rows:
            f.write(json.dumps(row, ensure_ascii=False) + "\n")
    tmp.replace(path)
    return path


def write_records(path: str | Path, records: list[Any]) -> Path:
    """Write records as JSONL (or parquet by suffix); atomic: a crash never leaves half a file."""
    path = Path(path)
    rows = [r.to_dict() for r in records]
    if path.suffix.lower() != ".parquet":
        return write_jsonl(path, rows)
    import pyarrow as pa
    import pyarrow.parquet as pq

    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    pq.write_table(pa.Table.from_pylist(rows), tmp)
    tmp.replace(path)
    return path
