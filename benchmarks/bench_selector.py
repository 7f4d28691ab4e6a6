"""Benchmarks of the online selector. Writes JSON + PNG to benchmarks/results/.

Parts (``--parts regret,decisions,latency``, all by default):

- ``regret``: cumulative regret on a replay of the real logged outcomes (../shared/data/routellm, 13,074
  queries, GPT-4 vs Mixtral) of Thompson sampling, epsilon-greedy, contextual linear Thompson sampling
  (MiniLM query embeddings), plus the oracle (0 by definition), the best fixed candidate in hindsight
  and random, averaged over ``--seeds`` shuffles. Regret is against the per-query oracle; the reward is
  Router-R1's with a correct format, R = (1 - alpha) correct + alpha (1 - normalised cost), reported for
  each ``--alphas`` (0 = plain correctness; 0.3 = the default cost_reward_alpha). The bandits run
  with cost_awareness off, since the reward already prices cost. The contextual policy sees the MiniLM
  embedding of each query's first 48 tokens (the CPU budget of a 2-core machine: 13k full prompts take
  ~25 CPU-minutes); embeddings are cached under outputs/cache/.
- ``decisions``: decisions/s of ``Selector.select`` in-process and inside the selector's Ray actor.
- ``latency``: ``POST /route`` p50 / p99 under open-loop loads (``--rates``, 20 and 200 req/s) from
  benchmarks/loadgen.py, a separate load-generator process on loopback, against the Serve app on a
  local Ray cluster, for each of ``--setups`` (``LATENCY_SETUPS``: topology and Ray Serve flags), each
  on a fresh cluster, one after another; by default the old two-hop setup and the final one.

    .venv/bin/python benchmarks/bench_selector.py [--parts regret] [--seeds 3] [--alphas 0,0.1,0.3]
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import os
import platform
import socket
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from rlrouter.provenance import write_result  # noqa: E402

# what this benchmark's figures depend on (rlrouter.provenance: the staleness report lists its results when these change)
MEASURES = ("benchmarks/bench_selector.py", "serve", "rlrouter/serving", "rlrouter/selector",
            "rlrouter/storage.py")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
RESULTS = ROOT / "benchmarks" / "results"
CACHE = ROOT / "outputs" / "cache"


def embeddings_for(prompts: list[str], max_length: int = 48) -> np.ndarray:
    """MiniLM embeddings of the logged prompts, cached under outputs/cache (keyed by the prompts)."""
    h = hashlib.sha256("\n".join(prompts).encode()).hexdigest()[:12]
    path = CACHE / f"routellm_minilm_{h}_{max_length}.npy"
    if path.exists():
        return np.load(path)
    from rlrouter.embeddings import TextEncoder

    t0 = time.time()
    e = TextEncoder(max_length=max_length, batch_size=64).encode(prompts)
    print(f"embedded {len(prompts)} prompts in {time.time() - t0:.0f}s", flush=True)
    CACHE.mkdir(parents=True, exist_ok=True)
    np.save(path, e)
    return e


def bench_regret(args: argparse.Namespace) -> dict:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from rlrouter.data.logged import load_routellm
    from rlrouter.selector.config import SelectorConfig
    from rlrouter.selector.replay import router_r1_rewards, simulate

    table = load_routellm(args.data)
    emb = embeddings_for(table.prompts)
    # prices: conf/pool/routellm_replay.yaml (mean of input and output USD per 1M tokens)
    costs = {"gpt-4-1106-preview": 20.0, "mistralai/Mixtral-8x7B-Instruct-v0.1": 0.6}
    cfg = SelectorConfig(cost_awareness=False)
    out: dict = {"n_queries": len(table), "models": table.models, "accuracy": table.accuracy(),
                 "seeds": args.seeds, "reward": "(1 - alpha) * correct + alpha * (1 - normalised cost)",
                 "selector": {k: v for k, v in cfg.to_dict().items() if k != "costs"}, "alphas": {}}
    policies = ["thompson", "epsilon_greedy", "contextual", "best_fixed", "random", "oracle"]
    fig, axes = plt.subplots(1, len(args.alphas), figsize=(6 * len(args.alphas), 4.5), squeeze=False)
    for ax, alpha in zip(axes[0], args.alphas):
        rewards = router_r1_rewards(table.scores, table.models, costs, alpha)
        curves: dict[str, list[np.ndarray]] = {p: [] for p in policies}
        ctx_seconds: list[float] = []
        t0 = time.time()
        for seed in range(args.seeds):
            order = np.random.default_rng(seed).permutation(len(table))
            for p in policies:
                t_p = time.perf_counter()
                res = simulate(p, rewards, table.models, order, emb if p == "contextual" else None, cfg, seed=seed)
                if p == "contextual":
                    ctx_seconds.append(time.perf_counter() - t_p)
                curves[p].append(res.cumulative_regret)
        res_a = {}
        for p in policies:
            c = np.stack(curves[p])  # (seeds, T)
            res_a[p] = {"final_regret_mean": float(c[:, -1].mean()), "final_regret_std": float(c[:, -1].std()),
                        "per_seed": [float(x) for x in c[:, -1]]}
            mean = c.mean(0)
            ax.plot(np.arange(1, len(mean) + 1), mean, label=f"{p} ({mean[-1]:.0f})")
        res_a["contextual_below_thompson"] = res_a["contextual"]["final_regret_mean"] < res_a["thompson"]["final_regret_mean"]
        res_a["seconds"] = time.time() - t0
        # one select + one reward feedback per logged query, through the real Selector
        res_a["contextual_select_and_feedback_per_s"] = len(table) * len(ctx_seconds) / sum(ctx_seconds)
        out["alphas"][str(alpha)] = res_a
        print(f"alpha={alpha}: " + ", ".join(f"{p}={res_a[p]['final_regret_mean']:.1f}" for p in policies), flush=True)
        ax.set_title(f"cumulative regret vs per-query oracle, alpha={alpha}")
        ax.set_xlabel("queries (RouteLLM GPT-4 / Mixtral replay)")
        ax.set_ylabel(f"cumulative regret (mean of {args.seeds} shuffles)")
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(RESULTS / "selector_regret.png", dpi=120)
    out["contextual_decisions_per_s"] = _contextual_decisions_per_s(table.models, emb, cfg)
    print(f"contextual decisions/s: {out['contextual_decisions_per_s']:.0f}", flush=True)
    return out


def _contextual_decisions_per_s(models: list[str], emb: np.ndarray, cfg, n: int = 5000) -> float:
    """Selector.select/s in contextual mode (384-dim MiniLM embeddings), after 2,000 feedbacks."""
    from rlrouter.selector.selector import SelectionRequest, Selector

    s = Selector(type(cfg).from_dict({**cfg.to_dict(), "use_contextual": True, "seed": 0,
                                      "storage_path": None, "max_pending_decisions": 16}), list(models))
    rng = np.random.default_rng(0)
    for t in range(2000):
        d = s.select(SelectionRequest(candidates=list(models), embedding=emb[t]))
        s.feedback(d.request_id, reward=float(rng.random()))
    reqs = [SelectionRequest(candidates=list(models), embedding=emb[t % len(emb)]) for t in range(n)]
    t0 = time.perf_counter()
    for req in reqs:
        s.select(req)
    return n / (time.perf_counter() - t0)


class SelectorActor:
    """A Selector in its own Ray actor: decisions per second inside an actor, as the app's one selector replica
    makes them (its ``SelectorHost`` calls ``select`` on the same object)."""

    def __init__(self, selector_cfg: dict, candidates: list[str]):
        from rlrouter.selector import Selector, SelectorConfig

        self.selector = Selector(SelectorConfig.from_dict(selector_cfg), candidates)

    def bench(self, n: int, candidates: list[str]) -> float:
        from rlrouter.selector import SelectionRequest

        req = SelectionRequest(candidates=candidates)
        t0 = time.perf_counter()
        for _ in range(n):
            self.selector.select(req)
        return n / (time.perf_counter() - t0)


def bench_decisions(args: argparse.Namespace) -> dict:
    from rlrouter.selector import SelectionRequest, Selector, SelectorConfig

    out = {}
    cands = ["gpt-4-1106-preview", "mixtral-8x7b-instruct"]
    for name, kw in (("thompson", {}), ("epsilon_greedy", {"use_thompson_sampling": False})):
        s = Selector(SelectorConfig(seed=0, costs={cands[0]: 20.0, cands[1]: 0.6}, **kw), cands)
        req = SelectionRequest(candidates=cands, user_id="u", session_id="s")
        n = args.decisions
        t0 = time.perf_counter()
        for _ in range(n):
            s.select(req)
        out[f"in_process_{name}_per_s"] = n / (time.perf_counter() - t0)
    # inside a Ray actor holding a Selector, as the app's selector replica does (its host calls select the same way)
    import ray

    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, ignore_reinit_error=True,
             runtime_env={"env_vars": {"PYTHONPATH": str(ROOT)}})
    actor = ray.remote(SelectorActor).remote({"seed": 0, "costs": {cands[0]: 20.0, cands[1]: 0.6}}, cands)
    ray.get(actor.bench.remote(1000, cands))  # warm-up
    out["in_actor_thompson_per_s"] = ray.get(actor.bench.remote(args.decisions, cands))
    out["target_per_s"] = 20_000
    ray.kill(actor)
    print(json.dumps(out, indent=1), flush=True)
    return out


def _load(url: str, key: str, rate: float, duration: float, concurrency: int) -> dict:
    """Run benchmarks/loadgen.py in its own process (raw asyncio HTTP/1.1, open loop); its JSON result."""
    import subprocess

    cmd = [sys.executable, str(ROOT / "benchmarks" / "loadgen.py"), "--url", url, "--key", key, "--rate", str(rate),
           "--duration", str(duration), "--concurrency", str(concurrency), "--warmup", "3"]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


@dataclass(frozen=True)
class LatencySetup:
    """One way of serving ``/route``; each is measured on a Ray cluster of its own, since Ray Serve reads
    its flags from the environment when its processes start."""

    selector_in_ingress: bool
    """serving.selector_in_ingress: the selector replica answers HTTP (no actor hop) or a separate ingress does."""
    env: dict[str, str]
    """Ray Serve environment flags (ray/serve/_private/constants.py of Ray 2.60)."""
    direct: bool = False
    """Send to the ingress replica's own HTTP port (direct ingress) instead of the Serve proxy's."""
    access_log: bool = True
    """Serve's per-request access log line in the replica (and proxy)."""


DIRECT = {"RAY_SERVE_ENABLE_DIRECT_INGRESS": "1"}  # cluster-wide: controller, proxy and replicas read it
MAIN_LOOP = {"RAY_SERVE_RUN_USER_CODE_IN_SEPARATE_THREAD": "0"}  # per replica (serve/config.yaml sets it)
LATENCY_SETUPS = {
    # before: proxy -> Ingress replica -> selector replica (two actor hops behind the HTTP proxy)
    "two_hop": LatencySetup(False, {}),
    # serving.selector_in_ingress: proxy -> the selector replica, which answers HTTP itself
    "one_hop": LatencySetup(True, {}),
    "one_hop_no_access_log": LatencySetup(True, {}, access_log=False),
    # direct ingress: the ingress replica's own uvicorn server, no proxy
    "direct_two_hop": LatencySetup(False, DIRECT, direct=True, access_log=False),
    "direct": LatencySetup(True, DIRECT, direct=True, access_log=False),
    # ... and the user code on the replica's main event loop (no hand-over to a second loop's thread)
    "direct_main_loop_access_log": LatencySetup(True, {**DIRECT, **MAIN_LOOP}, direct=True),
    "throughput_optimized": LatencySetup(True, {"RAY_SERVE_THROUGHPUT_OPTIMIZED": "1"}, direct=True, access_log=False),
    "direct_main_loop": LatencySetup(True, {**DIRECT, **MAIN_LOOP}, direct=True, access_log=False),
}


def latency_child(name: str, args: argparse.Namespace) -> dict:
    """One setup's latencies at each rate (runs in a process of its own; see bench_latency)."""
    import importlib

    import ray
    from ray import serve

    from rlrouter.distributed.cluster import direct_ingress_port
    from rlrouter.pool import read_pool_config

    setup = LATENCY_SETUPS[name]
    os.environ.update(setup.env)  # before ray.init: the controller, proxy and replicas inherit them
    ray.init(num_cpus=4, include_dashboard=False, log_to_driver=False, ignore_reinit_error=True,
             runtime_env={"env_vars": {"PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1", **setup.env}})
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    serve.start(http_options={"host": "127.0.0.1", "port": port})
    app_mod = importlib.import_module("serve.app")
    state = ROOT / "outputs" / "bench" / "selector_state.json"
    state.parent.mkdir(parents=True, exist_ok=True)
    for p in (state, Path(str(state) + ".wal")):
        p.unlink(missing_ok=True)
    pool = read_pool_config(ROOT / "conf" / "pool" / "routellm_replay.yaml")
    serve.run(app_mod.build_app({"pool": pool, "selector": {"storage_path": str(state)},
                                 "serving": {"api_keys": [{"key": "k-bench", "user_id": "bench"}], "dev": True,
                                             "selector_in_ingress": setup.selector_in_ingress}}),
              name="bench", route_prefix="/", logging_config={"enable_access_log": setup.access_log})
    if setup.direct:
        port = direct_ingress_port("bench", port)
    url = f"http://127.0.0.1:{port}/route"
    out = {"setup": {"name": name, **asdict(setup)}, "url": url, "load_average_before": os.getloadavg(), "rates": {}}
    for rate in args.rates:
        r = _load(url, "k-bench", rate, args.duration, args.concurrency)
        ms = np.array(r["latencies_ms"])
        out["rates"][str(rate)] = {"target_rate_per_s": rate, "achieved_rate_per_s": r["achieved_rate_per_s"],
                                   "requests": len(ms), "errors": r["errors"], "first_error": r["first_error"],
                                   "p50_ms": float(np.percentile(ms, 50)), "p90_ms": float(np.percentile(ms, 90)),
                                   "p99_ms": float(np.percentile(ms, 99)), "max_ms": float(ms.max()),
                                   "loadgen_cpu_share": r["loadgen_cpu_share"]}
        print(f"{name} rate {rate}: " + json.dumps(out["rates"][str(rate)]), file=sys.stderr, flush=True)
    out["load_average_after"] = os.getloadavg()
    serve.delete("bench")
    serve.shutdown()
    ray.shutdown()
    return out


def bench_latency(args: argparse.Namespace) -> dict:
    """``POST /route`` latency of each of ``--setups``, one after another, each on its own Ray cluster."""
    import subprocess

    out = {"load_generator": "benchmarks/loadgen.py (separate process, raw asyncio HTTP/1.1 keep-alive, open loop; "
                             "latency from each request's scheduled send time)",
           "max_concurrency": args.concurrency, "duration_s": args.duration, "targets_ms": {"p50": 5, "p99": 20},
           "setups": {}}
    for name in args.setups:
        cmd = [sys.executable, str(Path(__file__).resolve()), "--latency-child", name, "--duration", str(args.duration),
               "--concurrency", str(args.concurrency), "--rates", ",".join(str(r) for r in args.rates)]
        env = {**os.environ, **LATENCY_SETUPS[name].env}
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
        if proc.returncode != 0:
            raise RuntimeError(f"latency setup {name} failed:\n{proc.stderr[-4000:]}")
        out["setups"][name] = json.loads(proc.stdout.strip().splitlines()[-1])
        print("\n".join(line for line in proc.stderr.splitlines() if " rate " in line), flush=True)
    # the last setup named is the one the figures in docs/serve.md describe
    out["rates"] = out["setups"][args.setups[-1]]["rates"]
    out["final_setup"] = args.setups[-1]
    print(json.dumps({n: {r: {k: v[k] for k in ("achieved_rate_per_s", "p50_ms", "p99_ms", "errors")}
                          for r, v in s["rates"].items()} for n, s in out["setups"].items()}, indent=1), flush=True)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--parts", default="regret,decisions,latency")
    ap.add_argument("--data", default=str(ROOT.parent / "shared" / "data" / "routellm"))
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--alphas", type=lambda s: [float(x) for x in s.split(",")], default=[0.0, 0.1, 0.3])
    ap.add_argument("--decisions", type=int, default=100_000)
    ap.add_argument("--rates", type=lambda s: [float(x) for x in s.split(",")], default=[20.0, 200.0],
                    help="target request rates of the latency part (requests/s)")
    ap.add_argument("--duration", type=float, default=20.0)
    ap.add_argument("--concurrency", type=int, default=64)
    ap.add_argument("--setups", type=lambda s: s.split(","), default=["two_hop", "direct_main_loop"],
                    help=f"latency part: ways of serving /route, measured in turn; the last is reported as the "
                         f"result ({', '.join(LATENCY_SETUPS)})")
    ap.add_argument("--latency-child", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.latency_child:
        print(json.dumps(latency_child(args.latency_child, args)))
        return
    RESULTS.mkdir(parents=True, exist_ok=True)
    out_path = RESULTS / "selector.json"
    results = json.loads(out_path.read_text()) if out_path.exists() else {}
    results["machine"] = {"cpus": os.cpu_count(), "platform": platform.platform(), "python": platform.python_version()}
    for part in args.parts.split(","):
        fn = {"regret": bench_regret, "decisions": bench_decisions, "latency": bench_latency}[part]
        results[part] = fn(args)
        results[part]["measured_at"] = time.strftime("%Y-%m-%d %H:%M:%S")
        write_result(out_path, results, MEASURES, indent=1)
    print(f"wrote {out_path}")


if __name__ == "__main__":
    main()
