"""Post-install check: the pinned stack imports and the accelerator path that config will select.

Run by ``make install`` so a broken environment fails at install time, not in the middle of a job.
"""

from __future__ import annotations

import importlib
import sys

REQUIRED = ["torch", "ray", "transformers", "peft", "torch_geometric", "datasets", "hydra", "safetensors"]


def check() -> dict[str, str]:
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
    try:
        versions["vllm"] = importlib.import_module("vllm").__version__
    except Exception as e:
        versions["vllm"] = f"unavailable ({type(e).__name__})"
    if problems:
        raise SystemExit("environment check failed:\n  " + "\n  ".join(problems))
    return versions


if __name__ == "__main__":
    v = check()
    print("rlrouter environment OK: " + ", ".join(f"{k}={val}" for k, val in v.items()), file=sys.stderr)
