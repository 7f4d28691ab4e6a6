"""``read_jsonl``, the one JSON-lines reader: line numbers as an editor shows them, blank lines skipped,
and a bad line named by file and line."""

from __future__ import annotations

import pytest

from rlrouter.data.io import DataFileError, read_jsonl


def test_rows_with_their_line_numbers_blank_lines_skipped(tmp_path):
    p = tmp_path / "rows.jsonl"
    p.write_text('{"a": 1}\n\n   \n{"a": 2, "b": "x"}\n{"a": 3}')  # no newline after the last line
    assert list(read_jsonl(p)) == [(1, {"a": 1}), (4, {"a": 2, "b": "x"}), (5, {"a": 3})]


def test_empty_file_has_no_rows(tmp_path):
    p = tmp_path / "empty.jsonl"
    p.write_text("")
    assert list(read_jsonl(str(p))) == []


def test_invalid_json_names_file_and_line(tmp_path):
    p = tmp_path / "bad.jsonl"
    p.write_text('{"a": 1}\n\n{not json\n{"a": 3}\n')
    rows = read_jsonl(p)
    assert next(rows) == (1, {"a": 1})  # lazy: the good lines before the bad one are read
    with pytest.raises(DataFileError) as e:
        next(rows)
    assert (e.value.path, e.value.location, e.value.field) == (str(p), "3", None)
    assert str(e.value).startswith(f"{p}:3: invalid JSON: ")


@pytest.mark.parametrize("line,kind", [("[1, 2]", "list"), ('"text"', "str"), ("7", "int"), ("null", "NoneType")])
def test_a_line_that_is_not_an_object_is_an_error(tmp_path, line, kind):
    p = tmp_path / "rows.jsonl"
    p.write_text('{"a": 1}\n' + line + "\n")
    with pytest.raises(DataFileError, match=rf"rows.jsonl:2: expected a JSON object, got a JSON {kind}"):
        list(read_jsonl(p))


def test_keep_going_yields_every_bad_line_in_place(tmp_path):
    p = tmp_path / "rows.jsonl"
    p.write_text('{"a": 1}\n{not json\n[1]\n{"a": 4}\n')
    rows = list(read_jsonl(p, keep_going=True))
    assert [n for n, _ in rows] == [1, 2, 3, 4]
    assert rows[0][1] == {"a": 1} and rows[3][1] == {"a": 4}
    assert [type(r).__name__ for _, r in rows[1:3]] == ["DataFileError", "DataFileError"]
    assert [r.location for _, r in rows[1:3]] == ["2", "3"]


def test_missing_file(tmp_path):
    with pytest.raises(FileNotFoundError):
        list(read_jsonl(tmp_path / "absent.jsonl"))
