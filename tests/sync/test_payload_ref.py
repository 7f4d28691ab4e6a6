"""``train.sync: tensors`` on a cluster: the payload stays in the object store of the node that made it
(learner rank 0) and each rollout worker fetches it from there. The driver, on the head, used to fetch the
whole payload (5.75 GiB for the 3B preset) and store it again, so the head's object store spilled every
step. Real Ray actors stand in for rank 0 and the workers; the driver's ``ray.get``/``ray.put`` are watched."""

from __future__ import annotations

import os
from types import SimpleNamespace

import pytest
import torch

from rlrouter.sync.transports import PayloadRef, SyncPayload

pytestmark = [pytest.mark.ray]

ELEMENTS = 1_000_000


class Rank0:
    """Learner rank 0's side: makes the payload and returns it by reference (``learner/group.py``'s handle)."""

    def payload(self, version: int) -> PayloadRef:
        t = torch.arange(ELEMENTS, dtype=torch.float32)
        return PayloadRef.put(SyncPayload(kind="tensors", version=version, buckets=[[("w", t)]]))


class Receiver:
    """A rollout worker's ``apply_sync``: what arrived, in which process."""

    def apply_sync(self, payload, serial: int) -> dict:
        return {"type": type(payload).__name__, "version": payload.version, "nbytes": payload.nbytes,
                "last": float(payload.buckets[0][0][1][-1]), "pid": os.getpid()}


def test_the_driver_passes_the_reference_on_and_never_holds_the_payload(ray_cluster, monkeypatch):
    import ray

    from rlrouter.learner.group import LearnerGroup
    from rlrouter.rollout.group import RolloutGroup

    rank0 = ray.remote(Rank0).remote()
    workers = [ray.remote(Receiver).remote() for _ in range(2)]
    # the driver's LearnerGroup asks rank 0 through its mailbox; here the mailbox is a direct actor call
    learners = object.__new__(LearnerGroup)
    learners.world_size = 1
    learners._workers = SimpleNamespace(call=lambda cmds: [ray.get(rank0.payload.remote(7))])
    seen: list[str] = []

    class Watched:  # the driver's ray, recording every object that passes through it
        def __getattr__(self, name):
            return getattr(ray, name)

        def put(self, value, **kw):
            seen.append(f"put {type(value).__name__}")
            return ray.put(value, **kw)

        def get(self, refs, **kw):
            out = ray.get(refs, **kw)
            seen.extend(f"get {type(v).__name__}" for v in (out if isinstance(out, list) else [out]))
            return out

    group = object.__new__(RolloutGroup)
    group.__dict__.update(workers=workers, _ray=Watched(), last_payload=None, _payload_ref=None, _fallback=None,
                          _direct_version=None, transfer_epoch=0, serial=0, restarts=0)
    payload = learners.sync_payload("tensors", 64.0)
    assert isinstance(payload, PayloadRef) and payload.nbytes == 4 * ELEMENTS and payload.version == 7
    group.sync(payload)
    assert group.version == 7 and "put SyncPayload" not in seen and "get SyncPayload" not in seen, seen
    got = ray.get([w.apply_sync.remote(group._payload_ref, group.serial) for w in workers])
    assert all(g["type"] == "SyncPayload" and g["nbytes"] == 4 * ELEMENTS and g["last"] == ELEMENTS - 1 for g in got)
    assert len({g["pid"] for g in got} | {os.getpid()}) == 3  # each worker fetched it in its own process
