"""Hostile input against the Serve API: schemathesis fuzzing from the app's own
OpenAPI schema, plus hand-made attacks the schema cannot describe (oversized and endless bodies, broken
JSON, slow clients, keys of other users).

Every response is checked: no 5xx, and every 4xx is the error shape ``{"error": {message, type, field,
code}}`` whose message names what was wrong (the field, or the auth header for 401). A refused request must
change nothing: for every hand-made attack and a sample (``--audit-share``) of the refused schemathesis cases
on an endpoint that writes (routing, feedback, chat, the release endpoints), the app's state (the selector's
counts and posteriors, its pending decisions, each served router's versions and release, the release journal's
length) is read before and after, over HTTP with the admin key, and must be equal.

The live app runs with every stateful part on (``bench_durability.app_args``: the traffic log with exploration
and a judge, a served kNN router with its release journal), so the release endpoints
(``/v1/routers/<name>/versions|promote|rollback``) act on a real router: half of their generated cases name it.

    .venv/bin/python benchmarks/bench_fuzz.py --cases 10000            # live Serve app (own Ray cluster)
    .venv/bin/python benchmarks/bench_fuzz.py --cases 10000 --inprocess   # the FastAPI app in-process

Results: ``benchmarks/results/fuzz_live.json`` (live) and ``benchmarks/results/fuzz.json`` (in-process).
Every import is at the top of the module: ``tests/ops/test_benchmarks_import.py`` imports each benchmark, so
a name that moves breaks ``make test``, not the next person who runs the benchmark.
"""

from __future__ import annotations

import argparse
import json
import random
import socket
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import schemathesis
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import seed as hseed
from hypothesis.errors import Unsatisfiable
from schemathesis import GenerationMode

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from benchmarks.bench_durability import ROUTER, StackServer, app_args, train_router  # noqa: E402 - needs ROOT on the path
from rlrouter.pool.pool import CandidatePool, read_pool_config  # noqa: E402
from rlrouter.selector import Selector, SelectorConfig  # noqa: E402
from rlrouter.serving.api import create_app, install  # noqa: E402
from rlrouter.serving.auth import ApiKeyAuth  # noqa: E402
from rlrouter.serving.config import ServingConfig  # noqa: E402
from rlrouter.serving.service import LocalSelectorClient, RouterService  # noqa: E402
from tests.pool.openai_server import ServerThread, make_app  # noqa: E402

from rlrouter.provenance import write_result  # noqa: E402

# what this benchmark's figures depend on (rlrouter.provenance: the staleness report lists its results when these change)
MEASURES = ("benchmarks/bench_fuzz.py", "serve", "rlrouter/serving", "rlrouter/selector", "rlrouter/storage.py",
            "benchmarks/bench_durability.py")
RESULTS = ROOT / "benchmarks" / "results"
KEYS = {"k-alice": "alice", "k-bob": "bob"}
ADMIN_KEY = "k-ops"
AUTH_WORDS = ("authorization", "api key", "x-api-key")
WRITES = ("POST /route", "POST /feedback", "POST /v1/chat/completions", "POST /router_r1/route",
          "POST /v1/routers/{name}/versions", "POST /v1/routers/{name}/promote", "POST /v1/routers/{name}/rollback")
"""The operations that may change the app's state when they succeed (what the refusal audit watches)."""
ADMIN_OPS = ("GET /stats", "GET /v1/routers", "POST /v1/routers/{name}/versions", "POST /v1/routers/{name}/promote",
             "POST /v1/routers/{name}/rollback")


@dataclass
class Tally:
    cases: int = 0
    by_status: Counter = field(default_factory=Counter)
    by_operation: Counter = field(default_factory=Counter)
    failures: list[dict[str, Any]] = field(default_factory=list)
    audited: int = 0
    """Refused requests whose before/after state was compared."""
    changed: list[dict[str, Any]] = field(default_factory=list)
    """Refused requests after which the state differed (each a failure too)."""

    def audit(self, label: str, status: int, before: Any, after: Any, request: dict[str, Any]) -> None:
        self.audited += 1
        if before != after:
            diff = sorted(k for k in set(before) | set(after) if before.get(k) != after.get(k))
            self.changed.append({"operation": label, "status": status, "changed": diff, "request": _short(request)})

    def record(self, label: str, status: int, body: Any, request: dict[str, Any]) -> None:
        self.cases += 1
        self.by_status[status] += 1
        self.by_operation[label] += 1
        problem = judge(status, body)
        if problem and len(self.failures) < 50:
            self.failures.append({"operation": label, "status": status, "problem": problem,
                                  "request": _short(request), "body": _short(body)})
        elif problem:
            self.failures.append({"operation": label, "status": status, "problem": problem})

    @property
    def server_errors(self) -> int:
        return sum(n for s, n in self.by_status.items() if s >= 500)


def _short(x: Any, n: int = 400) -> Any:
    s = json.dumps(x, default=str) if not isinstance(x, str) else x
    return s if len(s) <= n else s[:n] + f"...(+{len(s) - n})"


def judge(status: int, body: Any) -> str | None:
    """None when the response is acceptable; else what is wrong with it."""
    if status >= 500:
        return "5xx"
    if not 400 <= status < 500:
        return None
    err = body.get("error") if isinstance(body, dict) else None
    if not isinstance(err, dict) or not isinstance(err.get("message"), str) or err.get("code") != status:
        return "4xx without the error shape"
    msg = err["message"].lower()
    if status == 401:
        return None if any(w in msg for w in AUTH_WORDS) else "401 does not name the auth header"
    fld = err.get("field")
    if not fld and err.get("type") == "not_configured":
        return None  # an endpoint the deployment did not configure: no request field is at fault
    if not fld:
        return f"{status} names no field"
    if fld.split(".")[0].split("[")[0].lower() not in msg and fld.lower() not in msg:
        return f"{status}: field '{fld}' not in the message"
    return None


def state_digest(get: Any) -> dict[str, Any]:
    """What a refused request must not change, read with the admin key: the selector's counts, posteriors and
    pending decisions (``/stats``), each served router's versions and release and the journal's length
    (``/v1/routers``). ``get(path) -> (status, body)``."""
    _, stats = get("/stats")
    _, routers = get("/v1/routers")
    stats = stats if isinstance(stats, dict) else {"unreadable": stats}
    routers = routers if isinstance(routers, dict) else {"unreadable": routers}
    journal = routers.get("journal") or {}
    return {**{k: stats.get(k) for k in ("selections", "feedback", "pending_decisions", "global", "users",
                                         "categories")},
            "routers": routers.get("routers"), "journal_appended": journal.get("appended")}


# --- targets ------------------------------------------------------------------------------------------
def inprocess_app(tmp: Path) -> Any:
    """The real FastAPI app around a real selector and the replay pool; the implicit-feedback classifier is
    the real MiniLM one (loaded lazily on the first follow-up)."""
    pool = CandidatePool.from_config(read_pool_config(ROOT / "conf" / "pool" / "routellm_replay.yaml"))
    cfg = SelectorConfig(storage_path=str(tmp / "state.json"), seed=0)
    selector = Selector(cfg, pool.names)
    selector.load()
    keys = [{"key": k, "user_id": u} for k, u in KEYS.items()] + [{"key": ADMIN_KEY, "user_id": "ops", "admin": True}]
    serving = ServingConfig(api_keys=keys, max_body_bytes=100_000)
    install(RouterService(LocalSelectorClient(selector), cfg, serving, pool.names, pool=pool),
            ApiKeyAuth(serving.keys({})))
    return create_app()


def fuzz_schema(schema: Any, cases: int, tally: Tally, seed: int = 0, base_url: str | None = None,
                digest: Any = None, audit_share: float = 0.0) -> None:
    """``cases`` schemathesis cases spread over every operation, positive and negative generation;
    two thirds carry a valid key (so validation is reached; the admin endpoints: 40% the admin key), the rest the
    generated auth headers. ``digest()``: the app's state; a share ``audit_share`` of the refused cases on an
    operation of ``WRITES`` is checked to leave it unchanged."""
    ops = [r.ok() for r in schema.get_all_operations()]
    rng = random.Random(seed)
    target = tally.cases + cases
    for _ in range(20):  # rounds with fresh seeds until enough cases ran (hypothesis may stop an operation early)
        left = target - tally.cases
        if left <= 0:
            return
        per = max(5, left // (2 * len(ops)) + 1)
        for op in ops:
            for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):
                try:
                    _case_runner(op, mode, per, rng, tally, base_url, digest, audit_share)()
                except Unsatisfiable:
                    pass  # nothing to make invalid (no parameters, e.g. GET /health)


def _case_runner(op: Any, mode: Any, per: int, rng: random.Random, tally: Tally, base_url: str | None,
                 digest: Any = None, audit_share: float = 0.0) -> Any:
    label = f"{op.method.upper()} {op.path}"
    admin_share = 0.4 if label in ADMIN_OPS else 0.07

    @hseed(rng.randrange(2**32))
    @settings(max_examples=per, database=None, deadline=None, derandomize=False,
              suppress_health_check=list(HealthCheck), phases=[Phase.generate])
    @given(op.as_strategy(generation_mode=mode))
    def one(case: Any) -> None:
        headers = {}
        r = rng.random()
        if r < admin_share:
            headers = {"Authorization": f"Bearer {ADMIN_KEY}"}
        elif r < 0.6 + admin_share:
            headers = {"Authorization": f"Bearer {rng.choice(list(KEYS))}"}
        if "{name}" in op.path and rng.random() < 0.5:
            case.path_parameters = {**(case.path_parameters or {}), "name": ROUTER}  # the served router
        kw = {"headers": headers} if headers else {}
        if base_url:
            kw["base_url"] = base_url
        audit = digest is not None and label in WRITES and rng.random() < audit_share
        before = digest() if audit else None
        try:
            resp = case.call(timeout=30, **kw)
        except Exception as e:  # noqa: BLE001 - a dropped connection is a failure too
            tally.record(label, 599, {"exception": repr(e)}, {"body": case.body})
            return
        if audit and resp.status_code >= 400:
            tally.audit(label, resp.status_code, before, digest(),
                        {"path": case.path_parameters, "query": case.query, "body": case.body, "auth": bool(headers)})
        try:
            body = resp.json()
        except Exception:  # noqa: BLE001
            body = resp.text if hasattr(resp, "text") else None
        tally.record(label, resp.status_code, body,
                     {"mode": mode.value, "query": case.query, "body": case.body, "auth": bool(headers)})

    return one


def attacks(call: Any, tally: Tally, routers: bool = False) -> list[dict[str, Any]]:
    """Hand-made hostile requests; ``call(method, path, headers, content) -> (status, body)``. Each refused one
    is audited: the app's state (``state_digest``) before and after must be equal (``held`` needs both).
    ``routers``: the app serves the router ``ROUTER`` (the release endpoints' attacks)."""
    alice = {"Authorization": "Bearer k-alice", "Content-Type": "application/json"}
    bob = {"Authorization": "Bearer k-bob", "Content-Type": "application/json"}
    ops = {"Authorization": f"Bearer {ADMIN_KEY}", "Content-Type": "application/json"}
    rows = []

    def digest() -> dict[str, Any]:
        return state_digest(lambda path: call("GET", path, {"Authorization": f"Bearer {ADMIN_KEY}"}, b""))

    def run(name: str, method: str, path: str, headers: dict, content: bytes, expect: set[int]) -> dict:
        before = digest()
        status, body = call(method, path, headers, content)
        tally.record(f"attack {name}", status, body, {"path": path, "len": len(content)})
        unchanged = None
        if status >= 400:
            after = digest()
            tally.audit(f"attack {name}", status, before, after, {"path": path, "len": len(content)})
            unchanged = before == after
        row = {"attack": name, "status": status, "expected": sorted(expect),
               "held": status in expect and unchanged is not False, "state_unchanged": unchanged,
               "field": (body.get("error") or {}).get("field") if isinstance(body, dict) else None}
        rows.append(row)
        return body

    run("no key", "POST", "/route", {"Content-Type": "application/json"}, b'{"query": "hi"}', {401})
    run("unknown key", "POST", "/route", {"Authorization": "Bearer nope", "Content-Type": "application/json"},
        b'{"query": "hi"}', {401})
    run("no key on /stats", "GET", "/stats", {}, b"", {401})
    run("body over the cap", "POST", "/route", alice, b'{"query": "' + b"x" * 2_000_000 + b'"}', {413})
    run("broken JSON", "POST", "/route", alice, b'{"query": "hi"', {400})
    run("JSON array body", "POST", "/route", alice, b'[1, 2, 3]', {422})
    run("deep nesting", "POST", "/route", alice, b'{"query": ' + b"[" * 5000 + b"]" * 5000 + b"}", {400, 422})
    run("NaN reward", "POST", "/feedback", alice, b'{"request_id": "r", "reward": NaN}', {400, 422})
    run("unknown field", "POST", "/route", alice, b'{"query": "hi", "admin": true}', {422})
    run("null bytes", "POST", "/route", alice, json.dumps({"query": "\x00" * 100}).encode(), {200, 422})
    run("blank query", "POST", "/route", alice, b'{"query": "   "}', {422})
    # user A may not write user B's posteriors
    run("act for another user", "POST", "/route", alice, b'{"query": "hi", "user_id": "bob"}', {403})
    status, routed = call("POST", "/route", bob, b'{"query": "what is 2+2?"}')
    rid = routed.get("request_id") if isinstance(routed, dict) else None
    run("feedback on another user's decision", "POST", "/feedback", alice,
        json.dumps({"request_id": rid, "outcome": "win"}).encode(), {403})
    run("owner's feedback still accepted", "POST", "/feedback", bob,
        json.dumps({"request_id": rid, "outcome": "win"}).encode(), {200})
    run("second feedback", "POST", "/feedback", bob, json.dumps({"request_id": rid, "outcome": "loss"}).encode(), {409})
    run("unknown request_id", "POST", "/feedback", alice, b'{"request_id": "nope", "outcome": "win"}', {404})
    # the admin and release endpoints, without the admin key and with bad bodies
    rel = f"/v1/routers/{ROUTER}"
    run("no key on /v1/routers", "GET", "/v1/routers", {}, b"", {401})
    run("no key on a release", "POST", f"{rel}/versions", {"Content-Type": "application/json"},
        b'{"version": "9", "path": "x"}', {401})
    run("user key loads a version", "POST", f"{rel}/versions", alice, b'{"version": "9", "path": "x"}', {403})
    run("user key promotes", "POST", f"{rel}/promote", alice, b"{}", {403})
    run("user key rolls back", "POST", f"{rel}/rollback", bob, b"{}", {403})
    seen = run("user key reads every user's posteriors", "GET", "/stats?all_users=true", alice, b"", {200})
    if isinstance(seen, dict) and "bob" in (seen.get("users") or {}):  # a user's key reads only its own
        rows[-1]["held"] = False
    run("release of an unknown router", "POST", "/v1/routers/nobody/promote", ops, b"{}", {404})
    run("release body over the cap", "POST", f"{rel}/versions", ops,
        b'{"version": "9", "path": "' + b"x" * 2_000_000 + b'"}', {413})
    run("release body broken JSON", "POST", f"{rel}/versions", ops, b'{"version": ', {400})
    if routers:
        run("version from a folder that is none", "POST", f"{rel}/versions", ops,
            b'{"version": "9", "path": "/etc"}', {400})
        run("version path outside any router", "POST", f"{rel}/versions", ops,
            b'{"version": "9", "path": "../../../../etc/passwd"}', {400})
        run("version that exists", "POST", f"{rel}/versions", ops, b'{"version": "1", "path": "x"}', {400})
        run("version name with a slash", "POST", f"{rel}/versions", ops, b'{"version": "a/b", "path": "x"}', {400})
        run("release rule out of range", "POST", f"{rel}/versions", ops,
            b'{"version": "9", "path": "x", "release": {"canary_share": 7}}', {400})
        run("release with an unknown field", "POST", f"{rel}/versions", ops,
            b'{"version": "9", "path": "x", "force": true}', {400})
        run("version as a number", "POST", f"{rel}/versions", ops, b'{"version": 9, "path": "x"}', {400, 422})
    return rows


def slow_client(host: str, port: int, wait_s: float) -> dict[str, Any]:
    """Slowloris: announce a body, send a third of it, then nothing. The server must answer or close the
    connection by itself instead of holding it forever."""
    t0 = time.perf_counter()
    with socket.create_connection((host, port), timeout=wait_s + 30) as s:
        s.sendall(b"POST /route HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer k-alice\r\n"
                  b"Content-Type: application/json\r\nContent-Length: 300\r\n\r\n" + b'{"query": "' + b"a" * 90)
        try:
            data = s.recv(4096)
        except socket.timeout:
            data = None
    took = time.perf_counter() - t0
    line = data.split(b"\r\n", 1)[0].decode(errors="replace") if data else ("closed" if data == b"" else "hung")
    return {"attack": "slow body (slowloris)", "answer": line, "after_s": round(took, 1),
            "held": data is not None}


def http_call(base: str) -> Any:
    """``attacks``' ``call`` over real HTTP to the app at ``base``."""
    def call(method: str, path: str, headers: dict, content: bytes) -> tuple[int, Any]:
        r = httpx.request(method, f"{base}{path}", headers=headers, content=content or None, timeout=60)
        return r.status_code, _json(r)
    return call


def fuzz_live(base: str, cases: int, seed: int = 0, slow_wait_s: float = 120.0,
              audit_share: float = 0.25) -> dict[str, Any]:
    """The whole run against a live app at ``base`` (``http://127.0.0.1:<port>``, with the keys of ``KEYS``
    and ``ADMIN_KEY``, serving the router ``ROUTER``): schemathesis cases from its ``/openapi.json``, the
    attacks, the slow client."""
    tally = Tally()
    t0 = time.perf_counter()
    call = http_call(base)

    def digest() -> dict[str, Any]:
        return state_digest(lambda path: call("GET", path, {"Authorization": f"Bearer {ADMIN_KEY}"}, b""))

    fuzz_schema(schemathesis.openapi.from_url(f"{base}/openapi.json"), cases, tally, seed, base_url=base,
                digest=digest, audit_share=audit_share)
    fuzz_s = time.perf_counter() - t0
    rows = attacks(call, tally, routers=True)
    slow = slow_client("127.0.0.1", int(base.rsplit(":", 1)[1]), slow_wait_s)
    return summary(tally, fuzz_s, rows, slow)


def fuzz_inprocess(cases: int, seed: int = 0, audit_share: float = 0.25) -> dict[str, Any]:
    tally = Tally()
    t0 = time.perf_counter()
    app = inprocess_app(Path(tempfile.mkdtemp(prefix="rlr-fuzz-")))
    client = TestClient(app, raise_server_exceptions=False)

    def call(method: str, path: str, headers: dict, content: bytes) -> tuple[int, Any]:
        r = client.request(method, path, headers=headers, content=content or None)
        return r.status_code, _json(r)

    def digest() -> dict[str, Any]:
        return state_digest(lambda path: call("GET", path, {"Authorization": f"Bearer {ADMIN_KEY}"}, b""))

    fuzz_schema(schemathesis.openapi.from_asgi("/openapi.json", app), cases, tally, seed, digest=digest,
                audit_share=audit_share)
    fuzz_s = time.perf_counter() - t0
    return summary(tally, fuzz_s, attacks(call, tally), None)


def summary(tally: Tally, fuzz_s: float, rows: list[dict[str, Any]], slow: dict[str, Any] | None) -> dict[str, Any]:
    return {"schemathesis": getattr(schemathesis, "__version__", ""), "cases": tally.cases,
            "fuzz_s": round(fuzz_s, 1), "server_errors": tally.server_errors,
            "bad_4xx": sum(1 for f in tally.failures if f["problem"] != "5xx"),
            "by_status": {str(k): v for k, v in sorted(tally.by_status.items())},
            "by_operation": dict(tally.by_operation), "attacks": rows, "slow_client": slow,
            "refused_audited": tally.audited, "state_changed_by_refused": len(tally.changed),
            "state_changes": tally.changed[:20], "failures": tally.failures[:50]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", type=int, default=10_000)
    ap.add_argument("--inprocess", action="store_true")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--audit-share", type=float, default=0.25,
                    help="share of refused cases on a writing endpoint whose state before and after is compared")
    ap.add_argument("--out", default=None, help="default: results/fuzz_live.json, or fuzz.json with --inprocess")
    args = ap.parse_args()
    t0 = time.perf_counter()
    if args.inprocess:
        res = {"target": "in-process FastAPI app (TestClient), real selector + replay pool",
               **fuzz_inprocess(args.cases, args.seed, args.audit_share)}
    else:
        work = Path(tempfile.mkdtemp(prefix="rlr-fuzz-"))
        judge = ServerThread(make_app()).start()
        (work / "app_args.json").write_text(json.dumps(app_args(work, judge.url, train_router(work / "router"))))
        server = StackServer(work / "app_args.json")
        try:
            start_s = server.start()
            res = {"target": "live Serve app over HTTP (own local Ray cluster, Ray Serve proxy), real selector + "
                             "replay pool, traffic log with exploration and a judge, a served kNN router with its "
                             "release journal", "start_s": round(start_s, 1),
                   **fuzz_live(server.base, args.cases, args.seed, audit_share=args.audit_share)}
        finally:
            server.stop()
            judge.stop()
    res["wall_s"] = round(time.perf_counter() - t0, 1)
    res["command"] = " ".join(["benchmarks/bench_fuzz.py", *sys.argv[1:]])
    out = Path(args.out or RESULTS / ("fuzz.json" if args.inprocess else "fuzz_live.json"))
    out.parent.mkdir(parents=True, exist_ok=True)
    write_result(out, res, MEASURES, indent=2, default=str)
    print(json.dumps({k: res[k] for k in ("target", "cases", "fuzz_s", "server_errors", "bad_4xx", "by_status",
                                          "refused_audited", "state_changed_by_refused")}, indent=2))
    for r in res["attacks"]:
        print(f"{'held' if r['held'] else 'BROKEN':6s} {r['attack']}: {r['status']} (expected {r['expected']})")
    if res["slow_client"]:
        print("slow client:", res["slow_client"])


def _json(r: Any) -> Any:
    try:
        return r.json()
    except Exception:  # noqa: BLE001
        return r.text


if __name__ == "__main__":
    main()
