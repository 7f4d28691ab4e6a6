"""Score routing on the policy's own objective: the Router-R1 reward of every fixed route, random
routing, the best per-task fixed route, the oracle and the policy, on the same questions and under one
cost scale.

Why one cost scale: the Router-R1 cost reward is ``1 - minmax(sqrt(cost))`` between percentiles of a
window of recent costs (``rlrouter.rewards.router_r1.CostWindow``). Scored each against its own window,
"always Mixtral" would spread its tiny costs over [0, 1] and lose cost reward it did not spend. Here the
window is the *reference window*: every candidate's call on every question of a reference set (the
training questions), so the same call earns the same cost reward whichever route made it.

A fixed route sends each question to one candidate and copies that candidate's reply into a well-formed
answer: format 0, outcome the logged correctness, cost the call's USD. The oracle takes the cheapest
candidate the logs show correct (the cheapest of all when none is). The cascade asks the cheapest
candidate first and the strongest too when the cheap reply states no final answer (``states_answer``): a
route that reads only what the policy reads, so it measures the question-level signal the policy can see.
The per-task rule takes, for each task, the fixed route with the best mean reward on the *reference*
questions, so it is chosen on one set and reported on another.
"""

from __future__ import annotations

import math
import random
from collections import Counter
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import numpy as np

from rlrouter.data.question import task_of
from rlrouter.eval.bootstrap import Interval, _interval
from rlrouter.rewards.router_r1 import (
    answer_score,
    call_outcomes,
    combine,
    format_scores,
    outcome_score,
    scale_cost,
)
from rlrouter.selector.aggregate import states_answer

PERCENTILES = (5.0, 95.0)


def strongest(candidates: Sequence[Any]) -> str:
    """The strong candidate: the largest (``params_b``), then the dearest."""
    return max(candidates, key=lambda c: (c.params_b, c.price_out, c.name)).name


def cheapest(candidates: Sequence[Any]) -> str:
    return min(candidates, key=lambda c: (c.price_in + c.price_out, c.name)).name


@dataclass
class RouteTable:
    """Each question's task and, per candidate, its logged correctness and the USD cost of the call."""

    tasks: list[str]
    candidates: list[str]
    correct: np.ndarray  # (N, K) 0/1
    cost: np.ndarray  # (N, K) USD
    strong: str
    prices: dict[str, float]  # USD per 1M output tokens, for the oracle's "cheapest"
    stated: np.ndarray | None = None  # (N, K) 1 where the reply states a final answer; None: every reply does

    def __len__(self) -> int:
        return len(self.tasks)

    @property
    def strong_index(self) -> int:
        return self.candidates.index(self.strong)

    @property
    def cheap(self) -> str:
        """The cheapest candidate by price per output token (ties: by name)."""
        return min(self.candidates, key=lambda c: (self.prices[c], c))

    def subset(self, rows: Sequence[int]) -> "RouteTable":
        rows = list(rows)
        return RouteTable([self.tasks[i] for i in rows], self.candidates, self.correct[rows], self.cost[rows],
                          self.strong, self.prices, None if self.stated is None else self.stated[rows])

    def stated_or_all(self) -> np.ndarray:
        return np.ones_like(self.correct) if self.stated is None else self.stated

    def cheap_states_none(self) -> np.ndarray:
        """Per question, whether the cheapest candidate's reply states no final answer (where the cascade
        escalates; ``curriculum.no_answer_share``'s stratum). All False when the table has no replies to read."""
        return self.stated_or_all()[:, self.candidates.index(self.cheap)] < 0.5


def route_table(pool: Any, items: Sequence[Mapping[str, Any]], metric: str = "em") -> RouteTable:
    """Send every question to every candidate of ``pool`` (what a fixed route does) and keep the outcome and
    cost of each call. A reply without logged correctness is scored against the gold answers."""
    names = list(pool.names)
    cands = [pool.get(n) for n in names]
    n, k = len(items), len(names)
    correct, cost, stated = np.zeros((n, k)), np.zeros((n, k)), np.zeros((n, k))
    for j, name in enumerate(names):
        resps = pool.route_sync([(name, it["query"]) for it in items])
        for i, (it, r) in enumerate(zip(items, resps)):
            correct[i, j] = outcome_of(r, list(it["ground_truth"]), metric)
            cost[i, j] = r.cost
            stated[i, j] = float(bool(r.ok) and states_answer(r.text or ""))
    return RouteTable([task_of(it) for it in items], names, correct, cost, strongest(cands),
                      {c.name: float(c.price_out) for c in cands}, stated)


def outcome_of(response: Any, golds: list[str], metric: str = "em") -> float:
    if getattr(response, "correct", None) is not None:
        return float(response.correct)
    if not response.ok:
        return 0.0
    return answer_score(response.text, golds, metric)


def cost_bounds(costs: np.ndarray, percentiles: Sequence[float] = PERCENTILES) -> tuple[float, float]:
    """(low, high) percentiles of the square-rooted costs: the reference window's scale."""
    roots = np.sqrt(np.asarray(costs, dtype=np.float64).ravel())
    if roots.size == 0:
        return (0.0, 0.0)
    lo, hi = np.percentile(roots, list(percentiles))
    return float(lo), float(hi)


def cost_rewards(costs: np.ndarray, bounds: tuple[float, float]) -> np.ndarray:
    """The cost reward of each USD cost under fixed bounds (``scale_cost``, the training reward's scaling)."""
    lo, hi = bounds
    flat = [1.0 - scale_cost(math.sqrt(max(float(c), 0.0)), lo, hi) for c in np.asarray(costs).ravel()]
    return np.asarray(flat).reshape(np.shape(costs))


def rewards(format_r: np.ndarray | float, outcome: np.ndarray, costs: np.ndarray, alpha: float,
            bounds: tuple[float, float]) -> np.ndarray:
    """Router-R1 totals (``combine``, formula ``router_r1``) of arrays of parts."""
    fmt = np.broadcast_to(np.asarray(format_r, dtype=np.float64), np.shape(outcome))
    c = cost_rewards(costs, bounds)
    return np.vectorize(lambda f, o, cr: combine(f, o, cr, alpha))(fmt, outcome, c).astype(np.float64)


def fixed_route_rewards(table: RouteTable, alpha: float, bounds: tuple[float, float]) -> np.ndarray:
    """(N, K): the reward of sending each question to each candidate and copying the reply."""
    return rewards(0.0, table.correct, table.cost, alpha, bounds)


# ---------------------------------------------------------------- routes: a candidate index per question


def oracle_choice(table: RouteTable) -> np.ndarray:
    """The cheapest candidate the logs show correct; the cheapest of all when none is."""
    order = sorted(range(len(table.candidates)), key=lambda j: (table.prices[table.candidates[j]], j))
    out = np.full(len(table), order[0], dtype=np.int64)
    for i in range(len(table)):
        for j in order:
            if table.correct[i, j] >= 0.5:
                out[i] = j
                break
    return out


def per_task_rule(reference: RouteTable, alpha: float, bounds: tuple[float, float]) -> dict[str, str]:
    """Each task's best fixed route by mean reward on the reference questions (ties: the cheaper)."""
    r = fixed_route_rewards(reference, alpha, bounds)
    tasks = np.asarray(reference.tasks)
    rule = {}
    for task in sorted(set(reference.tasks)):
        means = r[tasks == task].mean(axis=0)
        rule[task] = min(range(len(reference.candidates)),
                         key=lambda j: (-round(float(means[j]), 12), reference.prices[reference.candidates[j]]))
        rule[task] = reference.candidates[rule[task]]
    return rule


def best_fixed(reference: RouteTable, alpha: float, bounds: tuple[float, float]) -> str:
    """The fixed route with the best mean reward on the reference questions (ties: the cheaper)."""
    means = fixed_route_rewards(reference, alpha, bounds).mean(axis=0)
    j = min(range(len(reference.candidates)),
            key=lambda j: (-round(float(means[j]), 12), reference.prices[reference.candidates[j]]))
    return reference.candidates[j]


def fixed_name(table: RouteTable, candidate: str) -> str:
    if candidate == table.strong:
        return "always_strongest"
    if candidate == table.cheap:
        return "always_cheapest"
    return f"always_{candidate}"


# ---------------------------------------------------------------- per-question rows of a route or a policy


@dataclass
class Rows:
    """Per question: reward, outcome, USD cost, calls and strong calls, format validity."""

    reward: np.ndarray
    outcome: np.ndarray
    cost: np.ndarray
    calls: np.ndarray
    strong_calls: np.ndarray
    format_valid: np.ndarray


def choice_rows(table: RouteTable, choice: np.ndarray, alpha: float, bounds: tuple[float, float]) -> Rows:
    idx = np.arange(len(table))
    outcome, cost = table.correct[idx, choice], table.cost[idx, choice]
    return Rows(rewards(0.0, outcome, cost, alpha, bounds), outcome, cost, np.ones(len(table)),
                (choice == table.strong_index).astype(np.float64), np.ones(len(table)))


def cascade_rows(table: RouteTable, alpha: float, bounds: tuple[float, float]) -> Rows:
    """Ask the cheapest candidate; when its reply states no final answer, ask the strongest too and copy
    that reply (the cost is both calls'). With one candidate, or every reply stated, it is always-cheapest."""
    cheap = table.candidates.index(table.cheap)
    strong = table.strong_index
    escalate = table.cheap_states_none() & (strong != cheap)
    outcome = np.where(escalate, table.correct[:, strong], table.correct[:, cheap])
    cost = table.cost[:, cheap] + np.where(escalate, table.cost[:, strong], 0.0)
    return Rows(rewards(0.0, outcome, cost, alpha, bounds), outcome, cost, 1.0 + escalate,
                escalate.astype(np.float64), np.ones(len(table)))


def escalation_gain(table: RouteTable, alpha: float, bounds: tuple[float, float]) -> np.ndarray:
    """Per question: the reward of asking the strongest after the cheapest candidate (both calls' cost, the
    strongest's outcome) minus that of copying the cheap reply."""
    cheap, strong = table.candidates.index(table.cheap), table.strong_index
    answer = rewards(0.0, table.correct[:, cheap], table.cost[:, cheap], alpha, bounds)
    escalate = rewards(0.0, table.correct[:, strong], table.cost[:, cheap] + table.cost[:, strong], alpha, bounds)
    return escalate - answer


def escalation_value(table: RouteTable, alpha: float, bounds: tuple[float, float]) -> dict[str, Any]:
    """What asking the strongest after the cheapest candidate's reply is worth, against copying that reply:
    per task and kind of cheap reply (``stated``: it states a final answer; ``not_stated``), the number of
    questions and the mean and standard error of (both calls' cost, the strongest's outcome) minus (the cheap
    call's cost and outcome) under the reward. The step a policy that reads the reply chooses, and how much
    signal each question carries for it."""
    gain, none = escalation_gain(table, alpha, bounds), table.cheap_states_none()
    tasks = np.asarray(table.tasks)
    out: dict[str, Any] = {}
    for task in sorted(set(table.tasks)):
        out[task] = {}
        for kind, mask in (("stated", ~none), ("not_stated", none)):
            g = gain[(tasks == task) & mask]
            if g.size:
                out[task][kind] = {"n": int(g.size), "mean": float(g.mean()),
                                   "se": float(g.std(ddof=1) / math.sqrt(g.size)) if g.size > 1 else None}
    return out


def escalations(trajs: Sequence[Any], table: RouteTable) -> tuple[np.ndarray, np.ndarray]:
    """Per trajectory: whether its first call went to the cheapest candidate, and whether it then called the
    strongest too."""
    first = np.asarray([bool(t.routes) and t.routes[0].model == table.cheap for t in trajs], dtype=bool)
    up = np.asarray([f and any(r.model == table.strong for r in t.routes[1:]) for f, t in zip(first, trajs)],
                    dtype=bool)
    return first, up


def escalation(trajs: Sequence[Any], table: RouteTable, metric: str = "em") -> dict[str, Any]:
    """Does the policy read the reply? Of its trajectories whose first call went to the cheapest candidate,
    the share that then called the strongest, split by whether that cheap reply states a final answer (the
    logged reply to the question). A policy that uses the reply escalates more where it states none.
    ``strong_right``: escalations where the logs show the strongest right; ``miscopied``: of those, the ones
    whose final answer is wrong anyway (the strongest's reply not copied back)."""
    cheap_first, escalated = escalations(trajs, table)
    stated = ~table.cheap_states_none()
    out: dict[str, Any] = {}
    for name, want in (("stated", True), ("not_stated", False)):
        firsts = [i for i in range(len(trajs)) if cheap_first[i] and bool(stated[i]) == want]
        ups = [i for i in firsts if escalated[i]]
        right = [i for i in ups if table.correct[i, table.strong_index] >= 0.5]
        out[name] = {"n": len(firsts), "escalated": len(ups), "share": len(ups) / len(firsts) if firsts else 0.0,
                     "strong_right": len(right),
                     "miscopied": sum(trajectory_outcome(trajs[i], metric) < 0.5 for i in right)}
    return out


def escalation_signal(trajs: Sequence[Any], table: RouteTable, alpha: float, bounds: tuple[float, float],
                      n_boot: int = 2000, level: float = 0.95, seed: int = 0) -> dict[str, Any]:
    """Does the policy pick *which* stated replies to escalate on? Of its trajectories whose first call went to
    the cheapest candidate and whose cheap reply states a final answer (where escalating costs on average),
    those it escalated on against those it kept: the cheap candidate's logged accuracy, the share only the
    strongest got right, and the logged escalation gain (both calls' reward with the strongest's outcome
    minus the cheap call's reward, ``escalation_value``). ``cheap_right_kept_minus_escalated`` > 0: it
    escalates where the cheap reply is more often wrong, a per-question signal beyond the kind of reply;
    ``gain_escalated_minus_all``: what its choice is worth per escalation over escalating on as many stated
    replies at random. Percentile bootstrap intervals over those questions (each resample redraws them and
    recomputes both groups)."""
    cheap, strong = table.candidates.index(table.cheap), table.strong_index
    cheap_first, escalated = escalations(trajs, table)
    idx_a = np.flatnonzero(cheap_first & ~table.cheap_states_none()[:len(trajs)])
    esc = escalated[idx_a]
    right = table.correct[idx_a, cheap] >= 0.5
    only = (table.correct[idx_a, strong] >= 0.5) & ~right
    gain = escalation_gain(table, alpha, bounds)[idx_a]

    def stats(e: np.ndarray, r: np.ndarray, g: np.ndarray) -> tuple[float, float]:
        if not e.any():
            return float("nan"), float("nan")
        kept = float(r[~e].mean()) - float(r[e].mean()) if (~e).any() else float("nan")
        return kept, float(g[e].mean()) - float(g.mean())

    def group(mask: np.ndarray) -> dict[str, Any]:
        n = int(mask.sum())
        return {"n": n, "cheap_right": float(right[mask].mean()) if n else None,
                "strong_only_right": float(only[mask].mean()) if n else None,
                "gain": float(gain[mask].mean()) if n else None}

    point = stats(esc, right.astype(np.float64), gain)
    rng = np.random.default_rng(seed)
    draws = [stats(esc[r], right[r].astype(np.float64), gain[r])
             for r in (rng.integers(0, idx_a.size, size=idx_a.size) for _ in range(n_boot if idx_a.size else 0))]
    d = np.asarray(draws, dtype=np.float64).reshape(-1, 2)
    return {"escalated": group(esc), "kept": group(~esc), "all": group(np.ones(idx_a.size, dtype=bool)),
            "cheap_right_kept_minus_escalated": _interval(point[0], d[:, 0], level).to_dict(),
            "gain_escalated_minus_all": _interval(point[1], d[:, 1], level).to_dict()}


def trajectory_outcome(t: Any, metric: str = "em") -> float:
    """A trajectory's answer scored against its question's gold answers (0 without an answer;
    ``outcome_score``)."""
    return outcome_score(t.answer, list(t.item["ground_truth"]), metric, call_outcomes(t))


def policy_rows(trajs: Sequence[Any], candidates: Sequence[str], strong: str, alpha: float,
                bounds: tuple[float, float], metric: str = "em") -> Rows:
    """The policy's trajectories (one per question) under the same reward and cost scale as the routes."""
    fmt = format_scores(trajs, candidates)
    outcome_a = np.asarray([trajectory_outcome(t, metric) for t in trajs], dtype=np.float64)
    fmt_a = np.asarray(fmt, dtype=np.float64)
    cost = np.asarray([t.cost for t in trajs], dtype=np.float64)
    calls = np.asarray([len(t.routes) for t in trajs], dtype=np.float64)
    strong_calls = np.asarray([sum(r.model == strong for r in t.routes) for t in trajs], dtype=np.float64)
    return Rows(rewards(fmt_a, outcome_a, cost, alpha, bounds), outcome_a, cost, calls, strong_calls,
                (fmt_a == 0).astype(np.float64))


def summarize(rows: Rows, tasks: Sequence[str], route_share: dict[str, float] | None = None,
              route_share_by_task: dict[str, dict[str, float]] | None = None) -> dict[str, Any]:
    """Mean reward, accuracy, cost per query, format validity, and the strong-call share (strong calls over
    all calls) in all and per task; given them, each candidate's share of the calls, in all and per task."""
    tasks_a = np.asarray(tasks)

    def share(mask: np.ndarray) -> float:
        calls = rows.calls[mask].sum()
        return float(rows.strong_calls[mask].sum() / calls) if calls else 0.0

    everything = np.ones(len(tasks_a), dtype=bool)
    return {"n": int(len(tasks_a)), "mean_reward": float(rows.reward.mean()) if len(tasks_a) else 0.0,
            "accuracy": float(rows.outcome.mean()) if len(tasks_a) else 0.0,
            "cost_per_query": float(rows.cost.mean()) if len(tasks_a) else 0.0,
            "format_valid": float(rows.format_valid.mean()) if len(tasks_a) else 0.0,
            "calls_per_query": float(rows.calls.mean()) if len(tasks_a) else 0.0,
            "strong_share": share(everything),
            "strong_share_by_task": {t: share(tasks_a == t) for t in sorted(set(tasks))},
            "mean_reward_by_task": {t: float(rows.reward[tasks_a == t].mean()) for t in sorted(set(tasks))},
            **({"route_share": route_share} if route_share is not None else {}),
            **({"route_share_by_task": route_share_by_task} if route_share_by_task is not None else {})}


def choice_share(table: RouteTable, choice: np.ndarray) -> dict[str, float]:
    n = max(1, len(choice))
    return {c: float((np.asarray(choice) == j).sum() / n) for j, c in enumerate(table.candidates)}


def rows_share(table: RouteTable, rows: Rows) -> dict[str, float]:
    """Share of calls per candidate of a route that calls the cheapest first and the strongest at times."""
    cheap = table.cheap
    total = float(rows.calls.sum())
    strong = float(rows.strong_calls.sum())
    out = {c: 0.0 for c in table.candidates}
    if total:
        out[table.strong] = strong / total
        out[cheap] = (total - strong) / total if cheap != table.strong else 1.0
    return out


def trajectory_share(trajs: Sequence[Any], candidates: Sequence[str]) -> dict[str, float]:
    calls = Counter(r.model for t in trajs for r in t.routes)
    total = sum(calls.values())
    return {c: calls.get(c, 0) / total if total else 0.0 for c in candidates}


def paired_diff(a: np.ndarray, b: np.ndarray, n_boot: int = 2000, level: float = 0.95, seed: int = 0) -> Interval:
    """Paired percentile bootstrap interval of mean(a) - mean(b) over questions (each resample draws the
    questions once for both)."""
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    if a.shape != b.shape:
        raise ValueError(f"paired_diff: {a.shape} against {b.shape}")
    if a.size == 0:
        return Interval(float("nan"), float("nan"), float("nan"))
    d = a - b
    rng = np.random.default_rng(seed)
    draws = np.array([d[rng.integers(0, d.size, size=d.size)].mean() for _ in range(n_boot)])
    return _interval(float(d.mean()), draws, level)


def scoreboard(table: RouteTable, reference: RouteTable, alpha: float, trajs: Sequence[Any] | None = None,
               seed: int = 0, metric: str = "em", n_boot: int = 2000,
               percentiles: Sequence[float] = PERCENTILES, sampled: Sequence[Any] | None = None) -> dict[str, Any]:
    """Every route on ``table``'s questions under one reward: each fixed route, random, the per-task rule and
    the best fixed route (both chosen on ``reference``), the oracle and, given its trajectories, the policy,
    with paired bootstrap intervals of the policy against the best fixed route and the per-task rule.
    ``sampled``: k sampled trajectories a question (item-major), scored as ``policy_sampled`` (the mean over
    each question's k, paired with the routes on that question)."""
    bounds = cost_bounds(reference.cost, percentiles)
    rng = random.Random(seed)
    rule = per_task_rule(reference, alpha, bounds)
    fixed = best_fixed(reference, alpha, bounds)
    by_task = None
    choices = {fixed_name(table, c): np.full(len(table), j, dtype=np.int64) for j, c in enumerate(table.candidates)}
    choices["random"] = np.asarray([rng.randrange(len(table.candidates)) for _ in range(len(table))], dtype=np.int64)
    choices["per_task_rule"] = np.asarray([table.candidates.index(rule.get(t, fixed)) for t in table.tasks],
                                          dtype=np.int64)
    choices["oracle"] = oracle_choice(table)
    routes = {k: choice_rows(table, c, alpha, bounds) for k, c in choices.items()}
    shares = {k: choice_share(table, c) for k, c in choices.items()}
    routes["cascade"] = cascade_rows(table, alpha, bounds)
    shares["cascade"] = rows_share(table, routes["cascade"])
    if trajs is not None:
        if len(trajs) != len(table):
            raise ValueError(f"scoreboard: {len(trajs)} trajectories for {len(table)} questions")
        routes["policy"] = policy_rows(trajs, table.candidates, table.strong, alpha, bounds, metric)
        shares["policy"] = trajectory_share(trajs, table.candidates)
        by_task = {task: trajectory_share([t for t, x in zip(trajs, table.tasks) if x == task], table.candidates)
                   for task in sorted(set(table.tasks))}
    best = fixed_name(table, fixed)
    out: dict[str, Any] = {"alpha": alpha, "cost_bounds": list(bounds), "percentiles": list(percentiles),
                           "strong": table.strong, "best_fixed": best, "per_task": rule,
                           "routes": {k: summarize(v, table.tasks, shares[k], by_task if k == "policy" else None)
                                      for k, v in routes.items()},
                           "tasks": dict(Counter(table.tasks))}
    if "policy" in routes:
        out["policy_loss"] = loss_breakdown(trajs, table, routes["policy"], routes[best].reward,
                                            fixed_route_rewards(table, alpha, bounds))
        p = routes["policy"].reward
        out["policy_minus_best_fixed"] = paired_diff(p, routes[best].reward, n_boot, seed=seed).to_dict()
        out["policy_minus_per_task_rule"] = paired_diff(p, routes["per_task_rule"].reward, n_boot, seed=seed).to_dict()
        out["policy_minus_cascade"] = paired_diff(p, routes["cascade"].reward, n_boot, seed=seed).to_dict()
        out["policy_escalation"] = escalation(trajs, table, metric)
        out["policy_signal"] = escalation_signal(trajs, table, alpha, bounds, n_boot, seed=seed)
    if sampled is not None:
        out["policy_sampled"] = sampled_policy(sampled, table, alpha, bounds, metric, routes[best].reward,
                                               routes["per_task_rule"].reward, n_boot, seed)
    out["per_task_minus_best_fixed"] = paired_diff(routes["per_task_rule"].reward, routes[best].reward, n_boot,
                                                   seed=seed).to_dict()
    out["cascade_minus_best_fixed"] = paired_diff(routes["cascade"].reward, routes[best].reward, n_boot,
                                                  seed=seed).to_dict()
    return out


def sampled_policy(sampled: Sequence[Any], table: RouteTable, alpha: float, bounds: tuple[float, float], metric: str,
                   best_fixed_reward: np.ndarray, per_task_reward: np.ndarray, n_boot: int = 2000,
                   seed: int = 0) -> dict[str, Any]:
    """The sampled policy on ``table``'s questions: ``sampled`` holds k trajectories a question, item-major.
    Each question's reward is the mean of its k (the policy's expected reward there), so the intervals
    against the best fixed route and the per-task rule pair the same questions as the greedy policy's."""
    n = len(table)
    if n == 0 or len(sampled) % n:
        raise ValueError(f"sampled: {len(sampled)} trajectories are not k a question for {n} questions")
    k = len(sampled) // n
    rows = policy_rows(sampled, table.candidates, table.strong, alpha, bounds, metric)
    per_q = rows.reward.reshape(n, k).mean(1)  # (n,)
    tasks = np.repeat(np.asarray(table.tasks), k)
    return {"samples": k, "n": n, "mean_reward": float(per_q.mean()), "accuracy": float(rows.outcome.mean()),
            "format_valid": float(rows.format_valid.mean()), "calls_per_query": float(rows.calls.mean()),
            "mean_reward_by_task": {t: float(per_q[np.asarray(table.tasks) == t].mean()) for t in sorted(set(table.tasks))},
            "route_share": trajectory_share(sampled, table.candidates),
            "route_share_by_task": {t: trajectory_share([s for s, x in zip(sampled, tasks) if x == t], table.candidates)
                                    for t in sorted(set(table.tasks))},
            "minus_best_fixed": paired_diff(per_q, best_fixed_reward, n_boot, seed=seed).to_dict(),
            "minus_per_task_rule": paired_diff(per_q, per_task_reward, n_boot, seed=seed).to_dict()}


def loss_breakdown(trajs: Sequence[Any], table: RouteTable, policy: Rows, best_fixed_reward: np.ndarray,
                   fixed: np.ndarray) -> dict[str, float]:
    """Where the policy loses reward against the best fixed route, summing to the gap:

    * ``route``: best fixed route minus what the policy's own first route would earn with its reply copied
      perfectly into a well-formed answer (negative: its routes beat the fixed route);
    * ``format``: on trajectories that break the protocol, that copied reward minus what they got;
    * ``copy``: on well-formed ones, the same (a wrong copy of the reply, more calls than one).

    A trajectory that routed nowhere is charged to format, at the best fixed route's reward."""
    index = {c: j for j, c in enumerate(table.candidates)}
    copied = np.array(best_fixed_reward, dtype=np.float64)
    for i, t in enumerate(trajs):
        first = next((r.model for r in t.routes if r.model in index), None)
        if first is not None:
            copied[i] = fixed[i, index[first]]
    n = max(1, len(trajs))
    valid = policy.format_valid > 0
    return {"gap": float((best_fixed_reward - policy.reward).sum() / n),
            "route": float((best_fixed_reward - copied).sum() / n),
            "format": float((copied - policy.reward)[~valid].sum() / n),
            "copy": float((copied - policy.reward)[valid].sum() / n)}


# ---------------------------------------------------------------- where routing pays: the alpha sweep


def route_gap(r: np.ndarray, z: float = 2.0) -> dict[str, Any]:
    """How hard it is to tell a task's best fixed route from its runner-up, from (N, K) per-question rewards:
    the mean and standard deviation of the per-question difference (best minus runner-up by mean), and the
    questions a learner or an evaluation must see before that mean stands ``z`` standard errors from 0,
    ``(z * sd / mean) ** 2``. A policy that reads the task but not which questions each candidate gets right
    can only learn the per-task rule from that difference; ``wrong_sign(m)`` is the chance that a sample of
    m questions favours the runner-up (normal approximation)."""
    r = np.asarray(r, dtype=np.float64)
    if r.ndim != 2 or r.shape[1] < 2 or r.shape[0] < 2:
        raise ValueError(f"route_gap needs >= 2 questions and >= 2 candidates, got shape {r.shape}")
    order = np.argsort(-r.mean(axis=0), kind="stable")
    d = r[:, order[0]] - r[:, order[1]]
    mean, sd = float(d.mean()), float(d.std(ddof=1))
    need = None if mean <= 0 else math.ceil((z * sd / mean) ** 2) if sd > 0 else 1  # None: a tie, never
    return {"best": int(order[0]), "runner_up": int(order[1]), "gap": mean, "sd": sd, "z": z,
            "questions_to_tell": need}


def wrong_sign(gap: Mapping[str, Any], m: int) -> float:
    """The chance that m questions drawn like the gap's favour the runner-up (normal approximation)."""
    if gap["sd"] <= 0:
        return 0.0
    return 0.5 * math.erfc(gap["gap"] * math.sqrt(m) / gap["sd"] / math.sqrt(2.0))


def alpha_sweep(table: RouteTable, alphas: Sequence[float], percentiles: Sequence[float] = PERCENTILES) -> dict[str, Any]:
    """For each alpha: every task's mean reward per fixed route and its best one, the best fixed route, the
    per-task rule and the oracle (mean rewards on ``table``, one reference window: ``table`` itself), each
    task's ``gap`` (``route_gap``: how many questions it takes to tell its best route from the runner-up),
    and the alpha range where the tasks' best routes differ."""
    bounds = cost_bounds(table.cost, percentiles)
    tasks = np.asarray(table.tasks)
    oracle = choice_rows(table, oracle_choice(table), 0.0, bounds)
    rows = []
    for a in alphas:
        r = fixed_route_rewards(table, float(a), bounds)
        by_task = {}
        for t in sorted(set(table.tasks)):
            means = r[tasks == t].mean(axis=0)
            gap = route_gap(r[tasks == t]) if (tasks == t).sum() >= 2 else None
            by_task[t] = {"rewards": {c: float(means[j]) for j, c in enumerate(table.candidates)},
                          "best": table.candidates[int(np.argmax(means))], "n": int((tasks == t).sum()),
                          **({"gap": {**gap, "best": table.candidates[gap["best"]],
                                      "runner_up": table.candidates[gap["runner_up"]]}} if gap else {})}
        means = r.mean(axis=0)
        rule = np.asarray([table.candidates.index(by_task[t]["best"]) for t in table.tasks])
        idx = np.arange(len(table))
        oracle_r = rewards(0.0, oracle.outcome, oracle.cost, float(a), bounds)
        best_q = r.max(axis=1)  # the reward-optimal candidate of each question
        cascade = cascade_rows(table, float(a), bounds)
        rows.append({"alpha": float(a), "by_task": by_task,
                     "best_fixed": table.candidates[int(np.argmax(means))], "best_fixed_reward": float(means.max()),
                     "per_task_rule_reward": float(r[idx, rule].mean()),
                     "oracle_reward": float(oracle_r.mean()), "per_question_best_reward": float(best_q.mean()),
                     "cascade_reward": float(cascade.reward.mean()),
                     "cascade_reward_by_task": {t: float(cascade.reward[tasks == t].mean())
                                                for t in sorted(set(table.tasks))}})
    split = [row["alpha"] for row in rows if len({v["best"] for v in row["by_task"].values()}) > 1]
    return {"cost_bounds": list(bounds), "percentiles": list(percentiles), "candidates": table.candidates,
            "strong": table.strong, "tasks": dict(Counter(table.tasks)), "rows": rows,
            "tasks_differ": {"alphas": split, "low": min(split) if split else None,
                             "high": max(split) if split else None}}
