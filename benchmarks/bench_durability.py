"""Durability of everything the app acknowledges: kill -9 of the Serve processes (or of the whole stack) under
mixed traffic, then a restart, N times; every acknowledged request, feedback and release step must be there after.

The app runs with every stateful part on:

* the selector (snapshot + write-ahead log): its posteriors;
* the traffic log (``serving.traffic``): a record per routed request (``/route``, a served router's decision,
  chat completions, streamed chat), per feedback, per exploration reply (``explore_share``) and per judge grade
  (``judge``: an OpenAI-compatible grader over real HTTP, ``tests/pool/openai_server.py``, run by this driver so
  it survives the kills);
* a served router (kNN, trained here by jobs/train_router.py's code on RouteLLM rows) with a release in progress
  and its journal (``serving.release_journal``): versions loaded, canary decisions, the rewards each version
  collected, promotions and rollbacks.

Each cycle: an operator step first (load a new version and start its canary; every fourth cycle promote or roll
back the one running), acknowledged before the traffic starts; then clients route, chat and stream from several
threads and give explicit feedback on each answer; after a random moment the server side gets SIGKILL,
mid-traffic; it comes back on the same files; then the client's ledger is checked against what the app holds:

* traffic log: every acknowledged request has its request record, every acknowledged feedback its feedback
  record, with its outcome; no request has two feedback records; no record without its request;
* selector: acknowledged(m) <= explicit feedback in the posteriors(m) <= acknowledged(m) + unanswered(m) for
  every candidate m (unanswered: sent, but the connection died before a reply; an attempt refused at connect
  while the server was down is ``not_sent`` and must count nowhere), and the same bounds for alpha - 1 and
  beta - 1;
* release: the current version, the release in progress and the ended ones are as the acknowledged operator
  steps left them (never half-applied); each release's count per version lies between the feedback the router
  acknowledged in it and that plus the unanswered, and so does its reward sum.

A lower bound broken is a loss (``lost``), an upper one a double count (``double_counted``). Every response's
status is counted; ``5xx`` is their total at 500 and above.

What gets killed (``--kill``, comma-separated; both by default):

* ``serve``: every Serve process of a private token-auth Ray head (``tests/ops/headnode.py``): the Serve
  controller, the HTTP proxy, the selector replica (the ingress, holding the posteriors, the write-ahead log and
  the traffic log writer) and the served-routers replica (the release and its journal). Ray restarts the
  controller, which restarts the rest; the head (GCS, raylet) survives.
* ``replica``: only the app's replica processes; the Serve controller restarts them.
* ``stack``: the whole server: a child process running its own Ray cluster + Serve + the app, its whole
  process session (driver, GCS, raylet, every actor) killed and started again.

    .venv/bin/python benchmarks/bench_durability.py --cycles 20 [--kill serve,stack]
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
ROUTER = "knn"
RULE = {"canary_share": 0.5, "min_feedback": 100_000, "max_feedback": 100_000}  # no verdict but an operator's
PARTS = ("selector posteriors (snapshot + write-ahead log)",
         "traffic log: request records of /route, served-router decisions, chat and streamed chat",
         "traffic log: feedback records", "traffic log: exploration records (explore_share 0.3)",
         "traffic log: judge records (an OpenAI-compatible grader over HTTP)",
         "release journal: versions loaded, canary decisions, rewards per version, promotions and rollbacks")


def app_args(work: Path, judge_url: str, router_dir: Path) -> dict[str, Any]:
    """The app's ``args``: every stateful part on, all files under ``work``."""
    from rlrouter.pool import read_pool_config

    pool = read_pool_config(ROOT / "conf" / "pool" / "routellm_replay.yaml")
    pool["candidates"].append({"name": "judge", "price_in": 1.0, "price_out": 1.0, "backend": "openai",
                               "options": {"base_url": f"{judge_url}/v1", "model": "grader-1"}})
    keys = [{"key": k, "user_id": u} for k, u in USERS.items()] + [{"key": ADMIN, "user_id": "ops", "admin": True}]
    return {"pool": pool,
            "selector": {"storage_path": str(work / "state.json"), "auto_save_interval": "2s", "seed": 0},
            "routers": {ROUTER: {"path": str(router_dir)}},
            "serving": {"api_keys": keys, "dev": True, "release": RULE,
                        "release_journal": str(work / "releases.jsonl"),
                        "traffic": {"enabled": True, "path": str(work / "traffic"), "explore_share": 0.3,
                                    "judge": "judge", "judge_share": 1.0}}}


def serve_child(port: int, args_file: str, temp_dir: str | None) -> None:
    """Ray + Serve + the rlrouter app. With ``temp_dir``: a Ray cluster of its own in this process, and
    it blocks until killed (``--kill stack``). Without: deploy onto the cluster at ``RAY_ADDRESS`` and
    return (Serve apps outlive the driver that deployed them)."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import importlib

    import ray
    from ray import serve

    own = {"num_cpus": 2, "include_dashboard": False, "_temp_dir": temp_dir} if temp_dir else {}
    ray.init(log_to_driver=False, **own,
             runtime_env={"env_vars": {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
                                       "PYTHONPATH": str(ROOT)}})
    serve.start(http_options={"host": "127.0.0.1", "port": port})
    app_mod = importlib.import_module("serve.app")
    serve.run(app_mod.build_app(json.loads(Path(args_file).read_text())), name="rlrouter", route_prefix="/",
              blocking=False)
    print("SERVING", flush=True)
    while temp_dir:
        time.sleep(3600)


def train_router(out: Path) -> Path:
    """A kNN router on 200 RouteLLM rows (jobs/train_router.py's code); every version the bench loads is it."""
    from hydra import compose, initialize_config_dir

    from rlrouter.eval.train_router import run as train

    cwd = os.getcwd()
    os.chdir(ROOT)  # the config's data paths are relative to the project root
    try:
        with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
            train(compose(config_name="train_router", overrides=[
                "eval=smoke", "eval.max_prompts=200", "eval.split.by=question", "baseline=knn",
                f"output_dir={out}"]))
    finally:
        os.chdir(cwd)
    return out


def wait_healthy(base: str, timeout_s: float, alive: Any = None, log: Path | None = None) -> None:
    """Until ``/health`` says the selector answers and ``/v1/routers`` answers (the served-routers replica is
    up); ``alive()`` False (the server died) raises."""
    import httpx

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if alive is not None and not alive():
            raise RuntimeError(f"the server died:\n{log.read_text()[-4000:] if log else ''}")
        try:
            r = httpx.get(f"{base}/health", timeout=5)
            if r.status_code == 200 and r.json().get("selector") == "ok":
                s = httpx.get(f"{base}/v1/routers", headers={"Authorization": f"Bearer {ADMIN}"}, timeout=30)
                if s.status_code == 200:
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
STATEFUL = ("SelectorDeployment", "ServedRoutersDeployment")  # every kill must take these


class ServeOnHead:
    """The app on a private token-auth Ray head that lives through every cycle; a kill takes only the
    Serve processes (``pattern``), which Ray and Serve bring back by themselves."""

    def __init__(self, args_file: Path, kill: str = "serve"):
        self.args_file = args_file
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
                                "--args", str(self.args_file)], cwd=str(ROOT), env=env, stdout=out,
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
        for name in STATEFUL:
            if not any(name in " ".join(p.cmdline()) for p in victims):
                raise RuntimeError(f"no {name} replica among {[' '.join(p.cmdline()) for p in victims]}")
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

    def __init__(self, args_file: Path, port: int | None = None):
        self.args_file = args_file
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
             "--args", str(self.args_file), "--temp-dir", self.temp_dir],
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
KINDS = {"route": 3, "router": 3, "chat": 2, "stream": 2}  # the traffic mix (weights)
SCORE = {"win": 1.0, "tie": 0.5, "loss": 0.0}  # a feedback's reward in a release (cost_weight 0)


@dataclass
class Ledger:
    acked: Counter = field(default_factory=Counter)        # (model, outcome) -> feedback answered 200
    unknown: Counter = field(default_factory=Counter)      # (model, outcome) -> no reply (connection died)
    status: Counter = field(default_factory=Counter)       # "<endpoint> <status>" -> responses
    requests: dict[str, str] = field(default_factory=dict)  # request id -> kind, every acknowledged request
    feedback: dict[str, str] = field(default_factory=dict)  # request id -> outcome, every acknowledged feedback
    feedback_unknown: set[str] = field(default_factory=set)
    rel_acked: Counter = field(default_factory=Counter)     # (release, version) -> feedback the router counted
    rel_acked_sum: Counter = field(default_factory=Counter)  # (release, version) -> their reward sum
    rel_unknown: Counter = field(default_factory=Counter)   # (release, version) -> feedback it may have counted
    unanswered_requests: int = 0
    not_sent: int = 0  # attempts refused at connect while the server was down: they never reached it
    lock: threading.Lock = field(default_factory=threading.Lock)
    release: str | None = None  # the release in progress, as the acknowledged operator steps left it

    def count(self, endpoint: str, status: int | str) -> None:
        with self.lock:
            self.status[f"{endpoint} {status}"] += 1

    @property
    def server_errors(self) -> int:
        return sum(n for k, n in self.status.items() if k.split()[-1].isdigit() and int(k.split()[-1]) >= 500)


NOT_SENT = ("ConnectError", "ConnectTimeout")
"""httpx errors raised before a connection existed: the request never reached the server."""


def ask(c: Any, kind: str, prompt: str, ledger: Ledger) -> tuple[str, str, dict[str, Any]] | None:
    """One request of ``kind``: (request id, model, the answer's router info) once acknowledged, else None."""
    import httpx

    endpoint = "/route" if kind in ("route", "router") else "/v1/chat/completions"
    body: dict[str, Any] = ({"query": prompt} if endpoint == "/route" else
                            {"model": "auto", "messages": [{"role": "user", "content": prompt}]})
    if kind == "router":
        body["model"] = f"router-{ROUTER}"
    try:
        if kind == "stream":
            rid = model = None
            done = False
            with c.stream("POST", endpoint, json={**body, "stream": True}) as r:
                ledger.count(f"{kind}", r.status_code)
                if r.status_code != 200:
                    r.read()
                    return None
                for line in r.iter_lines():
                    if line == "data: [DONE]":
                        done = True
                    elif line.startswith("data: "):
                        chunk = json.loads(line[6:])
                        rid = rid or (chunk.get("x_rlrouter") or {}).get("request_id")
                        model = model or chunk.get("model")
            if not (done and rid and model):  # the stream broke before [DONE]: not acknowledged
                with ledger.lock:
                    ledger.unanswered_requests += 1
                return None
            return rid, model, {}
        r = c.post(endpoint, json=body)
    except (httpx.HTTPError, ValueError) as e:
        with ledger.lock:
            if type(e).__name__ in NOT_SENT:
                ledger.not_sent += 1
            else:
                ledger.unanswered_requests += 1
        return None
    ledger.count(kind, r.status_code)
    if r.status_code != 200:
        return None
    d = r.json()
    if endpoint == "/route":
        return d["request_id"], d["model"], d.get("router") or {}
    return d["x_rlrouter"]["request_id"], d["model"], {}


def traffic(base: str, prompts: list[str], ledger: Ledger, stop: threading.Event, seed: int) -> None:
    import httpx

    rng = random.Random(seed)
    key = rng.choice(sorted(USERS))
    kinds, weights = list(KINDS), list(KINDS.values())
    with httpx.Client(base_url=base, headers={"Authorization": f"Bearer {key}"}, timeout=30) as c:
        while not stop.is_set():
            kind = rng.choices(kinds, weights)[0]
            release = ledger.release  # no operator step runs during traffic: this decision's release
            got = ask(c, kind, rng.choice(prompts), ledger)
            if got is None:
                time.sleep(0.05)
                continue
            rid, model, router = got
            with ledger.lock:
                ledger.requests[rid] = kind
            outcome = rng.choice(sorted(SCORE))
            k = (model, outcome)
            rel_key = (release, str(router.get("version"))) if kind == "router" and release else None
            try:
                f = c.post("/feedback", json={"request_id": rid, "outcome": outcome})
            except httpx.HTTPError as e:
                with ledger.lock:
                    if type(e).__name__ in NOT_SENT:  # never reached the server: it must count nowhere
                        ledger.not_sent += 1
                        continue
                    ledger.unknown[k] += 1
                    ledger.feedback_unknown.add(rid)
                    if rel_key:
                        ledger.rel_unknown[rel_key] += 1
                continue
            ledger.count("feedback", f.status_code)
            with ledger.lock:
                if f.status_code == 200 and f.json().get("durable") is True:
                    ledger.acked[k] += 1
                    ledger.feedback[rid] = outcome
                    rel = (f.json().get("router") or {}).get("release")
                    if rel_key and rel is not None:  # the router acknowledged it in its release
                        assert rel["candidate"] == release, (rel["candidate"], release)
                        ledger.rel_acked[rel_key] += 1
                        ledger.rel_acked_sum[rel_key] += SCORE[outcome]
                    elif rel_key:  # the selector has it; the router's part went unacknowledged
                        ledger.rel_unknown[rel_key] += 1


# --- the checks ---------------------------------------------------------------------------------------
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


def check_traffic(folder: Path, ledger: Ledger) -> dict[str, Any]:
    """The traffic log against the ledger: every acknowledged request and feedback has its record, once."""
    from rlrouter.serving.traffic import read_traffic

    log = read_traffic(folder)
    by_id = {str(q["id"]): q for q in log.requests}
    with ledger.lock:
        requests, feedback, unknown = dict(ledger.requests), dict(ledger.feedback), set(ledger.feedback_unknown)
    missing = [rid for rid in requests if rid not in by_id]
    fb_missing = [rid for rid, o in feedback.items()
                  if rid not in by_id or [f.get("outcome") for f in by_id[rid]["feedback"]] != [o]]
    double = [rid for rid, q in by_id.items() if len(q["feedback"]) > 1]
    extra = [rid for rid, q in by_id.items() if q["feedback"] and rid not in feedback and rid not in unknown]
    kinds = Counter(requests.values())
    return {"request_records": len(log.requests), "acknowledged_requests": len(requests),
            "acknowledged_by_kind": dict(kinds), "acknowledged_feedback": len(feedback),
            "missing_requests": len(missing), "missing_feedback": len(fb_missing),
            "double_feedback": len(double), "feedback_from_nowhere": len(extra),
            "orphan_records": len(log.orphan_feedback), "torn_lines_skipped": log.skipped,
            "explore_records": sum(len(q["explore"]) for q in log.requests),
            "judge_grades": sum(len(q["judge"]) for q in log.requests),
            "first_missing": (missing + fb_missing)[:5], "first_double": double[:5],
            "lost": len(missing) + len(fb_missing), "double_counted": len(double) + len(extra)}


@dataclass
class Releases:
    """What the acknowledged operator steps left: the current version, the release in progress, the ended ones."""

    current: str = "1"
    running: str | None = None
    ended: list[tuple[str, str]] = field(default_factory=list)
    next_version: int = 2
    steps: list[dict[str, Any]] = field(default_factory=list)


def operator_step(base: str, cycle: int, rel: Releases, ledger: Ledger, router_dir: Path, end_every: int = 4) -> None:
    """Load a new version when none runs; every ``end_every``-th cycle end the running one (promote, then roll
    back, in turn) and load the next. Each step must be acknowledged (200) before traffic starts."""
    import httpx

    h = {"Authorization": f"Bearer {ADMIN}"}
    todo = []
    if rel.running is not None and cycle % end_every == end_every - 1:
        todo.append("promote" if len(rel.ended) % 2 == 0 else "rollback")
    if rel.running is None or todo:
        todo.append("load")
    for what in todo:
        if what == "load":
            version = str(rel.next_version)
            r = httpx.post(f"{base}/v1/routers/{ROUTER}/versions", headers=h, timeout=120,
                           json={"version": version, "path": str(router_dir)})
        else:
            r = httpx.post(f"{base}/v1/routers/{ROUTER}/{what}", headers=h, timeout=60,
                           json={"reason": f"bench cycle {cycle + 1}"})
        ledger.count(f"operator {what}", r.status_code)
        if r.status_code != 200:
            raise RuntimeError(f"operator step {what} refused: {r.status_code} {r.text[:400]}")
        if what == "load":
            rel.running, rel.next_version = version, rel.next_version + 1
        else:
            assert rel.running is not None
            if what == "promote":
                rel.current = rel.running
            rel.ended.append((rel.running, "promoted" if what == "promote" else "rolled_back"))
            rel.running = None
        rel.steps.append({"cycle": cycle + 1, "step": what, "version": rel.running or rel.ended[-1][0]})
    ledger.release = rel.running


def check_releases(base: str, rel: Releases, ledger: Ledger) -> dict[str, Any]:
    """The app's releases against the acknowledged steps and the ledger's counts."""
    import httpx

    st = httpx.get(f"{base}/v1/routers", headers={"Authorization": f"Bearer {ADMIN}"}, timeout=30).json()
    knn = st["routers"][ROUTER]
    state_ok = (knn["current"] == rel.current and (knn["release"] or {}).get("candidate") == rel.running
                and [(e["candidate"], e["state"]) for e in knn["ended"]] == rel.ended)
    lost = over = 0
    counted = {}
    with ledger.lock:
        for r in [knn["release"], *knn["ended"]]:
            if r is None:
                continue
            for v, s in r["versions"].items():
                key = (r["candidate"], v)
                n, total = s["n"], (s["mean"] or 0.0) * s["n"]
                lo, hi = ledger.rel_acked[key], ledger.rel_acked[key] + ledger.rel_unknown[key]
                lo_s, hi_s = ledger.rel_acked_sum[key], ledger.rel_acked_sum[key] + ledger.rel_unknown[key]
                lost += max(0, lo - n) + (1 if total < lo_s - 1e-6 else 0)
                over += max(0, n - hi) + (1 if total > hi_s + 1e-6 else 0)
                counted[f"{r['candidate']}/{v}"] = {"n": n, "acked": lo, "unanswered": hi - lo}
    return {"state_as_acknowledged": state_ok, "current": knn["current"],
            "running": (knn["release"] or {}).get("candidate"), "ended": len(knn["ended"]), "counts": counted,
            "journal": st.get("journal"), "lost": lost + (0 if state_ok else 1), "double_counted": over}


def admin_stats(base: str) -> dict[str, Any]:
    import httpx

    r = httpx.get(f"{base}/stats", headers={"Authorization": f"Bearer {ADMIN}"}, timeout=30)
    r.raise_for_status()
    return r.json()


def metrics_phase(server: ServeOnHead, prompts: list[str], clients: int, seconds: float, seed: int,
                  timeout_s: float = 90.0) -> dict[str, Any]:
    """Traffic without a kill, then the selector's counters on the metrics endpoint: the replica that
    came back after the last kill must have counted exactly the feedback acknowledged since."""
    ledger, stop = Ledger(), threading.Event()
    threads = [threading.Thread(target=traffic, args=(server.base, prompts, ledger, stop, seed + j), daemon=True)
               for j in range(clients)]
    for t in threads:
        t.start()
    time.sleep(seconds)
    stop.set()
    for t in threads:
        t.join(timeout=60)
    acked = sum(ledger.acked.values())
    deadline, counters = time.monotonic() + timeout_s, {}
    while time.monotonic() < deadline:  # Ray exports metrics every few seconds
        counters = server.selector_counters()
        if acked in counters.get("ray_rlrouter_selector_feedback_total", {}).values():
            break
        time.sleep(2.0)
    feedback = counters.get("ray_rlrouter_selector_feedback_total", {})
    return {"routes": len(ledger.requests), "acked": acked, "counters": counters,
            "feedback_counter_matches_acked": acked in feedback.values()}


def logged_prompts(n: int = 300) -> list[str]:
    """Prompts the replay candidates have logged answers for (RouteLLM's GSM8K table)."""
    from rlrouter.data.logged import load_routellm

    return load_routellm(ROOT.parent / "shared" / "data" / "routellm" / "gsm8k" / "gsm8k_responses.csv").prompts[:n]


def run(cycles: int, clients: int = 6, min_traffic_s: float = 2.0, max_traffic_s: float = 6.0,
        state_dir: Path | None = None, seed: int = 0, kill: str = "serve",
        router_dir: Path | None = None, end_every: int = 4) -> dict[str, Any]:
    if kill not in ("stack", *SERVE_TITLES):
        raise ValueError(f"kill: one of stack, {', '.join(SERVE_TITLES)}; got {kill!r}")
    from tests.pool.openai_server import ServerThread, make_app

    rng = random.Random(seed)
    own_dir = state_dir is None
    work = state_dir or Path(tempfile.mkdtemp(prefix="rlr-dur-state-"))
    router_dir = router_dir or train_router(work / "router")
    judge = ServerThread(make_app()).start()
    args_file = work / "app_args.json"
    args_file.write_text(json.dumps(app_args(work, judge.url, router_dir)))
    prompts = logged_prompts()
    server: StackServer | ServeOnHead = StackServer(args_file) if kill == "stack" else ServeOnHead(args_file, kill)
    ledger, rel = Ledger(), Releases()
    per_cycle: list[dict[str, Any]] = []
    try:
        first_start = server.start()
        prior = {m: {"explicit": p["explicit"], "alpha": p["alpha"], "beta": p["beta"]}
                 for m, p in admin_stats(server.base)["global"].items()}
        for i in range(cycles):
            operator_step(server.base, i, rel, ledger, router_dir, end_every)
            stop = threading.Event()
            threads = [threading.Thread(target=traffic, args=(server.base, prompts, ledger, stop,
                                                              seed * 1000 + i * 97 + j), daemon=True)
                       for j in range(clients)]
            acked_before = len(ledger.requests) + len(ledger.feedback)
            for t in threads:
                t.start()
            time.sleep(rng.uniform(min_traffic_s, max_traffic_s))
            t_kill = time.perf_counter()
            server.kill9()                      # mid-traffic: requests in flight die with the server
            stop.set()
            for t in threads:
                t.join(timeout=60)
            restart_s = server.start()
            sel = check(admin_stats(server.base), ledger, prior)
            log = check_traffic(work / "traffic", ledger)
            rels = check_releases(server.base, rel, ledger)
            row = {"cycle": i + 1, "acked_this_cycle": len(ledger.requests) + len(ledger.feedback) - acked_before,
                   "acked_requests": len(ledger.requests), "acked_feedback": len(ledger.feedback),
                   "unanswered": ledger.unanswered_requests + len(ledger.feedback_unknown),
                   "lost": sel["lost"] + log["lost"] + rels["lost"],
                   "double_counted": sel["over"] + log["double_counted"] + rels["double_counted"],
                   "release": {"current": rels["current"], "running": rels["running"],
                               "as_acknowledged": rels["state_as_acknowledged"]},
                   "torn_lines": log["torn_lines_skipped"], "restart_s": round(restart_s, 1),
                   "kill_to_healthy_s": round(time.perf_counter() - t_kill, 1),
                   "killed": getattr(server, "killed", ["the whole server session"])}
            per_cycle.append(row)
            print(f"cycle {i + 1}/{cycles}: acked {row['acked_requests']} requests, {row['acked_feedback']} feedback "
                  f"(+{row['acked_this_cycle']}), unanswered {row['unanswered']}, lost {row['lost']}, "
                  f"double {row['double_counted']}, release {row['release']}, restart {restart_s:.1f}s", flush=True)
        time.sleep(3.0)  # background exploration and judge calls of the last requests land
        final = {"selector": check(admin_stats(server.base), ledger, prior),
                 "traffic_log": check_traffic(work / "traffic", ledger),
                 "releases": check_releases(server.base, rel, ledger)}
        metrics = metrics_phase(server, prompts, clients, 3.0, seed + 777) if isinstance(server, ServeOnHead) else None
    finally:
        server.stop()
        judge.stop()
        import shutil

        if own_dir:
            shutil.rmtree(work, ignore_errors=True)
    lost = final["selector"]["lost"] + final["traffic_log"]["lost"] + final["releases"]["lost"]
    double = final["selector"]["over"] + final["traffic_log"]["double_counted"] + final["releases"]["double_counted"]
    return {"cycles": cycles, "kill": kill, "clients": clients, "parts": list(PARTS),
            "acknowledged": len(ledger.requests) + len(ledger.feedback) + len(rel.steps),
            "acknowledged_requests": len(ledger.requests), "acknowledged_feedback": len(ledger.feedback),
            "acknowledged_operator_steps": len(rel.steps),
            "unanswered": ledger.unanswered_requests + len(ledger.feedback_unknown),
            "unanswered_feedback": len(ledger.feedback_unknown), "not_sent": ledger.not_sent,
            "lost": lost, "double_counted": double, "5xx": ledger.server_errors,
            "lost_in_any_cycle": sum(c["lost"] for c in per_cycle),
            "double_counted_in_any_cycle": sum(c["double_counted"] for c in per_cycle),
            "statuses": dict(sorted(ledger.status.items())), "operator_steps": rel.steps,
            "first_start_s": round(first_start, 1), "per_cycle": per_cycle, "final_check": final,
            "metrics_endpoint": metrics}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd")
    s = sub.add_parser("serve")
    s.add_argument("--port", type=int, required=True)
    s.add_argument("--args", required=True, help="the app's args, a JSON file")
    s.add_argument("--temp-dir", help="run a Ray cluster of its own there (--kill stack)")
    ap.add_argument("--cycles", type=int, default=20)
    ap.add_argument("--clients", type=int, default=6)
    ap.add_argument("--kill", default="serve,stack",
                    help="what dies each cycle, comma-separated: serve, replica, stack (module docstring)")
    ap.add_argument("--out", default=str(RESULTS / "durability.json"))
    args = ap.parse_args()
    if args.cmd == "serve":
        serve_child(args.port, args.args, args.temp_dir)
        return
    kills = [k.strip() for k in args.kill.split(",") if k.strip()]
    for k in kills:
        if k not in ("stack", *SERVE_TITLES):
            ap.error(f"--kill: serve, replica or stack, got {k!r}")
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="rlr-dur-router-") as tmp:
        router_dir = train_router(Path(tmp) / "router")
        runs = {}
        for k in kills:
            t1 = time.perf_counter()
            runs[k] = run(args.cycles, args.clients, kill=k, router_dir=router_dir)
            runs[k]["wall_s"] = round(time.perf_counter() - t1, 1)
    res = {"cycles": sum(r["cycles"] for r in runs.values()), "kills": kills, "parts": list(PARTS),
           **{k: sum(r[k] for r in runs.values()) for k in ("acknowledged", "unanswered", "lost", "double_counted",
                                                            "5xx")},
           "runs": runs, "wall_s": round(time.perf_counter() - t0, 1)}
    RESULTS.mkdir(parents=True, exist_ok=True)
    write_result(Path(args.out), res, MEASURES, indent=2)
    print(json.dumps({k: res[k] for k in ("cycles", "kills", "acknowledged", "unanswered", "lost", "double_counted",
                                          "5xx", "wall_s")}, indent=2))


if __name__ == "__main__":
    main()
