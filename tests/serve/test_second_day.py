"""A user's second day, over real HTTP against the Serve app on the local Ray cluster, with the
default pool (two replays and SmolLM2 on a vLLM engine, max_model_len 2048):

- a keyless VSR request from loopback with a forged X-Forwarded-For is refused (Ray Serve's uvicorn
  takes a loopback peer's X-Forwarded-For as the client); from a listed trusted proxy the client it
  forwarded for counts;
- the openai SDK's ``user=`` is an end-user tag, not a second identity;
- ``n=3`` is refused naming ``n``; a model name in another case is that model;
- a prompt too long, over SmolLM2's context or over the server's character cap, gets one answer: OpenAI's
  400 ``context_length_exceeded`` without Ray internals or the backend's name; a ``max_tokens`` the context
  cannot hold is a 400 naming ``max_tokens`` and the limit, and an unset one is cut to the room left;
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
BACKEND = ("vllm", "VLLM", "ValidationError", "RequestTooLong")


def chat(base: str, content: str, stream: bool = False, **params) -> httpx.Response:
    return httpx.post(f"{base}/v1/chat/completions", timeout=600, headers={"Authorization": f"Bearer {KEY}"},
                      json={"model": "smollm2-135m", "stream": stream, "messages": [{"role": "user", "content": content}],
                            **params})


def too_long(r: httpx.Response, param: str = "messages") -> dict:
    """The one answer to a request too long (docs/serve.md "Errors"): 400, OpenAI's shape and code, no internals,
    no backend named."""
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert set(err) >= {"message", "type", "param", "code"} and err["type"] == "invalid_request_error"
    assert err["param"] == param, err
    assert not [bad for bad in INTERNALS + BACKEND if bad in err["message"]], err["message"]
    return err


@pytest.mark.parametrize("stream", [False, True])
def test_a_prompt_over_the_context_is_openais_context_length_exceeded(base, stream):
    err = too_long(chat(base, "word " * 3000, stream, max_tokens=8))  # ~3,000 tokens, under the character cap
    assert err["code"] == "context_length_exceeded", err
    assert err["message"].startswith("field 'messages': model 'smollm2-135m' has a maximum context length of 2048 "
                                     "tokens. However, your messages resulted in "), err["message"]


@pytest.mark.parametrize("stream", [False, True])
def test_a_prompt_over_the_character_cap_gets_the_same_answer(base, stream):
    err = too_long(chat(base, "x" * 40_000, stream))
    assert err["code"] == "context_length_exceeded", err
    assert "32000 characters" in err["message"] and "40000 characters" in err["message"], err["message"]


def test_a_prompt_that_fits_gets_the_room_left_when_max_tokens_is_not_set(base):
    """The candidate's default max_tokens (256) is cut to what the context leaves, as vLLM's server does."""
    r = chat(base, "word " * 1900)
    assert r.status_code == 200, r.text
    usage = r.json()["usage"]
    assert usage["prompt_tokens"] + usage["completion_tokens"] <= 2048 and usage["prompt_tokens"] > 1800, usage


@pytest.mark.parametrize("stream", [False, True])
def test_max_tokens_beyond_the_context_is_refused_naming_it(base, stream):
    err = too_long(chat(base, "Say hi.", stream, max_tokens=100_000), param="max_tokens")
    assert err["code"] == "invalid_value" and "100000" in err["message"] and "2048 tokens" in err["message"], err
    assert "max_tokens may be at most 20" in err["message"], err["message"]  # 2048 less the prompt's few tokens
    err = too_long(chat(base, "Say hi.", stream, max_tokens=2048), param="max_tokens")  # the whole context: no room
    ok = chat(base, "Say hi.", stream, max_tokens=4)
    assert ok.status_code == 200, ok.text


def test_the_openai_sdk_sees_both_as_bad_requests(sdk):
    import openai

    for params, param in (({"messages": [{"role": "user", "content": "word " * 3000}]}, "messages"),
                          ({"messages": [{"role": "user", "content": "Say hi."}], "max_tokens": 100_000}, "max_tokens")):
        with pytest.raises(openai.BadRequestError) as e:
            sdk.chat.completions.create(model="smollm2-135m", **params)
        assert e.value.param == param
