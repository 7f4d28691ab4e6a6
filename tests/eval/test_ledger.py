"""The ledger of test readings: every writer appends through one function, keyed by the questions read, and a
report finds what read the same questions (or any of them) before, whatever file they came through."""

from __future__ import annotations

import json

import pytest

from rlrouter.eval.ledger import earlier_readings, reading_key, readings_of, record_reading


def test_readings_append_and_are_found_by_test_set(tmp_path):
    ledger = tmp_path / "results" / "ledger.jsonl"
    assert reading_key(["b.csv", "a.csv"]) == reading_key(["a.csv", "b.csv"]) != reading_key(["a.csv"])
    first = record_reading(ledger, test_key=reading_key(["a.csv"]), router_types=["knn"], figure=0.1)
    record_reading(ledger, test_key=reading_key(["b.csv"]), router_types=["mf"])
    record_reading(ledger, test_key=reading_key(["a.csv"]), router_types=["mf"])
    lines = ledger.read_text().splitlines()
    assert len(lines) == 3 and json.loads(lines[0]) == first and first["date"].endswith("UTC")
    same = earlier_readings(ledger, test_key=reading_key(["a.csv"]))
    assert [r["router_types"] for r in same] == [["knn"], ["mf"]]
    assert record_reading(None, test_key="x") is None and earlier_readings(tmp_path / "none.jsonl") == []


def test_bench_routing_records_each_policy_evaluation(tmp_path):
    """``bench_routing.py --evaluate`` appends its reading of the held-out questions, keyed by their ids."""
    import pandas as pd

    from benchmarks.bench_routing import record_evaluation

    split = tmp_path / "test.parquet"
    pd.DataFrame({"id": ["q1", "q2"], "query": ["a?", "b?"], "ground_truth": [["1"], ["2"]]}).to_parquet(split)
    scored = tmp_path / "run_heldout2"
    scored.mkdir()
    gap = {"value": 0.02, "lo": 0.007, "hi": 0.033, "excludes_zero": True}
    (scored / "report.json").write_text(json.dumps({"routing": {"policy_minus_best_fixed": gap}}))
    rec = record_evaluation(scored, split, ledger=tmp_path / "ledger.jsonl")
    assert rec["test_key"] == reading_key(["q2", "q1"]) and rec["questions"] == 2 and rec["router_types"] == ["router_r1"]
    assert rec["policy_minus_best_fixed"] == gap and rec["run"] == "run_heldout2"


def test_readings_are_keyed_by_the_questions_not_the_file(tmp_path):
    ledger = tmp_path / "ledger.jsonl"
    rec = record_reading(ledger, question_ids=["q3", "q1", "q2", "q1"], test_sources=["a.csv"], command="pool")
    assert rec["questions"] == 3 and rec["test_key"] == reading_key(["q1", "q2", "q3"]) and "question_digests" not in rec
    assert len(json.loads(ledger.read_text())["question_digests"]) == 3  # stored, for overlaps
    record_reading(ledger, question_ids=["q1", "q2", "q3"], test_sources=["built.parquet"], command="router_r1")
    record_reading(ledger, question_ids=["q2"], test_sources=["subset.parquet"], command="subset")
    record_reading(ledger, question_ids=["z9"], test_sources=["a.csv"], command="other questions, same file")
    seen = readings_of(ledger, ["q1", "q2", "q3"])
    assert [r["command"] for r in seen["same"]] == ["pool", "router_r1"]
    assert [(r["command"], r["shared"]) for r in seen["overlapping"]] == [("pool", 3), ("router_r1", 3), ("subset", 1)]
    assert readings_of(ledger, ["q2"])["same"][0]["command"] == "subset"
    assert readings_of(tmp_path / "none.jsonl", ["q1"]) == {"test_key": reading_key(["q1"]), "questions": 1,
                                                            "same": [], "overlapping": []}
    with pytest.raises(ValueError, match="no questions"):
        record_reading(ledger, question_ids=[])


def test_router_r1_and_the_pool_evaluation_spell_routerbench_questions_alike(shared_data):
    """The held-out parquet Router-R1 trains against is built from RouterBench's *_test tables; its question ids
    are the ids the pool evaluation keys its reading of those tables by, so the ledger counts them together."""
    from rlrouter.data.sources import routerbench
    from rlrouter.eval.pool_job import ledger_question_ids
    from rlrouter.routers.reader import read_eval_set

    table = shared_data / "routerbench" / "mbpp_test.csv"
    r1 = {q.id for q in routerbench(table)}
    pool = set(ledger_question_ids(read_eval_set(table, blank_scores="drop")))
    assert r1 and r1 <= pool, sorted(r1 - pool)[:3]


def test_a_lockbox_leaves_out_what_the_named_routers_read(tmp_path):
    """``unread``: questions any reading by one of the named router types read are out; other routers' readings
    and other questions do not count (what ``eval.unread_by`` keeps for a Router-R1 lockbox)."""
    from rlrouter.eval.ledger import read_by, unread

    ledger = tmp_path / "ledger.jsonl"
    record_reading(ledger, question_ids=["q1", "q2"], router_types=["router_r1"], command="a run")
    record_reading(ledger, question_ids=["q3", "q4"], router_types=["knn", "fixed"], command="the pool evaluation")
    assert len(read_by(ledger, ["router_r1"])) == 2 and read_by(ledger, ["mf"]) == set()
    assert unread(ledger, ["q1", "q3", "q5"], ["router_r1"]) == [False, True, True]
    assert unread(ledger, ["q1", "q3", "q5"], ["router_r1", "knn"]) == [False, False, True]
    assert unread(tmp_path / "none.jsonl", ["q1"], ["router_r1"]) == [True]
