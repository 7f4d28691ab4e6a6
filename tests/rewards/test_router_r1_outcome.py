"""Router-R1 outcome reward: SQuAD exact match / F1 on the last <answer>."""

from __future__ import annotations

import pytest

from rlrouter.rewards.router_r1 import (
    RewardConfigError,
    RouterR1OutcomeReward,
    extract_answer,
    normalize_answer,
    token_f1,
)


def traj(answer: str) -> str:
    return f"<think>t</think><answer>{answer}</answer>"


def test_normalize_answer_is_squad():
    assert normalize_answer("  The Eiffel-Tower, Paris!! ") == "eiffeltower paris"
    assert normalize_answer("An apple a day") == "apple day"
    assert normalize_answer("THE") == ""


def test_exact_match_against_any_gold():
    em = RouterR1OutcomeReward()
    out = em(["q"] * 4, [traj("the Eiffel Tower."), traj("Tower"), traj("1889"), traj("paris")],
             ground_truth=[["Eiffel Tower"], ["Eiffel Tower"], ["1887", "1889"], "Paris"])
    assert out == [1.0, 0.0, 1.0, 1.0]
    assert em.last_metrics == {"reward/outcome": 0.75}


def test_missing_answer_scores_zero_and_last_answer_counts():
    em = RouterR1OutcomeReward()
    texts = ["", "<think>no answer here</think>", "<answer>London</answer> <answer>Paris</answer>",
             "<think>a</think><answer>unclosed"]
    assert em(None, texts, ground_truth=["Paris"] * 4) == [0.0, 0.0, 1.0, 0.0]


def test_answers_inside_information_are_not_the_policys():
    text = ("<think>a</think><search>m: q</search><information><answer>Paris</answer></information>"
            "<think>b</think><answer>London</answer>")
    assert extract_answer(text) == "London"
    assert extract_answer("<think>a</think><information><answer>Paris</answer></information>") is None


def test_f1_gives_partial_credit():
    # pred tokens {eiffel, tower, paris}, gold {eiffel, tower}: P = 2/3, R = 1, F1 = 0.8
    assert token_f1("Eiffel Tower Paris", "the Eiffel Tower") == pytest.approx(0.8)
    f1 = RouterR1OutcomeReward(metric="f1")
    out = f1(None, [traj("Eiffel Tower Paris"), traj("tower"), traj("nothing"), "no tags"],
             ground_truth=[["the Eiffel Tower"], ["big tower", "tower of pisa"], ["x"], ["x"]])
    # "tower" vs "big tower": P = 1, R = 1/2 -> 2/3; vs "tower of pisa" (tower, of, pisa): 1/2 -> best 2/3
    assert out == pytest.approx([0.8, 2 / 3, 0.0, 0.0])


def test_unlabeled_sample_is_not_applicable_and_verl_layout_is_read():
    em = RouterR1OutcomeReward()
    assert em(None, [traj("a"), traj("b")], ground_truth=[None, {"target": ["b"]}]) == [None, 1.0]


def test_missing_column_and_bad_metric_are_named():
    with pytest.raises(KeyError, match="'ground_truth' is missing"):
        RouterR1OutcomeReward()(None, [traj("a")], answers=["a"])
    with pytest.raises(ValueError, match="column 'ground_truth' has 2 rows, the batch has 1"):
        RouterR1OutcomeReward()(None, [traj("a")], ground_truth=["a", "b"])
    with pytest.raises(RewardConfigError, match="field 'metric'"):
        RouterR1OutcomeReward(metric="bleu")
    with pytest.raises(TypeError, match=r"ground_truth\[0\]"):
        RouterR1OutcomeReward()(None, [traj("a")], ground_truth=[3])


def test_an_answer_by_reference_is_graded_by_the_named_calls_logged_outcome():
    """A question graded by reference (a program the policy cannot copy back): the answer names the candidate
    whose reply it returns, and scores that call's logged outcome; a name it did not call scores 0."""
    from rlrouter.protocol import REPLY_GOLD, referenced_outcome
    from rlrouter.rewards.router_r1 import outcome_score

    calls = [("mistral-7b", False), ("gpt-3.5", True)]
    assert referenced_outcome("gpt-3.5", calls) == 1.0
    assert referenced_outcome(" GPT-3.5. ", calls) == 1.0  # case and a final period do not count
    assert referenced_outcome("mistral-7b", calls) == 0.0  # called, logged wrong
    assert referenced_outcome("gpt-4", calls) == 0.0  # never called: no reply to return
    assert referenced_outcome("def f(): pass", calls) == 0.0
    assert referenced_outcome("gpt-3.5", [("gpt-3.5", True), ("gpt-3.5", False)]) == 0.0  # the last call's reply
    assert referenced_outcome("gpt-3.5", [("gpt-3.5", None)]) == 0.0  # a live call with no logged outcome
    # outcome_score: by reference only where the ground truth says so; the text golds as before
    assert outcome_score("gpt-3.5", [REPLY_GOLD], calls=calls) == 1.0
    assert outcome_score("gpt-3.5", ["gpt-3.5 is right"], calls=calls) == 0.0
    assert outcome_score(None, [REPLY_GOLD], calls=calls) == 0.0
    em = RouterR1OutcomeReward()
    out = em(["q"] * 3, [traj("gpt-3.5"), traj("gpt-4"), traj("B")], ground_truth=[[REPLY_GOLD], [REPLY_GOLD], ["B"]],
             call_outcomes=[calls, calls, []])
    assert out == [1.0, 0.0, 1.0]
