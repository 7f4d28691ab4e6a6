"""tools/gpu_check.py at toy size on CPU, as ``make test`` runs it, so the device check cannot rot before a GPU
is lent: every stage passes in its own process, the result file holds each, and docs/gpu.md's table is the
rendering of the committed result files."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.helpers import ROOT

pytestmark = [pytest.mark.slow]


@pytest.mark.timeout(900)
def test_the_device_check_runs_every_stage_at_toy_size(tmp_path):
    out = tmp_path / "gpu_check.json"
    r = subprocess.run([sys.executable, str(ROOT / "tools" / "gpu_check.py"), "--size", "toy", "--out", str(out)],
                       cwd=ROOT, capture_output=True, text=True, timeout=800)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    res = json.loads(out.read_text())
    assert [s["stage"] for s in res["stages"]] == ["env", "logits", "scale", "checkpoint", "gpu_tests"]
    assert all(s["passed"] for s in res["stages"]), res["stages"]
    lines = [ln for ln in r.stdout.splitlines() if ln.startswith(("PASS ", "FAIL "))]
    assert len(lines) == 5 and all(ln.startswith("PASS ") for ln in lines)
    by = {s["stage"]: s for s in res["stages"]}
    assert by["logits"]["bytes_per_element"] <= by["logits"]["plan_bytes_per_element"]
    assert by["checkpoint"]["weights_equal"] is True and res["not_built"] == ["loop"]


def test_a_failing_stage_is_reported_not_raised(tmp_path, monkeypatch):
    sys.path.insert(0, str(ROOT / "tools"))
    import gpu_check

    monkeypatch.setitem(gpu_check.LIMIT_S, "env", 0.01)  # no process starts in 10 ms: over the limit
    row = gpu_check.run_stage("env", full=True)
    assert row["passed"] is False and "limit" in row["error"]
