"""The cluster path on one machine: a head with no CPUs (as cluster.yaml's) and worker nodes with their own
resources, working directories and ports (``tests/ops/multinode.py``), driven as a user would: a driver on
the head, ``ray job submit``. Fake GPU counts stand in for GPUs where nothing touches CUDA.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.ops.headnode import ROOT, parse_job_id
from tests.ops.multinode import LocalCluster

pytestmark = [pytest.mark.ray, pytest.mark.slow]


@pytest.fixture(scope="module")
def cluster():
    c = LocalCluster({"a": (2, 2), "b": (2, 2)})  # 4 CPUs and 4 fake GPUs on two worker nodes
    with c:
        yield c
    shutil.rmtree(c.head.dir, ignore_errors=True)


def test_a_job_run_on_the_head_without_ray_address_joins_the_running_cluster(cluster):
    """No RAY_ADDRESS: the job finds the cluster ``ray start`` left in the Ray temp dir (RAY_TMPDIR points
    at this head's private one) and does not pass it ray.num_cpus, which Ray would refuse."""
    env = {**cluster.head.env(), "RAY_TMPDIR": str(cluster.head.dir)}
    assert "RAY_ADDRESS" not in env
    p = cluster.python("import ray\nfrom rlrouter.distributed.cluster import connect\n"
                       "info = connect(num_cpus=6)\n"
                       "print('JOINED', info['mode'], sum(n['Alive'] for n in ray.nodes()), ray.cluster_resources()['CPU'])",
                       env=env)
    assert p.returncode == 0, p.stderr[-3000:]
    assert "JOINED running 3 4.0" in p.stdout, p.stdout + p.stderr[-2000:]


PLACE = """
import ray
from rlrouter.distributed.resources import ResourceSpec, rollout_placement_group
ray.init()
roles = dict(rollout={"num_workers": 3, "num_cpus": 0.5, "num_gpus": 1},
             learner={"num_workers": 3, "num_cpus": 0.5, "num_gpus": 1})
try:
    rollout_placement_group(ResourceSpec(**roles))
except RuntimeError as e:
    print("FIXED:", e, flush=True)
print("WAITING", flush=True)
pg = rollout_placement_group(ResourceSpec(**roles, autoscale=True, placement_timeout_s=240),
                             announce=lambda m: print("ASKED:", m, flush=True))
print("PLACED", ray.cluster_resources()["GPU"], flush=True)
"""


def test_placement_fails_on_a_fixed_cluster_and_waits_for_nodes_with_an_autoscaler(cluster):
    """6 GPUs wanted, 4 present. Fixed size: the error names the shortfall and the keys. With
    ``autoscale`` it asks for the bundles and waits; a third node joining (what the autoscaler would
    start) lets it place."""
    t0 = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-c", PLACE], env=cluster.env(), cwd=str(ROOT), text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    lines: list[str] = []
    try:
        for line in proc.stdout:
            lines.append(line)
            if line.startswith("ASKED:"):
                break
        assert any(x.startswith("ASKED:") for x in lines), "".join(lines)[-3000:]
        time.sleep(3)
        assert proc.poll() is None, "".join(lines)[-3000:]  # still waiting, not failed
        cluster.add("c", num_cpus=1, num_gpus=2)
        out, _ = proc.communicate(timeout=240)
        lines.append(out)
    finally:
        if proc.poll() is None:
            proc.kill()
    text = "".join(lines)
    assert proc.returncode == 0, text[-3000:]
    fixed = next(x for x in text.splitlines() if x.startswith("FIXED:"))
    assert "GPU: need 6, cluster has 4, short 2" in fixed and "resources.autoscale is false" in fixed
    assert "resources.learner.num_workers" in fixed and "max_workers" in fixed
    assert "asked the autoscaler for 6 bundles" in text
    assert "PLACED 6.0" in text, text[-3000:]
    print(f"placement test {time.perf_counter() - t0:.1f}s")


DEVICES = """
import json, os, ray
from rlrouter.distributed.resources import ResourceSpec, rollout_actor_options, rollout_placement_group
from rlrouter.engine import EngineConfig, configure_device_env
ray.init()

@ray.remote
class Engine:
    def env(self, tp):
        before = os.environ.get("CUDA_VISIBLE_DEVICES")
        changed = configure_device_env(EngineConfig(device="cuda", tensor_parallel_size=tp))
        return {"before": before, "after": os.environ.get("CUDA_VISIBLE_DEVICES", "<unset>"), "changed": changed,
                "bundles": os.environ.get("VLLM_RAY_BUNDLE_INDICES"), "gpu_ids": [str(g) for g in ray.get_gpu_ids()]}

out = {}
for tp, override in ((2, "0"), (2, "1"), (1, "0")):
    spec = ResourceSpec(rollout={"num_workers": 1, "num_cpus": 0.1, "num_gpus": 1},
                        learner={"num_workers": 1, "num_cpus": 0, "num_gpus": 0})
    pg = rollout_placement_group(spec, tensor_parallel_size=tp)
    opts = rollout_actor_options(spec, pg, 0, tp)
    env = opts.setdefault("runtime_env", {}).setdefault("env_vars", {})
    env["RAY_ACCEL_ENV_VAR_OVERRIDE_ON_ZERO"] = override  # 1: Ray's behaviour before 2.60 (and OpenRLHF's Rays)
    actor = Engine.options(**opts).remote()
    out[f"{tp}-{override}"] = ray.get(actor.env.remote(tp))
    ray.kill(actor)
    ray.util.remove_placement_group(pg)
print("DEVICES", json.dumps(out))
"""


def test_engine_actors_fix_their_visible_devices_as_openrlhf_does(cluster):
    """A TP-2 engine actor holds no GPU. Ray before 2.60 (and 2.60 with RAY_ACCEL_ENV_VAR_OVERRIDE_ON_ZERO=1)
    gives it CUDA_VISIBLE_DEVICES="", which vLLM's engine process would inherit and see no GPU: the actor
    drops it and hands vLLM its two bundles. Ray 2.60 by default leaves the variable unset: nothing to
    drop. A one-GPU engine keeps the GPU Ray assigned it."""
    p = cluster.python(DEVICES)
    assert p.returncode == 0, p.stderr[-3000:]
    out = json.loads(p.stdout.split("DEVICES", 1)[1])
    old_ray, new_ray, tp1 = out["2-1"], out["2-0"], out["1-0"]
    assert old_ray["before"] == "" and old_ray["after"] == "<unset>"
    assert old_ray["changed"] == {"CUDA_VISIBLE_DEVICES": None}
    assert new_ray["before"] is None and new_ray["after"] == "<unset>" and new_ray["changed"] == {}
    assert old_ray["bundles"] == new_ray["bundles"] == "0,1" and old_ray["gpu_ids"] == []
    assert tp1["before"] == tp1["after"] and tp1["after"] in ("0", "1") and tp1["changed"] == {}
    assert tp1["gpu_ids"] == [tp1["after"]]


WALL_CLOCK = ("time/", "rollout/tokens_per_s", "sync/share_of_step")


def _deterministic(row: dict) -> dict:
    return {k: v for k, v in row.items() if not k.startswith(WALL_CLOCK)}


def _submit(cluster: LocalCluster, *args: str, timeout_s: float = 1500) -> str:
    from tests.ops.headnode import runtime_env

    head = cluster.head
    p = head.job("submit", "--no-wait", "--working-dir", ".", "--runtime-env-json", runtime_env(), "--",
                 "python", "jobs/train_router_r1.py", "debug=cpu", "eval.untrained=false", *args)
    job_id = parse_job_id(p.stdout + p.stderr)
    status, deadline = "PENDING", time.monotonic() + timeout_s
    while time.monotonic() < deadline and status not in ("SUCCEEDED", "FAILED", "STOPPED"):
        time.sleep(5)
        status = head.job_status(job_id)
    logs = head.job_logs(job_id)
    assert status == "SUCCEEDED", f"{args}: {status}\n{logs[-6000:]}"
    return logs


@pytest.mark.vllm
@pytest.mark.timeout(3600)
def test_checkpoints_reach_storage_from_the_learner_node_and_a_fresh_driver_resumes_equal(cluster):
    """``ray job submit`` of the debug run with ``storage=`` a URI (``file://`` standing in for S3: the same
    pyarrow.fs calls). The head offers no CPUs, so the rollout worker and the learner rank run on the
    worker nodes and the driver on the head; the rank stores each checkpoint at the URI itself. Then the
    storage is cut back to what a run killed after step 1 leaves, and a new driver with ``resume=true``
    continues from step 1: its step 2 equals the uninterrupted run's."""
    bucket = cluster.head.dir / "bucket"
    storage = f"file://{bucket}"
    t0 = time.perf_counter()
    logs = _submit(cluster, f"storage={storage}", "run_name=mn_full")
    t_full = time.perf_counter() - t0
    assert "ray: submitted cluster" in logs
    full = bucket / "mn_full"
    assert {p.name for p in (full / "checkpoints").iterdir()} >= {"step_000001", "step_000002"}
    assert (full / "checkpoints" / "step_000002" / "state.json").exists()
    assert (full / "report.json").exists() and (full / "metrics.jsonl").exists()  # the driver's files, pushed
    cache = Path("~/.cache/rlrouter/runs/mn_full").expanduser()  # the head's local copy holds no checkpoint
    assert not (cache / "checkpoints").exists()
    shutil.rmtree(cache, ignore_errors=True)
    rows = [json.loads(x) for x in (full / "metrics.jsonl").read_text().splitlines()]

    # what storage holds after a run killed right after its step-1 checkpoint
    part = bucket / "mn_part"
    shutil.copytree(full, part)
    shutil.rmtree(part / "checkpoints" / "step_000002")
    shutil.rmtree(part / "ray_train", ignore_errors=True)
    (part / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows if r["step"] <= 1))
    t0 = time.perf_counter()
    logs = _submit(cluster, f"storage={storage}", "run_name=mn_part", "resume=true")
    t_resume = time.perf_counter() - t0
    assert f"resume: {storage}/mn_part/checkpoints/step_000001" in logs, logs[-4000:]
    resumed = [json.loads(x) for x in (part / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in resumed] == [r["step"] for r in rows]  # 0 (held-out after the cold start), 1, 2
    want, got = _deterministic(rows[-1]), _deterministic(resumed[-1])
    assert got.keys() == want.keys() and len(want) > 10
    for k in want:
        assert got[k] == pytest.approx(want[k], rel=1e-5, abs=1e-6), k
    assert (part / "checkpoints" / "step_000002" / "state.json").exists()
    shutil.rmtree(Path("~/.cache/rlrouter/runs/mn_part").expanduser(), ignore_errors=True)
    print(f"full run {t_full:.0f}s, resumed run {t_resume:.0f}s")
