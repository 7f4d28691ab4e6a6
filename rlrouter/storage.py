"""Where a job writes its reports, checkpoints and plots: a storage location, as Ray Train's ``storage_path``.

``storage`` (config key, or env ``RLROUTER_STORAGE``) is a path every node can reach (a shared file
system) or a URI that ``pyarrow.fs`` opens (``s3://``, ``gs://``, ``file://``). A run writes to
``<storage>/<run_name>``. With a URI the run works in a local folder and copies it there at the end;
``resume=true`` first copies the run back, so it continues on a new cluster.

Without a storage location: an explicit ``out_dir`` wins; a local run writes to ``outputs/<run_name>``
in the project; a job submitted with ``ray job submit --working-dir`` writes to ``~/rlrouter_results/<run_name>``
on the node running the job (the head, as Ray Train's ``~/ray_results``), never into the job's package
folder, which Ray deletes. docs/operations.md "Where a job writes".
"""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

SUBMITTED_DEFAULT = "~/rlrouter_results"


def submission_id(environ: dict[str, str] | None = None) -> str | None:
    """The ``ray job submit`` id when this process is a submitted job's driver, else None."""
    env = os.environ if environ is None else environ
    raw = env.get("RAY_JOB_CONFIG_JSON_ENV_VAR")
    if not raw:
        return None
    try:
        return json.loads(raw).get("metadata", {}).get("job_submission_id")
    except (ValueError, AttributeError):
        return None


def is_uri(location: str) -> bool:
    return "://" in location


def run_folder(run_name: str, out_dir: str, root_dir: str, storage: str | None = None) -> str:
    """The local folder of a run, as :meth:`RunStorage.from_cfg` resolves it: the config's resolver
    ``${rlrouter.run_folder:...}``, so Hydra's own folder (``hydra.run.dir``) goes with the run's other
    outputs (``~/rlrouter_results/<run>/hydra`` for a submitted job), never into the project."""
    return str(RunStorage.resolve(run_name, out_dir, str(Path(root_dir) / "outputs" / run_name), storage).local)


def train_storage_path(storage_path: str) -> str:
    """Ray Train's ``storage_path``: a URI (``s3://``, ``gs://``, ``file://``) as it is, for Ray Train's own
    ``pyarrow.fs``; a path made absolute (``Path("s3://b/x").resolve()`` would be the local folder ``s3:/b/x``)."""
    return storage_path if is_uri(storage_path) else str(Path(storage_path).resolve())


def register_resolvers() -> None:
    """Make ``rlrouter.run_folder`` known to OmegaConf (job entry points call it before Hydra composes)."""
    from omegaconf import OmegaConf

    if not OmegaConf.has_resolver("rlrouter.run_folder"):
        OmegaConf.register_new_resolver("rlrouter.run_folder", run_folder)


@dataclass(frozen=True)
class RunStorage:
    """Where one run writes: ``local`` (a folder this process writes) and, for a URI, ``remote``."""

    local: Path
    remote: str | None = None
    why: str = ""
    """Which rule chose the location (printed, so the user can find the outputs)."""

    @classmethod
    def resolve(cls, run_name: str, out_dir: str, default_out_dir: str, storage: str | None = None,
                environ: dict[str, str] | None = None) -> RunStorage:
        env = os.environ if environ is None else environ
        storage = storage or env.get("RLROUTER_STORAGE") or None
        if Path(out_dir) != Path(default_out_dir):
            return cls(Path(out_dir), None, "out_dir")
        if storage:
            if is_uri(storage):
                cache = Path(env.get("RLROUTER_CACHE", "~/.cache/rlrouter")).expanduser() / "runs" / run_name
                return cls(cache, f"{storage.rstrip('/')}/{run_name}", "storage (URI)")
            return cls(Path(storage).expanduser() / run_name, None, "storage")
        sub = submission_id(env)
        if sub:
            return cls(Path(SUBMITTED_DEFAULT).expanduser() / run_name, None, f"submitted job {sub}: default")
        return cls(Path(out_dir), None, "local run: default")

    @classmethod
    def from_cfg(cls, cfg: Any) -> RunStorage:
        """From a job config (a Hydra node or a plain mapping) with ``run_name``, ``out_dir``,
        ``paths.root_dir`` and optional ``storage``."""
        default_out = str(Path(cfg["paths"]["root_dir"]) / "outputs" / cfg["run_name"])
        return cls.resolve(cfg["run_name"], cfg["out_dir"], default_out, cfg.get("storage"))  # run_folder's rule

    @classmethod
    def for_output_dir(cls, job_name: str, output_dir: str, storage: str | None = None,
                       environ: dict[str, str] | None = None, default: str | None = None) -> RunStorage:
        """The GMTRouter and intent jobs, whose ``output_dir`` defaults to Hydra's run folder (relative to
        the working dir, i.e. Ray's package dir in a submitted job): that default follows the same rules as
        Router-R1's ``out_dir``; an ``output_dir`` set by the user is kept. The run's name is
        ``<job_name>_<folder name>``. ``default``: the default ``output_dir`` (None: Hydra's run folder
        when Hydra runs this job, else ``output_dir`` itself)."""
        if default is None:
            default = output_dir
            try:
                from hydra.core.hydra_config import HydraConfig

                if HydraConfig.initialized():
                    default = HydraConfig.get().runtime.output_dir
            except ImportError:  # pragma: no cover - hydra is a dependency
                pass
        name = f"{job_name}_{Path(output_dir).name}"
        return cls.resolve(name, output_dir, default, storage, environ)

    def where(self) -> str:
        return self.remote or str(self.local)

    def checkpoints(self) -> str:
        """Where the learner ranks put checkpoints, from whichever node they run on: ``<run>/checkpoints``
        at the URI (each rank uploads what it wrote), or in the run's folder (a path every node must see)."""
        return join(self.remote, "checkpoints") if self.remote else str(self.local / "checkpoints")

    def banner(self) -> str:
        return f"storage: reports, checkpoints and plots go to {self.where()} ({self.why})"

    def prepare(self, resume: bool = False) -> Path:
        """The local folder to write; on resume from a URI, the stored run is copied into it first."""
        if self.remote is not None and resume:
            # the driver's files (config, metrics); the learner ranks read checkpoints at the URI themselves
            for name in _entries(self.remote, skip=("checkpoints", "ray_train")):
                self._copy(join(self.remote, name), str(self.local / name), download=True)
        self.local.mkdir(parents=True, exist_ok=True)
        return self.local

    def push(self) -> str | None:
        """Copy the local run to the URI (no-op for a path); returns where it went."""
        if self.remote is None:
            return None
        self._copy(str(self.local), self.remote, download=False)
        return self.remote

    @staticmethod
    def _copy(src: str, dst: str, download: bool) -> None:
        from pyarrow import fs

        if download:
            remote_fs, path = fs.FileSystem.from_uri(src)
            info = remote_fs.get_file_info(path)
            if info.type == fs.FileType.NotFound:
                return  # nothing stored yet: a fresh start
            if info.type == fs.FileType.File:
                Path(dst).parent.mkdir(parents=True, exist_ok=True)
            else:
                Path(dst).mkdir(parents=True, exist_ok=True)
            fs.copy_files(path, dst, source_filesystem=remote_fs, destination_filesystem=fs.LocalFileSystem())
        else:
            remote_fs, path = fs.FileSystem.from_uri(dst)
            remote_fs.create_dir(path, recursive=True)
            fs.copy_files(src, path, source_filesystem=fs.LocalFileSystem(), destination_filesystem=remote_fs)


# ---- one folder API over a path or a URI (what the learner ranks use for checkpoints) -------------------

def join(location: str, *parts: str) -> str:
    """``location/part/...`` for a path or a URI (``Path`` would turn ``s3://b`` into ``s3:/b``)."""
    if is_uri(location):
        return "/".join([location.rstrip("/"), *[p.strip("/") for p in parts]])
    return str(Path(location, *parts))


def _fs(location: str) -> tuple[Any, str]:
    from pyarrow import fs

    if is_uri(location):
        return fs.FileSystem.from_uri(location)
    return fs.LocalFileSystem(), str(Path(location).expanduser().resolve())


def _entries(location: str, skip: tuple[str, ...] = ()) -> list[str]:
    """Names directly in ``location`` (files and folders), without ``skip``; none if it does not exist."""
    from pyarrow import fs

    filesystem, path = _fs(location)
    if filesystem.get_file_info(path).type == fs.FileType.NotFound:
        return []
    return sorted(n for n in (Path(i.path).name for i in filesystem.get_file_info(fs.FileSelector(path)))
                  if n not in skip)


def exists(location: str) -> bool:
    from pyarrow import fs

    filesystem, path = _fs(location)
    return filesystem.get_file_info(path).type != fs.FileType.NotFound


def list_dirs(location: str) -> list[str]:
    """Names of the folders directly in ``location`` (none if it does not exist), sorted."""
    from pyarrow import fs

    filesystem, path = _fs(location)
    if filesystem.get_file_info(path).type == fs.FileType.NotFound:
        return []
    infos = filesystem.get_file_info(fs.FileSelector(path, recursive=False))
    return sorted(Path(i.path).name for i in infos if i.type == fs.FileType.Directory)


def upload(local_dir: str | Path, location: str, only: list[str] | None = None) -> None:
    """Copy the files of ``local_dir`` (or just the names in ``only``) into ``location``; files already
    there from other writers stay (every FSDP rank adds its own shards to one checkpoint)."""
    from pyarrow import fs

    filesystem, path = _fs(location)
    filesystem.create_dir(path, recursive=True)
    if only is None:
        fs.copy_files(str(local_dir), path, source_filesystem=fs.LocalFileSystem(), destination_filesystem=filesystem)
        return
    for name in only:
        src = Path(local_dir) / name
        dst = f"{path.rstrip('/')}/{name}"
        if src.is_dir():
            filesystem.create_dir(dst, recursive=True)
        fs.copy_files(str(src), dst, source_filesystem=fs.LocalFileSystem(), destination_filesystem=filesystem)


def download(location: str, local_dir: str | Path, only: list[str] | None = None) -> Path:
    """Copy the folder at ``location`` into ``local_dir``; ``only``: just these entries of it (those that
    exist), e.g. one learner rank's own shards of a checkpoint instead of every rank's."""
    from pyarrow import fs

    filesystem, path = _fs(location)
    Path(local_dir).mkdir(parents=True, exist_ok=True)
    local = fs.LocalFileSystem()
    if only is None:
        fs.copy_files(path, str(local_dir), source_filesystem=filesystem, destination_filesystem=local)
        return Path(local_dir)
    for name in only:
        src = f"{path.rstrip('/')}/{name}"
        if filesystem.get_file_info(src).type == fs.FileType.NotFound:
            continue
        fs.copy_files(src, str(Path(local_dir) / name), source_filesystem=filesystem, destination_filesystem=local)
    return Path(local_dir)


def remove(location: str) -> None:
    filesystem, path = _fs(location)
    try:
        filesystem.delete_dir(path)
    except (FileNotFoundError, OSError):
        pass


def clear_local(storage: RunStorage) -> None:
    """Remove the local copy of a URI-stored run (tests, and a clean new cluster)."""
    if storage.remote is not None:
        shutil.rmtree(storage.local, ignore_errors=True)
