"""benchmarks/bench_unseen_subjects.py's pure parts: the routers a --routers list expands to (an ensemble's
ref members first), and the summary's means over seeds whose split has a strong-weak gap to measure."""

from __future__ import annotations

import pytest

from benchmarks import bench_unseen_subjects as bu


def test_routers_list_adds_the_refs_of_an_ensemble_before_it_once():
    assert list(bu.with_refs(["form_encoder"])) == ["probe_form", "encoder", "form_encoder"]
    assert list(bu.with_refs(["encoder", "form_encoder", "probe"])) == ["encoder", "probe_form", "form_encoder", "probe"]
    assert bu.with_refs(["probe_form"]) == {"probe_form": bu.ROUTERS["probe_form"]}
    assert list(bu.with_refs(["options_encoder", "form_encoder"])) == [
        "probe_form_options", "encoder", "options_encoder", "probe_form", "form_encoder"]


def _report(apgr: dict[str, float], weak_q: float, strong_q: float) -> dict:
    at = {k: {"quality": 0.7} for k in ("0.2", "0.5", "0.8")}
    routers = {n: {"apgr": a, "quality": 0.7, "shares": [0.5, 0.5], "cost_mean": 0.001,
                   "share_for_95pct_strong": 0.6, "at_share": at} for n, a in apgr.items()}
    return {"data": {"split": {"test_subjects": ["mmlu/x"]}, "test": 10, "train": 90, "strong": 1},
            "slices": {"all": {"routers": routers, "strong": {"quality": strong_q}, "weak": {"quality": weak_q}}},
            "bootstrap": {"best_baseline": "mf", "routers": {}}}


def test_means_leave_out_a_seed_without_a_gap_and_the_table_says_so():
    reports = {0: _report({"mf": 0.50, "probe_form": 0.60}, 0.60, 0.75),
               3: _report({"mf": 0.78, "probe_form": 1.84}, 0.670, 0.683)}  # seed 3's gap 0.013 < MIN_GAP
    s = bu.summarize(reports)
    r = s["routers"]["probe_form"]
    assert r["apgr_mean"] == pytest.approx(0.60) and r["apgr_minus_mf_mean"] == pytest.approx(0.10)
    assert r["per_seed"][3]["apgr"] == 1.84  # kept per seed, shown in the table
    md = bu.markdown(s)
    assert "0.600 / 1.840" in md
    assert "0: 0.150, 3: 0.013" in md and "Seed 3's gap is below 0.05" in md


def test_the_weak_split_is_pooled_over_seeds_and_tabled():
    """Seed 0 keeps 3 prompts (weak right on 2) and sends 1 (weak wrong); seed 1 keeps 1 (right), sends 3 (1 right):
    pooled kept 3/4, sent 1/4. A report without weak_split (made before the job recorded it) has no table."""
    reports = {0: _report({"mf": 0.5}, 0.6, 0.75), 1: _report({"mf": 0.5}, 0.6, 0.75)}
    assert "Which prompts" not in bu.markdown(bu.summarize(reports))
    reports[0]["slices"]["all"]["routers"]["mf"]["weak_split"] = {"kept": {"n": 3, "weak_quality": 2 / 3},
                                                                  "sent": {"n": 1, "weak_quality": 0.0}}
    reports[1]["slices"]["all"]["routers"]["mf"]["weak_split"] = {"kept": {"n": 1, "weak_quality": 1.0},
                                                                  "sent": {"n": 3, "weak_quality": 1 / 3}}
    s = bu.summarize(reports)
    p = s["routers"]["mf"]["weak_split_pooled"]
    assert (p["n_kept"], p["n_sent"]) == (4, 4) and p["value"] == pytest.approx(0.5)
    assert "| mf | 50.0% | 0.750 (4) | 0.250 (4) | +0.500 [" in bu.markdown(s)


def test_a_cascade_row_shows_the_cost_of_every_call_it_made():
    reports = {0: _report({"mf": 0.5, "router_r1": None}, 0.60, 0.75), 1: _report({"mf": 0.5, "router_r1": None}, 0.6, 0.75)}
    for seed, extra in ((0, 0.0002), (1, 0.0004)):
        reports[seed]["slices"]["all"]["routers"]["router_r1"]["cost_mean_all_calls"] = 0.001 + extra
    s = bu.summarize(reports)
    assert s["routers"]["router_r1"]["cost_mean_all_calls"] == pytest.approx(0.0013)
    assert "cost_mean_all_calls" not in s["routers"]["mf"]
    md = bu.markdown(s)
    assert "| router_r1 | – | – | – | – | – | quality 0.700 at 50.0% strong, $1.000 per 1k prompts ($1.300 with every " \
           "call it made) |" in md
    del reports[1]["slices"]["all"]["routers"]["router_r1"]["cost_mean_all_calls"]  # not every seed has it: no mean
    assert "with every call" not in bu.markdown(bu.summarize(reports))


def test_the_odds_router_reports_what_greedy_decoding_did_per_seed():
    """The job's router info (``escalated_greedy``, ``no_decision_point``) reaches the summary per seed and a line
    under the table; a seed without it (another router type) gives no line."""
    reports = {0: _report({"mf": 0.5, "router_r1_odds": 0.6}, 0.6, 0.75),
               1: _report({"mf": 0.5, "router_r1_odds": 0.7}, 0.6, 0.75)}
    reports[0]["routers"] = {"router_r1_odds": {"type": "router_r1", "escalated_greedy": 4, "no_decision_point": 0}}
    reports[1]["routers"] = {"router_r1_odds": {"type": "router_r1", "escalated_greedy": 6, "no_decision_point": 2}}
    s = bu.summarize(reports)
    per = s["routers"]["router_r1_odds"]["per_seed"]
    assert (per[0]["escalated_greedy"], per[1]["no_decision_point"]) == (4, 2)
    assert "escalated_greedy" not in s["routers"]["mf"]["per_seed"][0]
    assert ("router_r1_odds: greedy decoding escalated on 4 / 6 of each seed's prompts; 0 / 2 turns had no decision "
            "point") in bu.markdown(s)
    del reports[1]["routers"]
    assert "greedy decoding escalated" not in bu.markdown(bu.summarize(reports))
