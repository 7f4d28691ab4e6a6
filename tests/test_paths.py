"""Where a job finds the project: its working directory locally, never a submitted job's package folder."""

from pathlib import Path

import pytest

from rlrouter import paths
from rlrouter.paths import ProjectRootError, in_job_package, project_root
from tests.helpers import ROOT

PKG = Path("/tmp/ray/session_x/runtime_resources/working_dir_files/_ray_pkg_0123abcd/rlrouter/paths.py")


def test_a_local_run_uses_its_working_directory():
    assert not in_job_package(ROOT / "rlrouter" / "paths.py")
    assert project_root({}, ROOT / "rlrouter" / "paths.py") is None


def test_a_submitted_job_finds_the_project_it_was_installed_from():
    assert in_job_package(PKG)
    assert paths.installed_project() == ROOT  # this checkout's .venv: pip install -e .
    assert project_root({}, PKG) == ROOT


def test_rlrouter_root_wins_and_must_be_absolute(tmp_path):
    assert project_root({"RLROUTER_ROOT": str(tmp_path)}, PKG) == tmp_path
    with pytest.raises(ProjectRootError, match="RLROUTER_ROOT: must be an absolute path"):
        project_root({"RLROUTER_ROOT": "main"}, PKG)


def test_a_package_without_a_project_is_an_error_naming_what_to_set(monkeypatch):
    monkeypatch.setattr(paths, "installed_project", lambda: None)
    with pytest.raises(ProjectRootError, match=r"RLROUTER_ROOT: not set.*activated \.venv"):
        project_root({}, PKG)
