"""Served routers (RouteLLM's ``router-<name>-<threshold>``): the model-name parser, and the service driving
saved routers for /route, chat completions and /feedback (a frozen kNN router, an online selector)."""

from __future__ import annotations

import pytest
import yaml
from fastapi.testclient import TestClient

from rlrouter.serving.served_routers import RouterChoice, ServedRouters, parse_router_model, router_entries
from tests.helpers import CONF_DIR, hash_embed

ROUTERS = {"mf": True, "knn": True, "knn-v2": True, "selector": False}


@pytest.mark.parametrize("model, choice", [
    ("router-mf", RouterChoice("mf")),
    ("router-mf-0.116", RouterChoice("mf", threshold=0.116)),
    ("Router-MF-0.5", RouterChoice("mf", threshold=0.5)),
    ("router-knn--0.05", RouterChoice("knn", threshold=-0.05)),
    ("router-knn-v2", RouterChoice("knn-v2")),  # a hyphenated name wins over knn + a threshold 'v2'
    ("router-knn-v2-1e-3", RouterChoice("knn-v2", threshold=0.001)),
    ("router-mf-share0.3", RouterChoice("mf", strong_share=0.3)),
    ("router-mf-share1", RouterChoice("mf", strong_share=1.0)),
    ("router-selector", RouterChoice("selector")),
])
def test_router_model_names_parse(model, choice):
    assert parse_router_model(model, ROUTERS) == choice


@pytest.mark.parametrize("model, message", [
    ("router-bert-0.5", r"no served router in 'router-bert-0.5'; served routers: \['knn', 'knn-v2', 'mf', "
                        r"'selector'\]"),
    ("router-mf-high", "'high' in 'router-mf-high' is not a threshold"),
    ("router-mf-share1.5", "the strong share in 'router-mf-share1.5' must be in \\[0, 1\\]"),
    ("router-mf-sharex", "is not a strong share in \\[0, 1\\]"),
    ("router-mf-inf", "must be a finite number"),
    ("router-mf-nan", "must be a finite number"),
    ("router-selector-0.5", "router 'selector' picks a candidate itself and takes no threshold"),
    ("mf-0.5", "does not start with 'router-'"),
])
def test_bad_router_model_names_name_the_field(model, message):
    with pytest.raises(ValueError, match=f"field 'model': .*{message}"):
        parse_router_model(model, ROUTERS)


def test_router_entries_make_paths_absolute_and_name_bad_fields(tmp_path):
    e = router_entries({"mf": "outputs/routers/mf", "sel": {"path": "/abs/sel", "state": "s.json", "version": 7}},
                       tmp_path)
    assert e == {"mf": {"path": str(tmp_path / "outputs/routers/mf"), "state": None, "version": "1"},
                 "sel": {"path": "/abs/sel", "state": str(tmp_path / "s.json"), "version": "7"}}
    with pytest.raises(ValueError, match="routers.mf.version: a version is"):
        router_entries({"mf": {"path": "x", "version": "a b"}}, tmp_path)
    with pytest.raises(ValueError, match="routers.m@f: a router name holds no '@'"):
        router_entries({"m@f": "x"}, tmp_path)
    with pytest.raises(ValueError, match="routers.mf.path: missing"):
        router_entries({"mf": {"state": "x"}}, tmp_path)
    with pytest.raises(ValueError, match=r"routers.mf: unknown fields \['threshold'\]"):
        router_entries({"mf": {"path": "x", "threshold": 0.5}}, tmp_path)
    with pytest.raises(ValueError, match="routers.auto: a router name"):
        router_entries({"auto": "x"}, tmp_path)


# ---------------------------------------------------------------- the service, with saved routers


class LocalRouters:
    """ServedRouters in process, as the app's deployment handle serves it (async)."""

    def __init__(self, host: ServedRouters):
        self.host = host

    async def decide(self, name, query, **kw):
        return self.host.decide(name, query, **kw)

    async def feedback(self, name, request_id, **kw):
        return self.host.feedback(name, request_id, **kw)

    async def release(self, name, action, args):
        return self.host.release(name, action, args)

    async def status(self):
        return self.host.status()


@pytest.fixture(scope="module")
def logged(shared_data):
    from rlrouter.routers.reader import read_eval_set

    es = read_eval_set(shared_data / "routellm" / "mmlu" / "mmlu_philosophy.csv",
                       prices={"gpt-4-1106-preview": {"input": 10, "output": 30},
                               "mistralai/Mixtral-8x7B-Instruct-v0.1": {"input": 0.6, "output": 0.6}})
    return es.subset(range(80))


@pytest.fixture
def client(logged, tmp_path):
    from rlrouter.routers.base import RouterContext, build_router
    from rlrouter.routers.saved import Calibration, save_router
    from rlrouter.pool.pool import CandidatePool
    from rlrouter.selector import Selector, SelectorConfig
    from rlrouter.serving.api import create_app, install
    from rlrouter.serving.auth import ApiKeyAuth
    from rlrouter.serving.config import ServingConfig
    from rlrouter.serving.served_routers import read_manifests
    from rlrouter.serving.service import LocalSelectorClient, RouterService

    weak, strong = logged.index("mistralai/Mixtral-8x7B-Instruct-v0.1"), logged.index("gpt-4-1106-preview")
    ctx = RouterContext(candidates=logged.names, weak=weak, strong=strong, train=logged, embed=hash_embed)
    for name, spec in {"knn": {"type": "knn", "k": 5}, "knn2": {"type": "knn", "k": 1},
                       "selector": {"type": "selector", "config": {"enable_personalization": False}}}.items():
        r = build_router({**spec, "name": name}, ctx)
        r.fit(logged)
        cal = Calibration.from_scores(r.strong_score(logged.prompts)) if name != "selector" else None
        save_router(r, tmp_path / name, type_name=spec["type"], spec=spec, candidates=logged.candidates, weak=weak,
                    strong=strong, calibration=cal, embedding={"model": "hash"})
    entries = router_entries({"knn": str(tmp_path / "knn"), "selector": str(tmp_path / "selector")}, tmp_path)
    host = ServedRouters(entries, embed=hash_embed)
    pool_cfg = yaml.safe_load((CONF_DIR / "pool" / "routellm_replay.yaml").read_text())
    pool = CandidatePool.from_config(pool_cfg)
    cfg = SelectorConfig(storage_path=str(tmp_path / "s.json"), seed=0)
    selector = Selector(cfg, pool.names)
    selector.load()
    serving = ServingConfig(api_keys=[{"key": "k-alice", "user_id": "alice"},
                                      {"key": "k-ops", "user_id": "ops", "admin": True}])
    name_map = {c["name"]: (c.get("options") or {}).get("model", c["name"]) for c in pool_cfg["candidates"]}
    svc = RouterService(LocalSelectorClient(selector), cfg, serving, pool.names, pool=pool, name_map=name_map,
                        served_routers=LocalRouters(host), router_manifests=read_manifests(entries))
    install(svc, ApiKeyAuth(serving.keys({})))
    return TestClient(create_app()), selector, host


ALICE = {"Authorization": "Bearer k-alice"}


def test_route_and_chat_through_a_served_threshold_router(client, logged):
    c, selector, host = client
    knn = host.routers["knn"]
    q = logged.prompts[3]
    score = float(knn.router.strong_score([q])[0])
    for model, t in (("router-knn", knn.manifest.threshold), (f"router-knn-{score}", score),
                     (f"router-knn-{score + 1e-6}", score + 1e-6),
                     ("router-knn-share0.7", knn.manifest.calibration.threshold(0.7))):
        r = c.post("/route", json={"query": q, "model": model}, headers=ALICE)
        assert r.status_code == 200, r.text
        body = r.json()
        want = "gpt-4-1106-preview" if score >= t else "mixtral-8x7b-instruct"
        assert body["model"] == want and body["mode"] == "router:knn", (model, body)
        assert body["router"]["score"] == pytest.approx(score) and body["router"]["threshold"] == pytest.approx(t)
        assert body["router"]["weak"] == "mixtral-8x7b-instruct" and body["router"]["strong"] == "gpt-4-1106-preview"
        assert selector.pending(body["request_id"]).mode == "router:knn"
    r = c.post("/route", json={"query": q, "model": "router-knn-share0"}, headers=ALICE).json()
    assert r["model"] == "mixtral-8x7b-instruct" and r["router"]["threshold"] is None  # +inf: nothing to strong
    assert r["router"]["training_strong_share"] == 0.0
    # chat completions: the replay answers the logged prompt the router sent to it
    r = c.post("/v1/chat/completions", headers=ALICE,
               json={"model": "router-knn-share1", "messages": [{"role": "user", "content": q}]})
    assert r.status_code == 200, r.text
    data = r.json()
    assert data["model"] == "gpt-4-1106-preview" and data["x_rlrouter"]["router"]["name"] == "knn"
    assert r.headers["X-RLRouter-Mode"] == "router:knn"
    # feedback reaches the app's selector and says the kNN router is frozen
    fb = c.post("/feedback", json={"request_id": data["x_rlrouter"]["request_id"], "outcome": "win"}, headers=ALICE)
    assert fb.status_code == 200, fb.text
    assert fb.json()["applied"][0]["model"] == "gpt-4-1106-preview"
    assert fb.json()["router"]["learned"] is False and "frozen" in fb.json()["router"]["note"]
    models = [m["id"] for m in c.get("/v1/models", headers=ALICE).json()["data"]]
    assert "router-knn" in models and "router-selector" in models


def test_served_selector_learns_from_feedback(client, logged):
    c, selector, host = client
    inner = host.routers["selector"].router.selector
    before = {m: (p.alpha, p.beta) for m, p in inner.state.global_.items()}
    r = c.post("/route", json={"query": logged.prompts[5], "model": "router-selector"}, headers=ALICE)
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["mode"] == "router:selector" and body["router"]["online"] is True
    rid = body["request_id"]
    assert rid in inner.state.pending  # one id: the app's decision and the served selector's
    fb = c.post("/feedback", json={"request_id": rid, "outcome": "loss"}, headers=ALICE).json()
    assert fb["router"]["learned"] is True and fb["router"]["deltas"][0]["d_beta"] == 1.0
    chosen = body["router"]["candidate"]  # in the names it was trained on (the logged ones)
    assert inner.state.global_[chosen].beta == before[chosen][1] + 1.0
    again = c.post("/feedback", json={"request_id": rid, "outcome": "win"}, headers=ALICE)
    assert again.status_code == 409  # one feedback per decision, for the router too


@pytest.mark.parametrize("body, field, status", [
    ({"model": "router-nope-0.5"}, "model", 400),
    ({"model": "router-knn-abc"}, "model", 400),
    ({"model": "router-knn-share2"}, "model", 400),
    ({"model": "router-selector-0.3"}, "model", 400),
    ({"model": "gpt-4-1106-preview"}, "model", 400),
    ({"model": "router-knn", "candidates": ["gpt-4-1106-preview"]}, "candidates", 400),
])
def test_bad_router_requests_are_400_naming_the_field(client, body, field, status):
    c, _, _ = client
    r = c.post("/route", json={"query": "2+2?", **body}, headers=ALICE)
    assert r.status_code == status and r.json()["error"]["field"] == field, r.text
    if body.get("candidates") is None:
        r = c.post("/v1/chat/completions", headers=ALICE,
                   json={"model": body["model"], "messages": [{"role": "user", "content": "hi"}]})
        expected = 404 if body["model"] == "gpt-4-1106-preview" else 400  # a candidate: its replay has no answer
        assert r.status_code == expected and r.json()["error"]["field"] in ("model", "messages"), r.text



# ---------------------------------------------------------------- releases: a new version, its canary, the verdict

OPS = {"Authorization": "Bearer k-ops"}


def _round(c, logged, n, outcome_of):
    """n /route decisions of router-knn and their feedback; outcome_of(version) -> win | loss."""
    seen = []
    for i in range(n):
        r = c.post("/route", json={"query": logged.prompts[i % len(logged.prompts)], "model": "router-knn"},
                   headers=ALICE).json()
        version = r["router"]["version"]
        fb = c.post("/feedback", json={"request_id": r["request_id"], "outcome": outcome_of(version)},
                    headers=ALICE).json()
        assert fb["router"]["version"] == version
        seen.append(version)
        if fb["router"].get("event"):
            return seen, fb["router"]
    return seen, None


def test_a_canary_that_wins_is_promoted_without_a_restart(client, logged, tmp_path):
    c, _, host = client
    load = {"version": "2", "path": str(tmp_path / "knn2"), "release": {"canary_share": 0.5, "min_feedback": 8}}
    r = c.post("/v1/routers/knn/versions", json=load, headers=ALICE)
    assert r.status_code == 403 and r.json()["error"]["field"] == "authorization"
    r = c.post("/v1/routers/knn/versions", json=load, headers=OPS)
    assert r.status_code == 200, r.text
    rel = r.json()["routers"]["knn"]["release"]
    assert rel["current"] == "1" and rel["candidate"] == "2" and rel["rule"]["canary_share"] == 0.5
    # a decision of a frozen router under a canary carries the mixture's probability of its route
    d = host.decide("knn", logged.prompts[0])
    assert d["version"] in ("1", "2") and d["propensity"] in (0.5, 1.0)
    seen, verdict = _round(c, logged, 200, lambda v: "win" if v == "2" else "loss")
    assert verdict is not None and verdict["event"]["event"] == "promoted", seen
    assert verdict["release"]["difference"]["lo"] > 0 and {"1", "2"} <= set(seen)
    status = c.get("/v1/routers", headers=ALICE).json()["routers"]["knn"]
    assert status["current"] == "2" and status["release"] is None and status["ended"][0]["state"] == "promoted"
    after = c.post("/route", json={"query": logged.prompts[1], "model": "router-knn"}, headers=ALICE).json()
    assert after["router"]["version"] == "2"  # no canary now: the promoted version decides everything
    metrics = c.get("/metrics").text
    assert 'rlrouter_router_release_events_total{event="promoted",router="knn"} 1.0' in metrics
    assert 'rlrouter_router_decisions_total{router="knn",version="2"}' in metrics


def test_a_canary_that_loses_is_rolled_back_and_feedback_in_flight_still_counts(client, logged, tmp_path):
    c, _, host = client
    load = {"version": "2", "path": str(tmp_path / "knn2"), "release": {"canary_share": 0.5, "min_feedback": 8}}
    assert c.post("/v1/routers/knn/versions", json=load, headers=OPS).status_code == 200
    # decisions made before the verdict, whose feedback comes after it
    in_flight = []
    while not any(v == "2" for v, _ in in_flight):
        r = c.post("/route", json={"query": logged.prompts[7], "model": "router-knn"}, headers=ALICE).json()
        in_flight.append((r["router"]["version"], r["request_id"]))
    seen, verdict = _round(c, logged, 200, lambda v: "loss" if v == "2" else "win")
    assert verdict is not None and verdict["event"]["event"] == "rolled_back"
    assert c.get("/v1/routers", headers=ALICE).json()["routers"]["knn"]["current"] == "1"
    for version, rid in in_flight:
        fb = c.post("/feedback", json={"request_id": rid, "outcome": "win"}, headers=ALICE).json()["router"]
        assert fb["version"] == version and fb["release"]["state"] == "rolled_back"
    assert fb["release"]["late_feedback"] == len(in_flight)
    # the version set aside stays loaded and can be asked by name; an unknown version is a 400 on the model
    pinned = c.post("/route", json={"query": logged.prompts[2], "model": "router-knn@2"}, headers=ALICE).json()
    assert pinned["router"]["version"] == "2"
    r = c.post("/route", json={"query": "x", "model": "router-knn@9"}, headers=ALICE)
    assert r.status_code == 400 and "no version '9'" in r.json()["error"]["message"]


@pytest.mark.parametrize("body, field", [
    ({"version": "2"}, "path"),
    ({"path": "x"}, "version"),
    ({"version": "2", "path": "/nowhere"}, "path"),
    ({"version": "a b", "path": "x"}, "version"),
    ({"version": "1", "path": "x"}, "version"),  # already loaded
    ({"version": "2", "path": "x", "canary": 0.5}, "canary"),
    ({"version": "2", "path": "x", "": 1}, "body"),  # a key that cannot name itself: the body (the fuzzer's find)
    ({"version": "2", "path": "x", "a b:c": 1}, "body"),
    ({"version": "2", "path": "KNN2", "release": {"canary_share": 1.5}}, "release.canary_share"),
])
def test_bad_release_requests_are_400_naming_the_field(client, tmp_path, body, field):
    c, _, _ = client
    body = {k: (str(tmp_path / "knn2") if v == "KNN2" else v) for k, v in body.items()}
    r = c.post("/v1/routers/knn/versions", json=body, headers=OPS)
    assert r.status_code == 400 and r.json()["error"]["field"] == field, r.text
    assert c.post("/v1/routers/knn/promote", headers=OPS).status_code == 400  # no release in progress
    assert c.post("/v1/routers/nope/promote", headers=OPS).status_code == 404


def test_a_new_version_keeps_the_candidates_and_the_kind_of_router(client, tmp_path):
    c, _, _ = client
    r = c.post("/v1/routers/knn/versions", json={"version": "2", "path": str(tmp_path / "selector")}, headers=OPS)
    assert r.status_code == 400 and r.json()["error"]["field"] == "path"  # same candidates, but no threshold
    assert "router 'knn' takes a threshold, and so must a new version" in r.json()["error"]["message"]
    r = c.post("/v1/routers/knn/versions", json={"version": "2", "path": str(tmp_path / "knn2")}, headers=OPS)
    assert r.status_code == 200
    r = c.post("/v1/routers/knn/rollback", json={"reason": "test"}, headers=OPS).json()
    assert r["event"]["event"] == "rolled_back" and r["event"]["reason"] == "test"
