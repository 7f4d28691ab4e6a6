"""Training checkpoints: HF-format weights (safetensors), optimizer, RNG states, data cursor.

Nothing here unpickles: tensors are safetensors, the optimizer state goes through ``torch.save`` and
is read back with ``weights_only=True``, everything else is JSON.

Every rank calls ``save_checkpoint``/``load_checkpoint``. Under FSDP each writes and reads its own
optimizer shard (``optimizer.rank<r>.pt``, and its slice of the KL reference); rank 0 writes the rest
from the gathered full weights. The start-policy KL reference (``learner.kl_reference: start``) is
saved too: the LoRA adapter copy, or the full fine-tune's reference model (its own parameters).
``learner.keep_checkpoints`` bounds how many ``step_*`` checkpoints stay beside the new one.
"""

from __future__ import annotations

import json
import random
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import torch
from safetensors.torch import load_file, save_file

from rlrouter.learner.learner import Learner

STATE = "state.json"


def _rank_file(learner: Learner, stem: str, ext: str) -> str:
    """Sharded state (FSDP) is written by each rank for itself; otherwise one file."""
    return f"{stem}.rank{learner.rank}.{ext}" if learner.fsdp else f"{stem}.{ext}"


def _optimizer_file(learner: Learner) -> str:
    return _rank_file(learner, "optimizer", "pt")


def save_checkpoint(path: str | Path, learner: Learner, step: int, extra: dict[str, Any] | None = None) -> Path:
    """Every rank calls it. Under FSDP each rank writes its shards, then rank 0 the rest; under DDP (every
    rank holds the same state) only rank 0 writes."""
    path = Path(path)
    if learner.rank != 0 and not learner.fsdp:
        return path
    path.mkdir(parents=True, exist_ok=True)
    torch.save(learner.optimizer_state(), path / _optimizer_file(learner))
    reference = learner.reference_state()
    if reference is not None:  # the KL reference (kl_reference: start), for an exact resume
        save_file({k: v.contiguous() for k, v in learner.local_tensors(reference).items()},
                  str(path / _rank_file(learner, "reference", "safetensors")))
    if learner.fsdp:
        import torch.distributed as dist

        dist.barrier()  # every rank's shards are on disk before rank 0 marks the checkpoint complete
    if learner.rank != 0:
        return path
    save_file(learner.trainable_state(), str(path / "trainable.safetensors"))
    if learner.cfg.lora:
        learner.save_adapter(str(path / "adapter"))
    else:
        learner.save_model(str(path / "model"))
    save_file({"torch_cpu": torch.get_rng_state()}, str(path / "rng.safetensors"))
    py_state = random.getstate()
    np_state = np.random.get_state()
    state = {"step": step, "version": learner.version, "rl_updates": learner.rl_updates, "learner": learner.state_for_checkpoint()["config"],
             "world_size": learner.world_size,
             "python_rng": [py_state[0], list(py_state[1]), py_state[2]],
             "numpy_rng": [np_state[0], np_state[1].tolist(), *np_state[2:]], "extra": extra or {}}
    (path / STATE).write_text(json.dumps(state))  # written last: its presence marks a complete checkpoint
    prune_checkpoints(path.parent, learner.cfg.keep_checkpoints, keep=path)
    return path


def prune_checkpoints(folder: str | Path, keep_last: int, keep: Path | None = None) -> list[Path]:
    """Delete all but the newest ``keep_last`` complete ``step_*`` checkpoints (0: keep all); returns the deleted.

    Only directories holding ``state.json`` count, so a checkpoint still being written is never the
    reason an older complete one survives or goes. The cold start (``step_000000``) is never deleted:
    ``train.init_from`` starts later runs from it.
    """
    if keep_last <= 0:
        return []
    done = sorted(p for p in Path(folder).glob("step_*") if (p / STATE).exists() and p.name != "step_000000")
    gone = [p for p in done[:-keep_last] if keep is None or p.resolve() != keep.resolve()]
    for p in gone:
        shutil.rmtree(p, ignore_errors=True)
    return gone


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
    opt = path / _optimizer_file(learner)
    if not opt.exists():
        raise FileNotFoundError(f"{path}: no {opt.name} (saved by {state.get('world_size', 1)} rank(s); "
                                f"this learner is rank {learner.rank}, fsdp={learner.fsdp})")
    learner.load_optimizer_state(torch.load(opt, weights_only=True))
    ref = path / _rank_file(learner, "reference", "safetensors")
    if ref.exists():
        learner.load_reference_state(load_file(str(ref)))
    learner.version = int(state["version"])
    learner.rl_updates = int(state.get("rl_updates", state["step"]))  # older checkpoints: the RL step
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

