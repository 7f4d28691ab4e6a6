"""``rlrouter compare-to-single``: the served router against the best single model, from logged traffic.

The traffic is simulated on RouterBench's full tables (ARC and Winogrande, three of its LLMs), where every
candidate's outcome is known: a frozen served router (propensity 1) answers every request and exploration
calls another candidate on half of them, as ``serving.traffic.explore_share`` does, and only those two
cells are kept. The estimates must cover what the full tables say, and the command reads an export
folder and prints the comparison.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from rlrouter.eval.compare_single import compare_export, compare_to_single, render
from rlrouter.routers.traffic_router import TrafficTable, cell_rewards, read_logged_table

NAMES = ["gpt-4-1106-preview", "mistralai/mixtral-8x7b-chat", "zero-one-ai/Yi-34B-Chat"]
TASKS = ("arc_challenge", "winograde")
LAM = 0.1


def _full(shared_data, split: str) -> tuple[TrafficTable, list[str]]:
    tables = [read_logged_table(shared_data / "routerbench" / f"{t}_{split}.csv", NAMES) for t in TASKS]
    full, tasks = TrafficTable.concat(tables), [t for t, tab in zip(TASKS, tables) for _ in range(len(tab))]
    whole = np.flatnonzero(np.isfinite(full.scores).all(axis=1))  # the few rows RouterBench left blank: out
    return full.rows(whole), [tasks[i] for i in whole]


def _served(tasks: list[str]) -> np.ndarray:
    # a served router that sends ARC to Mixtral and Winogrande to GPT-4
    return np.array([1 if t == "arc_challenge" else 0 for t in tasks])


def _log(full: TrafficTable, tasks: list[str], seed: int) -> TrafficTable:
    rng = np.random.default_rng(seed)
    n, m = full.scores.shape
    a = _served(tasks)
    e = np.where(rng.random(n) < 0.5, (a + rng.integers(1, m, n)) % m, -1)
    keep = np.zeros((n, m), dtype=bool)
    keep[np.arange(n), a] = True
    keep[np.flatnonzero(e >= 0), e[e >= 0]] = True
    return TrafficTable(full.names, full.prompts, full.embeddings, np.where(keep, full.scores, np.nan),
                        np.where(keep, full.costs, np.nan), a, np.ones(n), e, np.where(e >= 0, 0.5 / (m - 1), np.nan))


def test_the_estimates_cover_the_full_tables_truth(shared_data):
    (tr_full, tr_tasks), (te_full, te_tasks) = _full(shared_data, "train"), _full(shared_data, "test")
    truth = cell_rewards(te_full, LAM)  # (N, M): every candidate's reward
    served_true = truth[np.arange(len(te_full)), _served(te_tasks)].mean()
    assert NAMES[int(cell_rewards(tr_full, LAM).mean(axis=0).argmax())] == "zero-one-ai/Yi-34B-Chat"
    # 95% intervals over 20 simulated logs: each truth covered about 19 times, the error centred on 0
    covered = {"best": 0, "per_task": 0, **{m: 0 for m in NAMES}}
    errors = []
    for seed in range(20):
        r = compare_to_single(_log(tr_full, tr_tasks, 100 + seed), _log(te_full, te_tasks, seed), LAM,
                              train_tasks=tr_tasks, test_tasks=te_tasks)
        assert r["served"]["mean"] == pytest.approx(served_true)  # on-policy: every logged route is scored here
        assert r["explored_rows"] > 0.4 * r["rows"] and r["left_out"] == 0
        best = NAMES.index(r["best_single"])
        d, true_d = r["served_minus_best_single"], served_true - truth[:, best].mean()
        covered["best"] += d["lo"] <= true_d <= d["hi"]
        errors.append(d["mean"] - true_d)
        for j, m in enumerate(NAMES):
            covered[m] += r["always"][m]["lo"] <= truth[:, j].mean() <= r["always"][m]["hi"]
        rule = [NAMES.index(r["per_task_rule"][t]) for t in te_tasks]  # chosen on train, judged on test
        p = r["served_minus_per_task"]
        covered["per_task"] += p["lo"] <= served_true - truth[np.arange(len(te_full)), rule].mean() <= p["hi"]
    assert min(covered.values()) >= 16, covered
    assert abs(np.mean(errors)) < 0.02 and r["best_single"] == "zero-one-ai/Yi-34B-Chat"


def test_the_command_reads_an_export_folder(shared_data, tmp_path, capsys):
    from rlrouter.cli import main

    for split, seed in (("train", 0), ("test", 1)):
        full, tasks = _full(shared_data, split)
        t = _log(full, tasks, seed)
        cols = {"prompt": t.prompts, "eval_name": tasks,
                "logged_model": [t.names[i] for i in t.logged], "logged_propensity": t.propensity,
                "explored_model": [t.names[i] if i >= 0 else None for i in t.explored],
                "explored_propensity": t.explored_propensity}
        for j, m in enumerate(t.names):
            cols[m], cols[f"{m}|total_cost"] = t.scores[:, j], t.costs[:, j]
        pd.DataFrame(cols).to_parquet(tmp_path / f"{split}.parquet")
    assert main(["compare-to-single", str(tmp_path), "--cost-weight", str(LAM), "--task-column", "eval_name",
                 "--json", str(tmp_path / "out.json")]) == 0
    out = capsys.readouterr().out
    assert "served - best single" in out and "served - per-task rule" in out
    assert compare_export(tmp_path, LAM)["served_minus_per_task"] is None  # no task column: no rule
    assert "no task label" in render(compare_export(tmp_path, LAM))
    assert main(["compare-to-single", str(tmp_path / "nowhere")]) == 2
    assert "train.parquet" in capsys.readouterr().err
