"""The learning test through the real stack (small): the routing bandit of ``rlrouter.algos.bandit`` learned by
SmolLM2-135M with LoRA on a vLLM rollout worker, a Ray Train learner rank, the weight sync and the
``route_table`` reward, driven by ``RouterR1Trainer`` (``rlrouter.trainer.bandit_run``).

From a cold start that splits each context between its best candidate and its trap, the shipped estimator
(GRPO's group-mean baseline) must learn: the 0.3-gap context moves toward its best and the regret falls.
GRPO with the division by the group's std, on the same start, prompts and samples, must do worse (it scores
how often a candidate beats its group-mates, and the trap wins most questions). A learner that does not
learn fails the first assertions; swapping the estimators fails the last. The trap's fixed point itself is
shown on the tabular softmax (tests/algos/test_bandit.py); ``benchmarks/bench_rl_bandit.py`` runs the full
curves.
"""

from __future__ import annotations

import numpy as np
import pytest

pytestmark = [pytest.mark.ray, pytest.mark.vllm, pytest.mark.slow]

STEPS = 4
LR = 5e-4


@pytest.fixture(scope="module")
def bandit(ray_cluster, tmp_path_factory):
    from rlrouter.algos.bandit import routing_bandit
    from rlrouter.distributed.resources import ResourceSpec
    from rlrouter.rollout.group import RolloutGroup
    from rlrouter.trainer.bandit_run import ENV, pool_config

    task = routing_bandit()
    res = ResourceSpec(rollout={"num_workers": 1, "num_cpus": 1}, learner={"num_workers": 1, "num_cpus": 1})
    group = RolloutGroup("smollm2-135m-instruct", {"enable_lora": False}, ENV,
                         pool_config(task, tmp_path_factory.mktemp("bandit_pool")), res)
    yield task, group, res
    group.shutdown()


def margins(run: dict) -> np.ndarray:
    """Per step and context, P(best) - P(trap)."""
    return np.array(run["p_optimal"]) - np.array(run["p_trap"])  # (steps + 1, C)


def test_the_shipped_estimator_learns_each_context_best_and_the_std_division_falls_into_the_trap(bandit, tmp_path):
    from rlrouter.trainer.bandit_run import run_bandit

    task, group, res = bandit
    shipped = run_bandit(task, "grpo", "pair", group, res, tmp_path / "grpo", steps=STEPS, lr=LR)
    # the same cold start, not a second one: the trapped arm starts from the shipped arm's step-0 checkpoint
    start = tmp_path / "grpo" / "checkpoints" / "step_000000"
    trapped = run_bandit(task, "grpo_std", "pair", group, res, tmp_path / "grpo_std", steps=STEPS, lr=LR,
                         init_from=str(start))
    for run in (shipped, trapped):
        assert len(run["p_optimal"]) == STEPS + 1 and min(min(m) for m in run["valid_mass"]) > 0.85
    ps, pt = np.array(shipped["p_optimal"]), np.array(trapped["p_optimal"])
    assert np.allclose(ps[0], pt[0], atol=1e-4)  # one cold start, shared
    # the shipped estimator learns: the 0.3-gap context toward its best, the regret down
    assert ps[-1, 0] - ps[0, 0] > 0.2, ps
    assert shipped["regret"][0] - shipped["regret"][-1] > 0.03, shipped["regret"]
    # the std division does worse on the same start and samples
    assert ps[-1, 0] > pt[-1, 0] + 0.1 and shipped["regret"][-1] < trapped["regret"][-1], (ps, pt)
