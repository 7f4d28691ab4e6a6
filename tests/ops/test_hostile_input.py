"""Hostile input, small real version of benchmarks/bench_fuzz.py: schemathesis cases generated
from the app's own OpenAPI schema (valid and invalid), plus hand-made attacks (oversized and broken
bodies, keys of other users), against the real FastAPI app around a real selector and the replay pool.
"""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

pytest.importorskip("schemathesis")


@pytest.fixture(scope="module")
def app(tmp_path_factory, shared_data):
    from benchmarks.bench_fuzz import inprocess_app

    return inprocess_app(tmp_path_factory.mktemp("fuzz"))


def test_judge_flags_what_it_must():
    from benchmarks.bench_fuzz import judge

    assert judge(500, {}) == "5xx"
    assert judge(422, {"detail": "x"}) == "4xx without the error shape"
    assert judge(422, {"error": {"message": "bad", "field": None, "code": 422}}) == "422 names no field"
    assert judge(422, {"error": {"message": "field 'query': too long", "field": "query", "code": 422}}) is None
    assert judge(401, {"error": {"message": "missing API key: send 'Authorization: Bearer <key>'",
                                 "field": None, "code": 401}}) is None
    assert judge(200, {"anything": 1}) is None


@pytest.mark.timeout(600)
def test_fuzzed_api_never_5xx_and_every_4xx_names_the_field(app):
    import schemathesis

    from benchmarks.bench_fuzz import Tally, fuzz_schema, state_digest

    tally = Tally()
    client = TestClient(app, raise_server_exceptions=False)

    def digest():
        return state_digest(lambda p: (lambda r: (r.status_code, r.json()))(
            client.get(p, headers={"Authorization": "Bearer k-ops"})))

    fuzz_schema(schemathesis.openapi.from_asgi("/openapi.json", app), 300, tally, seed=1, digest=digest,
                audit_share=0.5)
    assert tally.cases >= 300
    assert tally.server_errors == 0, tally.failures[:5]
    assert tally.audited > 20 and not tally.changed, tally.changed[:5]  # refused requests changed nothing
    assert not tally.failures, tally.failures[:5]
    # the fuzzing got past auth and validation, not only 401s
    assert tally.by_status[200] > 10 and tally.by_status[422] > 10 and tally.by_status[401] > 10


def test_attacks_and_auth_cases_hold(app):
    from benchmarks.bench_fuzz import Tally, attacks

    client = TestClient(app, raise_server_exceptions=False)

    def call(method, path, headers, content):
        r = client.request(method, path, headers=headers, content=content or None)
        try:
            return r.status_code, r.json()
        except ValueError:
            return r.status_code, r.text

    tally = Tally()
    rows = attacks(call, tally)
    broken = [r for r in rows if not r["held"]]
    assert not broken, broken
    assert not tally.failures, tally.failures
    by = {r["attack"]: r for r in rows}
    # every refused attack was audited, and left the state as it was
    assert all(r["state_unchanged"] is True for r in rows if r["status"] >= 400), rows
    assert tally.audited == sum(r["status"] >= 400 for r in rows) and not tally.changed
    assert by["user key promotes"]["status"] == 403 and by["release body over the cap"]["status"] == 413
    assert by["body over the cap"]["status"] == 413
    assert by["act for another user"]["field"] == "user_id"
    assert by["feedback on another user's decision"]["field"] == "request_id"
    # bob's posteriors got exactly bob's one win: alice's attempts wrote nothing
    stats = client.get("/stats", headers={"Authorization": "Bearer k-ops"}).json()
    bob = stats["users"]["bob"]
    assert sum(p["explicit"] for p in bob.values()) == 1
    assert "alice" not in stats["users"] or sum(p["explicit"] for p in stats["users"]["alice"].values()) == 0


def test_the_state_digest_sees_a_write(tmp_path, shared_data):
    """The refusal audit compares ``state_digest`` before and after: it must change when a request writes. Last in
    this module: its app installs its own service."""
    from benchmarks.bench_fuzz import inprocess_app, state_digest

    client = TestClient(inprocess_app(tmp_path), raise_server_exceptions=False)

    def get(path):
        r = client.get(path, headers={"Authorization": "Bearer k-ops"})
        return r.status_code, r.json()

    alice = {"Authorization": "Bearer k-alice"}
    before = state_digest(get)
    rid = client.post("/route", json={"query": "what is 3+4?"}, headers=alice).json()["request_id"]
    routed = state_digest(get)
    assert routed != before and routed["pending_decisions"] == before["pending_decisions"] + 1
    assert client.post("/feedback", json={"request_id": rid, "outcome": "win"}, headers=alice).status_code == 200
    assert state_digest(get) != routed
