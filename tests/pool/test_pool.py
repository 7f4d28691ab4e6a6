"""CandidatePool: config errors name the field, route never raises, the global bound holds."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from rlrouter.pool import Backend, Candidate, CandidatePool, CandidateResponse, PoolConfigError, read_pool_config

from .conftest import stats


def spec(name: str = "a", **kw: Any) -> dict[str, Any]:
    return {"name": name, "price_in": 1.0, "price_out": 2.0, "backend": "openai",
            "options": {"base_url": "http://127.0.0.1:9/v1"}, **kw}


@pytest.mark.parametrize("cfg, field, msg", [
    ({"candidates": [spec("a"), spec("b", price_in=-1)]}, "pool.candidates[1].price_in", "number >= 0"),
    ({"candidates": [spec("a"), spec("b", price_out="cheap")]}, "pool.candidates[1].price_out", "number >= 0"),
    ({"candidates": [{"price_in": 1, "price_out": 1}]}, "pool.candidates[0].name", "required"),
    ({"candidates": [spec("a", backend="grpc")]}, "pool.candidates[0].backend", "unknown 'grpc'"),
    ({"candidates": [spec("a", cost=3)]}, "pool.candidates[0].cost", "unknown field"),
    ({"candidates": [spec("a"), spec("a")]}, "pool.candidates[1].name", "duplicate 'a'"),
    ({"candidates": [spec("gpt: 4")]}, "pool.candidates[0].name", "without ':'"),
    ({"candidates": [spec("a", options={"base_url": "ftp://x"})]}, "pool.candidates[0].options.base_url",
     "http(s) URL"),
    ({"candidates": [spec("a", options={"base_url": "http://x/v1", "timeout": 3})]},
     "pool.candidates[0].options.timeout", "unknown option"),
    ({"candidates": [spec("a", options={"base_url": "http://x/v1", "max_retries": -1})]},
     "pool.candidates[0].options.max_retries", "an int >= 0"),
    ({"candidates": [spec("a", options={})]}, "pool.candidates[0].options.base_url", "required"),
    ({"candidates": []}, "pool.candidates", "non-empty list"),
    ({"candidates": [spec()], "max_concurrency": 0}, "pool.max_concurrency", "int >= 1"),
    ({"candidates": [spec()], "retries": 2}, "pool.retries", "unknown field"),
])
def test_config_errors_name_the_field(cfg, field, msg):
    with pytest.raises(PoolConfigError) as e:
        CandidatePool.from_config(cfg)
    assert e.value.field == field and msg in str(e.value) and str(e.value).startswith(field + ": ")


def test_omegaconf_config_and_lookup():
    from omegaconf import OmegaConf

    pool = CandidatePool.from_config(OmegaConf.create({"max_concurrency": 4, "candidates": [
        spec("big", price_in=10, price_out=30, params_b=70, description="strong"), spec("small")]}))
    assert pool.names == ["big", "small"] and len(pool) == 2 and "big" in pool and "gpt" not in pool
    assert pool.get("big") == Candidate("big", 10.0, 30.0, 70.0, "openai", "strong",
                                        {"base_url": "http://127.0.0.1:9/v1"})
    assert pool.describe()[0] == {"name": "big", "price_in": 10.0, "price_out": 30.0, "params_b": 70.0,
                                  "backend": "openai", "description": "strong"}
    with pytest.raises(KeyError, match=r"unknown candidate 'gpt'; known: \['big', 'small'\]"):
        pool.get("gpt")


def test_read_pool_config_from_a_file_a_mapping_or_a_list(tmp_path):
    from omegaconf import OmegaConf

    from tests.helpers import ROOT

    shipped = read_pool_config("conf/pool/routellm_replay.yaml", ROOT)
    assert [c["name"] for c in shipped["candidates"]] == ["gpt-4-1106-preview", "mixtral-8x7b-instruct"]
    assert read_pool_config(ROOT / "conf" / "pool" / "routellm_replay.yaml") == shipped  # absolute: root unused
    (tmp_path / "p.yaml").write_text("max_concurrency: 3\ncandidates:\n  - {name: a, price_in: 1, price_out: 2}\n")
    assert read_pool_config("p.yaml", tmp_path) == {"max_concurrency": 3,
                                                    "candidates": [{"name": "a", "price_in": 1, "price_out": 2}]}
    assert read_pool_config(OmegaConf.create({"candidates": [spec("a")]})) == {"candidates": [spec("a")]}
    assert read_pool_config(OmegaConf.create([spec("a"), spec("b")])) == {"candidates": [spec("a"), spec("b")]}
    assert CandidatePool.from_config(read_pool_config([spec("a")])).names == ["a"]


def test_a_jobs_pool_file_resolves_its_paths_outside_hydra(tmp_path, monkeypatch):
    """conf/pool/routerbench_replay.yaml names its tables ${paths.shared_data}/...: the Serve app reads it
    with the paths a job would resolve, and an interpolation it cannot resolve is an error naming the file."""
    from tests.helpers import ROOT

    monkeypatch.delenv("RLROUTER_ROOT", raising=False)
    pool = read_pool_config("conf/pool/routerbench_replay.yaml", ROOT)
    assert {c["options"]["source"] for c in pool["candidates"]} == {f"{ROOT}/../shared/data/routerbench"}
    (tmp_path / "p.yaml").write_text("candidates:\n  - {name: a, price_in: 1, price_out: 2, options: "
                                     "{source: '${paths.nowhere}/x'}}\n")
    with pytest.raises(PoolConfigError, match=r"p.yaml\): an interpolation does not resolve"):
        read_pool_config("p.yaml", tmp_path)


@pytest.mark.parametrize("text, field, msg", [
    (None, "router_r1.args.pool", "no pool file at"),
    ("candidates: [a, b\n", "router_r1.args.pool", "is not valid YAML (line 2, column 1)"),
    ("- {name: a}\n", "router_r1.args.pool ({p})", "expected a mapping with 'candidates', got list"),
    ("max_concurrency: 2\n", "router_r1.args.pool ({p}).candidates", "non-empty list"),
    ("candidates:\n  - {name: a}\n  - price_in: 1\n", "router_r1.args.pool ({p}).candidates[1]", "with a 'name'"),
])
def test_read_pool_config_errors_name_the_file_and_field(tmp_path, text, field, msg):
    p = tmp_path / "pool.yaml"
    if text is not None:
        p.write_text(text)
    with pytest.raises(PoolConfigError) as e:
        read_pool_config("pool.yaml", tmp_path, "router_r1.args.pool")
    assert e.value.field == field.format(p=p) and msg in e.value.message
    if text is not None and "YAML" in msg:
        assert str(p) in e.value.message


def test_route_over_http_keeps_order_and_reports_bad_calls(server_url):
    pool = CandidatePool.from_config({"candidates": [
        spec("a", options={"base_url": f"{server_url}/v1"}),
        spec("b", price_in=5.0, options={"base_url": f"{server_url}/v1", "max_retries": 0})]})
    calls = [("a", "one"), ("nope", "two"), ("b", "three"), (" a ", "four"), ("a",), ("b", None), ("b", "BAD400")]
    rs = asyncio.run(pool.route(calls))
    assert len(rs) == len(calls)
    assert [r.text for r in rs[:4]] == ["echo: one", "", "echo: three", "echo: four"]
    assert "unknown model 'nope'; the candidates are ['a', 'b']" in rs[1].error
    assert "malformed route call ('a',)" in rs[4].error and "must be text" in rs[5].error
    assert "HTTP 400" in rs[6].error
    assert rs[2].cost == pytest.approx((1 * 5.0 + 2 * 2.0) / 1e6)  # b's price_in 5, price_out 2
    assert asyncio.run(pool.route([])) == []


def test_global_concurrency_bound(server_url):
    # each backend allows 8 in flight; the pool's bound of 3 must win across both candidates
    pool = CandidatePool.from_config({"max_concurrency": 3, "candidates": [
        spec("a", options={"base_url": f"{server_url}/v1", "max_concurrency": 8}),
        spec("b", options={"base_url": f"{server_url}/v1", "max_concurrency": 8})]})
    calls = [("a" if i % 2 else "b", f"SLEEP0.1 q{i}") for i in range(12)]
    t0 = time.perf_counter()
    rs = pool.route_sync(calls)
    dt = time.perf_counter() - t0
    assert all(r.ok for r in rs) and [r.text for r in rs] == [f"echo: {q}" for _, q in calls]
    assert stats(server_url)["peak"] == 3 and pool.peak_in_flight == 3 and pool.in_flight == 0
    assert dt >= 0.4
    # route_sync reuses its loop: a second batch works on the same HTTP clients
    assert pool.route_sync([("a", "again")])[0].text == "echo: again"
    pool.close_sync()


def test_call_timeout(server_url):
    pool = CandidatePool.from_config({"call_timeout_s": 0.3, "candidates": [
        spec("a", options={"base_url": f"{server_url}/v1", "timeout_s": 30})]})
    t0 = time.perf_counter()
    rs = asyncio.run(pool.route([("a", "SLEEP3 late"), ("a", "fast")]))
    assert "no answer within 0.3s" in rs[0].error and rs[1].text == "echo: fast"
    assert time.perf_counter() - t0 < 2.5


class _Broken(Backend):
    """Pure-logic fake: a backend with a bug (raises, or returns the wrong number of answers)."""

    batches = True

    def __init__(self, candidate: Candidate, mode: str):
        super().__init__(candidate)
        self.mode = mode

    async def generate(self, prompts: list[str], **kwargs: Any) -> list[CandidateResponse]:
        if self.mode == "raise":
            raise RuntimeError("engine died")
        return [CandidateResponse(text="x")]


def test_backend_bugs_become_error_responses():
    cands = [Candidate("r", 1, 1), Candidate("s", 1, 1)]
    pool = CandidatePool(cands, backends={"r": _Broken(cands[0], "raise"), "s": _Broken(cands[1], "short")})
    rs = asyncio.run(pool.route([("r", "q1"), ("s", "q2"), ("s", "q3")]))
    assert rs[0].error == "'r': RuntimeError: engine died"
    assert all("backend returned 1 responses for 2 prompts" in r.error for r in rs[1:])


def test_route_sync_inside_a_running_loop(server_url):
    pool = CandidatePool.from_config({"candidates": [spec("a", options={"base_url": f"{server_url}/v1"})]})

    async def caller():  # e.g. a Serve replica's sync helper called from async code
        return pool.route_sync([("a", "from a loop")])

    assert asyncio.run(caller())[0].text == "echo: from a loop"
    pool.close_sync()


def test_stream_for_a_non_streaming_backend(shared_data):
    from rlrouter.pool.replay import shared_table

    table = shared_table(str(shared_data / "routellm"))
    pool = CandidatePool.from_config({"candidates": [
        {"name": "gpt4", "price_in": 10, "price_out": 30, "backend": "replay",
         "options": {"model": "gpt-4-1106-preview", "source": str(shared_data / "routellm")}}]})
    q = next(p for p in table.prompts if p.startswith("Janet’s ducks"))

    async def go():
        r, data = await pool.chat("gpt4", [{"role": "system", "content": "hi"}, {"role": "user", "content": q}])
        chunks = [c async for c in pool.stream("gpt4", [{"role": "user", "content": q}])]
        return r, data, chunks

    r, data, chunks = asyncio.run(go())
    assert r.correct is True and data["model"] == "gpt4" and data["choices"][0]["message"]["content"] == r.text
    assert data["usage"]["completion_tokens"] == r.completion_tokens and data["x_cost_usd"] == r.cost
    assert "".join(c["choices"][0]["delta"].get("content", "") for c in chunks) == r.text
    assert chunks[-1]["choices"][0]["finish_reason"] == "stop" and chunks[-1]["usage"]["prompt_tokens"] > 0
