"""The evaluate_router job: routers and baselines on one split of logged outcomes, then the report.

``run(cfg)`` reads the evaluation set(s), splits them by question with a fixed seed (a question
never sits in both splits, and each task keeps its share), trains the baselines that learn (kNN,
MF) on the training split, replays every router on the test split and writes ``report.json``,
``report.md`` and the PNGs under ``cfg.output_dir``. ``jobs/evaluate_router.py`` is its Hydra
wrapper; tests call ``run`` directly.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any, Mapping

import numpy as np

from rlrouter.eval import baselines as _baselines  # noqa: F401 - registers the baseline router types
from rlrouter.eval import adapters as _adapters  # noqa: F401 - registers the adapters of trained routers
from rlrouter.eval.baselines import oracle_curve, oracle_decisions
from rlrouter.eval.metrics import RouterMetrics, evaluate_decisions, summarize, threshold_sweep
from rlrouter.eval.ope import crossfit_reward_model, epsilon_soft, evaluate_all, one_hot, simulate_logging
from rlrouter.eval.reader import EvalSet, TokenEstimate, read_eval_set
from rlrouter.eval.routers import Router, RouterContext, ThresholdRouter, build_router, load_plugins


def _plain(cfg: Any) -> dict[str, Any]:
    try:
        from omegaconf import DictConfig, OmegaConf

        if isinstance(cfg, DictConfig):
            return OmegaConf.to_container(cfg, resolve=True)  # type: ignore[return-value]
    except ImportError:  # pragma: no cover - hydra-core is a dependency
        pass
    return dict(cfg)


def _normalize(prompt: str) -> str:
    return " ".join(prompt.split())


def split_by_question(es: EvalSet, test_fraction: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """(train rows, test rows): questions (normalised prompt text) are shuffled per task with ``seed``
    and the first ``test_fraction`` of each task's questions go to test, every copy of a question
    with it."""
    if not 0.0 < test_fraction < 1.0:
        raise ValueError(f"eval.split.test_fraction: must be in (0, 1), got {test_fraction}")
    rng = np.random.default_rng(seed)
    keys = [_normalize(p) for p in es.prompts]
    tasks = es.tasks
    test_keys: set[str] = set()
    for task in sorted(set(tasks)):
        uniq = sorted({k for k, t in zip(keys, tasks) if t == task})
        order = rng.permutation(len(uniq))
        n_test = max(1, int(round(test_fraction * len(uniq))))
        test_keys.update(uniq[i] for i in order[:n_test])
    is_test = np.array([k in test_keys for k in keys])
    return np.nonzero(~is_test)[0], np.nonzero(is_test)[0]


def subsample(es: EvalSet, max_prompts: int, seed: int) -> EvalSet:
    """At most ``max_prompts`` rows, each task keeping its share (for smoke runs and tests)."""
    if max_prompts <= 0 or len(es) <= max_prompts:
        return es
    rng = np.random.default_rng(seed)
    tasks = np.array(es.tasks)
    keep: list[int] = []
    for task in sorted(set(es.tasks)):
        rows = np.nonzero(tasks == task)[0]
        k = max(1, int(round(max_prompts * len(rows) / len(es))))
        keep.extend(rng.choice(rows, size=min(k, len(rows)), replace=False).tolist())
    return es.subset(sorted(keep))


def load_eval_set(ev: Mapping[str, Any]) -> EvalSet:
    tokens = TokenEstimate(**(ev.get("tokens") or {}))
    prices = ev.get("prices") or {}
    parts = [read_eval_set(str(src), fmt=ev.get("format", "auto"), prices=prices, tokens=tokens,
                           allow_pickle=bool(ev.get("allow_pickle", False))) for src in ev["data"]]
    return EvalSet.concat(parts) if len(parts) > 1 else parts[0]


def _embedder(ev: Mapping[str, Any]):
    """MiniLM embeddings through ``rlrouter.embeddings`` (disk-cached), fed in buckets of similar length.

    ``embed_texts`` batches the prompts it has not seen in hash order, so one long MMLU passage pads a
    whole batch to 256 tokens; calling it per length bucket keeps batches homogeneous (about half the
    compute on RouteLLM's prompts) and saves the cache after every bucket, so an interrupted run resumes.
    """
    emb = ev.get("embedding") or {}
    model, cache = emb.get("model", "minilm-l6"), bool(emb.get("cache", True))
    bucket = int(emb.get("bucket", 512))

    def embed(texts: list[str]) -> np.ndarray:
        from tqdm.auto import tqdm

        from rlrouter.embeddings import embed_texts

        texts = list(texts)
        order = np.argsort([len(t) for t in texts], kind="stable")
        out: np.ndarray | None = None
        chunks = range(0, len(texts), bucket)
        for start in tqdm(chunks, desc="embed", unit="bucket", leave=False, disable=len(chunks) < 4):
            idx = order[start:start + bucket]
            vecs = embed_texts([texts[i] for i in idx], model=model, cache=cache)
            if out is None:
                out = np.zeros((len(texts), vecs.shape[1]), dtype=np.float32)
            out[idx] = vecs
        return out if out is not None else np.zeros((0, 384), dtype=np.float32)

    return embed


def _slices(test: EvalSet) -> dict[str, np.ndarray]:
    tasks = np.array(test.tasks)
    out = {"all": np.arange(len(test))}
    for t in sorted(set(test.tasks)):
        out[t] = np.nonzero(tasks == t)[0]
    return out


def _metrics_dict(m: RouterMetrics, names: list[str]) -> dict[str, Any]:
    d: dict[str, Any] = {
        "quality": m.point.quality, "cost_total": m.point.cost_total, "cost_mean": m.point.cost_mean,
        "shares": dict(zip(names, m.point.shares)), "pgr": m.pgr,
        "random_quality_at_cost": m.random_quality_at_cost,
        "apgr": m.apgr, "cpt50": m.cpt50, "cpt80": m.cpt80, "aiq": m.aiq, "n": m.point.n,
    }
    if m.curve is not None:
        d["curve"] = m.curve.to_dict()
    return d


def run(cfg: Any) -> dict[str, Any]:
    """Evaluate the configured router(s) and the baselines; returns the report (also written to disk)."""
    from tqdm.auto import tqdm

    from rlrouter.eval.report import write_report

    cfg = _plain(cfg)
    ev = cfg["eval"]
    seed = int(cfg.get("seed", 0))
    t0 = time.perf_counter()
    load_plugins(list(ev.get("plugins") or []))
    full = subsample(load_eval_set(ev), int(ev.get("max_prompts", 0) or 0), seed)
    split = ev.get("split") or {}
    train_rows, test_rows = split_by_question(full, float(split.get("test_fraction", 0.2)), int(split.get("seed", seed)))
    train, test = full.subset(train_rows), full.subset(test_rows)
    # a fixed, seeded subset of the test split (each task keeping its share) for routers too slow for all
    # of it (Router-R1 on CPU); every router and baseline of the run is scored on the same subset
    test_subset = int(ev.get("test_subset", 0) or 0)
    test = subsample(test, test_subset, int(split.get("seed", seed)))
    names = full.names
    weak, strong = full.index(ev["weak"]), full.index(ev["strong"])
    ctx = RouterContext(candidates=names, weak=weak, strong=strong, train=train, embed=_embedder(ev), seed=seed,
                        work_dir=Path(cfg["output_dir"]))

    specs: dict[str, dict[str, Any]] = {k: dict(v) for k, v in (ev.get("baselines") or {}).items() if v}
    router_cfg = cfg.get("router")
    if router_cfg:
        specs[router_cfg.get("name") or router_cfg["type"]] = dict(router_cfg)
    for name, spec in (cfg.get("routers") or {}).items():
        if spec:
            specs[name] = dict(spec)

    num_thresholds = int(ev.get("num_thresholds", 10))
    operating_share = ev.get("operating_strong_share")
    slices = _slices(test)
    decisions: dict[str, np.ndarray] = {}
    strong_scores: dict[str, np.ndarray] = {}
    timings: dict[str, float] = {}
    with tqdm(total=len(specs) + 1, desc="evaluate_router", unit="router") as bar:
        for name, spec in specs.items():
            bar.set_postfix_str(name)
            t = time.perf_counter()
            spec.setdefault("name", name)
            # a router may keep its own threshold (operating_strong_share: null) instead of the shared one
            share = spec.pop("operating_strong_share", operating_share)
            router: Router = build_router(spec, ctx)
            router.fit(train)
            if isinstance(router, ThresholdRouter):
                strong_scores[name] = router.strong_score(test.prompts)
                if share is not None and spec.get("type") not in ("random",):
                    # label-free: a quantile of the router's scores on the test prompts, as RouteLLM's
                    # calibrate_threshold does on unlabelled traffic; outcomes are never read
                    router.calibrate(test.prompts, float(share))
                decisions[name] = np.where(strong_scores[name] >= router.threshold, router.strong, router.weak)
            else:
                decisions[name] = np.asarray(router.decide(test.prompts), dtype=np.int64)
            timings[name] = time.perf_counter() - t
            bar.update(1)
        bar.set_postfix_str("oracle")
        decisions["oracle"] = oracle_decisions(test.scores, test.costs)
        bar.update(1)

    results: dict[str, dict[str, Any]] = {}
    for sname, rows in slices.items():
        sc, co = test.scores[rows], test.costs[rows]
        weak_ref = (float(sc[:, weak].mean()), float(co[:, weak].mean()))
        strong_ref = (float(sc[:, strong].mean()), float(co[:, strong].mean()))
        fixed_costs = co.mean(axis=0)
        cost_range = (float(fixed_costs.min()), float(fixed_costs.max()))
        per: dict[str, Any] = {}
        for name, dec in decisions.items():
            point = evaluate_decisions(sc, co, dec[rows])
            curve = None
            if name in strong_scores:
                curve = threshold_sweep(strong_scores[name][rows], sc, co, weak, strong, num_thresholds)
            per[name] = _metrics_dict(summarize(name, point, weak_ref, strong_ref, curve, cost_range), names)
        shares = np.linspace(0, 1, 21)
        per["oracle"]["optimal_curve"] = {"strong_share": shares.tolist(),
                                          "quality": oracle_curve(sc, co, weak, strong, shares).tolist()}
        results[sname] = {"n": int(len(rows)), "weak": {"quality": weak_ref[0], "cost_mean": weak_ref[1]},
                          "strong": {"quality": strong_ref[0], "cost_mean": strong_ref[1]},
                          "cost_range": list(cost_range), "routers": per}

    ope = _run_ope(ev.get("ope") or {}, test, decisions, names, seed) if (ev.get("ope") or {}).get("enabled") else None

    report = {
        "command": cfg.get("command") or _command_line(),
        "seed": seed,
        "data": {"sources": [str(s) for s in ev["data"]], "prompts": len(full), "train": len(train), "test": len(test),
                 "candidates": [{"name": c.name, "price_in_per_1m": c.price_in, "price_out_per_1m": c.price_out}
                                for c in full.candidates],
                 "weak": names[weak], "strong": names[strong],
                 "test_fraction": float(split.get("test_fraction", 0.2)), "test_subset": test_subset,
                 "tokens": {"prompt_mean": float(test.prompt_tokens.mean()),
                            "completion_mean": dict(zip(names, test.completion_tokens.mean(axis=0).tolist()))}},
        "routers": {name: {"type": spec.get("type"), "seconds": round(timings[name], 2)} for name, spec in specs.items()},
        "slices": results,
        "ope": ope,
        "seconds": round(time.perf_counter() - t0, 2),
    }
    paths = write_report(Path(cfg["output_dir"]), report)
    report["paths"] = {k: str(v) for k, v in paths.items()}
    print(f"evaluate_router: report in {Path(cfg['output_dir']).resolve()}")
    for k, v in paths.items():
        print(f"  {k}: {v}")
    return report


def _command_line() -> str | None:
    """The command that launched this run when Hydra launched it (the table in the docs cites it)."""
    try:
        from hydra.core.hydra_config import HydraConfig

        overrides = HydraConfig.get().overrides.task
    except Exception:  # not under @hydra.main (tests call run() directly)
        return None
    return " ".join(["python jobs/evaluate_router.py", *overrides])


def _run_ope(oc: Mapping[str, Any], test: EvalSet, decisions: Mapping[str, np.ndarray], names: list[str],
             seed: int) -> dict[str, Any]:
    """Log the test split with an epsilon-soft policy over ``oc.logging_base``, then value every router
    from that log alone and set the estimate beside its true replayed quality."""
    base = oc.get("logging_base", "always_weak")
    if base not in decisions:
        raise ValueError(f"eval.ope.logging_base: '{base}' is not an evaluated router ({sorted(decisions)})")
    eps = float(oc.get("epsilon", 0.3))
    m = len(names)
    pi0 = epsilon_soft(decisions[base], m, eps)
    rng = np.random.default_rng(int(oc.get("seed", seed)))
    logged = simulate_logging(pi0, test.scores, rng)
    q_hat = crossfit_reward_model(test.sources, logged, m, seed=seed)
    out: dict[str, Any] = {"logging_base": base, "epsilon": eps, "ci": oc.get("ci", "clt"),
                           "level": float(oc.get("level", 0.95)), "routers": {}}
    for name, dec in decisions.items():
        if name == base:
            continue
        est = evaluate_all(one_hot(dec, m), logged, q_hat, ci=out["ci"], level=out["level"],
                           n_boot=int(oc.get("n_boot", 1000)), seed=seed)
        truth = float(test.scores[np.arange(len(dec)), dec].mean())
        out["routers"][name] = {"true": truth, **{k: {**e.to_dict(), "covers": e.covers(truth)}
                                                  for k, e in est.items()}}
    return out
