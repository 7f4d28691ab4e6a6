"""One question of a source (:class:`Question`), its stable id, where a source's file lies (``local_path``),
and its task (``task_of``).

Every question source (``rlrouter.data.sources``, ``rlrouter.data.qa``) and the user's record files
(``rlrouter.data.records``) build on these.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from rlrouter.data.logged import fetch as fetch_url


@dataclass
class Question:
    id: str
    source: str  # "gsm8k", "mmlu", "fanoutqa"
    query: str
    query_type: str  # "math", "mmlu/<subject>", "multi_hop"
    ground_truth: list[str]
    reasoning: str = ""
    sub_questions: list[dict] = field(default_factory=list)  # FanOutQA decomposition


def local_path(path_or_url: str | Path) -> Path:
    """A local path as is; an http(s) URL downloaded once into ``<cache>/downloads``."""
    s = str(path_or_url)
    if not s.startswith(("http://", "https://")):
        p = Path(s).expanduser()
        if not p.exists():
            raise FileNotFoundError(f"{p}: no such file or folder")
        return p
    return fetch_url(s)


def question_id(source: str, text: str) -> str:
    """A stable id for a question without one: its source and a hash of its text."""
    return f"{source}-{hashlib.sha1(text.encode()).hexdigest()[:12]}"


def task_of(item: Mapping[str, Any]) -> str:
    """A question's task: its data source (``gsm8k``, ``mmlu``, RouterBench's ``eval_name``, ...)."""
    return str(item.get("source") or item.get("query_type") or "all")
