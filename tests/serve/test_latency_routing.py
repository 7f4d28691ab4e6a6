"""Latency in the decision, through the running Serve app over HTTP: a slow replay candidate loses traffic.

The pool is RouteLLM's two replays, with Mixtral (the cheap one, which cost awareness favours) made 0.4 s
slow (``options.delay_s``) and ``selector.latency_weight: 2.0`` (a second of expected latency costs 2.0 of
score). Before Mixtral's first call nothing is known of its latency; once the proxy has measured it,
routed requests move to GPT-4. Each answer carries the chosen candidate's ``expected_latency``, and
``/metrics`` the measured means.
"""

from __future__ import annotations

import re

import httpx
import pytest
import yaml

from tests.helpers import CONF_DIR, serve_app

pytestmark = [pytest.mark.ray, pytest.mark.slow]

KEY = "k-latency-user-0001"
HDR = {"Authorization": f"Bearer {KEY}"}
SLOW, FAST = "mixtral-8x7b-instruct", "gpt-4-1106-preview"
DELAY_S = 0.4


@pytest.fixture(scope="module")
def app(ray_cluster, shared_data, tmp_path_factory):
    from rlrouter.data.logged import load_routellm

    pool = yaml.safe_load((CONF_DIR / "pool" / "routellm_replay.yaml").read_text())
    for c in pool["candidates"]:
        if c["name"] == SLOW:
            c["options"]["delay_s"] = DELAY_S
    state = tmp_path_factory.mktemp("latency")
    args = {"pool": pool, "selector": {"seed": 0, "latency_weight": 2.0, "storage_path": str(state / "state.json")}}
    prompts = load_routellm(shared_data / "routellm" / "gsm8k" / "gsm8k_responses.csv").prompts[:40]
    yield from ((url, prompts) for url in serve_app("rlrouter-latency", KEY, "dana", {"dev": True}, state, args))


def test_traffic_moves_away_from_a_slow_candidate_once_its_latency_is_measured(app):
    base, prompts = app
    chosen, expected = [], []
    with httpx.Client(base_url=base, timeout=60) as client:
        for p in prompts:
            r = client.post("/v1/chat/completions", headers=HDR,
                            json={"model": "auto", "messages": [{"role": "user", "content": p}]})
            assert r.status_code == 200, r.text
            chosen.append(r.json()["model"])
            expected.append(r.json()["x_rlrouter"].get("expected_latency"))
        first_slow = chosen.index(SLOW)  # cost awareness sends it some requests before it is measured
        after = chosen[first_slow + 2:]  # its latency reaches the selector in the background, after the reply
        assert len(after) >= 20, chosen
        # a Thompson draw on Beta(1, 1), x 1.2 for its price, minus 0.8: P(Mixtral) ~ 0.07 (0.5 without)
        assert after.count(SLOW) / len(after) < 0.25, (chosen, expected)
        slow_seen = [e for m, e in zip(chosen, expected) if m == SLOW and e]
        assert slow_seen and all(e["total_ms"] >= DELAY_S * 1e3 for e in slow_seen)
        fast_seen = [e for m, e in zip(chosen, expected) if m == FAST and e]
        assert fast_seen and all(e["total_ms"] < DELAY_S * 1e3 / 2 for e in fast_seen)
        # /route returns the expected latency of its choice too
        r = client.post("/route", json={"query": prompts[0]}, headers=HDR)
        assert r.status_code == 200 and r.json()["expected_latency"]["calls"] >= 1
        m = re.search(rf'^rlrouter_candidate_expected_latency_seconds{{kind="total",model="{SLOW}"}} (\S+)$',
                      client.get("/metrics").text, re.M)
        assert m and float(m.group(1)) >= DELAY_S
