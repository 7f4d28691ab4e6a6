"""Where the project is: the folder a job resolves ``outputs/`` and ``../shared/data`` against.

A local run starts in the project, so the working directory is the project. A job submitted with
``ray job submit --working-dir .`` runs in its package folder, which Ray unpacks under its temp dir
(``.../working_dir_files/_ray_pkg_<hash>/``) and deletes: data found or written relative to it is
lost or missing (``../shared/data`` beside the package does not exist, so the logged outcomes would be
downloaded). So a job, and every Ray worker it starts, resolves the project as:

1. ``RLROUTER_ROOT`` when set (an absolute path);
2. in a job package, the project the running Python installed rlrouter from (``pip install -e .``
   records it; the head started from the project's ``.venv`` runs that Python, docs/operations.md);
3. else none: the working directory (a local run).

A job package with neither is an error that says what to set.
"""

from __future__ import annotations

import json
import os
from importlib import metadata
from pathlib import Path

PACKAGE_MARK = "_ray_pkg_"


class ProjectRootError(RuntimeError):
    pass


def in_job_package(path: Path | None = None) -> bool:
    """Whether ``path`` (default: this code) lies in a Ray job package, i.e. runs from a submitted job."""
    return any(part.startswith(PACKAGE_MARK) for part in (path or Path(__file__).resolve()).parts)


def installed_project() -> Path | None:
    """The folder rlrouter was installed from in editable mode, if it was (pip's ``direct_url.json``)."""
    for dist in metadata.distributions(name="rlrouter"):
        raw = dist.read_text("direct_url.json")
        if not raw:
            continue  # an egg-info in a job package: not an installation
        try:
            info = json.loads(raw)
        except ValueError:
            continue
        url = str(info.get("url", ""))
        if info.get("dir_info", {}).get("editable") and url.startswith("file://"):
            folder = Path(url.removeprefix("file://"))
            if (folder / "conf").is_dir() and not in_job_package(folder):
                return folder
    return None


def project_root(environ: dict[str, str] | None = None, here: Path | None = None) -> Path | None:
    """The project folder by the rules above; None for a local run (the working directory)."""
    env = os.environ if environ is None else environ
    given = env.get("RLROUTER_ROOT")
    if given:
        root = Path(given).expanduser()
        if not root.is_absolute():
            raise ProjectRootError(f"RLROUTER_ROOT: must be an absolute path (the project folder), got {given!r}")
        return root
    if not in_job_package(here):
        return None
    root = installed_project()
    if root is None:
        raise ProjectRootError(
            "RLROUTER_ROOT: not set, and this submitted job runs in its package folder, which Ray deletes; "
            "the Python running it did not install rlrouter from a project folder (`pip install -e .`). "
            "Start the Ray head from the project's activated .venv (docs/operations.md), or set "
            "RLROUTER_ROOT to the project folder on the head (export it before `ray start`, or in the "
            "runtime env's env_vars)")
    return root


def export_root() -> Path | None:
    """Set ``RLROUTER_ROOT`` for this process when the project is not the working directory, so the
    config's ``paths.root_dir`` (``${oc.env:RLROUTER_ROOT,...}``) resolves there. Job entry points call it
    before Hydra composes the config."""
    root = project_root()
    if root is not None:
        os.environ["RLROUTER_ROOT"] = str(root)
    return root
