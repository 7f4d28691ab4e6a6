"""The openai backend over real HTTP against the local OpenAI-compatible server of openai_server.py."""

from __future__ import annotations

import asyncio
import time

import httpx
import pytest

from rlrouter.pool import Candidate, CandidatePool, PoolConfigError
from rlrouter.pool.openai_compat import EndpointError, OpenAIBackend
from rlrouter.pool.options import OptionError

from .conftest import stats


def backend(url: str, **opts) -> OpenAIBackend:
    options = {"base_url": f"{url}/v1", "model": "echo-1", "backoff_s": 0.01, **opts}
    return OpenAIBackend(Candidate("echo", price_in=2.0, price_out=6.0, backend="openai", options=options))


def test_generate_text_usage_cost_and_request_body(server_url):
    b = backend(server_url, max_tokens=32, temperature=0.5, system_prompt="be brief")
    rs = asyncio.run(b.generate(["what is two plus two", "hi"]))
    assert [r.error for r in rs] == [None, None]
    assert rs[0].text == "echo: what is two plus two"
    # server usage: prompt = words of all messages ("be brief" 2 + 5), completion = words of the reply (6)
    assert (rs[0].prompt_tokens, rs[0].completion_tokens) == (7, 6)
    assert rs[0].cost == pytest.approx((7 * 2.0 + 6 * 6.0) / 1e6)
    assert (rs[1].prompt_tokens, rs[1].completion_tokens) == (3, 2)
    assert rs[0].latency_s > 0 and rs[0].correct is None
    body = httpx.get(f"{server_url}/last_body").json()
    assert body["model"] == "echo-1" and body["max_tokens"] == 32 and body["temperature"] == 0.5
    assert body["messages"][0] == {"role": "system", "content": "be brief"}
    assert "stream" not in body


def test_retries_5xx_then_succeeds(server_url):
    b = backend(server_url, max_retries=3)
    r = asyncio.run(b.generate(["FAIL2:retryok please"]))[0]
    assert r.ok and r.text == "echo: FAIL2:retryok please"
    assert stats(server_url)["requests"] == 3  # two 503s, then the answer


def test_gives_up_after_max_retries(server_url):
    b = backend(server_url, max_retries=2)
    r = asyncio.run(b.generate(["FAIL9:giveup"]))[0]
    assert not r.ok and r.text == ""
    assert "HTTP 503" in r.error and "overloaded" in r.error and "gave up after 3 attempts" in r.error
    assert stats(server_url)["requests"] == 3


def test_4xx_is_not_retried(server_url):
    b = backend(server_url, max_retries=3)
    r = asyncio.run(b.generate(["BAD400"]))[0]
    assert "HTTP 400" in r.error and "unknown parameter" in r.error
    assert stats(server_url)["requests"] == 1


def test_timeout_per_attempt(server_url):
    b = backend(server_url, timeout_s=0.2, max_retries=1)
    t0 = time.perf_counter()
    r = asyncio.run(b.generate(["SLEEP2 slow"]))[0]
    dt = time.perf_counter() - t0
    assert "timeout after 0.2s" in r.error and "gave up after 2 attempts" in r.error
    assert dt < 1.5  # two 0.2 s attempts, not the server's 2 s


def test_connection_refused_is_an_error_not_a_raise():
    import socket

    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()  # nothing listens there now
    b = backend(f"http://127.0.0.1:{port}", max_retries=1)
    r = asyncio.run(b.generate(["anyone?"]))[0]
    assert "connection error" in r.error and "gave up after 2 attempts" in r.error


def test_bounded_concurrency(server_url):
    b = backend(server_url, max_concurrency=3)
    t0 = time.perf_counter()
    rs = asyncio.run(b.generate([f"SLEEP0.1 q{i}" for i in range(12)]))
    dt = time.perf_counter() - t0
    assert all(r.ok for r in rs) and [r.text for r in rs] == [f"echo: SLEEP0.1 q{i}" for i in range(12)]
    assert stats(server_url)["peak"] == 3
    assert dt >= 0.4  # 12 requests, 3 at a time, 0.1 s each


def test_missing_usage_is_estimated(server_url):
    r = asyncio.run(backend(server_url).generate(["NOUSAGE abcdefgh"]))[0]
    # ceil(chars / 4): prompt "NOUSAGE abcdefgh" (16 chars) -> 4; reply "echo: NOUSAGE abcdefgh" (22) -> 6
    assert (r.prompt_tokens, r.completion_tokens) == (4, 6)


def test_api_key_from_env(keyed_server, monkeypatch):
    monkeypatch.setenv("TEST_ECHO_KEY", "sk-test-123")
    r = asyncio.run(backend(keyed_server.url, api_key_env="TEST_ECHO_KEY").generate(["hello"]))[0]
    assert r.ok and r.text == "echo: hello"
    monkeypatch.setenv("TEST_ECHO_KEY", "wrong")
    r = asyncio.run(backend(keyed_server.url, api_key_env="TEST_ECHO_KEY").generate(["hello"]))[0]
    assert "HTTP 401" in r.error and "invalid api key" in r.error


def test_missing_api_key_env_fails_at_build(monkeypatch):
    monkeypatch.delenv("NO_SUCH_KEY_VAR", raising=False)
    with pytest.raises(OptionError, match="NO_SUCH_KEY_VAR is not set"):
        backend("http://127.0.0.1:1", api_key_env="NO_SUCH_KEY_VAR")
    cfg = {"candidates": [{"name": "x", "price_in": 1, "price_out": 1, "backend": "openai",
                           "options": {"base_url": "http://127.0.0.1:1/v1", "api_key_env": "NO_SUCH_KEY_VAR"}}]}
    with pytest.raises(PoolConfigError) as e:
        CandidatePool.from_config(cfg)
    assert e.value.field == "pool.candidates[0].options.api_key_env"


def test_stream_chunks(server_url):
    b = backend(server_url)

    async def collect():
        return [c async for c in b.stream([{"role": "user", "content": "stream me please"}],
                                          stream_options={"include_usage": True})]

    chunks = asyncio.run(collect())
    text = "".join(c["choices"][0]["delta"].get("content", "") for c in chunks if c["choices"])
    assert text == "echo: stream me please"
    assert chunks[-1]["usage"] == {"prompt_tokens": 3, "completion_tokens": 4, "total_tokens": 7}
    assert httpx.get(f"{server_url}/last_body").json()["stream"] is True


def test_stream_error_before_first_chunk_raises(server_url):
    b = backend(server_url, max_retries=0)

    async def collect():
        return [c async for c in b.stream([{"role": "user", "content": "BAD400"}])]

    with pytest.raises(EndpointError, match="HTTP 400"):
        asyncio.run(collect())


def test_pool_chat_and_stream_name_the_candidate(server_url):
    pool = CandidatePool.from_config({"candidates": [
        {"name": "small", "price_in": 1.0, "price_out": 2.0, "backend": "openai",
         "options": {"base_url": f"{server_url}/v1", "model": "echo-1"}}]})

    async def go():
        r, data = await pool.chat("small", [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"},
                                            {"role": "user", "content": "c d"}], model="auto")
        chunks = [c async for c in pool.stream("small", [{"role": "user", "content": "x y"}])]
        await pool.close()
        return r, data, chunks

    r, data, chunks = asyncio.run(go())
    assert r.text == "echo: c d" and data["model"] == "small"
    assert data["usage"]["prompt_tokens"] == 4 and data["x_cost_usd"] == pytest.approx((4 * 1 + 3 * 2) / 1e6)
    assert all(c["model"] == "small" for c in chunks)
    assert "".join(c["choices"][0]["delta"].get("content", "") for c in chunks if c["choices"]) == "echo: x y"
