"""The intent job trains on the rank's device from the shared launcher (issue 14), like Router-R1's learner."""

from __future__ import annotations

import pytest
import torch



@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_a_short_run_on_cuda_trains_and_saves(tmp_path):
    from rlrouter.intent.job import IntentJobConfig, build_splits, train_worker
    from tests.intent.test_job import SMALL, compose

    cfg = IntentJobConfig.from_cfg(compose([*SMALL, "resources=in_process", f"output_dir={tmp_path}"]))
    summary = train_worker(cfg, build_splits(cfg.data, cfg.seed), tmp_path / "adapters", device="cuda:0")
    assert summary["supervised"]["steps"] > 0 and (tmp_path / "adapters" / "rl").exists()
