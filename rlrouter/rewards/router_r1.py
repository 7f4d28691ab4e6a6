"""Router-R1 rewards: format, outcome (exact match / F1) and cost, and their combination.

Router-R1 (Zhang et al., 2025, arXiv:2506.09033, Sec. 3.3) trains the policy with three rule-based
rewards. A trajectory is the full text the policy wrote, with the ``<information>`` blocks that the
environment inserted after each route::

    <think> ... </think>
    <search> candidate-name: sub-query </search>
    <information> the candidate's answer (inserted by the environment) </information>
    <think> ... </think>
    <answer> final answer </answer>

* format: 0 if the trajectory follows the protocol, -1 otherwise (rules in :func:`check_format`).
* outcome: exact match of the last ``<answer>`` against any gold answer after SQuAD normalisation
  (lowercase, no punctuation, no articles, single spaces); token F1 as an option.
* cost: raw cost = completion tokens x price of each routed candidate; its square root is min-max
  scaled between the 5th and 95th percentile of a sliding window of recent costs; reward = 1 - scaled.
  ``cost_bounds`` fixes that scale instead (the training job's ``reference``: every candidate's call on
  the training questions, the scale every evaluation uses, ``rlrouter.eval.route_scores``).
* combination, two by config (``formula``):

  - ``"router_r1"`` (the training default; what Router-R1's released code computes): a correct
    answer scores ``(1 + format)(1 - alpha) + alpha * cost``, a wrong one ``format``: cost is credited
    only to correct answers, so a cheap wrong answer earns nothing;
  - ``"additive"`` (the formula VSR's rl_driven documentation page and the paper print; the selector's
    ``use_router_r1_rewards`` feedback): ``R = format + (1 - alpha) * outcome + alpha * cost``, every term
    always counted.

The protocol itself (tags, routes, the format rules) lives in :mod:`rlrouter.protocol`, shared with the
rollout environment.
"""

from __future__ import annotations

import math
import re
import string
from collections import Counter, deque
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from typing import Any

import numpy as np

from rlrouter.protocol import (  # noqa: F401  (re-exported: the reward's public names)
    REPLY_GOLD,
    TAGS,
    Block,
    FormatError,
    RouteCall,
    by_reference,
    check_format,
    extract_answer,
    format_progress,
    extract_routes,
    parse_blocks,
    read_route,
    referenced_outcome,
)
from rlrouter.rewards.base import (
    Reward,
    RewardConfigError,
    check_batch,
    column,
    completion_text,
    mean_of,
)

_PUNCTUATION = frozenset(string.punctuation)

Route = RouteCall
"""A parsed ``<search> model: query </search>`` (the protocol module's ``RouteCall``)."""


# ---------------------------------------------------------------- answer scoring (SQuAD)


def normalize_answer(s: str) -> str:
    """SQuAD v1.1 normalisation: lowercase, drop punctuation, drop articles, collapse whitespace."""
    s = s.lower()
    s = "".join(ch for ch in s if ch not in _PUNCTUATION)
    s = re.sub(r"\b(a|an|the)\b", " ", s)
    return " ".join(s.split())


def exact_match(prediction: str, golds: Sequence[str]) -> float:
    p = normalize_answer(prediction)
    return 1.0 if any(p == normalize_answer(g) for g in golds) else 0.0


def token_f1(prediction: str, gold: str) -> float:
    """SQuAD token-level F1 between two answers after normalisation."""
    p, g = normalize_answer(prediction).split(), normalize_answer(gold).split()
    if not p or not g:
        return float(p == g)
    common = sum((Counter(p) & Counter(g)).values())
    if common == 0:
        return 0.0
    precision, recall = common / len(p), common / len(g)
    return 2 * precision * recall / (precision + recall)


def best_f1(prediction: str, golds: Sequence[str]) -> float:
    return max((token_f1(prediction, g) for g in golds), default=0.0)


def answer_score(answer: str, golds: Sequence[str], metric: str = "em") -> float:
    """An answer against the gold answers under the outcome metric: ``em`` (exact match) or ``f1`` (best token F1)."""
    return exact_match(answer, golds) if metric == "em" else best_f1(answer, golds)


def outcome_score(answer: str | None, golds: Sequence[str], metric: str = "em",
                  calls: Sequence[tuple[str, bool | None]] = ()) -> float:
    """A trajectory's outcome: 0 without an answer; for a question graded by reference
    (``rlrouter.protocol.REPLY_GOLD``) the logged outcome of the call its answer names (``calls``: the
    trajectory's ``(candidate, logged outcome)`` in order); else ``answer_score``. The one grading of an
    answer: the training reward, the held-out evaluation and the report all call it."""
    if answer is None:
        return 0.0
    if by_reference(golds):
        return referenced_outcome(answer, calls)
    return answer_score(answer, golds, metric)


def _golds(value: Any, i: int) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, Mapping) and "target" in value:  # Search-R1 / verl layout
        return _golds(value["target"], i)
    if hasattr(value, "tolist"):
        value = value.tolist()
    if isinstance(value, (list, tuple)) and all(isinstance(g, str) for g in value):
        return list(value)
    raise TypeError(f"ground_truth[{i}]: expected a string or a list of strings, got {type(value).__name__}")


# ---------------------------------------------------------------- candidates


def candidate_names(value: Any, field_path: str = "candidates") -> list[str]:
    """Names from a list of names, :class:`~rlrouter.pool.base.Candidate`, ``CandidateRef`` or dicts."""
    if value is None:
        raise RewardConfigError(field_path, "missing")
    if isinstance(value, str):
        raise RewardConfigError(field_path, "expected a list of candidate names, got one string")
    names = []
    for j, c in enumerate(value):
        name = c if isinstance(c, str) else c.get("name") if isinstance(c, Mapping) else getattr(c, "name", None)
        if not isinstance(name, str) or not name:
            raise RewardConfigError(f"{field_path}[{j}]", f"expected a candidate name, got {c!r}")
        names.append(name)
    return names


def candidate_prices(value: Any) -> dict[str, float]:
    """USD per 1M output tokens of the candidates that carry a price (``price_out``)."""
    prices: dict[str, float] = {}
    for c in value or []:
        price = c.get("price_out") if isinstance(c, Mapping) else getattr(c, "price_out", None)
        name = c.get("name") if isinstance(c, Mapping) else getattr(c, "name", None)
        if name is not None and price is not None:
            prices[name] = float(price)
    return prices


class _Candidates:
    """Candidate names fixed at construction, overridable per sample by a dataset column
    (``candidates``: names, or ``candidate_models``: Router-R1 records' ``[{name, cost, latency}]``)."""

    COLUMNS = ("candidates", "candidate_models")

    def __init__(self, fixed: Any, owner: str):
        self.fixed = None if fixed is None else candidate_names(fixed)
        self.owner = owner

    def per_sample(self, kwargs: dict[str, Any], n: int) -> list[list[str] | None]:
        for col_name in self.COLUMNS:
            col = column(kwargs, col_name, n, self.owner, required=False)
            if col is not None:
                return [self.fixed if c is None else candidate_names(c, f"{col_name}[{i}]")
                        for i, c in enumerate(col)]
        return [self.fixed] * n


# ---------------------------------------------------------------- format and outcome rewards


class RouterR1FormatReward:
    """``penalty`` (-1) if a trajectory breaks the Router-R1 protocol (:func:`check_format`), else 0.

    ``graded=True`` shapes the penalty: ``penalty * (1 - format_progress)``, so a trajectory that passes
    more of the protocol's checks (:data:`~rlrouter.protocol.FORMAT_CHECKS`) loses less, and a valid one
    still gets 0. That is the signal a policy with no valid trajectory yet needs (RL with no cold start):
    under the binary reward every sample of a GRPO group scores the same and the advantage is zero.

    ``candidates`` fixes the known candidate names; a ``candidates`` or ``candidate_models`` column
    overrides them per sample. With neither, any ``model`` before ':' is accepted.
    ``last_failures`` holds the reason of each failing sample of the last batch (``None`` if it passed).
    A ``reply_answer`` column (the environment's ``Trajectory.reply_answer``) marks samples answered by a
    candidate's reply: those need no ``<think>`` (``rollout.env.answer: reply``).
    """

    __name__ = "router_r1_format"

    def __init__(self, candidates: Sequence[Any] | None = None, penalty: float = -1.0, graded: bool = False):
        if isinstance(penalty, bool) or not isinstance(penalty, (int, float)) or not -math.inf < penalty <= 0:
            raise RewardConfigError("penalty", f"expected a number <= 0, got {penalty!r}")
        if not isinstance(graded, bool):
            raise RewardConfigError("graded", f"expected true or false, got {graded!r}")
        self.penalty = float(penalty)
        self.graded = graded
        self._candidates = _Candidates(candidates, self.__name__)
        self.last_failures: list[str | None] = []
        self.last_metrics: dict[str, float] = {}

    def __call__(self, prompts: list[Any], completions: list[Any], **kwargs: Any) -> list[Reward]:
        n = check_batch(prompts, completions, self.__name__)
        cands = self._candidates.per_sample(kwargs, n)
        # the calls the environment ran (the env's tool_calls column): a <search> beyond them was not run
        called = column(kwargs, "tool_calls", n, self.__name__, required=False) or [None] * n
        by_reply = column(kwargs, "reply_answer", n, self.__name__, required=False) or [False] * n
        rewards: list[Reward] = []
        self.last_failures = []
        for text, known, done, reply in zip(completions, cands, called, by_reply):
            calls = None if done is None else len(done)
            think = not bool(reply)
            try:
                check_format(completion_text(text), known, calls, think)
                rewards.append(0.0)
                self.last_failures.append(None)
            except FormatError as e:
                share = format_progress(completion_text(text), known, calls, think) if self.graded else 0.0
                rewards.append(self.penalty * (1.0 - share))
                self.last_failures.append(str(e))
        self.last_metrics = {"reward/format": mean_of(rewards)}
        return rewards


class RouterR1OutcomeReward:
    """Exact match (``metric="em"``, 0 or 1) or best token F1 (``metric="f1"``, in [0, 1]) of the last
    ``<answer>`` against any answer of the ``ground_truth`` column (``outcome_score``: a question graded by
    reference reads the ``call_outcomes`` column, each sample's ``(candidate, logged outcome)`` calls). No
    answer scores 0; a sample whose ground truth is ``None`` is not applicable (``None``)."""

    __name__ = "router_r1_outcome"
    METRICS = ("em", "f1")

    def __init__(self, metric: str = "em"):
        if metric not in self.METRICS:
            raise RewardConfigError("metric", f"unknown '{metric}', expected one of {self.METRICS}")
        self.metric = metric
        self.last_metrics: dict[str, float] = {}

    def __call__(self, prompts: list[Any], completions: list[Any], **kwargs: Any) -> list[Reward]:
        n = check_batch(prompts, completions, self.__name__)
        gts = column(kwargs, "ground_truth", n, self.__name__)
        calls = kwargs.get("call_outcomes") or [()] * n
        rewards: list[Reward] = []
        for i, (text, gt) in enumerate(zip(completions, gts)):
            if gt is None:
                rewards.append(None)
                continue
            answer = extract_answer(completion_text(text))
            rewards.append(outcome_score(answer, _golds(gt, i), self.metric, calls[i]))
        self.last_metrics = {"reward/outcome": mean_of(rewards)}
        return rewards


# ---------------------------------------------------------------- cost reward


class CostWindow:
    """The last ``size`` square-rooted costs, and the percentile bounds used to scale new ones.

    Kept per reward instance so two trainers in one process never share it, and filled in batch order
    so the same batches give the same rewards. ``size=0`` keeps no history: each batch is scaled
    against itself alone.
    """

    def __init__(self, size: int = 512, percentiles: tuple[float, float] = (5.0, 95.0)):
        if isinstance(size, bool) or not isinstance(size, int) or size < 0:
            raise RewardConfigError("cost_window", f"expected an int >= 0, got {size!r}")
        lo, hi = percentiles
        if not 0.0 <= lo < hi <= 100.0:
            raise RewardConfigError("percentiles", f"expected 0 <= low < high <= 100, got {percentiles!r}")
        self.size = size
        self.percentiles = (float(lo), float(hi))
        self._values: deque[float] = deque(maxlen=size)

    def __len__(self) -> int:
        return len(self._values)

    def push(self, values: Iterable[float]) -> None:
        if self.size:
            self._values.extend(values)

    def bounds(self, batch: Sequence[float] = ()) -> tuple[float, float]:
        """(low, high) percentiles of the window, or of ``batch`` when the window keeps no history."""
        ref = list(self._values) if self.size else list(batch)
        if not ref:
            return (0.0, 0.0)
        lo, hi = np.percentile(np.asarray(ref, dtype=np.float64), self.percentiles)
        return float(lo), float(hi)

    def state_dict(self) -> dict[str, Any]:
        return {"size": self.size, "percentiles": list(self.percentiles), "values": list(self._values)}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self._values = deque((float(v) for v in state["values"]), maxlen=self.size)


def scale_cost(sqrt_cost: float, lo: float, hi: float, eps: float = 1e-12) -> float:
    """Min-max scale into [0, 1], clipped. A window without spread (``hi - lo <= eps``: all costs equal,
    one sample, or an empty window) cannot rank costs, so a cost at or below its level scales to 0
    (full reward) and one above it to 1 (no reward)."""
    if hi - lo <= eps:
        return 0.0 if sqrt_cost <= hi + eps else 1.0
    return min(1.0, max(0.0, (sqrt_cost - lo) / (hi - lo)))


class RouterR1CostReward:
    """``1 - minmax(sqrt(raw_cost))`` in [0, 1], scaled over a per-instance sliding window.

    Raw cost of a trajectory, from the batch's columns, first that is present:

    * ``route_costs``: USD already computed per sample (a float, or a list of per-route floats that is
      summed) - what the rollout environment records from ``CandidateResponse.cost``;
    * ``route_tokens``: completion tokens per sample, either ``[(model, tokens), ...]`` /
      ``[{"model": m, "completion_tokens": t}, ...]``, or a list of ints aligned with the trajectory's
      ``<search>`` routes in order; cost = sum(tokens x ``prices[model]``) / 1e6, with ``prices`` in USD
      per 1M output tokens (``Candidate.price_out``).

    With neither column every sample is not applicable (``None``). The batch's costs enter the window
    before it is read, so the first batch is scaled against itself.
    """

    __name__ = "router_r1_cost"

    def __init__(self, prices: Mapping[str, float] | None = None, cost_window: int = 512,
                 percentiles: Sequence[float] = (5.0, 95.0), candidates: Sequence[Any] | None = None,
                 cost_bounds: Sequence[float] | None = None):
        self.fixed_bounds = _fixed_bounds(cost_bounds)
        self.prices = dict(candidate_prices(candidates))
        for name, p in (prices or {}).items():
            if isinstance(p, bool) or not isinstance(p, (int, float)) or p < 0 or not math.isfinite(p):
                raise RewardConfigError(f"prices.{name}", f"expected a number >= 0, got {p!r}")
            self.prices[name] = float(p)
        if (not isinstance(percentiles, Sequence) or isinstance(percentiles, str) or len(percentiles) != 2
                or not all(isinstance(p, (int, float)) and not isinstance(p, bool) for p in percentiles)):
            raise RewardConfigError("percentiles", f"expected [low, high], got {percentiles!r}")
        self.window = CostWindow(cost_window, (float(percentiles[0]), float(percentiles[1])))
        self._candidates = _Candidates(candidates, self.__name__)
        self.last_raw_costs: list[float | None] = []
        self.last_metrics: dict[str, float] = {}

    def has_cost_columns(self, kwargs: Mapping[str, Any]) -> bool:
        return kwargs.get("route_costs") is not None or kwargs.get("route_tokens") is not None

    def raw_costs(self, completions: list[Any], kwargs: dict[str, Any]) -> list[float] | None:
        n = len(completions)
        costs = column(kwargs, "route_costs", n, self.__name__, required=False)
        if costs is not None:
            return [self._checked(_sum_costs(c, i), i) for i, c in enumerate(costs)]
        tokens = column(kwargs, "route_tokens", n, self.__name__, required=False)
        if tokens is not None:
            names = self._candidates.per_sample(kwargs, n)
            return [self._checked(self._token_cost(t, completions[i], names[i], i), i) for i, t in enumerate(tokens)]
        return None

    def _checked(self, cost: float, i: int) -> float:
        if not math.isfinite(cost) or cost < 0:
            raise ValueError(f"reward '{self.__name__}': cost of sample {i} is {cost}, expected a finite value >= 0")
        return cost

    def _price(self, model: str, i: int) -> float:
        if model not in self.prices:
            raise KeyError(f"reward '{self.__name__}': sample {i} routes to '{model}', which has no price "
                           f"(known: {sorted(self.prices)}); set prices.{model}")
        return self.prices[model]

    def _token_cost(self, entry: Any, completion: Any, names: list[str] | None, i: int) -> float:
        if entry is None:
            return 0.0
        if hasattr(entry, "tolist"):
            entry = entry.tolist()
        entry = list(entry)
        if all(isinstance(t, (int, float)) and not isinstance(t, bool) for t in entry):
            routes = extract_routes(completion_text(completion), names)
            if len(routes) != len(entry):
                raise ValueError(f"reward '{self.__name__}': route_tokens[{i}] has {len(entry)} counts but the "
                                 f"trajectory has {len(routes)} <search> routes")
            total = 0.0
            for j, (route, t) in enumerate(zip(routes, entry)):
                if route is None:
                    if t:
                        raise ValueError(f"reward '{self.__name__}': route {j} of sample {i} is malformed "
                                         f"but route_tokens says it produced {t} tokens")
                    continue
                total += t * self._price(route.model, i)
            return total / 1e6
        total = 0.0
        for j, item in enumerate(entry):
            if isinstance(item, Mapping):
                model, t = item.get("model"), item.get("completion_tokens")
            elif isinstance(item, (list, tuple)) and len(item) == 2:
                model, t = item
            else:
                raise TypeError(f"reward '{self.__name__}': route_tokens[{i}][{j}] is {item!r}, expected "
                                f"(model, tokens) or {{'model', 'completion_tokens'}}")
            total += float(t) * self._price(str(model), i)
        return total / 1e6

    def __call__(self, prompts: list[Any], completions: list[Any], **kwargs: Any) -> list[Reward]:
        check_batch(prompts, completions, self.__name__)
        raw = self.raw_costs(completions, kwargs)
        if raw is None:
            self.last_raw_costs = [None] * len(completions)
            self.last_metrics = {}
            return [None] * len(completions)
        roots = [math.sqrt(c) for c in raw]
        self.window.push(roots)
        lo, hi = self.fixed_bounds or self.window.bounds(roots)
        rewards: list[Reward] = [1.0 - scale_cost(r, lo, hi) for r in roots]
        self.last_raw_costs = list(raw)
        self.last_metrics = {"reward/cost": mean_of(rewards),
                             "rollout/route_cost_usd": float(np.mean(raw)) if raw else math.nan}
        return rewards

    def state_dict(self) -> dict[str, Any]:
        return {"window": self.window.state_dict()}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.window.load_state_dict(state["window"])


def _fixed_bounds(value: Any) -> tuple[float, float] | None:
    """``cost_bounds``: ``None`` (scale against the window) or ``[low, high]`` of sqrt(USD), low < high.
    ``"reference"`` is the job's to replace (the training questions' logged calls) before the reward is built."""
    if value is None:
        return None
    if isinstance(value, str):
        raise RewardConfigError("cost_bounds", f"got {value!r}: 'reference' is resolved by the training job from "
                                "the pool's calls on the training questions; here give [low, high] or null")
    if hasattr(value, "tolist"):
        value = value.tolist()
    if (not isinstance(value, Sequence) or len(value) != 2
            or not all(isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) for v in value)
            or not 0 <= value[0] < value[1]):
        raise RewardConfigError("cost_bounds", f"expected [low, high] with 0 <= low < high, got {value!r}")
    return float(value[0]), float(value[1])


def _sum_costs(value: Any, i: int) -> float:
    if value is None:
        return 0.0
    if hasattr(value, "tolist"):
        value = value.tolist()
    if isinstance(value, (list, tuple)):
        return float(sum(_sum_costs(v, i) for v in value))
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"route_costs[{i}]: expected a number or a list of numbers, got {type(value).__name__}")
    return float(value)


# ---------------------------------------------------------------- combination


@dataclass(frozen=True)
class RouterR1Score:
    """One trajectory's reward components (``cost`` is ``None`` when no cost columns were given)."""

    format: float
    outcome: float
    cost: float | None
    total: float
    failure: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


FORMULAS = ("router_r1", "additive")


def combine(format_r: float, outcome: float, cost: float | None, alpha: float, formula: str = "router_r1") -> float:
    """The total of one trajectory (module docstring). ``cost`` ``None`` counts as 0.

    ``"router_r1"``: correct -> ``(1 + format)(1 - alpha) + alpha * cost``; wrong -> ``format``. ``outcome``
    in [0, 1] interpolates linearly between the two, so EM (0 or 1) gives exactly the rule and F1 gives
    partial credit. ``"additive"``: ``format + (1 - alpha) * outcome + alpha * cost``.
    """
    c = 0.0 if cost is None else cost
    if formula == "additive":
        return format_r + (1.0 - alpha) * outcome + alpha * c
    if formula != "router_r1":
        raise RewardConfigError("formula", f"expected one of {FORMULAS}, got {formula!r}")
    correct_score = (1.0 + format_r) * (1.0 - alpha) + alpha * c
    return format_r + outcome * (correct_score - format_r)


class RouterR1Reward:
    """The full Router-R1 reward: format, outcome and cost, combined with ``alpha`` (cost weight) by
    ``formula`` (``"router_r1"``, the default, or ``"additive"``: see :func:`combine`).

    A sample whose ground truth is ``None`` counts as wrong (outcome 0): the policy's format is still
    judged, and no correctness is credited without a reference.

    ``__call__`` returns the totals (TRL contract); ``last_scores`` keeps each sample's components and
    ``last_metrics`` their means as ``reward/format``, ``reward/outcome``, ``reward/cost`` and
    ``reward/total``. ``alpha > 0`` needs a cost column (``route_costs`` or ``route_tokens``, see
    :class:`RouterR1CostReward`): dropping the cost term silently would change the objective.
    """

    __name__ = "router_r1"

    def __init__(self, alpha: float, candidates: Sequence[Any] | None = None, cost_window: int = 512,
                 metric: str = "em", prices: Mapping[str, float] | None = None,
                 percentiles: Sequence[float] = (5.0, 95.0), formula: str = "router_r1",
                 format_penalty: float = -1.0, cost_bounds: Sequence[float] | None = None):
        if isinstance(alpha, bool) or not isinstance(alpha, (int, float)) or not 0.0 <= alpha <= 1.0:
            raise RewardConfigError("alpha", f"expected a number in [0, 1], got {alpha!r}")
        if formula not in FORMULAS:
            raise RewardConfigError("formula", f"expected one of {FORMULAS}, got {formula!r}")
        self.alpha = float(alpha)
        self.formula = formula
        if isinstance(format_penalty, bool) or not isinstance(format_penalty, (int, float)) or format_penalty > 0:
            raise RewardConfigError("format_penalty", f"expected a number <= 0, got {format_penalty!r}")
        self.format_reward = RouterR1FormatReward(candidates, penalty=format_penalty)
        self.outcome_reward = RouterR1OutcomeReward(metric)
        self.cost_reward = RouterR1CostReward(prices=prices, cost_window=cost_window, percentiles=percentiles,
                                              candidates=candidates, cost_bounds=cost_bounds)
        self.last_scores: list[RouterR1Score] = []
        self.last_metrics: dict[str, float] = {}

    def score(self, prompts: list[Any], completions: list[Any], **kwargs: Any) -> list[RouterR1Score]:
        n = check_batch(prompts, completions, self.__name__)
        if self.alpha > 0 and not self.cost_reward.has_cost_columns(kwargs):
            raise KeyError(f"reward '{self.__name__}': alpha={self.alpha} needs a 'route_costs' or "
                           f"'route_tokens' column (columns present: {sorted(kwargs)})")
        fmt = self.format_reward(prompts, completions, **kwargs)
        out = self.outcome_reward(prompts, completions, **kwargs)
        cost = self.cost_reward(prompts, completions, **kwargs)
        scores = []
        for i in range(n):
            o = 0.0 if out[i] is None else out[i]
            scores.append(RouterR1Score(format=fmt[i], outcome=o, cost=cost[i],
                                        total=combine(fmt[i], o, cost[i], self.alpha, self.formula),
                                        failure=self.format_reward.last_failures[i]))
        self.last_scores = scores
        self.last_metrics = {
            "reward/format": mean_of([s.format for s in scores]),
            "reward/outcome": mean_of([s.outcome for s in scores]),
            "reward/cost": mean_of([s.cost for s in scores]),
            "reward/total": mean_of([s.total for s in scores]),
        }
        return scores

    def __call__(self, prompts: list[Any], completions: list[Any], **kwargs: Any) -> list[Reward]:
        return [s.total for s in self.score(prompts, completions, **kwargs)]

    def state_dict(self) -> dict[str, Any]:
        return self.cost_reward.state_dict()

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.cost_reward.load_state_dict(state)


def format_scores(trajs: Sequence[Any], candidates: Sequence[str]) -> list[float]:
    """Each trajectory's Router-R1 format score (0 valid, -1 not) as the training reward checks it: a
    trajectory answered by a candidate's reply (``rollout.env.answer: reply``) needs no ``<think>``."""
    return RouterR1FormatReward(list(candidates))([t.item["query"] for t in trajs], [t.text for t in trajs],
                                                  reply_answer=[getattr(t, "reply_answer", False) for t in trajs])


def score_trajectories(reward: Any, trajs: Sequence[Any]) -> list[Any]:
    """Each trajectory's ``RouterR1Score`` (trajectories as ``rlrouter.rollout.env`` makes them): the
    Router-R1 components (format, outcome, cost) and, as ``total``, what the whole reward config gives
    (with ``combined``, the weighted sum)."""
    prompts, texts = [t.item["query"] for t in trajs], [t.text for t in trajs]
    # candidate_models: a record's own candidates are the routes its format check accepts, as in the env
    totals = reward(prompts, texts, ground_truth=[list(t.item["ground_truth"]) for t in trajs],
                    route_costs=[t.cost for t in trajs], tool_calls=[[r.model for r in t.routes] for t in trajs],
                    call_outcomes=[call_outcomes(t) for t in trajs],
                    candidate_models=[t.item.get("candidate_models") or None for t in trajs],
                    reply_answer=[getattr(t, "reply_answer", False) for t in trajs],
                    id=[t.item.get("id") for t in trajs])
    parts = router_r1_part(reward).last_scores
    return [replace(s, total=float(t if t is not None else s.total)) for s, t in zip(parts, totals)]


def call_outcomes(traj: Any) -> list[tuple[str, bool | None]]:
    """A trajectory's calls as ``outcome_score`` reads them: ``(candidate, logged outcome)`` in order."""
    return [(r.model, getattr(r, "correct", None)) for r in traj.routes]


def router_r1_part(reward: Any) -> Any:
    """The ``RouterR1Reward`` in a reward (itself, or one of a ``combined``'s functions)."""
    if isinstance(reward, RouterR1Reward):
        return reward
    for fn in getattr(reward, "functions", ()):
        if isinstance(fn, RouterR1Reward):
            return fn
    raise ValueError("train.reward: Router-R1 training needs a 'router_r1' reward (alone or in 'combined'); "
                     "it supplies the format, outcome and cost the loop logs")
