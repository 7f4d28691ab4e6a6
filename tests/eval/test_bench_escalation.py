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


def test_sampled_groups_split_by_branch_and_compare_within_groups():
    from benchmarks.bench_escalation import branch_summary, groups_markdown

    def r(esc, reward, valid=True, correct=False, cut=False):
        return {"escalated": esc, "reward": reward, "format_valid": valid, "correct": correct, "budget_cut": cut,
                "tokens": 1100 if cut else 800}

    rows = [r(True, 0.7, correct=True), r(True, -1.0, valid=False, cut=True), r(False, 0.0),   # group 1: both
            r(False, 1.0, correct=True), r(False, 0.0), r(False, 0.0)]                          # group 2: answers only
    s = branch_summary(rows, 3)
    assert s["escalated"]["n"] == 2 and math.isclose(s["escalated"]["reward"], -0.15)
    assert s["escalated"]["format_valid"] == 0.5 and s["escalated"]["budget_cut"] == 0.5
    assert s["answered"]["n"] == 4 and math.isclose(s["answered"]["reward"], 0.25) and s["answered"]["correct"] == 0.25
    assert s["groups_with_both"] == 1 and math.isclose(s["escalate_minus_answer"], -0.15 - 0.0)
    table = groups_markdown([{"run": "outputs/x", "step": 4,
                              "groups": {**s, "env": {"max_total_tokens": 1024, "mark_no_answer": True}}}])
    assert "| x | 4 | 1024 | 2, -0.150, 0.50, 0.50, 0.50 | 4, 0.250, 1.00, 0.25, 0.00 | -0.150 (1) |" in table


def test_broken_trajectories_are_counted_by_the_rule_they_break():
    from benchmarks.bench_escalation import failure_counts, format_rule, groups_markdown
    from rlrouter.protocol import FormatError, check_format

    def reason(text):  # what the format reward stores as the failure (RouterR1Score.failure)
        try:
            check_format(text, ["gpt-4", "mixtral"])
        except FormatError as e:
            return str(e)
        return None

    assert format_rule(reason("<think>a</think>\n<answer>4</answer>")) is None
    assert format_rule(reason("<think>a</think>\n<answer>4</answer> more")) == "does not end with </answer>"
    # the quoted detail is cut off, so that two different unknown names count as one rule
    assert format_rule(reason("<think>a</think><search>llama: q</search><information>x</information>"
                              "<answer>4</answer>")) == "unknown candidate"
    rows = [{"escalated": True, "format_error": "unknown candidate"},
            {"escalated": True, "format_error": "does not end with </answer>", "late_search": True},
            {"escalated": True, "format_error": "does not end with </answer>"},
            {"escalated": True, "format_error": None}, {"escalated": False, "format_error": None}]
    fails = failure_counts(rows)
    assert fails == {"by_rule": {"escalated": {"does not end with </answer>": 2, "unknown candidate": 1},
                                 "answered": {}},
                     "late_search": {"escalated": 1, "answered": 0}}
    assert list(fails["by_rule"]["escalated"]) == ["does not end with </answer>", "unknown candidate"]
    nan = {k: float("nan") for k in ("reward", "format_valid", "correct", "budget_cut")}
    entry = {"run": "outputs/x", "step": 0, "groups": {
        "env": {"max_total_tokens": 1536}, "escalated": {"n": 4, **nan}, "answered": {"n": 1, **nan},
        "groups_with_both": 0, "escalate_minus_answer": float("nan"), "format_failures": fails}}
    assert ("x step 0, broken format by rule: escalated: does not end with </answer> 2, unknown candidate 1; "
            "answered: none; a search in the answer-only turn: escalated 1, answered 0") in groups_markdown([entry])
