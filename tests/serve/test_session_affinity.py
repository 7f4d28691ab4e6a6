"""Session affinity through the running Serve app, over HTTP, with multi-turn clients.

``selector.session_affinity`` on: each conversation (its ``session_id``, the ``X-Session-Id`` header, or the
opening of its ``messages``) keeps the candidate its first turn was routed to, although the Thompson
draws of later turns propose the other candidate about half the time; ``/route`` restricted to the
other candidate moves the session (``unavailable``) and the pin follows. ``/metrics`` counts the turns
by outcome and the moves by reason, and ``/stats`` the sessions pinned. The pool is the replay of
RouteLLM's logged outcomes (two candidates), whose prompts every turn asks.
"""

from __future__ import annotations

import re

import httpx
import pytest
import yaml

from tests.helpers import CONF_DIR, serve_app

pytestmark = [pytest.mark.ray, pytest.mark.slow]

APP = "rlrouter-affinity"
KEY = "k-affinity-user-0001"
HDR = {"Authorization": f"Bearer {KEY}"}


@pytest.fixture(scope="module")
def app(ray_cluster, shared_data, tmp_path_factory):
    from rlrouter.data.logged import load_routellm

    state = tmp_path_factory.mktemp("affinity")
    args = {"pool": yaml.safe_load((CONF_DIR / "pool" / "routellm_replay.yaml").read_text()),
            "selector": {"seed": 0, "session_affinity": True, "min_samples": 0,
                         "storage_path": str(state / "state.json")}}
    prompts = load_routellm(shared_data / "routellm" / "gsm8k" / "gsm8k_responses.csv").prompts[:8]
    yield from ((url, prompts) for url in serve_app(APP, KEY, "carol", {"dev": True}, state, args))


def _conversation(client: httpx.Client, prompts: list[str], turns: int, **how) -> list[httpx.Response]:
    """One multi-turn chat: each turn sends the whole conversation so far, as an OpenAI client does."""
    messages, out = [{"role": "system", "content": "Answer briefly."}], []
    for p in prompts[:turns]:
        messages.append({"role": "user", "content": p})
        r = client.post("/v1/chat/completions", json={"model": "auto", "messages": messages, **how.get("body", {})},
                        headers={**HDR, **how.get("headers", {})})
        assert r.status_code == 200, r.text
        out.append(r)
        messages.append({"role": "assistant", "content": r.json()["choices"][0]["message"]["content"]})
    return out


def _metric(text: str, name: str, **labels: str) -> float:
    sel = ",".join(f'{k}="{v}"' for k, v in labels.items())
    m = re.search(rf"^{name}_total\{{{re.escape(sel)}\}} (\S+)$", text, re.M)
    return float(m.group(1)) if m else 0.0


def test_conversations_keep_their_candidate_and_a_restricted_turn_moves_it(app):
    base, prompts = app
    with httpx.Client(base_url=base, timeout=60) as client:
        before = client.get("/metrics").text
        convs = [_conversation(client, prompts, 6, body={"session_id": "by-field"}),
                 _conversation(client, prompts[1:], 6, headers={"X-Session-Id": "by-header"}),
                 _conversation(client, prompts[2:], 6)]  # no id: the conversation's opening is its key
        outcomes = []
        for turns in convs:
            models = {r.headers["X-RLRouter-Model"] for r in turns}
            verdicts = [r.json()["x_rlrouter"]["affinity"] for r in turns]
            assert len(models) == 1, verdicts  # no bounce between candidates mid-conversation
            assert verdicts[0]["outcome"] == "new" and [v["turn"] for v in verdicts] == list(range(1, 7))
            assert all(v["model"] == turns[0].json()["model"] for v in verdicts)
            outcomes += [v["outcome"] for v in verdicts[1:]]
        # the draws proposed the other candidate on some later turns, and the pin held each time
        assert "held" in outcomes and set(outcomes) <= {"kept", "held"}, outcomes

        # /route in the same session, restricted to the other candidate: the pin cannot answer, it moves
        pinned = convs[0][0].json()["model"]
        other = next(m for m in ("gpt-4-1106-preview", "mixtral-8x7b-instruct") if m != pinned)
        r = client.post("/route", json={"query": prompts[0], "session_id": "by-field", "candidates": [other]},
                        headers=HDR)
        assert r.status_code == 200, r.text
        assert r.json()["affinity"] == {"model": other, "outcome": "moved", "reason": "unavailable",
                                        "proposed": other, "turn": 7, "moves": 1}
        # and the session now stays on the candidate it moved to
        r = client.post("/route", json={"query": prompts[1], "session_id": "by-field"}, headers=HDR)
        assert r.json()["model"] == other and r.json()["affinity"]["outcome"] in ("kept", "held")

        # a turn without a session is decided afresh, with no affinity block
        r = client.post("/route", json={"query": prompts[2]}, headers=HDR)
        assert r.status_code == 200 and r.json()["affinity"] is None

        after = client.get("/metrics").text
        assert _metric(after, "rlrouter_session_affinity_turns", outcome="new") - \
            _metric(before, "rlrouter_session_affinity_turns", outcome="new") == 3
        assert _metric(after, "rlrouter_session_affinity_turns", outcome="held") >= outcomes.count("held")
        assert _metric(after, "rlrouter_session_affinity_moves", reason="unavailable") == 1
        stats = client.get("/stats", headers=HDR).json()["affinity"]
        assert stats["enabled"] is True and stats["sessions"] == 3 and stats["moves"] == 1
        assert stats["moves_per_session"] == pytest.approx(1 / 3)
