"""The rollout engine's log-probs against the learner's (the mismatch, measured on every step).

Right after a weight sync, vLLM samples from the learner's policy: the per-token gap between the log-prob
vLLM reports for each sampled token and the one the learner recomputes must be float noise, for both
transports and for multi-turn trajectories whose ``<information>`` tokens are masked out.
"""

from __future__ import annotations

import math

import pytest
import torch

from rlrouter.learner.update import _GapMeter, tis_weights


def test_gap_meter_by_hand():
    m = _GapMeter()
    learner = torch.tensor([[0.0, -1.0, -2.0, -0.5]])
    engine = torch.tensor([[0.0, -1.5, math.nan, -0.5]])  # token 2: unknown engine log-prob
    mask = torch.tensor([[0.0, 1.0, 1.0, 1.0]])  # token 0: prompt
    m.add(learner, engine, mask)
    out = m.metrics()
    assert out["rollout/logprob_tokens"] == 2
    assert out["rollout/logprob_gap"] == pytest.approx(0.25)  # (|0.5| + 0) / 2
    assert out["rollout/is_ratio_mean"] == pytest.approx((math.exp(0.5) + 1.0) / 2)
    assert out["rollout/is_ratio_max"] == pytest.approx(math.exp(0.5))
    assert _GapMeter().metrics() == {}


def test_tis_weights_truncate_and_ignore_unknown():
    learner = torch.tensor([[-0.1, -3.0, -1.0]])
    engine = torch.tensor([[-2.0, -1.0, math.nan]])
    w = tis_weights(learner, engine, cap=2.0)
    assert w[0, 0] == pytest.approx(2.0)  # exp(1.9) truncated at the cap
    assert w[0, 1] == pytest.approx(math.exp(-2.0))
    assert w[0, 2] == 1.0


# ------------------------------------------------------------------ real engines
ENV = {"max_turns": 1, "max_new_tokens": 24, "max_total_tokens": 768}
ITEMS = [{"query": "What is 12 + 30?", "ground_truth": ["42"]},
         {"query": "Which planet is known as the red planet?", "ground_truth": ["Mars"]}]


@pytest.fixture(scope="module")
def pool_cfg():
    from omegaconf import OmegaConf

    from tests.helpers import CONF_DIR

    return OmegaConf.to_container(OmegaConf.load(CONF_DIR / "pool" / "routellm_replay.yaml"))


@pytest.mark.ray
@pytest.mark.vllm
@pytest.mark.slow
@pytest.mark.parametrize("transport", ["tensors", "lora"])
def test_gap_after_sync_is_float_noise(ray_cluster, pool_cfg, transport):
    from rlrouter.distributed.resources import ResourceSpec
    from rlrouter.learner.learner import Learner, LearnerConfig
    from rlrouter.rollout.group import RolloutGroup
    from rlrouter.sync.transports import make_payload

    torch.manual_seed(0)
    learner = Learner(LearnerConfig(micro_batch_size=4))
    with torch.no_grad():  # a policy that differs from the engine's base weights
        for name, p in learner.policy.named_parameters():
            if "lora_B" in name:
                p.normal_(0.0, 0.02)
    engine = {"enable_lora": transport == "lora", "max_lora_rank": 8}
    group = RolloutGroup("smollm2-135m-instruct", engine, ENV, pool_cfg,
                         ResourceSpec(rollout={"num_workers": 1, "num_cpus": 1}))
    try:
        group.sync(make_payload(transport, learner, 1))
        trajs = group.rollout(ITEMS, 4, seed=3, step=0)
    finally:
        group.shutdown()
    # multi-turn: a first turn that made no valid call gets an <information> block and a second turn
    multi = [t for t in trajs if sum(s.policy for s in t.tokens.segments) >= 2]
    assert multi, "expected at least one trajectory with <information> between two policy turns"
    assert all(not s.policy or s.logprobs is not None for t in trajs for s in t.tokens.segments)
    m = learner.train_step([t.tokens for t in trajs], [float(i % 3) for i in range(len(trajs))])
    n_policy = sum(t.tokens.num_policy_tokens for t in trajs)
    assert m["rollout/logprob_tokens"] == n_policy
    assert m["rollout/logprob_gap"] < 1e-3, m
    assert m["rollout/is_ratio_max"] < 1.01, m
    # the same check restricted to the multi-turn trajectories' second turns
    meter = _GapMeter()
    fresh = Learner(LearnerConfig(micro_batch_size=4))
    fresh.policy.load_state_dict(learner.policy.state_dict())
    from rlrouter.rollout.parsing import collate

    batch = collate([t.tokens for t in multi], fresh.tokenizer.pad_token_id)
    with torch.no_grad():
        logp, _, _ = fresh._forward(fresh.module, {**batch, "loss_mask": batch["loss_mask"].float()}, False,
                                    with_entropy=False)
    late = batch["loss_mask"].clone()
    for i, t in enumerate(multi):  # keep only the tokens after the first <information> block
        first_obs = next(j for j, s in enumerate(t.tokens.segments) if j > 0 and not s.policy)
        cut = sum(len(s.token_ids) for s in t.tokens.segments[:first_obs])
        late[i, :cut] = 0
    assert late.sum() > 0
    meter.add(logp, batch["old_logprobs"], late.float())
    assert meter.metrics()["rollout/logprob_gap"] < 1e-3
