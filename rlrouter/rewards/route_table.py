"""A reward read from a table: each (question, candidate) pair has a fixed reward.

The reward of a routing decision whose value is known in advance: the learning test's bandit
(``rlrouter.algos.bandit``), or a team's own per-candidate scores of its prompts. A trajectory scores the
table's entry for its question (the ``id`` column when the table holds it, else the prompt) and the candidate
of its first call (the ``tool_calls`` column, as the rollout environment fills it); a trajectory that made no
call scores ``no_call``. Keyed by id, questions that read the same (one prompt for a kind of question) can
score differently, as questions the policy cannot tell apart do.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from rlrouter.rewards.base import RewardConfigError, check_batch, column, mean_of


class RouteTableReward:
    """``table[question][candidate]``, for the first call of each trajectory; ``no_call`` without one.

    ``table`` maps each question (its ``id``, or the prompt text, stripped) to ``{candidate: reward}``. A question the table
    does not hold is an error naming it (a silent 0 would teach the policy the wrong thing); a candidate the
    question's row does not hold scores ``no_call``.
    """

    __name__ = "route_table"

    def __init__(self, table: Mapping[str, Mapping[str, float]], no_call: float = 0.0):
        if not isinstance(table, Mapping) or not table:
            raise RewardConfigError("table", "expected a non-empty mapping {question: {candidate: reward}}")
        self.table: dict[str, dict[str, float]] = {}
        for q, row in table.items():
            if not isinstance(row, Mapping) or not row:
                raise RewardConfigError(f"table[{str(q)[:40]!r}]", "expected a non-empty {candidate: reward}")
            for c, v in row.items():
                if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
                    raise RewardConfigError(f"table[{str(q)[:40]!r}][{c!r}]", f"expected a finite number, got {v!r}")
            self.table[str(q).strip()] = {str(c).lower(): float(v) for c, v in row.items()}
        if isinstance(no_call, bool) or not isinstance(no_call, (int, float)) or not math.isfinite(no_call):
            raise RewardConfigError("no_call", f"expected a finite number, got {no_call!r}")
        self.no_call = float(no_call)
        self.last_metrics: dict[str, float] = {}

    def __call__(self, prompts: list[Any], completions: list[Any], **kwargs: Any) -> list[float]:
        n = check_batch(prompts, completions, self.__name__)
        if prompts is None:
            raise ValueError(f"reward '{self.__name__}': needs the prompts (the questions the table is keyed by)")
        calls = column(kwargs, "tool_calls", n, self.__name__)
        ids = column(kwargs, "id", n, self.__name__, required=False) or [None] * n
        rewards = []
        for i, (prompt, called, qid) in enumerate(zip(prompts, calls, ids)):
            row = self.table.get(str(qid).strip()) if qid is not None else None
            row = row if row is not None else self.table.get(str(prompt).strip())
            if row is None:
                raise KeyError(f"reward '{self.__name__}': question {i} (id {qid!r}, prompt {str(prompt)[:60]!r}) "
                               "is not in the table")
            first = next(iter(called or []), None)
            rewards.append(row.get(str(first).lower(), self.no_call) if first is not None else self.no_call)
        self.last_metrics = {"reward/route_table": mean_of(rewards)}
        return rewards
