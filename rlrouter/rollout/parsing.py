"""Reading one policy turn, and recording a trajectory token by token with its loss mask.

Text side (re-exported from :mod:`rlrouter.protocol`, which the reward reads too): the rollout engine
stops generation at ``</search>`` or ``</answer>`` (keep the stop string in the output), so a turn's
action sits at the end of the generated chunk. ``parse_turn`` finds it, checks ``MODEL: sub-query``
against the candidate names, and gives the error text that goes back to the policy inside
``<information>`` when something is wrong (nothing here raises on bad policy output: a bad turn is the policy's to learn from).

Token side: ``TrajectoryTokens`` keeps the segments in order (the prompt, each policy chunk with its
rollout log-probs, each ``<information>`` block) and yields ``input_ids``, ``loss_mask`` and
``old_logprobs`` aligned token for token. Only policy tokens are 1 in the mask: the pool's replies
were not sampled from the policy, so they are neither trained on nor counted in the KL.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import torch

# The text side lives in the one Router-R1 protocol module, shared with the reward.
from rlrouter.protocol import (  # noqa: F401  (re-exported: the environment and tests import them here)
    ERROR_PREFIX,
    NO_ACTION_ERROR,
    PLACEHOLDER_QUERIES,
    ActionKind,
    RouteCall,
    Turn,
    extract_answer,
    failed_call_error,
    format_information,
    parse_route,
    parse_turn,
)

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
