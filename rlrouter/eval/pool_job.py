"""The evaluate_router job over a pool of N candidates (no weak/strong pair): RouterBench-style logs.

``run_pool(cfg)`` reads ``eval.train_data`` and ``eval.test_data`` (or splits ``eval.data`` by question),
reports the tables' quirks (blank cells, repeated ids, train/test overlap) with what was done about them,
picks each router's settings by cross-validation on train (``select``), fits it on all of train and sweeps
it on test by willingness to pay. The report holds, per task and overall: AIQ and its paired bootstrap
interval against the zero router (the hull of the fixed routes), every single model, the per-task rule,
the oracle, and each router's reward, cost and call shares at the configured price weights. Each run
appends its reading of the test tables to a ledger (``eval.ledger``).

``run_evaluation(cfg)`` is the job's entry: a config with ``eval.weak`` and ``eval.strong`` runs the pairwise
job (``rlrouter.eval.job.run``: APGR, CPT), any other this one.
"""

from __future__ import annotations

import itertools
import json
import logging
import time
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from tqdm.auto import tqdm

from rlrouter.config import to_plain_dict
from rlrouter.data.question import question_id
from rlrouter.data.routerbench import routerbench_id
from rlrouter.eval.ledger import earlier_readings, readings_of, record_reading
from rlrouter.eval.job import command_line, question_embedder, load_eval_set, run, split_by_question
from rlrouter.eval.pool_report import write_pool_report
from rlrouter.routers.pool_routers import PoolRouter, build_pool_router
from rlrouter.routers.reader import EvalSet
from rlrouter.eval.wtp import (Sweep, aiq_by_task, aiq_minus_reference, cost_ranges, fixed_sweep, hull_points,
                               reward_at, task_rows, wtp_grid)

OVERLAP = ("drop", "keep")
ZERO = "zero_router"

log = logging.getLogger(__name__)


def run_evaluation(cfg: Any) -> dict[str, Any]:
    """The evaluate_router job: the pairwise report when ``eval.weak`` / ``eval.strong`` name a pair, else
    the pool report."""
    plain = to_plain_dict(cfg)
    ev = plain["eval"]
    if ev.get("weak") and ev.get("strong"):
        return run(cfg)
    return run_pool(plain)


# ---------------------------------------------------------------- data


def _key(es: EvalSet, i: int) -> str:
    return es.ids[i] if es.ids is not None else " ".join(es.prompts[i].split())


def resolve_overlap(train: EvalSet, test: EvalSet, policy: str) -> tuple[EvalSet, dict[str, Any]]:
    """Prompts in both train and test (by ``sample_id``, else by question text): ``drop`` removes them from
    train (test stays whole), ``keep`` leaves them and says so."""
    if policy not in OVERLAP:
        raise ValueError(f"eval.overlap: expected one of {OVERLAP}, got '{policy}'")
    test_keys = {_key(test, i) for i in range(len(test))}
    shared = [i for i in range(len(train)) if _key(train, i) in test_keys]
    info = {"by": "sample_id" if train.ids is not None and test.ids is not None else "question text",
            "train_rows": len(shared), "policy": policy,
            "examples": sorted({_key(train, i) for i in shared})[:10]}
    if shared and policy == "drop":
        keep = np.setdiff1d(np.arange(len(train)), shared)
        if not len(keep):
            raise ValueError("eval.overlap: every training prompt is also a test prompt")
        train = train.subset(keep)
    return train, info


def load_pool(ev: Mapping[str, Any], seed: int) -> tuple[EvalSet, EvalSet, dict[str, Any]]:
    """(train, test, data report): separate train and test tables, or ``eval.data`` split by question."""
    tables: list = []
    if ev.get("train_data") or ev.get("test_data"):
        if not (ev.get("train_data") and ev.get("test_data")):
            raise ValueError("eval.train_data / eval.test_data: set both, or neither (then eval.data is split)")
        train = load_eval_set(ev, "train_data", tables)
        test = load_eval_set(ev, "test_data", tables).aligned(train.names, where="eval.test_data (against eval.train_data)")
        protocol = {"protocol": "separate train_data / test_data", "train_sources": [str(s) for s in ev["train_data"]],
                    "test_sources": [str(s) for s in ev["test_data"]]}
    else:
        full = load_eval_set(ev, "data", tables)
        split = dict(ev.get("split") or {})
        tr, te = split_by_question(full, float(split.get("test_fraction", 0.2)), int(split.get("seed", seed)))
        train, test = full.subset(tr), full.subset(te)
        protocol = {"protocol": "split by question", "sources": [str(s) for s in ev["data"]],
                    "test_fraction": float(split.get("test_fraction", 0.2))}
    train, overlap = resolve_overlap(train, test, str(ev.get("overlap", "drop")))
    quirks = [line for t in tables for line in t.lines()]
    if overlap["train_rows"]:
        quirks.append(f"{overlap['train_rows']} training rows share a {overlap['by']} with a test row "
                      f"({'dropped from train' if overlap['policy'] == 'drop' else 'kept'}; eval.overlap)")
    return train, test, {**protocol, "train": len(train), "test": len(test), "tables": [t.to_dict() for t in tables],
                         "overlap": overlap, "quirks": quirks,
                         "tasks": {t: int(len(r)) for t, r in task_rows(test.tasks).items()}}


# ---------------------------------------------------------------- choosing settings on train


def task_folds(es: EvalSet, folds: int, seed: int) -> np.ndarray:
    """(N,) fold index per row: each task's rows dealt round-robin after a seeded shuffle."""
    if folds < 2:
        raise ValueError(f"eval.select.folds: must be >= 2, got {folds}")
    rng = np.random.default_rng(seed)
    out = np.zeros(len(es), dtype=np.int64)
    for rows in task_rows(es.tasks).values():
        out[rng.permutation(rows)] = np.arange(len(rows)) % folds
    return out


def cv_aiq_gain(spec: Mapping[str, Any], train: EvalSet, embed, folds: np.ndarray, num_w: int, seed: int,
                convention: str = "routerbench") -> float:
    """Mean over folds of AIQ(router) - AIQ(zero router), overall, with the router fit on the other folds."""
    gains = []
    for f in np.unique(folds):
        fit, held = train.subset(np.nonzero(folds != f)[0]), train.subset(np.nonzero(folds == f)[0])
        router = build_pool_router("cv", dict(spec), embed, seed)
        router.fit(fit)
        ranges = cost_ranges(held.scores, held.costs, held.tasks, convention)
        sweep = router.sweep(held, wtp_grid(fit.costs.mean(axis=0), num_w))
        zero = fixed_sweep(held.scores, held.costs, held.names)
        gains.append(aiq_by_task(sweep, held.tasks, ranges)["overall"] - aiq_by_task(zero, held.tasks, ranges)["overall"])
    return float(np.mean(gains))


def select_settings(name: str, spec: Mapping[str, Any], train: EvalSet, embed, folds: np.ndarray, num_w: int,
                    seed: int, convention: str = "routerbench") -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """``spec`` with its ``select`` grid resolved: every combination scored by cross-validated AIQ gain on
    train, the best kept (ties: the first listed). Returns (spec to fit, the table of scores)."""
    spec = dict(spec)
    grid = spec.pop("select", None) or {}
    if not grid:
        return spec, []
    if not isinstance(grid, Mapping) or not all(isinstance(v, (list, tuple)) and v for v in grid.values()):
        raise ValueError(f"eval.routers.{name}.select: a mapping of field -> non-empty list of values, got {grid!r}")
    table = []
    for values in itertools.product(*grid.values()):
        trial = {**spec, **dict(zip(grid, values))}
        table.append({"params": dict(zip(grid, values)),
                      "cv_aiq_minus_zero": cv_aiq_gain(trial, train, embed, folds, num_w, seed, convention)})
    best = max(table, key=lambda r: r["cv_aiq_minus_zero"])
    return {**spec, **best["params"]}, table


# ---------------------------------------------------------------- the run


def _shares(decisions: np.ndarray, rows: np.ndarray, names: Sequence[str]) -> dict[str, float]:
    counts = np.bincount(decisions[rows], minlength=len(names)) / max(1, len(rows))
    return {n: round(float(c), 4) for n, c in zip(names, counts) if c > 0}


def settings_for_prices(train_sweep: Sweep, lams: Sequence[float]) -> dict[float, int]:
    """Per price weight lam, the setting a user at that price would pick from train: the one with the highest
    mean reward (quality - lam * 1000 * cost) on the training tables (ties: the first)."""
    return {lam: int(np.argmax(reward_at(train_sweep, lam))) for lam in lams}


def at_prices(sweep: Sweep, lams: Sequence[float], test: EvalSet, by_task: Mapping[str, np.ndarray],
              setting_for: Mapping[float, int]) -> dict[str, Any]:
    """At each price weight lam: the setting ``setting_for[lam]`` (chosen on train), its quality, cost (USD per
    1k prompts), reward (quality - lam * 1000 * cost) and call shares on test, per task and overall."""
    out = {}
    for lam in lams:
        s = setting_for[lam]
        q, c = sweep.quality[s], sweep.cost[s]
        entry = {"setting": sweep.labels[s]}
        for t, rows in [("overall", np.arange(len(test))), *by_task.items()]:
            entry[t] = {"quality": float(q[rows].mean()), "cost_per_1k": float(1000 * c[rows].mean()),
                        "reward": float((q[rows] - lam * 1000 * c[rows]).mean()),
                        "shares": _shares(sweep.decisions[s], rows, test.names)}
        out[f"{lam:g}"] = entry
    return out


def _evaluate_router(name: str, spec: Mapping[str, Any], train: EvalSet, test: EvalSet, embed, folds: np.ndarray,
                     num_w: int, ws: np.ndarray, lams: Sequence[float], seed: int,
                     convention: str) -> tuple[Sweep, dict[float, int], dict[str, Any]]:
    """One router: its settings picked on train, fitted, swept on test. (test sweep, setting per price weight,
    its report entry before the test figures)."""
    t = time.perf_counter()
    chosen, table = select_settings(name, spec, train, embed, folds, num_w, seed, convention)
    t_select = time.perf_counter() - t
    router: PoolRouter = build_pool_router(name, chosen, embed, seed)
    router.fit(train)
    at_price = settings_for_prices(router.sweep(train, ws), lams)
    t_fit = time.perf_counter() - t - t_select  # with the train sweep that picks the price settings
    sweep = router.sweep(test, ws)
    entry = {"type": chosen.get("type"), "params": {k: v for k, v in chosen.items() if k != "type"},
             "cv": table, "reads_outcomes": router.reads_outcomes, "seconds": round(time.perf_counter() - t, 2),
             "seconds_by_stage": {"select_on_train": round(t_select, 2), "fit": round(t_fit, 2),
                                  "sweep_test": round(time.perf_counter() - t - t_select - t_fit, 2)}}
    return sweep, at_price, entry


def run_pool(cfg: Mapping[str, Any]) -> dict[str, Any]:
    """Evaluate every configured router over the pool; write report.json, report.md and one PNG per task."""
    ev = cfg["eval"]
    seed = int(cfg.get("seed", 0))
    t0 = time.perf_counter()
    train, test, data = load_pool(ev, seed)
    for line in data["quirks"]:
        print(f"evaluate_router: {line}")
    embed = question_embedder(ev)
    sel = dict(ev.get("select") or {})
    folds = task_folds(train, int(sel.get("folds", 5)), int(sel.get("seed", seed)))
    wcfg = dict(ev.get("wtp") or {})
    num_w = int(wcfg.get("num", 60))
    lams = [float(x) for x in (ev.get("price_weights") or [0.05, 0.1, 0.2])]
    ws = wtp_grid(train.costs.mean(axis=0), num_w, lams)
    convention = str(ev.get("aiq_range", "routerbench"))
    ranges = cost_ranges(test.scores, test.costs, test.tasks, convention)
    by_task = task_rows(test.tasks)

    sweeps: dict[str, Sweep] = {ZERO: fixed_sweep(test.scores, test.costs, test.names)}
    routers: dict[str, dict[str, Any]] = {ZERO: {"type": "fixed", "reads_outcomes": False}}
    # each router's setting at each price weight, picked on train (the zero router's: the best fixed route)
    at_price_setting = {ZERO: settings_for_prices(fixed_sweep(train.scores, train.costs, train.names), lams)}
    specs = {k: dict(v) for k, v in (ev.get("routers") or {}).items() if v}
    for name, spec in (cfg.get("routers") or {}).items():  # more routers from the command line
        if spec:
            specs[name] = dict(spec)
    only = ev.get("only")
    if only:
        unknown = sorted(set(only) - set(specs))
        if unknown:
            raise ValueError(f"eval.only: {unknown} are not configured routers ({sorted(specs)})")
        specs = {k: v for k, v in specs.items() if k in only}
    # before any router runs: a bad router config stops here; a router that cannot apply to these tables is
    # skipped with its reason in the report
    skipped = {name: why for name, spec in specs.items()
               if (why := build_pool_router(name, {k: v for k, v in spec.items() if k != "select"}, embed,
                                            seed).cannot_apply(train, test))}
    for name, why in skipped.items():
        print(f"evaluate_router: skipping {name}: {why}")
    with tqdm(total=len(specs) - len(skipped), desc="evaluate_router", unit="router") as bar:
        for name, spec in specs.items():
            if name in skipped:
                continue
            bar.set_postfix_str(name)
            try:  # one router's failure costs its row, never the others' results
                sweeps[name], at_price_setting[name], routers[name] = _evaluate_router(
                    name, spec, train, test, embed, folds, num_w, ws, lams, seed, convention)
            except Exception as e:  # noqa: BLE001 - reported by name, the run goes on
                log.exception("evaluate_router: %s failed; the other routers go on", name)
                skipped[name] = f"failed: {type(e).__name__}: {e}"
            bar.update(1)

    boot_cfg = dict(ev.get("bootstrap") or {})
    boot = aiq_minus_reference(sweeps, ZERO, test.tasks, ranges, n_boot=int(boot_cfg.get("n_boot", 1000)),
                               level=float(boot_cfg.get("level", 0.95)), seed=seed)
    for name, sweep in sweeps.items():
        entry = routers[name]
        entry["aiq"] = aiq_by_task(sweep, test.tasks, ranges)
        entry["aiq_minus_zero"] = boot[name]
        entry["curve"] = {t: hull_points(sweep, rows) for t, rows in by_task.items()}
        entry["at_price"] = at_prices(sweep, lams, test, by_task, at_price_setting[name])
    singles = {c: {t: {"quality": float(test.scores[rows, j].mean()), "cost_per_1k": float(1000 * test.costs[rows, j].mean())}
                   for t, rows in [("overall", np.arange(len(test))), *by_task.items()]}
               for j, c in enumerate(test.names)}
    report = {
        "command": cfg.get("command") or command_line(),
        "seed": seed,
        "data": {**data, "candidates": test.names},
        "aiq_range": {"convention": convention,
                      **{t: {"cost_min_per_1k": 1000 * lo, "cost_max_per_1k": 1000 * hi} for t, (lo, hi) in ranges.items()}},
        "price_weights": lams,
        "best_fixed_on_train": {f"{lam:g}": test.names[j] for lam, j in at_price_setting[ZERO].items()},
        "single_models": singles,
        "routers": routers,
        "skipped": skipped,
        "bootstrap": {"reference": ZERO, "n_boot": int(boot_cfg.get("n_boot", 1000)),
                      "level": float(boot_cfg.get("level", 0.95)), "stratified_by": "task"},
        "seconds": round(time.perf_counter() - t0, 2),
    }
    report["ledger"] = record_test_reading(ev, report, test)
    out_dir = Path(cfg["output_dir"])
    paths = write_pool_report(out_dir, report)
    report["paths"] = {k: str(v) for k, v in paths.items()}
    print(f"evaluate_router: report in {out_dir.resolve()}")
    for k, v in paths.items():
        print(f"  {k}: {v}")
    return report


def ledger_question_ids(test: EvalSet) -> list[str]:
    """The ids of the test rows as the ledger keys them: RouterBench's ``sample_id`` as every dataset built
    from the tables spells it (``routerbench_id``), else a digest of the prompt's text."""
    if test.ids is not None:
        return [routerbench_id(i) for i in test.ids]
    return [question_id("prompt", " ".join(p.split())) for p in test.prompts]


def record_test_reading(ev: Mapping[str, Any], report: Mapping[str, Any], test: EvalSet) -> dict[str, Any] | None:
    """Append this reading of the test rows (date, command, router types, overall AIQ gains, keyed by the
    questions read) to ``eval.ledger`` (``rlrouter.eval.ledger``), and return how often the same questions,
    or any of them, were read before and by which router types (so a report says when its figures are a
    second look)."""
    path = ev.get("ledger")
    if not path:
        return None
    tests = report["data"].get("test_sources") or report["data"].get("sources")
    types = {n: r.get("type") for n, r in report["routers"].items()}
    ids = ledger_question_ids(test)
    before = readings_of(path, ids)
    earlier = earlier_readings(path, test_key=before["test_key"])
    by_type = {t: [r["date"] for r in earlier if t in (r.get("router_types") or [])] for t in sorted(set(types.values()))}
    rec = record_reading(path, question_ids=ids, test_sources=[str(s) for s in tests], command=report.get("command"),
                         router_types=sorted({str(t) for t in types.values()}),
                         aiq_minus_zero={n: round(r["aiq_minus_zero"]["overall"]["mean"], 4)
                                         for n, r in report["routers"].items()})
    return {"path": str(path), "test_key": rec["test_key"], "questions": rec["questions"],
            "readings_before": {"same_questions": len(before["same"]), "any_of_them": len(before["overlapping"])},
            "read_before_by_type": {t: d for t, d in by_type.items() if d}}
