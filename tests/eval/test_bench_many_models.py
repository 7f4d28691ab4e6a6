"""bench_many_models.py --only: a run of some routers merges into the committed result, never replaces it."""

from __future__ import annotations

import pytest

from benchmarks.bench_many_models import merge_routers


def test_only_merges_its_routers_into_the_committed_result():
    data = {"test": 945, "tasks": {"arc": 437}}
    committed = {"data": data, "routers": {"zero_router": {"aiq": 1}, "knn": {"aiq": 2}, "mf": {"aiq": 3}},
                 "bench_seconds": 534}
    run = {"data": data, "routers": {"zero_router": {"aiq": 1}, "gmtrouter": {"aiq": 4}, "knn": {"aiq": 5}},
           "command": "python benchmarks/bench_many_models.py --only gmtrouter,knn", "bench_seconds": 60}
    merged = merge_routers(committed, run)
    assert {k: v["aiq"] for k, v in merged["routers"].items()} == {"zero_router": 1, "knn": 5, "mf": 3, "gmtrouter": 4}
    assert merged["bench_seconds"] == 534 and merged["merged_runs"][0]["routers"] == ["gmtrouter", "knn"]
    with pytest.raises(SystemExit, match="other test tables"):
        merge_routers(committed, {**run, "data": {"test": 100, "tasks": {"arc": 100}}})


def test_router_r1_merges_a_runs_entry_and_keeps_the_aiq_provenance(tmp_path):
    """--router-r1 REPORT: the run's routing summary lands under router_r1.<run_name>, with the run's own
    provenance; the committed AIQ result keeps its provenance; a report without provenance is refused."""
    import json

    from benchmarks.bench_many_models import main

    aiq = {"routers": {"zero_router": {"aiq": {"overall": 0.78}}}, "provenance": {"commit": "f681f6e"}}
    (tmp_path / "many_models.json").write_text(json.dumps(aiq))
    iv = {"value": 0.1, "lo": 0.05, "hi": 0.15}
    board = {"alpha": 0.36, "best_fixed": "always_yi-34b", "per_task": {"mbpp": "gpt-3.5"}, "tasks": {"mbpp": 2},
             "policy_minus_best_fixed": iv, "policy_minus_per_task_rule": {"value": 0.0, "lo": 0.0, "hi": 0.0},
             "routes": {"policy": {"n": 2, "mean_reward": 0.7, "route_share_by_task": {"mbpp": {"gpt-3.5": 1.0}}},
                        "always_yi-34b": {"mean_reward": 0.6}, "per_task_rule": {"mean_reward": 0.7}}}
    run = {"config": {"run_name": "rb", "train": {"prompts_per_step": 2, "n_samples": 4}},
           "routing": board, "steps": [{"step": 1, "reward/total": 0.5}],
           "provenance": {"commit": "abc1234", "date": "2026-12-04"}}
    (tmp_path / "report.json").write_text(json.dumps(run))
    assert main(["--router-r1", str(tmp_path / "report.json"), "--out", str(tmp_path)]) == 0
    merged = json.loads((tmp_path / "many_models.json").read_text())
    assert merged["provenance"] == {"commit": "f681f6e"} and merged["routers"] == aiq["routers"]
    entry = merged["router_r1"]["rb"]
    assert entry["policy_minus_best_fixed"] == {"mean": 0.1, "lo": 0.05, "hi": 0.15}
    assert entry["episodes"] == 8 and entry["provenance"]["commit"] == "abc1234"
    assert entry["reference_rewards"] == {"always_yi-34b": 0.6, "per_task_rule": 0.7}
    del run["provenance"]
    (tmp_path / "report.json").write_text(json.dumps(run))
    with pytest.raises(SystemExit, match="no provenance"):
        main(["--router-r1", str(tmp_path / "report.json"), "--out", str(tmp_path)])
