"""End to end: every router type evaluate_router ranks (but Router-R1, in test_served_router_r1.py) is trained
and saved by the train_router job on real RouteLLM rows, loaded by the running Serve app from its ``routers``
config, and driven over real HTTP RouteLLM-style: ``model: "router-<name>[-<threshold>|-share<s>]"`` on
``/route`` and chat completions, then ``/feedback``, which the served selector learns from. Last, a release
through the running app: a new version loaded beside the current one, its canary promoted on live feedback,
the next one rolled back, and feedback given after the swap on decisions made before it.

Small on purpose: 200 logged prompts (``eval=smoke``), MF for 2 epochs, the encoder router for 2
supervised steps, GMTRouter and the intent classifier from the small fixtures of tests/gmt and
tests/serve/test_app_trained_routers.py. The pool is the app's default one (serve.app).
"""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest
from hydra import compose, initialize_config_dir

from tests.gmt.conftest import small_graph, small_logged, small_sim  # noqa: F401 - fixtures, reused
from tests.helpers import CONF_DIR, ROOT, serve_app
from tests.serve.test_app_trained_routers import gmt_checkpoint, intent_checkpoint  # noqa: F401 - fixtures

pytestmark = [pytest.mark.ray, pytest.mark.slow]

APP = "rlrouter-served-routers"
KEY = "served-routers-test-key-0123456789"
H = {"Authorization": f"Bearer {KEY}"}
ADMIN = "served-routers-admin-key-0123456789"
OPS = {"Authorization": f"Bearer {ADMIN}"}
GPT4, MIXTRAL = "gpt-4-1106-preview", "mixtral-8x7b-instruct"
LEARNERS = ("selector", "feedback")  # the served routers that learn from /feedback
SMOKE = ["eval=smoke", "eval.max_prompts=200", "eval.split.by=question"]
# name -> train_router overrides: the config entries evaluate_router uses (conf/eval/router, eval.baselines)
ROUTERS = {
    "mf": ["baseline=mf", "eval.baselines.mf.epochs=2"],
    "knn": ["baseline=knn"],
    "probe": ["eval/router@router=probe", "router.features=[form,embedding]"],  # probe.yaml's llm features: slow
    "probe_form_options": ["eval/router@router=probe_form_options"],
    "encoder": ["+router={type: encoder, name: encoder, train: {max_length: 32, supervised: {max_steps: 2, "
                "batch_size: 8}, ppo: {iterations: 0}}}"],
    "selector": ["eval/router@router=selector"],
    "feedback": ["eval/router@router=feedback", "+router.base.epochs=2"],
    "gmtrouter": ["eval/router@router=gmtrouter"],
    "intent": ["eval/router@router=intent"],
}


@pytest.fixture(scope="module")
def router_dirs(shared_data, gmt_checkpoint, intent_checkpoint, tmp_path_factory):  # noqa: F811
    from rlrouter.eval.train_router import run

    out = tmp_path_factory.mktemp("routers")
    extra = {"gmtrouter": [f"router.checkpoint={gmt_checkpoint}"],
             "intent": [f"router.checkpoint={intent_checkpoint[0]}"]}
    mp = pytest.MonkeyPatch()
    mp.chdir(ROOT)  # the config's data paths are relative to the project root
    try:
        with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
            for name, overrides in ROUTERS.items():
                cfg = compose(config_name="train_router",
                              overrides=[*SMOKE, *overrides, *extra.get(name, []), f"output_dir={out / name}"])
                run(cfg)
    finally:
        mp.undo()
    return out


@pytest.fixture(scope="module")
def base(ray_cluster, router_dirs, tmp_path_factory):
    routers = {n: str(router_dirs / n) for n in ROUTERS}
    state = tmp_path_factory.mktemp("served_selector") / "selector.json"
    routers["selector"] = {"path": routers["selector"], "state": str(state)}
    routers["feedback"] = {"path": routers["feedback"], "state": str(state.parent / "feedback.json")}
    ops = {"api_keys": [{"key": ADMIN, "user_id": "ops", "admin": True}]}
    yield from serve_app(APP, KEY, "carol", ops, tmp_path_factory.mktemp("sel"), args={"routers": routers})


def _logged_prompt(shared_data: Path) -> str:
    from rlrouter.data.logged import load_routellm

    return load_routellm(shared_data / "routellm" / "mmlu" / "mmlu_philosophy.csv").prompts[7]


def test_every_router_type_through_the_running_app(base, router_dirs, shared_data):
    from rlrouter.routers.saved import read_manifest

    query = _logged_prompt(shared_data)
    models = [m["id"] for m in httpx.get(f"{base}/v1/models", headers=H, timeout=30).json()["data"]]
    assert {f"router-{n}" for n in ROUTERS} <= set(models)
    for name in ROUTERS:
        m = read_manifest(router_dirs / name)
        assert m.type == ("probe" if name.startswith("probe") else name)
        variants = [f"router-{name}"]
        if m.threshold_router:
            variants += [f"router-{name}-share0.3", f"router-{name}-{m.calibration.threshold(0.8):.6f}"]
        for model in variants:
            r = httpx.post(f"{base}/route", json={"query": query, "model": model}, headers=H, timeout=600)
            assert r.status_code == 200, (model, r.text)
            body = r.json()
            assert body["mode"] == f"router:{name}" and body["model"] in (GPT4, MIXTRAL), body
            info = body["router"]
            assert info["type"] == m.type and info["online"] == (name in LEARNERS)
            if m.threshold_router:
                want = GPT4 if info["score"] >= info["threshold"] else MIXTRAL
                assert body["model"] == want, body
                if model.endswith("share0.3"):
                    assert info["threshold"] == pytest.approx(m.calibration.threshold(0.3))
                    # at least 0.3: prompts tied at the threshold all go to strong (intent: one score per category)
                    assert 0.3 - 2e-3 <= info["training_strong_share"] <= 1.0, (name, info)
            fb = httpx.post(f"{base}/feedback", json={"request_id": body["request_id"], "outcome": "win"},
                            headers=H, timeout=60)
            assert fb.status_code == 200, fb.text
            assert fb.json()["router"]["learned"] == (name in LEARNERS), fb.json()
        # chat completions: the replay candidate the router picked answers the logged prompt
        r = httpx.post(f"{base}/v1/chat/completions", headers=H, timeout=600,
                       json={"model": variants[-1], "messages": [{"role": "user", "content": query}]})
        assert r.status_code == 200, (name, r.text)
        data = r.json()
        assert data["model"] in (GPT4, MIXTRAL) and data["x_rlrouter"]["router"]["name"] == name
        assert data["choices"][0]["message"]["content"]


def test_served_routers_match_the_saved_ones_and_refuse_bad_names(base, router_dirs, shared_data):
    from rlrouter.routers.saved import load_router

    query = _logged_prompt(shared_data)
    for name in ("mf", "knn", "probe_form_options"):
        local = load_router(router_dirs / name)
        want = float(local.router.strong_score([query])[0])
        body = httpx.post(f"{base}/route", json={"query": query, "model": f"router-{name}-0.5"}, headers=H,
                          timeout=120).json()
        assert body["router"]["score"] == pytest.approx(want, abs=1e-5), name
    for model, fragment in (("router-mf-lots", "is not a threshold"), ("router-nobody", "no served router"),
                            ("router-selector-0.2", "takes no threshold")):
        r = httpx.post(f"{base}/v1/chat/completions", headers=H, timeout=60,
                       json={"model": model, "messages": [{"role": "user", "content": query}]})
        assert r.status_code == 400 and r.json()["error"]["field"] == "model" and fragment in r.text, r.text


def test_the_served_selector_keeps_learning_across_decisions(base, shared_data):
    query = _logged_prompt(shared_data)
    deltas = []
    for outcome in ("loss", "loss", "win"):
        body = httpx.post(f"{base}/route", json={"query": query, "model": "router-selector"}, headers=H,
                          timeout=120).json()
        fb = httpx.post(f"{base}/feedback", json={"request_id": body["request_id"], "outcome": outcome},
                        headers=H, timeout=60).json()
        assert fb["router"]["learned"] is True and "durable" in fb["router"]["note"], fb
        deltas.append(fb["router"]["deltas"][0])
    assert [d["d_beta"] for d in deltas] == [1.0, 1.0, 0.0]


def test_the_served_feedback_router_learns_per_context(base, shared_data):
    """Feedback on the router trained offline moves the learned offset of the request's context (its
    category) and no other."""
    query = _logged_prompt(shared_data)
    seen: dict[str, list[dict]] = {}
    for category, outcome in (("mmlu/philosophy", "loss"), ("mmlu/philosophy", "loss"), ("mmlu/other", "win")):
        body = httpx.post(f"{base}/route", json={"query": query, "model": "router-feedback-share0.5",
                                                 "category": category}, headers=H, timeout=120).json()
        assert body["router"]["report"]["group"] == category, body
        fb = httpx.post(f"{base}/feedback", json={"request_id": body["request_id"], "outcome": outcome},
                        headers=H, timeout=60).json()
        assert fb["router"]["learned"] is True and f"context '{category}'" in fb["router"]["note"], fb
        seen.setdefault(category, []).append(fb["router"]["offsets"][0])
    again = httpx.post(f"{base}/feedback", json={"request_id": body["request_id"], "outcome": "win"},
                       headers=H, timeout=60)
    assert again.status_code == 409  # one feedback per decision
    assert all(d["offset_mean"] < 0 for d in seen["mmlu/philosophy"])  # losses pull that context's offset down
    assert seen["mmlu/other"][0]["offset_mean"] > 0 and seen["mmlu/other"][0]["events"] == 1


def _decide_and_grade(base, query, n, grade):
    """n decisions of router-probe and their feedback (``grade(version)``); stops at the rule's verdict."""
    versions = []
    for _ in range(n):
        body = httpx.post(f"{base}/route", json={"query": query, "model": "router-probe"}, headers=H, timeout=60).json()
        v = body["router"]["version"]
        versions.append(v)
        fb = httpx.post(f"{base}/feedback", json={"request_id": body["request_id"], "outcome": grade(v)}, headers=H,
                        timeout=60).json()["router"]
        assert fb["version"] == v, fb
        if fb.get("event"):
            return versions, fb
    return versions, None


def test_a_release_through_the_running_app_promotes_then_rolls_back(base, router_dirs, shared_data):
    """Runs last: it changes router-probe's current version."""
    query = _logged_prompt(shared_data)
    rule = {"canary_share": 0.5, "min_feedback": 6, "max_feedback": 60}
    load = {"version": "2", "path": str(router_dirs / "probe_form_options"), "release": rule}
    assert httpx.post(f"{base}/v1/routers/probe/versions", json=load, headers=H, timeout=60).status_code == 403
    r = httpx.post(f"{base}/v1/routers/probe/versions", json=load, headers=OPS, timeout=120)
    assert r.status_code == 200, r.text
    versions, fb = _decide_and_grade(base, query, 200, lambda v: "win" if v == "2" else "loss")
    assert fb is not None and fb["event"]["event"] == "promoted" and {"1", "2"} <= set(versions), (versions, fb)
    status = httpx.get(f"{base}/v1/routers", headers=H, timeout=30).json()["routers"]["probe"]
    assert status["current"] == "2" and status["versions"] == ["1", "2"]
    # version 3 loses; two of its decisions get their feedback only after it was rolled back
    load = {"version": "3", "path": str(router_dirs / "knn"), "release": rule}
    assert httpx.post(f"{base}/v1/routers/probe/versions", json=load, headers=OPS, timeout=120).status_code == 200
    in_flight = []
    while sum(v == "3" for v, _ in in_flight) < 2:
        body = httpx.post(f"{base}/route", json={"query": query, "model": "router-probe"}, headers=H, timeout=60).json()
        in_flight.append((body["router"]["version"], body["request_id"]))
    _, fb = _decide_and_grade(base, query, 200, lambda v: "loss" if v == "3" else "win")
    assert fb is not None and fb["event"]["event"] == "rolled_back", fb
    for v, rid in in_flight:
        late = httpx.post(f"{base}/feedback", json={"request_id": rid, "outcome": "win"}, headers=H, timeout=60).json()
        assert late["router"]["version"] == v and late["router"]["release"]["state"] == "rolled_back"
    assert late["router"]["release"]["late_feedback"] == len(in_flight)
    assert httpx.get(f"{base}/v1/routers", headers=H, timeout=30).json()["routers"]["probe"]["current"] == "2"
    metrics = httpx.get(f"{base}/metrics", timeout=30).text
    for event in ("loaded", "promoted", "rolled_back"):
        assert f'rlrouter_router_release_events_total{{event="{event}",router="probe"}}' in metrics, event
    assert 'rlrouter_router_decisions_total{router="probe",version="3"}' in metrics
