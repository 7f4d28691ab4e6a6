"""Reward functions (TRL contract: ``fn(prompts, completions, **columns) -> list[float | None]``).

* :mod:`~rlrouter.rewards.router_r1`: Router-R1's format, outcome and cost rewards and their combination;
* :mod:`~rlrouter.rewards.budget`: ToolRL-style tool-call budget reward;
* :mod:`~rlrouter.rewards.classification`: accuracy, macro F1, calibration and custom rewards for the
  intent classifier;
* :mod:`~rlrouter.rewards.registry`: ``build_reward(cfg)`` from config dicts.
"""

from rlrouter.rewards.base import CombinedReward, RewardConfigError, RewardFunction
from rlrouter.rewards.budget import ToolBudgetReward
from rlrouter.rewards.classification import (
    AccuracyReward,
    CalibrationReward,
    CustomReward,
    MacroF1Reward,
    expected_calibration_error,
    macro_f1,
)
from rlrouter.rewards.registry import REGISTRY, build_reward, register_reward
from rlrouter.rewards.router_r1 import (
    RouterR1CostReward,
    RouterR1FormatReward,
    RouterR1OutcomeReward,
    RouterR1Reward,
    RouterR1Score,
    check_format,
    extract_answer,
    normalize_answer,
)

__all__ = [
    "REGISTRY",
    "AccuracyReward",
    "CalibrationReward",
    "CombinedReward",
    "CustomReward",
    "MacroF1Reward",
    "RewardConfigError",
    "RewardFunction",
    "RouterR1CostReward",
    "RouterR1FormatReward",
    "RouterR1OutcomeReward",
    "RouterR1Reward",
    "RouterR1Score",
    "ToolBudgetReward",
    "build_reward",
    "check_format",
    "expected_calibration_error",
    "extract_answer",
    "macro_f1",
    "normalize_answer",
    "register_reward",
]
