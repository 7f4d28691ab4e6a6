"""The learner's GPU memory arithmetic (docs/gpu.md), hand-checked, and every GPU preset against its GPU."""

from __future__ import annotations

import pytest
from omegaconf import OmegaConf

from rlrouter.learner.memory import QWEN25_3B, learner_memory_gib
from tests.helpers import CONF_DIR

L40S_USABLE_GIB = 44.4
"""What CUDA reports free on an L40S (48 GB = 44.7 GiB, less the driver's reserve)."""
WORST_WINDOW = 3500
"""The longest policy span in 4096 tokens: 4 turns of 512 new tokens plus the answers fed back."""


def test_the_ppo_preset_by_hand():
    m = learner_memory_gib(QWEN25_3B, ranks=4, micro_batch=4, seq_len=4096, logits_window=WORST_WINDOW)
    assert m["weights_fp32"] == pytest.approx(3.086e9 * 4 / 4 / 2**30)  # 2.87
    assert m["adamw_fp32"] == pytest.approx(5.75, abs=0.01)
    assert m["activations_kept"] == pytest.approx(36 * 4 * 4096 * 2048 * 2 / 2**30)  # 2.25
    assert m["logits"] == pytest.approx(4 * 3500 * 151_936 * 10 / 2**30)  # 3.96 + 7.92 + 7.92 = 19.8
    assert m["total"] == pytest.approx(41.3, abs=0.1)


def test_grpo_with_micro_batch_5_does_not_fit_an_l40s():
    m = learner_memory_gib(QWEN25_3B, ranks=4, micro_batch=5, seq_len=4096, logits_window=WORST_WINDOW)
    assert m["logits"] == pytest.approx(24.76, abs=0.01)
    assert m["total"] == pytest.approx(47.0, abs=0.1) and m["total"] > L40S_USABLE_GIB


@pytest.mark.parametrize("experiment", ["router_r1_grpo", "router_r1_ppo"])
def test_every_gpu_preset_fits_an_l40s_in_the_worst_case(experiment):
    from hydra import compose, initialize_config_dir

    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        cfg = compose("train_router_r1", overrides=[f"experiment={experiment}", "paths.root_dir=/tmp"])
    assert cfg.model == "Qwen/Qwen2.5-3B-Instruct" and not cfg.learner.lora
    assert cfg.learner.gradient_checkpointing and cfg.learner.strategy == "fsdp"
    m = learner_memory_gib(QWEN25_3B, ranks=cfg.resources.learner.num_workers,
                           micro_batch=cfg.learner.micro_batch_size,
                           seq_len=cfg.rollout.env.max_total_tokens, logits_window=WORST_WINDOW)
    assert m["total"] <= L40S_USABLE_GIB - 3, (experiment, OmegaConf.to_container(cfg.learner), m)
