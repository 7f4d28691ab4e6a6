"""The trainer's data cursor (the batch is a pure function of the step) and its metrics log on resume."""

import json

from rlrouter.trainer.router_r1 import batch_indices, cut_metrics


def test_data_cursor_is_a_pure_function_of_step():
    a = [batch_indices(10, 4, s, seed=3) for s in range(6)]
    assert a == [batch_indices(10, 4, s, seed=3) for s in range(6)]
    flat = [i for b in a for i in b]
    assert sorted(flat[:10]) == list(range(10))  # epoch 0 is a permutation
    assert batch_indices(10, 4, 2, seed=3) != batch_indices(10, 4, 2, seed=4)


def test_a_resumed_run_drops_the_rows_of_the_steps_it_replays(tmp_path):
    path = tmp_path / "metrics.jsonl"
    rows = [{"step": 0, "eval/format_valid": 0.5}] + [{"step": s, "reward/total": s / 10} for s in range(1, 7)]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert cut_metrics(path, 4) == 2  # the checkpoint is step 4; steps 5 and 6 will be logged again
    assert [json.loads(x) for x in path.read_text().splitlines()] == rows[:5]
    assert cut_metrics(path, 4) == 0 and [json.loads(x) for x in path.read_text().splitlines()] == rows[:5]
    assert cut_metrics(tmp_path / "missing.jsonl", 3) == 0 and not (tmp_path / "missing.jsonl").exists()
