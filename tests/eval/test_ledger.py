"""The ledger of test readings: every writer appends through one function, and a report finds what read the
same test set before."""

from __future__ import annotations

import json

from rlrouter.eval.ledger import earlier_readings, reading_key, record_reading


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
