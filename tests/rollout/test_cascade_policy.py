"""A Router-R1 policy run as a cascade's second stage (``first_call_written``), as ``bench_unseen_subjects``
scores one: a real vLLM engine, the real replay pool, episodes that start after the written call to the
cheapest candidate. The policy is the untrained base SmolLM2 (no training fixture needed): what it does after
the reply is its own; the test checks what every such episode must be."""

from __future__ import annotations

import pytest
import yaml

from tests.helpers import ROOT

pytestmark = [pytest.mark.vllm, pytest.mark.slow]


def test_episodes_start_after_the_cheap_call_and_route_to_the_last(shared_data):
    from rlrouter.data.logged import load_routellm
    from rlrouter.rollout.policy import RouterR1Policy

    pool = yaml.safe_load((ROOT / "conf" / "pool" / "routellm_replay.yaml").read_text())
    queries = load_routellm(shared_data / "routellm" / "mmlu" / "mmlu_philosophy.csv").prompts[:3]
    # the engine in its own process: vLLM caches VLLM_ENABLE_V1_MULTIPROCESSING at the first engine a process
    # builds, and test_worker_sync.py, later in this process, needs a subprocess engine
    policy = RouterR1Policy(None, "smollm2-135m-instruct", pool["candidates"], pool=pool, first_call_written=True,
                            env={"max_turns": 2, "max_new_tokens": 48, "max_total_tokens": 1024},
                            engine={"in_process": False})
    assert policy.cheap == "mixtral-8x7b-instruct"
    out = policy.route_batch(queries)
    assert len(out) == 3
    for o in out:
        assert o["calls"][0] == "mixtral-8x7b-instruct"  # the written call reached the pool
        assert o["selected_model"] == o["calls"][-1]
        assert o["escalated"] == any(c != "mixtral-8x7b-instruct" for c in o["calls"][1:])
        assert o["full_response"].count("<information>") >= len(o["calls"])  # each reply shown to the policy
    del policy, out
    import gc

    gc.collect()  # the engine's process goes with it, before the next test builds its own
