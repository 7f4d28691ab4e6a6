"""A rollout worker killed mid-batch or during the final evaluation: Ray restarts the actor, the group
re-applies the current weights and retries the shard, and the batch comes out as if nothing happened.

The learner kill (Ray Train FailureConfig) and a full faulted run against a clean one live in
benchmarks/bench_faults.py: each costs two training runs.
"""

from __future__ import annotations

import os
import re
import threading
import time

import pytest

pytestmark = [pytest.mark.ray, pytest.mark.vllm, pytest.mark.slow]

ENV = {"max_turns": 1, "max_new_tokens": 24, "max_total_tokens": 768}


def _busy_rollout_worker() -> bool:
    """True while an actor process under this driver is titled ``ray::_Worker.checked`` (every group
    call goes through ``_Worker.checked``, which verifies the weights serial first)."""
    import psutil

    for p in psutil.Process(os.getpid()).children(recursive=True):
        try:
            if re.search(r"ray::_Worker\.checked", " ".join(p.cmdline())):
                return True
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return False


def _kill_while_busy(ray, group, call):
    """Run ``call()`` in a thread, SIGKILL worker 0 while it works on it; the call's result."""
    pid0 = ray.get(group.workers[0].info.remote())["pid"]
    restarts0 = group.restarts
    out: dict = {}
    th = threading.Thread(target=lambda: out.setdefault("result", call()))
    th.start()
    deadline = time.monotonic() + 120
    while not _busy_rollout_worker() and time.monotonic() < deadline:
        time.sleep(0.05)
    killed_mid_call = _busy_rollout_worker()
    group.kill_worker(0)
    th.join(timeout=600)
    assert not th.is_alive(), "the retried call never finished"
    assert killed_mid_call
    assert group.restarts > restarts0
    assert ray.get(group.workers[0].info.remote())["pid"] != pid0  # a new process
    return out["result"]


@pytest.fixture(scope="module")
def pool_cfg():
    from omegaconf import OmegaConf

    from tests.helpers import CONF_DIR

    return OmegaConf.to_container(OmegaConf.load(CONF_DIR / "pool" / "routellm_replay.yaml"))


ITEMS = [{"query": q, "ground_truth": [a], "source": "gsm8k", "index": i} for i, (q, a) in enumerate([
    ("What is 12 + 30?", "42"), ("What is 7 times 6?", "42"), ("Name the capital of France.", "Paris")])]


@pytest.fixture(scope="module")
def trained(ray_cluster, pool_cfg, shared_data):
    """A rollout group serving non-base weights (so a restarted engine serving the base model would show
    in the output), and its greedy evaluation under the base weights."""
    from rlrouter.distributed.resources import ResourceSpec
    from rlrouter.learner.learner import Learner, LearnerConfig
    from rlrouter.rollout.group import RolloutGroup
    from rlrouter.rollout.parsing import TrajectoryTokens
    from rlrouter.sync.transports import make_payload

    # the module's tests kill worker 0 four times in all; Ray gives up on an actor after max_restarts
    group = RolloutGroup("smollm2-135m-instruct", {"enable_lora": False}, ENV, pool_cfg,
                         ResourceSpec(rollout={"num_workers": 1, "num_cpus": 1}), max_restarts=8)
    try:
        base_eval = group.rollout(ITEMS, 1, 1234, step=-1, temperature=0.0)
        learner = Learner(LearnerConfig(lr=5e-3, lora_r=8))
        tok = learner.tokenizer
        demo = TrajectoryTokens(tok.encode("The answer is", add_special_tokens=False))
        ids = tok.encode(" forty two forty two", add_special_tokens=False)
        demo.add_policy(ids, [0.0] * len(ids))
        for _ in range(4):
            learner.sft_step([demo])
        group.sync(make_payload("tensors", learner, learner.version))
        yield group, base_eval
    finally:
        group.shutdown()


@pytest.mark.timeout(900)
def test_killed_rollout_worker_is_restarted_and_its_shard_retried(ray_cluster, trained):
    group, _ = trained
    clean = group.rollout(ITEMS, 2, seed=11, step=3)
    retried = _kill_while_busy(ray_cluster, group, lambda: group.rollout(ITEMS, 2, seed=11, step=3))
    assert [(t.prompt_index, t.sample_index) for t in retried] == [(t.prompt_index, t.sample_index) for t in clean]
    # same seeds and, thanks to the re-applied sync, the same weights: the same trajectories
    assert [t.text for t in retried] == [t.text for t in clean]
    assert [list(t.tokens.input_ids) for t in retried] == [list(t.tokens.input_ids) for t in clean]


@pytest.mark.timeout(900)
def test_worker_killed_in_the_final_evaluation_is_evaluated_on_the_current_weights(ray_cluster, trained, pool_cfg):
    """The job's final greedy evaluation, with the worker killed mid-way, equals the
    uninterrupted one; so does one after a restart while idle (the stale serial is caught)."""
    from rlrouter.trainer.report import policy_summary

    group, base_eval = trained
    names = [c["name"] for c in pool_cfg["candidates"]]

    def evaluate():
        return group.rollout(ITEMS, 1, 1234, step=-1, temperature=0.0)

    clean = evaluate()
    # a stale worker would be noticed: the base weights evaluate differently
    assert [t.text for t in clean] != [t.text for t in base_eval]
    killed = _kill_while_busy(ray_cluster, group, evaluate)
    assert [t.text for t in killed] == [t.text for t in clean]
    assert policy_summary(killed, names) == policy_summary(clean, names)
    # killed while idle: Ray restarts it with the base weights; the next call finds serial 0 != current
    group.kill_worker(0)
    # the kill is asynchronous: a ping may still reach the old actor, so wait until the restarted one answers
    deadline, serials = time.monotonic() + 300, None
    while time.monotonic() < deadline:
        try:
            serials = group.worker_serials()
            if serials == [0]:
                break
        except Exception:  # noqa: BLE001 - dying or restarting
            pass
        time.sleep(1.0)
    assert serials == [0]  # the restarted engine serves the base weights ...
    assert [t.text for t in evaluate()] == [t.text for t in clean]  # ... until the group re-syncs it
    assert group.worker_serials() == [group.serial]


@pytest.mark.timeout(900)
def test_direct_transfer_then_a_killed_worker_gets_the_same_version_through_the_object_store(ray_cluster, trained):
    """``train.sync: nccl``: after a direct transfer (``RolloutGroup.sync_direct``; here a CPU
    stand-in for rank 0's NCCL broadcast pushes the tensors into each engine itself), the group records
    the version; a worker killed mid-evaluation comes back, gets that version from ``fallback`` (the
    object store), its shard is retried, and the next transfer is told to build a new group."""
    from rlrouter.sync.transports import SyncPayload

    group, base_eval = trained
    current = group.last_payload
    version = current.version + 1
    epochs, fallbacks = [], []

    def send(workers, epoch):
        epochs.append(epoch)
        for i, bucket in enumerate(current.buckets):  # not apply_sync: the group must record the serial itself
            ray_cluster.get([w.update_weights.remote(bucket, version, i == len(current.buckets) - 1)
                             for w in workers])
        return {"version": version, "bytes": float(current.nbytes)}

    def fallback():
        fallbacks.append(version)
        return SyncPayload(kind="tensors", version=version, buckets=current.buckets)

    def evaluate():
        return group.rollout(ITEMS, 1, 1234, step=-1, temperature=0.0)

    clean = evaluate()
    info = group.sync_direct(send, fallback)
    assert info["version"] == version and group.version == version
    assert group.worker_serials() == [group.serial] and group.last_payload is None
    assert [t.text for t in evaluate()] == [t.text for t in clean] != [t.text for t in base_eval]
    epoch0 = group.transfer_epoch
    killed = _kill_while_busy(ray_cluster, group, evaluate)
    assert [t.text for t in killed] == [t.text for t in clean]
    assert fallbacks == [version] and group.transfer_epoch > epoch0
    group.sync_direct(send, fallback)
    assert epochs == [epoch0, group.transfer_epoch]  # the sender sees the restart and rebuilds its group
