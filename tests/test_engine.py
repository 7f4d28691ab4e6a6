"""``rlrouter.engine`` as pure logic: the engine actor's device variables (OpenRLHF's
``_configure_device_env``; the same function inside real Ray actors on fake-GPU nodes:
tests/ops/test_multinode.py), the weight-transfer backend per device and a CPU TP engine's core binding
(run for real in tests/sync/test_gloo_transfer.py)."""

from __future__ import annotations

from rlrouter.engine import NOSET_VISIBLE_DEVICES_VAR, engine_device_env


def test_a_tensor_parallel_engine_actor_drops_rays_empty_visible_devices():
    # Ray gives the 0-GPU actor CUDA_VISIBLE_DEVICES="": vLLM's engine process would see no GPU
    put, drop = engine_device_env({"CUDA_VISIBLE_DEVICES": "", "HIP_VISIBLE_DEVICES": "", "PATH": "/bin"}, 2, [])
    assert put == {} and sorted(drop) == ["CUDA_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES"]


def test_a_one_gpu_engine_keeps_rays_value_unless_ray_was_told_not_to_set_it():
    assert engine_device_env({"CUDA_VISIBLE_DEVICES": "3"}, 1, ["3"]) == ({}, [])
    assert engine_device_env({NOSET_VISIBLE_DEVICES_VAR: "1", "CUDA_VISIBLE_DEVICES": "0,1,2,3"}, 1, ["2"]) == (
        {"CUDA_VISIBLE_DEVICES": "2"}, [])
    assert engine_device_env({NOSET_VISIBLE_DEVICES_VAR: "1"}, 1, []) == ({}, [])  # no GPU assigned: nothing to name


def test_the_transfer_backend_and_a_cpu_tp_engines_binding_follow_the_device(monkeypatch):
    """NCCL between GPUs, gloo on CPU (the same vLLM engine classes); a CPU TP engine gets worker processes
    of its own, each bound to its own share of the cores (vLLM's "auto" needs a NUMA node per worker)."""
    from rlrouter.engine import EngineConfig, cpu_thread_binding, transfer_backend

    assert [transfer_backend(d) for d in ("cuda", "cuda:3", "cpu")] == ["nccl", "nccl", "gloo"]
    assert cpu_thread_binding(2, [0, 1]) == "0|1"
    assert cpu_thread_binding(2, [0, 1, 2, 3, 4]) == "0,1|2,3"
    assert cpu_thread_binding(4, [0, 1]) == "nobind"
    cfg = EngineConfig(device="cpu", tensor_parallel_size=2, weight_transfer="nccl")
    kwargs = cfg.llm_kwargs("m")
    assert kwargs["distributed_executor_backend"] == "mp" and kwargs["weight_transfer_config"] == {"backend": "gloo"}
    assert EngineConfig(device="cuda", tensor_parallel_size=2).llm_kwargs("m")["distributed_executor_backend"] == "ray"
    monkeypatch.delenv("VLLM_CPU_OMP_THREADS_BIND", raising=False)
    monkeypatch.setattr("os.sched_getaffinity", lambda pid: {0, 1, 2, 3})
    assert cfg.env()["VLLM_CPU_OMP_THREADS_BIND"] == "0,1|2,3"
    monkeypatch.setenv("VLLM_CPU_OMP_THREADS_BIND", "1|0")  # the user's own binding wins
    assert "VLLM_CPU_OMP_THREADS_BIND" not in cfg.env()
    assert "VLLM_CPU_OMP_THREADS_BIND" not in EngineConfig(device="cpu").env()
