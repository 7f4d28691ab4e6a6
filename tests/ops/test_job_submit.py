"""The README's `ray job submit --working-dir .` line of the Router-R1 job, as printed, against a local
head with token auth on, and the trainer's metrics on the head's Prometheus endpoint; the token stays
out of the job's package, the job reads the logged outcomes beside the project and writes nothing into
its package.

One head, one job: the job is the slow part (a vLLM engine, data preparation, two GRPO steps), so the
metrics endpoint is scraped while it runs instead of in a second job.
"""

from __future__ import annotations

import re
import shlex
import shutil
import time
from pathlib import Path

import pytest

from rlrouter.data.io import read_jsonl
from tests.ops.headnode import ROOT, LocalHead, parse_job_id

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


def _files(pkg: Path) -> set[Path] | None:
    """The files of an unpacked job package, or None when Ray removed part of it during the walk (it
    deletes a finished job's package on its own schedule)."""
    try:
        return {f for f in pkg.rglob("*") if f.is_file()}
    except FileNotFoundError:
        return None


def _token_leaks(files: set[Path], pkg: Path, token: str) -> list[str]:
    """Files of an unpacked job package that are a token file or hold the token."""
    bad = []
    for f in files:
        if f.name in (".ray_token", "auth_token") or (f.stat().st_size < 1_000_000 and token.encode() in f.read_bytes()):
            bad.append(str(f.relative_to(pkg)))
    return bad


def readme_job_line() -> str:
    """The README's ``ray job submit`` line, as printed."""
    [line] = re.findall(r"`(ray job submit [^`]*)`", (ROOT / "README.md").read_text())
    return line


def _written(pkg: Path, now: set[Path], uploaded: set[Path]) -> list[str]:
    """Files a job wrote into its package folder (anything but bytecode not uploaded with it)."""
    return sorted(str(f.relative_to(pkg)) for f in now if f not in uploaded and "__pycache__" not in f.parts)


@pytest.mark.timeout(1500)
def test_readme_job_line_trains_and_exports_metrics(shared_data, monkeypatch, request):
    """The README's line, as printed, on a head started as docs/operations.md says (from the project's
    activated .venv: ``LocalHead`` puts the venv first on PATH). Nothing names the data: the job finds
    the project the head's Python installed rlrouter from, reads ../shared/data/routellm beside it (no
    download) and writes nothing into its package folder."""
    for k in ("RLROUTER_ROOT", "RLROUTER_ROUTELLM", "RLROUTER_STORAGE"):
        monkeypatch.delenv(k, raising=False)  # the head inherits the test's environment
    line = readme_job_line()
    assert line == "ray job submit --working-dir . -- python jobs/train_router_r1.py debug=cpu", line
    submit_args = shlex.split(line)[3:]
    t0 = time.perf_counter()
    head = LocalHead(num_cpus=6)
    scraped: dict[str, list[tuple[str, float]]] = {}
    uploaded: dict[Path, set[Path]] = {}
    leaks: dict[Path, list[str]] = {}
    written: dict[Path, list[str]] = {}
    decoy = ROOT / ".ray_token"  # where the old docs put the token: it must not travel with the job
    assert not decoy.exists(), f"{decoy} exists: this test would remove it"
    out = None
    try:
        head.start()
        decoy.write_text(head.token)
        submit = head.job("submit", "--no-wait", *submit_args)
        job_id = parse_job_id(submit.stdout + submit.stderr)
        status, deadline = "PENDING", time.monotonic() + 1200
        while time.monotonic() < deadline:
            status = head.job_status(job_id)
            text = head.scrape()
            for name in TRAINER_METRICS:
                scraped.setdefault(name, []).extend(samples(text, name))
            for m in SHARE.finditer(text):
                scraped.setdefault(m.group(1), []).append(("", float(m.group(2))))
            # checked while the job runs and once after: Ray unpacks a package in place, file by file, so
            # what was uploaded is read only once the job is RUNNING (unpacked before its driver starts);
            # Ray may delete a finished job's package, even under a walk
            for pkg in head.packages():
                if not (pkg / "jobs" / "train_router_r1.py").exists() or (now := _files(pkg)) is None:
                    continue
                if pkg not in uploaded:
                    if status != "RUNNING":
                        continue
                    try:
                        leaks[pkg] = _token_leaks(now, pkg, head.token)
                    except FileNotFoundError:  # deleted under the read: try again on the next poll
                        continue
                    uploaded[pkg] = now
                written[pkg] = _written(pkg, now, uploaded[pkg])
            if status in ("SUCCEEDED", "FAILED", "STOPPED"):
                break
            time.sleep(3)
        logs = head.job_logs(job_id)
        m = re.search(r"storage: reports, checkpoints and plots go to (\S+) \(submitted job", logs)
        out = Path(m.group(1)) if m else None
        if out is not None:  # the run's folders outside the package: ~/rlrouter_results/<run>, Hydra's
            request.addfinalizer(lambda: [shutil.rmtree(p, ignore_errors=True)
                                          for p in (out, ROOT / "outputs" / out.name)])
        wall = time.perf_counter() - t0
        print(f"head start {head.start_s:.1f}s, submit-to-finish + scrape {wall:.1f}s")
        assert status == "SUCCEEDED", f"job {job_id} ended {status}:\n{logs[-6000:]}"
    finally:
        decoy.unlink(missing_ok=True)
        head.stop()
        shutil.rmtree(head.dir, ignore_errors=True)

    # the token file beside the code did not travel with the job
    assert uploaded and all(not x for x in leaks.values()), leaks
    # the job read the logged outcomes beside the project, with no download, and resolved its paths there
    assert f"paths: project {ROOT} (" in logs, logs[:3000]
    assert f"logged outcomes {shared_data / 'routellm'}" in logs, logs[:3000]
    assert "download failed" not in logs and "githubusercontent" not in logs, logs[:3000]  # RouteLLM's URLs
    # it wrote nothing into its package folder; the run went to ~/rlrouter_results/<run_name>
    assert all(not w for w in written.values()), written
    assert out is not None and out.parent == Path("~/rlrouter_results").expanduser(), logs[:3000]
    assert f"report: {out / 'report.json'}" in logs and (out / "report.json").exists()
    # Hydra's own folder went with the run, not into the project (it once left outputs/<run>/hydra there)
    assert (out / "hydra" / ".hydra" / "config.yaml").exists() and not (ROOT / "outputs" / out.name).exists()
    assert list(out.glob("*.png"))
    assert re.search(rf"data: {re.escape(str(ROOT / 'outputs' / 'data'))}/\S+/train.parquet", logs), logs[:3000]

    # the logs show the run start to finish, with training progress
    assert "ray: submitted cluster" in logs  # the job joined the head it was submitted to
    assert "untrained policy:" in logs and "trained policy:" in logs and "report:" in logs
    # progress: a tqdm bar on a terminal, one line per step otherwise (a submitted job's log is not a terminal)
    assert re.search(r"router-r1: (100%.*2/2|step 2/2)", logs), logs[-4000:]
    steps = [row for _, row in read_jsonl(out / "metrics.jsonl")]
    assert [s["step"] for s in steps] == [0, 1, 2]  # step 0: the held-out level after the cold start
    assert (out / "checkpoints" / "step_000002" / "trainable.safetensors").exists()

    # the trainer's gauges reached the head's metrics endpoint, tagged with the run, with logged values
    for name in TRAINER_METRICS:
        seen = scraped.get(name, [])
        assert seen, f"{name} never appeared on {head.metrics_url}"
        assert any(f'run="{out.name}"' in labels for labels, _ in seen), seen[:3]
        key = {"rlrouter_reward_total": "reward/total", "rlrouter_learner_kl": "learner/kl",
               "rlrouter_rollout_tokens_per_s": "rollout/tokens_per_s", "rlrouter_learner_loss": "learner/loss",
               "rlrouter_rollout_format_valid": "rollout/format_valid"}[name]
        logged = [s[key] for s in steps if key in s]  # step 0 holds only the held-out eval/* metrics
        assert all(any(v == pytest.approx(x, rel=1e-5, abs=1e-6) for x in logged) for _, v in seen), (name, seen, logged)
    shares = [n for n in scraped if n.startswith("rlrouter_rollout_share_")]
    assert len(shares) == 2, shares  # one per candidate of the replay pool
