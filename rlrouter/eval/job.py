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

from rlrouter.config import to_plain_dict
from rlrouter.routers import baselines as _baselines  # noqa: F401 - registers the baseline router types
from rlrouter.routers import adapters as _adapters  # noqa: F401 - registers the adapters of trained routers
from rlrouter.routers import learned as _learned  # noqa: F401 - registers the probe and ensemble routers
from rlrouter.routers import encoder_router as _encoder_router  # noqa: F401 - registers the encoder router
from rlrouter.routers import online as _online  # noqa: F401 - registers the router that learns from feedback
from rlrouter.routers.baselines import oracle_curve, oracle_decisions, subject_gain_scores
from rlrouter.eval.ledger import earlier_readings, record_reading
from rlrouter.eval.metrics import (RouterMetrics, calls_cost, evaluate_decisions, random_quality_at_cost, summarize,
                                    threshold_sweep, weak_split)
from rlrouter.eval.ope import crossfit_reward_model, epsilon_soft, evaluate_all, one_hot, simulate_logging
from rlrouter.routers.reader import EvalSet, TokenEstimate, read_eval_set
from rlrouter.routers.base import (Router, RouterContext, ThresholdRouter, build_router, load_plugins,
                                   share_threshold)

# references that read the test outcomes: never a "best fixed router" of the online regret
ORACLES = ("oracle", "subject_oracle")


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


def split_by_subject(es: EvalSet, holdout: int, seed: int, prefix: str = "",
                     subjects: list[str] | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(train rows, test rows) leaving whole subjects out: every row of a held-out subject (its
    ``source``, e.g. "mmlu/anatomy") goes to test, so the routers are measured on subjects they never
    saw (the generalisation RouteLLM and RouterBench report on out-of-domain benchmarks).

    ``subjects`` names the held-out subjects; otherwise ``holdout`` of them are drawn with ``seed``
    from the sources starting with ``prefix``. A question that also appears under a training subject is
    dropped from training, so no test question is ever seen.
    """
    sources = np.array(es.sources)
    pool = sorted({s for s in es.sources if s.startswith(prefix)})
    if subjects:
        unknown = sorted(set(subjects) - set(es.sources))
        if unknown:
            raise ValueError(f"eval.split.test_subjects: {unknown} are not sources of the data "
                             f"(e.g. {pool[:3]})")
        held = set(subjects)
    else:
        if not 1 <= holdout < len(pool):
            raise ValueError(f"eval.split.holdout_subjects: must be in [1, {len(pool) - 1}] "
                             f"({len(pool)} subjects start with '{prefix}'), got {holdout}")
        rng = np.random.default_rng(seed)
        held = {pool[i] for i in rng.permutation(len(pool))[:holdout]}
    is_test = np.isin(sources, sorted(held))
    test_keys = {_normalize(es.prompts[i]) for i in np.nonzero(is_test)[0]}
    leak = np.array([_normalize(p) in test_keys for p in es.prompts]) & ~is_test
    return np.nonzero(~is_test & ~leak)[0], np.nonzero(is_test)[0]


def split(es: EvalSet, split_cfg: Mapping[str, Any], seed: int) -> tuple[np.ndarray, np.ndarray]:
    """The configured split (``eval.split``): ``by: subject`` (leave whole subjects out) or ``by: question``."""
    by = split_cfg.get("by", "question")
    s = int(split_cfg.get("seed", seed))
    if by == "question":
        return split_by_question(es, float(split_cfg.get("test_fraction", 0.2)), s)
    if by == "subject":
        return split_by_subject(es, int(split_cfg.get("holdout_subjects", 10)), s,
                                prefix=str(split_cfg.get("holdout_prefix", "") or ""),
                                subjects=list(split_cfg.get("test_subjects") or []))
    raise ValueError(f"eval.split.by: expected 'question' or 'subject', got '{by}'")


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


def train_rows_for(train: EvalSet, prefix: str, name: str) -> EvalSet:
    """The training rows whose source starts with ``prefix`` (a router's ``train_prefix``).

    Why: GSM8K in the training split teaches embedding routers that "mathematics" means the strong
    candidate wins, which the MMLU logs contradict (GPT-4 loses 29 points to Mixtral on MMLU high-school
    mathematics); a router may train on one task's rows to measure that confound.
    """
    rows = [i for i, s in enumerate(train.sources) if s.startswith(prefix)]
    if not rows:
        raise ValueError(f"routers.{name}.train_prefix: no training source starts with '{prefix}' "
                         f"(sources: {sorted(set(train.sources))[:5]}...)")
    return train.subset(rows)


# RouterBench tables' reader options (rlrouter.routers.reader.read_routerbench), read from eval.<key> when set
TABLE_OPTIONS = ("candidates", "blank_scores", "repeated_ids", "question")


def load_eval_set(ev: Mapping[str, Any], key: str = "data", report: list | None = None) -> EvalSet:
    """Read and concatenate the sources listed under ``eval.<key>``; a RouterBench table's quirks (blank
    cells, repeated ids) are appended to ``report`` as ``reader.TableReport``s."""
    tokens = TokenEstimate(**(ev.get("tokens") or {}))
    prices = ev.get("prices") or {}
    sources = ev.get(key)
    if not sources:
        raise ValueError(f"eval.{key}: no data sources listed")
    if isinstance(sources, str):
        sources = [sources]
    table = {k: ev[k] for k in TABLE_OPTIONS if ev.get(k) is not None}
    if "candidates" in table:
        table["candidates"] = list(table["candidates"])
    if report is not None:
        table["report"] = report
    parts = [read_eval_set(str(src), fmt=ev.get("format", "auto"), prices=prices, tokens=tokens,
                           allow_pickle=bool(ev.get("allow_pickle", False)), **table) for src in sources]
    return EvalSet.concat(parts) if len(parts) > 1 else parts[0]


def _resolved(src: Any) -> str:
    s = str(src)
    return s if "://" in s else str(Path(s).expanduser().resolve())


def _overlaps(a: str, b: str) -> bool:
    """Whether two sources name the same data: equal, or one a folder holding the other."""
    if a == b:
        return True
    if "://" in a or "://" in b:
        return False
    pa, pb = Path(a), Path(b)
    return pa in pb.parents or pb in pa.parents


def lockbox_sources(ev: Mapping[str, Any]) -> list[str]:
    """``eval.lockbox.data`` as resolved paths (URLs as given)."""
    data = (ev.get("lockbox") or {}).get("data") or []
    return [_resolved(s) for s in ([data] if isinstance(data, str) else data)]


def check_lockbox(ev: Mapping[str, Any]) -> bool:
    """Refuse a development run that would read the lockbox; returns whether this run is the reading.

    The lockbox (``eval.lockbox.data``) is set aside before any choice is made: a run with
    ``eval.lockbox.read: false`` may not list any of it (or a folder holding it) under ``eval.data``,
    ``eval.train_data`` or ``eval.test_data``. With ``read: true`` the lockbox is the test set and the
    development data (``eval.train_data``, else all of ``eval.data``) trains."""
    box = lockbox_sources(ev)
    reading = bool((ev.get("lockbox") or {}).get("read", False))
    if reading and not box:
        raise ValueError("eval.lockbox.read: true, but eval.lockbox.data lists no sources")
    for key in ("data", "train_data", "test_data"):
        if reading and key == "test_data":
            continue
        srcs = ev.get(key) or []
        for src in [srcs] if isinstance(srcs, str) else srcs:
            hit = next((b for b in box if _overlaps(_resolved(src), b)), None)
            if hit is not None:
                raise ValueError(f"eval.{key}: '{src}' reads the lockbox ({hit}, eval.lockbox.data); development "
                                 f"runs may not read it. The one reading sets eval.lockbox.read=true")
    return reading


def load_split(ev: Mapping[str, Any], seed: int) -> tuple[EvalSet, EvalSet, dict[str, Any]]:
    """(train, test, description): ``eval.train_data`` + ``eval.test_data`` when both are set, else
    ``eval.data`` split by ``eval.split``; then ``eval.test_subset`` (a seeded subset of test). A lockbox
    reading (``eval.lockbox.read``) trains on the development data and tests on ``eval.lockbox.data``."""
    split_cfg = dict(ev.get("split") or {})
    max_prompts = int(ev.get("max_prompts", 0) or 0)
    if check_lockbox(ev):
        train = subsample(load_eval_set(ev, "train_data" if ev.get("train_data") else "data"), max_prompts, seed)
        test = subsample(load_eval_set({**ev, "lockbox_data": ev["lockbox"]["data"]}, "lockbox_data"),
                         max_prompts, seed)
        test = test.aligned(train.names, where="eval.lockbox.data (against the development data)")
        desc = {"protocol": "lockbox reading", "train_sources": [str(s) for s in ev.get("train_data") or ev.get("data")],
                "test_sources": [str(s) for s in lockbox_sources(ev)]}
    elif ev.get("train_data") or ev.get("test_data"):
        if not (ev.get("train_data") and ev.get("test_data")):
            raise ValueError("eval.train_data / eval.test_data: set both, or neither (then eval.data is split)")
        train = subsample(load_eval_set(ev, "train_data"), max_prompts, seed)
        test = subsample(load_eval_set(ev, "test_data"), max_prompts, seed)
        test = test.aligned(train.names, where="eval.test_data (against eval.train_data)")
        desc = {"protocol": "separate train_data / test_data",
                "train_sources": [str(s) for s in ev["train_data"]], "test_sources": [str(s) for s in ev["test_data"]]}
    else:
        full = subsample(load_eval_set(ev), max_prompts, seed)
        train_rows, test_rows = split(full, split_cfg, seed)
        train, test = full.subset(train_rows), full.subset(test_rows)
        by = split_cfg.get("by", "question")
        desc = {"protocol": f"split by {by}", "seed": int(split_cfg.get("seed", seed))}
        if by == "subject":
            desc["test_subjects"] = sorted(set(test.sources))
        else:
            desc["test_fraction"] = float(split_cfg.get("test_fraction", 0.2))
    # a fixed, seeded subset of the test split (each task keeping its share) for routers too slow for all
    # of it (Router-R1 on CPU); every router and baseline of the run is scored on the same subset
    test_subset = int(ev.get("test_subset", 0) or 0)
    test = subsample(test, test_subset, int(split_cfg.get("seed", seed)))
    desc["test_subset"] = test_subset
    return train, test, desc


def question_embedder(ev: Mapping[str, Any]):
    """MiniLM embeddings through ``rlrouter.embeddings.embed_texts``: disk-cached, encoded in length order
    (one long MMLU passage pads only batches of long prompts) and stored every ``bucket`` prompts, so an
    interrupted run resumes."""
    emb = ev.get("embedding") or {}
    model, cache = emb.get("model", "minilm-l6"), bool(emb.get("cache", True))
    bucket = int(emb.get("bucket", 512))

    def embed(texts: list[str]) -> np.ndarray:
        from rlrouter.embeddings import embed_texts

        texts = list(texts)
        if not texts:
            return np.zeros((0, 384), dtype=np.float32)
        return embed_texts(texts, model=model, cache=cache, chunk=bucket)

    return embed


def _slices(test: EvalSet) -> dict[str, np.ndarray]:
    tasks = np.array(test.tasks)
    out = {"all": np.arange(len(test))}
    for t in sorted(set(test.tasks)):
        out[t] = np.nonzero(tasks == t)[0]
    return out


def share_for_quality(strong_share: np.ndarray, quality: np.ndarray, target: float) -> float:
    """Smallest strong-call share at which a swept curve first reaches ``target`` quality (linear
    between points; nan if never): e.g. the share that buys 95% of always-strong's quality."""
    x, y = np.asarray(strong_share, dtype=np.float64), np.asarray(quality, dtype=np.float64)
    order = np.argsort(x, kind="stable")
    x, y = x[order], y[order]
    if y[0] >= target:
        return float(x[0])
    for i in range(1, len(x)):
        if y[i] >= target:
            return float(x[i - 1] + (target - y[i - 1]) / (y[i] - y[i - 1]) * (x[i] - x[i - 1]))
    return float("nan")


def at_shares(s: np.ndarray, scores: np.ndarray, costs: np.ndarray, weak: int, strong: int,
              shares: list[float]) -> dict[str, dict[str, float]]:
    """A threshold router calibrated (label-free, a quantile of its own scores) to each requested share
    of strong calls: the quality, mean cost and actual strong share there."""
    out = {}
    rows = np.arange(len(s))
    for share in shares:
        t = float(np.quantile(s, 1.0 - share)) if share > 0 else float("inf")
        dec = np.where(s >= t, strong, weak)
        out[f"{share:g}"] = {"quality": float(scores[rows, dec].mean()), "cost_mean": float(costs[rows, dec].mean()),
                             "strong_share": float((dec == strong).mean())}
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

    cfg = to_plain_dict(cfg)
    ev = cfg["eval"]
    seed = int(cfg.get("seed", 0))
    t0 = time.perf_counter()
    load_plugins(list(ev.get("plugins") or []))
    train, test, split_desc = load_split(ev, seed)
    lockbox = open_lockbox(cfg) if split_desc["protocol"] == "lockbox reading" else None
    names = train.names
    weak, strong = train.index(ev["weak"]), train.index(ev["strong"])
    ctx = RouterContext(candidates=names, weak=weak, strong=strong, train=train, embed=question_embedder(ev), seed=seed,
                        work_dir=Path(cfg["output_dir"]))

    specs: dict[str, dict[str, Any]] = {k: dict(v) for k, v in (ev.get("baselines") or {}).items() if v}
    router_cfg = cfg.get("router")
    if router_cfg:
        specs[router_cfg.get("name") or router_cfg["type"]] = dict(router_cfg)
    for name, spec in (cfg.get("routers") or {}).items():
        if spec:
            specs[name] = dict(spec)

    num_thresholds = int(ev.get("num_thresholds", 10))
    report_shares = [float(x) for x in (ev.get("report_strong_shares") or [0.2, 0.5, 0.8])]
    operating_share = ev.get("operating_strong_share")
    slices = _slices(test)
    decisions: dict[str, np.ndarray] = {}
    strong_scores: dict[str, np.ndarray] = {}
    timings: dict[str, float] = {}
    router_info: dict[str, dict[str, Any]] = {}  # what a router reports of itself (Router-R1: where it routed)
    paid: dict[str, list[list[int]]] = {}  # every call a router paid for, per test prompt (a cascade's, beyond its route)
    online: dict[str, Any] = {}
    with tqdm(total=len(specs) + 1, desc="evaluate_router", unit="router") as bar:
        for name, spec in specs.items():
            bar.set_postfix_str(name)
            t = time.perf_counter()
            spec.setdefault("name", name)
            # a router may keep its own threshold (operating_strong_share: null) instead of the shared one
            share = spec.pop("operating_strong_share", operating_share)
            # a router may learn from one task's rows only (train_prefix: "mmlu/"); it is tested on all of test
            prefix = spec.pop("train_prefix", None)
            router: Router = build_router(spec, ctx)
            router.fit(train_rows_for(train, str(prefix), name) if prefix else train)
            ctx.extra.setdefault("fitted", {})[name] = router  # an ensemble later in the run may reuse it (ref)
            if isinstance(router, ThresholdRouter) and getattr(router, "online", False):
                # learns from each call's outcome on the test stream; its sweep uses the arrival scores
                decisions[name] = np.asarray(router.replay(test), dtype=np.int64)
                strong_scores[name] = np.asarray(router.arrival_scores)
                online[name] = router
            elif isinstance(router, ThresholdRouter):
                strong_scores[name] = router.strong_score(test.prompts)
                if share is not None and spec.get("type") not in ("random",):
                    # label-free: a quantile of the router's scores on the test prompts, as RouteLLM's
                    # calibrate_threshold does on unlabelled traffic; outcomes are never read
                    router.calibrate(test.prompts, float(share), scores=strong_scores[name])
                decisions[name] = np.where(strong_scores[name] >= router.threshold, router.strong, router.weak)
            else:
                decisions[name] = np.asarray(router.replay(test), dtype=np.int64)
                if getattr(router, "online", False):
                    online[name] = router
            timings[name] = time.perf_counter() - t
            if getattr(router, "paid_calls", None) is not None:  # a router that pays for more than its route
                paid[name] = router.paid_calls
            elif getattr(router, "reads_weak_reply", False):  # decides on the weak reply: every prompt pays for it
                paid[name] = [[weak] if d == weak else [weak, int(d)] for d in decisions[name]]
            if callable(getattr(router, "report", None)):
                router_info[name] = router.report()
            bar.update(1)
        bar.set_postfix_str("oracle")
        decisions["oracle"] = oracle_decisions(test.scores, test.costs)
        if len(set(test.sources)) > 1:  # the subject oracle (baselines.subject_gain_scores): reads outcomes too
            subj = subject_gain_scores(test.sources, test.scores, weak, strong)
            strong_scores["subject_oracle"] = subj
            cut = share_threshold(subj, 0.5 if operating_share is None else float(operating_share))
            decisions["subject_oracle"] = np.where(subj >= cut, strong, weak)
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
            per[name]["weak_split"] = weak_split(sc, dec[rows], weak, strong)
            if name in paid:  # every call it made, priced: a cascade's cheap call before an escalation too
                per[name]["cost_mean_all_calls"] = float(calls_cost(co, [paid[name][r] for r in rows]).mean())
                per[name]["random_quality_at_cost_all_calls"] = random_quality_at_cost(
                    per[name]["cost_mean_all_calls"], weak_ref, strong_ref)
            if curve is not None:
                per[name]["at_share"] = at_shares(strong_scores[name][rows], sc, co, weak, strong, report_shares)
                per[name]["share_for_95pct_strong"] = share_for_quality(curve.strong_share, curve.quality,
                                                                        0.95 * strong_ref[0])
        shares = np.linspace(0, 1, 21)
        per["oracle"]["optimal_curve"] = {"strong_share": shares.tolist(),
                                          "quality": oracle_curve(sc, co, weak, strong, shares).tolist()}
        results[sname] = {"n": int(len(rows)), "weak": {"quality": weak_ref[0], "cost_mean": weak_ref[1]},
                          "strong": {"quality": strong_ref[0], "cost_mean": strong_ref[1]},
                          "cost_range": list(cost_range), "routers": per}

    online_report = {name: online_regret(r, test, decisions, name) for name, r in online.items()}
    boot_cfg = ev.get("bootstrap") or {}
    boot = None
    if boot_cfg.get("enabled", True):
        boot = _run_bootstrap(boot_cfg, test, decisions, strong_scores, specs, weak, strong, num_thresholds, seed)
    for name, r in online.items():  # the stream's second half: after the router has learned from the first
        order = getattr(r, "stream_order", None)
        late = np.sort(np.asarray(order if order is not None else np.arange(len(test)))[len(test) // 2:])
        online_report[name]["second_half"] = {
            "n": int(len(late)),
            "quality": {k: float(test.scores[late, d[late]].mean()) for k, d in decisions.items()},
            "bootstrap": _run_bootstrap({**boot_cfg, "baseline_types": ["mf"]} if boot_cfg else {}, test.subset(late),
                                        {k: d[late] for k, d in decisions.items()},
                                        {k: sc[late] for k, sc in strong_scores.items()}, specs, weak, strong,
                                        num_thresholds, seed) if boot is not None else None}
    ope = _run_ope(ev.get("ope") or {}, test, decisions, names, seed) if (ev.get("ope") or {}).get("enabled") else None

    report = {
        "command": cfg.get("command") or command_line(),
        "seed": seed,
        "data": {"sources": [str(s) for s in ev.get("data") or []], "train": len(train), "test": len(test),
                 "split": split_desc, "test_subset": split_desc["test_subset"],
                 "candidates": [{"name": c.name, "price_in_per_1m": c.price_in, "price_out_per_1m": c.price_out}
                                for c in train.candidates],
                 "weak": names[weak], "strong": names[strong],
                 "tokens": {"prompt_mean": float(test.prompt_tokens.mean()),
                            "completion_mean": dict(zip(names, test.completion_tokens.mean(axis=0).tolist()))}},
        "routers": {name: {"type": spec.get("type"), "seconds": round(timings[name], 2), **router_info.get(name, {})}
                    for name, spec in specs.items()},
        "slices": results,
        "bootstrap": boot,
        "online": online_report,
        "ope": ope,
        "lockbox": lockbox,
        "seconds": round(time.perf_counter() - t0, 2),
    }
    if lockbox is not None:
        record_lockbox_read(lockbox, report)
    paths = write_report(Path(cfg["output_dir"]), report)
    report["paths"] = {k: str(v) for k, v in paths.items()}
    print(f"evaluate_router: report in {Path(cfg['output_dir']).resolve()}")
    for k, v in paths.items():
        print(f"  {k}: {v}")
    return report


def lockbox_fingerprint(cfg: Mapping[str, Any]) -> str:
    """What makes two readings "the same config": the eval section and the routers, without output paths."""
    import hashlib

    ev = {k: v for k, v in cfg["eval"].items() if k != "lockbox"}
    ev["lockbox"] = {k: v for k, v in (cfg["eval"].get("lockbox") or {}).items() if k != "ledger"}
    key = {"seed": cfg.get("seed", 0), "eval": ev, "router": cfg.get("router"), "routers": cfg.get("routers")}
    return hashlib.sha256(json.dumps(key, sort_keys=True, default=str).encode()).hexdigest()[:16]


def _ledger(cfg: Mapping[str, Any]) -> Path | None:
    path = (cfg["eval"].get("lockbox") or {}).get("ledger")
    return Path(path) if path else None


def open_lockbox(cfg: Mapping[str, Any]) -> dict[str, Any]:
    """Before a lockbox reading: its fingerprint and every earlier reading in the ledger with the same config
    (warned about: a second reading of the same config is a second look at the test) or the same router
    types (listed, so the report says which families were read before)."""
    import warnings

    fp = lockbox_fingerprint(cfg)
    types = sorted({str(spec.get("type")) for spec in [*(cfg["eval"].get("baselines") or {}).values(),
                                                         *((cfg.get("routers") or {}).values()), cfg.get("router")]
                    if spec})
    ledger = _ledger(cfg)
    earlier = earlier_readings(ledger)
    same = [r for r in earlier if r.get("fingerprint") == fp]
    if same:
        warnings.warn(f"eval.lockbox: this config (fingerprint {fp}) already read the lockbox on "
                      f"{', '.join(r.get('date', '?') for r in same)} ({ledger}); a second reading is not a "
                      f"fresh test", stacklevel=2)
    families = {t: [r.get("date") for r in earlier if t in (r.get("router_types") or [])] for t in types}
    return {"fingerprint": fp, "ledger": str(ledger) if ledger else None, "router_types": types,
            "read_before_same_config": [r.get("date") for r in same],
            "read_before_by_type": {t: d for t, d in families.items() if d}}


def record_lockbox_read(lockbox: Mapping[str, Any], report: Mapping[str, Any]) -> None:
    """Append this reading (date, fingerprint, router types, sources, each router's APGR) to the ledger
    (``rlrouter.eval.ledger``)."""
    per = report["slices"]["all"]["routers"]
    record_reading(lockbox.get("ledger"), fingerprint=lockbox["fingerprint"], router_types=lockbox["router_types"],
                   test_sources=report["data"]["split"].get("test_sources"), command=report.get("command"),
                   apgr={k: v.get("apgr") for k, v in per.items()})


def command_line() -> str | None:
    """The command that launched this run when Hydra launched it (the table in the docs cites it)."""
    try:
        from hydra.core.hydra_config import HydraConfig

        overrides = HydraConfig.get().overrides.task
    except Exception:  # not under @hydra.main (tests call run() directly)
        return None
    return " ".join(["python jobs/evaluate_router.py", *overrides])


def online_regret(router: Any, test: EvalSet, decisions: Mapping[str, np.ndarray], name: str) -> dict[str, Any]:
    """Regret of an online router over the test stream, in its own objective
    (``router.objective``: the selector's score times its cost bonus) and in plain quality: against
    the best fixed candidate (always the same one) and the best fixed router of this run (every other
    evaluated router, frozen, oracle excluded). Also the cumulative regret at 10%, 20%, ... of the stream."""
    rows = np.arange(len(test))
    obj = router.objective(test.scores)  # (N, M)
    order = getattr(router, "stream_order", rows)
    mine = obj[rows, decisions[name]]
    fixed = {f"always {c}": obj[:, j] for j, c in enumerate(test.names)}
    fixed.update({k: obj[rows, d] for k, d in decisions.items() if k not in (name, *ORACLES)})
    best_arm = max((k for k in fixed if k.startswith("always ")), key=lambda k: fixed[k].sum())
    best_router = max(fixed, key=lambda k: fixed[k].sum())
    checkpoints = np.linspace(0.1, 1.0, 10)
    cum = {k: np.cumsum(fixed[k][order] - mine[order]) for k in (best_arm, best_router)}
    if "subject_oracle" in decisions:  # the reference that knows each subject's gain from the test outcomes
        cum["subject_oracle"] = np.cumsum(obj[rows, decisions["subject_oracle"]][order] - mine[order])
    n_seen = np.arange(1, len(test) + 1)
    cum_quality = {k: (np.cumsum(test.scores[rows, d][order]) / n_seen) for k, d in decisions.items() if k != "oracle"}
    q = test.scores[rows, decisions[name]]
    return {"stream": len(test), "objective_mean": float(mine.mean()), "quality": float(q.mean()),
            "best_fixed_candidate": best_arm, "regret_vs_best_candidate": float(cum[best_arm][-1]),
            "best_fixed_router": best_router, "regret_vs_best_router": float(cum[best_router][-1]),
            "quality_regret_vs_best_router": float(test.scores[rows, decisions[best_router]].sum() - q.sum())
            if best_router in decisions else None,
            "regret_curve": {"fraction": checkpoints.tolist(),
                             **{f"vs_{k}" if k == "subject_oracle" else "vs_best_router":
                                [float(cum[k][int(f * len(test)) - 1]) for f in checkpoints]
                                for k in (best_router, "subject_oracle") if k in cum}},
            "cumulative_quality": {k: [float(c[int(f * len(test)) - 1]) for f in checkpoints]
                                   for k, c in cum_quality.items()}}


def _run_bootstrap(bc: Mapping[str, Any], test: EvalSet, decisions: Mapping[str, np.ndarray],
                   strong_scores: Mapping[str, np.ndarray], specs: Mapping[str, Mapping[str, Any]], weak: int,
                   strong: int, num_thresholds: int, seed: int) -> dict[str, Any]:
    """Paired bootstrap intervals of every router against random and against the best baseline (the
    learned baseline, kNN or MF, with the highest APGR on this test set)."""
    from rlrouter.eval.bootstrap import apgr_on_rows, paired_bootstrap

    baseline_types = set(bc.get("baseline_types") or ["knn", "mf"])
    learned = [n for n, sp in specs.items() if sp.get("type") in baseline_types and n in strong_scores]
    idx = np.arange(len(test))
    best = max(learned, key=lambda n: apgr_on_rows(idx, strong_scores[n], test.scores, test.costs, weak, strong,
                                                 num_thresholds)) if learned else None
    refs = {"random": "random"} if "random" in decisions else {}
    if best is not None:
        refs["best_baseline"] = best
    level = float(bc.get("level", 0.95))
    n_boot = int(bc.get("n_boot", 1000))
    routers = paired_bootstrap(test.scores, test.costs, weak, strong, decisions, strong_scores, refs,
                               num_thresholds=num_thresholds, n_boot=n_boot, level=level, seed=seed)
    return {"level": level, "n_boot": n_boot, "best_baseline": best, "references": refs, "routers": routers}


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
