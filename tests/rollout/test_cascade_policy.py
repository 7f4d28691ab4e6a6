"""A Router-R1 policy run as a cascade's second stage (``first_call_written``), as ``bench_unseen_subjects``
scores one and ``/router_r1/route`` serves one: a real vLLM engine, the real replay pool, episodes that start
after the written call to the cheapest candidate. The policy is the untrained base SmolLM2 in a checkpoint folder
whose run config says it was evaluated that way (no training fixture needed): what it does after the reply is its
own; the test checks what every such episode must be, through the Serve deployment's class."""

from __future__ import annotations

import pytest
import yaml

from tests.helpers import ROOT

pytestmark = [pytest.mark.vllm, pytest.mark.slow]


def test_episodes_start_after_the_cheap_call_and_route_to_the_last(shared_data, tmp_path):
    from rlrouter.data.logged import load_routellm
    from rlrouter.models import resolve_model
    from serve.router_r1 import RouterR1Deployment

    # a run folder as the training job writes one: config.yaml beside checkpoints/step_N (a whole model there)
    ck = tmp_path / "run" / "checkpoints" / "step_000000"
    ck.mkdir(parents=True)
    (ck / "model").symlink_to(resolve_model("smollm2-135m-instruct"), target_is_directory=True)
    (tmp_path / "run" / "config.yaml").write_text(yaml.safe_dump({
        "eval": {"first_call_written": True}, "train": {"warmup_query_words": 24},
        "rollout": {"env": {"max_turns": 2, "max_new_tokens": 48, "max_total_tokens": 1024}}}))
    queries = load_routellm(shared_data / "routellm" / "mmlu" / "mmlu_philosophy.csv").prompts[:3]
    # the engine in its own process: vLLM caches VLLM_ENABLE_V1_MULTIPROCESSING at the first engine a process
    # builds, and test_worker_sync.py, later in this process, needs a subprocess engine
    served = RouterR1Deployment.func_or_class(str(ck), pool=str(ROOT / "conf" / "pool" / "routellm_replay.yaml"),
                                              engine={"in_process": False})  # first_call: auto, from the run
    policy = served.policy
    assert policy.first_call_written and policy.cheap == "mixtral-8x7b-instruct"
    assert policy.env_cfg.max_new_tokens == 48  # the run's episode settings
    assert policy.until == "route"  # the deployment's default: the decision ends at the call after the reply
    policy.until = "answer"  # the whole episode, as the training job evaluates it
    full = policy.route_batch(queries)
    policy.until = "route"
    out = policy.route_batch(queries)
    assert len(out) == 3
    for o, f in zip(out, full):
        assert f["calls"][0] == "mixtral-8x7b-instruct"  # the written call reached the pool
        assert f["selected_model"] == f["calls"][-1]
        assert f["escalated"] == any(c != "mixtral-8x7b-instruct" for c in f["calls"][1:])
        assert f["full_response"].count("<information>") >= len(f["calls"])  # each reply shown to the policy
        # stopped at the route: a prefix of the whole episode, the call after the reply written but not sent
        assert f["full_response"].startswith(o["full_response"]) and o["calls"] == f["calls"][:len(o["calls"])]
        assert o["selected_model"] == o["calls"][-1] and len(o["calls"]) <= 2
        assert o["escalated"] == (o["calls"][1:] != [] and o["calls"][1] != "mixtral-8x7b-instruct")
        if len(o["calls"]) == 2:
            assert o["full_response"].endswith("</search>")
        else:
            assert o == f  # no call after the reply: nothing to stop, the same episode
    one = served.route(queries[0])  # what /router_r1/route answers: the same greedy episode
    assert {k: one[k] for k in ("selected_model", "calls", "full_response")} == \
        {k: out[0][k] for k in ("selected_model", "calls", "full_response")}
    assert isinstance(one["thinking"], str) and one["thinking"] in one["full_response"]
    # the log-odds of escalating where the turn after the reply chooses: greedy decoding wrote the likelier word
    odds = policy.escalation_odds(queries)
    assert [o["calls"] for o in odds] == [o["calls"] for o in out]  # the same greedy episodes
    for o in odds:
        if o["odds"] is not None:
            assert abs(o["odds"]) < 1e3
            if o["word"] == "I":
                assert o["odds"] >= 0
            elif o["word"] == "The":
                assert o["odds"] <= 0
    # the engine's next-token log-probs (what the odds read), against greedy decoding on the same prefix
    from rlrouter.rollout.env import SamplingSpec, prompt_ids

    tok = policy.worker.tokenizer
    prefix = prompt_ids(tok, queries[0], policy.candidates, policy.env_cfg)
    [greedy] = policy.worker.generate_ids([prefix], [SamplingSpec(max_tokens=1, stop=[], temperature=0.0, top_p=1.0,
                                                                  seed=0)])
    other = next(t for t in (tok.encode(w, add_special_tokens=False)[0] for w in ("Paris", "banana")) if t != greedy[0])
    [[lp_greedy, lp_other]] = policy.worker.next_token_logprobs([prefix], [greedy[0], other])
    assert lp_other < lp_greedy <= 0.0
    del served, policy, out
    import gc

    gc.collect()  # the engine's process goes with it, before the next test builds its own
