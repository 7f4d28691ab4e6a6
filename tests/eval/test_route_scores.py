"""Routes scored on the policy's own objective: fixed routes, the per-task rule, the oracle, the policy,
the alpha sweep and the paired bootstrap, each against rewards computed by hand."""

from __future__ import annotations

import math
from types import SimpleNamespace

import numpy as np
import pytest

from rlrouter.eval.route_scores import (
    RouteTable,
    alpha_sweep,
    cascade_rows,
    cost_bounds,
    escalation,
    escalation_signal,
    escalation_value,
    oracle_choice,
    paired_diff,
    per_task_rule,
    route_gap,
    scoreboard,
    wrong_sign,
)

# two tasks, two candidates: "big" (strong, dear) and "small"; costs in USD
#            correct (big, small)   cost (big, small)
ROWS = [("math", (1, 0), (0.0400, 0.0001)),
        ("math", (1, 1), (0.0400, 0.0001)),
        ("math", (0, 1), (0.0400, 0.0001)),
        ("mcq", (1, 0), (0.0009, 0.0001)),
        ("mcq", (1, 1), (0.0009, 0.0001)),
        ("mcq", (0, 0), (0.0009, 0.0001))]


def table(rows=ROWS) -> RouteTable:
    return RouteTable([r[0] for r in rows], ["big", "small"], np.array([r[1] for r in rows], dtype=float),
                      np.array([r[2] for r in rows], dtype=float), "big", {"big": 30.0, "small": 0.6})


BOUNDS = (0.01, 0.2)  # sqrt-cost scale: sqrt(0.0001)=0.01 -> cost reward 1; sqrt(0.04)=0.2 -> 0; sqrt(0.0009)=0.03


def by_hand(correct: int, cost: float, alpha: float, fmt: float = 0.0) -> float:
    c = 1.0 - min(1.0, max(0.0, (math.sqrt(cost) - BOUNDS[0]) / (BOUNDS[1] - BOUNDS[0])))
    return ((1 + fmt) * (1 - alpha) + alpha * c) if correct else fmt


def test_fixed_routes_per_task_rule_and_oracle_against_hand_computed_rewards(monkeypatch):
    import rlrouter.eval.route_scores as rs

    monkeypatch.setattr(rs, "cost_bounds", lambda costs, percentiles=None: BOUNDS)
    alpha = 0.5
    t = table()
    board = scoreboard(t, t, alpha, seed=0, n_boot=200)
    big = [by_hand(r[1][0], r[2][0], alpha) for r in ROWS]
    small = [by_hand(r[1][1], r[2][1], alpha) for r in ROWS]
    routes = board["routes"]
    assert routes["always_strongest"]["mean_reward"] == pytest.approx(np.mean(big))
    assert routes["always_cheapest"]["mean_reward"] == pytest.approx(np.mean(small))
    assert routes["always_strongest"]["strong_share_by_task"] == {"math": 1.0, "mcq": 1.0}
    assert routes["always_cheapest"]["cost_per_query"] == pytest.approx(0.0001)
    # per task, on the reference: math big 2/3 * 0.5 = 0.333 vs small 2/3 * 1 = 0.667 -> small;
    # mcq: big 2/3 * (0.5 + 0.5 * (1 - 0.02 / 0.19)) = 0.614 vs small 1/3 -> big
    assert board["per_task"] == {"math": "small", "mcq": "big"}
    rule = small[:3] + big[3:]
    assert routes["per_task_rule"]["mean_reward"] == pytest.approx(np.mean(rule))
    assert routes["per_task_rule"]["strong_share_by_task"] == {"math": 0.0, "mcq": 1.0}
    assert board["best_fixed"] == "always_cheapest"  # 0.5 (small) vs 0.474 (big)
    # the oracle: the cheapest candidate the logs show correct; the cheapest when none is
    assert oracle_choice(t).tolist() == [0, 1, 1, 0, 1, 1]
    oracle = [big[0], small[1], small[2], big[3], small[4], small[5]]
    assert routes["oracle"]["mean_reward"] == pytest.approx(np.mean(oracle))
    assert routes["oracle"]["accuracy"] == pytest.approx(5 / 6)
    d = board["per_task_minus_best_fixed"]
    assert d["value"] == pytest.approx(np.mean(rule) - np.mean(small))


def test_the_policy_is_scored_on_the_same_reward_and_scale(monkeypatch):
    import rlrouter.eval.route_scores as rs

    monkeypatch.setattr(rs, "cost_bounds", lambda costs, percentiles=None: BOUNDS)
    alpha = 0.5

    def traj(i, model, answer, cost, valid=True):
        text = (f"<think>x</think><search>{model}: q</search><information>r</information>"
                f"<think>y</think><answer>{answer}</answer>") if valid else "<think>x</think><answer>"
        return SimpleNamespace(item={"query": f"q{i}", "ground_truth": ["7"], "source": ROWS[i][0]}, text=text,
                               answer=answer if valid else None, cost=cost,
                               routes=[SimpleNamespace(model=model)] if valid else [])

    trajs = [traj(0, "big", "7", 0.04), traj(1, "small", "7", 0.0001), traj(2, "small", "5", 0.0001),
             traj(3, "big", "7", 0.0009), traj(4, "big", "7", 0.0009), traj(5, "big", "x", 0.0, valid=False)]
    board = scoreboard(table(), table(), alpha, trajs=trajs, seed=0, n_boot=200)
    p = board["routes"]["policy"]
    want = [by_hand(1, 0.04, alpha), by_hand(1, 0.0001, alpha), 0.0, by_hand(1, 0.0009, alpha),
            by_hand(1, 0.0009, alpha), -1.0]
    assert p["mean_reward"] == pytest.approx(np.mean(want))
    assert p["format_valid"] == pytest.approx(5 / 6)
    assert p["strong_share_by_task"] == pytest.approx({"math": 1 / 3, "mcq": 1.0})  # a call-less trajectory adds no call
    assert p["route_share"] == {"big": 0.6, "small": 0.4}
    # and per task: math's three questions called big once and small twice, mcq's three big twice (one none)
    assert p["route_share_by_task"]["math"] == pytest.approx({"big": 1 / 3, "small": 2 / 3})
    assert p["route_share_by_task"]["mcq"] == {"big": 1.0, "small": 0.0}
    assert "route_share_by_task" not in board["routes"]["always_cheapest"]
    assert board["policy_minus_best_fixed"]["value"] == pytest.approx(
        np.mean(want) - board["routes"]["always_cheapest"]["mean_reward"])
    # where the reward goes: the parts add up to the gap; the fifth trajectory copied perfectly, the third
    # copied a wrong number, the sixth broke the format
    loss = board["policy_loss"]
    assert loss["route"] + loss["format"] + loss["copy"] == pytest.approx(loss["gap"])
    assert loss["gap"] == pytest.approx(-board["policy_minus_best_fixed"]["value"])
    small = [by_hand(r[1][1], r[2][1], alpha) for r in ROWS]
    big = [by_hand(r[1][0], r[2][0], alpha) for r in ROWS]
    assert loss["copy"] == pytest.approx((small[2] - 0.0) / 6)
    assert loss["format"] == pytest.approx((small[5] - (-1.0)) / 6)
    assert loss["route"] == pytest.approx((small[0] - big[0] + small[3] - big[3] + small[4] - big[4]) / 6)
    with pytest.raises(ValueError, match="6 questions"):
        scoreboard(table(), table(), alpha, trajs=trajs[:5])


def test_alpha_sweep_on_a_hand_made_log():
    """math: big right 4/5 at cost reward 0, small right 1/5 at cost reward 1 -> big wins while
    0.8 (1 - alpha) > 0.2, i.e. below alpha 0.75. mcq: big right 4/5 at cost reward 1 - 0.04 / 0.19, small
    1/5 -> big at every alpha. So the tasks' best routes differ above 0.75 only."""
    rows = [("math", (1, 0), (0.0400, 0.0001))] * 4 + [("math", (0, 1), (0.0400, 0.0001))] + \
           [("mcq", (1, 0), (0.0025, 0.0001))] * 4 + [("mcq", (0, 1), (0.0025, 0.0001))]
    sweep = alpha_sweep(table(rows), [0.0, 0.5, 0.9, 1.0], percentiles=(0.0, 100.0))
    assert sweep["cost_bounds"] == pytest.approx([0.01, 0.2])
    by_alpha = {r["alpha"]: r for r in sweep["rows"]}
    for alpha in (0.0, 0.5, 0.9, 1.0):
        r = by_alpha[alpha]["by_task"]
        assert r["math"]["rewards"]["big"] == pytest.approx(0.8 * (1 - alpha))
        assert r["math"]["rewards"]["small"] == pytest.approx(0.2)
        assert r["mcq"]["rewards"]["big"] == pytest.approx(0.8 * (1 - alpha + alpha * (1 - 0.04 / 0.19)))
        assert r["mcq"]["rewards"]["small"] == pytest.approx(0.2)
        assert r["mcq"]["best"] == "big"
        assert r["math"]["best"] == ("big" if alpha < 0.75 else "small")
    assert sweep["tasks_differ"] == {"alphas": [0.9, 1.0], "low": 0.9, "high": 1.0}
    row = by_alpha[0.9]
    assert row["best_fixed"] == "big"
    assert row["best_fixed_reward"] == pytest.approx((0.8 * 0.1 + 0.8 * (0.1 + 0.9 * (1 - 0.04 / 0.19))) / 2)
    assert row["per_task_rule_reward"] == pytest.approx((0.2 + 0.8 * (0.1 + 0.9 * (1 - 0.04 / 0.19))) / 2)
    # the oracle: big where it alone is right, small where small is right
    mcq_big = 0.1 + 0.9 * (1 - 0.04 / 0.19)
    assert row["oracle_reward"] == pytest.approx((4 * 0.1 + 1.0 + 4 * mcq_big + 1.0) / 10)
    # each task's gap: mcq's big leads small by mcq_big on 4 questions and trails it by 1 on one
    gap = row["by_task"]["mcq"]["gap"]
    assert (gap["best"], gap["runner_up"]) == ("big", "small")
    assert gap["gap"] == pytest.approx((4 * mcq_big - 1.0) / 5)
    assert gap["sd"] == pytest.approx(float(np.std([mcq_big] * 4 + [-1.0], ddof=1)))
    for r in sweep["rows"]:
        assert r["per_task_rule_reward"] >= r["best_fixed_reward"] - 1e-12
        assert r["per_question_best_reward"] >= r["oracle_reward"] - 1e-12


def test_route_gap_by_hand():
    """Candidate 0 leads by 1, 1, 0, -1 on four questions: mean 0.25, sd sqrt(2.75 / 3); 2 standard errors
    need ceil((2 sd / 0.25)^2) = 59 questions; 4 questions favour candidate 1 with chance Phi(-0.25 * 2 / sd)."""
    r = np.array([[1.0, 0.0], [1.0, 0.0], [0.0, 0.0], [0.0, 1.0]])
    g = route_gap(r)
    sd = math.sqrt(2.75 / 3)
    assert (g["best"], g["runner_up"]) == (0, 1)
    assert g["gap"] == pytest.approx(0.25) and g["sd"] == pytest.approx(sd)
    assert g["questions_to_tell"] == 59
    assert wrong_sign(g, 4) == pytest.approx(0.5 * math.erfc(0.25 * 2 / sd / math.sqrt(2)))
    assert wrong_sign(g, 59) < 0.03 < wrong_sign(g, 4)
    # the columns swapped: the same gap, the other way round
    assert route_gap(r[:, ::-1])["best"] == 1
    # a tie is never told apart; one question is too few to say anything
    assert route_gap(np.array([[1.0, 0.0], [0.0, 1.0]]))["questions_to_tell"] is None
    with pytest.raises(ValueError, match="shape"):
        route_gap(np.array([[1.0, 0.0]]))


def test_paired_bootstrap_interval():
    rng = np.random.default_rng(0)
    b = rng.normal(0.5, 0.3, size=2000)
    up = paired_diff(b + 0.05 + rng.normal(0, 0.05, size=2000), b, n_boot=500)
    assert up.lo > 0 and up.value == pytest.approx(0.05, abs=0.01)
    same = paired_diff(b + rng.normal(0, 0.05, size=2000), b, n_boot=500)
    assert same.lo < 0 < same.hi
    with pytest.raises(ValueError):
        paired_diff(b, b[:10])


def test_cost_bounds_are_the_sqrt_percentiles():
    costs = np.array([[0.0001, 0.04], [0.0004, 0.01]])
    assert cost_bounds(costs, (0.0, 100.0)) == pytest.approx((0.01, 0.2))


def test_per_task_rule_breaks_ties_toward_the_cheaper():
    rows = [("t", (1, 1), (0.0001, 0.0001))]
    assert per_task_rule(table(rows), 0.0, BOUNDS) == {"t": "small"}


def test_cascade_asks_the_strongest_only_where_the_cheap_reply_states_no_answer():
    """Rows 0 and 3: the small model's reply states no final answer, so the cascade pays both calls and
    takes big's outcome; elsewhere it is small's. Rewards by hand on the fixed bounds."""
    t = table()
    t.stated = np.array([[1, 0], [1, 1], [1, 1], [1, 0], [1, 1], [1, 1]], dtype=float)
    alpha = 0.5
    rows = cascade_rows(t, alpha, BOUNDS)
    want = [by_hand(1, 0.0401, alpha), by_hand(1, 0.0001, alpha), by_hand(1, 0.0001, alpha),
            by_hand(1, 0.0010, alpha), by_hand(1, 0.0001, alpha), by_hand(0, 0.0001, alpha)]
    assert rows.reward.tolist() == pytest.approx(want)
    assert rows.calls.tolist() == [2, 1, 1, 2, 1, 1] and rows.strong_calls.tolist() == [1, 0, 0, 1, 0, 0]
    assert rows.cost.tolist() == pytest.approx([0.0401, 0.0001, 0.0001, 0.0010, 0.0001, 0.0001])
    # no stated column (every reply states an answer): the cascade is always-cheapest
    plain = cascade_rows(table(), alpha, BOUNDS)
    assert plain.reward.tolist() == pytest.approx([by_hand(r[1][1], r[2][1], alpha) for r in ROWS])
    assert table().subset([0, 3]).stated is None and t.subset([0, 3]).stated.tolist() == [[1, 0], [1, 0]]


def test_escalation_value_splits_by_task_and_reply_against_hand_computed_rewards():
    """Both calls' cost and big's outcome, minus small's cost and outcome, per task and kind of small reply."""
    t = table()
    t.stated = np.array([[1, 0], [1, 1], [1, 1], [1, 0], [1, 1], [1, 1]], dtype=float)
    alpha = 0.5
    v = escalation_value(t, alpha, BOUNDS)
    gains = [by_hand(r[1][0], r[2][0] + r[2][1], alpha) - by_hand(r[1][1], r[2][1], alpha) for r in ROWS]
    assert v["math"]["not_stated"]["n"] == 1 and v["math"]["not_stated"]["mean"] == pytest.approx(gains[0])
    assert v["math"]["not_stated"]["se"] is None  # one question: no standard error
    assert v["math"]["stated"]["n"] == 2 and v["math"]["stated"]["mean"] == pytest.approx(np.mean(gains[1:3]))
    assert v["math"]["stated"]["se"] == pytest.approx(np.std(gains[1:3], ddof=1) / math.sqrt(2))
    assert v["mcq"]["stated"]["mean"] == pytest.approx(np.mean(gains[4:6]))
    assert v["mcq"]["not_stated"]["mean"] == pytest.approx(gains[3]) and gains[3] > 0 > gains[1]
    # no stated column: every reply states an answer, so there is no not_stated cell
    assert set(escalation_value(table(), alpha, BOUNDS)["math"]) == {"stated"}


def test_scoreboard_has_the_cascade_and_the_policys_escalation(monkeypatch):
    import rlrouter.eval.route_scores as rs

    monkeypatch.setattr(rs, "cost_bounds", lambda costs, percentiles=None: BOUNDS)
    t = table()
    t.stated = np.array([[1, 0], [1, 1], [1, 1], [1, 0], [1, 1], [1, 1]], dtype=float)
    alpha = 0.5

    def traj(i, models, answer, cost):
        text = "".join(f"<think>x</think><search>{m}: q</search><information>r</information>" for m in models)
        return SimpleNamespace(item={"query": f"q{i}", "ground_truth": ["7"], "source": ROWS[i][0]},
                               text=text + f"<think>y</think><answer>{answer}</answer>", answer=answer, cost=cost,
                               routes=[SimpleNamespace(model=m) for m in models])

    # small first everywhere; escalates on row 0 (not stated) and row 1 (stated), not on row 3 (not stated)
    trajs = [traj(0, ["small", "big"], "7", 0.0401), traj(1, ["small", "big"], "7", 0.0401),
             traj(2, ["small"], "7", 0.0001), traj(3, ["small"], "5", 0.0001), traj(4, ["big"], "7", 0.0009),
             traj(5, ["small"], "5", 0.0001)]
    board = scoreboard(t, t, alpha, trajs=trajs, seed=0, n_boot=200)
    cascade = cascade_rows(t, alpha, BOUNDS)
    assert board["routes"]["cascade"]["mean_reward"] == pytest.approx(cascade.reward.mean())
    assert board["routes"]["cascade"]["strong_share_by_task"] == pytest.approx({"math": 1 / 4, "mcq": 1 / 4})
    assert board["routes"]["cascade"]["route_share"] == pytest.approx({"big": 2 / 8, "small": 6 / 8})
    assert all("route_share" in r for r in board["routes"].values())  # the run's route-share plot reads every row
    assert board["cascade_minus_best_fixed"]["value"] == pytest.approx(
        cascade.reward.mean() - board["routes"][board["best_fixed"]]["mean_reward"])
    assert board["policy_minus_cascade"]["value"] == pytest.approx(
        board["routes"]["policy"]["mean_reward"] - cascade.reward.mean())
    esc = board["policy_escalation"]
    assert esc["not_stated"] == {"n": 2, "escalated": 1, "share": 0.5, "strong_right": 1, "miscopied": 0}
    assert esc["stated"] == {"n": 3, "escalated": 1, "share": pytest.approx(1 / 3), "strong_right": 1, "miscopied": 0}
    assert board["policy_signal"]["escalated"]["n"] == 1 and board["policy_signal"]["kept"]["n"] == 2  # rows 1 | 2, 5
    # row 0: big was right (the logs) and the policy escalated, but answered 5: big's reply not copied back
    trajs[0] = traj(0, ["small", "big"], "5", 0.0401)
    assert escalation(trajs, t)["not_stated"] == {"n": 2, "escalated": 1, "share": 0.5, "strong_right": 1,
                                                  "miscopied": 1}
    # row 2 escalating where big is wrong in the logs: not counted as strong_right
    trajs[2] = traj(2, ["small", "big"], "7", 0.0401)
    assert escalation(trajs, t)["stated"] == {"n": 3, "escalated": 2, "share": pytest.approx(2 / 3),
                                              "strong_right": 1, "miscopied": 0}
    assert escalation(trajs, table())["not_stated"]["n"] == 0  # no stated column: every reply states one


def test_escalation_signal_compares_the_stated_replies_escalated_on_with_those_kept():
    """Among small-first trajectories whose small reply states an answer: small's accuracy on those kept minus
    on those escalated, and the escalated ones' logged gain minus that of all such replies, by hand."""
    t = table()
    t.stated = np.array([[1, 0], [1, 1], [1, 1], [1, 0], [1, 1], [1, 1]], dtype=float)
    alpha = 0.5
    gains = [by_hand(r[1][0], r[2][0] + r[2][1], alpha) - by_hand(r[1][1], r[2][1], alpha) for r in ROWS]

    def traj(models):
        return SimpleNamespace(routes=[SimpleNamespace(model=m) for m in models])

    # stated and small first: rows 1, 2, 5 (row 4 asks big first; rows 0, 3 state no answer)
    trajs = [traj(["small", "big"]), traj(["small"]), traj(["small"]), traj(["small", "big"]), traj(["big"]),
             traj(["small", "big"])]
    sig = escalation_signal(trajs, t, alpha, BOUNDS, n_boot=300)
    assert (sig["escalated"]["n"], sig["kept"]["n"], sig["all"]["n"]) == (1, 2, 3)
    assert sig["escalated"]["cheap_right"] == 0.0 and sig["kept"]["cheap_right"] == 1.0  # row 5 vs rows 1, 2
    assert sig["escalated"]["strong_only_right"] == 0.0 and sig["escalated"]["gain"] == pytest.approx(gains[5])
    assert sig["cheap_right_kept_minus_escalated"]["value"] == pytest.approx(1.0)
    assert sig["gain_escalated_minus_all"]["value"] == pytest.approx(gains[5] - np.mean([gains[1], gains[2], gains[5]]))
    lo, hi = sig["cheap_right_kept_minus_escalated"]["lo"], sig["cheap_right_kept_minus_escalated"]["hi"]
    assert lo <= 1.0 <= hi + 1e-12
    # escalating on a kept row instead flips the sign: it escalated where small was right
    trajs[1], trajs[5] = traj(["small", "big"]), traj(["small"])
    assert escalation_signal(trajs, t, alpha, BOUNDS, n_boot=50)["cheap_right_kept_minus_escalated"]["value"] \
        == pytest.approx(0.5 - 1.0)
    # no escalation after a stated reply: no signal to measure
    none = escalation_signal([traj(["small"])] * 6, t, alpha, BOUNDS, n_boot=50)
    assert none["escalated"]["n"] == 0 and math.isnan(none["cheap_right_kept_minus_escalated"]["value"])


def test_alpha_sweep_scores_the_cascade():
    t = table()
    t.stated = np.array([[1, 0], [1, 1], [1, 1], [1, 0], [1, 1], [1, 1]], dtype=float)
    sweep = alpha_sweep(t, [0.0, 0.5], percentiles=(0.0, 100.0))
    bounds = tuple(sweep["cost_bounds"])
    for r in sweep["rows"]:
        want = cascade_rows(t, r["alpha"], bounds)
        assert r["cascade_reward"] == pytest.approx(want.reward.mean())
        assert r["cascade_reward_by_task"]["math"] == pytest.approx(want.reward[:3].mean())


def test_the_sampled_policy_is_each_questions_mean_over_its_k_routes(monkeypatch):
    """``scoreboard(sampled=...)``: k trajectories a question, item-major; each question's reward is the mean
    of its k, paired with the fixed routes on that question; call shares count every sampled route."""
    import rlrouter.eval.route_scores as rs

    monkeypatch.setattr(rs, "cost_bounds", lambda costs, percentiles=None: BOUNDS)
    alpha = 0.5

    def traj(i, model, answer, cost):
        text = (f"<think>x</think><search>{model}: q</search><information>r</information>"
                f"<think>y</think><answer>{answer}</answer>")
        return SimpleNamespace(item={"query": f"q{i}", "ground_truth": ["7"], "source": ROWS[i][0]}, text=text,
                               answer=answer, cost=cost, routes=[SimpleNamespace(model=model)])

    cost = {"big": (0.04, 0.04, 0.04, 0.0009, 0.0009, 0.0009), "small": (0.0001,) * 6}
    right = {"big": [r[1][0] for r in ROWS], "small": [r[1][1] for r in ROWS]}
    # question i: one route to big, one to small (k = 2)
    sampled = [traj(i, m, "7" if right[m][i] else "5", cost[m][i]) for i in range(6) for m in ("big", "small")]
    board = scoreboard(table(), table(), alpha, seed=0, n_boot=200, sampled=sampled)
    s = board["policy_sampled"]
    per_q = [(by_hand(right["big"][i], cost["big"][i], alpha) + by_hand(right["small"][i], cost["small"][i], alpha)) / 2
             for i in range(6)]
    assert s["samples"] == 2 and s["n"] == 6
    assert s["mean_reward"] == pytest.approx(np.mean(per_q))
    assert s["route_share_by_task"]["math"] == pytest.approx({"big": 0.5, "small": 0.5})
    best = board["routes"][board["best_fixed"]]["mean_reward"]
    assert s["minus_best_fixed"]["value"] == pytest.approx(np.mean(per_q) - best)
    assert s["minus_per_task_rule"]["value"] == pytest.approx(np.mean(per_q) - board["routes"]["per_task_rule"]["mean_reward"])
    with pytest.raises(ValueError, match="not k a question"):
        scoreboard(table(), table(), alpha, n_boot=10, sampled=sampled[:-1])


def test_a_runs_routing_summary_carries_the_boards_intervals_shares_and_episodes(monkeypatch):
    """``rlrouter.trainer.report.routing_summary``: what many_models.json keeps of a trained Router-R1 run, read
    off a real board (greedy and sampled), with the episodes from the run's RL steps; a pilot's report (no board)
    is refused by name."""
    import rlrouter.eval.route_scores as rs
    from rlrouter.trainer.report import routing_summary

    monkeypatch.setattr(rs, "cost_bounds", lambda costs, percentiles=None: BOUNDS)
    right = {"big": [r[1][0] for r in ROWS], "small": [r[1][1] for r in ROWS]}
    cost = {"big": (0.04, 0.04, 0.04, 0.0009, 0.0009, 0.0009), "small": (0.0001,) * 6}

    def traj(i, model):
        answer = "7" if right[model][i] else "5"
        return SimpleNamespace(item={"query": f"q{i}", "ground_truth": ["7"], "source": ROWS[i][0]},
                               text=f"<search>{model}</search><information>r</information><answer>{answer}</answer>",
                               answer=answer, cost=cost[model][i], routes=[SimpleNamespace(model=model)])

    greedy = [traj(i, "small" if ROWS[i][0] == "math" else "big") for i in range(6)]
    sampled = [traj(i, m) for i in range(6) for m in ("big", "small")]
    board = scoreboard(table(), table(), 0.5, trajs=greedy, seed=0, n_boot=200, sampled=sampled)
    steps = [{"step": 0, "eval/mean_reward": 0.5}] + [{"step": s, "reward/total": 0.4} for s in (1, 2, 3)]
    report = {"routing": board, "steps": steps,
              "config": {"train": {"prompts_per_step": 16, "n_samples": 8}, "learner": {"algo": "grpo"}}}
    s = routing_summary(report)
    assert s["episodes"] == 3 * 16 * 8 and s["rl_steps"] == 3 and s["algo"] == "grpo"
    d = board["policy_minus_best_fixed"]
    assert s["policy_minus_best_fixed"] == {"mean": d["value"], "lo": d["lo"], "hi": d["hi"]}
    assert s["policy_minus_per_task"]["mean"] == pytest.approx(board["policy_minus_per_task_rule"]["value"])
    assert s["route_share_by_task"]["math"] == pytest.approx({"big": 0.0, "small": 1.0})
    assert s["sampled"]["samples"] == 2
    assert s["sampled"]["policy_minus_best_fixed"]["mean"] == pytest.approx(board["policy_sampled"]["minus_best_fixed"]["value"])
    assert s["questions"] == 6 and s["best_fixed"] == board["best_fixed"]
    with pytest.raises(ValueError, match="pilot"):
        routing_summary({"routing": {}, "steps": steps})
