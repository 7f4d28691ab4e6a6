"""The KL reference is the policy RL starts from: after a cold start, KL to it starts at 0."""

from __future__ import annotations

import pytest
import torch

from rlrouter.learner.checkpoint import load_checkpoint, save_checkpoint
from rlrouter.learner.learner import Learner, LearnerConfig
from rlrouter.rollout.parsing import TrajectoryTokens, collate

KL = {"kl": {"coef": 0.001, "estimator": "k3"}}  # the reference matters only with a KL term


def _batch(tok):
    trajs = []
    for text in ("The capital of France is Paris.", "Two plus two is four."):
        t = TrajectoryTokens(tok.encode("Q: say something.", add_special_tokens=False))
        ids = tok.encode(" " + text, add_special_tokens=False)
        t.add_policy(ids, None)
        trajs.append(t)
    b = collate(trajs, tok.pad_token_id)
    b["loss_mask"] = b["loss_mask"].float()
    return trajs, b


@pytest.fixture(scope="module")
def cold_started():
    torch.manual_seed(0)
    learner = Learner(LearnerConfig(lr=1e-3, micro_batch_size=2, grpo=KL))
    trajs, _ = _batch(learner.tokenizer)
    for _ in range(3):
        learner.sft_step(trajs)  # the adapter moves away from the base model
    return learner


def test_reference_start_equals_the_policy_then_base_differs(cold_started):
    learner = cold_started
    _, b = _batch(learner.tokenizer)
    with torch.no_grad():
        policy, _, _ = learner._forward(learner.module, b, False, with_entropy=False)
    base = learner._reference_logprobs(b)  # no snapshot yet: the adapter switched off
    assert (policy - base).abs().max() > 1e-3
    learner.set_reference_to_current()
    ref = learner._reference_logprobs(b)
    assert (ref - policy).abs().max() < 1e-4, (ref - policy).abs().max()  # float noise of two forward paths
    with torch.no_grad():  # the policy's own weights are back after the swap
        again, _, _ = learner._forward(learner.module, b, False, with_entropy=False)
    assert (again - policy).abs().max() < 1e-4


def test_reference_survives_a_checkpoint(cold_started, tmp_path):
    learner = cold_started
    learner.set_reference_to_current()
    save_checkpoint(tmp_path / "ck", learner, 1)
    other = Learner(LearnerConfig(lr=1e-3, micro_batch_size=2, grpo=KL))
    assert other.ref_adapter is None
    load_checkpoint(tmp_path / "ck", other)
    assert other.ref_adapter is not None
    for k, v in learner.ref_adapter.items():
        assert torch.equal(other.ref_adapter[k], v)


def test_kl_reference_base_keeps_the_untrained_model():
    learner = Learner(LearnerConfig(kl_reference="base", grpo=KL))
    learner.set_reference_to_current()
    assert learner.ref_adapter is None
    with pytest.raises(ValueError, match="kl_reference"):
        LearnerConfig(kl_reference="sft")
