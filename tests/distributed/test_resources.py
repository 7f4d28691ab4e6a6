"""Placement as data: TP bundles the OpenRLHF way, colocate refused; on a fixed-size cluster a run that
cannot fit fails at once naming the shortfall and the keys, with an autoscaler it asks for the rest and waits."""

from __future__ import annotations

import pytest
from omegaconf import OmegaConf

from rlrouter.distributed.resources import (BUNDLE_INDICES_ENV, PlacementTimeout, ResourceSpec, check_fits,
                                            rollout_actor_options, wait_for_cluster)
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


def test_a_run_that_cannot_fit_a_fixed_cluster_fails_naming_the_shortfall_and_the_keys():
    spec = ResourceSpec(**{**OmegaConf.to_container(OmegaConf.load(CONF_DIR / "resources" / "gpu_cluster.yaml")),
                           "autoscale": False})
    with pytest.raises(RuntimeError, match=r"GPU: need 8, cluster has 4, short 4.*resources.autoscale is false"
                                           r".*resources.learner.num_workers.*ray.num_gpus.*min_workers"):
        check_fits(spec, {"CPU": 96.0, "GPU": 4.0})


def test_with_an_autoscaler_the_shortfall_is_returned_not_raised():
    spec = _spec("gpu_cluster")
    assert spec.autoscale
    assert check_fits(spec, {"CPU": 40.0, "GPU": 4.0}) == {"CPU": (48.0, 40.0), "GPU": (8.0, 4.0)}
    assert check_fits(spec, {"CPU": 96.0, "GPU": 8.0}) == {}
    # the autoscaler is asked for bundles: 4 rollout engines, then 4 learner ranks
    assert spec.all_bundles() == [{"CPU": 4.0, "GPU": 1.0}] * 4 + [{"CPU": 8.0, "GPU": 1.0}] * 4


def test_waiting_for_the_autoscaler_returns_when_nodes_join_and_times_out_naming_what_is_missing():
    spec = _spec("gpu_cluster")
    t = [0.0]
    seen = iter([{"CPU": 48.0, "GPU": 4.0}, {"CPU": 48.0, "GPU": 4.0}, {"CPU": 96.0, "GPU": 8.0}])
    wait_for_cluster(spec, 1, deadline=100.0, cluster_resources=lambda: next(seen),
                     sleep=lambda s: t.__setitem__(0, t[0] + s), clock=lambda: t[0])
    assert t[0] == 4.0  # two polls short, then the second node's 4 GPUs joined
    with pytest.raises(PlacementTimeout, match=r"GPU: need 8, cluster has 4.*placement_timeout_s=1800.*max_workers"):
        wait_for_cluster(spec, 1, deadline=10.0, cluster_resources=lambda: {"CPU": 48.0, "GPU": 4.0},
                         sleep=lambda s: t.__setitem__(0, t[0] + s), clock=lambda: t[0])


@pytest.mark.parametrize("field,value", [("autoscale", "yes"), ("placement_timeout_s", 0)])
def test_bad_placement_settings_name_the_field(field, value):
    with pytest.raises(ValueError, match=f"resources.{field}"):
        ResourceSpec(**{field: value})


@pytest.mark.parametrize("overrides", [[], ["debug=cpu"], ["resources=cpu_ddp"], ["experiment=toolrl_budget"]])
def test_embedded_cpu_runs_fit_the_embedded_cluster(overrides):
    """`make run`-style runs on the embedded cluster never wait on an unplaceable placement group."""
    from hydra import compose, initialize_config_dir

    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        cfg = compose("train_router_r1", overrides=overrides + ["paths.root_dir=/tmp"])
    spec = ResourceSpec(**OmegaConf.to_container(cfg.resources))
    tp = cfg.rollout.engine.get("tensor_parallel_size", 1)
    check_fits(spec, {"CPU": float(cfg.ray.num_cpus), "GPU": 0.0}, tp)


GPU_INSTANCES = {"g5.12xlarge": (4, 48), "g6e.12xlarge": (4, 48), "p4d.24xlarge": (8, 96), "p5.48xlarge": (8, 192)}
"""(GPUs, vCPUs) of the AWS instance types cluster.yaml may name."""


@pytest.mark.parametrize("experiment", sorted(p.stem for p in (CONF_DIR / "experiment").glob("*.yaml")))
def test_each_preset_fits_cluster_yamls_minimum_or_asks_the_autoscaler_for_the_rest(experiment):
    """cluster.yaml starts min_workers GPU nodes. A preset either fits on those, or it sets
    resources.autoscale (so placement asks for the rest and waits) and fits on max_workers nodes."""
    import yaml
    from hydra import compose, initialize_config_dir

    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        cfg = compose("train_router_r1", overrides=[f"experiment={experiment}", "paths.root_dir=/tmp"])
    spec = ResourceSpec(**OmegaConf.to_container(cfg.resources))
    tp = cfg.rollout.engine.get("tensor_parallel_size", 1)
    cluster = yaml.safe_load((CONF_DIR.parent / "cluster.yaml").read_text())
    node = cluster["available_node_types"]["gpu_worker"]
    gpus, cpus = GPU_INSTANCES[node["node_config"]["InstanceType"]]
    at_min = {"CPU": float(cpus * node["min_workers"]), "GPU": float(gpus * node["min_workers"])}
    at_max = {"CPU": float(cpus * node["max_workers"]), "GPU": float(gpus * node["max_workers"])}
    need = spec.required(tp)
    if need["GPU"] == 0:
        return  # a CPU preset: the embedded cluster's business (test_embedded_cpu_runs_fit_the_embedded_cluster)
    if not check_fits(ResourceSpec(**{**OmegaConf.to_container(cfg.resources), "autoscale": True}), at_min, tp):
        return  # fits the nodes the cluster starts with
    assert spec.autoscale, (f"experiment={experiment} needs {need} but cluster.yaml starts {at_min}: set "
                            "resources.autoscale so the job asks the autoscaler for the rest")
    assert not check_fits(spec, at_max, tp), f"experiment={experiment} needs {need}, more than max_workers give ({at_max})"
    assert spec.placement_timeout_s >= 600, "a GPU node boots and installs CUDA vLLM in minutes"
