"""The routing benchmark's held-out split (benchmarks/bench_routing.py): which questions an evaluation reads."""

from benchmarks.bench_routing import _balanced, unseen
from rlrouter.data.logged import normalize_prompt


def _rows():
    return [{"source": t, "query": f"{t} question {i}?"} for i in range(10) for t in ("mmlu", "gsm8k")]


def test_balanced_takes_each_tasks_first_questions_in_task_order():
    got = _balanced(_rows(), 4)
    assert [r["query"] for r in got] == ["gsm8k question 0?", "gsm8k question 1?", "mmlu question 0?",
                                         "mmlu question 1?"]


def test_unseen_leaves_out_what_was_trained_on_or_read_before_and_refills_from_the_rest():
    rows = _rows()
    earlier = _balanced(rows, 4)  # an earlier evaluation's questions
    trained = normalize_prompt("  gsm8k   question 3? ")  # the same question, other whitespace
    seen = {normalize_prompt(r["query"]) for r in earlier} | {trained}
    got = unseen(rows, seen, 6)
    assert [r["query"] for r in got] == ["gsm8k question 2?", "gsm8k question 4?", "gsm8k question 5?",
                                         "mmlu question 2?", "mmlu question 3?", "mmlu question 4?"]
    assert not {r["query"] for r in got} & {r["query"] for r in earlier}


def test_unseen_is_short_when_a_task_runs_out():
    seen = {normalize_prompt(f"gsm8k question {i}?") for i in range(8)}
    got = unseen(_rows(), seen, 6)
    assert [r["query"] for r in got] == ["gsm8k question 8?", "gsm8k question 9?", "mmlu question 0?",
                                         "mmlu question 1?", "mmlu question 2?"]


def test_held_out_rows_follow_the_test_order_and_name_a_missing_question(tmp_path):
    import json

    import pytest

    from benchmarks.bench_routing import held_out_rows

    recs = [{"query": q, "reward": r} for q, r in (("b?", 0.5), ("a?", 1.0))]
    (tmp_path / "held_out.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))
    assert [r["reward"] for r in held_out_rows(tmp_path, [{"query": "a?"}, {"query": "b?"}])] == [1.0, 0.5]
    with pytest.raises(SystemExit, match=r"no trajectory for 1 test questions, e.g. 'c\?'"):
        held_out_rows(tmp_path, [{"query": "a?"}, {"query": "c?"}])


def test_rescored_table_shows_each_tasks_escalation_and_the_other_run():
    from benchmarks.bench_routing import rescored_table

    ci = {"value": 0.01, "lo": -0.002, "hi": 0.02}
    esc = {"stated": {"n": 10, "escalated": 3}, "not_stated": {"n": 2, "escalated": 2}}
    board = {"run": "outputs/new_heldout", "tasks": {"gsm8k": 6, "mmlu": 6}, "policy_mean_reward": 0.66,
             "best_fixed": "always_cheapest", "routes": {"always_cheapest": {"mean_reward": 0.65},
                                                        "cascade": {"mean_reward": 0.67}},
             "policy_minus_best_fixed": ci, "cascade_minus_best_fixed": ci, "policy_minus_cascade": ci,
             "policy_escalation": esc,
             "policy_by_task": {"gsm8k": {"mean_reward": 0.6, "escalation": esc},
                                "mmlu": {"mean_reward": 0.7, "escalation": {"stated": {"n": 6, "escalated": 1},
                                                                            "not_stated": {"n": 0, "escalated": 0}}}},
             "versus": {"run": "outputs/old_heldout", "mean_reward": 0.65, "policy_minus_versus": ci}}
    md = rescored_table([board])
    assert "| new_heldout | gsm8k | 0.600 | 2/2 / 3/10 | |" in md
    assert "| new_heldout | mmlu | 0.700 | 0/0 / 1/6 | |" in md
    assert "+0.010 [-0.002, +0.020] against old_heldout (0.650)" in md
    group = {"n": 3, "cheap_right": 0.5, "strong_only_right": 0.25, "gain": -0.02}
    nan = {"value": float("nan"), "lo": float("nan"), "hi": float("nan")}
    signal = {"escalated": group, "kept": {**group, "n": 7, "cheap_right": 0.75}, "all": {**group, "gain": -0.06},
              "cheap_right_kept_minus_escalated": ci, "gain_escalated_minus_all": ci}
    board["policy_signal"] = signal
    board["policy_by_task"]["gsm8k"]["signal"] = {**signal, "escalated": {"n": 0, "cheap_right": None,
                                                                          "strong_only_right": None, "gain": None},
                                                  "cheap_right_kept_minus_escalated": nan,
                                                  "gain_escalated_minus_all": nan}
    md = rescored_table([board])
    assert ("| new_heldout | all | 3 / 7 | 0.500 / 0.750 | 0.250 / 0.250 | +0.010 [-0.002, +0.020] | -0.020 / -0.060 | "
            "+0.010 [-0.002, +0.020] |") in md
    assert "| new_heldout | gsm8k | 0 / 7 | – / 0.750 | – / 0.250 | – | – / -0.060 | – |" in md  # nothing escalated
    board["policy_minus_fixed"] = {"always_cheapest": ci, "always_strongest": {"value": -0.008, "lo": -0.02, "hi": 0.005}}
    board["routes"]["always_strongest"] = {"mean_reward": 0.685}
    assert ("| new_heldout | always_cheapest (0.650): +0.010 [-0.002, +0.020]; always_strongest (0.685): "
            "-0.008 [-0.020, +0.005] |") in rescored_table([board])
    del board["policy_by_task"], board["versus"], board["policy_signal"], board["policy_minus_fixed"]
    assert "| task |" not in rescored_table([board])  # older boards: the one table as before


def test_checkpoint_is_the_last_or_the_step_named(tmp_path):
    import pytest

    from benchmarks.bench_routing import checkpoint

    with pytest.raises(SystemExit, match="no checkpoints"):
        checkpoint(tmp_path)
    for s in (4, 8, 12):
        (tmp_path / "checkpoints" / f"step_{s:06d}").mkdir(parents=True)
    assert checkpoint(tmp_path).name == "step_000012"
    assert checkpoint(tmp_path, 8).name == "step_000008"
    with pytest.raises(SystemExit, match=r"no checkpoint of step 6 \(it has \[4, 8, 12\]\)"):
        checkpoint(tmp_path, 6)


def test_the_choice_is_made_over_penalties_and_checkpoints_on_training_questions(monkeypatch, tmp_path):
    """Each (step, penalty) scored once on the training split; the best mean reward wins, ties to the
    smaller penalty; without steps the choice is the penalty alone, as before."""
    import json

    import benchmarks.bench_routing as br

    reward = {(36, 0.0): 0.70, (36, 0.6): 0.71, (48, 0.0): 0.72, (48, 0.6): 0.72, (None, 0.0): 0.5, (None, 0.6): 0.6}
    calls = []

    def score(run, cfg, data, name, env, step=None):
        calls.append((step, env["greedy_frequency_penalty"], str(data)))
        out = tmp_path / name
        out.mkdir()
        (out / "report.json").write_text(json.dumps(
            {"results": {"policy_trained": {"mean_reward": reward[(step, env["greedy_frequency_penalty"])],
                                            "format_valid": 1.0, "accuracy": 0.7}}}))
        return out

    monkeypatch.setattr(br, "score_policy", score)
    monkeypatch.setattr(br, "training_split", lambda run, cfg, q: "TRAIN")
    got = br.choose_penalty(tmp_path, {}, [0.0, 0.6], 256, [36, 48])
    assert calls == [(36, 0.0, "TRAIN"), (36, 0.6, "TRAIN"), (48, 0.0, "TRAIN"), (48, 0.6, "TRAIN")]
    assert (got["chosen"], got["chosen_step"]) == (0.0, 48)
    assert [r["step"] for r in got["scored"]] == [36, 36, 48, 48]
    got = br.choose_penalty(tmp_path / "run2", {}, [0.0, 0.6], 256)
    assert got["chosen"] == 0.6 and "chosen_step" not in got


def test_escalation_curve_reads_the_stratum_metrics_of_each_step(tmp_path):
    import json

    from benchmarks.bench_routing import escalation_curve, plot_escalation

    rows = [{"step": 0, "eval/mean_reward": 0.6},
            {"step": 1, "rollout/no_answer/escalated": 0.5, "rollout/states_answer/escalated": 0.25},
            {"step": 2, "rollout/states_answer/escalated": 0.0}]
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    got = escalation_curve(tmp_path / "metrics.jsonl")
    assert got == [{"step": 1, "rollout/no_answer/escalated": 0.5, "rollout/states_answer/escalated": 0.25},
                   {"step": 2, "rollout/states_answer/escalated": 0.0}]
    assert escalation_curve(tmp_path / "missing.jsonl") == []
    plot_escalation([{"run": "outputs/a", "escalation_curve": got}, {"run": "outputs/b"}], tmp_path / "e.png")
    assert (tmp_path / "e.png").stat().st_size > 0


def test_heldout_counts_take_all_a_short_source_has():
    from benchmarks.bench_routing import heldout_counts

    # GSM8K has 1,319 logged questions: asked for 2,000 a task it gives all but the one the train split takes
    assert heldout_counts({"gsm8k": 1319, "mmlu": 11745}, 2000) == {"gsm8k": 1318, "mmlu": 2000}
    assert heldout_counts({"gsm8k": 1319, "mmlu": 11745}, 500) == {"gsm8k": 500, "mmlu": 500}


def test_one_penalty_is_scored_on_the_held_out_questions_without_a_selection_run(monkeypatch, tmp_path):
    """Nothing to choose among one penalty: no training-question run, the held-out run named by it."""
    import benchmarks.bench_routing as br

    (tmp_path / "r").mkdir()
    (tmp_path / "r" / "config.yaml").write_text("data: {out_dir: x}\n")
    calls = []
    monkeypatch.setattr(br, "choose_penalty", lambda *a, **k: calls.append("select"))
    monkeypatch.setattr(br, "heldout_split", lambda run, cfg, q, unread: tmp_path / "data")
    monkeypatch.setattr("rlrouter.data.build.load_router_r1_split", lambda path: [{}] * 5)
    monkeypatch.setattr(br, "score_policy", lambda run, cfg, data, name, env, step=None:
                        calls.append((name, env, step)) or tmp_path / name)
    monkeypatch.setattr(br, "record_evaluation", lambda scored, split: calls.append(("ledger", scored.name)))
    out, sel = br.evaluate_run(str(tmp_path / "r"), 10, [0.0], unread=["seen.parquet"])
    # scored, and the reading of those held-out questions recorded in the ledger
    assert calls == [("r_heldout5_unread_fp0", {"greedy_frequency_penalty": 0.0}, None),
                     ("ledger", "r_heldout5_unread_fp0")]
    assert sel["chosen"] == 0.0 and sel["scored"] == [] and sel["on"] == "given, not chosen"
    calls.clear()
    br.evaluate_run(str(tmp_path / "r"), 10, [0.0, 0.6])  # two: a choice, made on the training questions
    assert calls[0] == "select"


def test_rescore_reads_a_held_out_run_folder_end_to_end(tmp_path, shared_data):
    """Real files: a data split of logged questions, the replay pool's config, a held_out.jsonl whose policy
    copies Mixtral's reply but for the stated replies it escalates on; rescore's intervals and signal against
    the fixed routes computed here from the same logs."""
    import json
    import subprocess
    import sys

    import numpy as np
    import pytest
    import yaml

    from benchmarks.bench_routing import ROOT, rescore
    from rlrouter.data.build import load_router_r1_split
    from rlrouter.eval.route_scores import cost_bounds, escalation_gain, fixed_route_rewards, route_table
    from rlrouter.pool.pool import CandidatePool

    data = tmp_path / "data"
    subprocess.run([sys.executable, str(ROOT / "jobs" / "prepare_data.py"), "data.train_size=24",
                    "data.test_size=24", f"data.out_dir={data}"], check=True, cwd=ROOT, capture_output=True)
    pool_cfg = yaml.safe_load((ROOT / "conf" / "pool" / "routellm_replay.yaml").read_text())
    run = tmp_path / "run_heldout"
    run.mkdir()
    (run / "config.yaml").write_text(yaml.safe_dump({"data": {"out_dir": str(data)}, "pool": pool_cfg,
                                                     "reward": {"alpha": 0.36}, "eval": {"seed": 0}}))
    test = load_router_r1_split(data / "test.parquet")
    pool = CandidatePool.from_config(pool_cfg)
    table, reference = route_table(pool, test), route_table(pool, load_router_r1_split(data / "train.parquet"))
    bounds = cost_bounds(reference.cost)
    fixed = fixed_route_rewards(table, 0.36, bounds)
    cheap, strong = table.candidates.index(table.cheap), table.strong_index
    stated = ~table.cheap_states_none()
    escalate = [bool(stated[i]) and i % 3 == 0 for i in range(len(test))]  # a third of the stated, by position
    gain = escalation_gain(table, 0.36, bounds)
    rows = [{"query": it["query"], "reward": float(fixed[i, cheap] + (gain[i] if escalate[i] else 0.0)),
             "routes": [table.cheap] + ([table.strong] if escalate[i] else []), "answer": None}
            for i, it in enumerate(test)]
    (run / "held_out.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    board = rescore(str(run))
    policy = np.asarray([r["reward"] for r in rows])
    assert board["policy_mean_reward"] == pytest.approx(policy.mean())
    assert board["policy_minus_fixed"]["always_cheapest"]["value"] == pytest.approx(policy.mean() - fixed[:, cheap].mean())
    assert board["policy_minus_fixed"]["always_strongest"]["value"] == pytest.approx(policy.mean() - fixed[:, strong].mean())
    sig = board["policy_signal"]
    esc = np.asarray(escalate)
    assert sig["escalated"]["n"] == esc.sum() > 0 and sig["all"]["n"] == stated.sum()
    assert sig["escalated"]["cheap_right"] == pytest.approx(table.correct[esc, cheap].mean())
    assert sig["gain_escalated_minus_all"]["value"] == pytest.approx(gain[esc].mean() - gain[stated].mean())
    assert sum(t["signal"]["all"]["n"] for t in board["policy_by_task"].values()) == stated.sum()
