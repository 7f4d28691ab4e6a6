"""The Learner on the real SmolLM2 (LoRA), without Ray: updates, merged weights, checkpoints, data cursor."""

from __future__ import annotations

import pytest
import torch

from rlrouter.learner.checkpoint import load_checkpoint, save_checkpoint
from rlrouter.learner.learner import Learner, LearnerConfig
from rlrouter.learner.loop import TrainConfig, batch_indices
from rlrouter.rollout.parsing import TrajectoryTokens


def _trajs(tok, n=4):
    out = []
    for i in range(n):
        t = TrajectoryTokens(tok.encode(f"Question {i}: what is {i}+{i}?", add_special_tokens=False))
        for text, policy in (("<think>easy</think><search>mixtral: sum</search>", True),
                             ("<information>it is even</information>", False), (f"<answer>{2 * i}</answer>", True)):
            ids = tok.encode(text, add_special_tokens=False)
            t.add_policy(ids, [0.0] * len(ids)) if policy else t.add_observation(ids)
        out.append(t)
    return out


@pytest.fixture(scope="module")
def learner():
    cfg = LearnerConfig(lr=5e-3, micro_batch_size=2, grpo={"group_size": 2, "kl": {"coef": 0.01}})
    return Learner(cfg)


def test_grpo_step_changes_only_the_adapter_and_merges_exactly(learner, tmp_path):
    before = {k: v.clone() for k, v in learner.trainable_state().items()}
    base_q = learner.policy.get_base_model().model.layers[0].self_attn.q_proj.base_layer.weight.clone()
    m = learner.train_step(_trajs(learner.tokenizer), [1.0, -1.0, 0.5, 0.0])
    after = learner.trainable_state()
    assert any(not torch.equal(before[k], after[k]) for k in before)
    assert {"learner/pg_loss", "learner/kl", "learner/grad_norm", "learner/entropy"} <= set(m)
    assert m["learner/grad_norm"] > 0
    # the frozen base did not move; the merged tensor is W + (alpha / r) * B @ A
    q = learner.policy.get_base_model().model.layers[0].self_attn.q_proj
    assert torch.equal(q.base_layer.weight, base_q)
    merged = dict(learner.merged_weights())
    # q and v changed; k goes along because vLLM fuses q/k/v into one tensor
    n_layers = learner.policy.config.num_hidden_layers
    assert sorted(merged) == sorted(f"model.layers.{i}.self_attn.{m}_proj.weight"
                                    for i in range(n_layers) for m in "qkv")
    k = learner.policy.get_base_model().model.layers[0].self_attn.k_proj.weight
    assert torch.equal(merged["model.layers.0.self_attn.k_proj.weight"], k)
    expect = base_q + (16 / 8) * q.lora_B["default"].weight @ q.lora_A["default"].weight
    assert torch.allclose(merged["model.layers.0.self_attn.q_proj.weight"], expect, atol=1e-6)


def test_equal_rewards_give_no_update(learner):
    before = {k: v.clone() for k, v in learner.trainable_state().items()}
    m = learner.train_step(_trajs(learner.tokenizer), [1.0, 1.0, 0.0, 0.0])
    # GRPO: identical rewards within each group carry no signal; the KL term alone moves the policy
    assert abs(m["learner/pg_loss"]) < 1e-6


def test_checkpoint_round_trip_restores_weights_optimizer_and_rng(learner, tmp_path):
    save_checkpoint(tmp_path / "ck", learner, step=7, extra={"reward": {"window": [0.1]}})
    state = learner.trainable_state()
    opt = learner.optimizer.state_dict()
    torch.manual_seed(1)
    expected_draw = torch.rand(3)
    fresh = Learner(learner.cfg)
    torch.manual_seed(999)
    st = load_checkpoint(tmp_path / "ck", fresh)
    assert st["step"] == 7 and st["extra"]["reward"] == {"window": [0.1]}
    for k, v in state.items():
        assert torch.equal(fresh.trainable_state()[k], v)
    fopt = fresh.optimizer.state_dict()
    assert all(torch.equal(fopt["state"][k]["exp_avg"], opt["state"][k]["exp_avg"]) for k in opt["state"])
    # adapter saved in peft format for serving
    assert (tmp_path / "ck" / "adapter" / "adapter_model.safetensors").exists()
    with pytest.raises(FileNotFoundError, match="not an rlrouter checkpoint"):
        load_checkpoint(tmp_path, fresh)
    del expected_draw


def test_ppo_learner_has_a_critic_and_reports_value_loss():
    cfg = LearnerConfig(algo="ppo", lr=1e-3, micro_batch_size=4, ppo={"kl": {"coef": 0.0}})
    lr = Learner(cfg)
    m = lr.train_step(_trajs(lr.tokenizer, 2), [1.0, -1.0])
    assert "learner/value_loss" in m and "value_head.proj.weight" in lr.trainable_state()


def test_data_cursor_is_a_pure_function_of_step():
    a = [batch_indices(10, 4, s, seed=3) for s in range(6)]
    assert a == [batch_indices(10, 4, s, seed=3) for s in range(6)]
    flat = [i for b in a for i in b]
    assert sorted(flat[:10]) == list(range(10))  # epoch 0 is a permutation
    assert batch_indices(10, 4, 2, seed=3) != batch_indices(10, 4, 2, seed=4)


def test_config_errors_name_the_field():
    with pytest.raises(ValueError, match="learner.algo"):
        LearnerConfig(algo="a2c")
    with pytest.raises(ValueError, match="train.sync"):
        TrainConfig(sync="nccl")


def test_cold_start_sft_lowers_the_nll_of_policy_tokens_only(learner):
    trajs = _trajs(learner.tokenizer)
    first = learner.sft_step(trajs, lr=1e-3)["sft/nll"]
    for _ in range(3):
        last = learner.sft_step(trajs, lr=1e-3)["sft/nll"]
    assert last < first
    # the information block is not trained on: the token count is the policy tokens only
    assert learner.sft_step(trajs, lr=0.0)["sft/tokens"] == sum(t.num_policy_tokens for t in trajs)
