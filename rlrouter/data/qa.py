"""Router-R1's QA datasets (NQ, HotpotQA and the five other test sets), fetched through ``datasets``.

Router-R1's data scripts (``data_process/qa_train_merge.py`` and friends) load FlashRAG's
copies from the HF hub (``RUC-NLPIR/FlashRAG_datasets``): rows ``{id, question, golden_answers}``,
a ``train`` split for NQ and HotpotQA, ``test`` (or ``dev`` where a set has no test) for evaluation.
Here a source's ``path`` (a folder holding ``<split>.jsonl``, a file, or a URL) reads the same rows
offline; without it the rows come through ``datasets.load_dataset`` when the network allows, and a
clear error says how to point at a local copy when it does not.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterable

from rlrouter.data.io import DataFileError, _raw_rows
from rlrouter.data.question import Question, local_path, question_id

HF_REPO = "RUC-NLPIR/FlashRAG_datasets"
QA_DATASETS = ("nq", "triviaqa", "popqa", "hotpotqa", "2wikimultihopqa", "musique", "bamboogle")
"""Router-R1's seven: NQ and HotpotQA train it; all seven evaluate it."""
MULTI_HOP = frozenset({"hotpotqa", "2wikimultihopqa", "musique", "bamboogle"})


def _local_rows(name: str, path: str | Path, split: str) -> tuple[Path, list[tuple[str, Any]]]:
    p = local_path(path)
    if p.is_dir():
        options = [p / f"{split}.{ext}" for ext in ("jsonl", "json", "parquet")]
        if split == "test":
            options += [p / f"dev.{ext}" for ext in ("jsonl", "json", "parquet")]
        found = [o for o in options if o.exists()]
        if not found:
            raise FileNotFoundError(f"data.sources[{name}].path: {p} has no {split}.jsonl/.json/.parquet")
        p = found[0]
    _, rows = _raw_rows(p)
    return p, list(rows)


def _hub_rows(name: str, split: str) -> tuple[str, list[tuple[str, Any]]]:
    try:
        import datasets

        avail = datasets.get_dataset_split_names(HF_REPO, name)
        use = split if split in avail or split != "test" else "dev"
        ds = datasets.load_dataset(HF_REPO, name, split=use)
    except Exception as e:  # offline, hub refused, unknown config: all end the same way for the user
        raise RuntimeError(
            f"data.sources[{name}]: cannot fetch {HF_REPO}/{name} split '{split}' through `datasets` "
            f"({type(e).__name__}: {str(e)[:200]}). Set data.sources[{name}].path to a local copy: a folder "
            f"with {split}.jsonl of {{id, question, golden_answers}} rows") from None
    return f"{HF_REPO}/{name}:{use}", [(f"record {i}", row) for i, row in enumerate(ds)]


def load_qa(name: str, path: str | Path | None = None, split: str | None = None) -> list[Question]:
    """Questions of one of ``QA_DATASETS`` (``split`` default: ``train``)."""
    if name not in QA_DATASETS:
        raise ValueError(f"data.sources[].name: unknown QA dataset '{name}', expected one of {QA_DATASETS}")
    split = split or "train"
    where, rows = _local_rows(name, path, split) if path else _hub_rows(name, split)
    return [Question(id=f"{name}-{row['id']}" if row.get("id") is not None else question_id(name, row["question"]),
                     source=name, query=str(row["question"]).strip(),
                     query_type="multi_hop" if name in MULTI_HOP else "factual",
                     ground_truth=golds) for row, golds in _checked(where, rows)]


def _checked(where: Any, rows: Iterable[tuple[str, Any]]) -> Iterable[tuple[dict, list[str]]]:
    for loc, row in rows:
        if isinstance(row, DataFileError):
            raise row
        if not isinstance(row, dict):
            raise DataFileError(where, loc, None, "expected an object")
        if not isinstance(row.get("question"), str) or not row["question"].strip():
            raise DataFileError(where, loc, "question", "missing or not a non-empty string")
        golds = row.get("golden_answers")
        if isinstance(golds, str):
            golds = [golds]
        if not isinstance(golds, list) or not golds or not all(isinstance(g, str) for g in golds):
            raise DataFileError(where, loc, "golden_answers", "expected a non-empty list of strings")
        yield row, list(golds)
