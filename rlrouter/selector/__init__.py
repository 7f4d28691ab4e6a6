"""Online bandit selector (vLLM Semantic Router ``rl_driven``): posteriors, personalization, persistence.

Pure Python (no Ray): the Serve app holds one :class:`Selector` inside one Ray actor.
"""

from rlrouter.selector.config import SelectorConfig, SelectorConfigError
from rlrouter.selector.persistence import StateFileError
from rlrouter.selector.selector import (
    IMPLICIT_LABELS,
    Decision,
    FeedbackConflict,
    SelectionRequest,
    Selector,
    SelectorError,
    UnknownRequest,
)

__all__ = ["SelectorConfig", "SelectorConfigError", "StateFileError", "Selector", "SelectionRequest", "Decision",
           "SelectorError", "UnknownRequest", "FeedbackConflict", "IMPLICIT_LABELS"]
