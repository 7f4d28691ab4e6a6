"""GMTRouter trains on the rank's device from the shared launcher (CUDA when the rank has a GPU), like Router-R1's learner."""

from __future__ import annotations

import pytest
import torch

from rlrouter.distributed.launcher import select_device
from rlrouter.gmt.model import GMTModelConfig
from rlrouter.gmt.train import GMTTrainConfig, fit, temporal_split


def test_the_ray_train_loop_hands_the_launchers_device_to_training(monkeypatch, tmp_path):
    """A rank Ray gave cuda:1 and cuda:0 trains on cuda:0 (select_device), with no GPU needed to check it."""
    import ray

    from rlrouter.distributed import launcher
    from rlrouter.gmt import job

    class FakeSession:
        rank, world_size = 0, 1

        def __init__(self, use_gpu: bool):
            self.device = select_device(use_gpu, ["cuda:1", "cuda:0"])

        def report(self, metrics, checkpoint_dir=None):
            self.reported = metrics

    got = {}

    def fake_train_worker(job_cfg, graph, split, ckpt_dir, rank=0, world_size=1, report=None, device="cpu"):
        got["device"] = device
        return {"best_epoch": 1, "val": {}, "train_seconds": 0.0, "epochs_run": 1}

    cfg = job.GMTJobConfig.from_cfg(__import__("tests.gmt.test_job", fromlist=["compose"]).compose(
        [f"output_dir={tmp_path}", "resources=gpu_cluster"]))
    assert cfg.resources.use_gpu
    monkeypatch.setattr(launcher, "RayTrainSession", FakeSession)
    monkeypatch.setattr(launcher, "setup_worker_threads", lambda n: None)
    monkeypatch.setattr(job, "train_worker", fake_train_worker)
    monkeypatch.setattr(ray, "get", lambda ref: ref)
    monkeypatch.setattr(job.GMTGraph, "from_tensors", staticmethod(lambda t, m: None))
    job._ray_train_loop({"job": cfg.to_dict(), "graph_ref": ({}, {}, {"train": None, "val": None, "test": None})})
    assert got["device"] == "cuda:0"


def _fit(graph, device: str):
    split = temporal_split(graph, 0.2, 0.2)
    return fit(graph, split, GMTModelConfig(hidden_dim=32), GMTTrainConfig(epochs=4, eval_every=2, seed=0), device=device)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_fit_on_cuda_matches_the_cpu_run(small_graph):
    cpu, cuda = _fit(small_graph, "cpu"), _fit(small_graph, "cuda:0")
    assert all(p.device.type == "cpu" for p in cuda.model.parameters())  # back on the CPU for the checkpoint
    assert cuda.best_epoch == cpu.best_epoch
    assert cuda.history[-1]["learner/loss"] == pytest.approx(cpu.history[-1]["learner/loss"], rel=1e-3)
