"""The launcher's pure parts: device selection, the command mailbox's protocol, metric merging."""

from __future__ import annotations

import asyncio
import io

import pytest

from rlrouter.distributed.commanded import STOP, Mailbox
from rlrouter.distributed.launcher import RunSpec, select_device
from rlrouter.learner.group import mean_metrics
from rlrouter.progress import Progress


def test_select_device_cpu_without_gpus():
    assert select_device(False, []) == "cpu"
    assert select_device(False, ["cuda:0"]) == "cpu"


def test_select_device_picks_the_lowest_assigned_cuda_index():
    assert select_device(True, ["cuda:3", "cuda:1", "cuda:2"]) == "cuda:1"
    assert select_device(True, ["cuda"]) == "cuda:0"


def test_select_device_names_the_field_when_no_gpu_was_assigned():
    with pytest.raises(RuntimeError, match="resources.learner.num_gpus"):
        select_device(True, ["cpu"])


def test_run_spec_rejects_bad_values():
    with pytest.raises(ValueError, match="max_failures"):
        RunSpec(max_failures=-2)
    with pytest.raises(ValueError, match="checkpoints_to_keep"):
        RunSpec(checkpoints_to_keep=0)


def test_mean_metrics_means_and_maxes():
    m = mean_metrics([{"learner/loss": 1.0, "rollout/ratio_max": 2.0}, {"learner/loss": 3.0, "rollout/ratio_max": 5.0}])
    assert m == {"learner/loss": 2.0, "rollout/ratio_max": 5.0}


def test_mailbox_round_trip_and_restart():
    async def scenario():
        box = Mailbox(world_size=2)
        assert await box.wait_ready(0.01) is None
        await box.join(0, "g1", "r0")
        await box.join(1, "g1", "r1")
        assert await box.wait_ready(0.01) == ("g1", ["r0", "r1"])
        assert await box.next(0, "g1", 0, timeout_s=0.01) is None  # nothing sent yet
        assert await box.submit("g1", 1, [("a",), None])
        assert await box.next(0, "g1", 0) == (1, ("a",))
        assert await box.next(1, "g1", 0) == (1, None)
        await box.done(0, "g1", 1, "x")
        assert await box.collect("g1", 1, 0.01) == ("pending", None)
        await box.done(1, "g1", 1, None)
        assert await box.collect("g1", 1, 0.01) == ("done", ["x", None])
        # a rank dies; Ray Train restarts the group, whose ranks join with a new token
        assert await box.submit("g1", 2, [("b",), ("b",)])
        await box.done(0, "g1", 2, "late")
        await box.join(1, "g2", "r1'")
        assert await box.collect("g1", 2, 0.01) == ("restarted", None)
        assert await box.next(0, "g1", 1) == (-1, STOP)  # a straggler of the old group stops
        assert await box.wait_ready(0.01) is None  # rank 0 of the new group not there yet
        await box.join(0, "g2", "r0'")
        assert await box.wait_ready(0.01) == ("g2", ["r0'", "r1'"])
        assert not await box.submit("g1", 3, [None, None])  # a call to the old group is refused
        await box.done(0, "g1", 2, "stale")
        assert await box.submit("g2", 3, [("c",), ("c",)])
        assert await box.next(1, "g2", 0) == (3, ("c",))

    asyncio.run(scenario())


def test_progress_prints_step_lines_when_not_a_terminal():
    buf = io.StringIO()
    with Progress(3, "router-r1", stream=buf) as bar:
        bar.update(1, reward=0.5)
        bar.update(1, reward=0.25)
    lines = buf.getvalue().splitlines()
    assert len(lines) == 2 and lines[0].startswith("router-r1: step 1/3 reward=0.5")
    assert lines[1].startswith("router-r1: step 2/3 reward=0.25")


def test_progress_disabled_prints_nothing():
    buf = io.StringIO()
    Progress(3, "x", enabled=False, stream=buf).update(1, loss=1.0)
    assert buf.getvalue() == ""


@pytest.mark.parametrize("uri", ["s3://bucket/rlrouter/run/ray_train", "gs://b/x", "file:///tmp/rlr/ray_train"])
def test_a_storage_uri_reaches_ray_train_as_a_uri(uri, tmp_path, monkeypatch):
    """``Path("s3://b/x").resolve()`` is the local folder ``<cwd>/s3:/b/x``: a URI must pass through as it is;
    a relative path is made absolute. Checked on the learner group's RunSpec and the TorchTrainer it builds
    (not run)."""
    from types import SimpleNamespace

    from rlrouter.distributed.launcher import make_trainer
    from rlrouter.distributed.resources import ResourceSpec
    from rlrouter.learner.group import LearnerGroup
    from rlrouter.storage import train_storage_path

    monkeypatch.chdir(tmp_path)
    assert train_storage_path(uri) == uri
    assert train_storage_path("outputs/ray_train") == str(tmp_path / "outputs" / "ray_train")
    group = LearnerGroup(SimpleNamespace(checkpoints=uri.rsplit("/", 1)[0] + "/checkpoints"), ResourceSpec())
    assert group.run.storage_path == uri.rsplit("/", 1)[0] + "/ray_train"
    if uri.startswith("file://"):  # building a trainer on s3/gs would reach for credentials
        trainer = make_trainer(lambda cfg: None, {}, ResourceSpec(), group.run)
        assert trainer.run_config.storage_path == group.run.storage_path
