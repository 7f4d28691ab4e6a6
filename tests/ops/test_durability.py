"""Selector durability, small real version of benchmarks/bench_durability.py (issue 8): the whole Serve
stack (its own Ray cluster, Serve, the selector replica) gets SIGKILL twice during concurrent /feedback
traffic and is restarted on the same state file; every feedback answered 200 is in the posteriors.
"""

from __future__ import annotations

import pytest

pytestmark = [pytest.mark.ray, pytest.mark.slow]


@pytest.mark.timeout(900)
def test_acknowledged_feedback_survives_kill9_of_the_serve_stack(tmp_path):
    from benchmarks.bench_durability import run

    res = run(cycles=2, clients=4, min_traffic_s=1.5, max_traffic_s=3.0, state_dir=tmp_path)
    assert res["acknowledged"] > 20  # traffic really flowed through both cycles
    assert all(c["acked_this_cycle"] > 0 for c in res["per_cycle"])
    assert res["lost"] == 0, res["final_check"]
    assert res["over_counted"] == 0, res["final_check"]
    # every acknowledged feedback is counted, and nothing beyond the unanswered ones was added
    for m, row in res["final_check"]["models"].items():
        assert row["acked"] <= row["in_posterior"] <= row["acked"] + row["unanswered"], (m, row)
