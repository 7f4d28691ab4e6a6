"""Router variants tried and not kept on the unseen-subjects split, and the MF diagnosis, in one script.

``bench_unseen_subjects.py`` holds the routers kept; this script measures the ideas that were tried
around them, on the same leave-subjects-out splits (the evaluate_router job's ``load_split``, seeds 0-2,
10 MMLU subjects held out) and with the job's APGR and "share for 95% of always-strong" code, so its
figures compare with that table's:

* the form probe's L2 strength, and the strength a grouped cross-validation over *training* subjects
  picks (5 folds of whole subjects: choosing on the test subjects would leak them);
* non-linear heads on the form features (gradient boosting, an MLP), form + PCA of the embeddings;
* rank-mean ensembles of the transferable routers (form probe, boosting, kNN);
* MF variants (another torch seed, 5 epochs, ties dropped), a plain logistic regression on the embeddings, and
  MF on the MMLU rows only: is MF below random on seed 0 a bug or the data?
* three upper bounds that read the test outcomes: the subject oracle (each held-out subject's true mean gain,
  random within it) and the same with the form probe, or the form + option-match probe (``probe_form_options``),
  ordering the prompts within a subject, i.e. perfect subject knowledge plus a router's question-level signal.

Writes ``unseen_variants.{json,md}`` beside its study (``STUDY_RESULTS``). Needs scikit-learn (``pip install .[bench]``).

    HF_HUB_OFFLINE=1 python benchmarks/bench_unseen_variants.py [--seeds 0 1 2]
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Callable

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
STUDY = "2026-11-offline-routers-unseen-subjects"
"""The dated study this script belongs to (docs/experiments/): its results go there; make bench leaves it out."""
STUDY_RESULTS = ROOT / "docs" / "experiments" / STUDY / "results"

from rlrouter.provenance import write_result  # noqa: E402

# what this benchmark's figures depend on (rlrouter.provenance: the staleness report lists its results when these change)
MEASURES = ("benchmarks/bench_unseen_variants.py", "rlrouter/eval")
OUT = STUDY_RESULTS
L2_GRID = (0.1, 1.0, 10.0, 100.0, 1000.0)


def _sig(z: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-z))


def _standardise(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    mu, sd = a.mean(axis=0), a.std(axis=0) + 1e-9
    return (a - mu) / sd, (b - mu) / sd


def two_heads(x_tr: np.ndarray, y_weak: np.ndarray, y_strong: np.ndarray, x_te: np.ndarray, l2: float) -> np.ndarray:
    """p_strong - p_weak of two L2 logistic regressions (the ``probe`` router's two_heads)."""
    from rlrouter.routers.learned import _linear, fit_logistic

    a, b = _standardise(x_tr, x_te)
    return _sig(_linear(b, fit_logistic(a, y_strong, l2))) - _sig(_linear(b, fit_logistic(a, y_weak, l2)))


def _rank(v: np.ndarray) -> np.ndarray:
    return np.argsort(np.argsort(v, kind="stable"), kind="stable") / max(1, len(v) - 1)


def load(seed: int, holdout: int):
    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf

    from rlrouter.eval.job import question_embedder, load_split

    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
        cfg = compose(config_name="evaluate_router", overrides=[f"seed={seed}", f"eval.split.seed={seed}",
                                                                f"eval.split.holdout_subjects={holdout}",
                                                                "output_dir=/tmp", "command=null"])
    ev = OmegaConf.to_container(cfg, resolve=True)["eval"]
    train, test, _ = load_split(ev, seed)
    return train, test, train.index(ev["weak"]), train.index(ev["strong"]), question_embedder(ev)


def score(test, weak: int, strong: int, s: np.ndarray) -> tuple[float, float]:
    """(APGR, strong share for 95% of always-strong's quality) as the evaluate_router job computes them."""
    from rlrouter.eval.job import share_for_quality
    from rlrouter.eval.metrics import apgr, threshold_sweep

    c = threshold_sweep(s, test.scores, test.costs, weak, strong, 10)
    sq = float(test.scores[:, strong].mean())
    return (float(apgr(c.strong_share, c.quality, float(test.scores[:, weak].mean()), sq)),
            float(share_for_quality(c.strong_share, c.quality, 0.95 * sq)))


def grouped_cv_l2(train, weak: int, strong: int, feats: np.ndarray, seed: int, folds: int = 5) -> dict[float, float]:
    """Mean APGR per L2 strength over folds of whole *training* MMLU subjects."""
    src = np.array(train.sources)
    subjects = sorted(s for s in set(train.sources) if s.startswith("mmlu/"))
    np.random.default_rng(seed).shuffle(subjects)
    out: dict[float, list[float]] = {l2: [] for l2 in L2_GRID}
    for k in range(folds):
        held = np.isin(src, subjects[k::folds])
        fold = train.subset(np.nonzero(held)[0])
        for l2 in L2_GRID:
            s = two_heads(feats[~held], train.scores[~held, weak], train.scores[~held, strong], feats[held], l2)
            out[l2].append(score(fold, weak, strong, s)[0])
    return {l2: float(np.mean(v)) for l2, v in out.items()}


def variants(seed: int, holdout: int) -> tuple[dict[str, np.ndarray], dict]:
    from sklearn.decomposition import PCA
    from sklearn.ensemble import HistGradientBoostingClassifier
    from sklearn.neural_network import MLPClassifier

    from rlrouter.routers.baselines import KNNRouter, MFRouter
    from rlrouter.routers.learned import _linear, fit_logistic, option_match_features, prompt_form_features

    train, test, weak, strong, embed = load(seed, holdout)
    f_tr, f_te = prompt_form_features(train.prompts), prompt_form_features(test.prompts)
    o_tr, o_te = option_match_features(train.prompts, embed), option_match_features(test.prompts, embed)
    e_tr, e_te = np.asarray(embed(train.prompts), np.float64), np.asarray(embed(test.prompts), np.float64)
    yw, ys = train.scores[:, weak], train.scores[:, strong]
    v: dict[str, np.ndarray] = {}
    for l2 in L2_GRID:
        v[f"form probe, l2 {l2:g}"] = two_heads(f_tr, yw, ys, f_te, l2)
    v["form + option-match probe, l2 1 (probe_form_options)"] = two_heads(np.hstack([f_tr, o_tr]), yw, ys,
                                                                         np.hstack([f_te, o_te]), 1.0)
    cv = grouped_cv_l2(train, weak, strong, f_tr, seed)
    pick = max(cv, key=cv.get)
    v["form probe, l2 by grouped CV on training subjects"] = v[f"form probe, l2 {pick:g}"]
    for k in (8, 32):
        pca = PCA(k, random_state=0).fit(e_tr)
        v[f"form + PCA{k} of embeddings, l2 10"] = two_heads(np.hstack([f_tr, pca.transform(e_tr)]), yw, ys,
                                                            np.hstack([f_te, pca.transform(e_te)]), 10.0)
    gb = [HistGradientBoostingClassifier(max_iter=200, learning_rate=0.05, max_leaf_nodes=15, min_samples_leaf=50,
                                         random_state=0).fit(f_tr, (y > 0.5).astype(int)) for y in (yw, ys)]
    v["gradient boosting on form, two heads"] = gb[1].predict_proba(f_te)[:, 1] - gb[0].predict_proba(f_te)[:, 1]
    a, b = _standardise(f_tr, f_te)
    mlp = [MLPClassifier((64,), alpha=1e-2, max_iter=300, early_stopping=True, random_state=0).fit(
        a, (y > 0.5).astype(int)) for y in (yw, ys)]
    v["MLP(64) on form, two heads"] = mlp[1].predict_proba(b)[:, 1] - mlp[0].predict_proba(b)[:, 1]
    cache = dict(zip(train.prompts, e_tr.astype(np.float32)))
    cache.update(zip(test.prompts, e_te.astype(np.float32)))
    lookup: Callable[[list[str]], np.ndarray] = lambda ps: np.stack([cache[p] for p in ps])  # noqa: E731
    knn = KNNRouter("knn", weak, strong, lookup)
    knn.fit(train)
    v["knn (k 20)"] = knn.strong_score(test.prompts)
    form = v["form probe, l2 1"]
    v["rank mean: form probe + knn"] = _rank(form) + _rank(v["knn (k 20)"])
    v["rank mean: form probe + boosting"] = _rank(form) + _rank(v["gradient boosting on form, two heads"])
    v["rank mean: form probe + boosting + knn"] = (v["rank mean: form probe + boosting"] + _rank(v["knn (k 20)"]))
    mf_runs = {"MF (the baseline: torch seed 0, 30 epochs, ties 0.5)": {}, "MF, torch seed 1": {"seed": 1},
               "MF, 5 epochs": {"epochs": 5}, "MF, ties dropped": {"ties": "drop"}}
    for name, kw in mf_runs.items():
        mf = MFRouter("mf", weak, strong, lookup, num_candidates=len(train.names), **{"seed": 0, **kw})
        mf.fit(train)
        v[name] = mf.strong_score(test.prompts)
    mmlu = train.subset([i for i, s in enumerate(train.sources) if s.startswith("mmlu/")])
    mf = MFRouter("mf", weak, strong, lookup, num_candidates=len(train.names), seed=0)
    mf.fit(mmlu)
    v["MF on the MMLU rows only"] = mf.strong_score(test.prompts)
    gain = ys - yw
    pair = np.where(gain > 0, 1.0, np.where(gain < 0, 0.0, 0.5))
    for l2 in (1.0, 100.0):
        v[f"logistic P(strong wins) on embeddings, l2 {l2:g}"] = _linear(e_te, fit_logistic(e_tr, pair, l2))
    # upper bounds that read the test outcomes: each subject's true mean gain (the job's subject oracle),
    # and the same with the form probe ranking prompts within a subject (the question-level signal it adds)
    from rlrouter.routers.baselines import subject_gain_scores

    subj = subject_gain_scores(test.sources, test.scores, weak, strong)
    v["subject oracle (reads outcomes)"] = subj
    spread = form.std() or 1.0
    v["subject oracle, form probe within a subject (reads outcomes)"] = subj + 1e-6 * (form - form.mean()) / spread
    opt = v["form + option-match probe, l2 1 (probe_form_options)"]
    v["subject oracle, form + option-match probe within a subject (reads outcomes)"] = (
        subj + 1e-6 * (opt - opt.mean()) / (opt.std() or 1.0))
    scores = {name: score(test, weak, strong, s) for name, s in v.items()}
    return scores, {"cv_apgr_by_l2": cv, "cv_pick": pick}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--holdout", type=int, default=10)
    args = ap.parse_args()
    t0 = time.perf_counter()
    per_seed = {s: variants(s, args.holdout) for s in args.seeds}
    names = list(next(iter(per_seed.values()))[0])
    rows = {n: {s: {"apgr": per_seed[s][0][n][0], "share_for_95pct_strong": per_seed[s][0][n][1]} for s in args.seeds}
            for n in names}
    summary = {"command": "python benchmarks/bench_unseen_variants.py --seeds " + " ".join(map(str, args.seeds))
               + f" --holdout {args.holdout}", "variants": rows,
               "grouped_cv": {s: per_seed[s][1] for s in args.seeds}, "seconds": round(time.perf_counter() - t0, 1)}
    lines = ["| variant | APGR per seed | mean | strong share for 95% of always-strong, per seed |", "|---|---|---|---|"]
    for n, r in rows.items():
        ap_ = [r[s]["apgr"] for s in args.seeds]
        sh = " / ".join("–" if np.isnan(r[s]["share_for_95pct_strong"]) else f"{100 * r[s]['share_for_95pct_strong']:.1f}%"
                        for s in args.seeds)
        lines.append(f"| {n} | {' / '.join(f'{x:.3f}' for x in ap_)} | {np.mean(ap_):.3f} | {sh} |")
    picks = ", ".join(f"seed {s}: l2 {per_seed[s][1]['cv_pick']:g}" for s in args.seeds)
    md = "\n".join(lines) + f"\n\nGrouped CV over training subjects picked {picks}.\n"
    OUT.mkdir(parents=True, exist_ok=True)
    write_result(OUT / "unseen_variants.json", summary, MEASURES, indent=1, default=float)
    (OUT / "unseen_variants.md").write_text(md)
    print(md)
    print(f"{summary['seconds']} s")


if __name__ == "__main__":
    main()
