"""Each candidate's measured latency, in a decaying window: what a routing decision expects a call to take.

The chat proxy reports every call it makes (a routed answer, a direct one, an exploration call): its total
seconds and, for a stream, the seconds to its first chunk (a call that is not streamed has its first byte
with its last, so its time to first token is its total). Each candidate keeps an exponentially weighted mean
of both, whose weight halves every ``half_life`` calls, so a candidate that slows down (or recovers) is seen
within a few dozen calls. A candidate with no call yet has no expectation: it is neither penalised nor
excluded until it has been measured. Failed calls are not counted (their time says nothing of an answer's).
Pure logic; :class:`~rlrouter.selector.Selector` holds one :class:`LatencyWindow` per candidate.
"""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass
class LatencyWindow:
    """Decaying means of one candidate's time to first token and total time, seconds."""

    ttft_s: float = 0.0
    total_s: float = 0.0
    calls: int = 0

    def observe(self, total_s: float, ttft_s: float | None, half_life: int) -> None:
        if not (math.isfinite(total_s) and total_s >= 0):
            return
        ttft = total_s if ttft_s is None or not math.isfinite(ttft_s) or ttft_s < 0 else min(ttft_s, total_s)
        self.calls += 1
        # the first calls weigh 1/n (a plain mean) until the window is full: no bias toward the first one
        w = max(1.0 / self.calls, 1.0 - 0.5 ** (1.0 / half_life))
        self.ttft_s += w * (ttft - self.ttft_s)
        self.total_s += w * (total_s - self.total_s)

    def expected(self) -> dict[str, float] | None:
        """``{ttft_ms, total_ms, calls}``; None before the first call."""
        if not self.calls:
            return None
        return {"ttft_ms": self.ttft_s * 1e3, "total_ms": self.total_s * 1e3, "calls": self.calls}
