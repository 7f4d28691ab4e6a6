"""Training checkpoints: HF-format weights (safetensors), optimizer, RNG states, data cursor.

Nothing here unpickles: tensors are safetensors, the optimizer state goes through ``torch.save`` and
is read back with ``weights_only=True``, everything else is JSON.

Every rank calls ``save_checkpoint``/``load_checkpoint``. Under FSDP each writes and reads its own
optimizer shard (``optimizer.rank<r>.pt``, and its slice of the KL reference); rank 0 writes the rest
from the gathered full weights. The start-policy KL reference (``learner.kl_reference: start``) is
saved too: the LoRA adapter copy, or the full fine-tune's reference model (its own parameters).
``learner.keep_checkpoints`` bounds how many ``step_*`` checkpoints stay beside the new one.

A checkpoint's location is a path or a URI (``rlrouter.storage``: ``s3://``, ``gs://``, ``file://``), as
Ray Train's ``storage_path``: each rank writes what it owns into a folder on its own node and uploads
it, from whichever node it runs on, so the driver (on the head, which has no learner) and a resumed run
on a new cluster find every file. ``state.json`` goes up last: its presence marks a complete checkpoint.
A path must be one every learner node sees (a shared file system); ``check_visible`` says so if not.
"""

from __future__ import annotations

import json
import random
import shutil
import socket
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import torch
from safetensors.torch import load_file, save_file

from rlrouter.learner.learner import Learner
from rlrouter.storage import download, exists, is_uri, join, list_dirs, remove, upload

STATE = "state.json"


def _rank_file(learner: Learner, stem: str, ext: str) -> str:
    """Sharded state (FSDP) is written by each rank for itself; otherwise one file."""
    return f"{stem}.rank{learner.rank}.{ext}" if learner.fsdp else f"{stem}.{ext}"


def _optimizer_file(learner: Learner) -> str:
    return _rank_file(learner, "optimizer", "pt")


def parent(location: str) -> str:
    return location.rstrip("/").rsplit("/", 1)[0] if is_uri(location) else str(Path(location).parent)


def save_checkpoint(path: str | Path, learner: Learner, step: int, extra: dict[str, Any] | None = None) -> str:
    """Every rank calls it. Under FSDP each rank writes its shards, then rank 0 the rest; under DDP (every
    rank holds the same state) only rank 0 writes. ``path``: a folder or a URI; returns it."""
    location = str(path)
    if learner.rank != 0 and not learner.fsdp:
        return location
    remote = is_uri(location)
    folder = Path(tempfile.mkdtemp(prefix="rlrouter-ckpt-")) if remote else Path(location)
    try:
        _write(folder, location, remote, learner, step, extra)
    finally:
        if remote:
            shutil.rmtree(folder, ignore_errors=True)
    return location


def _write(folder: Path, location: str, remote: bool, learner: Learner, step: int, extra: dict[str, Any] | None) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    shards = [_optimizer_file(learner)]
    torch.save(learner.optimizer_state(), folder / shards[0])
    reference = learner.reference_state()
    if reference is not None:  # the KL reference (kl_reference: start), for an exact resume
        shards.append(_rank_file(learner, "reference", "safetensors"))
        save_file({k: v.contiguous() for k, v in learner.local_tensors(reference).items()}, str(folder / shards[-1]))
    if remote:
        upload(folder, location, only=shards)
    if learner.fsdp:
        import torch.distributed as dist

        dist.barrier()  # every rank's shards are stored before rank 0 marks the checkpoint complete
    if learner.rank != 0:
        return
    rest = ["trainable.safetensors", "rng.safetensors", "adapter" if learner.cfg.lora else "model"]
    save_file(learner.trainable_state(), str(folder / "trainable.safetensors"))
    if learner.cfg.lora:
        learner.save_adapter(str(folder / "adapter"))
    else:
        learner.save_model(str(folder / "model"))
    save_file({"torch_cpu": torch.get_rng_state()}, str(folder / "rng.safetensors"))
    py_state = random.getstate()
    np_state = np.random.get_state()
    state = {"step": step, "version": learner.version, "rl_updates": learner.rl_updates, "learner": learner.state_for_checkpoint()["config"],
             "world_size": learner.world_size,
             "python_rng": [py_state[0], list(py_state[1]), py_state[2]],
             "numpy_rng": [np_state[0], np_state[1].tolist(), *np_state[2:]], "extra": extra or {}}
    if remote:
        upload(folder, location, only=rest)
    (folder / STATE).write_text(json.dumps(state))  # written last: its presence marks a complete checkpoint
    if remote:
        upload(folder, location, only=[STATE])
    prune_checkpoints(parent(location), learner.cfg.keep_checkpoints, keep=location)


def complete_checkpoints(folder: str | Path) -> list[str]:
    """The complete ``step_*`` checkpoints in ``folder`` (a path or a URI), oldest first."""
    folder = str(folder)
    return [join(folder, n) for n in list_dirs(folder) if n.startswith("step_") and exists(join(folder, n, STATE))]


def latest_checkpoint(folder: str | Path) -> str | None:
    """The newest complete checkpoint in ``folder`` (a path or a URI), or None."""
    done = complete_checkpoints(folder)
    return done[-1] if done else None


def prune_checkpoints(folder: str | Path, keep_last: int, keep: str | Path | None = None) -> list[str]:
    """Delete all but the newest ``keep_last`` complete ``step_*`` checkpoints (0: keep all); returns the deleted.

    Only folders holding ``state.json`` count, so a checkpoint still being written is never the
    reason an older complete one survives or goes. The cold start (``step_000000``) is never deleted:
    ``train.init_from`` starts later runs from it.
    """
    if keep_last <= 0:
        return []
    done = [c for c in complete_checkpoints(folder) if not c.rstrip("/").endswith("step_000000")]
    keep_name = Path(str(keep)).name if keep is not None else None
    gone = [c for c in done[:-keep_last] if Path(c).name != keep_name]
    for c in gone:
        remove(c)
    return gone


def create_folder(folder: str) -> None:
    """The driver creates the run's checkpoint folder when it is a path (a URI needs none); each rank then
    checks that its node sees it (``check_visible``)."""
    if not is_uri(folder):
        Path(folder).mkdir(parents=True, exist_ok=True)


def check_visible(folder: str, rank: int) -> None:
    """A checkpoint folder that is a path must exist on this learner rank's node: the driver created it
    on its own. Missing here means this node does not share the driver's file system, and checkpoints
    written here would never reach the run."""
    if is_uri(folder) or Path(folder).is_dir():
        return
    raise FileNotFoundError(
        f"storage: the run's checkpoint folder {folder} does not exist on learner rank {rank}'s node "
        f"({socket.gethostname()}), though the job created it on the driver's: this node does not share "
        "that file system. On a multi-node cluster give storage= a path every node mounts (EFS, FSx, NFS) "
        "or a URI (s3://bucket/prefix): docs/operations.md, 'Where a job writes'")


@contextmanager
def _local(path: str | Path, names: list[str]) -> Iterator[Path]:
    """A checkpoint as a local folder. At a URI only ``names`` (this rank's files: every rank's shards of a 3B
    model are about 46 GiB) are downloaded, into a temporary folder removed once the restore is done."""
    if not is_uri(str(path)):
        yield Path(path)
        return
    folder = Path(tempfile.mkdtemp(prefix="rlrouter-resume-"))
    try:
        yield download(str(path), folder, only=names)
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def restore_files(learner: Learner) -> list[str]:
    """What a rank reads of a checkpoint to resume: the shared files and its own shards."""
    return [STATE, "trainable.safetensors", "rng.safetensors", _optimizer_file(learner),
            _rank_file(learner, "reference", "safetensors")]


def load_checkpoint(path: str | Path, learner: Learner) -> dict[str, Any]:
    """Restore ``learner`` in place (``path``: a folder or a URI); returns the saved state (step, extra)."""
    with _local(path, restore_files(learner)) as folder:
        return _load(folder, learner, str(path))


def _load(path: Path, learner: Learner, where: str) -> dict[str, Any]:
    if not (path / STATE).exists():
        raise FileNotFoundError(f"{where}: not an rlrouter checkpoint (no {STATE})")
    try:
        state = json.loads((path / STATE).read_text())
    except json.JSONDecodeError as e:
        raise ValueError(f"{where}/{STATE}: corrupt checkpoint state ({e.msg})") from None
    learner.load_trainable_state(load_file(str(path / "trainable.safetensors")))
    opt = path / _optimizer_file(learner)
    if not opt.exists():
        raise FileNotFoundError(f"{where}: no {opt.name} (saved by {state.get('world_size', 1)} rank(s); "
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
    with _local(path, [STATE, "trainable.safetensors"]) as folder:
        if not (folder / STATE).exists():
            raise FileNotFoundError(f"train.init_from: {path} is not an rlrouter checkpoint (no {STATE})")
        sd = load_file(str(folder / "trainable.safetensors"))
        state = json.loads((folder / STATE).read_text())
    if learner.value_head is not None and not any(k.startswith("value_head.") for k in sd):
        sd = {**sd, **{f"value_head.{k}": v for k, v in learner.value_head.state_dict().items()}}
    learner.load_trainable_state(sd)
    return state

