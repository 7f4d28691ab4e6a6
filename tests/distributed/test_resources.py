"""Placement as data (issue 14): TP bundles the OpenRLHF way, colocate refused, runs that cannot fit fail at once."""

from __future__ import annotations

import pytest
from omegaconf import OmegaConf

from rlrouter.distributed.resources import BUNDLE_INDICES_ENV, ResourceSpec, check_fits, rollout_actor_options
from tests.helpers import CONF_DIR


def _spec(name: str) -> ResourceSpec:
    return ResourceSpec(**OmegaConf.to_container(OmegaConf.load(CONF_DIR / "resources" / f"{name}.yaml")))


def test_tensor_parallel_gets_one_gpu_bundle_per_rank():
    spec = _spec("gpu_cluster")  # 4 engines
    assert spec.rollout_bundles(1) == [{"CPU": 4.0, "GPU": 1.0}] * 4
    b = spec.rollout_bundles(2)
    assert len(b) == 8 and all(x["GPU"] == 1.0 for x in b)
    assert [x.get("CPU", 0) for x in b] == [4.0, 0] * 4  # the engine actor's CPUs sit on its first bundle
    assert spec.required(2) == {"CPU": 4 * 8 + 4 * 4, "GPU": 4 + 8}


def test_a_tp_engine_actor_takes_no_gpu_and_hands_vllm_its_bundles():
    spec = _spec("gpu_cluster")
    opts = rollout_actor_options(spec, None, worker_index=2, tensor_parallel_size=2)
    assert opts["num_gpus"] == 0
    strat = opts["scheduling_strategy"]
    assert strat.placement_group_bundle_index == 4 and strat.placement_group_capture_child_tasks
    assert opts["runtime_env"]["env_vars"][BUNDLE_INDICES_ENV] == "4,5"
    one = rollout_actor_options(spec, None, worker_index=2)
    assert one["num_gpus"] == 1 and one["scheduling_strategy"].placement_group_bundle_index == 2
    with pytest.raises(ValueError, match="resources.rollout.num_gpus"):
        ResourceSpec(rollout={"num_workers": 1, "num_gpus": 0.5}).rollout_bundles(2)


def test_colocate_is_refused_until_built():
    with pytest.raises(ValueError, match="resources.colocate"):
        ResourceSpec(colocate=True)


def test_a_run_that_cannot_fit_fails_naming_what_is_short():
    with pytest.raises(RuntimeError, match=r"GPU: need 8, cluster has 0.*ray.num_cpus"):
        check_fits(_spec("gpu_cluster"), {"CPU": 6.0})


@pytest.mark.parametrize("overrides", [[], ["debug=cpu"], ["resources=cpu_ddp"], ["experiment=toolrl_budget"]])
def test_embedded_cpu_runs_fit_the_embedded_cluster(overrides):
    """`make run`-style runs on the embedded cluster never wait on an unplaceable placement group."""
    from hydra import compose, initialize_config_dir

    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        cfg = compose("train_router_r1", overrides=overrides + ["paths.root_dir=/tmp"])
    spec = ResourceSpec(**OmegaConf.to_container(cfg.resources))
    tp = cfg.rollout.engine.get("tensor_parallel_size", 1)
    check_fits(spec, {"CPU": float(cfg.ray.num_cpus), "GPU": 0.0}, tp)


def test_the_paper_presets_fit_the_cluster_in_cluster_yaml():
    """cluster.yaml's GPU workers (max_workers of them) hold what the GPU presets ask for."""
    import yaml

    from rlrouter.distributed.resources import ResourceSpec as RS

    cluster = yaml.safe_load((CONF_DIR.parent / "cluster.yaml").read_text())
    node = cluster["available_node_types"]["gpu_worker"]
    gpus, cpus = {"g5.12xlarge": (4, 48), "g6e.12xlarge": (4, 48), "p4d.24xlarge": (8, 96),
                  "p5.48xlarge": (8, 192)}[node["node_config"]["InstanceType"]]
    n = node["max_workers"]
    spec = RS(**OmegaConf.to_container(OmegaConf.load(CONF_DIR / "resources" / "gpu_cluster.yaml")))
    check_fits(spec, {"CPU": float(cpus * n), "GPU": float(gpus * n)}, 1)
