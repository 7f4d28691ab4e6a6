"""benchmarks/bench_learning.py's arms compose into the job's objects, and a finished job's report can be
recorded as an arm (``--from-report``) with what it measured, not re-run (no Ray, no model)."""

from __future__ import annotations

import json

import pytest

from benchmarks import bench_learning as bl
from rlrouter.trainer.job import RouterR1JobConfig
from rlrouter.trainer.router_r1 import build_train_reward
from rlrouter.rewards.router_r1 import router_r1_part

CANDS = ["gpt-4-1106-preview", "mixtral-8x7b-instruct"]
# the job sets the reference cost scale from its training questions (trainer.job.set_reference)
REFERENCE = {"cost_bounds": [0.005, 0.072], "strong": "gpt-4-1106-preview"}


@pytest.mark.parametrize("arm", sorted(bl.ARMS))
def test_every_arm_composes_and_builds_its_reward(arm):
    cfg = bl.compose([*bl.ARMS[arm], "run_name=t"])
    train = RouterR1JobConfig.from_cfg(cfg).train
    train.eval_reference = REFERENCE
    reward = build_train_reward(train, CANDS)
    assert router_r1_part(reward).format_reward is not None


def test_the_sanity_arm_is_rl_from_scratch_on_the_graded_format_reward():
    cfg = bl.compose([*bl.ARMS["sanity"], "run_name=t"])
    job = RouterR1JobConfig.from_cfg(cfg)
    train = job.train
    train.eval_reference = REFERENCE
    assert train.warmup_steps == 0 and train.init_from is None
    env = job.env
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


def _arm(rewards, valid, step_s=100.0, eval_s=10.0, fixed=None):
    """An arm's summary with held-out evaluations at steps 0, 2, 4, ... ``step_s`` of RL between them."""
    rows, t = [], 0.0
    for i, (r, v) in enumerate(zip(rewards, valid)):
        t += (step_s + eval_s) if i else 0.0
        rows.append({"step": 2 * i, "time": t, "time/eval_s": eval_s, "eval/format_valid": v, "eval/mean_reward": r})
    return {"eval_rows": rows, "held_out_curve": rows, "best_format_valid": max(valid),
            "time_to_target": bl.time_to(rows, "eval/format_valid", 0.9), "best_fixed_route": fixed}


def test_time_to_quality_times_both_arms_to_the_best_fixed_routes_reward():
    fixed = {"route": "always_cheapest", "mean_reward": 0.6}
    ours = _arm([0.5, 0.55, 0.6, 0.62], [0.5, 0.95, 1.0, 1.0], step_s=50.0, fixed=fixed)
    trl = _arm([0.5, 0.52, 0.58, 0.6], [0.5, 0.8, 0.92, 1.0], step_s=100.0)
    q = bl.time_to_quality(ours, trl, 0.9)
    assert (q["ours_s"], q["ours_step"], q["trl_s"], q["trl_step"]) == (50.0, 2, 200.0, 4)
    assert q["trl_over_ours"] == pytest.approx(4.0)
    b = q["best_fixed_route"]
    # ours reaches 0.6 at step 4 (2 intervals of RL), TRL at step 6 (3 intervals); only ours rises above it
    assert (b["ours_s"], b["ours_step"], b["trl_s"], b["trl_step"]) == (100.0, 4, 300.0, 6)
    assert b["ours_above"] and not b["trl_above"]
    assert b["trl_over_ours"] == pytest.approx(3.0)


def test_a_cold_start_that_already_reaches_the_target_takes_no_rl_time():
    ours = _arm([0.5, 0.55], [0.95, 1.0], fixed={"route": "always_cheapest", "mean_reward": 0.7})
    trl = _arm([0.5, 0.52], [0.95, 0.9])
    assert ours["time_to_target"] == {"reached": True, "seconds": 0.0, "step": 0}
    q = bl.time_to_quality(ours, trl, 0.9)
    assert "trl_over_ours" not in q and "no RL time" in q["note"]
    b = q["best_fixed_route"]
    assert b["ours_s"] is None and b["trl_s"] is None and not b["ours_above"]


def test_the_best_fixed_route_comes_from_the_reports_routing_scores():
    report = {"routing": {"best_fixed": "always_cheapest",
                          "routes": {"always_cheapest": {"mean_reward": 0.61}, "always_strongest": {"mean_reward": 0.7}}}}
    assert bl.best_fixed_route(report) == {"route": "always_cheapest", "mean_reward": 0.61}
    assert bl.best_fixed_route({}) is None
