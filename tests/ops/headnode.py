"""A private local Ray head with token auth on, for the operations tests.

``ray start --head --block`` runs in its own session with its own temp dir, token file and free ports,
so it never meets the test session's ``ray.init`` cluster nor any other cluster on the machine. It is
stopped by killing that session only: ``ray stop`` would stop every Ray on the host.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
RAY = str(Path(sys.executable).with_name("ray"))
SERVE = str(Path(sys.executable).with_name("serve"))


def kill_tree(root_pid: int) -> int:
    """SIGKILL every process of the session ``root_pid`` leads (Ray puts each worker in its own process
    group, but they stay in the session) and every descendant of it (a job driver may start a new
    session). Only processes this test started: the session was created by ``start_new_session``."""
    import psutil

    victims: dict[int, psutil.Process] = {}
    try:
        for c in psutil.Process(root_pid).children(recursive=True):
            victims[c.pid] = c
        victims[root_pid] = psutil.Process(root_pid)
    except psutil.NoSuchProcess:
        pass
    for p in psutil.process_iter():
        try:
            if os.getsid(p.pid) == root_pid:
                victims[p.pid] = p
                for c in p.children(recursive=True):
                    victims[c.pid] = c
        except (ProcessLookupError, PermissionError, psutil.NoSuchProcess):
            continue
    for p in victims.values():
        try:
            p.kill()
        except psutil.NoSuchProcess:
            pass
    psutil.wait_procs(list(victims.values()), timeout=30)
    return len(victims)


def free_ports(n: int) -> list[int]:
    socks, ports = [], []
    for _ in range(n):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        socks.append(s)
        ports.append(s.getsockname()[1])
    for s in socks:
        s.close()
    return ports


def _free_range(width: int) -> tuple[int, int]:
    """A run of ``width`` ports that are free right now, for Ray's worker ports."""
    rng = secrets.SystemRandom()
    for _ in range(200):
        lo = rng.randrange(20000, 30000 - width)
        ok = True
        for p in range(lo, lo + width, 7):  # sampled: a full scan costs more than the rare clash
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", p)) == 0:
                    ok = False
                    break
        if ok:
            return lo, lo + width - 1
    raise RuntimeError("no free worker-port range in 20000-30000")


class LocalHead:
    """``with LocalHead(num_cpus=4) as head: head.run([...ray job submit...])``."""

    def __init__(self, num_cpus: int = 4, token_auth: bool = True, extra_env: dict[str, str] | None = None):
        self.num_cpus = num_cpus
        self.token_auth = token_auth
        # short: Ray's unix socket paths live under it and are capped at ~107 characters
        self.dir = Path(tempfile.mkdtemp(prefix="rlr-ops-", dir="/tmp"))
        self.token = secrets.token_hex(32)
        self.token_path = self.dir / "auth_token"
        self.token_path.write_text(self.token)
        self.token_path.chmod(0o600)
        (self.gcs_port, self.dashboard_port, self.metrics_port, self.client_port, self.node_manager_port,
         self.object_manager_port, self.agent_listen_port, self.agent_grpc_port, self.runtime_env_port,
         self.serve_port) = free_ports(10)
        self.min_worker_port, self.max_worker_port = _free_range(120)
        self.extra_env = dict(extra_env or {})
        self.proc: subprocess.Popen | None = None
        self.log = self.dir / "ray_start.log"
        self.start_s = 0.0

    @property
    def dashboard(self) -> str:
        return f"http://127.0.0.1:{self.dashboard_port}"

    @property
    def metrics_url(self) -> str:
        return f"http://127.0.0.1:{self.metrics_port}/metrics"

    def env(self, with_token: bool = True) -> dict[str, str]:
        """Environment of a client of this head: token mode and the token file (or neither)."""
        env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
        env.update({"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false",
                    "RAY_USAGE_STATS_ENABLED": "0", "PYTHONUNBUFFERED": "1", **self.extra_env})
        env["PATH"] = f"{Path(sys.executable).parent}:{env.get('PATH', '')}"
        if self.token_auth:
            env["RAY_AUTH_MODE"] = "token"
            if with_token:
                env["RAY_AUTH_TOKEN_PATH"] = str(self.token_path)
            else:
                # an empty token file would abort the client; point at a wrong token instead
                wrong = self.dir / "wrong_token"
                wrong.write_text(secrets.token_hex(32))
                env["RAY_AUTH_TOKEN_PATH"] = str(wrong)
        else:
            env["RAY_AUTH_MODE"] = "disabled"
        return env

    def start(self, timeout_s: float = 180.0) -> "LocalHead":
        cmd = [RAY, "start", "--head", "--block", f"--temp-dir={self.dir / 'ray'}",
               f"--port={self.gcs_port}", f"--dashboard-port={self.dashboard_port}", "--dashboard-host=127.0.0.1",
               "--include-dashboard=true", f"--metrics-export-port={self.metrics_port}",
               f"--ray-client-server-port={self.client_port}", f"--node-manager-port={self.node_manager_port}",
               f"--object-manager-port={self.object_manager_port}",
               f"--dashboard-agent-listen-port={self.agent_listen_port}",
               f"--dashboard-agent-grpc-port={self.agent_grpc_port}",
               f"--runtime-env-agent-port={self.runtime_env_port}",
               f"--min-worker-port={self.min_worker_port}", f"--max-worker-port={self.max_worker_port}",
               f"--num-cpus={self.num_cpus}", "--num-gpus=0", "--disable-usage-stats",
               "--node-ip-address=127.0.0.1", "--object-store-memory=400000000"]
        t0 = time.perf_counter()
        self.proc = subprocess.Popen(cmd, env=self.env(), cwd=str(ROOT), stdout=self.log.open("w"),
                                     stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"ray start exited {self.proc.returncode}:\n{self.log.read_text()[-4000:]}")
            if self._dashboard_up():
                self.start_s = time.perf_counter() - t0
                return self
            time.sleep(1.0)
        self.stop()
        raise TimeoutError(f"the Ray head did not come up in {timeout_s:.0f}s:\n{self.log.read_text()[-4000:]}")

    def _dashboard_up(self) -> bool:
        req = urllib.request.Request(f"{self.dashboard}/api/version",
                                     headers={"Authorization": f"Bearer {self.token}"})
        try:
            with urllib.request.urlopen(req, timeout=5) as r:
                return r.status == 200
        except (urllib.error.URLError, OSError):
            return False

    def http_status(self, path: str, token: str | None) -> int:
        """Status of a GET on the dashboard with ``token`` (None: no Authorization header)."""
        headers = {"Authorization": f"Bearer {token}"} if token is not None else {}
        try:
            with urllib.request.urlopen(urllib.request.Request(f"{self.dashboard}{path}", headers=headers),
                                        timeout=10) as r:
                return r.status
        except urllib.error.HTTPError as e:
            return e.code

    def run(self, args: list[str], timeout: float = 600, with_token: bool = True,
            check: bool = True) -> subprocess.CompletedProcess:
        p = subprocess.run(args, env=self.env(with_token), cwd=str(ROOT), capture_output=True, text=True,
                           timeout=timeout)
        if check and p.returncode != 0:
            raise RuntimeError(f"{' '.join(args[:4])}... exited {p.returncode}:\n{p.stdout[-3000:]}\n{p.stderr[-3000:]}")
        return p

    def job(self, sub: str, *args: str, **kw: Any) -> subprocess.CompletedProcess:
        """``ray job SUB --address <this head> ARGS...`` (the address before any ``--`` entrypoint)."""
        return self.run([RAY, "job", sub, "--address", self.dashboard, *args], **kw)

    def api(self, path: str) -> Any:
        """GET a dashboard JSON API with the token."""
        req = urllib.request.Request(f"{self.dashboard}{path}", headers={"Authorization": f"Bearer {self.token}"})
        with urllib.request.urlopen(req, timeout=30) as r:
            return json.loads(r.read())

    def job_status(self, job_id: str) -> str:
        try:
            return str(self.api(f"/api/jobs/{job_id}")["status"])
        except (urllib.error.URLError, OSError, KeyError, ValueError):
            return "UNKNOWN"  # a slow dashboard under load: ask again

    def packages(self) -> list[Path]:
        """The job packages this head unpacked (``--working-dir`` uploads), under its temp dir."""
        return sorted((self.dir / "ray").glob("session_*/runtime_resources/working_dir_files/_ray_pkg_*"))

    def job_logs(self, job_id: str) -> str:
        return str(self.api(f"/api/jobs/{job_id}/logs").get("logs", ""))

    def scrape(self) -> str:
        try:
            with urllib.request.urlopen(self.metrics_url, timeout=10) as r:
                return r.read().decode("utf-8", "replace")
        except (urllib.error.URLError, OSError):
            return ""

    def stop(self, timeout_s: float = 45.0) -> None:
        """SIGTERM the ``ray start --block`` process (it stops the Ray processes it started), then SIGKILL
        whatever is left of its session (``kill_tree``)."""
        if self.proc is not None:
            pgid = self.proc.pid  # start_new_session: the group id is the pid
            if self.proc.poll() is None:
                self.proc.send_signal(signal.SIGTERM)
                try:
                    self.proc.wait(timeout=timeout_s)
                except subprocess.TimeoutExpired:
                    pass
            kill_tree(pgid)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                pass
        self.proc = None

    def cleanup(self) -> None:
        shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self) -> "LocalHead":
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()


def parse_job_id(submit_stdout: str) -> str:
    for line in submit_stdout.splitlines():
        if "submitted successfully" in line and "'" in line:
            return line.split("'")[1]
    for tok in submit_stdout.split():
        if tok.strip("'\"").startswith("raysubmit_"):
            return tok.strip("'\".,")
    raise ValueError(f"no job id in: {submit_stdout[-2000:]}")


def runtime_env(env_vars: dict[str, str] | None = None) -> str:
    """``--runtime-env-json`` of a submitted rlrouter job: jobs/runtime_env.yaml (the documented one, with
    its excludes) plus ``env_vars``. HF_HUB_OFFLINE and TOKENIZERS_PARALLELISM are left out:
    ``rlrouter.distributed.cluster.connect`` passes them to ``ray.init``, and Ray refuses a driver runtime
    env that repeats a key of the job's (the head's environment carries them here)."""
    import yaml

    env = yaml.safe_load((ROOT / "jobs" / "runtime_env.yaml").read_text())
    env["env_vars"] = {**env.get("env_vars", {}), **(env_vars or {})}
    return json.dumps(env)
