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
