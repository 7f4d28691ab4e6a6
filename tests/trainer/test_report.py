"""The Router-R1 run plots read at a glance: reward/total never hidden by its parts, whole-number
step ticks, no overprinted labels in accuracy_vs_cost.png."""

import matplotlib
import pytest

from rlrouter.rewards.spec import RewardSpec

matplotlib.use("Agg")

from rlrouter.trainer.report import label_groups, plot_run, reward_figure  # noqa: E402

# what a 135M policy logs when it never emits a valid format: total == format at every step
METRICS = [{"step": s, "reward/total": -1.0, "reward/format": -1.0, "reward/outcome": 0.0,
            "rollout/format_valid": 0.0, "rollout/em": 0.0} for s in (1, 2, 3)]


def test_reward_total_has_its_own_panel_and_steps_are_whole_numbers():
    import matplotlib.pyplot as plt

    fig = reward_figure(METRICS)
    total = [a for a in fig.axes if a.get_title() == "reward/total"]
    assert len(total) == 1 and [ln.get_label() for ln in total[0].get_lines()] == ["reward/total"]
    parts = [a for a in fig.axes if a.get_title() == "reward parts"][0]
    assert "reward/total" not in [ln.get_label() for ln in parts.get_lines()]
    fig.canvas.draw()
    for ax in fig.axes:
        ticks = [t for t in ax.get_xticks() if ax.get_xlim()[0] <= t <= ax.get_xlim()[1]]
        assert ticks and all(float(t).is_integer() for t in ticks), ticks
    plt.close(fig)


def test_coinciding_points_share_one_label(tmp_path):
    pts = {"always_cheapest": (0.0001, 0.25), "random": (0.0001, 0.25), "policy_trained": (0.00011, 0.2505),
           "always_strongest": (0.02, 0.5)}
    groups = label_groups(pts)
    assert sorted(sorted(g) for _, g in groups) == [["always_cheapest", "policy_trained", "random"],
                                                     ["always_strongest"]]
    results = {n: {"cost_per_query": x, "accuracy": y, "route_share": {"a": 1.0}} for n, (x, y) in pts.items()}
    paths = plot_run(METRICS, results, tmp_path)
    assert [p.rsplit("/", 1)[1] for p in paths] == ["reward_curve.png", "route_shares.png", "accuracy_vs_cost.png"]


def test_results_table_has_reward_and_strong_share_columns_for_every_row():
    from rlrouter.trainer.report import results_table

    row = {"format_valid": 1.0, "accuracy": 0.5, "mean_reward": 0.41, "cost_per_query": 0.0002,
           "strong_share_by_task": {"gsm8k": 0.0, "mmlu": 1.0}}
    report = {"results": {"policy_trained": {**row, "format_valid": 0.9}, "always_cheapest": row, "oracle": row},
              "held_out_curve": [{"step": 0, "eval/format_valid": 0.5, "eval/accuracy": 0.25, "eval/mean_reward": 0.1,
                                  "eval/cost_per_query": 0.001, "eval/strong_share/gsm8k": 0.5,
                                  "eval/strong_share/mmlu": 0.25}],
              "routing": {"alpha": 0.36, "best_fixed": "always_cheapest", "per_task": {"gsm8k": "m", "mmlu": "g"},
                          "policy_minus_best_fixed": {"value": -0.05, "lo": -0.1, "hi": 0.01},
                          "policy_loss": {"gap": 0.05, "route": 0.01, "format": 0.03, "copy": 0.01},
                          "routes": {"policy": {"n": 32}},
                          "policy_escalation": {"not_stated": {"n": 4, "escalated": 3, "share": 0.75},
                                                "stated": {"n": 20, "escalated": 2, "share": 0.1}}}}
    table = results_table(report).splitlines()
    assert table[0] == ("| route | format valid | accuracy | mean reward | cost / query | strong share gsm8k "
                        "| strong share mmlu |")
    rows = [line for line in table[2:] if line.startswith("| ")]
    assert [r.split(" | ")[0] for r in rows] == ["| policy after the cold start (RL step 0)", "| policy, trained",
                                                 "| always cheapest", "| oracle (cheapest correct)"]
    assert rows[0].endswith("| 0.100 | 0.00100 | 0.50 | 0.25 |")
    assert all(r.count("|") == 8 for r in rows)
    assert "Policy minus best fixed route: -0.050 [-0.100, +0.010]" in table[-3]
    assert "route +0.010, format +0.030, copying the reply +0.010" in table[-3]
    assert "strongest too on 3 of 4 questions whose cheap reply states no final answer and on 2 of 20" in table[-1]
    # with the signal of which stated replies it escalated on
    report["routing"]["policy_signal"] = {"escalated": {"n": 2, "cheap_right": 0.5}, "kept": {"n": 18, "cheap_right": 0.75},
                                          "cheap_right_kept_minus_escalated": {"value": 0.25, "lo": -0.2, "hi": 0.6}}
    table = results_table(report).splitlines()
    assert "strongest too on 3 of 4 questions" in table[-3]
    assert table[-1].startswith("Of those stated replies, the cheapest candidate was right on 0.500 of the 2 it "
                                "escalated on and 0.750 of the 18 it kept: +0.250 [-0.200, +0.600]")
    report["routing"]["policy_signal"]["escalated"]["n"] = 0  # nothing escalated: no sentence
    assert results_table(report).splitlines()[-1].startswith("After a first call")
    # the sampled policy (eval.samples): its reward, intervals and call shares after the greedy policy's
    report["routing"]["policy_sampled"] = {
        "samples": 4, "mean_reward": 0.612, "format_valid": 1.0,
        "minus_best_fixed": {"value": 0.031, "lo": 0.004, "hi": 0.058},
        "minus_per_task_rule": {"value": -0.012, "lo": -0.04, "hi": 0.015},
        "route_share_by_task": {"gsm8k": {"m": 0.75, "g": 0.25}}, "route_share": {"m": 0.75, "g": 0.25}}
    text = results_table(report)
    assert ("Sampled as in training (4 routes a question): mean reward 0.612, format valid 1.000; minus best fixed "
            "route +0.031 [+0.004, +0.058], minus per-task rule -0.012 [-0.040, +0.015].") in text
    assert "| gsm8k | 0.75 | 0.25 |" in text


def test_held_out_records_keep_each_trajectory_and_why_its_format_failed():
    from types import SimpleNamespace

    from rlrouter.trainer.report import held_out_records

    def traj(i, text, answer, model):
        item = {"id": f"q{i}", "query": f"question {i}", "ground_truth": ["7"], "source": "gsm8k"}
        return SimpleNamespace(item=item, text=text, answer=answer, cost=0.001 if model else 0.0,
                               routes=[SimpleNamespace(model=model)] if model else [])

    good = ("<think>x</think>\n<search>small: q</search>\n<information>7</information>\n"
            "<think>y</think>\n<answer>7</answer>")
    cut = "<think>x</think>\n<search>small: a question that ran past the turn's end"  # no </search>
    rows = held_out_records([traj(0, good, "7", "small"), traj(1, cut, None, None)], ["big", "small"], RewardSpec(alpha=0.3))
    assert [r["id"] for r in rows] == ["q0", "q1"] and [r["task"] for r in rows] == ["gsm8k", "gsm8k"]
    assert rows[0]["exact_match"] == 1.0 and rows[0]["format_failure"] is None and rows[0]["routes"] == ["small"]
    assert rows[0]["reward"] > 0.5 and rows[0]["text"] == good
    assert rows[1]["exact_match"] == 0.0 and rows[1]["reward"] == -1.0 and rows[1]["format_failure"]
    # on a reference's cost scale, as held_out_summary scores them with one
    ref = {"strong": "big", "cost_bounds": [0.0, 2 * 0.001 ** 0.5]}  # bounds on the square root of USD
    scaled = held_out_records([traj(0, good, "7", "small")], ["big", "small"], RewardSpec(alpha=0.3), reference=ref)
    assert scaled[0]["reward"] == pytest.approx(0.7 + 0.3 * 0.5)  # correct, cost half-way through the window


def test_held_out_items_split_evenly_over_tasks_when_asked(capsys):
    from rlrouter.trainer.job import held_out_items

    items = [{"id": i, "source": s} for i, s in enumerate(["a"] * 10 + ["b"] * 2 + ["c"] * 10)]
    assert [it["id"] for it in held_out_items(items, 6)] == [0, 1, 2, 3, 4, 5]  # the file's first
    got = held_out_items(items, 9, per_task=True)
    assert [it["source"] for it in got] == ["a"] * 3 + ["b"] * 2 + ["c"] * 3  # 3 a task; b has 2
    assert "hold fewer" in capsys.readouterr().out


def test_call_share_table_lists_each_task_and_the_candidates_called():
    from rlrouter.trainer.report import call_share_table

    lines = call_share_table({"arc": {"yi": 1.0, "gpt-4": 0.0, "x": 0.0}, "mbpp": {"yi": 0.25, "gpt-4": 0.75, "x": 0.0}},
                             {"yi": 0.6, "gpt-4": 0.4, "x": 0.0})
    assert "| task | yi | gpt-4 |" in lines and "| mbpp | 0.25 | 0.75 |" in lines and "| all | 0.60 | 0.40 |" in lines
    assert call_share_table({}, {}) == []


def test_dev_questions_are_kept_out_of_training_per_task_and_a_split_that_leaves_none_fails():
    from rlrouter.trainer.job import split_dev

    items = [{"id": i, "source": s} for i, s in enumerate(["a"] * 6 + ["b"] * 4)]
    train, dev = split_dev(items, 4, per_task=True)
    assert sorted(it["id"] for it in dev) == [4, 5, 8, 9]  # the last 2 of each task
    assert [it["id"] for it in train] == [0, 1, 2, 3, 6, 7] and not {id(x) for x in train} & {id(x) for x in dev}
    assert split_dev(items, 0) == (items, [])
    assert [it["id"] for it in split_dev(items, 3)[1]] == [7, 8, 9]
    with pytest.raises(ValueError, match="eval.dev_questions"):
        split_dev(items, 10)


def test_unread_by_drops_the_held_out_questions_a_router_r1_run_read(tmp_path, capsys):
    from rlrouter.eval.ledger import record_reading
    from rlrouter.trainer.job import HeldOutConfig, item_id, unread_items

    ledger = tmp_path / "ledger.jsonl"
    items = [{"id": f"rb:{i}", "query": f"q{i}?"} for i in range(5)] + [{"query": "no id?"}]
    record_reading(ledger, question_ids=[item_id(it) for it in items[:2]] + ["no id?"], router_types=["router_r1"])
    record_reading(ledger, question_ids=[item_id(items[2])], router_types=["knn"])
    kept = unread_items(items, str(ledger), ["router_r1"])
    assert [item_id(it) for it in kept] == ["rb:2", "rb:3", "rb:4"]
    assert "3 of 6 questions were read before" in capsys.readouterr().out
    assert unread_items(items, None, []) is items
    with pytest.raises(ValueError, match="eval.unread_by: needs eval.ledger"):
        HeldOutConfig(unread_by=["router_r1"])
    with pytest.raises(ValueError, match="eval.dev_questions"):
        HeldOutConfig(dev_questions=-1)


def test_a_pilot_reads_no_held_out_question_only_with_a_dev_curve():
    from rlrouter.trainer.job import HeldOutConfig, held_out_items

    assert HeldOutConfig(num_questions=0, dev_questions=30).num_questions == 0
    with pytest.raises(ValueError, match="eval.num_questions: 0 .* needs eval.dev_questions"):
        HeldOutConfig(num_questions=0)
    with pytest.raises(ValueError, match="eval.samples"):
        HeldOutConfig(samples=-2)
    items = [{"id": i, "query": f"q{i}?"} for i in range(4)]
    assert held_out_items(items, 0) == [] and held_out_items(items, 0, per_task=True) == []


def test_the_ledger_counts_the_sampled_read_with_or_without_a_dev_curve():
    """A lockbox run (dev curve) read its held-out questions once greedy and once sampled: 2, not 1."""
    from rlrouter.trainer.job import held_out_evaluations

    curve = [{"step": 0, "eval/mean_reward": 0.5}, {"step": 1}, {"step": 2, "eval/mean_reward": 0.6}]
    assert held_out_evaluations(True, curve, untrained=True, sampled=False) == 1
    assert held_out_evaluations(True, curve, untrained=True, sampled=True) == 2
    assert held_out_evaluations(False, curve, untrained=True, sampled=False) == 4  # 2 curve points, trained, untrained
    assert held_out_evaluations(False, curve, untrained=False, sampled=True) == 4


def test_same_questions_as_reads_exactly_the_questions_another_run_read(tmp_path, capsys):
    """eval.same_questions_as: PPO beside GRPO on one lockbox: the held-out set is the questions the named run's
    ledgered reading read, in the file's order; an unknown run is refused by name, as is the setting without
    a ledger or beside unread_by."""
    from rlrouter.eval.ledger import record_reading
    from rlrouter.trainer.job import HeldOutConfig, item_id, same_items

    ledger = tmp_path / "ledger.jsonl"
    items = [{"id": f"rb:{i}", "query": f"q{i}?"} for i in range(6)]
    record_reading(ledger, question_ids=[item_id(items[i]) for i in (4, 1, 3)], router_types=["router_r1"], run="grpo")
    record_reading(ledger, question_ids=[item_id(items[0])], router_types=["router_r1"], run="other")
    assert [item_id(it) for it in same_items(items, str(ledger), "grpo")] == ["rb:1", "rb:3", "rb:4"]
    assert "the 3 of 6 questions run 'grpo' read" in capsys.readouterr().out
    assert same_items(items, str(ledger), None) is items
    with pytest.raises(ValueError, match="no reading by run 'ppo'"):
        same_items(items, str(ledger), "ppo")
    with pytest.raises(ValueError, match="same_questions_as: needs eval.ledger"):
        HeldOutConfig(same_questions_as="grpo")
    with pytest.raises(ValueError, match="same_questions_as"):
        HeldOutConfig(same_questions_as="grpo", ledger=str(ledger), unread_by=["router_r1"])
