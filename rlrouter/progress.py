"""Long work shows itself: a tqdm bar on a terminal, one plain line per step otherwise
(a log file, ``ray job logs``, CI), where a bar's carriage returns would make one unreadable line."""

from __future__ import annotations

import sys
import time
from typing import Any, TextIO


class Progress:
    """``update(n, **postfix)`` after each step; ``close()`` at the end. ``enabled=False`` prints nothing."""

    def __init__(self, total: int, desc: str, initial: int = 0, unit: str = "step", enabled: bool = True,
                 stream: TextIO | None = None):
        self.total, self.desc, self.n, self.unit = total, desc, initial, unit
        self.enabled = enabled
        self.stream = stream or sys.stdout
        self._bar: Any = None
        self._t0 = time.perf_counter()
        self._start = initial
        if enabled and _is_terminal(self.stream):
            from tqdm.auto import tqdm

            self._bar = tqdm(total=total, initial=initial, desc=desc, unit=unit, dynamic_ncols=True,
                             file=self.stream)

    def update(self, n: int = 1, **postfix: float) -> None:
        self.n += n
        if not self.enabled:
            return
        if self._bar is not None:
            self._bar.update(n)
            if postfix:
                self._bar.set_postfix({k: f"{v:.3g}" for k, v in postfix.items()})
            return
        elapsed = time.perf_counter() - self._t0
        done = self.n - self._start
        eta = elapsed / done * (self.total - self.n) if done else 0.0
        fields = " ".join(f"{k}={v:.3g}" for k, v in postfix.items())
        print(f"{self.desc}: {self.unit} {self.n}/{self.total} {fields} "
              f"[{elapsed:.0f}s elapsed, ~{eta:.0f}s left]".replace("  ", " "), file=self.stream, flush=True)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
            self._bar = None

    def __enter__(self) -> "Progress":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def _is_terminal(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False
