"""The 14 MMLU-Pro categories and the mapping of MMLU's 57 subjects onto them.

The mapping itself lives in ``mmlu_pro_categories.json`` next to this module (one file, with its source),
so it can be read and audited without reading code. This module loads and checks it once.
"""

from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path

MAPPING_FILE = Path(__file__).with_name("mmlu_pro_categories.json")

MMLU_PRO_CATEGORIES: tuple[str, ...] = (
    "biology", "business", "chemistry", "computer science", "economics", "engineering", "health",
    "history", "law", "math", "other", "philosophy", "physics", "psychology",
)
"""The label set, in the fixed order that gives label ids (a saved head depends on it)."""


def normalize_subject(subject: str) -> str:
    """'High School Biology' / 'high school biology' / 'high_school_biology' -> 'high_school_biology'."""
    return "_".join(subject.strip().lower().replace("-", " ").replace("_", " ").split())


@lru_cache(maxsize=1)
def subject_to_category() -> dict[str, str]:
    """The 57 MMLU subjects -> MMLU-Pro category, validated against :data:`MMLU_PRO_CATEGORIES`."""
    doc = json.loads(MAPPING_FILE.read_text(encoding="utf-8"))
    if tuple(doc["categories"]) != MMLU_PRO_CATEGORIES:
        raise ValueError(f"{MAPPING_FILE}: 'categories' differs from MMLU_PRO_CATEGORIES")
    mapping = {subject: entry["category"] for subject, entry in doc["subjects"].items()}
    if len(mapping) != 57:
        raise ValueError(f"{MAPPING_FILE}: expected the 57 MMLU subjects, found {len(mapping)}")
    unknown = {c for c in mapping.values() if c not in MMLU_PRO_CATEGORIES}
    if unknown:
        raise ValueError(f"{MAPPING_FILE}: categories {sorted(unknown)} are not MMLU-Pro categories")
    return mapping


def category_of(subject: str) -> str:
    """The MMLU-Pro category of an MMLU subject; ``KeyError`` names the subject when it is unknown."""
    key = normalize_subject(subject)
    mapping = subject_to_category()
    if key not in mapping:
        raise KeyError(f"unknown MMLU subject '{subject}' (normalized '{key}')")
    return mapping[key]
