"""A user's second day, over real HTTP against the Serve app on the local Ray cluster, with the
default pool (two replays and SmolLM2 on a vLLM engine, max_model_len 2048):

- a keyless VSR request from loopback with a forged X-Forwarded-For is refused (Ray Serve's uvicorn
  takes a loopback peer's X-Forwarded-For as the client); from a listed trusted proxy the client it
  forwarded for counts;
- the openai SDK's ``user=`` is an end-user tag, not a second identity;
- ``n=3`` is refused naming ``n``; a model name in another case is that model;
- a prompt over SmolLM2's context is a 400 without Ray internals in its message;
- a streamed SmolLM2 answer arrives token by token: the first text long before the end;
- ``GET /metrics`` returns exactly the series docs/metrics.md lists.
"""

from __future__ import annotations

import json
import re
import time

import httpx
import pytest

from tests.helpers import ROOT, serve_app

pytestmark = [pytest.mark.ray, pytest.mark.vllm, pytest.mark.slow]

APP = "rlrouter-second-day"
KEY = "7d1e9a3c5b0f2e4d6c8a1b3e"
# A reverse proxy in front of the app. 127.0.0.2 is a loopback address, so the test can connect from it,
# but not one uvicorn trusts by default (127.0.0.1 and ::1): its X-Forwarded-For reaches the app as sent.
PROXY = "127.0.0.2"
VSR_BYTES = b'{"query":"Task: math_decision\\nAvailable models: qwen3-8b, llama-3.1-70b"}'
VSR_HEADERS = {"Content-Type": "application/json", "User-Agent": "Go-http-client/1.1"}
UNLOGGED = "Name one colour of a ripe banana, in one word."
SERVING = {"router_r1_keyless_networks": ["10.0.0.0/8"], "trusted_proxies": [f"{PROXY}/32"],
           "model_map": {"qwen3-8b": "smollm2-135m", "llama-3.1-70b": "mixtral-8x7b-instruct"}}


@pytest.fixture(scope="module")
def base(ray_cluster, tmp_path_factory):
    yield from serve_app(APP, KEY, "second-day", SERVING, tmp_path_factory.mktemp("sel"))


@pytest.fixture(scope="module")
def sdk(base):
    import openai

    return openai.OpenAI(base_url=f"{base}/v1", api_key=KEY, timeout=600, max_retries=0)


@pytest.fixture(scope="module")
def logged_prompt():
    """A prompt the replays logged, and each replay's logged answer (the app's pool reads the same table)."""
    from rlrouter.pool.replay import shared_table

    table = shared_table(None)
    i = table.source.index("gsm8k")
    return table.prompts[i], {"mixtral-8x7b-instruct": table.response(i, "mistralai/Mixtral-8x7B-Instruct-v0.1")}


def test_forged_forwarded_for_from_loopback_is_refused(base):
    r = httpx.post(f"{base}/router_r1/route", content=VSR_BYTES, timeout=30,
                   headers={**VSR_HEADERS, "X-Forwarded-For": "10.1.2.3"})
    assert r.status_code == 401, r.text
    msg = r.json()["error"]["message"]
    assert "X-Forwarded-For" in msg and "serving.trusted_proxies" in msg and "serving.router_r1_keyless_networks" in msg


def test_a_trusted_proxy_forwards_the_client_address(base):
    with httpx.Client(base_url=base, timeout=30, transport=httpx.HTTPTransport(local_address=PROXY)) as proxy:
        r = proxy.post("/router_r1/route", content=VSR_BYTES, headers={**VSR_HEADERS, "X-Forwarded-For": "10.1.2.3"})
        assert r.status_code == 200, r.text
        assert r.json()["selected_model"] in ("qwen3-8b", "llama-3.1-70b")
        # the proxy appended the address it saw; what the client wrote to the left of it counts for nothing
        r = proxy.post("/router_r1/route", content=VSR_BYTES,
                       headers={**VSR_HEADERS, "X-Forwarded-For": "10.1.2.3, 192.0.2.7"})
        assert r.status_code == 401 and "192.0.2.7 is not in serving.router_r1_keyless_networks" in r.text
        r = proxy.post("/router_r1/route", content=VSR_BYTES, headers=VSR_HEADERS)  # the proxy itself is not VSR
        assert r.status_code == 401 and f"{PROXY} is not in serving.router_r1_keyless_networks" in r.text


def test_route_picks_a_model_that_answers_an_unlogged_prompt(base):
    """/route used to pick a replay for a prompt nobody logged, and calling it was a 404 replay_miss."""
    auth = {"Authorization": f"Bearer {KEY}"}
    for i in range(6):
        d = httpx.post(f"{base}/route", json={"query": UNLOGGED, "session_id": f"unlogged-{i}"}, headers=auth,
                       timeout=60).json()
        assert d["model"] == "smollm2-135m" and d["replay_miss"] is None, d  # the only one that can answer
    r = httpx.post(f"{base}/v1/chat/completions", headers=auth, timeout=600,
                   json={"model": d["model"], "messages": [{"role": "user", "content": UNLOGGED}], "max_tokens": 8})
    assert r.status_code == 200 and r.json()["choices"][0]["message"]["content"], r.text


def test_openai_user_is_an_end_user_tag(sdk, logged_prompt):
    r = sdk.chat.completions.create(model="auto", user="customer-42", max_tokens=8,
                                    messages=[{"role": "user", "content": logged_prompt[0]}])
    assert r.choices[0].message.content and r.model_extra["x_rlrouter"]["end_user"] == "customer-42"


def test_n_other_than_one_is_refused_naming_it(sdk, logged_prompt):
    import openai

    with pytest.raises(openai.BadRequestError) as e:
        sdk.chat.completions.create(model="auto", n=3, messages=[{"role": "user", "content": logged_prompt[0]}])
    assert e.value.status_code == 400 and e.value.param == "n" and "field 'n'" in e.value.message


def test_a_model_name_in_another_case_is_that_model(sdk, logged_prompt):
    import openai

    prompt, answers = logged_prompt
    r = sdk.chat.completions.create(model="Mixtral-8x7B-Instruct", messages=[{"role": "user", "content": prompt}])
    assert r.model == "mixtral-8x7b-instruct" and r.choices[0].message.content == answers[r.model]
    with pytest.raises(openai.NotFoundError, match="mixtral-8x7b-instruct"):  # unknown: the known names
        sdk.chat.completions.create(model="mixtral-8x7b", messages=[{"role": "user", "content": prompt}])


INTERNALS = ("\x1b", "actor_id", "pid=", "RayTaskError", "Traceback", "ray::", 'File "')


def over_the_context(base: str, stream: bool) -> httpx.Response:
    long = "word " * 3000  # about 3,000 SmolLM2 tokens: over its max_model_len of 2048
    return httpx.post(f"{base}/v1/chat/completions", timeout=600, headers={"Authorization": f"Bearer {KEY}"},
                      json={"model": "smollm2-135m", "stream": stream, "max_tokens": 8,
                            "messages": [{"role": "user", "content": long}]})


@pytest.mark.parametrize("stream", [False, True])
def test_a_prompt_over_the_context_is_a_400_without_internals(base, stream):
    r = over_the_context(base, stream)
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert set(err) >= {"message", "type", "param", "code"} and err["type"] == "invalid_request_error"
    assert err["param"] == "messages" and "smollm2-135m" in err["message"]
    assert not [bad for bad in INTERNALS if bad in err["message"]], err["message"]


def test_a_prompt_over_the_context_says_context_length_exceeded(base):
    err = over_the_context(base, stream=False).json()["error"]
    assert err["code"] == "context_length_exceeded", err["message"]


def test_a_streamed_answer_arrives_as_the_candidate_decodes(base):
    body = {"model": "smollm2-135m", "max_tokens": 48,
            "messages": [{"role": "user", "content": "Count from 1 to 100, separated by commas."}]}
    auth = {"Authorization": f"Bearer {KEY}"}
    whole = httpx.post(f"{base}/v1/chat/completions", json=body, headers=auth, timeout=600)  # also starts the engine
    assert whole.status_code == 200, whole.text
    t0 = time.perf_counter()
    arrivals: list[tuple[float, str]] = []  # (seconds since the request, content of one event)
    with httpx.stream("POST", f"{base}/v1/chat/completions", json={**body, "stream": True}, headers=auth,
                      timeout=600) as r:
        assert r.status_code == 200
        for line in r.iter_lines():
            if line.startswith("data: {"):
                delta = json.loads(line[6:])["choices"][0]["delta"]
                if delta.get("content"):
                    arrivals.append((time.perf_counter() - t0, delta["content"]))
    total = time.perf_counter() - t0
    assert len(arrivals) > 1, arrivals
    assert "".join(c for _, c in arrivals) == whole.json()["choices"][0]["message"]["content"]
    assert arrivals[0][0] < 0.5 * total, (arrivals[0][0], total)  # 48 tokens: the first is far from the end


def documented_metrics(section: str = "## Serve app: `GET /metrics`") -> set[str]:
    """The first column of the table in ``section`` of docs/metrics.md."""
    text = (ROOT / "docs" / "metrics.md").read_text()
    body = re.split(r"\n#{2,3} ", text.split(section, 1)[1], maxsplit=1)[0]
    return set(re.findall(r"^\| `([a-z_]+)` \|", body, flags=re.M))


def test_metrics_returns_what_docs_metrics_md_lists(base):
    from prometheus_client.parser import text_string_to_metric_families

    auth = {"Authorization": f"Bearer {KEY}"}
    d = httpx.post(f"{base}/route", json={"query": UNLOGGED}, headers=auth, timeout=60)  # a decision ...
    assert d.status_code == 200, d.text
    f = httpx.post(f"{base}/feedback", json={"request_id": d.json()["request_id"], "outcome": "win"}, headers=auth,
                   timeout=60)  # ... and feedback on it
    assert f.status_code == 200, f.text
    r = httpx.get(f"{base}/metrics", timeout=30)  # no key, as /health
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/plain"), r.text
    samples = [s for fam in text_string_to_metric_families(r.text) for s in fam.samples]
    scraped = {s.name for s in samples if s.name.startswith("rlrouter_") and not s.name.endswith("_created")}
    documented = documented_metrics()
    assert len(documented) >= 7, documented
    assert scraped == documented, (sorted(scraped - documented), sorted(documented - scraped))
    routes = {s.labels["route"] for s in samples if s.name == "rlrouter_http_requests_total"}
    assert {"/route", "/feedback"} <= routes, routes
