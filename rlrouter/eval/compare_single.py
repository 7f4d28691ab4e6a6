"""The served router against the best single model, from the app's own traffic (``rlrouter compare-to-single``).

The answer a platform team's manager asks for: is routing worth it, against sending everything to the one model
that does best? Read from a traffic export (``jobs/export_traffic.py``: ``train.parquet`` and ``test.parquet``,
split by time). Each row's reward is ``score - cost_weight x 1000 x cost_usd`` (``traffic_router.reward_of``):
the score from the feedback on the reply (or a replay's logged correctness, or the judge's grade) and the
call's cost.

- **Served**: the mean reward of the routes the app answered with (on-policy: the rows that carry one).
- **Always m**: the doubly robust off-policy estimate (``rlrouter.eval.ope``) of sending every request to
  candidate ``m``, from the logged routes with their propensities and the exploration calls. Without
  exploration only the app's own routes are observed, and a candidate it seldom chose is estimated from few
  rows: the intervals say so.
- **Best single**: the candidate with the best estimate **on train**; reported **on test**, so the choice
  does not read the rows it is judged on. Likewise the **per-task rule** (the best candidate of each task on
  train), when the export carries a task label (``--task-column``; live traffic usually carries none).

The differences are paired per request (served minus the estimate's per-request term), with a CLT interval.
A request without a scored reply is left out and counted: the figures assume feedback is missing at random.
"""

from __future__ import annotations

from pathlib import Path
from statistics import NormalDist
from typing import Any, Sequence

import numpy as np

from rlrouter.eval.ope import LoggedFeedback, crossfit_reward_model, estimator_terms
from rlrouter.routers.traffic_router import TrafficTable, cell_rewards, read_logged_table


def _kept_index(t: TrafficTable, cost_weight: float) -> tuple[np.ndarray, np.ndarray]:
    """The rows whose logged route has a propensity and a scored reply, and every row's on-policy reward."""
    rewards = cell_rewards(t, cost_weight)
    r0 = np.where(t.logged >= 0, rewards[np.arange(len(t)), np.maximum(t.logged, 0)], np.nan)
    keep = np.flatnonzero((t.logged >= 0) & np.isfinite(t.propensity) & (t.propensity > 0) & np.isfinite(r0))
    return keep, r0


def _logged(t: TrafficTable, cost_weight: float) -> tuple[TrafficTable, LoggedFeedback, np.ndarray, np.ndarray]:
    """The rows with a scored logged route, their bandit feedback, their on-policy rewards, and their indices."""
    keep, r0 = _kept_index(t, cost_weight)
    if len(keep) < 2:
        raise ValueError(f"compare-to-single: {len(keep)} requests with a scored route and its propensity; need >= 2 "
                         "(is feedback or the judge on, and serving.traffic enabled?)")
    s, r0 = t.rows(keep), r0[keep]
    rewards, rows = cell_rewards(s, cost_weight), np.arange(len(keep))
    ex = (s.explored >= 0) & np.isfinite(s.explored_propensity) & (s.explored_propensity > 0)
    ex &= np.isfinite(rewards[rows, np.maximum(s.explored, 0)])
    fb = LoggedFeedback(s.logged, s.propensity, r0, explored=np.where(ex, s.explored, -1),
                        explored_propensities=np.where(ex, s.explored_propensity, 1.0),
                        explored_rewards=np.where(ex, rewards[rows, np.maximum(s.explored, 0)], 0.0))
    return s, fb, r0, keep


def _dr_terms(actions: np.ndarray, fb: LoggedFeedback, q_hat: np.ndarray) -> np.ndarray:
    """Per-request DR terms of the deterministic policy that sends request i to ``actions[i]``."""
    probs = np.eye(q_hat.shape[1])[actions]
    num, _ = estimator_terms("dr", probs, fb, q_hat)
    return num


def _interval(x: np.ndarray, level: float) -> dict[str, float]:
    z = NormalDist().inv_cdf(0.5 + level / 2)
    m = float(np.mean(x))
    se = float(np.std(x, ddof=1) / np.sqrt(len(x))) if len(x) > 1 else float("inf")
    return {"mean": m, "lo": m - z * se, "hi": m + z * se}


def _best_actions(t: TrafficTable, fb: LoggedFeedback, groups: np.ndarray) -> tuple[int, dict[str, int]]:
    """On train: the candidate with the best DR value, and per group (task) the same."""
    m = len(t.names)
    q = crossfit_reward_model(list(groups), fb, m)
    terms = np.stack([_dr_terms(np.full(len(fb.actions), a), fb, q) for a in range(m)], axis=1)  # (N, M)
    per_group = {str(g): int(terms[groups == g].mean(axis=0).argmax()) for g in np.unique(groups)}
    return int(terms.mean(axis=0).argmax()), per_group


def compare_to_single(train: TrafficTable, test: TrafficTable, cost_weight: float, level: float = 0.95,
                      train_tasks: Sequence[str] | None = None, test_tasks: Sequence[str] | None = None) -> dict[str, Any]:
    """The figures above. ``*_tasks``: a task label per row of each table (None: no per-task rule)."""
    if train.names != test.names:
        raise ValueError(f"compare-to-single: train's candidates {train.names} are not test's {test.names}")
    names = test.names
    tr, tr_fb, _, tr_keep = _logged(train, cost_weight)
    te, te_fb, served, te_keep = _logged(test, cost_weight)
    left_out = len(test) - len(te_keep)

    def labels(tasks: Sequence[str] | None, full: TrafficTable, keep: np.ndarray) -> np.ndarray:
        if tasks is None:
            return np.array(["all"] * len(keep), dtype=object)
        if len(tasks) != len(full):
            raise ValueError(f"compare-to-single: {len(tasks)} task labels for {len(full)} rows")
        return np.asarray(tasks, dtype=object)[keep]

    tr_groups, te_groups = labels(train_tasks, train, tr_keep), labels(test_tasks, test, te_keep)
    best, per_task = _best_actions(tr, tr_fb, tr_groups)
    q = crossfit_reward_model(list(te_groups), te_fb, len(names))
    n = len(te_fb.actions)
    singles = {m: _interval(_dr_terms(np.full(n, a), te_fb, q), level) for a, m in enumerate(names)}
    out: dict[str, Any] = {
        "rows": n, "left_out": int(left_out), "explored_rows": int((te_fb.explored >= 0).sum()),
        "cost_weight": cost_weight, "level": level, "served": _interval(served, level),
        "served_shares": {m: float((te_fb.actions == a).mean()) for a, m in enumerate(names)},
        "always": singles, "best_single": names[best], "best_single_chosen_on": f"train ({len(tr_fb.actions)} requests)",
        "served_minus_best_single": _interval(served - _dr_terms(np.full(n, best), te_fb, q), level),
        "per_task_rule": None, "served_minus_per_task": None}
    if train_tasks is not None and test_tasks is not None:
        rule = {g: names[a] for g, a in per_task.items()}
        overall = names[best]
        acts = np.array([names.index(rule.get(str(g), overall)) for g in te_groups])
        out["per_task_rule"] = rule
        out["served_minus_per_task"] = _interval(served - _dr_terms(acts, te_fb, q), level)
    return out


def read_tasks(path: Path, column: str | None) -> list[str] | None:
    if column is None:
        return None
    import pandas as pd

    df = pd.read_parquet(path) if path.suffix == ".parquet" else pd.read_csv(path)
    if column not in df.columns:
        raise ValueError(f"{path}: no column '{column}' (--task-column); columns: {list(df.columns)[:12]} ...")
    return [str(v) for v in df[column]]


def compare_export(folder: str | Path, cost_weight: float, task_column: str | None = None,
                   level: float = 0.95) -> dict[str, Any]:
    """:func:`compare_to_single` on an export folder's ``train.parquet`` and ``test.parquet``."""
    folder = Path(folder)
    paths = [folder / "train.parquet", folder / "test.parquet"]
    for p in paths:
        if not p.exists():
            raise ValueError(f"{p}: no such file (an export folder of jobs/export_traffic.py holds train.parquet and "
                             "test.parquet)")
    train, test = (read_logged_table(p) for p in paths)
    return compare_to_single(train, test, cost_weight, level, read_tasks(paths[0], task_column),
                             read_tasks(paths[1], task_column))


def render(r: dict[str, Any]) -> str:
    """The comparison as a few lines of text."""
    def iv(d: dict[str, float]) -> str:
        return f"{d['mean']:+.4f} [{d['lo']:+.4f}, {d['hi']:+.4f}]"

    lines = [f"{r['rows']} test requests with a scored route ({r['left_out']} without, left out; "
             f"{r['explored_rows']} with an exploration call); reward = score - {r['cost_weight']:g} x 1000 x USD; "
             f"{r['level']:.0%} intervals",
             f"served router              {iv(r['served'])}  shares: "
             + ", ".join(f"{m} {s:.0%}" for m, s in r["served_shares"].items() if s > 0)]
    for m, d in r["always"].items():
        lines.append(f"always {m:<20}{iv(d)}  (doubly robust, off-policy)")
    lines.append(f"served - best single ({r['best_single']}, chosen on {r['best_single_chosen_on']}): "
                 f"{iv(r['served_minus_best_single'])}")
    if r["served_minus_per_task"] is not None:
        lines.append(f"served - per-task rule {r['per_task_rule']}: {iv(r['served_minus_per_task'])}")
    else:
        lines.append("per-task rule: the export carries no task label (--task-column)")
    return "\n".join(lines)
