"""Routers on MMLU subjects they never saw: leave-subjects-out evaluation over several seeds.

For each seed the evaluate_router job holds out ``--holdout`` MMLU subjects of ``../shared/data`` (drawn
with that seed; GSM8K and the other subjects train), trains every router on the rest and replays all of
them on the held-out subjects, with paired bootstrap intervals against random and the best baseline.
This script runs the job per seed, then writes the per-seed reports under ``outputs/unseen_subjects/``
and the summary to ``unseen_subjects.json`` and ``.md`` beside its study (``STUDY_RESULTS``).

    HF_HUB_OFFLINE=1 python benchmarks/bench_unseen_subjects.py [--seeds 0 1 2] [--holdout 10]
        [--intent outputs/train_intent/supervised_seed0/supervised] [--router-r1 CHECKPOINT --test-subset 200]
        [--routers encoder --name unseen_subjects_encoder]     # only these routers (and the baselines)
        [--routers form_encoder --name unseen_subjects_encoder --out outputs/unseen_encoder --reuse-checkpoints]

Routers besides the baselines (always weak/strong, random, kNN, MF): ``probe_form`` (two logistic heads on
prompt-form features), ``probe_llm`` and ``probe_form_llm`` (on SmolLM2-135M's confidence on the question,
alone and with the form features; conf/eval/router/probe.yaml), ``probe_form_mmlu`` and ``mf_mmlu`` (the same,
trained on the MMLU rows only: GSM8K in training teaches embedding routers that mathematics needs the strong
model, which MMLU's logs contradict), ``probe_emb`` (the same on MiniLM embeddings), ``probe`` (both),
``ensemble`` (probe + MF + kNN, standardised scores), the contextual selector warmed up on the training split
(``selector``: then frozen; ``selector_online``: learning online over the held-out stream), the intent
classifier with the cost-aware map when ``--intent`` names a checkpoint, and a trained Router-R1 policy when
``--router-r1`` names one (vLLM on CPU: with ``--test-subset``, every router is scored on that subset and the
results go to ``unseen_subjects_subset<N>.json`` / ``.md``; a policy its run evaluated after a written call to
Mixtral, ``eval.first_call_written``, is run that way and routes to the last candidate it called;
``--router-r1-penalty`` sets its greedy frequency penalty; ``--router-r1-score escalation`` scores such a
policy instead as a threshold router, ``router_r1_odds``, on its log-odds of escalating after Mixtral's reply, so
it gets an APGR and a curve like the others). ``--routers`` runs only the named routers, from
those and ``EXTRA_ROUTERS`` (``encoder``: RouteLLM's BERT router on the intent stack, MiniLM + LoRA trained
supervised then with PPO; about 8 min a seed on 2 CPU cores, so not in the default set; ``form_encoder``: the
equal-weight ensemble of ``probe_form`` and ``encoder``, which it adds to the run before itself, reusing their fitted
routers; ``probe_form_options``: the form probe with option-match features, conf/eval/router/probe_form_options.yaml;
``options_encoder``: the ensemble of that probe and ``encoder``).
``--reuse-checkpoints`` loads an encoder a previous run saved under ``--out`` instead of training it again.
"""

from __future__ import annotations

import argparse
import json
import math
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
STUDY = "2026-11-offline-routers-unseen-subjects"
"""The dated study this script belongs to (docs/experiments/): its results go there; make bench leaves it out."""
STUDY_RESULTS = ROOT / "docs" / "experiments" / STUDY / "results"

from rlrouter.provenance import write_result  # noqa: E402

# what this benchmark's figures depend on (rlrouter.provenance: the staleness report lists its results when these change)
MEASURES = ("benchmarks/bench_unseen_subjects.py", "rlrouter/eval")
OUT = STUDY_RESULTS
MIN_GAP = 0.05  # a split whose always-strong beats always-weak by less has no gap for APGR to measure

ROUTERS = {
    "probe_form": {"type": "probe", "features": ["form"], "head": "two_heads"},
    # a small local LLM's confidence on the question (rlrouter.routers.confidence), alone and with the form
    "probe_llm": {"type": "probe", "features": ["llm"], "head": "two_heads"},
    "probe_form_llm": {"type": "probe", "features": ["form", "llm"], "head": "two_heads"},
    # trained on the MMLU rows only: measures the GSM8K confound (job.train_rows_for), MF included for fairness
    "probe_form_mmlu": {"type": "probe", "features": ["form"], "head": "two_heads", "train_prefix": "mmlu/"},
    "mf_mmlu": {"type": "mf", "dim": 128, "epochs": 30, "lr": 0.001, "weight_decay": 1.0e-5, "batch_size": 256,
                "train_prefix": "mmlu/"},
    "probe_emb": {"type": "probe", "features": ["embedding"], "head": "two_heads"},
    "probe": {"type": "probe", "features": ["embedding", "form"], "head": "two_heads"},
    "ensemble": {"type": "ensemble", "members": {
        "probe": {"type": "probe", "features": ["embedding", "form"], "head": "two_heads"},
        "mf": {"type": "mf", "dim": 128, "epochs": 30, "lr": 0.001, "weight_decay": 1.0e-5, "batch_size": 256},
        "knn": {"type": "knn", "k": 20}}},
    "selector": {"type": "selector", "warmup": True,
                 "config": {"use_contextual": True, "cost_awareness": True, "cost_weight": 0.2,
                            "enable_personalization": False}},
    "selector_online": {"type": "selector", "warmup": True, "online": True,
                        "config": {"use_contextual": True, "cost_awareness": True, "cost_weight": 0.2,
                                   "enable_personalization": False}},
}

# routers run only when named with --routers (minutes per seed on CPU, or, for probe_form_options, a first pass
# of MiniLM over every question and option, 3.2 min here, then seconds)
EXTRA_ROUTERS = {
    # the form probe with option-match features: question-option and option-option similarities in MiniLM space
    "probe_form_options": {"type": "probe", "features": ["form", "options"], "head": "two_heads"},
    # RouteLLM's BERT router on the intent stack: MiniLM + LoRA, supervised, then PPO (rlrouter.routers.encoder_router)
    "encoder": {"type": "encoder"},
    # the two trained routers of different kinds, equal weights on their training-standardised scores; the members
    # are the rows fitted earlier in the run (ref), so the encoder trains once
    "form_encoder": {"type": "ensemble", "members": {"form": {"ref": "probe_form"}, "encoder": {"ref": "encoder"}}},
    # the same with the option-match features in the probe
    "options_encoder": {"type": "ensemble", "members": {"form": {"ref": "probe_form_options"},
                                                        "encoder": {"ref": "encoder"}}},
}


def with_refs(names: list[str]) -> dict[str, dict]:
    """The named routers' specs in order, each preceded by the routers its ensemble members ``ref``."""
    known = {**ROUTERS, **EXTRA_ROUTERS}
    out: dict[str, dict] = {}

    def add(name: str) -> None:
        for member in (known[name].get("members") or {}).values():
            if "ref" in member and member["ref"] not in out:
                add(member["ref"])
        out.setdefault(name, known[name])

    for n in names:
        add(n)
    return out


def run_seed(seed: int, holdout: int, intent: str | None, out_dir: Path, router_r1: str | None = None,
             test_subset: int = 0, routers: dict | None = None, reuse_checkpoints: bool = False,
             router_r1_env: dict | None = None, router_r1_score: str = "route") -> dict:
    """The evaluate_router job on this seed's split: the baselines, then ``routers`` (default ``ROUTERS``).
    ``reuse_checkpoints``: an encoder router loads the checkpoint an earlier run of this seed saved under
    ``out_dir`` (``<name>_checkpoint``) instead of training again. ``router_r1_env``: episode settings over
    those the Router-R1 checkpoint's run trained with; ``router_r1_score``: ``escalation`` scores it as the
    threshold router ``router_r1_odds`` on its log-odds of escalating after the cheap reply, instead of its route."""
    from hydra import compose, initialize_config_dir

    from rlrouter.eval.job import run

    routers = dict(ROUTERS if routers is None else routers)
    for name, spec in routers.items():
        saved = out_dir / f"{name}_checkpoint"  # where the encoder router of that name saved itself
        if reuse_checkpoints and spec.get("type") == "encoder" and "checkpoint" not in spec and saved.is_dir():
            routers[name] = {**spec, "checkpoint": str(saved)}
    if intent:
        routers["intent"] = {"type": "intent", "checkpoint": intent, "category_map": "auto", "default": "strong"}
    if router_r1:
        env = {"env": dict(router_r1_env)} if router_r1_env else {}
        if router_r1_score == "escalation":
            routers["router_r1_odds"] = {"type": "router_r1", "checkpoint": router_r1, "score": "escalation", **env}
        else:
            routers["router_r1"] = {"type": "router_r1", "checkpoint": router_r1, "default": "weak", **env}
    overrides = [f"seed={seed}", f"eval.split.seed={seed}", f"eval.split.holdout_subjects={holdout}",
                 f"eval.test_subset={test_subset}", f"output_dir={out_dir}", "command=null"]
    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
        cfg = compose(config_name="evaluate_router", overrides=overrides)
    from omegaconf import OmegaConf

    plain = OmegaConf.to_container(cfg, resolve=True)
    plain["routers"] = routers
    plain["command"] = (f"python benchmarks/bench_unseen_subjects.py (seed {seed}, {holdout} subjects held out"
                        + (f", test subset {test_subset}" if test_subset else "") + ")")
    return run(plain)


def _f(x, pct=False, digits=3):
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "–"
    return f"{100 * x:.1f}%" if pct else f"{x:.{digits}f}"


def summarize(reports: dict[int, dict]) -> dict:
    """Per router: APGR per seed and its mean, minus MF's, the bootstrap intervals against random and
    the best baseline, the share of strong calls for 95% of always-strong quality, and quality at the
    20/50/80% operating points."""
    out: dict = {"seeds": {}, "routers": {}}
    names = list(next(iter(reports.values()))["slices"]["all"]["routers"])
    for seed, rep in reports.items():
        out["seeds"][seed] = {"test_subjects": rep["data"]["split"].get("test_subjects"), "test": rep["data"]["test"],
                              "train": rep["data"]["train"], "best_baseline": rep["bootstrap"]["best_baseline"],
                              "strong_quality": rep["slices"]["all"]["strong"]["quality"],
                              "weak_quality": rep["slices"]["all"]["weak"]["quality"]}
    for name in names:
        per = {}
        for seed, rep in reports.items():
            r = rep["slices"]["all"]["routers"][name]
            b = rep["bootstrap"]["routers"].get(name, {})
            per[seed] = {"apgr": r.get("apgr"), "quality": r["quality"], "strong_share": r["shares"][rep["data"]["strong"]],
                         "random_quality_at_cost": r.get("random_quality_at_cost"),
                         **({"weak_split": r["weak_split"]} if "weak_split" in r else {}),
                         **({k: r[k] for k in ("cost_mean_all_calls", "random_quality_at_cost_all_calls") if k in r}),
                         "cost_mean": r["cost_mean"], "share_for_95pct_strong": r.get("share_for_95pct_strong"),
                         "at_share": r.get("at_share"), "seconds": (rep.get("routers") or {}).get(name, {}).get("seconds"),
                         "apgr_minus_random": b.get("apgr_minus_random"),
                         "apgr_minus_best_baseline": b.get("apgr_minus_best_baseline"),
                         "apgr_minus_mf": None if r.get("apgr") is None or "mf" not in rep["slices"]["all"]["routers"]
                         else r["apgr"] - rep["slices"]["all"]["routers"]["mf"]["apgr"]}
            info = (rep.get("routers") or {}).get(name, {})
            if "policy_routes" in info:  # Router-R1: the pool names it routed to ("none": no call)
                per[seed].update(policy_routes=info["policy_routes"], unrouted=info.get("unrouted"),
                                 **({"escalated": info["escalated"]} if "escalated" in info else {}))
            if "escalated_greedy" in info:  # the odds router: what greedy decoding did, turns with no decision point
                per[seed].update(escalated_greedy=info["escalated_greedy"], no_decision_point=info["no_decision_point"])
            if rep.get("online") and name in rep["online"]:
                per[seed]["online"] = rep["online"][name]
        # means over the seeds whose split has a gap to recover (MIN_GAP); every seed stays in per_seed
        kept = [per[s] for s in per if out["seeds"][s]["strong_quality"] - out["seeds"][s]["weak_quality"] >= MIN_GAP]
        apgrs = [p["apgr"] for p in kept if p["apgr"] is not None]
        out["routers"][name] = {"per_seed": per, "apgr_mean": float(np.mean(apgrs)) if apgrs else None,
                                "apgr_minus_mf_mean": float(np.mean([p["apgr_minus_mf"] for p in kept]))
                                if apgrs and all(p["apgr_minus_mf"] is not None for p in kept) else None,
                                "quality_mean": float(np.mean([p["quality"] for p in per.values()])),
                                "strong_share_mean": float(np.mean([p["strong_share"] for p in per.values()])),
                                "cost_mean": float(np.mean([p["cost_mean"] for p in per.values()]))}
        if all("cost_mean_all_calls" in p for p in per.values()):  # a cascade: every call it paid for
            out["routers"][name]["cost_mean_all_calls"] = float(np.mean([p["cost_mean_all_calls"] for p in per.values()]))
        if all("weak_split" in p for p in per.values()):  # which prompts it sends, pooled over every seed
            from rlrouter.eval.metrics import pooled_weak_split

            out["routers"][name]["weak_split_pooled"] = pooled_weak_split([p["weak_split"] for p in per.values()])
    return out


def markdown(summary: dict) -> str:
    seeds = list(summary["seeds"])
    lines = ["| router | APGR (mean) | APGR per seed | − MF (mean) | vs random: APGR diff [95% CI] per seed | "
             "strong share for 95% of always-strong | quality @20% / 50% / 80% strong (mean) |",
             "|---|---|---|---|---|---|---|"]
    rows = sorted(summary["routers"].items(), key=lambda kv: -(kv[1]["apgr_mean"] if kv[1]["apgr_mean"] is not None
                                                               else -1))
    for name, r in rows:
        per = r["per_seed"]
        if r["apgr_mean"] is None:
            every = (f" (${r['cost_mean_all_calls'] * 1000:.3f} with every call it made)"
                     if "cost_mean_all_calls" in r else "")
            lines.append(f"| {name} | – | – | – | – | – | quality {r['quality_mean']:.3f} at "
                         f"{100 * r['strong_share_mean']:.1f}% strong, ${r['cost_mean'] * 1000:.3f} per 1k prompts"
                         f"{every} |")
            continue
        ci = []
        for s in seeds:
            d = per[s]["apgr_minus_random"]
            ci.append("–" if not d else f"{d['value']:+.3f} [{d['lo']:+.3f}, {d['hi']:+.3f}]")
        share95 = " / ".join(_f(per[s]["share_for_95pct_strong"], pct=True) for s in seeds)
        at = [np.mean([per[s]["at_share"][k]["quality"] for s in seeds]) for k in ("0.2", "0.5", "0.8")]
        lines.append(f"| {name} | {r['apgr_mean']:.3f} | {' / '.join(_f(per[s]['apgr']) for s in seeds)} | "
                     f"{_f(r['apgr_minus_mf_mean'])} | {'; '.join(ci)} | {share95} | "
                     f"{at[0]:.3f} / {at[1]:.3f} / {at[2]:.3f} |")
    # APGR divides by the strong-weak quality gap of the split: where it is small the ratio is noise
    gaps = {s: summary["seeds"][s]["strong_quality"] - summary["seeds"][s]["weak_quality"] for s in seeds}
    lines += ["", "Strong − weak quality gap per seed: " + ", ".join(f"{s}: {g:.3f}" for s, g in gaps.items())
              + "." + "".join(f" Seed {s}'s gap is below {MIN_GAP}: its APGRs divide by it, so the means leave it out."
                              for s, g in gaps.items() if g < MIN_GAP)]
    for n, r in summary["routers"].items():
        per = r["per_seed"]
        if all("escalated_greedy" in per[s] for s in seeds):
            lines += ["", f"{n}: greedy decoding escalated on {' / '.join(str(per[s]['escalated_greedy']) for s in seeds)} "
                      f"of each seed's prompts; {' / '.join(str(per[s]['no_decision_point']) for s in seeds)} turns had no "
                      "decision point (scored by their greedy choice)."]
    pooled = {n: r["weak_split_pooled"] for n, r in summary["routers"].items()
              if (r.get("weak_split_pooled") or {}).get("value") is not None}
    if pooled:  # reports made before the job recorded weak_split have no such table
        lines += ["", "Which prompts each router sends to the strong model: the weak model's logged quality on the "
                  "prompts kept on it and on those sent, pooled over the seeds (kept - sent: 0 for a random "
                  "router; normal-approximation 95% interval):", "",
                  "| router | strong share (mean) | weak quality: kept (n) | sent (n) | kept - sent [95% CI] |",
                  "|---|---|---|---|---|"]
        for n, p in sorted(pooled.items(), key=lambda kv: -kv[1]["value"]):
            lines.append(f"| {n} | {100 * summary['routers'][n]['strong_share_mean']:.1f}% | {p['kept']:.3f} "
                         f"({p['n_kept']}) | {p['sent']:.3f} ({p['n_sent']}) | {p['value']:+.3f} "
                         f"[{p['lo']:+.3f}, {p['hi']:+.3f}] |")
    return "\n".join(lines)


def write_summary(summary: dict, name: str, measures: tuple[str, ...] = MEASURES) -> None:
    """``OUT/<name>.json`` (stamped with ``measures``) and its table ``OUT/<name>.md`` (printed)."""
    OUT.mkdir(parents=True, exist_ok=True)
    write_result(OUT / f"{name}.json", summary, measures, indent=1, default=float)
    md = markdown(summary)
    (OUT / f"{name}.md").write_text(md + "\n")
    print(md)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--holdout", type=int, default=10)
    ap.add_argument("--intent", default=None, help="an intent classifier checkpoint (adds the intent router)")
    ap.add_argument("--router-r1", default=None, help="a Router-R1 checkpoint (outputs/<run>/checkpoints/step_N): "
                                                       "adds its trained policy (vLLM on CPU: use --test-subset)")
    ap.add_argument("--router-r1-penalty", type=float, default=None,
                    help="the Router-R1 policy's greedy frequency penalty (default: its run's "
                         "rollout.env.greedy_frequency_penalty)")
    ap.add_argument("--router-r1-score", choices=("route", "escalation"), default="route",
                    help="route: the candidate the policy calls (row router_r1); escalation: a cascade-shaped "
                         "policy's log-odds of escalating after the cheap reply, cut by a threshold like the other "
                         "routers (row router_r1_odds, with APGR)")
    ap.add_argument("--test-subset", type=int, default=0, help="score every router on a seeded subset of this many "
                                                              "test prompts per seed (0 = all)")
    ap.add_argument("--routers", nargs="+", default=None, metavar="NAME",
                    help=f"run only these routers (besides the baselines), from {sorted(ROUTERS) + sorted(EXTRA_ROUTERS)}")
    ap.add_argument("--name", default=None, help="results file stem beside the study (default "
                                                 "unseen_subjects, or unseen_subjects_subset<N> with --test-subset)")
    ap.add_argument("--out", default=None, help="per-seed reports (default outputs/<name>)")
    ap.add_argument("--reuse", action="store_true", help="summarise a seed's existing report.json under --out "
                                                          "instead of running it again")
    ap.add_argument("--reuse-checkpoints", action="store_true", help="an encoder router loads the checkpoint a "
                    "previous run saved under --out (seed<N>/<name>_checkpoint) instead of training again")
    ap.add_argument("--parallel", action="store_true", help="one process per seed (on a shared machine this wins "
                                                             "CPU share; each process loads its own torch)")
    args = ap.parse_args()
    routers = None
    if args.routers:
        known = {**ROUTERS, **EXTRA_ROUTERS}
        unknown = sorted(set(args.routers) - set(known))
        if unknown:
            ap.error(f"--routers: unknown {unknown}; known: {sorted(known)}")
        routers = with_refs(args.routers)
    name = args.name or ("unseen_subjects" + (f"_subset{args.test_subset}" if args.test_subset else ""))
    out_arg = args.out  # recorded in the summary's command as given
    args.out = args.out or str(ROOT / "outputs" / name)
    r1_env = None if args.router_r1_penalty is None else {"greedy_frequency_penalty": args.router_r1_penalty}
    extra = (args.router_r1, args.test_subset, routers, args.reuse_checkpoints, r1_env, args.router_r1_score)
    t0 = time.perf_counter()
    done = {}
    if args.reuse:
        for s in args.seeds:
            path = Path(args.out) / f"seed{s}" / "report.json"
            if path.exists():
                done[s] = json.loads(path.read_text())
    todo = [s for s in args.seeds if s not in done]
    if args.parallel and todo:
        from concurrent.futures import ProcessPoolExecutor

        with ProcessPoolExecutor(max_workers=len(args.seeds)) as pool:
            futs = {s: pool.submit(run_seed, s, args.holdout, args.intent, Path(args.out) / f"seed{s}", *extra)
                    for s in todo}
            done.update({s: f.result() for s, f in futs.items()})
    else:
        done.update({s: run_seed(s, args.holdout, args.intent, Path(args.out) / f"seed{s}", *extra) for s in todo})
    reports = {s: done[s] for s in args.seeds}
    summary = summarize(reports)
    summary["command"] = "python benchmarks/bench_unseen_subjects.py " + " ".join(
        [f"--seeds {' '.join(map(str, args.seeds))}", f"--holdout {args.holdout}"]
        + ([f"--intent {args.intent}"] if args.intent else [])
        + ([f"--router-r1 {args.router_r1}"] if args.router_r1 else [])
        + ([f"--router-r1-penalty {args.router_r1_penalty:g}"] if args.router_r1_penalty is not None else [])
        + ([f"--router-r1-score {args.router_r1_score}"] if args.router_r1_score != "route" else [])
        + ([f"--test-subset {args.test_subset}"] if args.test_subset else [])
        + ([f"--routers {' '.join(args.routers)}"] if args.routers else [])
        + ([f"--name {args.name}"] if args.name else [])
        + ([f"--out {out_arg}"] if out_arg else [])
        + (["--reuse-checkpoints"] if args.reuse_checkpoints else []) + (["--parallel"] if args.parallel else []))
    summary["seconds"] = round(time.perf_counter() - t0, 1)
    previous = OUT / f"{name}.json"
    if not todo and previous.exists():  # every seed's report reused: keep the run time of the run that made them
        summary["summarised_again_s"] = summary["seconds"]
        summary["seconds"] = json.loads(previous.read_text()).get("seconds", summary["seconds"])
    write_summary(summary, name)
    print(f"{summary['seconds']} s; per-seed reports under {args.out}")


if __name__ == "__main__":
    main()
