"""The Router-R1 prompt: tells the policy its candidates (price, size) and the tag protocol.

Router-R1 (arXiv 2506.09033, section 3) has the policy think in ``<think>..</think>``, route with
``<search>MODEL: sub-query</search>``, read the reply in ``<information>..</information>`` and finish
with ``<answer>..</answer>``. The original template is ~600 tokens of rules for a 3B policy; ours keeps
the same protocol in about a third of that, because the CPU policy (SmolLM2-135M) runs with short
contexts and every prompt token is paid at every turn.
"""

from __future__ import annotations

import hashlib
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
<think>I should ask a candidate.</think>
<search>{example_model}: What is 17 * 23?</search>
<information>17 * 23 = 391</information>
<think>The reply says 391.</think>
<answer>391</answer>

Question: {question}"""


COMPACT_TEMPLATE = """\
Route the question to one candidate LLM: the one that answers it best for its price. Write \
<search>MODEL</search> with MODEL exactly one of the names below; it answers the question itself and \
its reply comes back inside <information> ... </information>.{turn_rule} Give the final answer inside \
<answer> ... </answer>.
Candidates (price in USD per 1M tokens, input / output):
{candidates}

Question: {question}"""
"""``rollout.env.action: compact``: the route is the candidate's name alone, so every policy token of the
action decides the reward (with ``replay_query: original`` a sub-query changes nothing the candidate
answers). No worked example: an example names a candidate, and a name shown in every prompt is a pull
toward it."""

ACTIONS = ("subquery", "compact")


def example_candidate(question: str, candidates: Sequence[Candidate]) -> Candidate:
    """The candidate the worked example routes to: one drawn from the question's hash, so over a dataset
    every candidate is shown about equally often and none is favoured by the prompt (an example that always
    names the cheapest is a pull toward it once the policy's own preference weakens)."""
    digest = hashlib.blake2b(question.strip().encode(), digest_size=4).digest()
    return candidates[int.from_bytes(digest, "little") % len(candidates)]


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


def build_prompt(question: str, candidates: Sequence[Candidate], max_turns: int | None = 4,
                 action: str = "subquery") -> str:
    """The user message of one rollout: rules, the candidate list, then the question.

    ``max_turns`` (the rollout's limit on route calls) is stated so the policy can learn to stop
    early; ``None`` leaves the limit out. ``action``: ``subquery`` (Router-R1's ``<search>MODEL:
    sub-query</search>``, with a worked example) or ``compact`` (``<search>MODEL</search>``,
    ``COMPACT_TEMPLATE``).
    """
    if action not in ACTIONS:
        raise ValueError(f"rollout.env.action: expected one of {ACTIONS}, got {action!r}")
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
    listed = "\n".join(describe_candidate(c) for c in candidates)
    if action == "compact":
        return COMPACT_TEMPLATE.format(turn_rule=turn_rule, candidates=listed, question=question.strip())
    return TEMPLATE.format(turn_rule=turn_rule, candidates=listed,
                           example_model=example_candidate(question, candidates).name, question=question.strip())


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
