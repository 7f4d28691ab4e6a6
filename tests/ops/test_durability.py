"""Selector durability, small real version of benchmarks/bench_durability.py: during
concurrent /feedback traffic the Serve processes (controller, proxy, the selector replica holding the
posteriors, the ingress) get SIGKILL twice and come back on the same state file; with ``stack`` the
whole server (its own Ray cluster, Serve, the app) dies and is started again. Every feedback answered
200 is in the posteriors.
"""

from __future__ import annotations

import pytest

pytestmark = [pytest.mark.ray, pytest.mark.slow]


@pytest.mark.timeout(900)
@pytest.mark.parametrize("kill", ["serve", "stack"])
def test_acknowledged_feedback_survives_kill9_of_the_serve_processes(tmp_path, kill):
    from benchmarks.bench_durability import run

    res = run(cycles=2, clients=4, min_traffic_s=1.5, max_traffic_s=3.0, state_dir=tmp_path, kill=kill)
    assert res["acknowledged"] > 20  # traffic really flowed through both cycles
    assert all(c["acked_this_cycle"] > 0 for c in res["per_cycle"])
    if kill == "serve":  # the process holding the state was among the killed, every cycle
        assert all(any("SelectorDeployment" in t for t in c["killed"]) for c in res["per_cycle"])
        # the selector's feedback counter on the metrics endpoint (docs/metrics.md) counts what was acked
        assert res["metrics_endpoint"]["acked"] > 0
        assert res["metrics_endpoint"]["feedback_counter_matches_acked"], res["metrics_endpoint"]
    assert res["lost"] == 0, res["final_check"]
    assert res["over_counted"] == 0, res["final_check"]
    # every acknowledged feedback is counted, and nothing beyond the unanswered ones was added
    for m, row in res["final_check"]["models"].items():
        assert row["acked"] <= row["in_posterior"] <= row["acked"] + row["unanswered"], (m, row)
