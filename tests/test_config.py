"""``typed_config``: one builder from a config section to its dataclass, nested ones included."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

import pytest
from omegaconf import OmegaConf

from rlrouter.config import typed_config


@dataclass
class Inner:
    lr: float = 0.1

    def __post_init__(self) -> None:
        if not self.lr > 0:
            raise ValueError(f"lr: must be > 0, got {self.lr}")


@dataclass
class Outer:
    seed: int = 0
    inner: Inner = field(default_factory=Inner)
    extra: dict[str, int] = field(default_factory=dict)


def test_builds_nested_dataclasses_from_a_hydra_node_and_round_trips_asdict():
    node = OmegaConf.create({"seed": 3, "inner": {"lr": "${seed}"}, "extra": {"a": 1}})
    built = typed_config(Outer, node)
    assert built == Outer(seed=3, inner=Inner(lr=3), extra={"a": 1})
    assert typed_config(Outer, asdict(built)) == built  # the other side of a Ray boundary
    assert typed_config(Outer, None) == Outer() and typed_config(Outer, {"inner": None}) == Outer()
    assert typed_config(Outer, built) is built


def test_errors_name_the_full_key():
    with pytest.raises(ValueError, match=r"job.inner.bogus: unknown key \(expected one of \['lr'\]\)"):
        typed_config(Outer, {"inner": {"bogus": 1}}, "job")
    with pytest.raises(ValueError, match=r"^job.inner.lr: must be > 0, got 0$"):
        typed_config(Outer, {"inner": {"lr": 0}}, "job")
    with pytest.raises(ValueError, match=r"^bogus: unknown key"):
        typed_config(Outer, {"bogus": 1})
