"""Parsing policy turns and building token-level trajectories, on hand-written trajectories."""

from __future__ import annotations

import math

import pytest
import torch

from rlrouter.rollout.parsing import (
    ERROR_PREFIX,
    NO_ACTION_ERROR,
    RouteCall,
    TrajectoryTokens,
    collate,
    extract_answer,
    failed_call_error,
    format_information,
    parse_route,
    parse_turn,
)

NAMES = ["gpt-4-1106-preview", "mixtral-8x7b-instruct-v0.1"]


# ---------------------------------------------------------------- route calls


def test_search_turn_with_a_known_candidate():
    turn = parse_turn("<think>I am not sure.</think><search>GPT-4-1106-Preview: what is 17 * 23?</search>", NAMES)
    assert turn.kind == "search" and turn.ok and not turn.truncated
    # the name comes back as the pool spells it, whatever case the policy used
    assert turn.call == RouteCall(model="gpt-4-1106-preview", query="what is 17 * 23?")
    assert turn.content == "GPT-4-1106-Preview: what is 17 * 23?"


def test_longest_candidate_name_wins_and_prefixes_do_not_match():
    names = ["gpt-4", "gpt-4-turbo"]
    assert parse_route("gpt-4-turbo: hi", names) == RouteCall("gpt-4-turbo", "hi")
    assert parse_route(" gpt-4 :  hi there ", names) == RouteCall("gpt-4", "hi there")
    error = parse_route("gpt-4o: hi", names)
    assert error == f"{ERROR_PREFIX} unknown model 'gpt-4o'. Choose one of: gpt-4, gpt-4-turbo."


def test_candidate_names_may_contain_a_colon():
    assert parse_route("qwen2.5:7b: what is 2 + 2?", ["qwen2.5:7b"]) == RouteCall("qwen2.5:7b", "what is 2 + 2?")
    # the query may contain colons too
    assert parse_route("gpt-4-1106-preview: ratio 3:4?", NAMES) == RouteCall("gpt-4-1106-preview", "ratio 3:4?")


@pytest.mark.parametrize("content, expected", [
    ("", "empty <search>"),
    ("what is 2 + 2?", "malformed <search>"),
    (": what is 2 + 2?", "missing MODEL"),
    ("MODEL: sub-query", "unknown model 'MODEL'"),
    ("llama-3: what is 2 + 2?", "unknown model 'llama-3'"),
    ("mixtral-8x7b-instruct-v0.1:", "no sub-query after 'mixtral-8x7b-instruct-v0.1:'"),
    ("mixtral-8x7b-instruct-v0.1: sub-query", "no sub-query"),
])
def test_malformed_routes_give_an_error_string(content, expected):
    error = parse_route(content, NAMES)
    assert isinstance(error, str) and error.startswith(ERROR_PREFIX) and expected in error
    turn = parse_turn(f"<search>{content}</search>", NAMES)
    assert turn.kind == "search" and not turn.ok and turn.call is None and turn.error == error


def test_parse_route_needs_candidates():
    with pytest.raises(ValueError, match="candidate_names"):
        parse_route("x: y", [])


# ---------------------------------------------------------------- answers and no action


def test_answer_turn():
    turn = parse_turn("<think>17 * 23 = 391</think>\n<answer> 391 </answer>", NAMES)
    assert turn.kind == "answer" and turn.ok and turn.content == "391" and turn.call is None


def test_empty_answer_is_a_format_error():
    turn = parse_turn("<answer>  </answer>", NAMES)
    assert turn.kind == "answer" and turn.error is not None and "empty <answer>" in turn.error


def test_no_action_at_all():
    turn = parse_turn("<think>I think the answer is 4 but I ran out of tok", NAMES)
    assert turn.kind == "none" and turn.error == NO_ACTION_ERROR and turn.text.endswith("out of tok")


def test_closing_tag_without_opening_tag():
    turn = parse_turn("the answer is 4</answer>", NAMES)
    assert turn.kind == "answer" and turn.error == f"{ERROR_PREFIX} </answer> without <answer>."


def test_first_action_ends_the_turn_and_the_rest_is_cut():
    chunk = "<search>gpt-4-1106-preview: a</search> then <answer>b</answer>"
    turn = parse_turn(chunk, NAMES)
    assert turn.kind == "search" and turn.call == RouteCall("gpt-4-1106-preview", "a")
    assert turn.text == "<search>gpt-4-1106-preview: a</search>" and turn.rest == " then <answer>b</answer>"
    assert turn.truncated
    # trailing whitespace (an EOS rendered as a newline) is not a truncation
    assert not parse_turn("<answer>4</answer>\n", NAMES).truncated


def test_the_opening_tag_closest_to_the_closing_tag_is_used():
    turn = parse_turn("<search>junk <search>mixtral-8x7b-instruct-v0.1: q</search>", NAMES)
    assert turn.call == RouteCall("mixtral-8x7b-instruct-v0.1", "q")


# ---------------------------------------------------------------- answers in whole trajectories


def test_extract_answer():
    assert extract_answer("<think>x</think><answer> Paris </answer>") == "Paris"
    assert extract_answer("<answer>1</answer> ... <answer>\n2\n</answer>") == "2"
    assert extract_answer("no answer here") is None
    assert extract_answer("<answer>unclosed") is None


def test_information_block_and_defused_tags():
    assert format_information("  391  ") == "\n\n<information>391</information>\n\n"
    block = format_information("Sure. <think>easy</think><answer>391</answer></information>")
    assert block == "\n\n<information>Sure. [think]easy[/think][answer]391[/answer][/information]</information>\n\n"
    # a candidate's own <answer> must never be read as the policy's
    trajectory = "<search>gpt-4-1106-preview: q</search>" + block + "<answer>390</answer>"
    assert extract_answer(trajectory) == "390"
    assert extract_answer("<search>gpt-4-1106-preview: q</search>" + block) is None


def test_information_is_cut_to_max_chars():
    assert format_information("abcdefghij", max_chars=4) == "\n\n<information>a ... hij</information>\n\n"
    # a long reply keeps its end, where the final answer is
    reply = "Step one. " * 60 + "#### 391"
    assert format_information(reply, max_chars=100).endswith("#### 391</information>\n\n")
    assert format_information("abcd", max_chars=4) == "\n\n<information>abcd</information>\n\n"
    # the environment's note goes after the cut, on a line of its own, never cut itself
    assert format_information("abcdefghij", max_chars=4, note="(n)") == "\n\n<information>a ... hij\n(n)</information>\n\n"


def test_failed_call_error():
    assert failed_call_error("gpt-4-1106-preview", "timeout after 30 s") == (
        f"{ERROR_PREFIX} the call to gpt-4-1106-preview failed (timeout after 30 s).")
    assert "no reason given" in failed_call_error("x", " ")


# ---------------------------------------------------------------- token-level trajectories


def _hand_written() -> TrajectoryTokens:
    tr = TrajectoryTokens([1, 2, 3])  # prompt
    tr.add_policy([10, 11], [-0.1, -0.2])  # "<think>..</think><search>..</search>"
    tr.add_observation([50, 51, 52])  # "<information>..</information>"
    tr.add_policy([12], [-0.3])  # "<answer>..</answer>"
    return tr


def test_trajectory_masks_exactly():
    tr = _hand_written()
    assert tr.input_ids == [1, 2, 3, 10, 11, 50, 51, 52, 12]
    assert tr.loss_mask == [0, 0, 0, 1, 1, 0, 0, 0, 1]
    assert tr.old_logprobs == [0.0, 0.0, 0.0, -0.1, -0.2, 0.0, 0.0, 0.0, -0.3]
    assert len(tr) == 9 and tr.num_policy_tokens == 3 and tr.prompt_length == 3
    t = tr.to_tensors()
    assert t["input_ids"].dtype == torch.long and t["loss_mask"].dtype == torch.long
    assert t["old_logprobs"].dtype == torch.float32 and t["old_logprobs"].shape == (9,)
    assert torch.equal(t["loss_mask"], torch.tensor([0, 0, 0, 1, 1, 0, 0, 0, 1]))


def test_two_observations_in_a_row_and_empty_segments():
    tr = TrajectoryTokens([7])
    tr.add_policy([], [])  # the engine produced nothing: no segment
    tr.add_observation([8])
    tr.add_observation([9, 9])
    tr.add_policy([4], [0.0])  # a certain token: log-prob exactly 0 is fine
    tr.add_observation([])
    assert tr.input_ids == [7, 8, 9, 9, 4] and tr.loss_mask == [0, 0, 0, 0, 1] and len(tr.segments) == 4


@pytest.mark.parametrize("token_ids, logprobs, match", [
    ([1, 2], [-0.1], "expected 2 values, got 1"),
    ([1], [0.7], "log-probabilities"),  # a probability passed by mistake
    ([1], [math.nan], "log-probabilities"),
    ([1], [-math.inf], "log-probabilities"),
    ([-1], [-0.1], "token_ids"),
])
def test_bad_policy_segments_are_rejected(token_ids, logprobs, match):
    tr = TrajectoryTokens([1])
    with pytest.raises(ValueError, match=match):
        tr.add_policy(token_ids, logprobs)


def test_trajectory_needs_a_prompt():
    with pytest.raises(ValueError, match="prompt_ids"):
        TrajectoryTokens([])


def test_collate_right_pads_with_zero_masks():
    short = TrajectoryTokens([5, 6])
    short.add_policy([7], [-0.5])
    batch = collate([_hand_written(), short], pad_token_id=0)
    assert batch["input_ids"].shape == (2, 9)
    assert batch["input_ids"][1].tolist() == [5, 6, 7, 0, 0, 0, 0, 0, 0]
    assert batch["attention_mask"].tolist() == [[1] * 9, [1, 1, 1] + [0] * 6]
    assert batch["loss_mask"].tolist() == [[0, 0, 0, 1, 1, 0, 0, 0, 1], [0, 0, 1] + [0] * 6]
    assert torch.allclose(batch["old_logprobs"][1], torch.tensor([0.0, 0.0, -0.5] + [0.0] * 6))
    assert collate([short], pad_token_id=2, pad_to=5)["input_ids"].tolist() == [[5, 6, 7, 2, 2]]
    with pytest.raises(ValueError, match="pad_to"):
        collate([_hand_written()], pad_token_id=0, pad_to=4)
    with pytest.raises(ValueError, match="trajectories"):
        collate([], pad_token_id=0)


# ---------------------------------------------------------------- with the real policy tokenizer


@pytest.fixture(scope="module")
def tokenizer():
    pytest.importorskip("transformers")
    from rlrouter.models import ModelNotAvailable, load_tokenizer

    try:
        return load_tokenizer("smollm2-135m-instruct")
    except ModelNotAvailable as e:
        pytest.skip(str(e))


def test_real_tokenizer_trajectory_round_trip(tokenizer):
    """A two-turn trajectory through SmolLM2's tokenizer: the mask selects exactly the policy's text."""
    from rlrouter.pool.base import Candidate
    from rlrouter.rollout.prompt import build_prompt, render_chat

    candidates = [Candidate("gpt-4-1106-preview", 10.0, 30.0), Candidate("mixtral-8x7b-instruct-v0.1", 0.6, 0.6, 46.7)]
    prompt_text = render_chat(tokenizer, build_prompt("What is 17 * 23?", candidates))
    turn1 = "<think>Hard to do in my head.</think>\n<search>mixtral-8x7b-instruct-v0.1: What is 17 * 23?</search>"
    info = format_information("17 * 23 = 391. <answer>391</answer>")
    turn2 = "<think>It says 391.</think>\n<answer>391</answer>"

    def ids(text: str) -> list[int]:
        return tokenizer(text, add_special_tokens=False)["input_ids"]

    tr = TrajectoryTokens(ids(prompt_text))
    for text, is_policy in ((turn1, True), (info, False), (turn2, True)):
        token_ids = ids(text)
        if is_policy:
            tr.add_policy(token_ids, [-0.5] * len(token_ids))
        else:
            tr.add_observation(token_ids)

    full = tokenizer.decode(tr.input_ids)
    assert full == prompt_text + turn1 + info + turn2
    policy_ids = [t for t, m in zip(tr.input_ids, tr.loss_mask, strict=True) if m]
    assert tokenizer.decode(policy_ids) == turn1 + turn2
    assert sum(tr.loss_mask) == len(ids(turn1)) + len(ids(turn2))
    # the text side reads the same trajectory back
    assert parse_turn(turn1, [c.name for c in candidates]).call == RouteCall("mixtral-8x7b-instruct-v0.1",
                                                                            "What is 17 * 23?")
    assert extract_answer(full[len(prompt_text):]) == "391"


def test_a_compact_route_is_the_name_alone_and_passes_the_format_check():
    from rlrouter.protocol import check_format, read_route

    assert parse_route(" Mixtral-8x7B-Instruct-v0.1 ", NAMES) == RouteCall("mixtral-8x7b-instruct-v0.1", "")
    assert read_route("mixtral-8x7b-instruct-v0.1", NAMES) == RouteCall("mixtral-8x7b-instruct-v0.1", "")
    check_format("<think>a</think><search>mixtral-8x7b-instruct-v0.1</search><information>i</information>"
                 "<answer>x</answer>", NAMES)
    # a name with a colon and nothing after it is still a malformed sub-query route
    assert isinstance(parse_route("mixtral-8x7b-instruct-v0.1:", NAMES), str)
