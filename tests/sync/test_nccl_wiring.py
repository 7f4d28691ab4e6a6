"""``train.sync: nccl`` wiring: who calls whom, and what a restart does.

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
from rlrouter.learner.config import RouterR1TrainConfig
from rlrouter.trainer.router_r1 import sync_policy
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
    sent = sync_policy(RouterR1TrainConfig(sync="nccl", sync_bucket_mb=8.0), learners, rollout)
    assert sent == 1234.0
    assert learners.broadcasts == [(["w0", "w1"], 2, 3)]
    assert learners.payloads == []  # nothing through the object store ...
    payload = rollout.fallback()  # ... unless a worker restarts: then the same version as tensors
    assert learners.payloads == [("tensors", 8.0)] and payload.version == 7


def test_object_store_transports_do_not_broadcast():
    learners = FakeLearners()
    rollout = SimpleNamespace(synced=[], sync=lambda p: rollout.synced.append(p))
    sync_policy(RouterR1TrainConfig(sync="tensors", sync_bucket_mb=8.0), learners, rollout)
    assert learners.broadcasts == [] and learners.payloads == [("tensors", 8.0)]
    assert [p.version for p in rollout.synced] == [7]


def test_nccl_needs_a_rollout_group():
    from rlrouter.rollout.group import LocalRollout

    with pytest.raises(ValueError, match="train.sync=nccl needs Ray rollout workers"):
        sync_policy(RouterR1TrainConfig(sync="nccl"), FakeLearners(), LocalRollout(worker=None))


class FakeTransfer:
    built: list["FakeTransfer"] = []

    def __init__(self, workers, tp, device, timeout_s):
        self.workers, self.tp, self.device, self.timeout_s = workers, tp, device, timeout_s
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
    rank.train = RouterR1TrainConfig(sync="nccl", sync_timeout_s=42.0)
    out = rank.broadcast_weights(["w0"], 1, 0, sync_factory=FakeTransfer)
    assert FakeTransfer.built[0].timeout_s == 42.0
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



# ---- a receiver that dies or hangs mid-transfer: no call waits for ever -----------------------------------

def test_a_failed_receiver_aborts_the_blocked_sender_at_once():
    import threading
    import time

    from rlrouter.sync.nccl import WeightTransferError, run_watched

    blocked, aborted, failure = threading.Event(), [], [None]

    def broadcast():  # the sender's broadcast, waiting for a peer that will never come
        blocked.wait(60)

    threading.Timer(0.3, lambda: failure.__setitem__(0, "rollout worker 1: update_weights failed (ActorDiedError)")).start()
    t0 = time.monotonic()
    with pytest.raises(WeightTransferError, match=r"sending version 3 failed: rollout worker 1.*ActorDiedError.*rebuilt"):
        run_watched(broadcast, 60.0, lambda: failure[0], "sending version 3", lambda: aborted.append(1))
    assert time.monotonic() - t0 < 5 and aborted == [1]
    blocked.set()


def test_a_hung_transfer_times_out_naming_the_setting():
    import threading

    from rlrouter.sync.nccl import WeightTransferError, run_watched

    blocked, aborted = threading.Event(), []
    with pytest.raises(WeightTransferError, match=r"no reply within train.sync_timeout_s=0.5s"):
        run_watched(lambda: blocked.wait(60), 0.5, lambda: None, "building the transfer group",
                    lambda: aborted.append(1))
    assert aborted == [1]
    blocked.set()
    assert run_watched(lambda: 5, 1.0, lambda: None, "x", lambda: aborted.append(2)) == 5 and aborted == [1]


def test_the_client_records_which_receiver_failed(monkeypatch):
    import ray

    from rlrouter.sync.nccl import RolloutWorkersClient

    class Handle:
        def __init__(self, dead):
            self.weight_transfer = SimpleNamespace(remote=lambda *a: ("dead" if dead else "ok"))

    def get(ref, timeout=None):
        if ref == "dead":
            raise ray.exceptions.RayActorError()
        return None

    monkeypatch.setattr(ray, "get", get)
    client = RolloutWorkersClient([Handle(False), Handle(True)], timeout_s=5.0)
    with pytest.raises(ray.exceptions.RayActorError):
        client.update_weights({"names": []})
    assert client.failure.startswith("rollout worker 1: update_weights failed (RayActorError")


class FailingTransfer(FakeTransfer):
    def sync(self, source, version):
        from rlrouter.sync.nccl import WeightTransferError

        raise WeightTransferError("train.sync=nccl: sending version 1 failed: rollout worker 0: ...")


def test_rank_0_reports_a_failed_transfer_and_builds_a_new_group_next_time():
    FakeTransfer.built = []
    rank = LearnerRank.__new__(LearnerRank)
    rank.learner = SimpleNamespace(version=1, device="cuda:0")
    rank.train = RouterR1TrainConfig(sync="nccl")
    out = rank.broadcast_weights(["w0"], 1, 0, sync_factory=FailingTransfer)
    assert out["version"] == 1 and "rollout worker 0" in out["error"]  # the rank lives on
    rank.broadcast_weights(["w0"], 1, 0, sync_factory=FakeTransfer)  # same epoch, yet a new group
    assert len(FakeTransfer.built) == 2 and FakeTransfer.built[1].sent == [1]


class FakeRay:
    """Just enough of ``ray`` for RolloutGroup.sync_direct: ``.remote`` calls run at once."""

    def get(self, x, timeout=None):
        if isinstance(x, BaseException):
            raise x
        return x

    def put(self, x):
        return x


class FakeWorker:
    def __init__(self, dead_pings=0):
        self.dead_pings, self.applied, self.marked = dead_pings, [], []
        self.ping = SimpleNamespace(remote=self._ping)
        self.apply_sync = SimpleNamespace(remote=lambda ref, serial: self.applied.append((ref.version, serial)))
        self.mark_serving = SimpleNamespace(remote=lambda serial, v: self.marked.append((serial, v)))

    def _ping(self):
        if self.dead_pings:
            self.dead_pings -= 1
            return RuntimeError("ActorDiedError")
        return True


def _group(workers):
    from rlrouter.rollout.group import RolloutGroup

    g = RolloutGroup.__new__(RolloutGroup)  # no actors: only the sync bookkeeping is under test
    g.workers, g._ray = workers, FakeRay()
    g.serial = g.restarts = g.transfer_epoch = 0
    g.last_payload = g._payload_ref = g._fallback = g._direct_version = None
    return g


def test_a_receiver_killed_mid_transfer_is_restarted_resynced_and_the_transfer_retried_in_a_new_group():
    dead = FakeWorker(dead_pings=1)  # died during the broadcast; Ray restarts it
    group = _group([FakeWorker(), dead])
    sends = []

    def send(workers, epoch):
        sends.append(epoch)
        if len(sends) == 1:
            return {"version": 7, "error": "train.sync=nccl: sending version 7 failed: rollout worker 1: ..."}
        return {"version": 7, "bytes": 10.0}

    info = group.sync_direct(send, lambda: SyncPayload(kind="tensors", version=7, buckets=[]))
    assert sends == [0, 2]  # the retry runs in a new group: the restart and the retry each bump the epoch
    assert dead.applied == [(7, 1)]  # the restarted worker got version 7 through the object store
    assert info["version"] == 7 and group.restarts == 1
    assert [w.marked for w in group.workers] == [[(1, 7)], [(1, 7)]]


def test_a_transfer_that_fails_twice_raises():
    from rlrouter.sync.nccl import WeightTransferError

    group = _group([FakeWorker()])
    with pytest.raises(WeightTransferError, match="the retry failed too: .*hung"):
        group.sync_direct(lambda w, e: {"version": 1, "error": "hung"},
                          lambda: SyncPayload(kind="tensors", version=1, buckets=[]))


def test_the_watched_thread_works_on_the_ranks_cuda_device(monkeypatch):
    """vLLM's sender runs in a new thread, whose current CUDA device is 0 whatever the rank's: the thread
    sets the caller's device before it sends (recorded here on CPU, where no CUDA call can run)."""
    import threading

    import torch

    from rlrouter.sync.nccl import caller_device, run_watched

    monkeypatch.setattr(torch.cuda, "current_device", lambda: 3)  # the rank's device, set in its main thread
    assert caller_device("cuda") == torch.device("cuda", 3) and caller_device("cuda:1") == torch.device("cuda", 1)
    assert caller_device("cpu") is None
    calls: list[tuple[str, torch.device]] = []
    monkeypatch.setattr(torch.cuda, "set_device", lambda d: calls.append((threading.current_thread().name, d)))
    out = run_watched(lambda: threading.current_thread().name, 5.0, lambda: None, "sending version 1",
                      lambda: None, device=caller_device("cuda"))
    assert calls == [(out, torch.device("cuda", 3))] and out != threading.current_thread().name
    calls.clear()
    run_watched(lambda: None, 5.0, lambda: None, "gloo", lambda: None, device=caller_device("cpu"))
    assert calls == []  # off CUDA nothing is set
