"""A rollout worker killed mid-batch: Ray restarts the actor, the group re-applies the last synced
weights and retries the shard, and the batch comes out as if nothing happened (issue 8).

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
    """True while an actor process under this driver is titled ``ray::_Worker.rollout``."""
    import psutil

    for p in psutil.Process(os.getpid()).children(recursive=True):
        try:
            if re.search(r"ray::_Worker\.rollout", " ".join(p.cmdline())):
                return True
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return False


@pytest.fixture(scope="module")
def pool_cfg():
    from omegaconf import OmegaConf

    from tests.helpers import CONF_DIR

    return OmegaConf.to_container(OmegaConf.load(CONF_DIR / "pool" / "routellm_replay.yaml"))


@pytest.mark.timeout(900)
def test_killed_rollout_worker_is_restarted_and_its_shard_retried(ray_cluster, pool_cfg, shared_data):
    from rlrouter.distributed.resources import ResourceSpec
    from rlrouter.learner.learner import Learner, LearnerConfig
    from rlrouter.rollout.group import RolloutGroup
    from rlrouter.sync.transports import make_payload

    items = [{"query": q, "ground_truth": [a], "source": "gsm8k", "index": i} for i, (q, a) in enumerate([
        ("What is 12 + 30?", "42"), ("What is 7 times 6?", "42"), ("Name the capital of France.", "Paris")])]
    group = RolloutGroup("smollm2-135m-instruct", {"enable_lora": False}, ENV, pool_cfg,
                         ResourceSpec(rollout={"num_workers": 1, "num_cpus": 1}))
    try:
        # non-base weights, so a restarted engine serving the base model would show in the output
        from rlrouter.rollout.parsing import TrajectoryTokens

        learner = Learner(LearnerConfig(lr=5e-3, lora_r=8))
        tok = learner.tokenizer
        demo = TrajectoryTokens(tok.encode("The answer is", add_special_tokens=False))
        ids = tok.encode(" forty two forty two", add_special_tokens=False)
        demo.add_policy(ids, [0.0] * len(ids))
        for _ in range(4):
            learner.sft_step([demo])
        group.sync(make_payload("tensors", learner, learner.version))
        pid0 = ray_cluster.get(group.workers[0].info.remote())["pid"]
        clean = group.rollout(items, 2, seed=11, step=3)

        out: dict = {}
        th = threading.Thread(target=lambda: out.setdefault("trajs", group.rollout(items, 2, seed=11, step=3)))
        th.start()
        deadline = time.monotonic() + 120
        while not _busy_rollout_worker() and time.monotonic() < deadline:
            time.sleep(0.1)
        killed_mid_batch = _busy_rollout_worker()
        group.kill_worker(0)
        th.join(timeout=600)
        assert not th.is_alive(), "the retried rollout never finished"
        assert killed_mid_batch
        assert group.restarts >= 1
        assert ray_cluster.get(group.workers[0].info.remote())["pid"] != pid0  # a new process
        retried = out["trajs"]
        assert [(t.prompt_index, t.sample_index) for t in retried] == [(t.prompt_index, t.sample_index) for t in clean]
        # same seeds and, thanks to the re-applied sync, the same weights: the same trajectories
        assert [t.text for t in retried] == [t.text for t in clean]
        assert [list(t.tokens.input_ids) for t in retried] == [list(t.tokens.input_ids) for t in clean]
    finally:
        group.shutdown()
