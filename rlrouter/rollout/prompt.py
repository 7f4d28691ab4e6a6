"""The Router-R1 prompt: tells the policy its candidates (price, size) and the tag protocol.

Router-R1 (arXiv 2506.09033, section 3) has the policy think in ``<think>..</think>``, route with
``<search>MODEL: sub-query</search>``, read the reply in ``<information>..</information>`` and finish
with ``<answer>..</answer>``. The original template is ~600 tokens of rules for a 3B policy; ours keeps
the same protocol in about a third of that, because the CPU policy (SmolLM2-135M) runs with short
contexts and every prompt token is paid at every turn.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from rlrouter.pool.base import Candidate

TEMPLATE = """\
Answer the question. You may ask one of the candidate LLMs below for help; bigger ones are usually \
better but cost more.
Rules:
- Think inside <think> ... </think> before every action.
- To ask a candidate, write <search>MODEL: sub-query</search> with MODEL exactly one of the names below. \
Its reply comes back inside <information> ... </information>.{turn_rule}
- Give the final answer inside <answer> ... </answer>, short, with no explanation.
Candidates (price in USD per 1M tokens, input / output):
{candidates}
Example:
Question: What is 17 * 23?
<think>I should ask a cheap candidate.</think>
<search>{example_model}: What is 17 * 23?</search>
<information>17 * 23 = 391</information>
<think>The reply says 391.</think>
<answer>391</answer>

Question: {question}"""


def _number(x: float) -> str:
    # 4 significant digits: "0.6", "10", "0.0015" -- never "0.00" for a cheap candidate
    return f"{x:.4g}"


def describe_candidate(candidate: Candidate) -> str:
    """One line per candidate: name, size, prices, and its description when it has one."""
    size = f"{_number(candidate.params_b)}B params" if candidate.params_b > 0 else "size unknown"
    line = f"- {candidate.name}: {size}, ${_number(candidate.price_in)} / ${_number(candidate.price_out)}"
    if candidate.description:
        line += f". {candidate.description.strip()}"
    return line


def build_prompt(question: str, candidates: Sequence[Candidate], max_turns: int | None = 4) -> str:
    """The user message of one rollout: rules, the candidate list, then the question.

    ``max_turns`` (the rollout's limit on route calls) is stated so the policy can learn to stop
    early; ``None`` leaves the limit out.
    """
    if not isinstance(question, str) or not question.strip():
        raise ValueError("question: must be a non-empty string")
    if not candidates:
        raise ValueError("candidates: at least one candidate is required")
    names = [c.name for c in candidates]
    lowered = [n.lower() for n in names]
    if len(set(lowered)) != len(lowered):
        # the parser matches names case-insensitively, so these would be ambiguous
        raise ValueError(f"candidates: names must be unique ignoring case, got {names}")
    if max_turns is not None and max_turns < 1:
        raise ValueError(f"max_turns: must be >= 1 or None, got {max_turns!r}")
    turn_rule = f" At most {max_turns} calls." if max_turns is not None else ""
    # the example routes to the cheapest candidate: the lesson we want first is "cheap is fine"
    cheapest = min(candidates, key=lambda c: (c.price_in + c.price_out, c.name))
    return TEMPLATE.format(turn_rule=turn_rule, candidates="\n".join(describe_candidate(c) for c in candidates),
                           example_model=cheapest.name, question=question.strip())


def render_chat(tokenizer: Any, prompt: str, system: str | None = None) -> str:
    """The prompt as the text the policy continues: the tokenizer's chat template with the assistant turn opened.

    Router-R1 keeps the whole trajectory inside that one assistant turn (``<information>`` blocks are
    appended to it, not sent as new user turns), so this is rendered once per rollout. A tokenizer
    without a chat template (a base model) gets the bare prompt and a newline. Tokenize the result with
    ``add_special_tokens=False``: the template already holds the special tokens.
    """
    if getattr(tokenizer, "chat_template", None) is None:
        return (f"{system}\n\n" if system else "") + prompt + "\n"
    messages = ([{"role": "system", "content": system}] if system else []) + [{"role": "user", "content": prompt}]
    return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
