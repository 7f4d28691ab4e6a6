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
