"""The lockbox: routers trained on all the development data, read once on data no development run read.

Two steps, in this order (docs/evaluation.md, "The lockbox"):

    # 1. choose the online router's settings on development data only: leave-subjects-out splits of
    #    ../shared/data (seeds 4-9), every variant replayed as a stream; writes lockbox_development.json/.md
    python benchmarks/bench_lockbox.py --develop [--seeds 4 5 6 7 8 9]

    # 2. read the lockbox once with the chosen settings: MMLU's 10 subjects absent from ../shared/data
    #    (2,287 prompts) and MT-Bench's 80 questions (benchmarks/data/lockbox); writes lockbox.json/.md/.png
    #    and appends each reading to benchmarks/results/lockbox_ledger.jsonl (a repeat of a config warns)
    python benchmarks/bench_lockbox.py --read

    # 3. after the reading, why the online router did what it did (no choice, no ledger entry)
    python benchmarks/bench_lockbox.py --explain

Both run the evaluate_router job (rlrouter/eval/job.py); the online router is ``type: feedback``
(rlrouter/routers/online.py), learning over the test stream from the outcome of each call it made.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]

from rlrouter.provenance import write_result  # noqa: E402

# what this benchmark's figures depend on (rlrouter.provenance: the staleness report lists its results when these change)
MEASURES = ("benchmarks/bench_lockbox.py", "rlrouter/eval")
OUT = ROOT / "benchmarks" / "results"
LOCKBOX = {"mmlu": "benchmarks/data/lockbox/mmlu", "mt_bench": "benchmarks/data/lockbox/mt_bench"}

# the online router's candidate settings, compared on development splits only
VARIANTS = {
    "feedback": {"type": "feedback", "base": {"type": "mf"}, "context": "source", "prior_sd": 1.0},
    "feedback_sd0.5": {"type": "feedback", "base": {"type": "mf"}, "context": "source", "prior_sd": 0.5},
    "feedback_nobase": {"type": "feedback", "base": None, "context": "source", "prior_sd": 1.0},
    "feedback_window50": {"type": "feedback", "base": {"type": "mf"}, "context": "source", "prior_sd": 1.0,
                          "window": 50},
    "feedback_global": {"type": "feedback", "base": {"type": "mf"}, "context": "none", "prior_sd": 1.0},
}
# the offline routers read on the lockbox: the baselines of conf/eval/routellm.yaml plus the best form probe
OFFLINE = {"probe_form_options": {"type": "probe", "features": ["form", "options"], "head": "two_heads"}}


def _job(overrides: list[str], routers: dict, command: str) -> dict:
    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf

    from rlrouter.eval.job import run

    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
        cfg = compose(config_name="evaluate_router", overrides=[*overrides, "eval.ope.enabled=false", "command=null"])
    plain = OmegaConf.to_container(cfg, resolve=True)
    plain["routers"] = routers
    plain["command"] = command
    return run(plain)


def _d(x: dict | None) -> dict | None:
    return None if not x else {k: x[k] for k in ("value", "lo", "hi", "excludes_zero")}


def second_half(report: dict, online: str) -> dict:
    """The online router's second half of the stream against MF, random and the subject oracle."""
    sh = report["online"][online]["second_half"]
    b = sh["bootstrap"]["routers"]
    apgr = {k: b[k]["apgr"]["value"] for k in (online, "mf", "random", "subject_oracle") if k in b and b[k].get("apgr")}
    gap = apgr.get("subject_oracle", np.nan) - apgr["mf"]
    return {"n": sh["n"], "apgr": apgr, "quality_at_share": {k: sh["quality"][k] for k in apgr},
            "minus_mf": _d(b[online].get("apgr_minus_best_baseline")),
            "minus_random": _d(b[online].get("apgr_minus_random")),
            "closure_of_gap_to_subject_oracle": float((apgr[online] - apgr["mf"]) / gap) if gap > 0 else None}


def develop(seeds: list[int]) -> dict:
    out: dict = {"seeds": {}, "variants": sorted(VARIANTS)}
    for seed in seeds:
        rep = _job([f"seed={seed}", f"eval.split.seed={seed}", f"output_dir=outputs/lockbox_dev/seed{seed}"],
                   VARIANTS, f"python benchmarks/bench_lockbox.py --develop (seed {seed})")
        out["seeds"][seed] = {v: second_half(rep, v) for v in VARIANTS}
    out["mean_closure"] = {v: float(np.mean([out["seeds"][s][v]["closure_of_gap_to_subject_oracle"] for s in seeds]))
                           for v in VARIANTS}
    out["chosen"] = max(out["mean_closure"], key=out["mean_closure"].get)
    write_result(OUT / "lockbox_development.json", out, MEASURES, indent=1, default=float)
    table = development_table(out)
    (OUT / "lockbox_development.md").write_text(table + "\n")
    print(table)
    return out


def development_table(out: dict) -> str:
    seeds = list(out["seeds"])
    lines = ["| variant | " + " | ".join(f"seed {s}: APGR 2nd half (MF, subject oracle) | closure" for s in seeds)
             + " | mean closure |", "|---|" + "---|---|" * len(seeds) + "---|"]
    for v in out["mean_closure"]:
        cells = []
        for s in seeds:
            r = out["seeds"][s][v]
            cells.append(f"{r['apgr'][v]:.3f} ({r['apgr']['mf']:.3f}, {r['apgr']['subject_oracle']:.3f}) | "
                         f"{r['closure_of_gap_to_subject_oracle']:+.2f}")
        lines.append(f"| {v} | " + " | ".join(cells) + f" | {out['mean_closure'][v]:+.2f} |")
    lines.append(f"\nChosen: `{out['chosen']}`.")
    return "\n".join(lines)


def chosen() -> str:
    """The variant --develop picked (the best mean second-half closure on development splits)."""
    dev = OUT / "lockbox_development.json"
    if not dev.exists():
        raise SystemExit(f"{dev.relative_to(ROOT)} is missing: run --develop first (choices come before the reading)")
    return json.loads(dev.read_text())["chosen"]


def read() -> dict:
    chosen_name = chosen()
    routers = {**OFFLINE, chosen_name: VARIANTS[chosen_name]}
    out: dict = {"chosen": chosen_name, "parts": {}}
    for part, path in LOCKBOX.items():
        rep = _job(["eval.lockbox.read=true", f"eval.lockbox.data=[{path}]", f"output_dir=outputs/lockbox/{part}"],
                   routers, f"python benchmarks/bench_lockbox.py --read ({part})")
        per = rep["slices"]["all"]["routers"]
        boot = (rep["bootstrap"] or {}).get("routers", {})
        rows = {}
        for name, m in per.items():
            b = boot.get(name, {})
            rows[name] = {"apgr": m["apgr"], "quality": m["quality"], "strong_share": m["shares"].get(rep["data"]["strong"]),
                          "apgr_ci": _d(b.get("apgr")), "minus_random": _d(b.get("apgr_minus_random")),
                          "minus_mf": _d(b.get("apgr_minus_best_baseline"))}
        out["parts"][part] = {"n": rep["data"]["test"], "date": None, "lockbox": rep["lockbox"], "routers": rows,
                              "best_baseline": (rep["bootstrap"] or {}).get("best_baseline"),
                              "online_second_half": second_half(rep, chosen_name), "stream": rep["online"][chosen_name]}
        with open(ROOT / "benchmarks/results/lockbox_ledger.jsonl") as f:
            out["parts"][part]["date"] = json.loads(f.read().splitlines()[-1])["date"]
    write_result(OUT / "lockbox.json", out, MEASURES, indent=1, default=float)
    md = markdown(out)
    (OUT / "lockbox.md").write_text(md + "\n")
    plot(out, OUT / "lockbox_stream.png")
    print(md)
    return out


def explain(part: str = "mmlu") -> dict:
    """After the reading (no new choice, no ledger entry): per subject, the true strong-minus-weak gain, MF's
    mean score, the gain the online router learned by the end of the stream (its posterior-mean score, averaged
    over the subject's prompts) and its strong share there.
    Writes lockbox_explain.json/.md."""
    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf

    from rlrouter.eval.job import question_embedder, load_split
    from rlrouter.routers.base import RouterContext, build_router

    name = chosen()
    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
        cfg = compose(config_name="evaluate_router",
                      overrides=["eval.lockbox.read=true", f"eval.lockbox.data=[{LOCKBOX[part]}]"])
    ev = OmegaConf.to_container(cfg, resolve=True)["eval"]
    train, test, _ = load_split(ev, 0)
    w, s = train.index(ev["weak"]), train.index(ev["strong"])
    ctx = RouterContext(candidates=train.names, weak=w, strong=s, train=train, embed=question_embedder(ev), seed=0)
    router = build_router(dict(VARIANTS[name]), ctx)
    router.fit(train)
    dec = router.replay(test)
    src = np.array(test.sources)
    gain = test.scores[:, s] - test.scores[:, w]
    mf = np.asarray(router.base.strong_score(test.prompts))
    rows = {}
    for sub in sorted(set(src)):
        m = src == sub
        rows[sub] = {"n": int(m.sum()), "true_gain": float(gain[m].mean()), "mf_mean_score": float(mf[m].mean()),
                     "learned_gain": float(router.strong_score([p for p, k in zip(test.prompts, src) if k == sub],
                                                               [sub] * int(m.sum())).mean()),
                     "online_strong_share": float((dec[m] == s).mean())}
    tg = np.array([r["true_gain"] for r in rows.values()])
    out = {"part": part, "router": name, "subjects": rows,
           "corr_learned_vs_true": float(np.corrcoef(tg, [r["learned_gain"] for r in rows.values()])[0, 1]),
           "corr_mf_vs_true": float(np.corrcoef(tg, [r["mf_mean_score"] for r in rows.values()])[0, 1])}
    lines = ["| subject | prompts | true gain (strong - weak) | MF mean score | learned gain at the end | online strong share |",
             "|---|---|---|---|---|---|"]
    lines += [f"| {k} | {r['n']} | {r['true_gain']:+.3f} | {r['mf_mean_score']:.3f} | {r['learned_gain']:+.3f} | "
              f"{r['online_strong_share']:.2f} |" for k, r in rows.items()]
    lines.append(f"\nAcross the 10 subjects, correlation with the true gain: learned gain {out['corr_learned_vs_true']:+.2f}, "
                 f"MF's mean score {out['corr_mf_vs_true']:+.2f}.")
    write_result(OUT / "lockbox_explain.json", out, MEASURES, indent=1)
    (OUT / "lockbox_explain.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return out


def _ci(d: dict | None) -> str:
    return "–" if not d else f"{d['value']:+.3f} [{d['lo']:+.3f}, {d['hi']:+.3f}]"


def markdown(out: dict) -> str:
    online = out["chosen"]
    lines = []
    for part, p in out["parts"].items():
        lines += [f"**{part}** ({p['n']} prompts, read {p['date']}; best baseline `{p['best_baseline']}`)", "",
                  "| router | APGR | 95% interval | vs random | vs best baseline | quality | strong share |",
                  "|---|---|---|---|---|---|---|"]
        order = sorted(p["routers"].items(), key=lambda kv: -(kv[1]["apgr"] if kv[1]["apgr"] is not None else -9))
        for name, r in order:
            ci = r["apgr_ci"]
            apgr = "–" if r["apgr"] is None else f"{r['apgr']:.3f}"
            interval = "–" if not ci else f"[{ci['lo']:.3f}, {ci['hi']:.3f}]"
            lines.append(f"| {name} | {apgr} | {interval} | {_ci(r['minus_random'])} | {_ci(r['minus_mf'])} | "
                         f"{r['quality']:.3f} | {r['strong_share']:.2f} |")
        sh = p["online_second_half"]
        lines += ["", f"Online router, second half of the stream ({sh['n']} prompts, after the first half's feedback): "
                  f"APGR {sh['apgr'][online]:.3f}, MF {sh['apgr']['mf']:.3f}, random {sh['apgr']['random']:.3f}, "
                  f"subject oracle {sh['apgr'].get('subject_oracle', float('nan')):.3f}; minus MF {_ci(sh['minus_mf'])}, "
                  f"minus random {_ci(sh['minus_random'])}; closes "
                  f"{'–' if sh['closure_of_gap_to_subject_oracle'] is None else format(sh['closure_of_gap_to_subject_oracle'], '.0%')}"
                  " of MF's gap to the subject oracle.", ""]
    return "\n".join(lines)


def plot(out: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    online = out["chosen"]
    parts = list(out["parts"])
    fig, axes = plt.subplots(1, len(parts), figsize=(6 * len(parts), 4.2))
    for ax, part in zip(np.atleast_1d(axes), parts):
        st = out["parts"][part]["stream"]
        frac = np.asarray(st["regret_curve"]["fraction"])
        n = out["parts"][part]["n"]
        cq = st["cumulative_quality"]
        seen = frac * n
        ref = np.asarray(cq["subject_oracle"]) if "subject_oracle" in cq else None
        for name in (online, "mf", "probe_form_options", "knn", "random"):
            if name in cq and ref is not None:
                ax.plot(seen, (ref - np.asarray(cq[name])) * seen, marker="o", ms=3,
                        label=f"{name}{' (online)' if name == online else ''}")
        ax.axhline(0, color="grey", lw=0.8)
        ax.set_title(f"lockbox {part}: regret against the subject oracle")
        ax.set_xlabel("prompts routed (feedback events)")
        ax.set_ylabel("cumulative quality regret (at 50% strong)")
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--develop", action="store_true", help="compare the online router's settings on development splits")
    ap.add_argument("--seeds", type=int, nargs="+", default=[4, 5, 6, 7, 8, 9])
    ap.add_argument("--read", action="store_true", help="read the lockbox (once per router family: see the ledger)")
    ap.add_argument("--explain", action="store_true", help="after the reading: per-subject gains, true and learned")
    args = ap.parse_args()
    if not (args.develop or args.read or args.explain):
        ap.error("say --develop (development splits), --read (the lockbox reading) or --explain (after it)")
    if args.develop:
        develop(args.seeds)
    if args.read:
        read()
    if args.explain:
        explain()


if __name__ == "__main__":
    main()
