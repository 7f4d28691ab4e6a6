"""Shared fixtures. One local Ray cluster per test session: ``ray.init`` costs 7-11 s here."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SHARED_DATA = ROOT.parent / "shared" / "data"

# Nothing may come from the HF hub at run time (no internet); the bundled models load offline.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """../shared/data: the real logged outcomes (RouteLLM) and GSM8K."""
    if not (SHARED_DATA / "routellm").exists():
        pytest.skip(f"{SHARED_DATA} is absent")
    return SHARED_DATA


@pytest.fixture(scope="session")
def ray_cluster():
    """A real local Ray cluster shared by every test of the session."""
    import ray

    if not ray.is_initialized():
        ray.init(num_cpus=8, include_dashboard=False, log_to_driver=False,
                 runtime_env={"env_vars": {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
                                           "PYTHONPATH": str(ROOT)}})
    yield ray
    # left running until the interpreter exits: other modules' tests reuse it


def pytest_sessionfinish(session, exitstatus):
    try:
        import ray

        if ray.is_initialized():
            ray.shutdown()
    except Exception:
        pass


COLLECTED = {"tests": 0}


def pytest_collection_finish(session):
    COLLECTED["tests"] = len(session.items)


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    """The staleness report (``tools/staleness.py``): which of the README's results were measured on code that
    has changed since. A report that lists, not a failure."""
    try:
        from tools.staleness import report_lines

        lines, _ = report_lines()
        if COLLECTED["tests"] < 200:  # a few tests, not the suite: the count line only
            lines = lines[:1]
    except Exception as e:  # the report must never turn a run red; say why it is missing
        lines = [f"staleness report unavailable: {type(e).__name__}: {e}"]
    terminalreporter.section("results and the code they measured (tools/staleness.py)")
    for line in lines:
        terminalreporter.write_line(line)
