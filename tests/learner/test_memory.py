"""The learner's GPU memory arithmetic (docs/gpu.md), hand-checked, and every GPU preset against its GPU."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from omegaconf import OmegaConf

from rlrouter.algos.common import LOGITS_CHUNK
from rlrouter.learner.memory import CHUNK_BYTES, LOGITS_BYTES, QWEN25_3B, learner_memory_gib
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
    # the bf16 logits and their gradient over the window, one 256-position chunk's fp32 temporaries
    assert m["logits"] == pytest.approx(4 * 151_936 * (3500 * 4 + 256 * 28) / 2**30)  # 7.92 + 4.06 = 12.0
    assert m["total"] == pytest.approx(33.4, abs=0.1)


def test_grpo_with_micro_batch_5_fits_an_l40s_with_the_logits_in_chunks():
    m = learner_memory_gib(QWEN25_3B, ranks=4, micro_batch=5, seq_len=4096, logits_window=WORST_WINDOW)
    assert m["logits"] == pytest.approx(14.98, abs=0.01)  # 24.8 GiB by the old arithmetic, ~43 by the old code
    assert m["total"] == pytest.approx(37.3, abs=0.1) and m["total"] < L40S_USABLE_GIB - 3


def _measured(path: str, window: int, vocab: int = 32_768) -> dict:
    """``measure_logits_bytes`` in a fresh process (its peak resident memory is the measurement)."""
    code = ("import json; from rlrouter.learner.memory import measure_logits_bytes; "
            f"print(json.dumps(measure_logits_bytes({path!r}, 1, {window}, {vocab}, entropy_grad=True)))")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600,
                       env={**os.environ, "MALLOC_MMAP_THRESHOLD_": "65536", "OMP_NUM_THREADS": "1"})
    assert r.returncode == 0, r.stderr[-2000:]
    return json.loads(r.stdout.strip().splitlines()[-1])


def test_the_arithmetic_holds_the_measured_bytes_of_the_real_code_path():
    """The learner's log-prob + entropy pass, forward and backward on real tensors: its bytes per logits
    element beyond the bf16 logits stay within ``LOGITS_BYTES - 2`` (the gradient) plus one chunk's
    ``CHUNK_BYTES``; the plain autograd path it replaced took about 20 (the arithmetic once said 10)."""
    window = 1024
    chunked = _measured("chunked", window)
    bound = (LOGITS_BYTES - 2) + CHUNK_BYTES * LOGITS_CHUNK / window
    assert chunked["backward_bytes_per_element"] <= bound and chunked["forward_bytes_per_element"] <= bound, chunked
    plain = _measured("plain", 512)
    assert plain["backward_bytes_per_element"] > 16 and plain["forward_bytes_per_element"] > 10, plain


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
