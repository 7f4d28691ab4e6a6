"""Candidate-pool measurements: replay lookup speed, fuzzy-match quality, HTTP round trips, vLLM calls.

    python benchmarks/pool_bench.py [--parts replay,tokens,http,vllm] [--out benchmarks/results]

Writes ``pool_bench.json`` and ``pool_bench.png`` (HTTP round-trip latency by concurrency).
- replay: load time of the 13,074-row RouteLLM table, exact lookups/s, fuzzy lookups/s, a full
  ``route`` of every prompt through the pool, and how often fuzzy matching finds the right row for a
  question stem (MMLU without its options) and wrongly matches an unrelated question (GSM8K *train*
  questions, which are not in the table);
- token estimate: ceil(chars / 4) against SmolLM2's tokenizer on the logged GSM8K responses;
- HTTP: the openai backend against the local test server (tests/pool/openai_server.py) on loopback,
  sequential round trips (p50 / p99) and throughput at pool concurrency 1, 4, 16, with an instant
  server and with one that takes 100 ms per call (ideal: 10 x concurrency calls/s);
- vLLM (``--parts vllm``): engine start in a Ray actor and the latency of a batch of route calls.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import os
import statistics
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")

from rlrouter.data.io import read_jsonl  # noqa: E402
from rlrouter.data.logged import load_routellm  # noqa: E402
from rlrouter.pool import Candidate, CandidatePool  # noqa: E402
from rlrouter.pool.options import estimate_tokens  # noqa: E402
from rlrouter.pool.replay import ReplayBackend  # noqa: E402

from rlrouter.provenance import write_result  # noqa: E402

# what this benchmark's figures depend on (rlrouter.provenance: the staleness report lists its results when these change)
MEASURES = ("benchmarks/pool_bench.py", "rlrouter/pool")

GPT4 = "gpt-4-1106-preview"


def pct(xs: list[float], q: float) -> float:
    return float(np.percentile(np.asarray(xs), q))


def bench_replay(src: str) -> dict:
    out: dict = {}
    t0 = time.perf_counter()
    table = load_routellm(src)
    out["load_s"] = time.perf_counter() - t0
    out["rows"] = len(table)
    b = ReplayBackend(Candidate("gpt4", 10, 30, options={"model": GPT4, "match": "fuzzy"}), table=table)
    table.index("warm")  # builds the exact index
    t0 = time.perf_counter()
    for p in table.prompts:
        b.lookup(p)
    dt = time.perf_counter() - t0
    out["exact_lookup_us"] = dt / len(table) * 1e6
    t0 = time.perf_counter()
    b._fuzzy_index()
    out["fuzzy_index_build_s"] = time.perf_counter() - t0

    mmlu_rows = [i for i, s in enumerate(table.source) if s.startswith("mmlu")]
    rng = np.random.default_rng(0)
    sample = rng.choice(mmlu_rows, size=500, replace=False)
    stems = [table.prompts[i].split("\nA.")[0] for i in sample]
    fz = b._fuzzy_index()
    t0 = time.perf_counter()
    found = [fz.best(s) for s in stems]
    out["fuzzy_lookup_ms"] = (time.perf_counter() - t0) / len(stems) * 1e3
    for thr in (0.3, 0.4, 0.5, 0.6, 0.7):
        out[f"fuzzy_stem_recall@{thr}"] = float(np.mean(
            [row == i and sim >= thr for (row, sim), i in zip(found, sample, strict=True)]))
    train = [row["question"] for _, row in itertools.islice(read_jsonl(Path(src) / "gsm8k" / "train.jsonl"), 500)]
    sims = [fz.best(q)[1] for q in train]
    for thr in (0.3, 0.4, 0.5, 0.6, 0.7):
        out[f"fuzzy_false_match_rate@{thr}"] = float(np.mean([s >= thr for s in sims]))

    pool = CandidatePool.from_config({"candidates": [
        {"name": "gpt4", "price_in": 10, "price_out": 30, "backend": "replay",
         "options": {"model": GPT4, "source": src}},
        {"name": "mixtral", "price_in": 0.6, "price_out": 0.6, "backend": "replay",
         "options": {"model": "mistralai/Mixtral-8x7B-Instruct-v0.1", "source": src}}]})
    calls = [("gpt4" if i % 2 else "mixtral", p) for i, p in enumerate(table.prompts)]
    pool.route_sync(calls[:10])  # loads the MMLU answer key
    t0 = time.perf_counter()
    rs = pool.route_sync(calls)
    dt = time.perf_counter() - t0
    out["route_all_s"] = dt
    out["route_calls_per_s"] = len(calls) / dt
    out["route_errors"] = sum(not r.ok for r in rs)
    pool.close_sync()
    return out


def bench_tokens(src: str) -> dict:
    from transformers import AutoTokenizer

    from rlrouter.models import resolve_model

    tok = AutoTokenizer.from_pretrained(resolve_model("smollm2-135m-instruct"))
    t = load_routellm(Path(src) / "gsm8k" / "gsm8k_responses.csv")
    texts = [x for x in t.responses[GPT4] if x]
    ratios = [estimate_tokens(x) / max(1, len(tok(x)["input_ids"])) for x in texts]
    return {"texts": len(texts), "estimate_over_smollm2_mean": statistics.mean(ratios),
            "estimate_over_smollm2_p5": pct(ratios, 5), "estimate_over_smollm2_p95": pct(ratios, 95)}


class _ServerProcess:
    """The test server in its own process, so client and server do not share one GIL."""

    def __init__(self) -> None:
        import socket
        import subprocess

        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
        s.close()
        self.url = f"http://127.0.0.1:{port}"
        code = ("import uvicorn; from tests.pool.openai_server import make_app; "
                f"uvicorn.run(make_app(), host='127.0.0.1', port={port}, log_level='warning')")
        self.proc = subprocess.Popen([sys.executable, "-c", code], cwd=ROOT)
        import httpx

        for _ in range(200):
            try:
                httpx.get(f"{self.url}/stats", timeout=1)
                return
            except httpx.HTTPError:
                time.sleep(0.1)
        raise RuntimeError("test server did not start")

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(10)


def bench_http() -> dict:
    srv = _ServerProcess()
    out: dict = {"server": "separate process, loopback"}
    try:
        for conc in (1, 4, 16):
            pool = CandidatePool.from_config({"max_concurrency": conc, "candidates": [
                {"name": "echo", "price_in": 1, "price_out": 1, "backend": "openai",
                 "options": {"base_url": f"{srv.url}/v1", "max_concurrency": conc}}]})
            pool.route_sync([("echo", "warm up")])
            n = 400
            lat: list[float] = []
            if conc == 1:
                for i in range(n):
                    t0 = time.perf_counter()
                    pool.route_sync([("echo", f"q{i}")])
                    lat.append(time.perf_counter() - t0)
                out["sequential_rtt_ms_p50"] = pct(lat, 50) * 1e3
                out["sequential_rtt_ms_p99"] = pct(lat, 99) * 1e3
                out["sequential_rtt_ms"] = [x * 1e3 for x in lat]
            t0 = time.perf_counter()
            rs = pool.route_sync([("echo", f"q{i}") for i in range(n)])
            dt = time.perf_counter() - t0
            assert all(r.ok for r in rs)
            out[f"calls_per_s@conc{conc}"] = n / dt
            out[f"latency_ms_p50@conc{conc}"] = pct([r.latency_s for r in rs], 50) * 1e3
            # a real endpoint takes ~100 ms or more: there the bound, not the client overhead, sets throughput
            m = 4 * conc
            t0 = time.perf_counter()
            rs = pool.route_sync([("echo", f"SLEEP0.1 q{i}") for i in range(m)])
            assert all(r.ok for r in rs)
            out[f"calls_per_s_100ms_server@conc{conc}"] = m / (time.perf_counter() - t0)
            pool.close_sync()
    finally:
        srv.stop()
    return out


def bench_vllm() -> dict:
    import ray

    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    pool = CandidatePool.from_config({"candidates": [
        {"name": "smollm2", "price_in": 0.01, "price_out": 0.01, "backend": "vllm",
         "options": {"max_tokens": 64, "max_model_len": 1024}}]})

    async def go():
        t0 = time.perf_counter()
        info = await pool.backend("smollm2").start()
        start = time.perf_counter() - t0
        qs = [f"Question {i}: what is {i} plus {i + 1}?" for i in range(8)]
        t0 = time.perf_counter()
        rs = await pool.route([("smollm2", q) for q in qs])
        batch = time.perf_counter() - t0
        t0 = time.perf_counter()
        one = await pool.route([("smollm2", qs[0])])
        single = time.perf_counter() - t0
        await pool.close()
        return info, start, batch, single, rs, one

    info, start, batch, single, rs, one = asyncio.run(go())
    ray.shutdown()
    toks = sum(r.completion_tokens for r in rs)
    return {"actor_start_s": start, "engine_init_s_inside_actor": info["start_s"], "batch8_s": batch,
            "batch8_completion_tokens": toks, "batch8_tok_per_s": toks / batch, "single_call_s": single,
            "errors": sum(not r.ok for r in rs + one), "example": rs[0].text}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--src", default=str(ROOT.parent / "shared" / "data" / "routellm"))
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results"))
    ap.add_argument("--parts", default="replay,tokens,http",
                    help="comma-separated subset of replay,tokens,http,vllm; results merge into the JSON")
    args = ap.parse_args()
    parts = set(args.parts.split(","))
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    path = out / "pool_bench.json"
    res = json.loads(path.read_text()) if path.exists() else {}
    if "replay" in parts:
        res["replay"] = bench_replay(args.src)
    if "tokens" in parts:
        res["tokens"] = bench_tokens(args.src)
    if "vllm" in parts:
        res["vllm"] = bench_vllm()
    rtt = None
    if "http" in parts:
        res["http"] = bench_http()
        rtt = res["http"].pop("sequential_rtt_ms")
    write_result(path, res, MEASURES, indent=2)
    if rtt is None:
        print(json.dumps(res, indent=2))
        return
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(1, 2, figsize=(10, 4))
    ax[0].hist(rtt, bins=40)
    ax[0].set_xlabel("ms")
    ax[0].set_title("openai backend round trip, loopback (sequential)")
    concs = [1, 4, 16]
    x = np.arange(len(concs))
    ax[1].bar(x - 0.2, [res["http"][f"calls_per_s@conc{c}"] for c in concs], 0.4, label="instant server")
    ax[1].bar(x + 0.2, [res["http"][f"calls_per_s_100ms_server@conc{c}"] for c in concs], 0.4,
              label="100 ms server")
    ax[1].plot(x + 0.2, [10 * c for c in concs], "k_", markersize=20, label="ideal at 100 ms")
    ax[1].set_xticks(x, [str(c) for c in concs])
    ax[1].set_xlabel("pool max_concurrency")
    ax[1].set_ylabel("calls / s")
    ax[1].set_title("route calls per second over HTTP")
    ax[1].legend()
    fig.tight_layout()
    fig.savefig(out / "pool_bench.png", dpi=100)
    print(json.dumps(res, indent=2))
    print(f"wrote {out / 'pool_bench.json'} and {out / 'pool_bench.png'}")


if __name__ == "__main__":
    main()
