"""End to end: the Serve app on the local Ray cluster, driven over real HTTP with the official ``openai``
client and with httpx; the selector actor is killed (kill, no graceful save) and the whole app is
deleted and redeployed, and the posteriors must survive both, as must every request and feedback the traffic
log acknowledged.

The pool is the replay of the real logged outcomes (conf/pool/routellm_replay.yaml); the implicit
feedback classifier is the real MiniLM one.
"""

import asyncio
import importlib
import socket
import time

import httpx
import pytest
import yaml

from tests.helpers import CONF_DIR

pytestmark = [pytest.mark.ray, pytest.mark.slow]

APP = "rlrouter-e2e"
KEYS = [{"key": "k-alice", "user_id": "alice"}, {"key": "k-ops", "user_id": "ops", "admin": True}]
ALICE = {"Authorization": "Bearer k-alice"}
OPS = {"Authorization": "Bearer k-ops"}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_healthy(base: str, timeout: float = 120.0) -> None:
    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            r = httpx.get(f"{base}/health", timeout=5)
            if r.status_code == 200 and r.json()["selector"] == "ok":
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    raise AssertionError(f"{base}/health never became ok")


def _posteriors(base: str) -> dict:
    s = httpx.get(f"{base}/stats", headers=OPS, timeout=30).json()
    return {"global": s["global"], "users": s["users"], "categories": s["categories"]}


@pytest.fixture(scope="module")
def serve_app(ray_cluster, shared_data, tmp_path_factory):
    from ray import serve

    app_mod = importlib.import_module("serve.app")  # the repo's serve/ package, not ray.serve
    port = _free_port()
    serve.start(http_options={"host": "127.0.0.1", "port": port})
    from ray.serve.context import _get_global_client

    port = _get_global_client().http_config.port  # an already-running Serve keeps its port
    state = tmp_path_factory.mktemp("selector") / "state.json"
    traffic = state.parent / "traffic"
    args = {"pool": yaml.safe_load((CONF_DIR / "pool" / "routellm_replay.yaml").read_text()),
            "selector": {"storage_path": str(state), "seed": 0, "auto_save_interval": "1s"},
            "serving": {"api_keys": KEYS, "router_r1_keyless_networks": ["127.0.0.0/8"], "dev": True,
                        "traffic": {"enabled": True, "path": str(traffic), "explore_share": 0.5, "explore_seed": 0}}}

    def deploy():
        serve.run(app_mod.build_app(args), name=APP, route_prefix="/", blocking=False)
        _wait_healthy(f"http://127.0.0.1:{port}")

    deploy()
    yield f"http://127.0.0.1:{port}", deploy, state, traffic
    serve.delete(APP)


def test_http_api_openai_client_and_restart(serve_app, shared_data):
    import openai
    import ray

    from rlrouter.serving.router_r1_client import HTTPRouterR1Client
    from rlrouter.serving.traffic import read_traffic

    base, deploy, state, traffic = serve_app
    table_prompt = next(line for line in (shared_data / "routellm" / "gsm8k" / "test.jsonl").read_text().splitlines())
    assert table_prompt  # the shared data is there
    from rlrouter.data.logged import load_routellm

    gsm = load_routellm(shared_data / "routellm" / "gsm8k" / "gsm8k_responses.csv")
    prompt = gsm.prompts[0]

    # --- plain HTTP: auth, route, feedback, errors
    assert httpx.post(f"{base}/route", json={"query": "hi"}).status_code == 401
    r = httpx.post(f"{base}/route", json={"query": prompt, "category": "math", "session_id": "s"}, headers=ALICE)
    assert r.status_code == 200, r.text
    routed = r.json()
    r = httpx.post(f"{base}/feedback", json={"request_id": routed["request_id"], "outcome": "win"}, headers=ALICE)
    assert r.status_code == 200 and r.json()["durable"] is True
    assert httpx.post(f"{base}/feedback", json={"request_id": "nope", "outcome": "win"}, headers=ALICE).status_code == 404
    r = httpx.post(f"{base}/route", json={"query": ""}, headers=ALICE)
    assert r.status_code == 422 and r.json()["error"]["field"] == "query"

    # --- the official openai client, model "auto", plain and streaming
    client = openai.OpenAI(base_url=f"{base}/v1", api_key="k-alice", max_retries=0, timeout=60)
    models = {m.id for m in client.models.list().data}
    assert {"auto", "gpt-4-1106-preview", "mixtral-8x7b-instruct"} <= models
    resp = client.chat.completions.create(model="auto", messages=[{"role": "user", "content": prompt}])
    assert resp.model in ("gpt-4-1106-preview", "mixtral-8x7b-instruct")
    logged = gsm.responses["gpt-4-1106-preview" if resp.model.startswith("gpt") else
                           "mistralai/Mixtral-8x7B-Instruct-v0.1"][0]
    assert resp.choices[0].message.content == logged  # the chosen candidate's (logged) answer, proxied
    rid = resp.model_extra["x_rlrouter"]["request_id"]
    chunks = list(client.chat.completions.create(model="auto", stream=True,
                                                 messages=[{"role": "user", "content": prompt}]))
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    stream_id = next(c.model_extra["x_rlrouter"]["request_id"] for c in chunks if c.model_extra.get("x_rlrouter"))
    with pytest.raises(openai.AuthenticationError):
        openai.OpenAI(base_url=f"{base}/v1", api_key="wrong", max_retries=0).models.list()

    # --- implicit feedback through the real MiniLM classifier
    r = httpx.post(f"{base}/feedback", json={"request_id": rid, "followup_text": "Perfect, thank you so much!"},
                   headers=ALICE, timeout=180)
    assert r.status_code == 200, r.text
    assert r.json()["label"] == "satisfied" and r.json()["applied"][0]["d_alpha"] > 0

    # --- the Router-R1 protocol, through the real client
    ans = asyncio.run(HTTPRouterR1Client(f"{base}/router_r1", timeout_s=30).route("What is 12 * 12?"))
    assert ans.selected_model in models and "rl_driven selector" in ans.thinking

    before = _posteriors(base)
    assert before["users"]["alice"] and before["categories"]["math"]

    # --- kill -9 of the selector actor (no graceful save): Serve restarts it from snapshot + log
    actors = [a for a in ray.util.list_named_actors(all_namespaces=True) if "SelectorDeployment" in a["name"]]
    assert len(actors) == 1
    ray.kill(ray.get_actor(actors[0]["name"], namespace=actors[0]["namespace"]), no_restart=True)
    deadline = time.time() + 120
    while time.time() < deadline:
        try:
            if _posteriors(base) == before:
                break
        except (httpx.HTTPError, KeyError, ValueError):
            pass
        time.sleep(1)
    assert _posteriors(base) == before
    # the traffic log written by the killed replica: every acknowledged request and feedback is there
    r = httpx.post(f"{base}/route", json={"query": prompt}, headers=ALICE)  # and the restarted one writes on
    assert r.status_code == 200
    log = read_traffic(traffic)
    by_id = {q["id"]: q for q in log.requests}
    assert {routed["request_id"], rid, stream_id, r.json()["request_id"]} <= set(by_id) and log.skipped <= 1
    assert [f["outcome"] for f in by_id[routed["request_id"]]["feedback"]] == ["win"]
    assert [f["label"] for f in by_id[rid]["feedback"]] == ["satisfied"]
    assert by_id[rid]["calls"][0]["reply"] == logged and by_id[rid]["calls"][0]["cost"] > 0
    assert len({p.name.split("-")[2] for p in traffic.glob("traffic-*.jsonl")}) == 2  # two processes wrote

    # --- shut the app down, deploy it again: the posteriors are the same, exactly
    from ray import serve

    serve.delete(APP)
    assert state.exists()
    deploy()
    assert _posteriors(base) == before


def test_exploration_through_the_running_app(serve_app, shared_data):
    """explore_share 0.5: about half the routed chat completions also ask the other candidate, after the
    answer; each reply is logged with its draw's probability, and the calls and their cost are on /metrics."""
    from rlrouter.data.logged import load_routellm
    from rlrouter.serving.traffic import read_traffic

    base, _, _, traffic = serve_app
    prompts = load_routellm(shared_data / "routellm" / "mmlu" / "mmlu_philosophy.csv").prompts[20:60]
    ids = []
    for p in prompts:
        r = httpx.post(f"{base}/v1/chat/completions", headers=ALICE, timeout=60,
                       json={"model": "auto", "messages": [{"role": "user", "content": p}]})
        assert r.status_code == 200, r.text
        ids.append(r.json()["x_rlrouter"]["request_id"])
    deadline, explored = time.time() + 60, []
    while time.time() < deadline:
        by_id = {q["id"]: q for q in read_traffic(traffic).requests}
        explored = [by_id[i]["explore"] for i in ids if i in by_id and by_id[i]["explore"]]
        metrics = httpx.get(f"{base}/metrics", timeout=30).text
        if explored and metrics.count("rlrouter_traffic_explore_calls_total{") and len(explored) == sum(
                float(ln.rsplit(" ", 1)[1]) for ln in metrics.splitlines()
                if ln.startswith("rlrouter_traffic_explore_calls_total{")):
            break
        time.sleep(1)
    assert 8 <= len(explored) <= 32, len(explored)  # 40 draws at 0.5 (seeded)
    for (call,) in explored:
        assert call["propensity"] == 0.5 and call["reply"] and call["cost"] > 0  # one other candidate: 0.5 x 1
    cost = sum(float(ln.rsplit(" ", 1)[1]) for ln in metrics.splitlines()
               if ln.startswith("rlrouter_traffic_explore_cost_usd_total{"))
    assert cost == pytest.approx(sum(c["cost"] for (c,) in explored), rel=1e-6)


def test_two_hop_topology_separate_ingress(ray_cluster, shared_data, tmp_path):
    """``serving.selector_in_ingress: false``: a stateless Ingress deployment calls the selector replica
    through its handle; same API, same durable acknowledgement."""
    from ray import serve
    from ray.serve.context import _get_global_client

    app_mod = importlib.import_module("serve.app")
    serve.start(http_options={"host": "127.0.0.1", "port": _free_port()})
    base = f"http://127.0.0.1:{_get_global_client().http_config.port}/twohop"
    args = {"pool": yaml.safe_load((CONF_DIR / "pool" / "routellm_replay.yaml").read_text()),
            "selector": {"storage_path": str(tmp_path / "state.json"), "seed": 0},
            "serving": {"api_keys": KEYS, "selector_in_ingress": False, "dev": True}}
    serve.run(app_mod.build_app(args), name="rlrouter-twohop", route_prefix="/twohop", blocking=False)
    try:
        _wait_healthy(base)
        deployments = serve.status().applications["rlrouter-twohop"].deployments
        assert set(deployments) == {"Ingress", "SelectorDeployment"}
        r = httpx.post(f"{base}/route", json={"query": "What is 2+2?"}, headers=ALICE, timeout=30)
        assert r.status_code == 200, r.text
        r = httpx.post(f"{base}/feedback", json={"request_id": r.json()["request_id"], "outcome": "win"},
                       headers=ALICE, timeout=30)
        assert r.status_code == 200 and r.json()["durable"] is True
    finally:
        serve.delete("rlrouter-twohop")
