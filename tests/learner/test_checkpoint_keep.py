"""learner.keep_checkpoints: only the newest K complete checkpoints stay on disk."""

from __future__ import annotations

from pathlib import Path

import pytest

from rlrouter.learner.checkpoint import STATE, prune_checkpoints
from rlrouter.learner.config import LearnerConfig


def _ckpts(root, steps, complete=True):
    for s in steps:
        d = root / f"step_{s:06d}"
        d.mkdir(parents=True)
        (d / "trainable.safetensors").write_bytes(b"x" * 10)
        if complete:
            (d / STATE).write_text("{}")


def test_keeps_the_newest_k_complete_ones(tmp_path):
    _ckpts(tmp_path, [0, 5, 10, 15, 20])  # step 0: the cold start, which init_from starts from, stays
    _ckpts(tmp_path, [25], complete=False)  # still being written (another rank): neither counted nor deleted
    gone = prune_checkpoints(tmp_path, 2)
    assert sorted(Path(p).name for p in gone) == ["step_000005", "step_000010"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["step_000000", "step_000015", "step_000020", "step_000025"]


def test_zero_keeps_all(tmp_path):
    _ckpts(tmp_path, [1, 2, 3])
    assert prune_checkpoints(tmp_path, 0) == []
    assert len(list(tmp_path.iterdir())) == 3


def test_bad_keep_value_names_the_field():
    with pytest.raises(ValueError, match="learner.keep_checkpoints"):
        LearnerConfig(keep_checkpoints=-1)
    with pytest.raises(ValueError, match="learner.dtype"):
        LearnerConfig(dtype="float16")
