"""``make bench`` (benchmarks/run_all.py) runs the product's benchmarks; a dated study's scripts write beside
their study and run only with ``--studies``."""

from __future__ import annotations

import sys

from tests.helpers import ROOT


def test_a_study_script_names_its_study():
    from benchmarks.run_all import study_of

    assert study_of('import x\nSTUDY = "2026-11-a-study"\n') == "2026-11-a-study"
    assert study_of("def f():\n    STUDY = 'inside a function'\n") is None
    assert study_of("STUDY = some_name\n") is None
    assert study_of("not python (") is None


def test_every_study_script_writes_beside_a_study_that_exists():
    from benchmarks.run_all import discover, study_of

    studies = {p.stem: study_of(p.read_text()) for p in discover()}
    marked = {n: s for n, s in studies.items() if s}
    assert {"bench_routing", "bench_unseen_subjects", "bench_llm_confidence"} <= set(marked)
    for name, study in marked.items():
        assert (ROOT / "docs" / "experiments" / f"{study}.md").is_file(), f"{name}: no study {study}"
        assert "benchmarks\" / \"results\"" not in (ROOT / "benchmarks" / f"{name}.py").read_text().replace(
            'LEDGER = ROOT / "benchmarks" / "results"', ""), f"{name} still writes to benchmarks/results/"


def test_make_bench_leaves_a_study_out_unless_asked(tmp_path):
    from benchmarks import run_all

    script = ROOT / "benchmarks" / "bench_zz_study_probe_tmp.py"
    marker = tmp_path / "ran"
    script.write_text(f'STUDY = "2026-11-a-study"\nif __name__ == "__main__":\n    open({str(marker)!r}, "w").write("1")\n')
    try:
        skipped = run_all.run_script(script, quick=False, timeout=60, python=sys.executable)
        assert skipped.rc is None and "study" in skipped.skipped and not marker.exists()
        ran = run_all.run_script(script, quick=False, timeout=60, python=sys.executable, studies=True)
        assert ran.rc == 0 and marker.exists()
    finally:
        script.unlink()
        (run_all.LOGS / f"{script.stem}.log").unlink(missing_ok=True)
