"""Paths and small utilities shared by tests."""

from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
CONF_DIR = ROOT / "conf"


def hash_embed(texts: list[str]) -> np.ndarray:
    """Deterministic stand-in for MiniLM: graph construction is pure bookkeeping."""
    out = []
    for t in texts:
        seed = int.from_bytes(t.encode()[:8].ljust(8, b"\0"), "little") ^ len(t)
        out.append(np.random.default_rng(seed).normal(size=8))
    return np.asarray(out, dtype=np.float32)
