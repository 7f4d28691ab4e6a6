"""The Router-R1 prompt: candidates with prices and sizes, the tag rules, the chat rendering."""

from __future__ import annotations

import re

import pytest

from rlrouter.pool.base import Candidate
from rlrouter.rollout.parsing import parse_turn
from rlrouter.rollout.prompt import build_prompt, describe_candidate, render_chat

# the replayed RouteLLM pool's real prices (USD per 1M tokens)
GPT4 = Candidate("gpt-4-1106-preview", price_in=10.0, price_out=30.0)
MIXTRAL = Candidate("mixtral-8x7b-instruct-v0.1", price_in=0.6, price_out=0.6, params_b=46.7,
                    description="A sparse mixture of experts.")
TINY = Candidate("tiny", price_in=0.0015, price_out=0.002, params_b=0.135)
QUESTION = "Natalia sold clips to 48 of her friends in April, and then half as many in May. How many in all?"


def test_candidate_lines_show_size_and_prices():
    assert describe_candidate(GPT4) == "- gpt-4-1106-preview: size unknown, $10 / $30"
    assert describe_candidate(MIXTRAL) == ("- mixtral-8x7b-instruct-v0.1: 46.7B params, $0.6 / $0.6. "
                                           "A sparse mixture of experts.")
    # cheap prices keep their digits instead of rounding to $0.00
    assert describe_candidate(TINY) == "- tiny: 0.135B params, $0.0015 / $0.002"


def test_prompt_lists_every_candidate_and_the_tag_rules():
    prompt = build_prompt(QUESTION, [GPT4, MIXTRAL])
    for line in (describe_candidate(GPT4), describe_candidate(MIXTRAL)):
        assert line in prompt
    for tag in ("<think>", "</think>", "<search>MODEL: sub-query</search>", "<information>", "</information>",
                "<answer>", "</answer>"):
        assert tag in prompt, tag
    assert "USD per 1M tokens" in prompt and "At most 4 calls." in prompt
    assert prompt.endswith(f"Question: {QUESTION}")


def test_max_turns_is_stated_or_left_out():
    assert "At most 2 calls." in build_prompt(QUESTION, [GPT4], max_turns=2)
    assert "At most" not in build_prompt(QUESTION, [GPT4], max_turns=None)


def test_the_example_is_a_valid_trajectory_and_favours_no_candidate():
    from collections import Counter

    from rlrouter.rewards.router_r1 import RouterR1FormatReward

    candidates = [GPT4, MIXTRAL, TINY]
    names = [c.name for c in candidates]
    shown = Counter()
    for k in range(300):
        question = f"{QUESTION} (variant {k})"
        block = re.search(r"^Example:\nQuestion: [^\n]*\n(.*?)\n\nQuestion:", build_prompt(question, candidates),
                          re.MULTILINE | re.DOTALL).group(1)
        turn = parse_turn(block, names)
        assert turn.ok and turn.call is not None
        shown[turn.call.model] += 1
        if k == 0:  # the whole worked example is what the format reward accepts (0), not a -1 lesson
            assert RouterR1FormatReward(names)([question], [block]) == [0.0]
    # over a dataset every candidate is the example's about a third of the time (300 draws: sd ~8)
    assert set(shown) == set(names) and all(70 <= v <= 130 for v in shown.values()), shown
    # a question always gets the same example (the prompt is a function of the question)
    assert build_prompt(QUESTION, candidates) == build_prompt(QUESTION, candidates)


def test_compact_prompt_asks_for_the_name_alone_and_shows_no_candidate_as_an_example():
    prompt = build_prompt(QUESTION, [GPT4, MIXTRAL], max_turns=1, action="compact")
    assert "<search>MODEL</search>" in prompt and "Example" not in prompt and "At most 1 calls." in prompt
    assert prompt.endswith(f"Question: {QUESTION}")
    assert prompt.count(GPT4.name) == prompt.count(MIXTRAL.name) == 1  # each named once, in the list
    with pytest.raises(ValueError, match="rollout.env.action"):
        build_prompt(QUESTION, [GPT4], action="short")


@pytest.mark.parametrize("question, candidates, max_turns, field", [
    ("  ", [GPT4], 4, "question"),
    (QUESTION, [], 4, "candidates"),
    (QUESTION, [GPT4, Candidate("GPT-4-1106-PREVIEW", 1.0, 1.0)], 4, "candidates"),
    (QUESTION, [GPT4], 0, "max_turns"),
])
def test_bad_inputs_name_the_field(question, candidates, max_turns, field):
    with pytest.raises(ValueError, match=field):
        build_prompt(question, candidates, max_turns=max_turns)


class _TemplateTokenizer:
    """Records the messages; renders them like a ChatML template."""

    chat_template = "chatml"

    def apply_chat_template(self, messages, tokenize, add_generation_prompt):
        assert tokenize is False and add_generation_prompt is True
        body = "".join(f"<|im_start|>{m['role']}\n{m['content']}<|im_end|>\n" for m in messages)
        return body + "<|im_start|>assistant\n"


class _BaseTokenizer:
    chat_template = None


def test_render_chat_uses_the_template_with_the_assistant_turn_open():
    out = render_chat(_TemplateTokenizer(), "PROMPT", system="SYS")
    assert out == "<|im_start|>system\nSYS<|im_end|>\n<|im_start|>user\nPROMPT<|im_end|>\n<|im_start|>assistant\n"


def test_render_chat_without_a_template_is_the_bare_prompt():
    assert render_chat(_BaseTokenizer(), "PROMPT") == "PROMPT\n"
    assert render_chat(_BaseTokenizer(), "PROMPT", system="SYS") == "SYS\n\nPROMPT\n"


def test_real_smollm2_chat_rendering_fits_a_small_context():
    pytest.importorskip("transformers")
    from rlrouter.models import ModelNotAvailable, load_tokenizer

    try:
        tokenizer = load_tokenizer("smollm2-135m-instruct")
    except ModelNotAvailable as e:
        pytest.skip(str(e))
    prompt = build_prompt(QUESTION, [GPT4, MIXTRAL])
    rendered = render_chat(tokenizer, prompt)
    assert prompt in rendered and rendered.endswith("<|im_start|>assistant\n")
    n_tokens = len(tokenizer(rendered, add_special_tokens=False)["input_ids"])
    # measured: ~290 tokens with two candidates; a 135M policy with short budgets must not spend more
    assert n_tokens < 400, n_tokens
