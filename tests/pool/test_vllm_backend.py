"""The vllm backend end to end: a real vLLM engine on SmolLM2-135M-Instruct in a Ray actor."""

from __future__ import annotations

import asyncio

import pytest

from rlrouter.pool import CandidatePool

pytestmark = [pytest.mark.vllm, pytest.mark.ray, pytest.mark.slow]


def test_smollm2_engine_in_a_ray_actor(ray_cluster):
    pool = CandidatePool.from_config({"call_timeout_s": 300, "candidates": [
        {"name": "smollm2", "price_in": 0.01, "price_out": 0.02, "params_b": 0.135, "backend": "vllm",
         "options": {"model": "smollm2-135m-instruct", "max_tokens": 16, "max_model_len": 512,
                     "temperature": 0.0}},
        {"name": "replay", "price_in": 1, "price_out": 1, "backend": "openai",
         "options": {"base_url": "http://127.0.0.1:9/v1", "max_retries": 0}}]})
    b = pool.backend("smollm2")
    prompts = ["What is the capital of France?", "Name a primary colour."]

    async def go():
        info = await b.start()
        first = await pool.route([("smollm2", prompts[0]), ("smollm2", prompts[1]), ("nope", "x")])
        again = await pool.route([("smollm2", prompts[0])], max_tokens=4)
        r, data = await pool.chat("smollm2", [{"role": "user", "content": prompts[0]}])
        await pool.close()
        return info, first, again, r, data

    info, (r0, r1, bad), (short,), r, data = asyncio.run(go())
    assert info["model_path"].endswith("smollm2-135m-instruct") and info["engine"]["dtype"] == "float32"
    assert r0.ok and r1.ok and r0.text.strip() and r0.text != r1.text, (r0, r1)
    # the chat template wraps the question, so the engine saw more tokens than the question has words
    assert r0.prompt_tokens > len(prompts[0].split()) + 5
    assert 0 < r0.completion_tokens <= 16 and 0 < short.completion_tokens <= 4
    assert r0.cost == pytest.approx((r0.prompt_tokens * 0.01 + r0.completion_tokens * 0.02) / 1e6)
    assert "unknown model 'nope'" in bad.error
    # greedy decoding: the same question gives the same answer (and "Paris" from this model)
    assert r.text == r0.text and data["model"] == "smollm2" and "Paris" in r0.text
