"""The intent job trains on the rank's device from the shared launcher (CUDA when the rank has a GPU), like Router-R1's learner."""

from __future__ import annotations

import pytest
import torch


def test_the_ray_train_loop_hands_the_launchers_device_to_training(monkeypatch, tmp_path):
    """A rank Ray gave cuda:1 and cuda:0 trains on cuda:0 (select_device), with no GPU needed to check
    it; what it reports goes back with rank 0's checkpoint."""
    from rlrouter.distributed import launcher
    from rlrouter.distributed.launcher import select_device
    from rlrouter.intent import job
    from tests.intent.test_job import SMALL, compose

    class FakeSession:
        rank, world_size = 0, 1

        def __init__(self, use_gpu: bool):
            self.device = select_device(use_gpu, ["cuda:1", "cuda:0"])

        def report(self, metrics, checkpoint_dir=None):
            got["reported"] = (metrics, checkpoint_dir is not None)

    got = {}

    def fake_train_worker(job_cfg, splits, out_dir, log=None, device="cpu"):
        got["device"], got["labels"] = device, splits.labels
        return {"supervised": {"steps": 3}}

    cfg = job.IntentJobConfig.from_cfg(compose([*SMALL, "resources=gpu_cluster", f"output_dir={tmp_path}"]))
    assert cfg.resources.use_gpu
    monkeypatch.setattr(launcher, "RayTrainSession", FakeSession)
    monkeypatch.setattr(launcher, "setup_worker_threads", lambda n: None)
    monkeypatch.setattr(job, "train_worker", fake_train_worker)
    row = [{"text": "What is 2 + 2?", "label": "a", "source": "t"}]
    job._ray_train_loop({"job": cfg.to_dict(), "labels": ["a", "b"], "train": row, "val": row, "test": row})
    assert got["device"] == "cuda:0" and got["labels"] == ("a", "b")
    assert got["reported"] == ({"supervised/steps": 3.0}, True)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_a_short_run_on_cuda_trains_and_saves(tmp_path):
    from rlrouter.intent.job import IntentJobConfig, build_splits, train_worker
    from tests.intent.test_job import SMALL, compose

    cfg = IntentJobConfig.from_cfg(compose([*SMALL, "resources=in_process", f"output_dir={tmp_path}"]))
    summary = train_worker(cfg, build_splits(cfg.data, cfg.seed), tmp_path / "adapters", device="cuda:0")
    assert summary["supervised"]["steps"] > 0 and (tmp_path / "adapters" / "rl").exists()
