"""RouterBench's logged-outcome tables: one row per prompt, every model's graded reply and its cost.

RouterBench (Hu et al., 2024; withmartian/routerbench) publishes wide tables: ``prompt`` and
``<model>|model_response`` cells are Python list literals of strings (read here with ``ast.literal_eval``,
never ``eval``), ``<model>`` is the model's score in [0, 1], ``<model>|total_cost`` what the call cost in
USD, ``eval_name`` the task and ``sample_id`` an id. The tables have quirks that a reader reports rather
than hides (:class:`TableReport`): blank score cells, repeated ids. This module reads one table into a
:class:`RouterBenchTable`; the evaluation (``rlrouter.routers.reader``) and the replay pool
(``rlrouter.pool.replay``) both read through it.

Routers read the question without the few-shot examples: ``question_text`` keeps a prompt's last
paragraph (RouterBench's ARC and Winogrande prompts put each worked example in its own paragraph and the
question, with its options and answer instruction, last).
"""

from __future__ import annotations

import ast
import csv
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from rlrouter.data.io import DataFileError
from rlrouter.data.logged import LoggedOutcomes, concat, load_routellm

ROUTERBENCH_RESPONSE = "|model_response"
ROUTERBENCH_COST = "|total_cost"


def routerbench_id(sample_id: Any) -> str:
    """The id a RouterBench question goes by everywhere (datasets built from the tables, the ledger of test
    readings): ``routerbench-<sample_id>``, whatever file or format it came through."""
    return f"routerbench-{sample_id}"


# columns of a RouterBench table that are not candidates
ROUTERBENCH_META = {"sample_id", "prompt", "eval_name", "oracle_model_to_route_to", "source"}


def _score(value: Any, path: str, row: int, column: str) -> float:
    """One logged score: bool, 0/1, a float in [0, 1], or the strings True/False."""
    if isinstance(value, (bool, np.bool_)):
        return float(value)
    if isinstance(value, str):
        v = value.strip().lower()
        if v in ("true", "false"):
            return 1.0 if v == "true" else 0.0
        try:
            value = float(v)
        except ValueError:
            raise DataFileError(path, f"row {row}", column, f"score {value!r} is not a number or True/False") from None
    if isinstance(value, (int, float, np.integer, np.floating)):
        x = float(value)
        if math.isnan(x):
            raise DataFileError(path, f"row {row}", column, "score is missing (NaN)")
        if not 0.0 <= x <= 1.0:
            raise DataFileError(path, f"row {row}", column, f"score {x} is outside [0, 1]")
        return x
    if value is None:
        raise DataFileError(path, f"row {row}", column, "score is missing")
    raise DataFileError(path, f"row {row}", column, f"score of type {type(value).__name__} is not a number")


def _prompt(value: Any, path: str, row: int, column: str = "prompt") -> str:
    if not isinstance(value, str) or not value.strip():
        raise DataFileError(path, f"row {row}", column, f"expected a non-empty string, got {value!r}")
    return value


# ---------------------------------------------------------------- RouterBench-style tables

# What a blank correctness cell becomes (``eval.blank_scores``): RouterBench's ARC logs leave 154 cells
# blank where a model's reply was never graded. Dropping the row keeps every candidate on the same prompts;
# "zero" keeps the row and counts a blank as wrong; "error" refuses the file.
BLANK_SCORES = ("drop", "zero", "error")
# What a repeated ``sample_id`` within one table becomes (``eval.repeated_ids``): "drop" keeps its first row
REPEATED_IDS = ("drop", "keep")
# The text a router reads (``eval.question``): "last_block" is the prompt's last paragraph, the question
# after RouterBench's few-shot examples (they are separated by blank lines); "full" is the whole prompt
QUESTION_RULES = ("last_block", "full")

_BLANK_LINE = re.compile(r"\n[ \t]*\n")


def question_text(prompt: str, rule: str = "last_block") -> str:
    """The part of a prompt that routers read. ``last_block``: the text after the prompt's last blank line
    (RouterBench's few-shot prompts put each worked example in its own paragraph and the question, with its
    options and answer instruction, last; a prompt without a blank line is its own question)."""
    if rule == "full":
        return prompt
    if rule != "last_block":
        raise ValueError(f"eval.question: expected one of {QUESTION_RULES}, got '{rule}'")
    blocks = [b.strip() for b in _BLANK_LINE.split(prompt)]
    blocks = [b for b in blocks if b]
    return blocks[-1] if blocks else prompt.strip()


def _list_literal(value: Any, path: Path, row: int, column: str) -> str | None:
    """A RouterBench text cell: a Python list literal of strings (the CSV layout), read with
    ``ast.literal_eval`` (never ``eval``), or a plain string (parquet). Its strings are joined by a blank
    line; an empty list or a blank cell is None."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return None
    if isinstance(value, (list, tuple, np.ndarray)):
        items = list(value)
    elif isinstance(value, str):
        v = value.strip()
        if not v:
            return None
        if not v.startswith("["):
            return value
        try:
            items = ast.literal_eval(v)
        except (ValueError, SyntaxError, MemoryError, RecursionError) as e:
            raise DataFileError(path, f"row {row}", column,
                                f"not a Python list literal of strings ({type(e).__name__}: {e})") from None
        if not isinstance(items, list):
            raise DataFileError(path, f"row {row}", column, f"expected a list of strings, got {type(items).__name__}")
    else:
        raise DataFileError(path, f"row {row}", column, f"expected text, got {type(value).__name__}")
    if not all(isinstance(x, str) for x in items):
        raise DataFileError(path, f"row {row}", column, "expected a list of strings")
    return "\n\n".join(items) if items else None


def _blank(value: Any) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value)) or (
        isinstance(value, str) and not value.strip())


@dataclass
class TableReport:
    """What the reader found in one table and what it did about it: never a silent change."""

    path: str
    rows: int  # data rows in the file
    kept: int  # rows in the evaluation set
    blank_cells: dict[str, int] = field(default_factory=dict)  # candidate -> blank correctness cells
    blank_rows: int = 0  # rows with at least one blank correctness cell
    blank_scores: str = "drop"
    repeated_ids: int = 0  # rows whose sample_id repeats an earlier row's
    repeated_policy: str = "drop"
    examples: list[str] = field(default_factory=list)  # the first few places, "row 12, column 'x': blank"

    def to_dict(self) -> dict[str, Any]:
        return {"path": self.path, "rows": self.rows, "kept": self.kept,
                "blank_cells": {"total": int(sum(self.blank_cells.values())), **self.blank_cells},
                "blank_rows": self.blank_rows, "blank_scores": self.blank_scores,
                "repeated_ids": self.repeated_ids, "repeated_ids_policy": self.repeated_policy,
                "examples": list(self.examples)}

    def lines(self) -> list[str]:
        """One line a quirk, for the job's log and the report."""
        out = []
        if self.blank_rows:
            what = {"drop": "rows dropped", "zero": "counted as wrong"}[self.blank_scores]
            out.append(f"{self.path}: {sum(self.blank_cells.values())} blank correctness cells in "
                       f"{self.blank_rows} rows ({what}; eval.blank_scores)")
        if self.repeated_ids:
            what = "later rows dropped" if self.repeated_policy == "drop" else "kept"
            out.append(f"{self.path}: {self.repeated_ids} rows repeat an earlier sample_id ({what}; eval.repeated_ids)")
        return out


def _read_table(path: Path, allow_pickle: bool):
    import pandas as pd

    suffix = path.suffix.lower()
    if not path.exists():
        raise FileNotFoundError(f"{path}: no such evaluation file")
    if suffix == ".parquet":
        return pd.read_parquet(path)
    if suffix == ".csv":
        # every cell as text, blanks as "": numbers are parsed per cell so an error names its row
        return pd.read_csv(path, dtype=str, keep_default_na=False)
    if suffix in (".pkl", ".pickle"):
        if not allow_pickle:
            # unpickling runs arbitrary code from the file: only for files the user vouches for
            raise ValueError(f"{path}: reading a pickle needs allow_pickle=True (unpickling an untrusted "
                             "file can run arbitrary code); prefer parquet")
        df = pd.read_pickle(path)
        if not isinstance(df, pd.DataFrame):
            raise DataFileError(path, "row 0", None, f"pickle holds a {type(df).__name__}, not a DataFrame")
        return df
    raise ValueError(f"{path}: unsupported suffix '{suffix}' for a RouterBench table (csv, parquet or pkl)")



@dataclass
class RouterBenchTable:
    """The rows a RouterBench table keeps, per prompt and candidate. Shapes: N prompts, M candidates."""

    path: str
    prompts: list[str]  # (N,) whole prompts, few-shot examples included
    candidates: list[str]  # (M,)
    scores: np.ndarray  # (N, M) in [0, 1] (a blank read as 0 under blank_scores "zero")
    costs: np.ndarray  # (N, M) logged USD of each call; NaN where the table has no <model>|total_cost
    sources: list[str]  # (N,) eval_name
    ids: list[str] | None  # (N,) sample_id, when the table has one
    responses: dict[str, list[str | None]]  # candidate -> (N,) logged reply, for candidates with one
    report: TableReport

    def questions(self, rule: str = "last_block") -> list[str]:
        return [question_text(p, rule) for p in self.prompts]


META_COLUMNS = ("prompt", "eval_name", "sample_id", "oracle_model_to_route_to")
"""Columns of a RouterBench table that are never candidates (besides an unnamed index column)."""


def _score_column(values: Sequence[Any]) -> bool:
    """Every non-blank cell a number in [0, 1], and at least one: a column of logged scores."""
    seen = False
    for v in values:
        if _blank(v):
            continue
        try:
            x = float(v)
        except (TypeError, ValueError):
            return False
        if not 0.0 <= x <= 1.0:
            return False
        seen = True
    return seen


def table_candidates(df: Any, priced: Sequence[str] = ()) -> tuple[list[str], str]:
    """The candidate columns of a table whose candidates are not listed, and how they were found: the
    columns with a ``<model>|model_response`` or ``<model>|total_cost`` sibling; else the columns that
    ``priced`` (``eval.prices``) names; else every column of scores (numbers in [0, 1]) that is not a
    known metadata column, as in a table of scores only."""
    cols = [str(c) for c in df.columns]
    found = sorted({c.split("|", 1)[0] for c in cols if c.endswith(ROUTERBENCH_RESPONSE) or c.endswith(ROUTERBENCH_COST)})
    found = [c for c in found if c in cols]
    if found:
        return found, "columns with a <model>|model_response or <model>|total_cost sibling"
    named = [c for c in cols if c in set(priced)]
    if named:
        return named, "the columns eval.prices names"
    meta = set(META_COLUMNS)
    scores = [c for c in cols if "|" not in c and c not in meta and c and not c.startswith("Unnamed:")
              and _score_column(df[c].tolist())]
    return scores, "the columns of scores in [0, 1]"


def read_routerbench_table(path: str | Path, candidates: Sequence[str] | None = None, blank_scores: str = "error",
                           repeated_ids: str = "keep", allow_pickle: bool = False,
                           priced: Sequence[str] = ()) -> RouterBenchTable:
    """Read a RouterBench-style wide table: CSV as RouterBench publishes it (prompts and replies as Python
    list literals), parquet, or a pickle behind ``allow_pickle``.

    Candidates are ``candidates`` when given, else found by :func:`table_candidates` (``priced``: the
    models ``eval.prices`` names). Blank correctness cells and repeated ``sample_id``s are handled by
    ``blank_scores`` / ``repeated_ids`` and counted in the table's :class:`TableReport`. Errors name the
    file, the data row (0-based, as pandas numbers it) and the column.
    """
    if blank_scores not in BLANK_SCORES:
        raise ValueError(f"eval.blank_scores: expected one of {BLANK_SCORES}, got '{blank_scores}'")
    if repeated_ids not in REPEATED_IDS:
        raise ValueError(f"eval.repeated_ids: expected one of {REPEATED_IDS}, got '{repeated_ids}'")
    path = Path(path)
    df = _read_table(path, allow_pickle)
    cols = [str(c) for c in df.columns]
    if "prompt" not in cols:
        raise DataFileError(path, "row 0", "prompt", f"missing column (columns: {cols[:8]}...)")
    how = "eval.candidates"
    if candidates is None:
        candidates, how = table_candidates(df, priced)
    candidates = list(candidates)
    for c in candidates:
        if c not in cols:
            raise DataFileError(path, "row 0", c, f"candidate column missing (eval.candidates; columns: {cols[:8]}...)")
    if len(candidates) < 2:
        raise DataFileError(path, "row 0", None, f"found {len(candidates)} candidate columns ({how}), need >= 2: "
                            "list the score columns in eval.candidates, or price each candidate in eval.prices")
    n, m = len(df), len(candidates)
    full = []
    for i, v in enumerate(df["prompt"].tolist()):
        text = _list_literal(v, path, i, "prompt")
        full.append(_prompt(text, str(path), i))
    scores = np.zeros((n, m))
    blank = np.zeros((n, m), dtype=bool)
    for j, c in enumerate(candidates):
        for i, v in enumerate(df[c].tolist()):
            if _blank(v):
                if blank_scores == "error":
                    raise DataFileError(path, f"row {i}", c, "score is missing (blank); eval.blank_scores: drop "
                                        "or zero accepts blank cells")
                blank[i, j] = True
                continue
            scores[i, j] = _score(v, str(path), i, c)
    sources = [str(s) for s in df["eval_name"].tolist()] if "eval_name" in cols else ["unknown"] * n
    ids = [str(s) for s in df["sample_id"].tolist()] if "sample_id" in cols else None
    responses: dict[str, list[str | None]] = {}
    logged = np.full((n, m), np.nan)
    for j, c in enumerate(candidates):
        if c + ROUTERBENCH_RESPONSE in cols:
            col = c + ROUTERBENCH_RESPONSE
            responses[c] = [_list_literal(v, path, i, col) for i, v in enumerate(df[col].tolist())]
        if c + ROUTERBENCH_COST in cols:
            col = c + ROUTERBENCH_COST
            for i, v in enumerate(df[col].tolist()):
                try:
                    x = float(v)
                except (TypeError, ValueError):
                    raise DataFileError(path, f"row {i}", col, f"cost {v!r} is not a number") from None
                if math.isnan(x):
                    raise DataFileError(path, f"row {i}", col, "cost is missing")
                if x < 0:
                    raise DataFileError(path, f"row {i}", col, f"cost {x} is negative")
                logged[i, j] = x
    keep = np.ones(n, dtype=bool)
    if blank_scores == "drop":
        keep &= ~blank.any(axis=1)
    examples = [f"row {i}, column '{candidates[j]}': blank correctness" for i, j in zip(*np.nonzero(blank))][:5]
    seen: dict[str, int] = {}
    repeats = 0
    for i in range(n):
        if ids is None:
            break
        if ids[i] in seen:
            repeats += 1
            if len(examples) < 10:
                examples.append(f"row {i}, column 'sample_id': '{ids[i]}' repeats row {seen[ids[i]]}")
            if repeated_ids == "drop":
                keep[i] = False
        seen.setdefault(ids[i], i)
    if not keep.any():
        raise DataFileError(path, "row 0", None, "no row left after dropping blank scores and repeated ids")
    rows = np.nonzero(keep)[0]
    return RouterBenchTable(path=str(path), prompts=[full[i] for i in rows], candidates=candidates,
                            scores=scores[rows], costs=logged[rows], sources=[sources[i] for i in rows],
                            ids=[ids[i] for i in rows] if ids is not None else None,
                            responses={c: [r[i] for i in rows] for c, r in responses.items()},
                            report=TableReport(path=str(path), rows=n, kept=int(keep.sum()),
                                               blank_cells={c: int(blank[:, j].sum()) for j, c in enumerate(candidates)
                                                            if blank[:, j].any()},
                                               blank_rows=int(blank.any(axis=1).sum()), blank_scores=blank_scores,
                                               repeated_ids=repeats, repeated_policy=repeated_ids, examples=examples))


def is_routerbench_table(path: str | Path) -> bool:
    """A parquet file, or a local CSV whose header names a ``<model>|model_response`` or ``<model>|total_cost``
    column or an ``eval_name`` column (a table of scores only): RouterBench's layout rather than RouteLLM's
    (``prompt`` and one score column per model, one file per task)."""
    p = Path(path)
    if p.suffix.lower() == ".parquet":
        return True
    if not (p.suffix.lower() == ".csv" and p.is_file()):
        return False
    with p.open(encoding="utf-8", errors="replace") as f:
        header = f.readline()
    names = {c.strip() for c in next(csv.reader([header]), [])}
    return ROUTERBENCH_RESPONSE in header or ROUTERBENCH_COST in header or "eval_name" in names


def routerbench_files(path: str | Path, split: str | None = None) -> list[Path]:
    """The tables under ``path``: the file itself, or a folder's ``*.csv`` / ``*.parquet`` in RouterBench's
    layout, only those named ``*_<split>.*`` when ``split`` is given (RouterDC's re-split: ``mbpp_train.csv``)."""
    p = Path(path)
    if p.is_file():
        return [p]
    if not p.is_dir():
        raise FileNotFoundError(f"{p}: no such RouterBench table or folder")
    files = sorted(f for f in p.iterdir() if f.suffix.lower() in (".csv", ".parquet") and is_routerbench_table(f)
                   and (split is None or f.stem.endswith(f"_{split}")))
    if not files:
        raise FileNotFoundError(f"{p}: no RouterBench table{'' if split is None else f' named *_{split}'} "
                                "(CSV or parquet with <model>|model_response or <model>|total_cost columns)")
    return files


def load_routerbench(paths: str | Path | Sequence[str | Path], split: str | None = None,
                     blank_scores: str = "drop", repeated_ids: str = "drop", question: str = "last_block") -> LoggedOutcomes:
    """RouterBench tables as one ``LoggedOutcomes`` for the replay pool: a prompt is the question routers read
    (``question``), and the logged costs ride along (``LoggedOutcomes.costs``)."""
    if isinstance(paths, (str, Path)):
        paths = [paths]
    tables = [read_routerbench_table(f, blank_scores=blank_scores, repeated_ids=repeated_ids)
              for p in paths for f in routerbench_files(p, split)]
    logged = [LoggedOutcomes(prompts=t.questions(question), models=list(t.candidates), scores=t.scores,
                             responses={m: t.responses.get(m, [None] * len(t.prompts)) for m in t.candidates},
                             source=list(t.sources), costs=t.costs) for t in tables]
    return concat(logged, names=[t.path for t in tables]) if len(logged) > 1 else logged[0]


def is_routerbench_source(source: Any) -> bool:
    """A folder of RouterBench tables, one such table, or a list of them (else: RouteLLM's CSVs)."""
    if source is None:
        return False
    items = [source] if isinstance(source, (str, Path)) else list(source)

    def one(x: Any) -> bool:
        p = Path(str(x))
        return is_routerbench_table(p) or (p.is_dir() and any(is_routerbench_table(f) for f in p.glob("*.csv")))

    return all(one(x) for x in items)


def load_logged_outcomes(source: Any = None) -> LoggedOutcomes:
    """The logged outcomes a replay pool and the data builder read: RouterBench's tables when ``source`` is
    one (``load_routerbench``), else RouteLLM's CSVs (``rlrouter.data.logged.load_routellm``; None: its
    default source)."""
    return load_routerbench(source) if is_routerbench_source(source) else load_routellm(source)
