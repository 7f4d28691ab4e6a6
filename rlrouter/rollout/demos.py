"""Cold-start demonstrations: well-formed Router-R1 trajectories built from the pool's real answers.

A 3B instruct policy follows Router-R1's tag protocol from the prompt alone; SmolLM2-135M does not
(0 of 32 sampled trajectories were well-formed in our measurement), so GRPO sees identical -1 rewards
and no gradient. As DeepSeek-R1's cold start does, a few supervised steps on demonstrations teach the
format first; RL then optimises routing and answers. Each demonstration routes to the question's
``optimal_model`` (the cheapest candidate the logs show correct) or else the strongest, shows that
candidate's real reply in ``<information>``, and answers with the gold answer.
"""

from __future__ import annotations

import random
from typing import Any, Sequence

from rlrouter.pool.base import Candidate
from rlrouter.rollout.env import EnvConfig, prompt_ids
from rlrouter.rollout.parsing import TrajectoryTokens, format_information


def short_query(question: str, max_words: int = 24) -> str:
    """The first line of a question, cut to ``max_words``: what a sub-query to a candidate looks like."""
    first = question.strip().splitlines()[0]
    words = first.split()
    return " ".join(words[:max_words]) + (" ..." if len(words) > max_words else "")


def build_demonstrations(items: Sequence[dict[str, Any]], pool: Any, n: int, seed: int = 0) -> list[dict[str, Any]]:
    """``n`` demonstrations (dicts with ``query``, ``segments``: [(text, is_policy)]) from real pool calls."""
    rng = random.Random(seed)
    chosen = rng.sample(list(items), min(n, len(items)))
    cands = [pool.get(name) for name in pool.names]
    strongest = max(cands, key=lambda c: (c.params_b, c.price_out)).name
    models = [it.get("optimal_model") or strongest for it in chosen]
    replies = pool.route_sync([(m, it["query"]) for m, it in zip(models, chosen)])
    demos = []
    for it, model, reply in zip(chosen, models, replies):
        gold = list(it["ground_truth"])[0]
        info = reply.text if reply.ok else f"Error: {reply.error}"
        segments = [(f"I will ask {model}.</think>\n<search>{model}: {short_query(it['query'])}</search>", True),
                    (format_information(info, 400), False),
                    (f"<think>The reply helps; the answer is {gold}.</think>\n<answer>{gold}</answer>", True)]
        demos.append({"query": it["query"], "segments": segments})
    return demos


def demo_tokens(demo: dict[str, Any], tokenizer: Any, candidates: Sequence[Candidate],
                env_cfg: EnvConfig) -> TrajectoryTokens:
    """A demonstration in the policy's token space, masked like a rollout (information not trained on)."""
    t = TrajectoryTokens(prompt_ids(tokenizer, demo["query"], candidates, env_cfg))
    for text, policy in demo["segments"]:
        ids = tokenizer.encode(text, add_special_tokens=False)
        if policy:
            t.add_policy(ids, [0.0] * len(ids))
        else:
            t.add_observation(ids)
    return t
