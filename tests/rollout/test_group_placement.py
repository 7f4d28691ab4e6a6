"""RolloutGroup places TP engines on one GPU bundle per TP rank, checked on the options it builds."""

from __future__ import annotations

import pytest

from rlrouter.distributed.resources import BUNDLE_INDICES_ENV, ResourceSpec
from rlrouter.rollout.group import worker_actor_options

GPU_RESOURCES = ResourceSpec(rollout={"num_workers": 2, "num_cpus": 4, "num_gpus": 1})


def test_tp_engines_get_consecutive_gpu_bundles_and_no_gpu_of_their_own():
    opts = worker_actor_options(GPU_RESOURCES, {"device": "cuda", "tensor_parallel_size": 2}, pg=None, max_restarts=5)
    assert len(opts) == 2
    assert [o["scheduling_strategy"].placement_group_bundle_index for o in opts] == [0, 2]
    assert [o["runtime_env"]["env_vars"][BUNDLE_INDICES_ENV] for o in opts] == ["0,1", "2,3"]
    assert all(o["num_gpus"] == 0 and o["num_cpus"] == 4 for o in opts)
    assert all(o["scheduling_strategy"].placement_group_capture_child_tasks for o in opts)
    assert all(o["max_restarts"] == 5 and o["max_concurrency"] == 1 for o in opts)
    assert len(GPU_RESOURCES.rollout_bundles(2)) == 4  # what rollout_placement_group reserves for them


def test_without_tp_each_engine_takes_its_own_bundle_and_gpu():
    opts = worker_actor_options(GPU_RESOURCES, {"device": "cuda"}, pg=None)
    assert [o["scheduling_strategy"].placement_group_bundle_index for o in opts] == [0, 1]
    assert all(o["num_gpus"] == 1 and "runtime_env" not in o for o in opts)


def test_tp_on_cpu_is_refused_naming_the_field():
    with pytest.raises(ValueError, match="rollout.engine.tensor_parallel_size"):
        worker_actor_options(GPU_RESOURCES, {"device": "cpu", "tensor_parallel_size": 2}, pg=None)
