"""benchmarks/bench_learning.py's arms compose into the job's objects, and a finished job's report can be
recorded as an arm (``--from-report``) with what it measured, not re-run (no Ray, no model)."""

from __future__ import annotations

import json

import pytest

from benchmarks import bench_learning as bl
from rlrouter.trainer.job import env_config, train_config
from rlrouter.trainer.router_r1 import build_train_reward
from rlrouter.rewards.router_r1 import router_r1_part

CANDS = ["gpt-4-1106-preview", "mixtral-8x7b-instruct"]
# the job sets the reference cost scale from its training questions (trainer.job.set_reference)
REFERENCE = {"cost_bounds": [0.005, 0.072], "strong": "gpt-4-1106-preview"}


@pytest.mark.parametrize("arm", sorted(bl.ARMS))
def test_every_arm_composes_and_builds_its_reward(arm):
    cfg = bl.compose([*bl.ARMS[arm], "run_name=t"])
    train = train_config(cfg)
    train.eval_reference = REFERENCE
    reward = build_train_reward(train, CANDS)
    assert router_r1_part(reward).format_reward is not None


def test_the_sanity_arm_is_rl_from_scratch_on_the_graded_format_reward():
    cfg = bl.compose([*bl.ARMS["sanity"], "run_name=t"])
    train = train_config(cfg)
    train.eval_reference = REFERENCE
    assert train.warmup_steps == 0 and train.init_from is None
    env = env_config(cfg, train)
    assert env["temperature"] == 0.7  # the env samples at the learner's temperature
    assert env["prefill"] == "<think>"  # as the prompt's example opens its thought
    fmt = router_r1_part(build_train_reward(train, CANDS)).format_reward
    assert fmt is not None
    graded = [f for f in cfg.reward.functions if f.name == "router_r1_format"]
    assert graded and graded[0].graded and graded[0].weight == 1.0


def _report(tmp_path):
    steps = [{"step": 0, "time": 100.0, "time/eval_s": 5.0, "eval/format_valid": 0.0, "eval/mean_reward": -0.9,
              "eval/accuracy": 0.0, "eval/cost_per_query": 0.0},
             {"step": 1, "time": 160.0, "reward/total": -0.8, "rollout/format_valid": 0.0, "rollout/answered": 0.2},
             {"step": 2, "time": 230.0, "reward/total": -0.5, "rollout/format_valid": 0.25, "rollout/answered": 0.6,
              "time/eval_s": 10.0, "eval/format_valid": 0.5, "eval/mean_reward": -0.4, "eval/accuracy": 0.1,
              "eval/cost_per_query": 0.0}]
    run = tmp_path / "outputs" / "sanity_x"
    (run / "hydra" / ".hydra").mkdir(parents=True)
    (run / "hydra" / ".hydra" / "overrides.yaml").write_text("- reward=format_only\n- train.warmup_steps=0\n")
    report = {"steps": steps, "results": {"policy_trained": {"format_valid": 0.5}},
              "config": {"learner": {"lr": 1e-3, "lr_warmup_steps": 0, "algo": "grpo"}},
              "checkpoint": str(run / "checkpoints" / "step_000002"), "train_s": 130.0, "wall_s": 200.0}
    (run / "report.json").write_text(json.dumps(report))
    return run / "report.json"


def test_from_report_summarises_the_job_as_a_run_of_the_benchmark(tmp_path):
    path = _report(tmp_path)
    arm = bl.from_report(path, target=0.5)
    assert arm["overrides"] == ["reward=format_only", "train.warmup_steps=0"]
    assert [r["eval/format_valid"] for r in arm["held_out_curve"]] == [0.0, 0.5]
    assert [r["rollout/answered"] for r in arm["train_curve"]] == [0.2, 0.6]
    # RL time to the target excludes the evaluation made at that step
    assert arm["time_to_target"] == {"reached": True, "seconds": 120.0, "step": 2}
    assert arm["measured_in"].startswith(str(path))
    assert arm["learner"]["lr"] == 1e-3


def test_from_report_names_a_missing_file(tmp_path):
    with pytest.raises(SystemExit, match="not a file"):
        bl.from_report(tmp_path / "nope" / "report.json", 0.9)
