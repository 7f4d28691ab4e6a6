"""The curriculum: which training questions each RL step draws (a pure function of step and seed), the
strata and their shares, the first calls it writes, its per-stratum metrics, and its config's errors."""

from collections import Counter
from types import SimpleNamespace

import pytest

from rlrouter.trainer.curriculum import (Curriculum, CurriculumConfig, batch_indices, build_curriculum, draw_from,
                                         first_call_items, split_counts, write_first_calls)


def _items(tasks):
    return [{"id": i, "source": t} for i, t in enumerate(tasks)]


def test_the_natural_mix_is_the_data_cursor():
    c = build_curriculum(CurriculumConfig(), _items(["a"] * 20))
    assert [c.draw(s, 4, 5) for s in range(8)] == [batch_indices(20, 4, s, 5) for s in range(8)]
    assert c.metrics([0, 1], [SimpleNamespace(total=1.0)] * 4, [1] * 4, 2) == {}  # no strata, no metrics
    assert draw_from(0, 0, 3, 1) == [] and batch_indices(10, 4, 2, 3) == draw_from(10, 8, 4, 3)


def test_split_counts_rotate_the_remainder_so_every_stratum_gets_its_share():
    assert split_counts(4, 2, 0) == [2, 2]
    rows = [split_counts(4, 3, s) for s in range(6)]
    assert all(sum(r) == 4 and min(r) >= 1 for r in rows)
    assert [sum(r[k] for r in rows[:3]) for k in range(3)] == [4, 4, 4]  # over 3 steps, 12 = 4 each
    assert [split_counts(2, 3, s) for s in range(3)] == [[1, 1, 0], [1, 0, 1], [0, 1, 1]]


def test_balance_by_task_splits_every_step_evenly_and_walks_each_task_on_its_own_cursor():
    tasks = ["arc"] * 30 + ["wino"] * 25 + ["mbpp"] * 6  # MBPP a tenth of the questions
    items = _items(tasks)
    c = build_curriculum(CurriculumConfig(balance="task"), items)
    assert set(c.strata) == {"arc", "wino", "mbpp"} and c.describe().startswith("RL prompts split evenly")
    steps = [c.draw(s, 4, 7) for s in range(9)]
    assert steps == [c.draw(s, 4, 7) for s in range(9)]  # a pure function of step
    drawn = Counter(tasks[i] for b in steps for i in b)
    assert drawn == {"arc": 12, "wino": 12, "mbpp": 12}  # 36 prompts, a third each
    mbpp = [i for b in steps for i in b if tasks[i] == "mbpp"]
    assert sorted(mbpp[:6]) == list(range(55, 61)) and sorted(mbpp[6:12]) == list(range(55, 61))  # whole epochs
    assert c.draw(3, 4, 7) != c.draw(3, 4, 8)


def test_the_no_answer_share_draws_its_stratum_on_its_own_cursor_as_before():
    items = _items(["gsm8k"] * 20)
    focus = [3, 7, 11]
    c = build_curriculum(CurriculumConfig(no_answer_share=0.5), items, focus)
    rest = [i for i in range(20) if i not in focus]
    for s in range(6):  # the stratified draw the two-model study ran: each stratum its own batch_indices
        assert c.draw(s, 4, 5) == ([focus[i] for i in batch_indices(3, 2, s, 5)]
                                   + [rest[i] for i in batch_indices(17, 2, s, 5)])
    firsts = [i for s in range(6) for i in c.draw(s, 4, 5)[:2]]
    assert sorted(firsts[:3]) == focus
    quarter = build_curriculum(CurriculumConfig(no_answer_share=0.3), items, focus)
    assert sum(i in focus for i in quarter.draw(0, 4, 5)) == 1  # round(0.3 x 4)
    tiny = build_curriculum(CurriculumConfig(no_answer_share=0.1), items, focus)
    assert tiny.draw(2, 4, 5) == batch_indices(20, 4, 2, 5)  # a share that rounds to no prompt: the natural mix


def test_sources_keep_rl_to_their_questions_and_the_stratum_among_them():
    items = [{"id": i, "source": "gsm8k" if i % 3 == 0 else "mmlu"} for i in range(30)]
    c = build_curriculum(CurriculumConfig(sources=["gsm8k"], no_answer_share=0.5), items, [3, 9, 10])
    assert c.rl_items() == list(range(0, 30, 3))
    for s in range(4):
        b = c.draw(s, 4, 0)
        assert all(items[i]["source"] == "gsm8k" for i in b) and sum(i in (3, 9) for i in b) == 2 and 10 not in b
    with pytest.raises(ValueError, match=r"curriculum.sources: no training question has source \['gsm'\]"):
        build_curriculum(CurriculumConfig(sources=["gsm"]), items)
    with pytest.raises(ValueError, match=r"none of the questions of curriculum.sources=\['mmlu'\]"):
        build_curriculum(CurriculumConfig(sources=["mmlu"], no_answer_share=0.5), items, [3, 9])


def test_stratum_metrics_split_escalation_and_its_group_advantage_by_stratum():
    c = Curriculum({"no_answer": [0], "states_answer": [1]}, "share", 0.5)
    sc = [SimpleNamespace(total=x) for x in (0.8, 0.3, 1.0, 0.2)]
    # two groups of 2: the first from the no-answer stratum (one escalates and wins by 0.5), the second not
    m = c.metrics([0, 1], sc, [2, 1, 1, 2], 2)
    assert m["rollout/no_answer/escalated"] == 0.5 and m["rollout/states_answer/escalated"] == 0.5
    assert m["rollout/no_answer/reward"] == pytest.approx(0.55)
    assert m["rollout/no_answer/escalate_minus_answer"] == pytest.approx(0.5)
    assert m["rollout/states_answer/escalate_minus_answer"] == pytest.approx(-0.8)
    m = c.metrics([0], sc[:2], [1, 1], 2)  # one move only: no gap; a stratum not drawn: nothing
    assert "rollout/no_answer/escalate_minus_answer" not in m and "rollout/states_answer/reward" not in m
    tasks = build_curriculum(CurriculumConfig(balance="task"), _items(["arc", "mbpp"]))
    assert set(tasks.metrics([0, 1], sc, [1, 1, 1, 1], 2)) == {"rollout/arc/escalated", "rollout/arc/reward",
                                                               "rollout/mbpp/escalated", "rollout/mbpp/reward"}


def test_first_call_items_write_the_stratum_and_a_share_of_the_others():
    stratum = [2, 7]
    assert first_call_items(CurriculumConfig(), 10, stratum) == []
    assert first_call_items(CurriculumConfig(no_answer_share=0.5, no_answer_first_call=True), 10, stratum) == stratum
    half = first_call_items(CurriculumConfig(first_call_share=0.5), 10, stratum)
    assert len(half) == 4 and not set(half) & set(stratum)  # 4 of the 8 others, none of the stratum
    assert half == first_call_items(CurriculumConfig(first_call_share=0.5), 10, stratum)  # drawn once, seeded
    both = first_call_items(CurriculumConfig(no_answer_share=0.5, no_answer_first_call=True, first_call_share=1.0),
                            10, stratum)
    assert both == list(range(10))
    built = build_curriculum(CurriculumConfig(first_call_share=0.5), _items(["a"] * 10), stratum)
    assert built.first_call == half


def test_the_first_call_hook_writes_the_chosen_questions_and_with_held_out_every_dev_and_test_one():
    train = [{"id": i, "query": f"question {i} here", "source": "a"} for i in range(4)]
    dev, test = [{"id": 9, "query": "a dev one"}], [{"id": 10, "query": "a test one"}]
    none = build_curriculum(CurriculumConfig(), train)
    assert write_first_calls(none, False, train, dev, test, "mixtral", 8) == (train, dev, test)  # off: untouched
    some = Curriculum({"all": [0, 1, 2, 3]}, first_call=[1, 3])
    t2, d2, e2 = write_first_calls(some, False, train, dev, test, "mixtral", 8)
    assert [("first_turn" in it) for it in t2] == [False, True, False, True] and d2 == dev and e2 == test
    assert "mixtral" in t2[1]["first_turn"] and "first_turn" not in train[1]  # new items; the input is kept
    _, d3, e3 = write_first_calls(none, True, train, dev, test, "mixtral", 8)
    assert all("first_turn" in it for it in d3 + e3)
    with pytest.raises(ValueError, match="eval.first_call_written"):
        write_first_calls(none, True, train, dev, test, None)  # live candidates: no logged reply to write


def test_the_study_knobs_live_in_their_preset_not_in_the_main_config():
    import yaml

    from tests.helpers import ROOT

    main = yaml.safe_load((ROOT / "conf" / "train_router_r1.yaml").read_text())
    study = yaml.safe_load((ROOT / "conf" / "experiment" / "two_model_escalation.yaml").read_text())
    knobs = {"no_answer_share", "no_answer_first_call", "first_call_share", "demo_second_call"}
    assert not knobs & set(main["curriculum"]) and "first_call_written" not in main["eval"]
    assert set(study["curriculum"]) == knobs and study["eval"] == {"first_call_written": False}
    assert CurriculumConfig(**study["curriculum"]) == CurriculumConfig()  # the preset alone changes nothing


def test_bad_curriculum_choices_name_their_field():
    for bad in (-0.1, 1.5, True, "half"):
        for name in ("no_answer_share", "first_call_share", "demo_second_call"):
            with pytest.raises(ValueError, match=f"curriculum.{name}: a share"):
                CurriculumConfig(**{name: bad})
    with pytest.raises(ValueError, match="no_answer_first_call=true needs curriculum.no_answer_share > 0"):
        CurriculumConfig(no_answer_first_call=True)
    with pytest.raises(ValueError, match="curriculum.no_answer_first_call: true or false"):
        CurriculumConfig(no_answer_share=0.5, no_answer_first_call="yes")
    with pytest.raises(ValueError, match="curriculum.balance: one of"):
        CurriculumConfig(balance="tasks")
    with pytest.raises(ValueError, match="set one of them"):
        CurriculumConfig(balance="task", no_answer_share=0.5)
    for bad in ("gsm8k", [""], [1]):
        with pytest.raises(ValueError, match="curriculum.sources"):
            CurriculumConfig(sources=bad)
    with pytest.raises(ValueError, match=r"no_answer_share=0.5: none of the 10 training questions"):
        build_curriculum(CurriculumConfig(no_answer_share=0.5), _items(["a"] * 10), [])
    with pytest.raises(ValueError, match="the pool has no logged replies"):
        build_curriculum(CurriculumConfig(first_call_share=0.5), _items(["a"] * 10), [], has_replies=False)
