"""Record validation and the file readers: errors name file, line (or record) and field."""

from __future__ import annotations

import json

import pytest

from rlrouter.cli import main as cli
from rlrouter.data.formats import GMTRecord, RecordError, RouterR1Record
from rlrouter.data.io import DataFileError, read_records, write_records

GOOD_R1 = {
    "query": "What is 2+2?", "query_type": "math",
    "candidate_models": [{"name": "gpt-4", "cost": 30.0, "latency": 2.0},
                         {"name": "mixtral", "cost": 0.6, "latency": 1.0}],
    "ground_truth": "4", "optimal_model": "mixtral", "reasoning": "easy",
}
GOOD_GMT = {
    "user_id": "u1",
    "interactions": [{"query": "hi", "model_used": "gpt-4", "user_feedback": 1, "timestamp": 1.0},
                     {"query": "more", "model_used": "mixtral", "user_feedback": 0,
                      "timestamp": "2024-01-01T00:00:00Z"}],
    "preferred_models": ["gpt-4"], "context": {"domain": "math"},
}


def test_router_r1_record_round_trip():
    rec = RouterR1Record.from_dict(GOOD_R1)
    assert rec.ground_truth == ["4"]
    assert RouterR1Record.from_dict(rec.to_dict()) == rec


@pytest.mark.parametrize("mutate, field", [
    (lambda d: d.pop("query"), "query"),
    (lambda d: d.update(query=""), "query"),
    (lambda d: d.update(candidate_models=[{"name": "x", "cost": "cheap", "latency": 1}]), "candidate_models[0].cost"),
    (lambda d: d.update(candidate_models=[{"name": "x", "cost": -1, "latency": 1}]), "candidate_models[0].cost"),
    (lambda d: d["candidate_models"][1].pop("latency"), "candidate_models[1].latency"),
    (lambda d: d.update(optimal_model="claude"), "optimal_model"),
    (lambda d: d.update(ground_truth=[1]), "ground_truth[0]"),
])
def test_router_r1_record_errors_name_the_field(mutate, field):
    d = json.loads(json.dumps(GOOD_R1))
    mutate(d)
    with pytest.raises(RecordError) as e:
        RouterR1Record.from_dict(d)
    assert e.value.field == field


def test_gmt_record_parses_iso_timestamps_and_rejects_bad_feedback():
    rec = GMTRecord.from_dict(GOOD_GMT)
    assert rec.interactions[1].timestamp == pytest.approx(1704067200.0)
    bad = json.loads(json.dumps(GOOD_GMT))
    bad["interactions"][1]["user_feedback"] = 99
    with pytest.raises(RecordError) as e:
        GMTRecord.from_dict(bad)
    assert e.value.field == "interactions[1].user_feedback"


def _write_jsonl(path, rows):
    path.write_text("\n".join(r if isinstance(r, str) else json.dumps(r) for r in rows) + "\n")


def test_strict_read_names_file_line_and_field(tmp_path):
    bad = json.loads(json.dumps(GOOD_R1))
    bad["candidate_models"][0]["name"] = ""
    p = tmp_path / "r1.jsonl"
    _write_jsonl(p, [GOOD_R1, GOOD_R1, bad])
    with pytest.raises(DataFileError) as e:
        read_records(p, "router_r1")
    assert str(e.value) == f"{p}:3: field 'candidate_models[0].name': must not be empty"


def test_lenient_read_keeps_good_records_and_reports_every_bad_one(tmp_path):
    p = tmp_path / "g.jsonl"
    _write_jsonl(p, [GOOD_GMT, "{not json", GOOD_GMT, {"user_id": "u2", "interactions": []}])
    res = read_records(p, "gmtrouter", strict=False)
    assert len(res.records) == 2
    assert [(e.location, e.field) for e in res.errors] == [("2", None), ("4", "interactions")]


def test_json_list_and_parquet_round_trip(tmp_path):
    recs = [RouterR1Record.from_dict(GOOD_R1)] * 3
    for name in ("a.jsonl", "a.parquet"):
        out = write_records(tmp_path / name, recs)
        assert read_records(out, "router_r1").records == recs
    lst = tmp_path / "l.json"
    lst.write_text(json.dumps([GOOD_R1, {**GOOD_R1, "query_type": 3}]))
    with pytest.raises(DataFileError) as e:
        read_records(lst, "router_r1")
    assert e.value.location == "record 1" and e.value.field == "query_type"


def test_cli_validate_exit_codes(tmp_path, capsys):
    good = tmp_path / "good.jsonl"
    _write_jsonl(good, [GOOD_GMT])
    assert cli(["validate", str(good), "--format", "gmtrouter"]) == 0
    bad = tmp_path / "bad.jsonl"
    broken = json.loads(json.dumps(GOOD_GMT))
    del broken["interactions"][0]["model_used"]
    _write_jsonl(bad, [GOOD_GMT, broken])
    assert cli(["validate", str(bad), "--format", "gmtrouter"]) == 1
    err = capsys.readouterr().err
    assert f"{bad}:2: field 'interactions[0].model_used': missing" in err


def test_cli_validate_as_a_console_command(tmp_path):
    """The installed `rlrouter` script, as a user runs it."""
    import shutil
    import subprocess

    exe = shutil.which("rlrouter") or str(__import__("pathlib").Path(__import__("sys").executable).parent / "rlrouter")
    bad = tmp_path / "bad.jsonl"
    _write_jsonl(bad, [{**GOOD_R1, "ground_truth": []}])
    r = subprocess.run([exe, "validate", str(bad), "--format", "router_r1"], capture_output=True, text=True)
    assert r.returncode == 1
    assert f"{bad}:1: field 'ground_truth': must not be empty" in r.stderr
