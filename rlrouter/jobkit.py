"""The kit every Ray Train job is made of: its typed config, its run storage and ``run_on_ray``.

A job module (``rlrouter.gmt.job``, ``rlrouter.intent.job``) defines its config dataclass and builds it
once from Hydra with ``rlrouter.config.typed_config``. It opens its run with ``open_run`` (the
``RunStorage`` wrapper: where outputs go, a local path or a URI), trains with ``run_on_ray(train_fn,
...)`` (Ray Train ranks through the shared launcher, rank 0's checkpoint back on the driver; with
``resources.ray_train: false`` the job calls its per-rank worker in this process instead) and ends
with ``finish_run``.
"""

from __future__ import annotations

import shutil
import time
from dataclasses import replace
from pathlib import Path
from typing import Any, Callable, Protocol, TypeVar

from rlrouter.distributed.resources import ResourceSpec
from rlrouter.storage import RunStorage, train_storage_path


class JobConfig(Protocol):
    """What the kit reads of a job's config dataclass."""

    output_dir: str
    resources: ResourceSpec
    learner_failures: int
    """Ray Train FailureConfig.max_failures."""
    ray: dict[str, Any]
    """The cluster (``conf/ray/``): ``rlrouter.distributed.cluster.connect``'s arguments."""


J = TypeVar("J", bound=JobConfig)


def open_run(name: str, job: J, storage: str | None = None) -> tuple[J, RunStorage]:
    """The job's run storage, announced and prepared, and the job with ``output_dir`` pointing into it.

    ``storage``: the config's ``storage`` (a shared path or a URI; None: the default for ``output_dir``).
    """
    store = RunStorage.for_output_dir(name, job.output_dir, storage)
    print(store.banner())  # a submitted job says where its outputs are
    out = store.prepare().resolve()
    return replace(job, output_dir=str(out)), store


def finish_run(store: RunStorage) -> None:
    """Push the run's outputs to their storage (a URI), saying where they went."""
    pushed = store.push()
    if pushed:
        print(f"stored: {pushed}")


def run_on_ray(train_fn: Callable[[dict[str, Any]], None], config: dict[str, Any], job: JobConfig, name: str,
               dest: Path) -> dict[str, Any]:
    """Run ``train_fn`` (a Ray Train ``train_loop_per_worker``) on ``job.resources.learner`` ranks, then
    put rank 0's checkpoint at ``dest`` (replacing what was there); returns the last reported metrics."""
    from rlrouter.distributed.cluster import connect
    from rlrouter.distributed.launcher import RunSpec, fit

    connect(**job.ray)
    result = fit(train_fn, config, job.resources,
                 RunSpec(name=f"{name}_{int(time.time())}", max_failures=job.learner_failures,
                         storage_path=train_storage_path(str(Path(job.output_dir) / "ray_train"))))
    if result.checkpoint is None:
        raise RuntimeError(f"{name}: Ray Train returned no checkpoint (rank 0 saved nothing)")
    if dest.exists():
        shutil.rmtree(dest)
    result.checkpoint.to_directory(str(dest))
    return dict(result.metrics or {})
