"""Training checkpoints: HF-format weights (safetensors), optimizer, RNG states, data cursor.

Nothing here unpickles: tensors are safetensors, the optimizer state goes through ``torch.save`` and
is read back with ``weights_only=True``, everything else is JSON.
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import numpy as np
import torch
from safetensors.torch import load_file, save_file

from rlrouter.learner.learner import Learner

STATE = "state.json"


def save_checkpoint(path: str | Path, learner: Learner, step: int, extra: dict[str, Any] | None = None) -> Path:
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    save_file(learner.trainable_state(), str(path / "trainable.safetensors"))
    if learner.cfg.lora:
        learner.save_adapter(str(path / "adapter"))
    else:
        learner.policy.save_pretrained(str(path / "model"), safe_serialization=True)
        learner.tokenizer.save_pretrained(str(path / "model"))
    if learner.ref_adapter is not None:  # the KL reference (kl_reference: start), for an exact resume
        save_file({k: v.contiguous() for k, v in learner.ref_adapter.items()}, str(path / "reference.safetensors"))
    torch.save(learner.optimizer.state_dict(), path / "optimizer.pt")
    save_file({"torch_cpu": torch.get_rng_state()}, str(path / "rng.safetensors"))
    py_state = random.getstate()
    np_state = np.random.get_state()
    state = {"step": step, "version": learner.version, "learner": learner.state_for_checkpoint()["config"],
             "python_rng": [py_state[0], list(py_state[1]), py_state[2]],
             "numpy_rng": [np_state[0], np_state[1].tolist(), *np_state[2:]], "extra": extra or {}}
    (path / STATE).write_text(json.dumps(state))
    return path


def load_checkpoint(path: str | Path, learner: Learner) -> dict[str, Any]:
    """Restore ``learner`` in place; returns the saved state (step, extra)."""
    path = Path(path)
    if not (path / STATE).exists():
        raise FileNotFoundError(f"{path}: not an rlrouter checkpoint (no {STATE})")
    try:
        state = json.loads((path / STATE).read_text())
    except json.JSONDecodeError as e:
        raise ValueError(f"{path / STATE}: corrupt checkpoint state ({e.msg})") from None
    learner.load_trainable_state(load_file(str(path / "trainable.safetensors")))
    if (path / "reference.safetensors").exists():
        learner.ref_adapter = load_file(str(path / "reference.safetensors"))
    learner.optimizer.load_state_dict(torch.load(path / "optimizer.pt", weights_only=True))
    learner.version = int(state["version"])
    torch.set_rng_state(load_file(str(path / "rng.safetensors"))["torch_cpu"])
    a, b, c = state["python_rng"]
    random.setstate((a, tuple(b), c))
    n = state["numpy_rng"]
    np.random.set_state((n[0], np.array(n[1], dtype=np.uint32), *n[2:]))
    return state


def load_weights(path: str | Path, learner: Learner) -> dict[str, Any]:
    """Start ``learner`` from a checkpoint's policy weights only (``train.init_from``): RL from a saved
    cold start. The optimizer, RNG and step start fresh; a critic absent from the checkpoint (PPO from a
    cold start) keeps its initialisation. Returns the saved state."""
    path = Path(path)
    if not (path / STATE).exists():
        raise FileNotFoundError(f"train.init_from: {path} is not an rlrouter checkpoint (no {STATE})")
    sd = load_file(str(path / "trainable.safetensors"))
    if learner.value_head is not None and not any(k.startswith("value_head.") for k in sd):
        sd = {**sd, **{f"value_head.{k}": v for k, v in learner.value_head.state_dict().items()}}
    learner.load_trainable_state(sd)
    return json.loads((path / STATE).read_text())

