"""LearnerGroup: the learner ranks as a Ray Train ``TorchTrainer`` (gloo DDP on CPU, NCCL / FSDP on GPU).

The trainer runs ``rlrouter.learner.loop.train_loop_per_worker`` on every rank with the
RolloutGroup's handle in its config, so each rank drives rollouts for its own shard. Ray Train's
``FailureConfig`` restarts a failed learner from the last checkpoint (issue 8).
"""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path
from typing import Any, Sequence

from rlrouter.distributed.resources import ResourceSpec, learner_scaling_config
from rlrouter.learner.loop import TrainConfig, train_loop_per_worker


class LearnerGroup:
    def __init__(self, train: TrainConfig, resources: ResourceSpec, max_failures: int = 2,
                 storage_path: str | None = None, run_name: str = "router_r1"):
        self.train = train
        self.resources = resources
        self.max_failures = max_failures
        self.storage_path = str(Path(storage_path or Path(train.out_dir) / "ray_train").resolve())
        self.run_name = run_name

    def fit(self, rollout_group: Any, candidates: Sequence[str], items: Sequence[dict[str, Any]],
            demos: Sequence[Any] = (), eval_items: Sequence[dict[str, Any]] = ()) -> Any:
        from ray.train import CheckpointConfig, FailureConfig, RunConfig
        from ray.train.torch import TorchConfig, TorchTrainer

        backend = "nccl" if self.resources.use_gpu else "gloo"
        trainer = TorchTrainer(
            train_loop_per_worker,
            train_loop_config={"train": asdict(self.train), "rollout_group": rollout_group,
                               "candidates": list(candidates), "items": list(items),
                               "demos": list(demos), "eval_items": list(eval_items)},
            torch_config=TorchConfig(backend=backend),
            scaling_config=learner_scaling_config(self.resources),
            run_config=RunConfig(name=self.run_name, storage_path=self.storage_path,
                                 failure_config=FailureConfig(max_failures=self.max_failures),
                                 checkpoint_config=CheckpointConfig(num_to_keep=3)),
        )
        return trainer.fit()
