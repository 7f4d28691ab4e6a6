"""Metrics sinks: a JSONL log, TensorBoard, and Ray's metrics (so the Ray dashboard shows them).

Names follow ``rollout/...``, ``learner/...``, ``reward/...``, ``time/...``. Ray's metric names may not
hold ``/``, so ``reward/total`` is exported as ``rlrouter_reward_total``.
"""

from __future__ import annotations

import json
import math
import re
import time
from pathlib import Path
from typing import Any

_BAD = re.compile(r"[^a-zA-Z0-9_]")


def ray_metric_name(name: str) -> str:
    return "rlrouter_" + _BAD.sub("_", name)


class MetricsLogger:
    """Writes each step's scalars to every configured sink; ``close`` flushes them."""

    def __init__(self, out_dir: str | Path, tensorboard: bool = True, ray_metrics: bool = True,
                 run_name: str = "run", append: bool = False, filename: str = "metrics.jsonl"):
        self.out_dir = Path(out_dir)
        self.out_dir.mkdir(parents=True, exist_ok=True)
        self.jsonl_path = self.out_dir / filename
        self._jsonl = self.jsonl_path.open("a" if append else "w", encoding="utf-8")
        self._tb = None
        if tensorboard:
            try:
                from torch.utils.tensorboard import SummaryWriter

                self._tb = SummaryWriter(str(self.out_dir / "tensorboard"))
            except Exception:  # noqa: BLE001 - TensorBoard is optional; the JSONL always exists
                self._tb = None
        self._ray = ray_metrics
        self._gauges: dict[str, Any] = {}
        self.run_name = run_name

    def _gauge(self, name: str):
        if name not in self._gauges:
            from ray.util.metrics import Gauge

            self._gauges[name] = Gauge(ray_metric_name(name), description=name, tag_keys=("run",))
        return self._gauges[name]

    def log(self, step: int, metrics: dict[str, float]) -> None:
        clean = {k: float(v) for k, v in metrics.items()
                 if isinstance(v, (int, float)) and math.isfinite(float(v))}
        self._jsonl.write(json.dumps({"step": step, "time": time.time(), **clean}) + "\n")
        self._jsonl.flush()
        if self._tb is not None:
            for k, v in clean.items():
                self._tb.add_scalar(k, v, step)
            self._tb.flush()
        if self._ray:
            try:
                import ray

                if ray.is_initialized():
                    for k, v in clean.items():
                        self._gauge(k).set(v, tags={"run": self.run_name})
            except Exception:  # noqa: BLE001 - a metrics backend hiccup must not stop training
                pass

    def close(self) -> None:
        self._jsonl.close()
        if self._tb is not None:
            self._tb.close()
