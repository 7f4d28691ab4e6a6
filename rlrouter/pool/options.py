"""Typed reading of a candidate's backend ``options`` and the shared token estimate.

Backends read their options through ``OptionReader`` so a bad config fails when the pool is built,
with the field named (``pool.candidates[1].options.timeout_s``), not at the first rollout.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

_MISSING = object()


class OptionError(ValueError):
    """A backend option is wrong. ``field`` is the option's name inside ``options``."""

    def __init__(self, field: str, message: str):
        self.field = field
        self.message = message
        super().__init__(f"options.{field}: {message}")


class OptionReader:
    """Reads typed options once each; ``finish()`` rejects names nobody read (typos)."""

    def __init__(self, options: Mapping[str, Any] | None):
        self._opts = dict(options or {})
        self._read: set[str] = set()

    def get(self, name: str, types: type | tuple[type, ...], default: Any = _MISSING,
            check: Callable[[Any], bool] | None = None, expect: str = "") -> Any:
        self._read.add(name)
        if name not in self._opts or self._opts[name] is None:
            if default is _MISSING:
                raise OptionError(name, "required")
            return default
        v = self._opts[name]
        if isinstance(types, tuple) and float in types or types is float:
            # YAML "1" is an int; a float option must accept it (but never a bool)
            if isinstance(v, int) and not isinstance(v, bool):
                v = float(v)
        if isinstance(v, bool) and bool not in (types if isinstance(types, tuple) else (types,)):
            raise OptionError(name, f"expected {expect or _tname(types)}, got {v!r}")
        if not isinstance(v, types):
            raise OptionError(name, f"expected {expect or _tname(types)}, got {v!r}")
        if check is not None and not check(v):
            raise OptionError(name, f"expected {expect}, got {v!r}")
        return v

    def finish(self) -> None:
        extra = sorted(set(self._opts) - self._read)
        if extra:
            raise OptionError(extra[0], f"unknown option; known: {sorted(self._read)}")


def _tname(types: type | tuple[type, ...]) -> str:
    ts = types if isinstance(types, tuple) else (types,)
    return " or ".join(t.__name__ for t in ts)


def positive(v: Any) -> bool:
    return v > 0


def non_negative(v: Any) -> bool:
    return v >= 0


CHARS_PER_TOKEN = 4.0


def estimate_tokens(text: str) -> int:
    """Token count of ``text`` when no tokenizer or ``usage`` is at hand: ceil(chars / 4).

    Four characters per token is OpenAI's rule of thumb for English with its BPE tokenizers. On the
    logged GSM8K GPT-4 responses it gives 0.72x (p5-p95: 0.56-0.88x) of SmolLM2's tokenizer count
    (benchmarks/pool_bench.py). It is a cost signal only, and the Router-R1 cost reward min-max
    normalises its scale anyway.
    """
    return int(math.ceil(len(text) / CHARS_PER_TOKEN)) if text else 0
