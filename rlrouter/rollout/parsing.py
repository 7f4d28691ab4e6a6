"""Reading one policy turn, and recording a trajectory token by token with its loss mask.

Text side: the rollout engine stops generation at ``</search>`` or ``</answer>`` (keep the stop string
in the output), so a turn's action sits at the end of the generated chunk. ``parse_turn`` finds it,
checks ``MODEL: sub-query`` against the candidate names, and gives the error text that goes back to the
policy inside ``<information>`` when something is wrong (issue 3, "Failures": nothing here raises on
bad policy output).

Token side: ``TrajectoryTokens`` keeps the segments in order (the prompt, each policy chunk with its
rollout log-probs, each ``<information>`` block) and yields ``input_ids``, ``loss_mask`` and
``old_logprobs`` aligned token for token. Only policy tokens are 1 in the mask: the pool's replies
were not sampled from the policy, so they are neither trained on nor counted in the KL (issue 3, "Masks").
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Literal

import torch

ActionKind = Literal["search", "answer", "none"]

ERROR_PREFIX = "Error:"
NO_ACTION_ERROR = (f"{ERROR_PREFIX} no action found. End each turn with <search>MODEL: sub-query</search> "
                   "or <answer>...</answer>.")
# the literal placeholders of the prompt's rule; a policy that copies them has not routed anything
PLACEHOLDER_QUERIES = frozenset({"sub-query", "your-query", "query"})

_CLOSE_TAG = re.compile(r"</(search|answer)>")
_ANSWER = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)
_PROTOCOL_TAG = re.compile(r"<(/?)(search|answer|information|think)>")


# ---------------------------------------------------------------- text: one turn


@dataclass(frozen=True)
class RouteCall:
    """A well-formed ``<search>``: the candidate's name as the pool spells it, and the sub-query."""

    model: str
    query: str


@dataclass(frozen=True)
class Turn:
    """One parsed policy turn.

    ``kind`` names the closing tag that ended the chunk (``none``: neither). ``text`` is the chunk cut
    just after that tag, ``rest`` what followed it. ``error`` is set when the turn breaks the protocol:
    it is the text to put in ``<information>`` and it counts against format. A ``search`` without error
    carries its ``call``.
    """

    kind: ActionKind
    text: str
    content: str = ""
    call: RouteCall | None = None
    error: str | None = None
    rest: str = ""
    """What the chunk held after the closing tag: empty when the engine stopped at the tag."""

    @property
    def ok(self) -> bool:
        return self.error is None

    @property
    def truncated(self) -> bool:
        """True when text after the action was cut off (the engine did not stop at the tag)."""
        return bool(self.rest.strip())


def parse_route(content: str, candidate_names: Sequence[str]) -> RouteCall | str:
    """Parse the inside of ``<search>``: ``MODEL: sub-query``. Returns a ``RouteCall`` or an error string.

    The model must equal a candidate's name ignoring case (no fuzzy matching: the policy must learn
    the names). Names are tried longest first and may themselves contain ``:``.
    """
    if not candidate_names:
        raise ValueError("candidate_names: at least one candidate is required")
    choices = ", ".join(candidate_names)
    content = content.strip()
    if not content:
        return f"{ERROR_PREFIX} empty <search>. Write <search>MODEL: sub-query</search>, MODEL one of: {choices}."
    lowered = content.lower()
    for name in sorted(candidate_names, key=len, reverse=True):
        if not lowered.startswith(name.lower()):
            continue
        rest = content[len(name):].lstrip()
        if not rest.startswith(":"):
            continue  # "gpt-4o: ..." must not match the candidate "gpt-4"
        query = rest[1:].strip()
        if not query or query.lower() in PLACEHOLDER_QUERIES:
            return f"{ERROR_PREFIX} no sub-query after '{name}:'. Write the question for the candidate."
        return RouteCall(model=name, query=query)
    if ":" not in content:
        return f"{ERROR_PREFIX} malformed <search>, expected 'MODEL: sub-query' with MODEL one of: {choices}."
    model = content.split(":", 1)[0].strip()
    if not model:
        return f"{ERROR_PREFIX} missing MODEL before ':'. Choose one of: {choices}."
    return f"{ERROR_PREFIX} unknown model '{model}'. Choose one of: {choices}."


def parse_turn(chunk: str, candidate_names: Sequence[str]) -> Turn:
    """Find the action that ends a generated chunk and check it.

    The first ``</search>`` or ``</answer>`` ends the turn (as the engine's stop strings would); its
    opening tag is the last one before it. An answer must not be empty; a search must name a candidate.
    """
    close = _CLOSE_TAG.search(chunk)
    if close is None:
        return Turn(kind="none", text=chunk, error=NO_ACTION_ERROR)
    kind: ActionKind = close.group(1)  # type: ignore[assignment]
    text, rest = chunk[:close.end()], chunk[close.end():]
    open_at = text.rfind(f"<{kind}>", 0, close.start())
    if open_at < 0:
        return Turn(kind=kind, text=text, error=f"{ERROR_PREFIX} </{kind}> without <{kind}>.", rest=rest)
    content = text[open_at + len(kind) + 2:close.start()].strip()
    if kind == "answer":
        error = None if content else f"{ERROR_PREFIX} empty <answer>. Put the final answer inside the tags."
        return Turn(kind="answer", text=text, content=content, error=error, rest=rest)
    route = parse_route(content, candidate_names)
    if isinstance(route, str):
        return Turn(kind="search", text=text, content=content, error=route, rest=rest)
    return Turn(kind="search", text=text, content=content, call=route, rest=rest)


def extract_answer(text: str) -> str | None:
    """The content of the last ``<answer>...</answer>`` in ``text``, stripped; None if there is none."""
    matches = _ANSWER.findall(text)
    return matches[-1].strip() if matches else None


def failed_call_error(model: str, reason: str) -> str:
    """The ``<information>`` text for a route call the pool could not answer."""
    return f"{ERROR_PREFIX} the call to {model} failed ({reason.strip() or 'no reason given'})."


def format_information(text_or_error: str, max_chars: int | None = None) -> str:
    """Wrap a candidate's reply (or an error text) as Router-R1's ``<information>`` block.

    The candidate's own protocol tags are defused (``<answer>`` -> ``[answer]``): a reply must not end
    the information block early, nor be read as the policy's answer by ``extract_answer``. ``max_chars``
    cuts long replies so a small policy's context is not spent on one block.
    """
    body = _PROTOCOL_TAG.sub(lambda m: f"[{m.group(1)}{m.group(2)}]", text_or_error.strip())
    if max_chars is not None and len(body) > max_chars:
        body = body[:max_chars].rstrip() + " ..."
    return f"\n\n<information>{body}</information>\n\n"


# ---------------------------------------------------------------- tokens: one trajectory


@dataclass(frozen=True)
class Segment:
    """A run of tokens from one source: the policy (with its rollout log-probs) or not (prompt, information)."""

    token_ids: tuple[int, ...]
    policy: bool
    logprobs: tuple[float, ...] | None = None

    def __post_init__(self) -> None:
        if any(not isinstance(t, int) or t < 0 for t in self.token_ids):
            raise ValueError("segment.token_ids: must be non-negative ints")
        if self.policy:
            if self.logprobs is None:
                return  # the engine gave no log-probs: unknown (NaN in ``old_logprobs``)
            if len(self.logprobs) != len(self.token_ids):
                raise ValueError(f"segment.logprobs: expected {len(self.token_ids)} values, got {len(self.logprobs)}")
            # log-probs are <= 0; a small tolerance for float rounding, none for probabilities passed by mistake
            if any(not math.isfinite(lp) or lp > 1e-3 for lp in self.logprobs):
                raise ValueError("segment.logprobs: must be finite log-probabilities (<= 0)")
        elif self.logprobs is not None:
            raise ValueError("segment.logprobs: only policy segments carry log-probs")


class TrajectoryTokens:
    """The token stream of one multi-turn trajectory, segment by segment.

    ``input_ids``, ``loss_mask`` and ``old_logprobs`` have one entry per token, aligned: ``loss_mask[t]``
    is 1 iff token ``t`` was sampled from the policy, and ``old_logprobs[t]`` is its rollout log-prob
    (the engine's; 0 elsewhere, NaN where the engine gave none). This is the alignment ``rlrouter.algos.common.token_logprobs`` produces.
    """

    def __init__(self, prompt_ids: Iterable[int]):
        prompt = Segment(tuple(prompt_ids), policy=False)
        if not prompt.token_ids:
            # the first token has no log-prob, so a trajectory must start with at least one prompt token
            raise ValueError("prompt_ids: must not be empty")
        self.segments: list[Segment] = [prompt]

    def add_policy(self, token_ids: Iterable[int], logprobs: Iterable[float] | None) -> None:
        """Append tokens the policy generated, with the log-prob the rollout engine gave each one
        (None: the engine gave none)."""
        lps = None if logprobs is None else tuple(float(x) for x in logprobs)
        seg = Segment(tuple(token_ids), policy=True, logprobs=lps)
        if seg.token_ids:
            self.segments.append(seg)

    def add_observation(self, token_ids: Iterable[int]) -> None:
        """Append tokens the policy did not generate (an ``<information>`` block): masked out of the loss."""
        seg = Segment(tuple(token_ids), policy=False)
        if seg.token_ids:
            self.segments.append(seg)

    def __len__(self) -> int:
        return sum(len(s.token_ids) for s in self.segments)

    @property
    def prompt_length(self) -> int:
        return len(self.segments[0].token_ids)

    @property
    def num_policy_tokens(self) -> int:
        return sum(len(s.token_ids) for s in self.segments if s.policy)

    @property
    def input_ids(self) -> list[int]:
        return [t for s in self.segments for t in s.token_ids]

    @property
    def loss_mask(self) -> list[int]:
        return [int(s.policy) for s in self.segments for _ in s.token_ids]

    @property
    def old_logprobs(self) -> list[float]:
        # 0 outside the policy's tokens; NaN for policy tokens whose engine log-prob is unknown
        return [lp for s in self.segments
                for lp in (s.logprobs if s.logprobs is not None
                           else (math.nan if s.policy else 0.0,) * len(s.token_ids))]

    def to_tensors(self) -> dict[str, torch.Tensor]:
        """``input_ids``, ``loss_mask`` (long) and ``old_logprobs`` (float32), each of shape (T,)."""
        return {"input_ids": torch.tensor(self.input_ids, dtype=torch.long),
                "loss_mask": torch.tensor(self.loss_mask, dtype=torch.long),
                "old_logprobs": torch.tensor(self.old_logprobs, dtype=torch.float32)}


def collate(trajectories: Sequence[TrajectoryTokens], pad_token_id: int,
            pad_to: int | None = None) -> dict[str, torch.Tensor]:
    """Right-pad trajectories into a batch: ``input_ids``, ``attention_mask``, ``loss_mask``, ``old_logprobs``, (B, T).

    Padding is 0 in both masks. ``pad_to`` fixes T (for equal shapes across DDP ranks); it must be at
    least the longest trajectory, since cutting one would drop its reward-bearing last tokens.
    """
    if not trajectories:
        raise ValueError("trajectories: must not be empty")
    longest = max(len(tr) for tr in trajectories)
    T = longest if pad_to is None else pad_to
    if T < longest:
        raise ValueError(f"pad_to: {pad_to} is shorter than the longest trajectory ({longest} tokens)")
    B = len(trajectories)
    batch = {"input_ids": torch.full((B, T), pad_token_id, dtype=torch.long),
             "attention_mask": torch.zeros(B, T, dtype=torch.long),
             "loss_mask": torch.zeros(B, T, dtype=torch.long),
             "old_logprobs": torch.zeros(B, T, dtype=torch.float32)}
    for i, tr in enumerate(trajectories):
        n = len(tr)
        for key, value in tr.to_tensors().items():
            batch[key][i, :n] = value
        batch["attention_mask"][i, :n] = 1
    return batch
