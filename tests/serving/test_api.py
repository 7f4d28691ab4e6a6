"""The HTTP API in-process (FastAPI TestClient) around a real selector and a replay pool on the logged data.

Everything is real except the implicit-feedback classifier, which is a fixed stub here (the MiniLM
classifier is tested in tests/selector/test_implicit.py and end to end in tests/serve/).
"""

import asyncio
import json

import pytest
import yaml
from fastapi.testclient import TestClient

from rlrouter.pool.pool import CandidatePool
from rlrouter.selector import Selector, SelectorConfig
from rlrouter.selector.implicit import ImplicitLabel
from rlrouter.serving.api import create_app, install
from rlrouter.serving.auth import ApiKeyAuth
from rlrouter.serving.config import ServingConfig
from rlrouter.serving.router_r1_client import RouterR1Answer, RouterR1Unavailable
from rlrouter.serving.service import LocalSelectorClient, RouterService
from tests.helpers import CONF_DIR

ALICE = {"Authorization": "Bearer k-alice"}
BOB = {"Authorization": "Bearer k-bob"}
ADMIN = {"X-API-Key": "k-admin"}
GPT4, MIXTRAL = "gpt-4-1106-preview", "mixtral-8x7b-instruct"


class StubClassifier:
    def __init__(self, label="satisfied", confidence=0.8):
        self.result = ImplicitLabel(label, confidence, {})

    def classify(self, text):
        return self.result


class StubRouterR1:
    """Plays a Router-R1 server: answers, fails, or is too slow."""

    name = "stub-router-r1"

    def __init__(self, behaviour):
        self.behaviour = behaviour

    async def route(self, query):
        if self.behaviour == "fail":
            raise RouterR1Unavailable("HTTP 500")
        if self.behaviour == "slow":
            await asyncio.sleep(5)
        return RouterR1Answer("mixtral", "<think>cheap is enough</think>", "<answer>mixtral</answer>")


@pytest.fixture(scope="module")
def pool(shared_data):
    return CandidatePool.from_config(yaml.safe_load((CONF_DIR / "pool" / "routellm_replay.yaml").read_text()))


@pytest.fixture(scope="module")
def gsm8k_prompt(pool):
    table = pool.backend(GPT4).table
    i = table.source.index("gsm8k")
    return table.prompts[i], table.responses[GPT4][i]


@pytest.fixture(scope="module")
def logged_answers(pool, gsm8k_prompt):
    """Each candidate's logged answer to the GSM8K prompt, as its replay backend reads the table."""
    table = pool.backend(GPT4).table
    i = table.index(gsm8k_prompt[0])
    return {m: table.response(i, pool.backend(m).model) for m in pool.names}


def make_client(tmp_path, pool, serving_kw=None, client_addr=("testclient", 50000), wrap=None, **selector_kw):
    selector_kw.setdefault("seed", 0)
    cfg = SelectorConfig(storage_path=str(tmp_path / "state.json"), costs={GPT4: 20.0, MIXTRAL: 0.6}, **selector_kw)
    selector = Selector(cfg, pool.names)
    selector.load()
    serving = ServingConfig(api_keys=[{"key": "k-alice", "user_id": "alice"}, {"key": "k-bob", "user_id": "bob"},
                                      {"key": "k-admin", "user_id": "ops", "admin": True}], max_body_bytes=20_000,
                            **(serving_kw or {}))
    svc = RouterService(LocalSelectorClient(selector), cfg, serving, pool.names, pool=pool,
                        classifier=StubClassifier())
    install(svc, ApiKeyAuth(serving.keys({})))
    app = create_app() if wrap is None else wrap(create_app())
    return TestClient(app, client=client_addr), selector, svc


@pytest.fixture
def env(tmp_path, pool):
    return make_client(tmp_path, pool)


def err(resp):
    return resp.json()["error"]


def test_auth(env):
    client, _, _ = env
    r = client.post("/route", json={"query": "hi"})
    assert r.status_code == 401 and "API key" in err(r)["message"]
    assert client.post("/route", json={"query": "hi"}, headers={"Authorization": "Bearer nope"}).status_code == 401
    r = client.post("/route", json={"query": "hi", "user_id": "bob"}, headers=ALICE)
    assert r.status_code == 403 and err(r)["field"] == "user_id"
    assert client.post("/route", json={"query": "hi", "user_id": "bob"}, headers=ADMIN).status_code == 200
    assert client.get("/health").status_code == 200  # liveness needs no key
    assert client.get("/stats").status_code == 401


def test_route_feedback_stats(env):
    client, selector, _ = env
    r = client.post("/route", json={"query": "What is 2+2?", "session_id": "s1", "category": "math"}, headers=ALICE)
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["model"] in (GPT4, MIXTRAL) and body["mode"] == "thompson"
    assert set(body["scores"]) == {GPT4, MIXTRAL}
    rid = body["request_id"]
    r = client.post("/feedback", json={"request_id": rid, "outcome": "tie"}, headers=BOB)
    assert r.status_code == 403 and err(r)["field"] == "request_id"  # bob may not write alice's posteriors
    r = client.post("/feedback", json={"request_id": rid, "outcome": "tie"}, headers=ALICE)
    assert r.status_code == 200 and r.json()["durable"] is True
    assert r.json()["applied"] == [{"model": body["model"], "d_alpha": 0.5, "d_beta": 0.5}]
    assert client.post("/feedback", json={"request_id": rid, "outcome": "win"}, headers=ALICE).status_code == 409
    r = client.post("/feedback", json={"request_id": "does-not-exist", "outcome": "win"}, headers=ALICE)
    assert r.status_code == 404 and err(r)["field"] == "request_id"
    stats = client.get("/stats", headers=ALICE).json()
    assert stats["global"][body["model"]]["alpha"] == 1.5
    assert stats["users"]["alice"][body["model"]]["beta"] == 1.5
    assert stats["categories"]["math"][body["model"]]["alpha"] == 1.5
    assert client.get("/stats", headers=BOB).json()["users"] == {}  # bob sees only his own scope
    assert "alice" in client.get("/stats", headers=ADMIN).json()["users"]
    # durable: the write-ahead log holds it even though nothing was saved
    assert selector._wal.path.stat().st_size > 0


def test_implicit_feedback(env):
    client, selector, _ = env
    rid = client.post("/route", json={"query": "Name a prime."}, headers=ALICE).json()["request_id"]
    r = client.post("/feedback", json={"request_id": rid, "followup_text": "great, thanks!"}, headers=ALICE)
    assert r.status_code == 200, r.text
    b = r.json()
    # satisfied at confidence 0.8: alpha += implicit_feedback_weight 0.5 * 0.8 = 0.4
    assert b["kind"] == "implicit" and b["label"] == "satisfied" and b["applied"][0]["d_alpha"] == pytest.approx(0.4)


def test_router_r1_reward_feedback(tmp_path, pool):
    client, _, _ = make_client(tmp_path, pool, use_router_r1_rewards=True)  # off by default, as in VSR
    good = "<think>easy</think>\n<search>mixtral-8x7b-instruct: 2+2?</search>\n<information>4</information>\n<answer>4</answer>"
    rid = client.post("/route", json={"query": "2+2?"}, headers=ALICE).json()["request_id"]
    r = client.post("/feedback", json={"request_id": rid, "router_r1": {"completion": good, "ground_truth": ["4"],
                                                                         "route_costs": 0.0001}}, headers=ALICE)
    assert r.status_code == 200, r.text
    # correct, format ok: (1 + 0) * 0.7 + 0.3 * cost reward, in [0.7, 1]
    assert 0.7 <= r.json()["reward"] <= 1.0
    rid = client.post("/route", json={"query": "2+2?"}, headers=ALICE).json()["request_id"]
    r = client.post("/feedback", json={"request_id": rid, "router_r1": {"completion": "just 4", "ground_truth": ["4"],
                                                                         "route_costs": 0.0}}, headers=ALICE)
    # the seed's additive R: format -1 + 0.7 * outcome 0 + 0.3 * cost reward 1 (the batch's only cost) = -0.7,
    # clipped to 0: a loss
    assert r.json()["reward"] == pytest.approx(-0.7) and r.json()["applied"][0]["d_beta"] == 1.0
    r = client.post("/feedback", json={"request_id": rid, "router_r1": {"completion": good, "ground_truth": ["4"]}},
                    headers=ALICE)
    assert r.status_code in (409, 422)


@pytest.mark.parametrize("body,field,status", [
    ({}, "query", 422),
    ({"query": ""}, "query", 422),
    ({"query": "   "}, "query", 422),
    ({"query": 3}, "query", 422),
    ({"query": "x", "candidates": ["gpt-5"]}, "candidates", 422),
    ({"query": "x", "candidates": []}, "candidates", 422),
    ({"query": "x", "extra": 1}, "extra", 422),
])
def test_bad_route_input_names_the_field(env, body, field, status):
    client, _, _ = env
    r = client.post("/route", json=body, headers=ALICE)
    assert r.status_code == status, r.text
    assert err(r)["field"] == field and f"'{field}'" in err(r)["message"]


def test_bad_feedback_and_body_limits(env):
    client, _, _ = env
    r = client.post("/feedback", json={"request_id": "x", "outcome": "draw"}, headers=ALICE)
    assert r.status_code == 422 and err(r)["field"] == "outcome"
    r = client.post("/feedback", json={"request_id": "x", "outcome": "win", "reward": 1.0}, headers=ALICE)
    assert r.status_code == 422 and "exactly one" in err(r)["message"]
    r = client.post("/route", content=b"{not json", headers={**ALICE, "Content-Type": "application/json"})
    assert r.status_code == 400 and err(r)["field"] == "body"
    r = client.post("/route", json={"query": "x" * 30_000}, headers=ALICE)
    assert r.status_code == 413
    r = client.post("/v1/chat/completions", json={"model": "auto", "messages": [{"role": "system", "content": "x"}]},
                    headers=ALICE)
    assert r.status_code == 422 and "messages" in err(r)["field"]
    r = client.post("/v1/chat/completions", json={"model": "gpt-9", "messages": [{"role": "user", "content": "x"}]},
                    headers=ALICE)
    assert r.status_code == 404 and err(r)["field"] == "model"


def test_chat_completions_auto_and_stream(env, gsm8k_prompt, logged_answers):
    client, _, _ = env
    prompt, _ = gsm8k_prompt
    assert len(set(logged_answers.values())) == len(logged_answers)  # the answer tells which candidate gave it
    r = client.post("/v1/chat/completions", json={"model": "auto", "messages": [{"role": "user", "content": prompt}]},
                    headers=ALICE)
    assert r.status_code == 200, r.text
    data = r.json()
    assert data["model"] in (GPT4, MIXTRAL) and data["object"] == "chat.completion"
    assert data["x_rlrouter"]["request_id"] == r.headers["x-rlrouter-request-id"]
    # the chosen candidate's logged answer, proxied
    assert data["choices"][0]["message"]["content"] == logged_answers[data["model"]]
    with client.stream("POST", "/v1/chat/completions", headers=ALICE,
                       json={"model": "auto", "stream": True, "messages": [{"role": "user", "content": prompt}]}) as s:
        assert s.status_code == 200 and s.headers["content-type"].startswith("text/event-stream")
        events = [line[6:] for line in s.iter_lines() if line.startswith("data: ")]
    assert events[-1] == "[DONE]"
    chunks = [json.loads(e) for e in events[:-1]]
    text = "".join(c["choices"][0]["delta"].get("content", "") for c in chunks)
    assert text and all(c["model"] == chunks[0]["model"] for c in chunks)
    models = {m["id"] for m in client.get("/v1/models", headers=ALICE).json()["data"]}
    assert models == {"auto", "arena", GPT4, MIXTRAL}


def test_arena_and_multi_round(tmp_path, pool, gsm8k_prompt):
    client, selector, _ = make_client(tmp_path, pool, enable_multi_round_aggregation=True, max_aggregation_rounds=2)
    prompt, _ = gsm8k_prompt
    for model in ("auto", "arena"):
        r = client.post("/v1/chat/completions", json={"model": model, "messages": [{"role": "user", "content": prompt}]},
                        headers=ALICE)
        assert r.status_code == 200, r.text
        meta = r.json()["x_rlrouter"]
        assert sorted(meta["models"]) == sorted([GPT4, MIXTRAL]) and set(meta["answers"]) == {GPT4, MIXTRAL}
        assert r.json()["model"] in meta["models"]
    rid = meta["request_id"]
    r = client.post("/feedback", json={"request_id": rid, "outcome": "win", "winner": MIXTRAL}, headers=ALICE)
    assert {d["model"]: (d["d_alpha"], d["d_beta"]) for d in r.json()["applied"]} == {MIXTRAL: (1, 0), GPT4: (0, 1)}
    r = client.post("/route", json={"query": "q"}, headers=ALICE).json()
    assert r["mode"] == "multi_round" and len(r["models"]) == 2


def test_llm_routing_and_fallbacks(tmp_path, pool):
    client, _, svc = make_client(tmp_path, pool, enable_llm_routing=True,
                                 router_r1_server_url="http://127.0.0.1:9/router_r1", llm_routing_timeout_s=0.3)
    svc.router_r1.llm_router = StubRouterR1("ok")
    r = client.post("/route", json={"query": "q"}, headers=ALICE).json()
    assert r["mode"] == "llm_routing" and r["model"] == MIXTRAL  # "mixtral" matched partially, as VSR does
    for behaviour in ("fail", "slow"):
        svc.router_r1.llm_router = StubRouterR1(behaviour)
        r = client.post("/route", json={"query": "q"}, headers=ALICE).json()
        assert r["mode"] == "thompson" and "fell back" in r["fallback_reason"]
    # the real HTTP client against a closed port: also a fallback, not an error
    from rlrouter.serving.router_r1_client import HTTPRouterR1Client

    svc.router_r1.llm_router = HTTPRouterR1Client("http://127.0.0.1:9/router_r1", 0.3)
    assert client.post("/route", json={"query": "q"}, headers=ALICE).json()["mode"] == "thompson"
    svc.ctx.cfg.llm_routing_fallback = "error"
    svc.router_r1.llm_router = StubRouterR1("fail")
    r = client.post("/route", json={"query": "q"}, headers=ALICE)
    assert r.status_code == 503


def test_router_r1_protocol_served_by_a_policy_and_its_timeout_named(tmp_path, pool):
    client, _, svc = make_client(tmp_path, pool, llm_routing_timeout_s=0.3)
    svc.router_r1.policy = StubRouterR1("ok")
    b = client.post("/router_r1/route", json={"query": "q"}, headers=ALICE).json()
    assert b["backend"] == "router_r1_policy" and b["selected_model"] == MIXTRAL
    svc.router_r1.policy = StubRouterR1("slow")
    r = client.post("/router_r1/route", json={"query": "q"}, headers=ALICE)
    assert r.status_code == 503 and err(r)["type"] == "router_unavailable"
    assert "no answer within 0.3s (selector.llm_routing_timeout_s" in err(r)["message"]
    svc.router_r1.policy = StubRouterR1("fail")
    r = client.post("/router_r1/route", json={"query": "q"}, headers=ALICE)
    assert r.status_code == 503 and err(r)["message"] == "Router-R1 policy unavailable: HTTP 500"


def test_router_r1_protocol_backed_by_selector(env):
    client, _, _ = env
    r = client.post("/router_r1/route", json={"query": "What is the capital of France?"}, headers=ALICE)
    assert r.status_code == 200
    b = r.json()
    assert b["backend"] == "selector" and b["selected_model"] in (GPT4, MIXTRAL)
    assert "No Router-R1 policy" in b["thinking"] and f"<answer>{b['selected_model']}</answer>" in b["full_response"]
    assert client.get("/router_r1/health").json() == {"status": "ok", "model": "rl_driven-selector"}
    assert client.post("/router_r1/route", json={"query": "hi"}).status_code == 401  # keys by default


# What VSR's Go client sends (RouterR1Client.Route: json.Marshal of {"query": ...}, Content-Type only, no key),
# for the query selectWithRouterR1 builds: "Task: <decision>\nAvailable models: a, b".
VSR_BYTES = b'{"query":"Task: math_decision\\nAvailable models: qwen3-8b, llama-3.1-70b"}'
VSR_HEADERS = {"Content-Type": "application/json", "User-Agent": "Go-http-client/1.1"}


def test_vsr_request_keyless_from_a_listed_network_gets_one_of_its_models(tmp_path, pool):
    kw = {"router_r1_keyless_networks": ["10.0.0.0/8"], "model_map": {"qwen3-8b": MIXTRAL, "llama-3.1-70b": GPT4}}
    client, selector, _ = make_client(tmp_path, pool, serving_kw=kw, client_addr=("10.1.2.3", 40000))
    seen = set()
    for _ in range(12):
        r = client.post("/router_r1/route", content=VSR_BYTES, headers=VSR_HEADERS)
        assert r.status_code == 200, r.text
        seen.add(r.json()["selected_model"])
    assert seen <= {"qwen3-8b", "llama-3.1-70b"} and seen  # VSR matches selected_model to its own names
    assert selector.pending(r.json()["request_id"]).category == "math_decision"  # the decision's scope
    # only one of the offered models maps: the answer is that one, whatever the posteriors say
    one = b'{"query":"Task: t\\nAvailable models: qwen3-8b, gpt-9"}'
    assert {client.post("/router_r1/route", content=one, headers=VSR_HEADERS).json()["selected_model"]
            for _ in range(5)} == {"qwen3-8b"}
    r = client.post("/router_r1/route", content=b'{"query":"Task: t\\nAvailable models: gpt-9"}', headers=VSR_HEADERS)
    assert r.status_code == 422 and "model_map" in err(r)["message"]
    # outside the listed range: a key is required, and the message says why
    outside, _, _ = make_client(tmp_path / "o", pool, serving_kw=kw, client_addr=("192.0.2.7", 40000))
    r = outside.post("/router_r1/route", content=VSR_BYTES, headers=VSR_HEADERS)
    assert r.status_code == 401 and "192.0.2.7 is not in serving.router_r1_keyless_networks" in err(r)["message"]
    assert outside.post("/route", json={"query": "hi"}).status_code == 401  # the rest of the API still needs keys


def test_openapi_documents_the_api(env):
    client, _, _ = env
    spec = client.get("/openapi.json").json()
    for path in ("/route", "/feedback", "/v1/chat/completions", "/v1/models", "/router_r1/route",
                 "/router_r1/health", "/stats", "/health"):
        assert path in spec["paths"], path
    assert "RouteRequest" in spec["components"]["schemas"]


def test_wrong_bodies_get_the_right_message(env):
    """Each of these once got "not valid JSON (bytes that are not UTF-8 text)" or a wrong range."""
    client, _, _ = env
    json_h = {**ALICE, "Content-Type": "application/json"}

    def chunks(n):  # valid UTF-8 JSON, sent chunked (a generator: no Content-Length)
        yield b'{"query": "'
        for _ in range(n // 1000):
            yield "é".encode() * 500
        yield b'"}'

    r = client.post("/route", content=chunks(1_400_000), headers=json_h)
    assert r.status_code == 413 and "20000-byte limit" in err(r)["message"] and err(r)["field"] == "body"
    nested = b'{"query": ' + b"[" * 5000 + b"]" * 5000 + b"}"
    r = client.post("/route", content=nested, headers=json_h)
    assert r.status_code == 400 and "nested too deeply" in err(r)["message"], r.text
    r = client.post("/route", content=b'{"query": "\xff\xfe"}', headers=json_h)
    assert r.status_code == 400 and "not UTF-8" in err(r)["message"]
    r = client.post("/feedback", content=b'{"request_id": "x", "reward": NaN}', headers=json_h)
    assert r.status_code == 422 and err(r)["field"] == "reward" and "nan is not a number" in err(r)["message"]
    r = client.post("/feedback", content=b'{"request_id": "x", "reward": Infinity}', headers=json_h)
    assert r.status_code == 422 and "inf is not a number" in err(r)["message"]
    # curl -d without -H 'Content-Type: application/json' sends form encoding
    r = client.post("/route", content=b'{"query": "hi"}',
                    headers={**ALICE, "Content-Type": "application/x-www-form-urlencoded"})
    assert r.status_code == 415 and "Content-Type: application/json" in err(r)["message"]


UNLOGGED = "Write one sentence about a purple giraffe named Zorblax who collects teaspoons."


def test_replay_miss_is_never_a_200(tmp_path, pool, gsm8k_prompt):
    """A prompt no replay logged used to get HTTP 200 with '[replay] no logged answer' as content."""
    client, _, _ = make_client(tmp_path, pool)
    for model in ("auto", "arena", GPT4):
        r = client.post("/v1/chat/completions", headers=ALICE,
                        json={"model": model, "messages": [{"role": "user", "content": UNLOGGED}]})
        assert r.status_code == 404 and err(r)["type"] == "replay_miss" and "no live candidate" in err(r)["message"]
    # with a live candidate in the pool, 'auto' falls through to it (here an endpoint that is down: 502, not 200)
    cfg = yaml.safe_load((CONF_DIR / "pool" / "routellm_replay.yaml").read_text())
    cfg["candidates"].append({"name": "live", "price_in": 0.1, "price_out": 0.1, "backend": "openai",
                              "options": {"base_url": "http://127.0.0.1:9/v1", "max_retries": 0}})
    client, _, _ = make_client(tmp_path / "live", CandidatePool.from_config(cfg))
    r = client.post("/v1/chat/completions", headers=ALICE,
                    json={"model": "auto", "messages": [{"role": "user", "content": UNLOGGED}]})
    assert r.status_code == 502 and "candidate 'live' failed" in err(r)["message"]
    r = client.post("/v1/chat/completions", headers=ALICE,
                    json={"model": GPT4, "messages": [{"role": "user", "content": UNLOGGED}]})
    assert r.status_code == 404 and "ask a live candidate (['live'])" in err(r)["message"]
    r = client.post("/v1/chat/completions", headers=ALICE,  # a logged prompt still goes to the replays
                    json={"model": GPT4, "messages": [{"role": "user", "content": gsm8k_prompt[0]}]})
    assert r.status_code == 200 and r.json()["choices"][0]["message"]["content"] == gsm8k_prompt[1]


def live_pool():
    """RouteLLM's two replays plus a live candidate (an endpoint that is down: a call to it is a 502)."""
    cfg = yaml.safe_load((CONF_DIR / "pool" / "routellm_replay.yaml").read_text())
    cfg["candidates"].append({"name": "live", "price_in": 0.1, "price_out": 0.1, "backend": "openai",
                              "options": {"base_url": "http://127.0.0.1:9/v1", "max_retries": 0}})
    return CandidatePool.from_config(cfg)


def test_route_picks_a_candidate_that_can_answer(tmp_path, pool, gsm8k_prompt):
    """/route used to pick a replay for a prompt nobody logged; calling that model was then a 404."""
    client, _, _ = make_client(tmp_path, live_pool())
    for i in range(12):
        r = client.post("/route", headers=ALICE, json={"query": UNLOGGED, "session_id": f"s{i}"})
        assert r.status_code == 200, r.text
        assert r.json()["model"] == "live" and r.json()["replay_miss"] is None, r.json()
    chosen = r.json()["model"]
    r = client.post("/v1/chat/completions", headers=ALICE,
                    json={"model": chosen, "messages": [{"role": "user", "content": UNLOGGED}]})
    assert r.status_code == 502 and "candidate 'live' failed" in err(r)["message"]  # called, not a replay_miss
    r = client.post("/route", headers=ALICE, json={"query": gsm8k_prompt[0]})  # logged: every candidate can
    assert r.status_code == 200 and r.json()["replay_miss"] is None
    # only replays, none logged it: still a decision, and the response says why its model cannot answer
    client, _, _ = make_client(tmp_path / "replays", pool)
    r = client.post("/route", headers=ALICE, json={"query": UNLOGGED})
    assert r.status_code == 200, r.text
    why = r.json()["replay_miss"]
    assert r.json()["model"] in why and "none of the candidates can answer" in why and "404" in why
    # replay_miss: error leaves the misses in the choice, and says so when one is chosen
    client, _, _ = make_client(tmp_path / "error", live_pool(), serving_kw={"replay_miss": "error"})
    seen = set()
    for i in range(20):
        body = client.post("/route", headers=ALICE, json={"query": UNLOGGED, "session_id": f"e{i}"}).json()
        seen.add(body["model"])
        assert (body["replay_miss"] is None) == (body["model"] == "live"), body
        if body["replay_miss"]:
            assert "serving.replay_miss is 'error'" in body["replay_miss"]
    assert seen - {"live"}, seen


def behind_uvicorn_proxy_headers(app):
    """The app as Ray Serve's HTTP servers run it: uvicorn's ProxyHeadersMiddleware with its defaults
    (forwarded_allow_ips 127.0.0.1 and ::1), which replaces a loopback peer by its X-Forwarded-For."""
    from uvicorn.middleware.proxy_headers import ProxyHeadersMiddleware

    return ProxyHeadersMiddleware(app, trusted_hosts="127.0.0.1,::1")


def test_forwarded_for_is_not_the_client_address(tmp_path, pool):
    kw = {"router_r1_keyless_networks": ["10.0.0.0/8"], "model_map": {"qwen3-8b": MIXTRAL, "llama-3.1-70b": GPT4}}
    client, _, _ = make_client(tmp_path, pool, serving_kw=kw, client_addr=("127.0.0.1", 40000),
                               wrap=behind_uvicorn_proxy_headers)
    r = client.post("/router_r1/route", content=VSR_BYTES, headers={**VSR_HEADERS, "X-Forwarded-For": "10.1.2.3"})
    assert r.status_code == 401, r.text
    assert "X-Forwarded-For" in err(r)["message"] and "serving.trusted_proxies" in err(r)["message"]
    # with the sender listed as a trusted proxy, the client it forwarded for counts
    kw = {**kw, "trusted_proxies": ["127.0.0.1/32", "::1/128"]}
    client, _, _ = make_client(tmp_path / "t", pool, serving_kw=kw, client_addr=("127.0.0.1", 40000),
                               wrap=behind_uvicorn_proxy_headers)
    r = client.post("/router_r1/route", content=VSR_BYTES, headers={**VSR_HEADERS, "X-Forwarded-For": "10.1.2.3"})
    assert r.status_code == 200, r.text
    # the proxy appends the address it saw: what the client wrote to the left of it counts for nothing
    r = client.post("/router_r1/route", content=VSR_BYTES,
                    headers={**VSR_HEADERS, "X-Forwarded-For": "10.1.2.3, 192.0.2.7"})
    assert r.status_code == 401 and "192.0.2.7 is not in serving.router_r1_keyless_networks" in err(r)["message"]


def test_keyless_401_names_the_setting_that_lets_vsr_in(env):
    client, _, _ = env  # no router_r1_keyless_networks: VSR's keyless request is refused, saying how to allow it
    r = client.post("/router_r1/route", content=VSR_BYTES, headers=VSR_HEADERS)
    assert r.status_code == 401 and "serving.router_r1_keyless_networks" in err(r)["message"]


def test_openai_user_is_an_end_user_tag(tmp_path, pool, gsm8k_prompt):
    client, selector, _ = make_client(tmp_path, pool)
    body = {"model": "auto", "user": "customer-42", "messages": [{"role": "user", "content": gsm8k_prompt[0]}]}
    r = client.post("/v1/chat/completions", json=body, headers=ALICE)
    assert r.status_code == 200, r.text
    meta = r.json()["x_rlrouter"]
    assert meta["end_user"] == "customer-42"
    assert selector.pending(meta["request_id"]).user_id == "alice"  # the key's user stays the identity
    r = client.post("/v1/chat/completions", json={**body, "model": GPT4}, headers=ALICE)  # a candidate named directly
    assert r.status_code == 200 and r.json()["x_rlrouter"]["end_user"] == "customer-42"
    # a server that maps OpenAI's user to user_id: then it is an identity, bound to the key
    mapped, _, _ = make_client(tmp_path / "m", pool, serving_kw={"openai_user": "user_id"})
    r = mapped.post("/v1/chat/completions", json=body, headers=ALICE)
    assert r.status_code == 403 and err(r)["field"] == "user"
    assert mapped.post("/v1/chat/completions", json={**body, "user": "alice"}, headers=ALICE).status_code == 200


def test_n_other_than_one_is_refused_naming_it(env, gsm8k_prompt):
    client, _, _ = env
    body = {"model": "auto", "messages": [{"role": "user", "content": gsm8k_prompt[0]}]}
    r = client.post("/v1/chat/completions", json={**body, "n": 3}, headers=ALICE)
    assert r.status_code == 400 and err(r)["field"] == "n" and "'n'" in err(r)["message"], r.text
    r = client.post("/v1/chat/completions", json={**body, "n": 1}, headers=ALICE)
    assert r.status_code == 200 and len(r.json()["choices"]) == 1


def test_model_names_match_case_insensitively(env, gsm8k_prompt, logged_answers):
    client, _, _ = env
    msgs = [{"role": "user", "content": gsm8k_prompt[0]}]
    r = client.post("/v1/chat/completions", json={"model": "Mixtral-8x7B-Instruct", "messages": msgs}, headers=ALICE)
    assert r.status_code == 200, r.text
    assert r.json()["model"] == MIXTRAL and r.json()["choices"][0]["message"]["content"] == logged_answers[MIXTRAL]
    r = client.post("/v1/chat/completions", json={"model": "AUTO", "messages": msgs}, headers=ALICE)
    assert r.status_code == 200 and r.json()["x_rlrouter"]["mode"] == "thompson"
    r = client.post("/route", json={"query": "hi", "candidates": ["GPT-4-1106-Preview"]}, headers=ALICE)
    assert r.status_code == 200 and r.json()["model"] == GPT4, r.text
    # a match is exact but for case: no fuzzy matching, and the error still names the known names
    r = client.post("/v1/chat/completions", json={"model": "mixtral-8x7b", "messages": msgs}, headers=ALICE)
    assert r.status_code == 404 and err(r)["field"] == "model" and MIXTRAL in err(r)["message"]
    r = client.post("/route", json={"query": "hi", "candidates": ["mixtral"]}, headers=ALICE)
    assert r.status_code == 422 and GPT4 in err(r)["message"]


def test_live_candidates_errors_are_statuses_without_internals(tmp_path, pool):
    """Real OpenAI-compatible upstreams (uvicorn on 127.0.0.1) behind the proxy: one echoes, one answers
    every request as OpenAI does a prompt over the model's context."""
    from fastapi import FastAPI
    from fastapi.responses import JSONResponse

    from tests.pool.openai_server import ServerThread, make_app

    small = FastAPI()

    @small.post("/v1/chat/completions")
    async def too_long():
        return JSONResponse({"error": {"message": "This model's maximum context length is 8 tokens. However, your "
                                                  "messages resulted in 12 tokens.", "type": "invalid_request_error",
                                       "param": "messages", "code": "context_length_exceeded"}}, status_code=400)

    echo, tiny = ServerThread(make_app()).start(), ServerThread(small).start()
    try:
        cfg = yaml.safe_load((CONF_DIR / "pool" / "routellm_replay.yaml").read_text())
        cfg["candidates"] += [{"name": n, "price_in": 0.1, "price_out": 0.1, "backend": "openai",
                               "options": {"base_url": f"{srv.url}/v1", "max_retries": 0}}
                              for n, srv in (("echo", echo), ("tiny", tiny))]
        client, _, _ = make_client(tmp_path, CandidatePool.from_config(cfg))
        ask = [{"role": "user", "content": "three little words"}]
        with client.stream("POST", "/v1/chat/completions", headers=ALICE,
                           json={"model": "echo", "stream": True, "messages": ask}) as s:
            assert s.status_code == 200
            chunks = [json.loads(line[6:]) for line in s.iter_lines() if line.startswith("data: {")]
        assert "".join(c["choices"][0]["delta"].get("content", "") for c in chunks if c["choices"]) == \
            "echo: three little words"
        r = client.post("/v1/chat/completions", headers=ALICE,
                        json={"model": "echo", "messages": [{"role": "user", "content": "BAD400"}]})
        assert r.status_code == 400 and err(r)["param"] == "messages" and "refused" in err(r)["message"], r.text
        for stream in (False, True):
            r = client.post("/v1/chat/completions", headers=ALICE, json={"model": "tiny", "stream": stream,
                                                                         "messages": ask})
            assert r.status_code == 400, r.text
            assert err(r)["code"] == "context_length_exceeded" and err(r)["type"] == "invalid_request_error"
            assert "maximum context length of 8 tokens" in err(r)["message"] and err(r)["param"] == "messages"
    finally:
        echo.stop()
        tiny.stop()


def test_a_body_that_stops_arriving_is_a_408(tmp_path, pool):
    """A slow client (a body announced, a third sent, then nothing) gets 408 naming serving.body_timeout_s once
    the time is up, instead of holding its request open: the real app, driven at the ASGI level."""
    make_client(tmp_path, pool, {"body_timeout_s": 0.3})
    app = create_app()
    sent: list[dict] = []

    async def run() -> float:
        parts = [{"type": "http.request", "body": b'{"query": "' + b"a" * 90, "more_body": True}]

        async def receive() -> dict:
            if parts:
                return parts.pop()
            await asyncio.sleep(3600)  # the rest never comes

        async def send(msg: dict) -> None:
            sent.append(msg)

        scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "POST",
                 "scheme": "http", "path": "/route", "raw_path": b"/route", "root_path": "", "query_string": b"",
                 "headers": [(b"authorization", b"Bearer k-alice"), (b"content-type", b"application/json"),
                             (b"content-length", b"300")], "client": ("127.0.0.1", 5), "server": ("127.0.0.1", 80)}
        t0 = asyncio.get_running_loop().time()
        await asyncio.wait_for(app(scope, receive, send), 10)
        return asyncio.get_running_loop().time() - t0

    took = asyncio.run(run())
    assert sent[0]["type"] == "http.response.start" and sent[0]["status"] == 408, sent[:1]
    body = json.loads(b"".join(m.get("body", b"") for m in sent[1:]))
    assert body["error"]["field"] == "body" and "serving.body_timeout_s" in body["error"]["message"]
    assert 0.3 <= took < 5


def test_the_traffic_log_records_routes_chats_streams_and_feedback(tmp_path, pool, gsm8k_prompt, logged_answers):
    """serving.traffic on: every /route, chat completion (plain, streamed, direct, arena) and feedback is a
    record on disk when the reply arrives; requests carry the decision and each call's reply and cost."""
    from rlrouter.serving.traffic import read_traffic

    folder = tmp_path / "traffic"
    client, _, _ = make_client(tmp_path, pool, {"traffic": {"enabled": True, "path": str(folder)}},
                               propensity_draws=512)
    prompt, _ = gsm8k_prompt
    r = client.post("/route", json={"query": prompt}, headers=ALICE).json()
    assert len(read_traffic(folder).requests) == 1  # on disk when the reply is here
    assert client.post("/feedback", json={"request_id": r["request_id"], "outcome": "win"}, headers=ALICE).status_code == 200
    msgs = [{"role": "user", "content": prompt}]
    chat = client.post("/v1/chat/completions", json={"model": "auto", "messages": msgs}, headers=ALICE).json()
    with client.stream("POST", "/v1/chat/completions", json={"model": "auto", "messages": msgs, "stream": True},
                       headers=ALICE) as s:
        streamed = "".join(s.iter_text())
    assert "[DONE]" in streamed
    client.post("/v1/chat/completions", json={"model": MIXTRAL, "messages": msgs}, headers=BOB)
    client.post("/v1/chat/completions", json={"model": "arena", "messages": msgs}, headers=ALICE)
    got = read_traffic(folder)
    assert got.skipped == 0 and got.orphan_feedback == []
    route, plain, stream, direct, arena = got.requests
    assert route["id"] == r["request_id"] and route["endpoint"] == "route" and route["calls"] == []
    assert route["decision"]["model"] == r["model"] and route["decision"]["router"] == "selector"
    assert route["prompt"] == prompt and route["user"] == "alice"
    assert 0 < route["decision"]["propensity"] <= 1  # the selector's probability of this pick
    assert [f["outcome"] for f in route["feedback"]] == ["win"]
    assert plain["id"] == chat["x_rlrouter"]["request_id"]
    (call,) = plain["calls"]
    assert call["model"] == chat["model"] and call["reply"] == logged_answers[chat["model"]] and call["cost"] > 0
    assert stream["calls"][0]["reply"] == logged_answers[stream["decision"]["model"]]
    assert direct["decision"] == {"model": MIXTRAL, "models": [MIXTRAL], "mode": "direct", "router": "caller"}
    assert direct["user"] == "bob" and direct["id"].startswith("chat-")
    assert {c["model"] for c in arena["calls"]} == set(pool.names)


def test_the_traffic_log_keeps_no_prompt_text_when_told(tmp_path, pool, gsm8k_prompt):
    class Encoder:
        def encode_one(self, text):
            return [float(len(text)), 1.0]

    from rlrouter.serving.traffic import read_traffic, segments

    folder = tmp_path / "traffic"
    client, _, svc = make_client(tmp_path, pool, {"traffic": {"enabled": True, "path": str(folder),
                                                              "store_prompts": False}})
    svc.ctx.encoder_ = Encoder()
    prompt, _ = gsm8k_prompt
    client.post("/route", json={"query": prompt}, headers=ALICE)
    (rec,) = read_traffic(folder).requests
    assert "prompt" not in rec and len(rec["prompt_sha256"]) == 64 and rec["embedding"] == [float(len(prompt)), 1.0]
    assert prompt[:40].encode() not in b"".join(p.read_bytes() for p in segments(folder))
    from rlrouter.serving.traffic import PROPENSITY_DRAWS, selector_defaults

    assert selector_defaults({"seed": 1}, {"traffic": {"enabled": True}}) == {"propensity_draws": PROPENSITY_DRAWS,
                                                                            "seed": 1}
    assert selector_defaults({"propensity_draws": 0}, {"traffic": {"enabled": True}}) == {"propensity_draws": 0}
    assert selector_defaults({"seed": 1}, {}) == {"seed": 1}
    with pytest.raises(ValueError, match="serving config field 'traffic.max_segment_mb'"):
        ServingConfig(traffic={"max_segment_mb": -1})
    with pytest.raises(ValueError, match="serving config field 'traffic.folder': unknown field"):
        ServingConfig(traffic={"folder": "x"})


def test_json_depth_counts_brackets_outside_strings_across_chunks():
    from rlrouter.serving.api import MAX_JSON_DEPTH, JsonDepth

    def deepest(*chunks):
        d = JsonDepth()
        for c in chunks:
            d.feed(c)
        return d.deepest

    assert deepest(b'{"a": [1, {"b": [2]}]}') == 4
    assert deepest(b'{"q": "[[[[{{{{"}') == 1  # inside a string
    assert deepest(b'{"q": "a\\"[[[["}') == 1  # an escaped quote does not end the string
    assert deepest(b'{"q": "a\\\\"', b', "r": [[1]]}') == 3  # an escaped backslash does
    assert deepest(b'{"q": "a\\', b'"[[["}') == 1  # an escape split across chunks
    assert deepest(b"[" * 150, b"]" * 150) == 150 > MAX_JSON_DEPTH


def test_deep_json_is_refused_whatever_the_recursion_limit(env):
    """The answer to a too-deep body must not depend on the process's recursion limit (a library may raise
    it: this test once failed only after other tests had run)."""
    import sys

    client, _, _ = env
    json_h = {**ALICE, "Content-Type": "application/json"}
    nested = b'{"query": ' + b"[" * 500 + b"]" * 500 + b"}"
    old = sys.getrecursionlimit()
    try:
        for limit in (old, 100_000):
            sys.setrecursionlimit(limit)
            r = client.post("/route", content=nested, headers=json_h)
            assert r.status_code == 400 and "nested too deeply" in err(r)["message"] and err(r)["field"] == "body"
    finally:
        sys.setrecursionlimit(old)
    ok = b'{"query": "hi", "candidates": ' + b"[" * 1 + b'"' + GPT4.encode() + b'"]}'
    assert client.post("/route", content=ok, headers=json_h).status_code == 200


def test_exploration_logs_a_second_candidates_reply_in_the_background(tmp_path, pool, gsm8k_prompt, logged_answers):
    """serving.traffic.explore_share=1: every routed request also asks the other candidate, after the caller's
    answer; the reply is logged with its logged correctness, counted on /metrics, and exported beside the route."""
    import time as _time

    from rlrouter.serving.traffic import read_traffic
    from rlrouter.serving.traffic_export import write_export

    folder = tmp_path / "traffic"
    client, _, _ = make_client(tmp_path, pool, {"traffic": {"enabled": True, "path": str(folder), "explore_share": 1.0,
                                                            "explore_seed": 0}})
    prompt, _ = gsm8k_prompt
    msgs = [{"role": "user", "content": prompt}]
    with client:  # one event loop for the whole test: the background calls run on it
        before = client.get("/metrics").text
        chat = client.post("/v1/chat/completions", json={"model": "auto", "messages": msgs}, headers=ALICE).json()
        r = client.post("/route", json={"query": prompt}, headers=ALICE).json()
        client.post("/v1/chat/completions", json={"model": MIXTRAL, "messages": msgs}, headers=ALICE)  # named: none
        deadline = _time.time() + 30
        while _time.time() < deadline and sum(len(q["explore"]) for q in read_traffic(folder).requests) < 2:
            _time.sleep(0.1)
        metrics = client.get("/metrics").text
    reqs = {q["id"]: q for q in read_traffic(folder).requests}
    for rid, chosen in ((chat["x_rlrouter"]["request_id"], chat["model"]), (r["request_id"], r["model"])):
        (call,) = reqs[rid]["explore"]
        other = next(m for m in pool.names if m != chosen)
        assert call["model"] == other and call["reply"] == logged_answers[other] and isinstance(call["correct"], bool)
        assert call["propensity"] == 1.0  # share 1, one other candidate: the draw was certain
    assert sum(len(q["explore"]) for q in reqs.values()) == 2  # the request that named its model explores nothing
    assert "rlrouter_traffic_explore_calls_total" in metrics and "rlrouter_traffic_explore_cost_usd_total" in metrics
    assert 'ok="true"' in metrics and metrics != before
    report = write_export(read_traffic(folder), tmp_path / "export", test_share=0.0)
    assert report["rows_with_counterfactual_replies"] == 2 and "did not choose (exploration)" in report["note"]
    with pytest.raises(ValueError, match="field .traffic.explore_share.: a share"):
        ServingConfig(traffic={"explore_share": 2})


def test_a_judge_grades_routed_replies_in_the_background(tmp_path, pool, gsm8k_prompt, logged_answers):
    """serving.traffic.judge names a pool candidate (here an OpenAI-compatible server over real HTTP, which
    grades "yes" when the answer holds a digit): it grades the routed reply and the explored one after the
    caller's answer, is never routed to itself, and its grades and cost are logged, counted and exported."""
    import time as _time

    from rlrouter.serving.traffic import read_traffic
    from rlrouter.serving.traffic_export import export_rows
    from tests.pool.openai_server import ServerThread, make_app

    srv = ServerThread(make_app()).start()
    try:
        cfg = yaml.safe_load((CONF_DIR / "pool" / "routellm_replay.yaml").read_text())
        cfg["candidates"].append({"name": "judge", "price_in": 1.0, "price_out": 1.0, "backend": "openai",
                                  "options": {"base_url": f"{srv.url}/v1", "model": "grader-1"}})
        judged_pool = CandidatePool.from_config(cfg)
        folder = tmp_path / "traffic"
        client, _, svc = make_client(tmp_path, judged_pool, {"traffic": {
            "enabled": True, "path": str(folder), "explore_share": 1.0, "explore_seed": 0, "judge": "judge"}})
        assert "judge" not in svc.candidates
        prompt, _ = gsm8k_prompt
        with client:
            chat = client.post("/v1/chat/completions", headers=ALICE,
                               json={"model": "auto", "messages": [{"role": "user", "content": prompt}]}).json()
            assert chat["model"] != "judge"
            deadline = _time.time() + 30
            while _time.time() < deadline and sum(len(q["judge"]) for q in read_traffic(folder).requests) < 2:
                _time.sleep(0.1)
            metrics = client.get("/metrics").text
            r = client.post("/v1/chat/completions", headers=ALICE, json={"model": "judge", "messages": [
                {"role": "user", "content": "hi"}]})
            assert r.status_code == 404  # the judge is no model callers may name
    finally:
        srv.stop()
    (req,) = read_traffic(folder).requests
    grades = {g["model"]: g for g in req["judge"]}
    assert set(grades) == {GPT4, MIXTRAL}  # the routed reply and the explored one
    for m, g in grades.items():
        want = 1.0 if any(ch.isdigit() for ch in logged_answers[m]) else 0.0
        assert g["judge"] == "judge" and g["grade"] == want and g["cost"] > 0
    assert 'rlrouter_traffic_judge_calls_total{grade="yes",judge="judge"}' in metrics
    # a replay's logged correctness outranks the judge; the judge fills a cell nothing else scores
    rows, _ = export_rows(read_traffic(folder), [GPT4, MIXTRAL])
    explored = req["explore"][0]["model"]
    assert rows[0][explored] == float(req["explore"][0]["correct"])
    del req["explore"][0]["correct"]
    rows, _ = export_rows(read_traffic(folder).__class__([req], [], 0, []), [GPT4, MIXTRAL])
    assert rows[0][explored] == grades[explored]["grade"]
    with pytest.raises(ValueError, match="serving.traffic.judge: 'nobody' is not a candidate"):
        make_client(tmp_path / "x", pool, {"traffic": {"enabled": True, "path": str(folder), "judge": "nobody"}})
