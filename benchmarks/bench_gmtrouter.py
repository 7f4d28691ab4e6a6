"""GMTRouter vs baselines on held-out interactions of the personalization set.

For each seed: simulate the personalization set over RouteLLM's logged outcomes, build the graph,
hold out 25% of users entirely (few-shot) and, for the rest, the latest 25% of conversations (test)
and the 15% before them (validation). Then measure pairwise accuracy and AUC on the test turns for

- GMTRouter (HGT + predictor, best validation AUC),
- global Thompson sampling (posterior mean; the sampled decision's accuracy is reported too),
- a per-user Beta posterior (shrunk to the global one),
- an MLP on query embeddings (no user),
- the best single model,

and the few-shot curve: accuracy / AUC on the held-out users' test turns when they have only their
first k interactions in the graph (GMTRouter, no retraining) or in their posterior (per-user Beta).

    python benchmarks/bench_gmtrouter.py                 # 2 seeds, JSON + PNG in benchmarks/results/
    python benchmarks/bench_gmtrouter.py --seeds 1 --epochs 60

MiniLM embeddings are cached on disk by text hash, so only the first run pays for them.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402
import torch  # noqa: E402

from rlrouter.gmt.baselines import BestSingle, GlobalThompson, PerUserBeta, QueryMLP  # noqa: E402
from rlrouter.distributed.resources import ResourceSpec  # noqa: E402
from rlrouter.gmt.job import GMTDataConfig, GMTJobConfig, prepare  # noqa: E402
from rlrouter.gmt.model import GMTModelConfig  # noqa: E402
from rlrouter.gmt.simulate import SimConfig  # noqa: E402
from rlrouter.gmt.train import (GroupBatch, GMTTrainConfig, evaluate, first_k_interactions, fit,  # noqa: E402
                                pairwise_metrics, temporal_split, to_jsonable)

from rlrouter.provenance import write_result  # noqa: E402

# what this benchmark's figures depend on (rlrouter.provenance: the staleness report lists its results when these change)
MEASURES = ("benchmarks/bench_gmtrouter.py", "rlrouter/gmt")

RESULTS = Path(__file__).resolve().parent / "results"
METHODS = ("gmtrouter", "global_thompson", "per_user_beta", "query_mlp", "best_single")


def metrics_of(scores: torch.Tensor, batch: GroupBatch) -> dict[str, float]:
    return pairwise_metrics(scores.detach().numpy(), batch.ratings.numpy(), batch.valid.numpy())


def run_seed(seed: int, args) -> dict:
    t0 = time.perf_counter()
    job = GMTJobConfig(seed=seed, data=GMTDataConfig(sim=SimConfig(seed=seed), few_shot_ks=args.ks),
                       model=GMTModelConfig(),
                       train=GMTTrainConfig(epochs=args.epochs, seed=seed, eval_every=2, patience=40,
                                         threads=args.threads),
                       resources=ResourceSpec(ray_train=False))
    with tempfile.TemporaryDirectory() as tmp:
        prep = prepare(job, Path(tmp))
    g, sp = prep.graph, prep.split
    t_prep = time.perf_counter() - t0
    seen = sp.train | sp.val
    test = GroupBatch.from_groups(g, g.groups(sp.test))
    train_b = GroupBatch.from_groups(g, g.groups(sp.train))
    val_b = GroupBatch.from_groups(g, g.groups(sp.val))

    t1 = time.perf_counter()
    def progress(row, _m, improved):
        if row["epoch"] % 20 == 0:
            print(json.dumps({"seed": seed, **{k: round(v, 4) for k, v in row.items()}, "best": improved,
                              "t": round(time.perf_counter() - t1, 1)}), flush=True)

    res = fit(g, sp, job.model, job.train, on_epoch=progress)
    t_fit = time.perf_counter() - t1
    model = res.model
    out: dict = {"seed": seed, "graph": g.counts(), "test_pairs": None, "methods": {}}
    out["methods"]["gmtrouter"] = evaluate(model, g, seen, test)

    glob = GlobalThompson(g, seen)
    out["methods"]["global_thompson"] = metrics_of(glob.scores(test), test)
    torch.manual_seed(seed)
    draws = [metrics_of(glob.sample(test), test)["accuracy"] for _ in range(20)]
    out["methods"]["global_thompson"]["sampled_decision_accuracy"] = float(np.mean(draws))
    out["methods"]["per_user_beta"] = metrics_of(PerUserBeta(g, seen).scores(test), test)
    mlp = QueryMLP.fit(g, train_b, val_b, seed=seed)
    out["methods"]["query_mlp"] = metrics_of(mlp.scores(g, test), test)
    best = BestSingle(g, GroupBatch.from_groups(g, g.groups(seen)))
    out["methods"]["best_single"] = {**metrics_of(best.scores(test), test), "model": best.name}
    out["test_pairs"] = out["methods"]["gmtrouter"]["pairs"]

    # Per hidden profile: who gains from the graph?
    sim_profiles = prep.profiles
    if sim_profiles:
        by_kind: dict[str, dict] = {}
        h = model.encode(g.x_dict(), g.edge_index_dict(seen))
        s_gnn = model.score(h, test.users, test.queries, test.llms).detach()
        s_beta = PerUserBeta(g, seen).scores(test)
        s_mlp = mlp.scores(g, test)
        kinds = np.array([sim_profiles[g.users[u]] for u in test.users.tolist()])
        for kind in sorted(set(kinds)):
            rows = torch.from_numpy(np.nonzero(kinds == kind)[0])
            sub = test.subset(rows)
            by_kind[kind] = {"gmtrouter": metrics_of(s_gnn[rows], sub),
                             "per_user_beta": metrics_of(s_beta[rows], sub),
                             "query_mlp": metrics_of(s_mlp[rows], sub)}
        out["by_profile"] = by_kind

    # Few-shot: held-out users with only their first k interactions.
    new_split = temporal_split(g, 0.0, job.train.test_frac, users=torch.tensor(prep.new_users))
    new_test = GroupBatch.from_groups(g, g.groups(new_split.test))
    curve = []
    for k in args.ks:
        vis = seen.clone()
        for u in prep.new_users:
            vis[first_k_interactions(g, u, k, exclude=new_split.test)] = True
        row = {"k": k, "gmtrouter": evaluate(model, g, vis, new_test),
               "per_user_beta": metrics_of(PerUserBeta(g, vis).scores(new_test), new_test)}
        curve.append(row)
    flat = {"global_thompson": metrics_of(GlobalThompson(g, seen).scores(new_test), new_test),
            "query_mlp": metrics_of(mlp.scores(g, new_test), new_test),
            "best_single": metrics_of(best.scores(new_test), new_test)}
    out["few_shot"] = {"curve": curve, "user_independent": flat, "new_users": len(prep.new_users),
                       "test_pairs": metrics_of(best.scores(new_test), new_test)["pairs"]}
    out["train"] = {"best_epoch": res.best_epoch, "epochs_run": res.history[-1]["epoch"], "val": res.best_val,
                    "num_layers": model.cfg.num_layers}
    out["seconds"] = {"prepare": t_prep, "fit": t_fit, "total": time.perf_counter() - t0}
    return out


def summarize(runs: list[dict]) -> dict:
    summ: dict = {}
    for m in METHODS:
        for key in ("auc", "accuracy"):
            vals = [r["methods"][m][key] for r in runs]
            summ.setdefault(m, {})[key] = {"mean": statistics.fmean(vals),
                                           "std": statistics.pstdev(vals) if len(vals) > 1 else 0.0}
    gnn = [r["methods"]["gmtrouter"]["auc"] for r in runs]
    summ["gmtrouter_beats_every_baseline_on_auc"] = all(
        statistics.fmean(gnn) > summ[m]["auc"]["mean"] for m in METHODS[1:])
    summ["gmtrouter_beats_every_baseline_on_auc_every_seed"] = all(
        r["methods"]["gmtrouter"]["auc"] > max(r["methods"][m]["auc"] for m in METHODS[1:]) for r in runs)
    return summ


def plot(report: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (a1, a2) = plt.subplots(1, 2, figsize=(12, 4.5))
    summ = report["summary"]
    x = np.arange(len(METHODS))
    for off, key, color in ((-0.2, "auc", "tab:blue"), (0.2, "accuracy", "tab:orange")):
        a1.bar(x + off, [summ[m][key]["mean"] for m in METHODS], 0.4,
               yerr=[summ[m][key]["std"] for m in METHODS], label=f"pairwise {key}", color=color)
    a1.set_xticks(x, [m.replace("_", "\n") for m in METHODS])
    a1.axhline(0.5, color="grey", lw=0.8, ls="--")
    a1.set_ylim(0.4, 1.0)
    a1.set_title(f"Held-out turns ({len(report['runs'])} seeds)")
    a1.legend()
    ks = [row["k"] for row in report["runs"][0]["few_shot"]["curve"]]
    for name, color in (("gmtrouter", "tab:blue"), ("per_user_beta", "tab:green")):
        acc = np.array([[row[name]["accuracy"] for row in r["few_shot"]["curve"]] for r in report["runs"]])
        a2.plot(ks, acc.mean(0), marker="o", color=color, label=name)
    for name, style in (("query_mlp", ":"), ("global_thompson", "--"), ("best_single", "-.")):
        v = statistics.fmean(r["few_shot"]["user_independent"][name]["accuracy"] for r in report["runs"])
        a2.axhline(v, ls=style, color="grey", label=name)
    a2.set_xscale("symlog", linthresh=2)
    a2.set_xticks(ks, [str(k) for k in ks])
    a2.set_xlabel("k = interactions of the new user in the graph")
    a2.set_ylabel("pairwise accuracy on the new users' test turns")
    a2.set_title("Few-shot adaptation (no retraining)")
    a2.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--seeds", type=int, default=2)
    p.add_argument("--epochs", type=int, default=160)
    p.add_argument("--threads", type=int, default=1,
                   help="torch threads; 1 is fastest for graphs this size on a busy 2-core box")
    p.add_argument("--ks", type=int, nargs="+", default=[0, 2, 4, 8, 16, 32, 64])
    p.add_argument("--out", type=Path, default=RESULTS / "gmtrouter.json")
    args = p.parse_args(argv)
    t0 = time.perf_counter()
    runs = []
    for seed in range(args.seeds):
        r = run_seed(seed, args)
        print(json.dumps({"seed": seed, **{m: round(r["methods"][m]["auc"], 4) for m in METHODS},
                          "seconds": round(r["seconds"]["total"], 1)}), flush=True)
        runs.append(r)
    report = {"benchmark": "gmtrouter", "config": {"seeds": args.seeds, "epochs": args.epochs, "ks": args.ks,
                                                   "threads": args.threads, "sim": SimConfig().__dict__},
              "summary": summarize(runs), "runs": runs, "seconds": time.perf_counter() - t0}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    write_result(args.out, to_jsonable(report), MEASURES, indent=1)
    plot(report, args.out.with_suffix(".png"))
    print(json.dumps(to_jsonable(report["summary"]), indent=1))
    return report


if __name__ == "__main__":
    main()
