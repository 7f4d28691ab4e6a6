"""How a job finds its Ray cluster: RAY_ADDRESS (ray job submit), the cluster running on this node (a job
started by hand on the head), else an embedded one; ray.num_cpus only ever sizes the embedded one."""

from __future__ import annotations

import pytest

from rlrouter.distributed import cluster


def _ray_tmp(tmp_path, address: str | None):
    (tmp_path / "ray").mkdir()
    if address:
        (tmp_path / "ray" / "ray_current_cluster").write_text(address)
    return tmp_path


def test_the_running_cluster_is_found_in_the_ray_temp_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("RAY_TMPDIR", str(_ray_tmp(tmp_path, "10.0.0.5:6379")))
    monkeypatch.setenv("RAY_ADDRESS", "http://elsewhere:8265")  # not read here: connect handles it first
    assert cluster.running_cluster_address() == "10.0.0.5:6379"
    assert cluster.os.environ["RAY_ADDRESS"] == "http://elsewhere:8265"  # put back


def test_no_running_cluster_means_none(tmp_path, monkeypatch):
    monkeypatch.setenv("RAY_TMPDIR", str(_ray_tmp(tmp_path, None)))
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    assert cluster.running_cluster_address() is None


@pytest.mark.parametrize("running", [None, "10.0.0.5:6379"])
def test_connect_joins_a_running_cluster_without_num_cpus(running, monkeypatch):
    import ray

    calls = []
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    monkeypatch.setattr(ray, "init", lambda **kw: calls.append(kw))
    monkeypatch.setattr(cluster, "running_cluster_address", lambda: running)
    if running is None:  # the embedded cluster reports its own address
        monkeypatch.setattr(ray, "get_runtime_context",
                            lambda: type("C", (), {"gcs_address": "127.0.0.1:1"})())
    info = cluster.connect(num_cpus=6, num_gpus=None)
    (kw,) = calls
    if running:
        assert info == {"mode": "running", "address": running}
        assert kw["address"] == running and "num_cpus" not in kw and "num_gpus" not in kw
    else:
        assert info["mode"] == "embedded" and kw["num_cpus"] == 6 and "address" not in kw
    assert "PYTHONPATH" in kw["runtime_env"]["env_vars"]  # workers import this checkout either way
