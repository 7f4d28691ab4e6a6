"""A local multi-node Ray cluster for the cluster-path tests: a head like cluster.yaml's (``--num-cpus=0``:
the driver, GCS and dashboard only) and worker nodes started with ``ray start --address``, each with its
own resources (fake ``GPU`` counts where nothing touches CUDA), its own ports, its own working directory,
HOME and Ray temp dir, so "another node's disk" is a different folder. Token auth is on (Ray 2.60's default mode for
``ray start``), the token in the head's private temp dir. Every node runs ``--block`` in its own process
session and is stopped by killing that session: never ``ray stop``, which would stop every Ray here.
"""

from __future__ import annotations

import subprocess
import time
from pathlib import Path
from typing import Any

from tests.ops.headnode import RAY, ROOT, LocalHead, _free_range, free_ports, kill_tree


class WorkerNode:
    def __init__(self, head: LocalHead, name: str, num_cpus: int, num_gpus: int = 0):
        self.head, self.name, self.num_cpus, self.num_gpus = head, name, num_cpus, num_gpus
        self.dir = head.dir / name  # this node's "disk": its working directory and HOME
        self.dir.mkdir()
        self.log = self.dir / "ray_start.log"
        self.proc: subprocess.Popen | None = None

    def start(self) -> "WorkerNode":
        nm, om, metrics, listen, grpc, renv = free_ports(6)
        lo, hi = _free_range(60)
        # its own temp dir: on one machine the nodes would otherwise share the head's runtime_resources
        # folder, and one node's runtime-env agent deletes a job package another node still runs in
        cmd = [RAY, "start", "--block", f"--address=127.0.0.1:{self.head.gcs_port}", "--node-ip-address=127.0.0.1",
               f"--temp-dir={self.dir / 'ray'}",
               f"--num-cpus={self.num_cpus}", f"--num-gpus={self.num_gpus}", f"--resources={{\"node:{self.name}\": 1}}",
               f"--node-manager-port={nm}", f"--object-manager-port={om}", f"--metrics-export-port={metrics}",
               f"--dashboard-agent-listen-port={listen}", f"--dashboard-agent-grpc-port={grpc}",
               f"--runtime-env-agent-port={renv}", f"--min-worker-port={lo}", f"--max-worker-port={hi}",
               "--disable-usage-stats", "--object-store-memory=200000000"]
        env = {**self.head.env(), "HOME": str(self.dir)}
        self.proc = subprocess.Popen(cmd, env=env, cwd=str(self.dir), stdout=self.log.open("w"),
                                     stderr=subprocess.STDOUT, start_new_session=True)
        return self

    def stop(self) -> None:
        if self.proc is not None:
            kill_tree(self.proc.pid)
            self.proc = None


class LocalCluster:
    """``with LocalCluster({"a": (2, 2), "b": (2, 2)}) as c:`` -> a head and worker nodes a, b with
    (CPUs, fake GPUs) each."""

    def __init__(self, workers: dict[str, tuple[int, int]]):
        self.head = LocalHead(num_cpus=0)
        self.workers: dict[str, WorkerNode] = {}
        self.spec = workers

    def add(self, name: str, num_cpus: int, num_gpus: int = 0, tries: int = 3) -> WorkerNode:
        """Start worker node ``name`` and wait until it is alive. Ray gives a raylet 30 s to register with
        the GCS; on a loaded machine that can pass, and ``ray start`` exits: then it is started again."""
        node = WorkerNode(self.head, name, num_cpus, num_gpus)
        self.workers[name] = node
        for attempt in range(tries):
            node.start()
            deadline = time.monotonic() + 180
            while time.monotonic() < deadline and node.proc.poll() is None:
                try:
                    if any(n.get("raylet", {}).get("nodeManagerAddress") and
                           f"node:{name}" in n.get("raylet", {}).get("resourcesTotal", {})
                           for n in self.alive_nodes()):
                        return node
                except Exception:  # noqa: BLE001 - a slow dashboard: ask again
                    pass
                time.sleep(2.0)
            node.stop()
        raise TimeoutError(f"worker node {name} did not come up in {tries} tries:\n{node.log.read_text()[-3000:]}")

    def alive_nodes(self) -> list[dict[str, Any]]:
        return [n for n in self.head.api("/nodes?view=summary").get("data", {}).get("summary", [])
                if n.get("raylet", {}).get("state") == "ALIVE"]

    def wait_nodes(self, n: int, timeout_s: float = 180.0) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            try:
                if len(self.alive_nodes()) >= n:
                    return
            except Exception:  # noqa: BLE001 - the dashboard may still be coming up
                pass
            time.sleep(2.0)
        logs = "\n".join(f"{w.name}: {w.log.read_text()[-1500:]}" for w in self.workers.values())
        raise TimeoutError(f"{n} nodes did not come up in {timeout_s:.0f}s:\n{logs}")

    def env(self, **extra: str) -> dict[str, str]:
        """A driver's environment on the head: token auth, and RAY_ADDRESS to the GCS."""
        return {**self.head.env(), "RAY_ADDRESS": f"127.0.0.1:{self.head.gcs_port}", **extra}

    def python(self, code: str, env: dict[str, str] | None = None, timeout: float = 300) -> subprocess.CompletedProcess:
        """Run ``code`` as a driver on the head (the project as working dir)."""
        import sys

        return subprocess.run([sys.executable, "-c", code], env=env or self.env(), cwd=str(ROOT),
                              capture_output=True, text=True, timeout=timeout)

    def start(self) -> "LocalCluster":
        self.head.start()
        for name, (cpus, gpus) in self.spec.items():  # one at a time: each raylet has 30 s to register
            self.add(name, cpus, gpus)
        return self

    def stop(self) -> None:
        for w in self.workers.values():
            w.stop()
        self.head.stop()

    def __enter__(self) -> "LocalCluster":
        try:
            return self.start()
        except BaseException:
            self.stop()
            raise

    def __exit__(self, *exc: Any) -> None:
        self.stop()
