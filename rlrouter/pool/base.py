"""The candidate pool's contract: a candidate is a routable LLM behind one async interface.

Every backend implements ``async generate(prompts) -> list[CandidateResponse]``. A failure of one
prompt is reported in that prompt's ``CandidateResponse.error`` and never raises, so a rollout batch
keeps going when one candidate misbehaves: its failure is a result, not an exception.
"""

from __future__ import annotations

import abc
import re
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Candidate:
    """A routable LLM. Prices are USD per 1M tokens; ``params_b`` is the size in billions."""

    name: str
    price_in: float
    price_out: float
    params_b: float = 0.0
    backend: str = "replay"
    description: str = ""
    options: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.name or not isinstance(self.name, str):
            raise ValueError("candidate.name: must be a non-empty string")
        for f in ("price_in", "price_out", "params_b"):
            v = getattr(self, f)
            if not isinstance(v, (int, float)) or v < 0:
                raise ValueError(f"candidate '{self.name}'.{f}: must be a number >= 0, got {v!r}")
        if self.backend not in BACKENDS:
            raise ValueError(f"candidate '{self.name}'.backend: unknown '{self.backend}', expected one of {BACKENDS}")

    def cost(self, prompt_tokens: int, completion_tokens: int) -> float:
        """USD cost of one call."""
        return (prompt_tokens * self.price_in + completion_tokens * self.price_out) / 1e6


BACKENDS = ("openai", "vllm", "replay")


@dataclass
class CandidateResponse:
    """One candidate's answer to one prompt. ``error`` is set (and ``text`` empty) when the call failed."""

    text: str
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost: float = 0.0
    latency_s: float = 0.0
    error: str | None = None
    # replay backends know whether the logged answer was correct; live ones leave it None
    correct: bool | None = None

    @property
    def ok(self) -> bool:
        return self.error is None


class Backend(abc.ABC):
    """One candidate's way of answering prompts."""

    def __init__(self, candidate: Candidate):
        self.candidate = candidate

    @abc.abstractmethod
    async def generate(self, prompts: list[str], **kwargs: Any) -> list[CandidateResponse]:
        """Answer every prompt; failures go into ``CandidateResponse.error``, never raise."""

    async def close(self) -> None:  # noqa: B027 - optional hook
        """Release connections or engines."""


class RequestTooLong(ValueError):
    """A chat request that does not fit a candidate's context: the prompt alone (``prompt_tokens >=
    context``), or the prompt plus the caller's ``max_tokens``. Raised by the serving path of the vLLM
    candidate; its text crosses the Ray actor boundary, so :meth:`find` reads the numbers back from it
    (``rlrouter.serving.errors`` turns them into OpenAI's error)."""

    _TEXT = re.compile(r"request does not fit the context: context (\d+) tokens, prompt (\d+) tokens, "
                       r"max_tokens (\d+|None)")

    def __init__(self, context: int, prompt_tokens: int, max_tokens: int | None = None):
        self.context, self.prompt_tokens, self.max_tokens = context, prompt_tokens, max_tokens
        super().__init__(f"request does not fit the context: context {context} tokens, prompt {prompt_tokens} "
                         f"tokens, max_tokens {max_tokens}")

    def __reduce__(self) -> tuple:  # pickled by Ray to the caller: rebuilt from the numbers, not the text
        return RequestTooLong, (self.context, self.prompt_tokens, self.max_tokens)

    @property
    def prompt_too_long(self) -> bool:
        """The prompt leaves no room for one generated token (else ``max_tokens`` is what does not fit)."""
        return self.prompt_tokens >= self.context

    @classmethod
    def find(cls, text: str) -> RequestTooLong | None:
        m = cls._TEXT.search(text)
        if m is None:
            return None
        return cls(int(m.group(1)), int(m.group(2)), None if m.group(3) == "None" else int(m.group(3)))
