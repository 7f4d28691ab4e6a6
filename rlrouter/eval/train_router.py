"""The train_router job: fit one router from an evaluate_router config entry and save it for serving.

``run(cfg)`` reads the logged outcomes as evaluate_router does (``eval``: the same data, split and
embedder), builds the router from ``router`` (an entry like ``conf/eval/router/*.yaml``) or from the
baseline ``baseline`` names (``eval.baselines.<name>``: knn, mf), fits it on the training split (or on
every row with ``rows: all``), calibrates a threshold router on its training prompts, and writes the
router folder (``rlrouter.routers.saved``) to ``output_dir``. The Serve app loads that folder
(``routers:`` in serve/config.yaml). ``jobs/train_router.py`` is its Hydra wrapper; tests call ``run``.

With ``logs`` (a list of tables in RouterBench's layout with blanks allowed: the Serve app's traffic
exports, ``jobs/export_traffic.py``, and full logs such as a seed set) ``run`` trains a router on every
row of them instead (``router`` a type that learns from blanks: ``traffic_knn`` by default;
``rlrouter.routers.traffic_router``).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import numpy as np

from rlrouter.config import to_plain_dict
from rlrouter.eval.job import check_lockbox, question_embedder, load_eval_set, load_split, subsample, train_rows_for
from rlrouter.routers.reader import EvalSet
from rlrouter.routers.base import RouterContext, ThresholdRouter, build_router, load_plugins
from rlrouter.routers.saved import Calibration, Manifest, save_router


def router_spec(cfg: dict[str, Any]) -> dict[str, Any]:
    """The config entry to train: ``router``, or ``eval.baselines[baseline]``; exactly one of them."""
    ev = cfg["eval"]
    router, baseline = cfg.get("router"), cfg.get("baseline")
    if bool(router) == bool(baseline):
        raise ValueError("train_router: set exactly one of router (e.g. eval/router@router=probe_form_options) and "
                         f"baseline (one of eval.baselines: {sorted(ev.get('baselines') or {})})")
    if baseline:
        spec = (ev.get("baselines") or {}).get(baseline)
        if not spec:
            raise ValueError(f"baseline: '{baseline}' is not an entry of eval.baselines "
                             f"({sorted(ev.get('baselines') or {})})")
        return {"name": baseline, **dict(spec)}
    spec = dict(router)
    if not spec.get("type"):
        raise ValueError("router.type: missing")
    return spec


def training_rows(cfg: dict[str, Any], seed: int) -> tuple[EvalSet, dict[str, Any]]:
    """``rows: train``: evaluate_router's training split (what it ranked the router on); ``all``: every row
    (never the lockbox: the same rule as evaluate_router's)."""
    ev = cfg["eval"]
    which = cfg.get("rows", "train")
    if which == "train":
        train, _, desc = load_split(ev, seed)
        return train, {"rows": "evaluate_router's training split", **desc}
    if which == "all":
        if check_lockbox(ev):
            raise ValueError("rows: all with eval.lockbox.read=true: a served router never trains on the lockbox")
        max_prompts = int(ev.get("max_prompts", 0) or 0)
        if ev.get("train_data") or ev.get("test_data"):
            parts = [subsample(load_eval_set(ev, k), max_prompts, seed) for k in ("train_data", "test_data")]
            return EvalSet.concat(parts), {"rows": "eval.train_data + eval.test_data"}
        return subsample(load_eval_set(ev), max_prompts, seed), {"rows": "every row of eval.data"}
    raise ValueError(f"rows: expected 'train' or 'all', got '{which}'")


def run_logged(cfg: dict[str, Any]) -> Manifest:
    """Train a router on ``cfg['logs']`` (tables with blanks) and save it; returns its manifest."""
    from rlrouter.routers.saved import embedder
    from rlrouter.routers.traffic_router import TrafficTable, read_logged_table
    from rlrouter.pool.base import Candidate

    t0 = time.perf_counter()
    files = cfg["logs"]
    if isinstance(files, str) or not isinstance(files, list) or not files:
        raise ValueError(f"logs: a list of tables (traffic exports, RouterBench layout), got {files!r}")
    if cfg.get("baseline"):
        raise ValueError("logs: trains a router that learns from blanks (router.type: traffic_knn); leave "
                         "baseline out")
    spec = dict(cfg.get("router") or {"type": "traffic_knn"})
    name = str(spec.get("name") or spec["type"])
    out = Path(cfg.get("output_dir") or Path("outputs") / "routers" / name)
    candidates = cfg.get("candidates")
    table = TrafficTable.concat([read_logged_table(f, candidates) for f in files])
    observed = ~np.isnan(table.scores)
    mean_cost = [float(np.nanmean(table.costs[observed[:, j], j])) if observed[:, j].any() else 0.0
                 for j in range(len(table.names))]
    weak, strong = int(np.argmin(mean_cost)), int(np.argmax(mean_cost))
    emb = {"model": str(cfg.get("embedding", "minilm-l6"))}
    ctx = RouterContext(candidates=table.names, weak=weak, strong=strong, train=None,  # type: ignore[arg-type]
                        embed=embedder(emb), seed=int(cfg.get("seed", 0)), work_dir=out)
    saved_spec = dict(spec)
    router = build_router(spec, ctx)
    if not hasattr(router, "fit_logged"):
        raise ValueError(f"router.type: '{saved_spec['type']}' does not learn from tables with blanks; use "
                         "traffic_knn")
    print(f"train_router: fitting '{name}' ({saved_spec['type']}) on {len(table)} logged requests "
          f"({int(observed.sum())} observed cells) from {len(files)} table(s)", flush=True)
    router.fit_logged(table)
    train_info = {"rows": "logs", "sources": [str(f) for f in files], "prompts": len(table),
                  "observed_cells": int(observed.sum()),
                  "observed_per_candidate": {n: int(observed[:, j].sum()) for j, n in enumerate(table.names)},
                  "seconds": round(time.perf_counter() - t0, 2)}
    manifest = save_router(router, out, type_name=saved_spec["type"], spec=saved_spec,
                           candidates=[Candidate(n, 0.0, 0.0) for n in table.names], weak=weak, strong=strong,
                           embedding=emb, seed=int(cfg.get("seed", 0)), train=train_info, base=Path.cwd())
    print(f"train_router: saved '{name}' ({manifest.type}) in {out.resolve()}", flush=True)
    return manifest


def run(cfg: Any) -> Manifest:
    """Train and save the configured router; returns its manifest (also on disk)."""
    cfg = to_plain_dict(cfg)
    if cfg.get("logs"):
        return run_logged(cfg)
    ev = cfg["eval"]
    seed = int(cfg.get("seed", 0))
    t0 = time.perf_counter()
    plugins = list(ev.get("plugins") or [])
    load_plugins(plugins)
    spec = router_spec(cfg)
    name = str(spec.get("name") or spec["type"])
    out = Path(cfg.get("output_dir") or Path("outputs") / "routers" / name)
    data, desc = training_rows(cfg, seed)
    names = data.names
    weak, strong = data.index(ev["weak"]), data.index(ev["strong"])
    ctx = RouterContext(candidates=names, weak=weak, strong=strong, train=data, embed=question_embedder(ev), seed=seed,
                        work_dir=out)
    share = spec.pop("operating_strong_share", ev.get("operating_strong_share"))
    prefix = spec.pop("train_prefix", None)
    saved_spec = dict(spec)
    router = build_router(spec, ctx)
    fit_on = train_rows_for(data, str(prefix), name) if prefix else data
    print(f"train_router: fitting '{name}' ({saved_spec['type']}) on {len(fit_on)} prompts", flush=True)
    router.fit(fit_on)
    calibration = None
    if isinstance(router, ThresholdRouter):
        prompts = fit_on.prompts
        n_cal = int(cfg.get("calibration_prompts", 0) or 0)
        if 0 < n_cal < len(prompts):
            rows = np.sort(np.random.default_rng(seed).choice(len(prompts), n_cal, replace=False))
            prompts = [prompts[i] for i in rows]
        scores = router.strong_score(prompts)
        calibration = Calibration.from_scores(scores)
        if share is not None and saved_spec["type"] != "random":
            router.calibrate(prompts, float(share), scores=scores)
    train_info = {**desc, "sources": [str(s) for s in (ev.get("data") or [])], "prompts": len(fit_on),
                  "train_prefix": prefix, "strong_share": None if share is None else float(share),
                  "seconds": round(time.perf_counter() - t0, 2)}
    emb = ev.get("embedding") or {}
    manifest = save_router(router, out, type_name=saved_spec["type"], spec=saved_spec, candidates=data.candidates,
                           weak=weak, strong=strong, calibration=calibration,
                           embedding={"model": emb.get("model", "minilm-l6")}, seed=seed, train=train_info,
                           plugins=plugins, base=Path.cwd())
    what = f"threshold {manifest.threshold:.4g}" if manifest.threshold is not None else "no threshold"
    print(f"train_router: saved '{name}' ({manifest.type}, {what}) in {out.resolve()}", flush=True)
    return manifest
