"""Hostile input against the Serve API: schemathesis fuzzing from the app's own
OpenAPI schema, plus hand-made attacks the schema cannot describe (oversized and endless bodies, broken
JSON, slow clients, keys of other users).

Every response is checked: no 5xx, and every 4xx is the error shape ``{"error": {message, type, field,
code}}`` whose message names what was wrong (the field, or the auth header for 401).

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
from benchmarks.bench_durability import StackServer  # noqa: E402 - needs ROOT on the path
from rlrouter.pool.pool import CandidatePool, read_pool_config  # noqa: E402
from rlrouter.selector import Selector, SelectorConfig  # noqa: E402
from rlrouter.serving.api import create_app, install  # noqa: E402
from rlrouter.serving.auth import ApiKeyAuth  # noqa: E402
from rlrouter.serving.config import ServingConfig  # noqa: E402
from rlrouter.serving.service import LocalSelectorClient, RouterService  # noqa: E402

from rlrouter.provenance import write_result  # noqa: E402

# what this benchmark's figures depend on (rlrouter.provenance: the staleness report lists its results when these change)
MEASURES = ("benchmarks/bench_fuzz.py", "serve", "rlrouter/serving", "rlrouter/selector", "rlrouter/storage.py",
            "benchmarks/bench_durability.py")
RESULTS = ROOT / "benchmarks" / "results"
KEYS = {"k-alice": "alice", "k-bob": "bob"}
ADMIN_KEY = "k-ops"
AUTH_WORDS = ("authorization", "api key", "x-api-key")


@dataclass
class Tally:
    cases: int = 0
    by_status: Counter = field(default_factory=Counter)
    by_operation: Counter = field(default_factory=Counter)
    failures: list[dict[str, Any]] = field(default_factory=list)

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


def fuzz_schema(schema: Any, cases: int, tally: Tally, seed: int = 0, base_url: str | None = None) -> None:
    """``cases`` schemathesis cases spread over every operation, positive and negative generation;
    two thirds carry a valid key (so validation is reached), the rest the generated auth headers."""
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
                    _case_runner(op, mode, per, rng, tally, base_url)()
                except Unsatisfiable:
                    pass  # nothing to make invalid (no parameters, e.g. GET /health)


def _case_runner(op: Any, mode: Any, per: int, rng: random.Random, tally: Tally, base_url: str | None) -> Any:
    label = f"{op.method.upper()} {op.path}"

    @hseed(rng.randrange(2**32))
    @settings(max_examples=per, database=None, deadline=None, derandomize=False,
              suppress_health_check=list(HealthCheck), phases=[Phase.generate])
    @given(op.as_strategy(generation_mode=mode))
    def one(case: Any) -> None:
        headers = {}
        r = rng.random()
        if r < 0.6:
            headers = {"Authorization": f"Bearer {rng.choice(list(KEYS))}"}
        elif r < 0.67:
            headers = {"Authorization": f"Bearer {ADMIN_KEY}"}
        kw = {"headers": headers} if headers else {}
        if base_url:
            kw["base_url"] = base_url
        try:
            resp = case.call(timeout=30, **kw)
        except Exception as e:  # noqa: BLE001 - a dropped connection is a failure too
            tally.record(label, 599, {"exception": repr(e)}, {"body": case.body})
            return
        try:
            body = resp.json()
        except Exception:  # noqa: BLE001
            body = resp.text if hasattr(resp, "text") else None
        tally.record(label, resp.status_code, body,
                     {"mode": mode.value, "query": case.query, "body": case.body, "auth": bool(headers)})

    return one


def attacks(call: Any, tally: Tally) -> list[dict[str, Any]]:
    """Hand-made hostile requests; ``call(method, path, headers, content) -> (status, body)``."""
    alice = {"Authorization": "Bearer k-alice", "Content-Type": "application/json"}
    bob = {"Authorization": "Bearer k-bob", "Content-Type": "application/json"}
    rows = []

    def run(name: str, method: str, path: str, headers: dict, content: bytes, expect: set[int]) -> dict:
        status, body = call(method, path, headers, content)
        tally.record(f"attack {name}", status, body, {"path": path, "len": len(content)})
        row = {"attack": name, "status": status, "expected": sorted(expect), "held": status in expect,
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


def fuzz_live(base: str, cases: int, seed: int = 0, slow_wait_s: float = 120.0) -> dict[str, Any]:
    """The whole run against a live app at ``base`` (``http://127.0.0.1:<port>``, with the keys of ``KEYS``
    and ``ADMIN_KEY``): schemathesis cases from its ``/openapi.json``, the attacks, the slow client."""
    tally = Tally()
    t0 = time.perf_counter()
    fuzz_schema(schemathesis.openapi.from_url(f"{base}/openapi.json"), cases, tally, seed, base_url=base)
    fuzz_s = time.perf_counter() - t0
    rows = attacks(http_call(base), tally)
    slow = slow_client("127.0.0.1", int(base.rsplit(":", 1)[1]), slow_wait_s)
    return summary(tally, fuzz_s, rows, slow)


def fuzz_inprocess(cases: int, seed: int = 0) -> dict[str, Any]:
    tally = Tally()
    t0 = time.perf_counter()
    app = inprocess_app(Path(tempfile.mkdtemp(prefix="rlr-fuzz-")))
    fuzz_schema(schemathesis.openapi.from_asgi("/openapi.json", app), cases, tally, seed)
    fuzz_s = time.perf_counter() - t0
    client = TestClient(app, raise_server_exceptions=False)

    def call(method: str, path: str, headers: dict, content: bytes) -> tuple[int, Any]:
        r = client.request(method, path, headers=headers, content=content or None)
        return r.status_code, _json(r)
    return summary(tally, fuzz_s, attacks(call, tally), None)


def summary(tally: Tally, fuzz_s: float, rows: list[dict[str, Any]], slow: dict[str, Any] | None) -> dict[str, Any]:
    return {"schemathesis": getattr(schemathesis, "__version__", ""), "cases": tally.cases,
            "fuzz_s": round(fuzz_s, 1), "server_errors": tally.server_errors,
            "bad_4xx": sum(1 for f in tally.failures if f["problem"] != "5xx"),
            "by_status": {str(k): v for k, v in sorted(tally.by_status.items())},
            "by_operation": dict(tally.by_operation), "attacks": rows, "slow_client": slow,
            "failures": tally.failures[:50]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", type=int, default=10_000)
    ap.add_argument("--inprocess", action="store_true")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default=None, help="default: results/fuzz_live.json, or fuzz.json with --inprocess")
    args = ap.parse_args()
    t0 = time.perf_counter()
    if args.inprocess:
        res = {"target": "in-process FastAPI app (TestClient), real selector + replay pool",
               **fuzz_inprocess(args.cases, args.seed)}
    else:
        server = StackServer(Path(tempfile.mkdtemp(prefix="rlr-fuzz-")) / "state.json")
        start_s = server.start()
        try:
            res = {"target": "live Serve app over HTTP (own local Ray cluster, Ray Serve proxy), real selector + "
                             "replay pool", "start_s": round(start_s, 1), **fuzz_live(server.base, args.cases, args.seed)}
        finally:
            server.stop()
    res["wall_s"] = round(time.perf_counter() - t0, 1)
    res["command"] = " ".join(["benchmarks/bench_fuzz.py", *sys.argv[1:]])
    out = Path(args.out or RESULTS / ("fuzz.json" if args.inprocess else "fuzz_live.json"))
    out.parent.mkdir(parents=True, exist_ok=True)
    write_result(out, res, MEASURES, indent=2, default=str)
    print(json.dumps({k: res[k] for k in ("target", "cases", "fuzz_s", "server_errors", "bad_4xx", "by_status")},
                     indent=2))
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
