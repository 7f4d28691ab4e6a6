"""The MMLU subject -> MMLU-Pro category mapping file."""

import pytest

from rlrouter.intent.categories import MMLU_PRO_CATEGORIES, category_of, normalize_subject, subject_to_category


def test_mapping_covers_57_subjects_and_all_14_categories():
    mapping = subject_to_category()
    assert len(mapping) == 57
    assert len(MMLU_PRO_CATEGORIES) == 14
    assert set(mapping.values()) == set(MMLU_PRO_CATEGORIES)


@pytest.mark.parametrize("subject,category", [
    ("abstract algebra", "math"), ("high_school_statistics", "math"), ("astronomy", "physics"),
    ("College Medicine", "health"), ("machine_learning", "computer science"),
    ("electrical engineering", "engineering"), ("econometrics", "economics"), ("world religions", "philosophy"),
    ("prehistory", "history"), ("professional law", "law"), ("management", "business"),
    # MMLU's geography / politics / culture are not MMLU-Pro categories: folded into "other"
    ("high school geography", "other"), ("us_foreign_policy", "other"), ("sociology", "other"),
])
def test_spot_checks(subject, category):
    assert category_of(subject) == category


def test_unknown_subject_names_it():
    with pytest.raises(KeyError, match="astrology"):
        category_of("astrology")


def test_normalize_subject():
    assert normalize_subject(" High School  US-History ") == "high_school_us_history"
