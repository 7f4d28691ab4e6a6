"""Off-policy evaluation on RouteLLM's logged outcomes: do IPS, SNIPS and DR intervals cover the truth?

The test split of the evaluate_router job (same data, split and seed) holds every candidate's
outcome on every prompt, so bandit feedback can be simulated and the answer is known. For each
logging policy (epsilon-soft over a baseline router) and seed, the script draws one logged action per
prompt, estimates each target router's quality from that log alone, and checks the estimate against:

* ``conditional``: the target's true replayed quality on the same prompts (only the actions are
  random); the CLT intervals include the prompts' own variance, so they are conservative here;
* ``population``: prompts are resampled with replacement each seed and the truth is the target's
  quality on the whole test split, the quantity a 95% interval is meant to cover 95% of the time.

Writes benchmarks/results/ope.json and ope.png. Run from the project root:

    HF_HUB_OFFLINE=1 python benchmarks/bench_ope.py [--seeds 200] [--boot-seeds 30]
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]

from rlrouter.provenance import write_result  # noqa: E402

# what this benchmark's figures depend on (rlrouter.provenance: the staleness report lists its results when these change)
MEASURES = ("benchmarks/bench_ope.py", "rlrouter/eval")


def routers_on_test(max_prompts: int, seed: int):
    """The job's split, and decisions of the baselines on the test split (embeddings come from the cache)."""
    from hydra import compose, initialize_config_dir

    from rlrouter.routers.baselines import oracle_decisions
    from rlrouter.config import to_plain_dict
    from rlrouter.eval.job import question_embedder, load_eval_set, split_by_question, subsample
    from rlrouter.routers.base import RouterContext, ThresholdRouter, build_router

    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
        cfg = to_plain_dict(compose(config_name="evaluate_router", overrides=["output_dir=/tmp/unused"]))
    ev = cfg["eval"]
    full = subsample(load_eval_set(ev), max_prompts, seed)
    tr, te = split_by_question(full, ev["split"]["test_fraction"], ev["split"]["seed"])
    train, test = full.subset(tr), full.subset(te)
    weak, strong = full.index(ev["weak"]), full.index(ev["strong"])
    ctx = RouterContext(candidates=full.names, weak=weak, strong=strong, train=train, embed=question_embedder(ev), seed=seed)
    decisions = {}
    for name in ("always_weak", "always_strong", "random", "knn", "mf"):
        spec = dict(ev["baselines"][name])
        r = build_router(spec, ctx)
        r.fit(train)
        if isinstance(r, ThresholdRouter) and name != "random":
            r.calibrate(test.prompts, float(ev["operating_strong_share"]))
        decisions[name] = np.asarray(r.decide(test.prompts))
    decisions["oracle"] = oracle_decisions(test.scores, test.costs)
    return test, decisions


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seeds", type=int, default=200)
    ap.add_argument("--boot-seeds", type=int, default=30, help="seeds that also get bootstrap intervals")
    ap.add_argument("--n-boot", type=int, default=200)
    ap.add_argument("--max-prompts", type=int, default=0, help="subsample the data (0 = all)")
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results"))
    args = ap.parse_args()

    from rlrouter.eval.ope import (ESTIMATORS, bootstrap_indices, crossfit_reward_model, epsilon_soft, evaluate_all,
                                   one_hot, simulate_logging)

    t0 = time.perf_counter()
    test, decisions = routers_on_test(args.max_prompts, 0)
    n, m = test.scores.shape
    rows = np.arange(n)
    truth_full = {k: float(test.scores[rows, d].mean()) for k, d in decisions.items()}
    settings = [("always_weak", 0.1), ("always_weak", 0.3), ("always_weak", 0.5), ("knn", 0.3)]
    targets = ["mf", "knn", "always_strong", "random", "oracle"]
    results = []
    for base, eps in settings:
        for mode in ("conditional", "population"):
            rec = {t: {f"{e}/{ci}": {"covered": 0, "trials": 0, "err": [], "width": []}
                       for e in ESTIMATORS for ci in ("clt", "bootstrap")} for t in targets if t != base}
            for s in range(args.seeds):
                rng = np.random.default_rng(10_000 * s + int(100 * eps))
                idx = rows if mode == "conditional" else rng.integers(0, n, size=n)
                scores = test.scores[idx]
                sources = [test.sources[i] for i in idx]
                pi0 = epsilon_soft(decisions[base][idx], m, eps)
                log = simulate_logging(pi0, scores, rng)
                q_hat = crossfit_reward_model(sources, log, m, seed=s)
                boot_idx = bootstrap_indices(n, args.n_boot, s) if s < args.boot_seeds else None
                for t in rec:
                    dec = decisions[t][idx]
                    truth = float(scores[rows, dec].mean()) if mode == "conditional" else truth_full[t]
                    cis = ("clt", "bootstrap") if s < args.boot_seeds else ("clt",)
                    for ci in cis:
                        for e, est in evaluate_all(one_hot(dec, m), log, q_hat, ci=ci, n_boot=args.n_boot,
                                                   boot_idx=boot_idx).items():
                            r = rec[t][f"{e}/{ci}"]
                            r["trials"] += 1
                            r["covered"] += int(est.covers(truth))
                            r["err"].append(est.value - truth)
                            r["width"].append(est.hi - est.lo)
            for t, by in rec.items():
                for key, r in by.items():
                    err = np.array(r["err"])
                    results.append({
                        "logging_base": base, "epsilon": eps, "mode": mode, "target": t,
                        "estimator": key.split("/")[0], "ci": key.split("/")[1], "trials": r["trials"],
                        "coverage": r["covered"] / r["trials"] if r["trials"] else None,
                        "bias": float(err.mean()) if len(err) else None,
                        "rmse": float(np.sqrt((err ** 2).mean())) if len(err) else None,
                        "mean_width": float(np.mean(r["width"])) if r["width"] else None})
            print(f"done: {base} eps={eps} {mode} ({time.perf_counter() - t0:.0f}s)", flush=True)

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    summary = {
        "what": "coverage of 95% intervals of IPS/SNIPS/DR estimates of a router's quality from simulated "
                "epsilon-soft logs of RouteLLM's test split (GSM8K + MMLU, GPT-4 vs Mixtral)",
        "test_prompts": n, "seeds": args.seeds, "bootstrap_seeds": args.boot_seeds, "n_boot": args.n_boot,
        "level": 0.95, "true_quality": truth_full, "results": results,
        "seconds": round(time.perf_counter() - t0, 1),
    }
    write_result(out / "ope.json", summary, MEASURES, indent=2)
    plot(summary, out / "ope.png")
    worst = min((r for r in results if r["ci"] == "clt" and r["mode"] == "population"), key=lambda r: r["coverage"])
    print(f"wrote {out / 'ope.json'} and {out / 'ope.png'}; lowest population CLT coverage: "
          f"{worst['coverage']:.3f} ({worst['estimator']}, target {worst['target']}, log {worst['logging_base']} "
          f"eps={worst['epsilon']})")


def plot(summary: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    res = [r for r in summary["results"] if r["mode"] == "population"]
    settings = sorted({(r["logging_base"], r["epsilon"]) for r in res})
    fig, axes = plt.subplots(1, 2, figsize=(14, 5))
    for ax, ci in zip(axes, ("clt", "bootstrap")):
        labels, width = [], 0.25
        for k, est in enumerate(("ips", "snips", "dr")):
            xs, ys = [], []
            for i, (base, eps) in enumerate(settings):
                cov = [r["coverage"] for r in res if r["logging_base"] == base and r["epsilon"] == eps
                       and r["estimator"] == est and r["ci"] == ci and r["coverage"] is not None]
                xs.append(i + (k - 1) * width)
                ys.append(np.mean(cov) if cov else np.nan)
            ax.bar(xs, ys, width=width, label=est.upper())
        labels = [f"{b}\neps={e}" for b, e in settings]
        ax.set_xticks(range(len(settings)), labels, fontsize=8)
        ax.axhline(summary["level"], color="k", ls="--", lw=1, label="nominal 95%")
        ax.set_ylim(0.5, 1.0)
        ax.set_ylabel("coverage (mean over target routers)")
        ax.set_title(f"{ci.upper()} intervals, prompts resampled (population truth)")
        ax.legend(fontsize=8, loc="lower right")
    fig.suptitle(f"Off-policy evaluation on RouteLLM test split ({summary['test_prompts']} prompts, "
                 f"{summary['seeds']} seeds; bootstrap: {summary['bootstrap_seeds']})")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


if __name__ == "__main__":
    main()
