"""tools/gpu_check.py at toy size on CPU, as ``make test`` runs it, so the device check cannot rot before a GPU
is lent: every stage passes in its own process, the result file holds each, and docs/gpu.md's table is the
rendering of the committed result files. The ``loop`` stage's facts are checked too: rollouts the replay pool
answered, a push that changed the generator and left it bit-exact, a log-prob gap within its fp32 bound."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest

from tests.helpers import ROOT

pytestmark = [pytest.mark.slow]


# The lent machine has no ray, vllm, hydra or omegaconf: every stage runs here with them unimportable
BLOCKER = """
import sys

class _Absent:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("ray", "vllm", "hydra", "omegaconf"):
            raise ImportError(f"{name}: not on the lent GPU machine (tests/ops/test_gpu_check.py)")
        return None

sys.meta_path.insert(0, _Absent())
"""


@pytest.mark.timeout(900)
def test_the_device_check_runs_every_stage_at_toy_size(tmp_path):
    out = tmp_path / "gpu_check.json"
    (tmp_path / "site").mkdir()
    (tmp_path / "site" / "sitecustomize.py").write_text(BLOCKER)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path / "site"), os.environ.get("PYTHONPATH", "")])}
    r = subprocess.run([sys.executable, str(ROOT / "tools" / "gpu_check.py"), "--size", "toy", "--out", str(out)],
                       cwd=ROOT, capture_output=True, text=True, timeout=800, env=env)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    res = json.loads(out.read_text())
    assert [s["stage"] for s in res["stages"]] == ["env", "logits", "scale", "checkpoint", "loop", "gpu_tests"]
    assert all(s["passed"] for s in res["stages"]), res["stages"]
    lines = [ln for ln in r.stdout.splitlines() if ln.startswith(("PASS ", "FAIL "))]
    assert len(lines) == 6 and all(ln.startswith("PASS ") for ln in lines)
    by = {s["stage"]: s for s in res["stages"]}
    assert by["logits"]["bytes_per_element"] <= by["logits"]["plan_bytes_per_element"]
    assert by["checkpoint"]["weights_equal"] is True and res["not_built"] == []
    loop = by["loop"]
    assert loop["dtype"] == "float32" and loop["trajectories"] == 4 and loop["policy_turns"] == 2
    assert loop["pool_answers"] == loop["pool_calls"] > 0 and loop["policy_tokens"] == loop["tokens_generated"] > 0
    assert loop["bit_exact"] is True and loop["tensors_changed"] == loop["tensors_pushed"] > 0
    assert loop["buckets"] > 1 and loop["packed_bytes"] == loop["bytes"] and loop["unpushed"] == []
    assert loop["logprob_tokens"] > 0 and loop["logprob_gap_max"] <= loop["gap_bound_max"] == 1e-3
    # the push is what closes the gap: the stepped learner against the rollouts from before it is far off
    assert loop["logprob_gap_stale_mean"] > 100 * loop["logprob_gap_mean"]


def test_a_failing_stage_is_reported_not_raised(tmp_path, monkeypatch):
    sys.path.insert(0, str(ROOT / "tools"))
    import gpu_check

    monkeypatch.setitem(gpu_check.LIMIT_S, "env", 0.01)  # no process starts in 10 ms: over the limit
    row = gpu_check.run_stage("env", full=True)
    assert row["passed"] is False and "limit" in row["error"]


def test_the_blocker_blocks(tmp_path):
    """The stand-in for the lent machine's missing packages really hides them (or the test above proves nothing)."""
    (tmp_path / "sitecustomize.py").write_text(BLOCKER)
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}
    r = subprocess.run([sys.executable, "-c", "import ray"], capture_output=True, text=True, env=env, timeout=120)
    assert r.returncode != 0 and "not on the lent GPU machine" in r.stderr


def _python_3_12() -> str | None:
    """A Python 3.12 interpreter that runs (pyenv's shim alone may not), or None."""
    import glob

    for exe in [*sorted(glob.glob(os.path.expanduser("~/.pyenv/versions/3.12*/bin/python3.12"))),
                shutil.which("python3.12")]:
        if exe and subprocess.run([exe, "--version"], capture_output=True, timeout=30).returncode == 0:
            return exe
    return None


PY312 = _python_3_12()


@pytest.mark.skipif(PY312 is None, reason="no Python 3.12 on this machine")
def test_the_library_and_the_check_compile_on_python_3_12():
    """The lent machine runs Python 3.12 (the package installs on 3.11): its grammar takes every module."""
    files = [str(p) for d in ("rlrouter", "tools") for p in sorted((ROOT / d).rglob("*.py"))]
    code = "import sys\nfor f in sys.argv[1:]: compile(open(f, encoding='utf-8').read(), f, 'exec')"
    r = subprocess.run([str(PY312), "-c", code, *files], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
