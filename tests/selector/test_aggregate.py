"""Answer aggregation for multi-round and arena mode."""

import pytest

from rlrouter.selector.aggregate import aggregate, answer_key


def test_answer_keys():
    assert answer_key("so she makes 9 * 2 = 18 dollars.\n#### 18") == "18"
    assert answer_key("The answer is \\boxed{1,024}") == "1024"
    assert answer_key("B") == "B"
    assert answer_key("Answer: c.") == "C"
    assert answer_key("It costs $1,200 in total.") == "1200"


def test_vote_and_confidence():
    responses = {"big": "#### 18", "mid": "#### 17", "small": "#### 17"}
    scores = {"big": 0.9, "mid": 0.5, "small": 0.45}
    # 17 gathers 0.95 of score against 0.9 for 18: the vote picks 17 and returns mid's (better-scored) answer
    v = aggregate(responses, scores, "vote")
    assert v.model == "mid" and v.votes == pytest.approx({"18": 0.9, "17": 0.95})
    assert aggregate(responses, scores, "confidence").model == "big"
    with pytest.raises(ValueError, match="no candidate"):
        aggregate({}, {}, "vote")


def test_states_answer_tells_a_final_answer_from_a_guess():
    from rlrouter.selector.aggregate import answer_key, states_answer

    assert states_answer("so 9 * 2 = 18.\n#### 18") and states_answer("\\boxed{3}") and states_answer("B")
    assert states_answer("Answer: c.")
    assert states_answer("he makes $180 * 7 = $1260.\n\n#### $1260") and answer_key("#### $1,260") == "1260"
    # no final-answer form: answer_key falls back to the last number, which the cascade does not trust
    assert not states_answer("2 + 1/2 = 2.5 bolts, so about 3") and answer_key("2 + 1/2 = 2.5 bolts, so about 3") == "3"
    assert not states_answer("")
