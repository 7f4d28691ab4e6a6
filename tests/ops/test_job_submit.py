"""`ray job submit --working-dir .` of the Router-R1 job against a local head with token auth on, and
the trainer's metrics on the head's Prometheus endpoint (issue 8, "Cluster and jobs"); the token stays
out of the job's package and the outputs land in the storage location (issue 16).

One head, one job: the job is the slow part (a vLLM engine, data preparation, two GRPO steps), so the
metrics endpoint is scraped while it runs instead of in a second job.
"""

from __future__ import annotations

import json
import re
import shutil
import time
from pathlib import Path

import pytest

from tests.ops.headnode import ROOT, LocalHead, parse_job_id, runtime_env

pytestmark = [pytest.mark.ray, pytest.mark.slow, pytest.mark.vllm]

# trainer metric -> name on the Prometheus endpoint (Ray prefixes its own namespace, "ray_")
TRAINER_METRICS = ["rlrouter_reward_total", "rlrouter_learner_kl", "rlrouter_rollout_tokens_per_s",
                   "rlrouter_learner_loss", "rlrouter_rollout_format_valid"]
SHARE = re.compile(r"^(?:ray_)?(rlrouter_rollout_share_\w+)\{[^}]*\}\s+(\S+)", re.M)


def samples(text: str, name: str) -> list[tuple[str, float]]:
    """(labels, value) of every sample of ``name`` (with or without Ray's ``ray_`` prefix)."""
    pat = re.compile(rf"^(?:ray_)?{re.escape(name)}\{{([^}}]*)\}}\s+(\S+)", re.M)
    return [(m.group(1), float(m.group(2))) for m in pat.finditer(text)]


def test_cluster_refuses_clients_without_the_token():
    with LocalHead(num_cpus=1) as head:
        assert head.http_status("/api/jobs/", None) == 401
        assert head.http_status("/api/jobs/", "0" * 64) == 403
        assert head.http_status("/api/jobs/", head.token) == 200
        p = head.job("submit", "--", "python", "-c", "print(1)", with_token=False, check=False)
        assert p.returncode != 0 and "token" in (p.stdout + p.stderr).lower()
        assert head.job("list").returncode == 0  # with the token: allowed


def _token_leaks(pkg: Path, token: str) -> list[str]:
    """Files of an unpacked job package that are a token file or hold the token."""
    bad = []
    for f in pkg.rglob("*"):
        if f.is_file() and (f.name in (".ray_token", "auth_token") or
                            (f.stat().st_size < 1_000_000 and token.encode() in f.read_bytes())):
            bad.append(str(f.relative_to(pkg)))
    return bad


@pytest.mark.timeout(1500)
def test_submitted_router_r1_job_trains_and_exports_metrics(tmp_path, shared_data):
    storage = tmp_path / "shared"  # a shared path every node reaches (docs/operations.md "Where a job writes")
    out = storage / "submitted"  # <storage>/<run_name>; the gauges are tagged run=<its name>
    t0 = time.perf_counter()
    head = LocalHead(num_cpus=6)
    scraped: dict[str, list[tuple[str, float]]] = {}
    packages: dict[Path, list[str]] = {}
    decoy = ROOT / ".ray_token"  # where the old docs put the token: it must not travel with the job
    assert not decoy.exists(), f"{decoy} exists: this test would remove it"
    try:
        head.start()
        decoy.write_text(head.token)
        submit = head.job(
            "submit", "--no-wait", "--working-dir", ".", "--runtime-env-json",
            # the working-dir copy does not sit beside ../shared: name the logged outcomes explicitly
            runtime_env({"RLROUTER_ROUTELLM": str(shared_data / "routellm")}), "--",
            "python", "jobs/train_router_r1.py", "debug=cpu", "run_name=submitted", f"storage={storage}",
            f"paths.shared_data={shared_data}", "eval.num_questions=2", "train.progress=true")
        job_id = parse_job_id(submit.stdout + submit.stderr)
        status, deadline = "PENDING", time.monotonic() + 1200
        while time.monotonic() < deadline:
            status = head.job_status(job_id)
            text = head.scrape()
            for name in TRAINER_METRICS:
                scraped.setdefault(name, []).extend(samples(text, name))
            for m in SHARE.finditer(text):
                scraped.setdefault(m.group(1), []).append(("", float(m.group(2))))
            for pkg in head.packages():  # checked while the job runs: Ray may delete a finished job's package
                if pkg not in packages and (pkg / "jobs" / "train_router_r1.py").exists():
                    packages[pkg] = _token_leaks(pkg, head.token)
            if status in ("SUCCEEDED", "FAILED", "STOPPED"):
                break
            time.sleep(3)
        logs = head.job_logs(job_id)
        wall = time.perf_counter() - t0
        print(f"head start {head.start_s:.1f}s, submit-to-finish + scrape {wall:.1f}s")
        assert status == "SUCCEEDED", f"job {job_id} ended {status}:\n{logs[-6000:]}"
    finally:
        decoy.unlink(missing_ok=True)
        head.stop()
        shutil.rmtree(head.dir, ignore_errors=True)

    # the token file beside the code did not travel with the job
    assert packages and all(not leaks for leaks in packages.values()), packages
    # the job said where it writes, and wrote there (not in its package folder)
    assert f"storage: reports, checkpoints and plots go to {out} (storage)" in logs, logs[:3000]
    assert f"report: {out / 'report.json'}" in logs and (out / "report.json").exists()
    assert list(out.glob("*.png"))

    # the logs show the run start to finish, with training progress
    assert "ray: submitted cluster" in logs  # the job joined the head it was submitted to
    assert "untrained policy:" in logs and "trained policy:" in logs and "report:" in logs
    # progress: a tqdm bar on a terminal, one line per step otherwise (a submitted job's log is not a terminal)
    assert re.search(r"router-r1: (100%.*2/2|step 2/2)", logs), logs[-4000:]
    steps = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    assert [s["step"] for s in steps] == [0, 1, 2]  # step 0: the held-out level after the cold start
    assert (out / "checkpoints" / "step_000002" / "trainable.safetensors").exists()

    # the trainer's gauges reached the head's metrics endpoint, tagged with the run, with logged values
    for name in TRAINER_METRICS:
        seen = scraped.get(name, [])
        assert seen, f"{name} never appeared on {head.metrics_url}"
        assert any('run="submitted"' in labels for labels, _ in seen), seen[:3]
        key = {"rlrouter_reward_total": "reward/total", "rlrouter_learner_kl": "learner/kl",
               "rlrouter_rollout_tokens_per_s": "rollout/tokens_per_s", "rlrouter_learner_loss": "learner/loss",
               "rlrouter_rollout_format_valid": "rollout/format_valid"}[name]
        logged = [s[key] for s in steps if key in s]  # step 0 holds only the held-out eval/* metrics
        assert all(any(v == pytest.approx(x, rel=1e-5, abs=1e-6) for x in logged) for _, v in seen), (name, seen, logged)
    shares = [n for n in scraped if n.startswith("rlrouter_rollout_share_")]
    assert len(shares) == 2, shares  # one per candidate of the replay pool
