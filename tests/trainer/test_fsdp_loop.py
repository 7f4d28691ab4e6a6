"""FSDP through the whole Router-R1 loop: ``learner.strategy=fsdp``, a full fine-tune of a tiny Llama on 2
gloo ranks under Ray Train (each rank its own shard of every batch), a vLLM-CPU rollout engine serving the
same tiny model, a checkpoint every step. Then the run resumed on a fresh learner group from its step-1
checkpoint (copied, as a run stopped there leaves it), and separately a run whose learner rank is killed
after step 1: both must end with the step-3 metrics of the uninterrupted run.

Until the shared-prompt forward was switched off in FSDP training (``rlrouter/learner/model.py``), the
first RL step failed here in backward: a layer called twice before backward (prompt, then each row's
tokens) had been resharded when backward reached its first call.
"""

from __future__ import annotations

import json
import shutil

import pytest

from rlrouter.data.io import read_jsonl
from tests.helpers import kill_train_worker_after_step_1
from tests.learner.test_fsdp import make_tiny_llama
from tests.trainer.test_router_r1_e2e import ENV, items, pool_cfg  # noqa: F401 - fixtures, reused

pytestmark = [pytest.mark.ray, pytest.mark.vllm, pytest.mark.slow]

DETERMINISTIC = ("learner/loss", "learner/policy_tokens", "reward/total")


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory) -> str:
    """The tiny Llama with heads of 64 (vLLM's CPU attention takes no smaller head size)."""
    return make_tiny_llama(tmp_path_factory.mktemp("tiny-llama-64"), hidden_size=256, heads=4, kv_heads=2,
                           head_dim=64)


@pytest.fixture(scope="module")
def tiny_group(ray_cluster, pool_cfg, tiny_model):
    from rlrouter.distributed.resources import ResourceSpec
    from rlrouter.rollout.group import RolloutGroup

    g = RolloutGroup(tiny_model, {"enable_lora": False}, ENV, pool_cfg,
                     ResourceSpec(rollout={"num_workers": 1, "num_cpus": 1}))
    yield g
    g.shutdown()


def _cfg(tiny_model: str, out: str, **kw):
    from rlrouter.learner.config import RouterR1TrainConfig

    base = dict(total_steps=3, prompts_per_step=2, n_samples=2, checkpoint_every=1, progress=False, seed=6,
                out_dir=out, learner={"model": tiny_model, "lora": False, "strategy": "fsdp", "lr": 1e-3,
                                      "micro_batch_size": 2})
    return RouterR1TrainConfig(**{**base, **kw})


def _fit(cfg, group, names, items, max_failures=0):
    from rlrouter.distributed.resources import ResourceSpec
    from rlrouter.learner.group import LearnerGroup
    from rlrouter.trainer.router_r1 import RouterR1Trainer

    learners = LearnerGroup(cfg, ResourceSpec(learner={"num_workers": 2, "num_cpus": 1}), max_failures=max_failures)
    try:
        return RouterR1Trainer(cfg, group, learners, names, items).fit()
    finally:
        learners.close()


@pytest.mark.timeout(1800)
def test_fsdp_full_fine_tune_resumes_and_survives_a_killed_rank(tiny_group, items, pool_cfg, tiny_model,  # noqa: F811
                                                                  tmp_path):
    names = [c["name"] for c in pool_cfg["candidates"]]
    full = _fit(_cfg(tiny_model, str(tmp_path / "full")), tiny_group, names, items)
    assert full["step"] == 3
    ck = tmp_path / "full" / "checkpoints" / "step_000001"
    assert (ck / "state.json").exists()
    assert len(list(ck.glob("optimizer.rank*.pt"))) == 2, sorted(p.name for p in ck.iterdir())  # a shard per rank

    # resumed: what a run stopped during step 3 leaves when only its step-1 checkpoint was saved (metrics
    # of steps 1 and 2), continued by a fresh learner group: step 2 is replayed and logged once
    part = tmp_path / "part"
    (part / "checkpoints").mkdir(parents=True)
    shutil.copytree(ck, part / "checkpoints" / "step_000001")
    rows = [line for line in (tmp_path / "full" / "metrics.jsonl").read_text().splitlines()
            if json.loads(line)["step"] <= 2]
    (part / "metrics.jsonl").write_text("".join(line + "\n" for line in rows))
    resumed = _fit(_cfg(tiny_model, str(part), resume_from=str(part / "checkpoints" / "step_000001")), tiny_group,
                   names, items)
    assert [row["step"] for _, row in read_jsonl(part / "metrics.jsonl")] == [1, 2, 3]

    # killed: SIGKILL a rank after step 1; Ray Train restarts the group from the newest checkpoint
    out = tmp_path / "killed"
    th, killed = kill_train_worker_after_step_1(out / "metrics.jsonl", timeout_s=900)
    survived = _fit(_cfg(tiny_model, str(out)), tiny_group, names, items, max_failures=1)
    th.join(timeout=5)
    assert killed, "no Ray Train worker was found to kill"
    assert survived["step"] == 3
    assert tiny_group.worker_serials() == [tiny_group.serial]  # the engine serves the restarted group's weights

    for run in (resumed, survived):
        for key in DETERMINISTIC:
            assert run[key] == pytest.approx(full[key], rel=1e-4, abs=1e-6), key
