"""Every ``experiment=*`` preset composes, its typed configs validate, and its data builds at the preset's
own sizes (the paper presets once asked for more GSM8K questions than the source could give)."""

from __future__ import annotations

import pytest
from omegaconf import OmegaConf

from tests.helpers import CONF_DIR

EXPERIMENTS = sorted(p.stem for p in (CONF_DIR / "experiment").glob("*.yaml"))


def compose(overrides: list[str]):
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir

    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        return hydra_compose("train_router_r1", overrides=overrides)


def test_every_preset_is_listed():
    assert {"router_r1_ppo", "router_r1_grpo", "toolrl_budget"} <= set(EXPERIMENTS)


@pytest.mark.parametrize("experiment", EXPERIMENTS)
def test_experiment_composes_and_prepares_its_data(experiment, tmp_path, shared_data):
    from rlrouter.data.job import prepare
    from rlrouter.rollout.env import EnvConfig
    from rlrouter.rollout.worker import EngineConfig
    from rlrouter.trainer.job import RouterR1JobConfig

    cfg = compose([f"experiment={experiment}", f"paths.root_dir={tmp_path}", f"paths.shared_data={shared_data}"])
    plain = OmegaConf.to_container(cfg, resolve=True)
    job = RouterR1JobConfig.from_cfg(cfg)  # the job's typing: train, learner, resources, eval, curriculum
    train, resources = job.train, job.resources
    learner = train.learner_cfg  # validates the learner block (dtype, strategy, checkpoint keeping)
    EngineConfig(**job.engine)
    EnvConfig(**job.env)
    assert train.prompts_per_step % resources.learner.num_workers == 0
    if not learner.lora:
        # a full fine-tune's cold start must not use the LoRA-scale learning rate of the base config
        assert train.warmup_lr is None or train.warmup_lr <= 1e-4, (experiment, train.warmup_lr)
    stats = prepare(cfg)  # at the preset's own train_size / test_size
    assert stats["train"]["rows"] == plain["data"]["train_size"]
    assert stats["test"]["rows"] == plain["data"]["test_size"]
    for name, s in stats["sources"].items():
        assert s["train"] + s["test"] <= s["usable"], (experiment, name, s)


def test_gsm8k_folder_gives_both_splits(shared_data):
    from rlrouter.data.sources import gsm8k

    folder = shared_data / "routellm" / "gsm8k"
    test, train, both = gsm8k(folder, split="test"), gsm8k(folder, split="train"), gsm8k(folder)
    assert (len(test), len(train), len(both)) == (1319, 7473, 8792)
    assert not {q.id for q in test} & {q.id for q in train}
    assert [q.id for q in both[:5]] == [q.id for q in test[:5]]  # test first: the logged questions
    with pytest.raises(ValueError, match="split must be one of"):
        gsm8k(folder, split="validation")
