"""``train.sync: nccl`` wiring (issue 14, item 2): who calls whom, and what a restart does.

The NCCL transfer needs CUDA (tests/learner/test_gpu.py is where it would run); here its sender and
the rollout workers are stand-ins, so these tests check the orchestration only: the driver asks rank 0
to broadcast to the rollout workers' handles, the group then records the version, a worker restart
makes the next transfer build a new group, and a restarted worker gets the version through the
object store. The same bookkeeping against real restarted vLLM workers is in tests/ops/test_faults.py.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from rlrouter.learner.group import LearnerRank
from rlrouter.learner.loop import TrainConfig, sync_policy
from rlrouter.sync.transports import SyncPayload


class FakeLearners:
    def __init__(self):
        self.broadcasts: list[tuple] = []
        self.payloads: list[tuple] = []

    def broadcast_weights(self, workers, tp, epoch):
        self.broadcasts.append((list(workers), tp, epoch))
        return {"version": 7, "bytes": 1234.0, "seconds": 0.1}

    def sync_payload(self, kind, bucket_mb):
        self.payloads.append((kind, bucket_mb))
        return SyncPayload(kind=kind, version=7, buckets=[])


class FakeDirectRollout:
    """Calls ``send`` as RolloutGroup.sync_direct does and keeps the fallback for a restart."""

    tensor_parallel_size = 2

    def __init__(self):
        self.workers = ["w0", "w1"]
        self.transfer_epoch = 3
        self.fallback = None

    def sync_direct(self, send, fallback):
        self.fallback = fallback
        return dict(send(self.workers, self.transfer_epoch))


def test_nccl_sync_broadcasts_from_rank_0_to_the_rollout_workers():
    learners, rollout = FakeLearners(), FakeDirectRollout()
    sent = sync_policy(TrainConfig(sync="nccl", sync_bucket_mb=8.0), learners, rollout)
    assert sent == 1234.0
    assert learners.broadcasts == [(["w0", "w1"], 2, 3)]
    assert learners.payloads == []  # nothing through the object store ...
    payload = rollout.fallback()  # ... unless a worker restarts: then the same version as tensors
    assert learners.payloads == [("tensors", 8.0)] and payload.version == 7


def test_object_store_transports_do_not_broadcast():
    learners = FakeLearners()
    rollout = SimpleNamespace(synced=[], sync=lambda p: rollout.synced.append(p))
    sync_policy(TrainConfig(sync="tensors", sync_bucket_mb=8.0), learners, rollout)
    assert learners.broadcasts == [] and learners.payloads == [("tensors", 8.0)]
    assert [p.version for p in rollout.synced] == [7]


def test_nccl_needs_a_rollout_group():
    from rlrouter.rollout.group import LocalRollout

    with pytest.raises(ValueError, match="train.sync=nccl needs Ray rollout workers"):
        sync_policy(TrainConfig(sync="nccl"), FakeLearners(), LocalRollout(worker=None))


class FakeTransfer:
    built: list["FakeTransfer"] = []

    def __init__(self, workers, tp, device):
        self.workers, self.tp, self.device = workers, tp, device
        self.sent: list[int] = []
        self.closed = False
        self.last_bytes = 0
        FakeTransfer.built.append(self)

    def sync(self, source, version):
        self.sent.append(version)
        self.last_bytes = 100 * version
        return 0.01

    def close(self):
        self.closed = True


def test_rank_0_builds_the_transfer_group_once_per_epoch():
    FakeTransfer.built = []
    rank = LearnerRank.__new__(LearnerRank)  # no model: only the transfer bookkeeping is under test
    rank.learner = SimpleNamespace(version=1, device="cuda:0")
    out = rank.broadcast_weights(["w0"], 1, 0, sync_factory=FakeTransfer)
    assert out == {"version": 1, "seconds": 0.01, "bytes": 100.0}
    rank.learner.version = 2
    rank.broadcast_weights(["w0"], 1, 0, sync_factory=FakeTransfer)
    assert len(FakeTransfer.built) == 1 and FakeTransfer.built[0].sent == [1, 2]
    assert FakeTransfer.built[0].device == "cuda:0"
    # a rollout worker restarted (epoch 1): it is not in the old group; a new one is built
    rank.learner.version = 3
    rank.broadcast_weights(["w0-restarted"], 1, 1, sync_factory=FakeTransfer)
    assert len(FakeTransfer.built) == 2
    assert FakeTransfer.built[0].closed and not FakeTransfer.built[1].closed
    assert FakeTransfer.built[1].workers == ["w0-restarted"] and FakeTransfer.built[1].sent == [3]

