"""The escalation probe's summary and table (benchmarks/bench_escalation.py): pure arithmetic on rows."""

import math

from benchmarks.bench_escalation import markdown, odds_ratio, summary


def _row(stated, p, first, greedy):
    return {"stated": stated, "p_escalate": p, "p_escalate_first": first, "greedy_escalates": greedy}


def test_summary_splits_by_the_reply_and_counts_greedy_escalations():
    rows = [_row(False, 0.6, 0.7, True), _row(False, 0.2, 0.4, False), _row(True, 0.1, 0.2, False),
            _row(True, 0.3, 0.1, False)]
    s = summary(rows)
    assert s["not_stated"] == {"n": 2, "mean_p_escalate": 0.4, "mean_p_escalate_first": 0.55, "greedy_escalates": 0.5}
    assert s["stated"]["n"] == 2 and math.isclose(s["stated"]["mean_p_escalate"], 0.2)
    assert s["stated"]["greedy_escalates"] == 0.0 and math.isclose(s["gap"], 0.2)
    assert math.isclose(odds_ratio(s), (0.4 / 0.6) / (0.2 / 0.8))
    table = markdown({"runs": [{"run": "outputs/r", "checkpoints": [{"step": 4, "summary": s}]}]})
    assert "| r | 4 | 0.400 | 0.200 | 2.7 | 0.550 / 0.150 | 0.50 / 0.00 |" in table


def test_the_table_of_results_without_the_decision_point_keeps_its_columns():
    s = {"not_stated": {"n": 1, "mean_p_escalate": 0.5}, "stated": {"n": 1, "mean_p_escalate": 0.005}, "gap": 0.495}
    table = markdown({"runs": [{"run": "r", "checkpoints": [{"step": 0, "summary": s}]}]})
    assert table.splitlines()[0].count("|") == 6 and "| r | 0 | 0.500 | 0.005 | – |" in table


def test_the_plot_draws_both_readings(tmp_path):
    from benchmarks.bench_escalation import plot

    rows = [_row(False, 0.6, 0.7, True), _row(True, 0.1, 0.2, False)]
    plot({"runs": [{"run": "r", "checkpoints": [{"step": 0, "summary": summary(rows)}]}]}, tmp_path / "p.png")
    assert (tmp_path / "p.png").stat().st_size > 1000
