"""ToolRL-style budget reward: full reward within a tool-call budget, decreasing beyond it.

ToolRL (Qian et al., 2025, arXiv:2504.13958) shapes tool use with fine-grained rule rewards; budget-aware
tool use (Liu et al., 2025, "Budget-Aware Tool-Use Enables Effective Agent Scaling") prices each tool
call and asks the agent to stay inside a budget. This reward joins the two: each call costs its tool's
weight, and the reward falls linearly once the weighted cost passes the budget.

For a trajectory with tool calls ``k = 1..K``::

    C = sum_k cost_weights.get(tool_k, default_weight)
    r = 1                                            if C <= budget_B
    r = max(min_reward, 1 - slope * (C - budget_B) / budget_B)   otherwise

So with ``budget_B = 2``, ``slope = 1`` and ``min_reward = 0``: cost 2 scores 1, cost 3 scores 0.5,
cost 4 or more scores 0. Dividing by ``budget_B`` makes ``slope`` unit-free: an overrun of one whole
budget costs ``slope`` reward.

Tool calls come from, first that is present:

* a ``tool_calls`` column: per sample a list of tool names or of ``{"name": ...}`` dicts;
* the completion text: every JSON object with a ``name`` on the lines of ``<tool_call> ... </tool_call>``
  blocks (ToolRL's format, one call per line), plus every Router-R1 route ``<search> model: query
  </search>`` (the tool is the candidate, so ``cost_weights`` may hold candidate prices). A line that is
  not valid JSON still counts as one call of ``default_weight``: the attempt was spent.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from typing import Any

from rlrouter.rewards.base import Reward, RewardConfigError, check_batch, column, completion_text, mean_of
from rlrouter.rewards.router_r1 import extract_routes

_TOOL_CALL_RE = re.compile(r"<tool_call>(.*?)</tool_call>", re.DOTALL)
INVALID_CALL = "<invalid>"


def _number(value: Any, field_path: str, minimum: float | None = 0.0, strict: bool = False) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise RewardConfigError(field_path, f"expected a finite number, got {value!r}")
    if minimum is not None and (value <= minimum if strict else value < minimum):
        raise RewardConfigError(field_path, f"must be {'>' if strict else '>='} {minimum}, got {value!r}")
    return float(value)


def parse_tool_calls(text: str, known: list[str] | None = None) -> list[str]:
    """Names of the tools a completion calls, in order (see the module docstring). ``known`` tool
    names let routes to candidates whose names hold ':' (``llama3:8b``) parse whole."""
    names: list[str] = []
    for block in _TOOL_CALL_RE.findall(text):
        for line in block.splitlines():
            line = line.strip()
            if not line:
                continue
            try:
                parsed = json.loads(line)
            except json.JSONDecodeError:
                names.append(INVALID_CALL)
                continue
            for call in parsed if isinstance(parsed, list) else [parsed]:  # a JSON list holds several calls
                name = call.get("name") if isinstance(call, dict) else None
                names.append(name if isinstance(name, str) and name else INVALID_CALL)
    for route in extract_routes(text, known):
        names.append(route.model if route is not None else INVALID_CALL)
    return names


class ToolBudgetReward:
    """``r = 1`` within ``budget_B``, then ``max(min_reward, 1 - slope * (C - B) / B)`` (module docstring).

    ``last_costs`` holds each sample's weighted cost ``C`` of the last batch.
    """

    __name__ = "tool_budget"

    def __init__(self, budget_B: float, cost_weights: Mapping[str, float] | None = None,
                 default_weight: float = 1.0, slope: float = 1.0, min_reward: float = 0.0):
        self.budget_B = _number(budget_B, "budget_B", 0.0, strict=True)
        if cost_weights is not None and not isinstance(cost_weights, Mapping):
            raise RewardConfigError("cost_weights",
                                    f"expected a mapping tool -> weight, got {type(cost_weights).__name__}")
        self.cost_weights = {str(k): _number(v, f"cost_weights.{k}") for k, v in (cost_weights or {}).items()}
        self.default_weight = _number(default_weight, "default_weight")
        self.slope = _number(slope, "slope", 0.0, strict=True)
        self.min_reward = _number(min_reward, "min_reward", None)
        if self.min_reward > 1.0:
            raise RewardConfigError("min_reward", f"must be <= 1 (the in-budget reward), got {min_reward!r}")
        self.last_costs: list[float] = []
        self.last_metrics: dict[str, float] = {}

    def cost(self, tools: list[str]) -> float:
        return float(sum(self.cost_weights.get(t, self.default_weight) for t in tools))

    def reward_for_cost(self, cost: float) -> float:
        if cost <= self.budget_B:
            return 1.0
        return max(self.min_reward, 1.0 - self.slope * (cost - self.budget_B) / self.budget_B)

    def __call__(self, prompts: list[Any], completions: list[Any], **kwargs: Any) -> list[Reward]:
        n = check_batch(prompts, completions, self.__name__)
        calls_col = column(kwargs, "tool_calls", n, self.__name__, required=False)
        costs: list[float] = []
        for i, text in enumerate(completions):
            if calls_col is not None:
                tools = _tool_names(calls_col[i], i)
            else:
                tools = parse_tool_calls(completion_text(text), list(self.cost_weights))
            costs.append(self.cost(tools))
        rewards: list[Reward] = [self.reward_for_cost(c) for c in costs]
        self.last_costs = costs
        over = sum(c > self.budget_B for c in costs)
        self.last_metrics = {"reward/tool_budget": mean_of(rewards),
                             "rollout/tool_cost": float(sum(costs) / n) if n else math.nan,
                             "rollout/over_budget_frac": float(over / n) if n else math.nan}
        return rewards


def _tool_names(entry: Any, i: int) -> list[str]:
    if entry is None:
        return []
    if hasattr(entry, "tolist"):
        entry = entry.tolist()
    names = []
    for j, call in enumerate(entry):
        name = call.get("name") if isinstance(call, Mapping) else call
        if not isinstance(name, str):
            raise TypeError(f"tool_calls[{i}][{j}]: expected a tool name or {{'name': ...}}, got {call!r}")
        names.append(name)
    return names
