"""The selector's state and the replayable updates that change it.

Everything the selector learns lives in :class:`SelectorState`: Beta posteriors per scope (global,
per user, per category), per-session win counts, the selection counter of the epsilon decay, the
contextual arms, and the decisions still waiting for feedback. Feedback is first *resolved* into a
:class:`PosteriorUpdate` (which models gain how much alpha/beta, in which scopes); that update is
what the write-ahead log stores, so replaying the log after a crash applies exactly the updates
that were acknowledged, whatever the config says at replay time.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from rlrouter.selector.contextual import LinearThompsonArm
from rlrouter.selector.rules import Beta


@dataclass
class Posterior:
    """Beta(alpha, beta) of one candidate in one scope, with VSR's interaction counters."""

    alpha: float = 1.0
    beta: float = 1.0
    interactions: int = 0
    explicit: int = 0
    implicit: int = 0

    def params(self) -> Beta:
        return Beta(self.alpha, self.beta)


@dataclass
class SessionStats:
    """Within-session record of one candidate: selections with feedback and (fractional) wins."""

    selections: float = 0.0
    successes: float = 0.0

    @property
    def win_rate(self) -> float | None:
        return self.successes / self.selections if self.selections > 0 else None


@dataclass
class PendingDecision:
    """A routing decision waiting for its feedback (request_id -> this)."""

    request_id: str
    model: str
    mode: str
    candidates: list[str]
    user_id: str | None = None
    session_id: str | None = None
    category: str | None = None
    created_at: float = 0.0
    # the models called by multi-round / arena decisions (the chosen one first)
    models: list[str] = field(default_factory=list)
    # the contextual feature vector (d + 1,), kept so feedback can update the linear model
    context: np.ndarray | None = None
    feedback_seq: int | None = None
    # the session this decision was pinned for (session affinity: once per decision)
    session_key: str | None = None


@dataclass
class ModelDelta:
    """One candidate's share of an update."""

    model: str
    d_alpha: float
    d_beta: float
    session_success: float
    # target in [0, 1] and weight of the contextual regression update
    target: float
    weight: float


@dataclass
class PosteriorUpdate:
    """A resolved feedback: what the write-ahead log stores and what replay applies."""

    request_id: str
    kind: str  # outcome | implicit | reward
    deltas: list[ModelDelta]
    user_id: str | None = None
    category: str | None = None
    session_id: str | None = None
    context: np.ndarray | None = None
    detail: dict[str, Any] = field(default_factory=dict)


@dataclass
class SelectorState:
    """All that the selector has learned, saved exactly (alpha and beta, never a lossy rating)."""

    global_: dict[str, Posterior] = field(default_factory=dict)
    users: dict[str, dict[str, Posterior]] = field(default_factory=dict)
    categories: dict[str, dict[str, Posterior]] = field(default_factory=dict)
    sessions: dict[str, dict[str, SessionStats]] = field(default_factory=dict)
    selections: int = 0
    contextual: dict[str, LinearThompsonArm] = field(default_factory=dict)
    pending: OrderedDict[str, PendingDecision] = field(default_factory=OrderedDict)
    pins: OrderedDict[str, Any] = field(default_factory=OrderedDict)
    """Session affinity: session key -> ``rlrouter.selector.affinity.Pin``, least recently seen first."""
    # sequence number of the last write-ahead-log entry folded into this state
    wal_seq: int = 0
    feedback_count: int = 0
