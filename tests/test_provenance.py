"""Results that say when they were true (``rlrouter.provenance``, ``tools/staleness.py``): a stamp records the
command, date, commit and measured paths; freshness turns stale when a measured path changes, and only then."""

from __future__ import annotations

import ast
import json
import subprocess
from pathlib import Path

import pytest

from rlrouter.provenance import freshness, stamp, staleness_report, write_result
from tests.conftest import ROOT

RESULTS = ROOT / "benchmarks" / "results"


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True, text=True).stdout.strip()


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    _git(tmp_path, "init", "-q")
    _git(tmp_path, "config", "user.email", "t@example.com")
    _git(tmp_path, "config", "user.name", "t")
    (tmp_path / "lib").mkdir()
    (tmp_path / "lib" / "a.py").write_text("x = 1\n")
    (tmp_path / "other.py").write_text("y = 1\n")
    _git(tmp_path, "add", "-A")
    _git(tmp_path, "commit", "-qm", "first")
    return tmp_path


def test_stamp_records_command_date_commit_and_measures(repo):
    result = {"figure": 0.5}
    out = write_result(repo / "results" / "r.json", result, ["lib"], command="python bench.py --x 1", root=repo)
    block = json.loads(out.read_text())["provenance"]
    assert block["command"] == "python bench.py --x 1"
    assert block["commit"] == _git(repo, "rev-parse", "--short", "HEAD")
    assert block["measures"] == ["lib"] and block["dirty"] == []
    assert len(block["date"]) == 10 and block["date"][4] == "-"


def test_stamp_refuses_paths_that_do_not_exist_and_empty_measures(repo):
    with pytest.raises(ValueError, match="no such path.*nowhere"):
        stamp({}, ["lib", "nowhere"], root=repo)
    with pytest.raises(ValueError, match="non-empty list"):
        stamp({}, [], root=repo)
    with pytest.raises(ValueError, match="non-empty list"):
        stamp({}, "lib", root=repo)


def test_outside_a_checkout_the_stamp_has_no_commit_and_reads_unknown(tmp_path):
    block = stamp({}, ["benchmarks/x.py"], command="python x.py", root=tmp_path)
    assert block["commit"] is None and block["dirty"] == []
    write_result(tmp_path / "r.json", {}, ["lib"], root=tmp_path)
    assert freshness(tmp_path / "r.json", tmp_path).state == "unknown"


def test_fresh_until_a_measured_path_changes(repo):
    path = write_result(repo / "r.json", {}, ["lib"], root=repo)
    _git(repo, "add", "r.json")
    _git(repo, "commit", "-qm", "result")
    assert freshness(path, repo).state == "fresh"
    (repo / "other.py").write_text("y = 2\n")  # not measured
    _git(repo, "commit", "-qam", "elsewhere")
    assert freshness(path, repo).state == "fresh"
    (repo / "lib" / "a.py").write_text("x = 2\n")  # measured, not yet committed: already stale
    f = freshness(path, repo)
    assert (f.state, f.changed) == ("stale", ["lib/a.py"]) and "1 measured files changed" in f.why
    _git(repo, "commit", "-qam", "measured code")
    assert freshness(path, repo).state == "stale"


def test_measured_on_uncommitted_changes_is_stale(repo):
    (repo / "lib" / "a.py").write_text("x = 3\n")
    path = write_result(repo / "r.json", {}, ["lib"], root=repo)
    block = json.loads(path.read_text())["provenance"]
    assert block["dirty"] == ["lib/a.py"]
    f = freshness(path, repo)
    assert f.state == "stale" and "uncommitted changes to lib/a.py" in f.why


def test_unknown_without_a_block_or_with_a_foreign_commit(repo):
    (repo / "bare.json").write_text(json.dumps({"figure": 1}))
    assert freshness(repo / "bare.json", repo).state == "unknown"
    (repo / "foreign.json").write_text(json.dumps({"provenance": {"commit": "0123abc", "measures": ["lib"]}}))
    f = freshness(repo / "foreign.json", repo)
    assert f.state == "unknown" and "not in this checkout" in f.why
    order = [f.state for f in staleness_report([repo / "bare.json", repo / "foreign.json"], repo)]
    assert order == ["unknown", "unknown"]


def _measures(script: Path) -> tuple[str, ...] | None:
    for node in ast.parse(script.read_text()).body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", "") == "MEASURES" for t in node.targets):
            return tuple(ast.literal_eval(node.value))
    return None


# every script that writes a result (bench_router_r1_raw_vllm.py is a helper that prints to its parent)
WRITERS = sorted([*(p for p in (ROOT / "benchmarks").glob("bench_*.py") if p.name != "bench_router_r1_raw_vllm.py"),
                  ROOT / "benchmarks" / "pool_bench.py", ROOT / "tools" / "gpu_check.py", ROOT / "tools" / "fresh_clone.py"])


@pytest.mark.parametrize("script", WRITERS, ids=[p.name for p in WRITERS])
def test_every_benchmark_declares_what_it_measures(script):
    """Each benchmark names the paths its figures depend on, they exist, and its writes stamp them (the constant
    is passed on: to write_result, or to a helper that calls it)."""
    measures = _measures(script)
    assert measures, f"{script.name}: no MEASURES = (...) constant"
    assert [m for m in measures if not (ROOT / m).exists()] == []
    uses = [n for n in ast.walk(ast.parse(script.read_text())) if isinstance(n, ast.Name) and n.id == "MEASURES"
            and isinstance(n.ctx, ast.Load)]
    assert uses, f"{script.name}: MEASURES is declared but no write stamps it"


def test_every_committed_result_says_when_it_was_true():
    """Every result JSON, in benchmarks/results/ and in each dated study's own docs/experiments/<study>/results/."""
    from tools.staleness import committed_results

    paths = committed_results()
    assert {*RESULTS.glob("*.json"), *ROOT.glob("docs/experiments/*/results/*.json")} <= set(paths)
    missing = []
    for p in paths:
        block = json.loads(p.read_text()).get("provenance") or {}
        if not all(block.get(k) for k in ("command", "date", "commit", "measures")):
            missing.append(str(p.relative_to(ROOT)))
    assert missing == [], "results without a provenance block (command, date, commit, measures)"


def test_the_readme_results_are_found_and_reported():
    from tools.staleness import readme_results, report_lines

    names = readme_results()
    assert {"fresh_clone.json", "durability.json", "many_models.json", "rl_bandit.json"} <= set(names)
    lines, mine = report_lines()
    assert len(mine) == len(names) and lines[0].startswith(f"results the README quotes ({len(names)})")
    from tools.render_docs import README_RESULTS

    assert list(README_RESULTS) == names, "the README's provenance table lists other results than its figures read"


def test_fresh_clone_reads_pytest_summary_and_durations():
    from tools.fresh_clone import pytest_summary, slowest

    log = ("============================= slowest 40 durations =============================\n"
           "120.50s call     tests/a.py::test_x\n3.00s setup    tests/b.py::test_y\n"
           "======= 1 failed, 1840 passed, 6 skipped, 38 warnings in 3001.70s (0:50:01) =======\n")
    s = pytest_summary(log)
    assert (s["passed"], s["failed"], s["skipped"], s["seconds"]) == (1840, 1, 6, 3001.7)
    assert [r["test"] for r in slowest(log)] == ["tests/a.py::test_x", "tests/b.py::test_y"]
    quiet = "SKIPPED [1] tests/x.py:1: needs a GPU\n1887 passed, 6 skipped, 38 warnings in 2501.50s (0:41:41)\n--- Logging error ---\n"
    assert (pytest_summary(quiet)["passed"], pytest_summary(quiet)["seconds"]) == (1887, 2501.5)  # -q: no rules
    with pytest.raises(ValueError, match="no pytest summary"):
        pytest_summary("nothing here")
