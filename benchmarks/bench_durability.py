"""Selector durability: kill -9 of the Serve process that holds the selector's state during concurrent
/feedback traffic, then a restart, N times; every feedback that got a 200 must be in the posteriors.

Each cycle: clients route and give explicit feedback from several threads; after a random moment the
server side gets SIGKILL, mid-traffic; it comes back on the same state file; then the posteriors are
read from ``/stats`` and checked against the client's ledger:

    acknowledged(m) <= explicit feedback in the posteriors(m) <= acknowledged(m) + unanswered(m)

for every candidate m ("unanswered": the connection died before a reply, so the update may or may not
have landed). A lower bound broken is a lost acknowledged feedback. The Beta parameters are checked
too: alpha - 1 and beta - 1 must lie within the same bounds of wins and losses.

What gets killed (``--kill``):

* ``serve`` (default): every Serve process of a private token-auth Ray head (``tests/ops/headnode.py``):
  the Serve controller, the HTTP proxy and both replicas of the app (the selector replica holds the
  posteriors and the write-ahead log). Ray restarts the controller, which restarts the proxy and the
  replicas; the new selector replica loads the snapshot and replays the log. The Ray head (GCS,
  raylet) survives, so a cycle costs a Serve recovery, not a cluster start.
* ``replica``: only the app's replica processes; the Serve controller restarts them.
* ``stack``: the whole server: a child process running its own Ray cluster + Serve + the app, its
  whole process session (driver, GCS, raylet, every actor) killed and started again. The strongest
  and slowest (a Ray start and a deploy per cycle, 25-45 s on 2 shared cores).

    .venv/bin/python benchmarks/bench_durability.py --cycles 20 [--kill serve|replica|stack]
    # -> benchmarks/results/durability.json
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from tests.ops.headnode import LocalHead, free_ports, kill_tree  # noqa: E402 - needs ROOT on the path

from rlrouter.provenance import write_result  # noqa: E402

# what this benchmark's figures depend on (rlrouter.provenance: the staleness report lists its results when these change)
MEASURES = ("benchmarks/bench_durability.py", "serve", "rlrouter/serving", "rlrouter/selector",
            "rlrouter/storage.py")

RESULTS = ROOT / "benchmarks" / "results"
USERS = {"k-alice": "alice", "k-bob": "bob"}
ADMIN = "k-ops"


# --- the server child ---------------------------------------------------------------------------------
def serve_child(port: int, state: str, temp_dir: str | None) -> None:
    """Ray + Serve + the rlrouter app. With ``temp_dir``: a Ray cluster of its own in this process, and
    it blocks until killed (``--kill stack``). Without: deploy onto the cluster at ``RAY_ADDRESS`` and
    return (Serve apps outlive the driver that deployed them)."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import importlib

    import ray
    from ray import serve

    from rlrouter.pool import read_pool_config

    own = {"num_cpus": 2, "include_dashboard": False, "_temp_dir": temp_dir} if temp_dir else {}
    ray.init(log_to_driver=False, **own,
             runtime_env={"env_vars": {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
                                       "PYTHONPATH": str(ROOT)}})
    serve.start(http_options={"host": "127.0.0.1", "port": port})
    app_mod = importlib.import_module("serve.app")
    keys = [{"key": k, "user_id": u} for k, u in USERS.items()] + [{"key": ADMIN, "user_id": "ops", "admin": True}]
    args = {"pool": read_pool_config(ROOT / "conf" / "pool" / "routellm_replay.yaml"),
            "selector": {"storage_path": state, "auto_save_interval": "2s", "seed": 0},
            "serving": {"api_keys": keys, "dev": True}}
    serve.run(app_mod.build_app(args), name="rlrouter", route_prefix="/", blocking=False)
    print("SERVING", flush=True)
    while temp_dir:
        time.sleep(3600)


def wait_healthy(base: str, timeout_s: float, alive: Any = None, log: Path | None = None) -> None:
    """Until ``/health`` says the selector answers; ``alive()`` False (the server died) raises."""
    import httpx

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if alive is not None and not alive():
            raise RuntimeError(f"the server died:\n{log.read_text()[-4000:] if log else ''}")
        try:
            r = httpx.get(f"{base}/health", timeout=5)
            if r.status_code == 200 and r.json().get("selector") == "ok":
                return
        except (httpx.HTTPError, ValueError):
            pass
        time.sleep(0.25)
    raise TimeoutError(f"server not healthy in {timeout_s:.0f}s:\n{log.read_text()[-4000:] if log else ''}")


def wait_port_closed(port: int, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:  # the next start must not meet the old listener
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) != 0:
                return
        time.sleep(0.2)


# Process titles of the Serve side of a cluster (Ray names an actor's process ``ray::<Class>...``; a
# Serve replica ``ray::ServeReplica:<app>:<deployment>``)
SERVE_TITLES = {"replica": r"^ray::ServeReplica:rlrouter:",
                "serve": r"^ray::(ServeReplica:rlrouter:|ServeController|ProxyActor)"}


class ServeOnHead:
    """The app on a private token-auth Ray head that lives through every cycle; a kill takes only the
    Serve processes (``pattern``), which Ray and Serve bring back by themselves."""

    def __init__(self, state: Path, kill: str = "serve"):
        self.state = state
        self.pattern = re.compile(SERVE_TITLES[kill])
        self.head = LocalHead(num_cpus=2)
        self.port = self.head.serve_port
        self.base = f"http://127.0.0.1:{self.port}"
        self.temp_dir = str(self.head.dir)
        self.log = self.head.dir / "deploy.log"
        self.killed: list[str] = []
        self._deployed = False

    def start(self, timeout_s: float = 300.0) -> float:
        """First call: start the head and deploy; later calls: wait for Serve's own recovery."""
        t0 = time.perf_counter()
        if not self._deployed:
            self.head.start()
            env = {**self.head.env(), "RAY_ADDRESS": f"127.0.0.1:{self.head.gcs_port}"}
            with self.log.open("a") as out:
                subprocess.run([sys.executable, str(Path(__file__).resolve()), "serve", "--port", str(self.port),
                                "--state", str(self.state)], cwd=str(ROOT), env=env, stdout=out,
                               stderr=subprocess.STDOUT, check=True, timeout=timeout_s)
            self._deployed = True
        wait_healthy(self.base, timeout_s, lambda: self.head.proc is not None and self.head.proc.poll() is None,
                     self.head.log)
        return time.perf_counter() - t0

    def serve_processes(self) -> list[Any]:
        """This head's processes whose title matches the pattern (never another cluster's: only the
        head's own session is searched)."""
        import psutil

        assert self.head.proc is not None
        out = []
        for p in psutil.process_iter():
            try:
                if os.getsid(p.pid) == self.head.proc.pid and self.pattern.search(" ".join(p.cmdline())):
                    out.append(p)
            except (ProcessLookupError, PermissionError, psutil.NoSuchProcess, psutil.AccessDenied):
                continue
        return out

    def kill9(self) -> None:
        import psutil

        victims = self.serve_processes()
        if not any("SelectorDeployment" in " ".join(p.cmdline()) for p in victims):
            raise RuntimeError(f"no selector replica among {[' '.join(p.cmdline()) for p in victims]}")
        self.killed = [" ".join(p.cmdline())[:60] for p in victims]
        for p in victims:
            os.kill(p.pid, signal.SIGKILL)
        psutil.wait_procs(victims, timeout=30)
        if any("ProxyActor" in t for t in self.killed):
            wait_port_closed(self.port)

    def selector_counters(self) -> dict[str, dict[str, float]]:
        """The selector's counters on the head's metrics endpoint (docs/metrics.md): name -> series
        (its labels but ``model``/``kind``/``mode``, i.e. one series per reporting process) -> sum."""
        out: dict[str, dict[str, float]] = {}
        for line in self.head.scrape().splitlines():
            m = re.match(r"^(ray_rlrouter_selector_\w+_total)\{(.*)\} ([0-9.eE+-]+)$", line)
            if not m:
                continue
            labels = ",".join(sorted(kv for kv in re.findall(r'\w+="[^"]*"', m.group(2))
                                     if kv.split("=")[0] not in ("model", "kind", "mode")))
            series = out.setdefault(m.group(1), {})
            series[labels] = series.get(labels, 0.0) + float(m.group(3))
        return out

    def stop(self) -> None:
        self.head.stop()
        self.head.cleanup()


class StackServer:
    """``--kill stack``: a child process with its own Ray cluster, Serve and the app; a kill takes its
    whole process session and a start runs it again."""

    def __init__(self, state: Path, port: int | None = None):
        self.state = state
        self.port = port or free_ports(1)[0]
        self.base = f"http://127.0.0.1:{self.port}"
        self.proc: subprocess.Popen | None = None
        self.temp_dir = tempfile.mkdtemp(prefix="rlr-dur-", dir="/tmp")
        self.log = Path(self.temp_dir) / "server.log"

    def start(self, timeout_s: float = 300.0) -> float:
        t0 = time.perf_counter()
        env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "RAY_USAGE_STATS_ENABLED": "0"}
        env.pop("RAY_ADDRESS", None)
        self.proc = subprocess.Popen(
            [sys.executable, str(Path(__file__).resolve()), "serve", "--port", str(self.port),
             "--state", str(self.state), "--temp-dir", self.temp_dir],
            cwd=str(ROOT), env=env, stdout=self.log.open("a"), stderr=subprocess.STDOUT, start_new_session=True)
        wait_healthy(self.base, timeout_s, lambda: self.proc is not None and self.proc.poll() is None, self.log)
        return time.perf_counter() - t0

    def kill9(self) -> None:
        """SIGKILL the server's whole session: driver, GCS, raylet, Serve, the selector replica (Ray puts
        each worker in its own process group, so a group kill would leave them answering)."""
        if self.proc is None:
            return
        kill_tree(self.proc.pid)
        self.proc.wait(timeout=60)
        self.proc = None
        wait_port_closed(self.port)

    def stop(self) -> None:
        self.kill9()
        import shutil

        shutil.rmtree(self.temp_dir, ignore_errors=True)


# --- the client ledger --------------------------------------------------------------------------------
@dataclass
class Ledger:
    acked: Counter = field(default_factory=Counter)        # (model, outcome) -> feedback answered 200
    unknown: Counter = field(default_factory=Counter)      # (model, outcome) -> no reply (connection died)
    refused: Counter = field(default_factory=Counter)      # status -> count (404 after a restart, 5xx, ...)
    routes: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)


def traffic(base: str, ledger: Ledger, stop: threading.Event, seed: int) -> None:
    import httpx

    rng = random.Random(seed)
    key = rng.choice(sorted(USERS))
    with httpx.Client(base_url=base, headers={"Authorization": f"Bearer {key}"}, timeout=10) as c:
        while not stop.is_set():
            try:
                r = c.post("/route", json={"query": f"q{rng.randrange(10**6)}: what is {rng.randrange(99)}+1?"})
            except httpx.HTTPError:
                time.sleep(0.1)
                continue
            if r.status_code != 200:
                with ledger.lock:
                    ledger.refused[f"route {r.status_code}"] += 1
                time.sleep(0.1)
                continue
            d = r.json()
            with ledger.lock:
                ledger.routes += 1
            outcome = rng.choice(["win", "loss", "tie"])
            k = (d["model"], outcome)
            try:
                f = c.post("/feedback", json={"request_id": d["request_id"], "outcome": outcome})
            except httpx.HTTPError:
                with ledger.lock:
                    ledger.unknown[k] += 1
                continue
            with ledger.lock:
                if f.status_code == 200 and f.json().get("durable") is True:
                    ledger.acked[k] += 1
                else:
                    ledger.refused[f"feedback {f.status_code}"] += 1


def check(stats: dict[str, Any], ledger: Ledger, prior: dict[str, dict[str, float]]) -> dict[str, Any]:
    """Compare the global posteriors with the ledger; returns lost / duplicated counts per model."""
    out: dict[str, Any] = {"models": {}, "lost": 0, "over": 0}
    for m, p in stats["global"].items():
        acked = {o: ledger.acked[(m, o)] for o in ("win", "loss", "tie")}
        unk = {o: ledger.unknown[(m, o)] for o in ("win", "loss", "tie")}
        explicit = p["explicit"] - prior[m]["explicit"]
        d_alpha = p["alpha"] - prior[m]["alpha"]
        d_beta = p["beta"] - prior[m]["beta"]
        lo_n, hi_n = sum(acked.values()), sum(acked.values()) + sum(unk.values())
        lo_a, hi_a = acked["win"] + 0.5 * acked["tie"], acked["win"] + 0.5 * acked["tie"] + unk["win"] + 0.5 * unk["tie"]
        lo_b, hi_b = acked["loss"] + 0.5 * acked["tie"], acked["loss"] + 0.5 * acked["tie"] + unk["loss"] + 0.5 * unk["tie"]
        eps = 1e-6
        lost = max(0.0, lo_n - explicit)
        lost_ab = (d_alpha < lo_a - eps) or (d_beta < lo_b - eps)
        over = max(0.0, explicit - hi_n) + (1 if (d_alpha > hi_a + eps or d_beta > hi_b + eps) else 0)
        out["models"][m] = {"acked": lo_n, "unanswered": hi_n - lo_n, "in_posterior": explicit,
                            "d_alpha": d_alpha, "d_beta": d_beta, "alpha_bounds": [lo_a, hi_a],
                            "beta_bounds": [lo_b, hi_b], "lost": lost, "alpha_beta_lost": lost_ab}
        out["lost"] += int(lost) + (1 if lost_ab and not lost else 0)
        out["over"] += int(over)
    return out


def admin_stats(base: str) -> dict[str, Any]:
    import httpx

    r = httpx.get(f"{base}/stats", headers={"Authorization": f"Bearer {ADMIN}"}, timeout=30)
    r.raise_for_status()
    return r.json()


def metrics_phase(server: ServeOnHead, clients: int, seconds: float, seed: int,
                  timeout_s: float = 90.0) -> dict[str, Any]:
    """Traffic without a kill, then the selector's counters on the metrics endpoint: the replica that
    came back after the last kill must have counted exactly the feedback acknowledged since."""
    ledger, stop = Ledger(), threading.Event()
    threads = [threading.Thread(target=traffic, args=(server.base, ledger, stop, seed + j), daemon=True)
               for j in range(clients)]
    for t in threads:
        t.start()
    time.sleep(seconds)
    stop.set()
    for t in threads:
        t.join(timeout=30)
    acked = sum(ledger.acked.values())
    deadline, counters = time.monotonic() + timeout_s, {}
    while time.monotonic() < deadline:  # Ray exports metrics every few seconds
        counters = server.selector_counters()
        if acked in counters.get("ray_rlrouter_selector_feedback_total", {}).values():
            break
        time.sleep(2.0)
    feedback = counters.get("ray_rlrouter_selector_feedback_total", {})
    return {"routes": ledger.routes, "acked": acked, "counters": counters,
            "feedback_counter_matches_acked": acked in feedback.values()}


def run(cycles: int, clients: int = 6, min_traffic_s: float = 1.0, max_traffic_s: float = 4.0,
        state_dir: Path | None = None, seed: int = 0, kill: str = "serve") -> dict[str, Any]:
    if kill not in ("stack", *SERVE_TITLES):
        raise ValueError(f"kill: one of stack, {', '.join(SERVE_TITLES)}; got {kill!r}")
    rng = random.Random(seed)
    own_dir = state_dir is None
    state_dir = state_dir or Path(tempfile.mkdtemp(prefix="rlr-dur-state-"))
    state = state_dir / "state.json"
    server: StackServer | ServeOnHead = StackServer(state) if kill == "stack" else ServeOnHead(state, kill)
    ledger = Ledger()
    per_cycle: list[dict[str, Any]] = []
    try:
        first_start = server.start()
        prior = {m: {"explicit": p["explicit"], "alpha": p["alpha"], "beta": p["beta"]}
                 for m, p in admin_stats(server.base)["global"].items()}
        for i in range(cycles):
            stop = threading.Event()
            threads = [threading.Thread(target=traffic, args=(server.base, ledger, stop, seed * 1000 + i * 97 + j),
                                        daemon=True) for j in range(clients)]
            acked_before = sum(ledger.acked.values())
            for t in threads:
                t.start()
            time.sleep(rng.uniform(min_traffic_s, max_traffic_s))
            t_kill = time.perf_counter()
            server.kill9()                      # mid-traffic: requests in flight die with the server
            stop.set()
            for t in threads:
                t.join(timeout=30)
            restart_s = server.start()
            stats = admin_stats(server.base)
            c = check(stats, ledger, prior)
            per_cycle.append({"cycle": i + 1, "acked_this_cycle": sum(ledger.acked.values()) - acked_before,
                              "acked_total": sum(ledger.acked.values()),
                              "unanswered_total": sum(ledger.unknown.values()),
                              "lost": c["lost"], "over": c["over"], "restart_s": round(restart_s, 1),
                              "kill_to_healthy_s": round(time.perf_counter() - t_kill, 1),
                              "killed": getattr(server, "killed", ["the whole server session"])})
            print(f"cycle {i + 1}/{cycles}: acked {per_cycle[-1]['acked_total']} "
                  f"(+{per_cycle[-1]['acked_this_cycle']}), unanswered {per_cycle[-1]['unanswered_total']}, "
                  f"lost {c['lost']}, restart {restart_s:.1f}s", flush=True)
        final = check(admin_stats(server.base), ledger, prior)
        metrics = metrics_phase(server, clients, 3.0, seed + 777) if isinstance(server, ServeOnHead) else None
    finally:
        server.stop()
        import shutil

        if own_dir:
            shutil.rmtree(state_dir, ignore_errors=True)
    return {"cycles": cycles, "kill": kill, "clients": clients, "acknowledged": sum(ledger.acked.values()),
            "unanswered": sum(ledger.unknown.values()), "routes": ledger.routes,
            "refused": dict(ledger.refused), "lost": final["lost"], "over_counted": final["over"],
            "first_start_s": round(first_start, 1), "per_cycle": per_cycle, "final_check": final,
            "metrics_endpoint": metrics}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd")
    s = sub.add_parser("serve")
    s.add_argument("--port", type=int, required=True)
    s.add_argument("--state", required=True)
    s.add_argument("--temp-dir", help="run a Ray cluster of its own there (--kill stack)")
    ap.add_argument("--cycles", type=int, default=20)
    ap.add_argument("--clients", type=int, default=6)
    ap.add_argument("--kill", default="serve", choices=["serve", "replica", "stack"],
                    help="what dies each cycle (module docstring)")
    ap.add_argument("--out", default=str(RESULTS / "durability.json"))
    args = ap.parse_args()
    if args.cmd == "serve":
        serve_child(args.port, args.state, args.temp_dir)
        return
    t0 = time.perf_counter()
    res = run(args.cycles, args.clients, kill=args.kill)
    res["wall_s"] = round(time.perf_counter() - t0, 1)
    RESULTS.mkdir(parents=True, exist_ok=True)
    write_result(Path(args.out), res, MEASURES, indent=2)
    print(json.dumps({k: res[k] for k in ("cycles", "kill", "acknowledged", "unanswered", "lost", "over_counted",
                                          "wall_s")}, indent=2))


if __name__ == "__main__":
    main()
