"""Router-R1 format reward: -1 or 0, checked rule by rule on hand-written trajectories."""

from __future__ import annotations

import pytest

from rlrouter.rewards.router_r1 import (
    FormatError,
    Route,
    RouterR1FormatReward,
    check_format,
    parse_blocks,
    read_route,
)

CANDS = ["gpt-4", "mixtral-8x7b", "llama3:8b"]

GOOD_NO_ROUTE = "<think>I know this.</think><answer>Paris</answer>"
GOOD_TWO_ROUTES = """
<think>I need the year and the place.</think>
<search> gpt-4: When was the Eiffel Tower built? </search>
<information>It was built from 1887 to 1889.</information>
<think>Now the city.</think>
<search>mixtral-8x7b:Which city is it in?</search>
<information>Paris, France.</information>
<think>Both known.</think>
<answer> Paris, 1889 </answer>
"""


def fmt(texts, candidates=CANDS, **cols):
    reward = RouterR1FormatReward(candidates)
    return reward(["q"] * len(texts), texts, **cols), reward.last_failures


@pytest.mark.parametrize("text", [GOOD_NO_ROUTE, GOOD_TWO_ROUTES,
                                  "<think>x</think><search>llama3:8b: what is 2+2?</search>"
                                  "<information>4</information><think>ok</think><answer>4</answer>"])
def test_valid_trajectories_score_zero(text):
    rewards, failures = fmt([text])
    assert rewards == [0.0], failures


@pytest.mark.parametrize("text, reason", [
    ("", "empty output"),
    ("   \n ", "empty output"),
    ("<answer>Paris</answer>", "does not start with <think>"),
    ("<search>claude-2-70b</search>", "unknown candidate 'claude-2-70b'"),  # a compact route no call answered
    ("<search>gpt-4</search>", "does not start with <think>"),  # a known one that is not a reply's answer
    ("<think>a</think><answer>Paris</answer> thanks!", "does not end with </answer>"),
    ("<think>a</think></think><answer>x</answer>", "unbalanced"),
    ("<think>a</think><search>gpt-4: q</answer>", "unbalanced"),
    ("<think>a</think><information>never closed <answer>x</answer>", "unbalanced"),
    ("<think>a <search>gpt-4: q</search></think><answer>x</answer>", "nested"),
    ("<think>a</think><answer>x <think>b</think></answer>", "nested"),
    ("<think>   </think><answer>x</answer>", "empty <think>"),
    ("<think>a</think><answer>  </answer>", "empty <answer>"),
    ("<think>a</think><answer>x</answer><think>b</think><answer>y</answer>", "2 <answer> blocks"),
    ("<think>a</think><search>gpt-4: q</search><think>b</think><answer>x</answer>",
     "not followed by one <information>"),
    ("<think>a</think><search>gpt-4: q</search><information>i</information><information>j</information>"
     "<think>b</think><answer>x</answer>", "without a <search>"),
    ("<think>a</think><information>i</information><answer>x</answer>", "without a <search>"),
    ("<think>a</think><search>claude-3: q</search><information>i</information><answer>x</answer>",
     "unknown candidate 'claude-3'"),
    ("<think>a</think><search>gpt-4 what is x</search><information>i</information><answer>x</answer>",
     "not 'model: query'"),
    ("<think>a</think><search>gpt-4:   </search><information>i</information><answer>x</answer>",
     "not 'model: query'"),
    ("<think>a</think><search>gpt-4o: q</search><information>i</information><answer>x</answer>",
     "unknown candidate 'gpt-4o'"),
])
def test_each_broken_rule_scores_minus_one_with_its_reason(text, reason):
    rewards, failures = fmt([text])
    assert rewards == [-1.0]
    assert reason in failures[0]


def test_batch_mixes_and_keeps_order():
    rewards, failures = fmt([GOOD_NO_ROUTE, "", GOOD_TWO_ROUTES])
    assert rewards == [0.0, -1.0, 0.0]
    assert failures[0] is None and failures[1] == "empty output" and failures[2] is None


def test_information_is_opaque_environment_text():
    # a candidate's raw answer may hold tags of its own; the policy is not to blame for them
    text = ("<think>ask</think><search>gpt-4: q</search>"
            "<information><think>hmm</think> it is <answer>42</answer></information>"
            "<think>done</think><answer>42</answer>")
    assert fmt([text])[0] == [0.0]


def test_candidates_column_overrides_per_sample():
    text = "<think>a</think><search>qwen-7b: q</search><information>i</information><think>b</think><answer>x</answer>"
    reward = RouterR1FormatReward(CANDS)
    assert reward(["q", "q"], [text, text], candidates=[["qwen-7b"], ["gpt-4"]]) == [0.0, -1.0]
    # Router-R1 records carry candidate_models as [{name, cost, latency}]
    records = [[{"name": "qwen-7b", "cost": 0.1, "latency": 1.0}], [{"name": "gpt-4", "cost": 1, "latency": 2}]]
    assert reward(["q", "q"], [text, text], candidate_models=records) == [0.0, -1.0]
    # a None row falls back to the fixed list
    assert reward(["q"], [text], candidates=[None]) == [-1.0]


def test_without_any_candidate_list_any_model_name_is_accepted():
    text = "<think>a</think><search>whatever-model: q</search><information>i</information><answer>x</answer>"
    assert RouterR1FormatReward()(["q"], [text]) == [0.0]


def test_conversational_completions_are_read():
    assert fmt([[{"role": "assistant", "content": GOOD_NO_ROUTE}]])[0] == [0.0]


def test_parse_route_prefers_the_longest_known_name():
    assert read_route(" llama3:8b : sum? ", ["llama3", "llama3:8b"]) == Route("llama3:8b", "sum?")
    assert read_route("gpt-4o: q", ["gpt-4"]) is None
    assert read_route("a: b: c") == Route("a", "b: c")
    assert read_route("no colon") is None


def test_parse_blocks_returns_contents_in_order():
    blocks = parse_blocks(GOOD_TWO_ROUTES.strip())
    assert [b.tag for b in blocks] == ["think", "search", "information", "think", "search", "information",
                                       "think", "answer"]
    assert blocks[-1].content == " Paris, 1889 "


def test_check_format_raises_format_error():
    with pytest.raises(FormatError, match="empty output"):
        check_format("", CANDS)


def test_prompts_and_completions_must_align():
    with pytest.raises(ValueError, match="2 prompts but 1 completions"):
        RouterR1FormatReward(CANDS)(["a", "b"], [GOOD_NO_ROUTE])


def test_graded_penalty_orders_partial_progress_and_keeps_valid_at_zero():
    """graded=True: a valid trajectory still scores 0; an invalid one loses less the more of the
    protocol it follows, and never reaches 0 (the no-cold-start run's signal)."""
    reward = RouterR1FormatReward(CANDS, graded=True)
    texts = [GOOD_TWO_ROUTES,
             "<think>I know this.</think><answer>Paris</answer> trailing",   # only the ending is wrong
             "<think>I will ask gpt-4</think><search>gpt-4: where?</search>",  # no information, no answer
             "<think>I will ask",                                             # unclosed
             "Paris"]                                                         # no tags at all
    r = reward(["q"] * len(texts), texts)
    assert r[0] == 0.0
    assert all(-1.0 <= x < 0.0 for x in r[1:])
    assert r[1] > r[2] > r[3] > r[4], r
    # the binary reward cannot tell them apart
    assert RouterR1FormatReward(CANDS)(["q"] * 4, texts[1:]) == [-1.0] * 4


def test_graded_penalty_credits_a_route_call_over_a_ramble():
    """What an untrained 135M policy writes (the sanity run with no cold start): a route call inside an unclosed
    <think>, or text with no action that the env cuts off. The call is closer to the protocol and must
    score higher, or GRPO's groups have no spread."""
    info = "\n\n<information>Error: no action found.</information>\n\n"
    call = "<think>\n<search>gpt-4: capital of France?</search>\n\n<information>Paris</information>\n\n"
    ramble = "<think>\nThe capital is a city. The capital is a city." + info
    reward = RouterR1FormatReward(CANDS, graded=True)
    r_call, r_ramble = reward(["q", "q"], [call, ramble])
    assert -1.0 < r_ramble < r_call < 0.0


def test_graded_penalty_pays_a_real_call_over_a_copied_information_block():
    """The shortcut sanity run 3 learned: copy the prompt's example, writing <information> itself with
    no call. It must score below the same trajectory with a real call."""
    tail = "<information>391</information>\n<think>The reply says 391.</think>\n<answer>391</answer>"
    copied = "<think>\n" + tail
    called = "<think>\n<search>gpt-4: What is 17 * 23?</search>\n" + tail
    reward = RouterR1FormatReward(CANDS, graded=True)
    r_copied, r_called = reward(["q", "q"], [copied, called])
    assert r_copied < r_called < 0.0


def test_format_progress_is_one_exactly_for_valid_trajectories():
    from rlrouter.protocol import FORMAT_CHECKS, format_progress

    assert format_progress(GOOD_NO_ROUTE, CANDS) == 1.0
    # every lenient check passes, but a block is nested: still invalid, still below 1
    nested = "<think>a<answer>b</answer></think><answer>Paris</answer>"
    with pytest.raises(FormatError):
        check_format(nested, CANDS)
    assert format_progress(nested, CANDS) <= len(FORMAT_CHECKS) / (len(FORMAT_CHECKS) + 1)
    with pytest.raises(Exception, match="graded"):
        RouterR1FormatReward(CANDS, graded="yes")


def test_a_search_the_environment_did_not_run_breaks_the_format():
    """With the env's ``tool_calls`` column, a ``<search>`` and ``<information>`` the policy wrote itself
    (in the answer-only turn, where nothing is called) do not pass as a call and its reply; without the
    column the text alone is judged, as before."""
    reward = RouterR1FormatReward(CANDS, graded=True)
    texts = [GOOD_TWO_ROUTES] * 3
    calls = [["gpt-4", "mixtral-8x7b"], ["gpt-4"], None]
    rewards = reward(["q"] * 3, texts, tool_calls=calls)
    assert rewards[0] == 0.0 and rewards[2] == 0.0
    assert -1.0 < rewards[1] < 0.0  # graded: it breaks one rule of many
    assert reward.last_failures[1] == "2 <search> blocks, 1 of them called: a <search> the environment did not run"
    assert fmt([GOOD_TWO_ROUTES])[0] == [0.0]
    with pytest.raises(FormatError, match="did not run"):
        check_format(GOOD_TWO_ROUTES, CANDS, calls=0)
