"""A user's first day, end to end over real HTTP against the Serve app on the local Ray cluster:

- the default pool (conf/pool/replay_plus_smollm2.yaml): the openai SDK, sync and streaming, gets a real
  answer from SmolLM2 on a vLLM engine to a prompt that no log holds (the replays have none: 'auto'
  falls through to the live candidate, never a 200 with a placeholder);
- the API key comes from the environment (RLROUTER_API_KEYS), as docs/serve.md says;
- VSR's Router-R1 client's exact bytes, with no key, from a listed network, get one of its own models;
- /health names the port that answered.
"""

from __future__ import annotations

import time

import httpx
import pytest

from tests.helpers import serve_app

pytestmark = [pytest.mark.ray, pytest.mark.vllm, pytest.mark.slow]

APP = "rlrouter-first-day"
KEY = "0c5e2f7a9b1d3e4f6a8b0c2d"
PROMPT = "Name one colour of a ripe banana, in one word, for a purple giraffe called Zorblax."
# VSR: json.Marshal(map[string]string{"query": fmt.Sprintf("Task: %s\nAvailable models: %s", ...)}),
# POSTed to {router_r1_server_url}/route with only Content-Type set (router_r1_client.go)
VSR_BYTES = b'{"query":"Task: math_decision\\nAvailable models: qwen3-8b, llama-3.1-70b"}'


@pytest.fixture(scope="module")
def base(ray_cluster, tmp_path_factory):
    # the default config and pool; only where state goes and VSR's access differ
    serving = {"router_r1_keyless_networks": ["127.0.0.0/8"],
               "model_map": {"qwen3-8b": "smollm2-135m", "llama-3.1-70b": "mixtral-8x7b-instruct"}}
    yield from serve_app(APP, KEY, "newcomer", serving, tmp_path_factory.mktemp("sel"))


def test_openai_sdk_gets_a_real_answer_to_an_unlogged_prompt(base):
    import openai

    client = openai.OpenAI(base_url=f"{base}/v1", api_key=KEY, timeout=600, max_retries=0)
    t0 = time.time()
    r = client.chat.completions.create(model="auto", messages=[{"role": "user", "content": PROMPT}], max_tokens=16)
    first_s = time.time() - t0
    text = r.choices[0].message.content
    assert r.model == "smollm2-135m" and text.strip() and "[replay]" not in text, r
    assert r.usage.completion_tokens > 0
    stream = client.chat.completions.create(model="smollm2-135m", stream=True, max_tokens=16,
                                            messages=[{"role": "user", "content": PROMPT}])
    streamed = "".join(c.choices[0].delta.content or "" for c in stream if c.choices)
    assert streamed == text  # greedy decoding: the same answer, streamed
    with pytest.raises(openai.NotFoundError, match="replay"):  # a replay named directly: 404, not a fake answer
        client.chat.completions.create(model="gpt-4-1106-preview", messages=[{"role": "user", "content": PROMPT}])
    with pytest.raises(openai.AuthenticationError):
        openai.OpenAI(base_url=f"{base}/v1", api_key="change-me", max_retries=0).models.list()
    print(f"first answer (engine start included) in {first_s:.1f}s: {text!r}")


def test_vsr_bytes_without_a_key_get_one_of_its_models(base):
    picks = set()
    for _ in range(6):
        r = httpx.post(f"{base}/router_r1/route", content=VSR_BYTES, timeout=30,
                       headers={"Content-Type": "application/json", "User-Agent": "Go-http-client/1.1"})
        assert r.status_code == 200, r.text
        picks.add(r.json()["selected_model"])
    assert picks and picks <= {"qwen3-8b", "llama-3.1-70b"}
    h = httpx.get(f"{base}/health", timeout=10).json()
    assert h["port"] == int(base.rsplit(":", 1)[1]) and h["status"] == "ok"
