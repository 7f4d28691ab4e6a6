"""Durability, small real version of benchmarks/bench_durability.py: the app with every stateful part on (the
selector's write-ahead log, the traffic log with exploration and a judge, a served router's release and its
journal), under mixed traffic (/route, a served router, chat, streamed chat, feedback). The Serve processes
(controller, proxy, the selector replica, the served-routers replica) get SIGKILL twice and come back on the
same files; with ``stack`` the whole server (its own Ray cluster, Serve, the app) dies once and is started again.
Every acknowledged request and feedback is in the traffic log once, every acknowledged feedback in the
posteriors, and the release is where the acknowledged operator steps left it (a promotion in between), with
its counts.
"""

from __future__ import annotations

import pytest

pytestmark = [pytest.mark.ray, pytest.mark.slow]


@pytest.fixture(scope="module")
def router_dir(shared_data, tmp_path_factory):
    from benchmarks.bench_durability import train_router

    return train_router(tmp_path_factory.mktemp("durability") / "router")


@pytest.mark.timeout(900)
@pytest.mark.parametrize("kill, cycles", [("serve", 2), ("stack", 1)])
def test_everything_acknowledged_survives_kill9_of_the_serve_processes(tmp_path, router_dir, kill, cycles):
    from benchmarks.bench_durability import run

    res = run(cycles=cycles, clients=4, min_traffic_s=3.0, max_traffic_s=5.0, state_dir=tmp_path, kill=kill,
              router_dir=router_dir, end_every=2)
    assert all(c["acked_this_cycle"] > 0 for c in res["per_cycle"])  # traffic really flowed through both cycles
    log = res["final_check"]["traffic_log"]
    assert set(log["acknowledged_by_kind"]) == {"route", "router", "chat", "stream"}, log
    assert log["explore_records"] > 0 and log["judge_grades"] > 0, log
    if kill == "serve":  # the processes holding the state were among the killed, every cycle
        for name in ("SelectorDeployment", "ServedRoutersDeployment"):
            assert all(any(name in t for t in c["killed"]) for c in res["per_cycle"]), name
        # the selector's feedback counter on the metrics endpoint (docs/metrics.md) counts what was acked
        assert res["metrics_endpoint"]["acked"] > 0
        assert res["metrics_endpoint"]["feedback_counter_matches_acked"], res["metrics_endpoint"]
    assert res["lost"] == 0 and res["lost_in_any_cycle"] == 0, res["final_check"]
    assert res["double_counted"] == 0 and res["double_counted_in_any_cycle"] == 0, res["final_check"]
    assert res["5xx"] == 0, res["statuses"]
    # the release: version 2's canary resumed with its counts; in two cycles, promoted and version 3's running
    rel = res["final_check"]["releases"]
    want = ("2", "3") if cycles == 2 else ("1", "2")
    assert rel["state_as_acknowledged"] and (rel["current"], rel["running"]) == want, rel
    assert sum(c["acked"] for c in rel["counts"].values()) > 0, rel
    for m, row in res["final_check"]["selector"]["models"].items():
        assert row["acked"] <= row["in_posterior"] <= row["acked"] + row["unanswered"], (m, row)
