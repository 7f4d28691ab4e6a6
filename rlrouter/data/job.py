"""The data-preparation job: config -> BuildConfig (or the user's record files, ``data=records``) ->
train/test parquet (called by jobs/prepare_data.py and, when the parquet is missing, by training)."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

from omegaconf import DictConfig

from rlrouter.config import to_plain
from rlrouter.data.build import BuildConfig, CandidateSpec, SourceSpec, build
from rlrouter.data.logged import default_routellm_source
from rlrouter.data.routerbench import load_logged_outcomes
from rlrouter.data.records import RecordsConfig, build_records

log = logging.getLogger(__name__)


def candidate_specs(pool_cfg: Any) -> list[CandidateSpec]:
    """The pool's candidates as dataset records list them; replay ones name their logged column."""
    out = []
    for i, c in enumerate(pool_cfg["candidates"]):
        try:
            opts = c.get("options") or {}
            out.append(CandidateSpec(
                name=c["name"], price_in=float(c["price_in"]), price_out=float(c["price_out"]),
                params_b=float(c.get("params_b", 0.0)), latency=float(c.get("latency", 1.0)),
                logged_as=opts.get("model") if c.get("backend") == "replay" else None))
        except (KeyError, TypeError, ValueError) as e:
            raise ValueError(f"pool.candidates[{i}]: {type(e).__name__}: {e}") from None
    return out


def build_config(cfg: Any) -> BuildConfig:
    data = to_plain(cfg["data"])
    return BuildConfig(
        sources=[SourceSpec(**s) for s in data["sources"]],
        candidates=candidate_specs(to_plain(cfg["pool"])),
        train_size=data["train_size"], test_size=data["test_size"], seed=data["seed"],
        out_dir=data["out_dir"], require_logged=data.get("require_logged", True))


def load_logged(cfg: Any):
    return load_logged_outcomes(logged_source(cfg))


def records_config(cfg: Any):
    """``data=records``: the user's own files (``rlrouter.data.records``)."""
    data = to_plain(cfg["data"])
    known = {f for f in RecordsConfig.__dataclass_fields__}
    return RecordsConfig(**{k: v for k, v in data.items() if k in known})


def prepare(cfg: Any) -> dict[str, Any]:
    """Build the train/test split; ``cfg``: the job's config, a Hydra node or its plain form, with ``data``
    and ``pool``."""
    if cfg["data"].get("train_files") is not None:
        pool = {c.name: c.price_out for c in candidate_specs(to_plain(cfg["pool"]))}
        stats = build_records(records_config(cfg), pool)
    else:
        bc = build_config(cfg)
        logged = load_logged(cfg) if any(c.logged_as for c in bc.candidates) else None
        stats = build(bc, logged)
    log.info("data: %s", json.dumps(stats))
    print(f"train set: {stats['train']['path']} ({stats['train']['rows']} rows)")
    print(f"test set:  {stats['test']['path']} ({stats['test']['rows']} rows)")
    return stats


def ensure_data(cfg: Any) -> tuple[Path, Path]:
    """The run's train and test parquet, built first (``prepare``) when either is missing."""
    d = Path(cfg["data"]["out_dir"])
    if not ((d / "train.parquet").exists() and (d / "test.parquet").exists()):
        prepare(cfg)
    return d / "train.parquet", d / "test.parquet"


def logged_source(cfg: Any) -> Any:
    """The logged outcomes the data and the replay candidates without a ``source`` read."""
    return cfg["data"].get("logged_source") or default_routellm_source()


def apply_epochs(cfg: DictConfig) -> DictConfig:
    """``+train.total_epochs=N`` (verl's ``trainer.total_epochs``, the seed's ``--num_epochs``) as steps.

    Users of Router-R1 and verl count in passes over their data; the training loop counts steps of
    ``train.prompts_per_step`` prompts. When ``total_epochs`` is set, the training split is built (or
    found) first and ``total_steps = ceil(total_epochs * rows / prompts_per_step)``; the key is then
    removed so the loop's config stays its own. ``None`` leaves ``total_steps`` as configured.
    """
    import math

    from omegaconf import open_dict

    epochs = cfg.train.get("total_epochs")
    with open_dict(cfg):
        cfg.train.pop("total_epochs", None)
    if epochs is None:
        return cfg
    if isinstance(epochs, bool) or not isinstance(epochs, (int, float)) or epochs <= 0:
        raise ValueError(f"train.total_epochs: must be a number > 0 or null, got {epochs!r}")
    from datasets import Dataset

    train_path, _ = ensure_data(cfg)
    rows = Dataset.from_parquet(str(train_path)).num_rows
    steps = max(1, math.ceil(epochs * rows / cfg.train.prompts_per_step))
    log.info("train.total_epochs=%s over %d rows of %d prompts per step: total_steps=%d",
             epochs, rows, cfg.train.prompts_per_step, steps)
    print(f"train: {epochs} epoch(s) of {rows} rows at {cfg.train.prompts_per_step} prompts/step = {steps} steps")
    cfg.train.total_steps = steps
    return cfg
