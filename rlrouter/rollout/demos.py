"""Cold-start demonstrations: well-formed Router-R1 trajectories built from the pool's real answers.

A 3B instruct policy follows Router-R1's tag protocol from the prompt alone; SmolLM2-135M does not
(0 of 32 sampled trajectories were well-formed in our measurement), so GRPO sees identical -1 rewards
and no gradient. As DeepSeek-R1's cold start does, a few supervised steps on demonstrations teach the
format first; RL then optimises routing and answers.

What a demonstration may teach is the protocol and copying a reply, not where to route: by default
(``route="random"``) each one routes to a candidate drawn at random, shows that candidate's real reply in
``<information>`` (cut as the rollout cuts it), and answers with the answer the reply states
(``answer="reply"``: ``answer_key``, e.g. the number after "####" or the last number, or the option
letter), right or wrong. What the policy can do at test time is copy; the choice of candidate is left to
RL. With ``second_call`` > 0 that share of demonstrations, drawn at random, then asks another candidate
(drawn at random too) and answers what that second reply states: the format of a cascade, with no rule of
when to escalate (the draw ignores the first reply). ``route="per_task"`` sends each question to its
task's route in ``task_routes`` (the per-task rule chosen on the training questions,
``rlrouter.eval.route_scores.per_task_rule``): the cold start then starts RL from the best rule the
training logs give, and RL is left to improve on it question by question. ``route="optimal"`` (the
question's ``optimal_model``, the cheapest candidate the logs show correct) and ``answer="gold"`` are the
older demonstrations, kept for comparison: they leak the route and an answer the policy cannot know.
A question graded by reference (``rlrouter.protocol.REPLY_GOLD``: a program, say) is answered with the
name of the candidate last called.
"""

from __future__ import annotations

import random
from typing import Any, Sequence

from rlrouter.data.question import task_of
from rlrouter.pool.base import Candidate
from rlrouter.protocol import by_reference
from rlrouter.rollout.env import LAST_CALL_NOTE, NO_ANSWER_NOTE, EnvConfig, information_block, prompt_ids
from rlrouter.rollout.parsing import TrajectoryTokens
from rlrouter.selector.aggregate import answer_key


def short_query(question: str, max_words: int = 24) -> str:
    """The first line of a question, cut to ``max_words``: what a sub-query to a candidate looks like."""
    first = question.strip().splitlines()[0]
    words = first.split()
    return " ".join(words[:max_words]) + (" ..." if len(words) > max_words else "")


TURN_MARGIN = 8
"""Tokens a demonstrated turn leaves unused of the rollout's per-turn budget (``max_new_tokens``)."""


def search_turn(model: str, sub_query: str) -> str:
    """The demonstrated first turn: close the think block and route ``sub_query`` to ``model``."""
    return f"I will ask {model}.</think>\n<search>{model}: {sub_query}</search>"


def compact_turn(model: str, prefill: str, first: bool = True) -> str:
    """The demonstrated route of ``rollout.env.action: compact``, as the policy writes it after the prefill: a
    prefill of ``<search>`` leaves only ``MODEL</search>``; one of ``<think>`` closes the think block first."""
    if first and prefill.rstrip().endswith("<search>"):
        return f"{model}</search>"
    think = f"I will ask {model}.</think>\n" if (prefill.lstrip().startswith("<think>") or not first) else ""
    return ("" if first else "<think>") + think + f"<search>{model}</search>"


def answer_turn(answer: str) -> str:
    """The demonstrated last turn: state what the reply says and answer it."""
    return f"<think>The reply says {answer}.</think>\n<answer>{answer}</answer>"


def fit_search_turn(model: str, sub_query: str, tokenizer: Any, budget: int, prefix: str = "") -> str:
    """``search_turn`` with the sub-query cut, word by word, until the turn is at most ``budget`` tokens.

    A demonstration the rollout cannot reproduce teaches a turn that the engine cuts off before
    ``</search>``: with 24-word sub-queries, 63% of demonstrated first turns were longer than the
    64-token turn budget, so the cold-started policy mostly wrote turns that ended without an action."""
    words = sub_query.removesuffix(" ...").split()
    cut = sub_query.endswith(" ...")
    while True:
        text = prefix + search_turn(model, " ".join(words) + (" ..." if cut else ""))
        if len(words) <= 1 or len(tokenizer.encode(text, add_special_tokens=False)) <= budget:
            return text
        words, cut = words[:-1], True


def with_first_turn(item: dict[str, Any], model: str, query_words: int = 24) -> dict[str, Any]:
    """``item`` whose rollouts start with the demonstrated first turn to ``model`` (``first_turn``, written
    for the policy by ``RouterEnv.run``: ``curriculum.no_answer_first_call``)."""
    return {**item, "first_turn": search_turn(model, short_query(item["query"], query_words))}


DEMO_ROUTES = ("random", "optimal", "per_task")
DEMO_ANSWERS = ("reply", "gold")


def build_demonstrations(items: Sequence[dict[str, Any]], pool: Any, n: int, seed: int = 0,
                         query_words: int = 24, route: str = "random", answer: str = "reply",
                         info_max_chars: int = 400, second_call: float = 0.0,
                         mark_no_answer: bool = False, last_call: int = 0,
                         task_routes: dict[str, str] | None = None) -> list[dict[str, Any]]:
    """``n`` demonstrations (dicts with ``query``, ``segments``: [(text, is_policy)]) from real pool calls.

    Each demonstrated sub-query is the question's first ``query_words`` words (``short_query``). Short
    ones leave the policy a margin in its turn budget: a policy that copies a few words too many still
    closes ``</search>``. With 24 words (cut further to fit the budget), 13 of the 17 held-out failures
    after the cold start were first turns cut by the budget before ``</search>``, the other 4 later
    turns cut the same way. ``route`` and ``answer``: see the module docstring. ``mark_no_answer``: the
    replies are shown as the rollout shows them under ``rollout.env.mark_no_answer``. ``last_call``: the
    reply to the call of that number (1: the first) ends with the rollout's ``LAST_CALL_NOTE``, as under
    ``rollout.env.note_last_call`` with ``max_turns`` = ``last_call``; 0: never. ``task_routes``: task ->
    candidate, for ``route="per_task"``."""
    if query_words < 1:
        raise ValueError(f"train.warmup_query_words: expected >= 1, got {query_words}")
    if route not in DEMO_ROUTES:
        raise ValueError(f"train.warmup_route: expected one of {DEMO_ROUTES}, got {route!r}")
    if answer not in DEMO_ANSWERS:
        raise ValueError(f"train.warmup_answer: expected one of {DEMO_ANSWERS}, got {answer!r}")
    if not 0.0 <= second_call <= 1.0:
        raise ValueError(f"curriculum.demo_second_call: expected a share in [0, 1], got {second_call!r}")
    rng = random.Random(seed)
    chosen = rng.sample(list(items), min(n, len(items)))
    cands = [pool.get(name) for name in pool.names]
    strongest = max(cands, key=lambda c: (c.params_b, c.price_out)).name
    if route == "random":
        models = [rng.choice(list(pool.names)) for _ in chosen]
    elif route == "per_task":
        models = [per_task_route(it, task_routes, pool.names) for it in chosen]
    else:
        models = [it.get("optimal_model") or strongest for it in chosen]
    names = list(pool.names)
    seconds = [rng.choice([n for n in names if n != m] or names) if second_call and rng.random() < second_call
               else None for m in models]
    replies = pool.route_sync([(m, it["query"]) for m, it in zip(models, chosen)])
    later = iter(pool.route_sync([(m2, it["query"]) for m2, it in zip(seconds, chosen) if m2 is not None]))
    demos = []
    for it, model, reply, model2 in zip(chosen, models, replies, seconds):
        sub_query = short_query(it["query"], query_words)
        shown = shown_reply(reply, info_max_chars, mark_no_answer, last_call=last_call == 1)
        segments = [(search_turn(model, sub_query), True), (shown, False)]
        calls = [model]
        if model2 is not None:
            reply = next(later)
            shown = shown_reply(reply, info_max_chars, mark_no_answer, last_call=last_call == 2)
            segments += [("<think>" + search_turn(model2, sub_query), True), (shown, False)]
            calls.append(model2)
        if by_reference(it["ground_truth"]):  # the answer names the candidate whose reply it returns
            final = calls[-1]
        elif answer == "gold" or not reply.ok:
            final = list(it["ground_truth"])[0]
        else:
            final = answer_key(shown_text(shown))
        segments.append((answer_turn(final), True))
        demos.append({"query": it["query"], "segments": segments, "model": model, "calls": calls,
                      "sub_query": sub_query, "answer": final})
    return demos


def per_task_route(item: dict[str, Any], task_routes: dict[str, str] | None, names: Sequence[str]) -> str:
    """The candidate ``route="per_task"`` demonstrates for ``item``: its task's (its ``source``) route."""
    if not task_routes:
        raise ValueError("train.warmup_route=per_task: needs the per-task rule of a replay pool's training "
                         "questions (a pool of replay candidates); got none")
    task = task_of(item)
    if task not in task_routes or task_routes[task] not in names:
        raise ValueError(f"train.warmup_route=per_task: no route in the pool for task {task!r} "
                         f"(the rule: {task_routes})")
    return task_routes[task]


def shown_reply(reply: Any, info_max_chars: int, mark_no_answer: bool = False, last_call: bool = False) -> str:
    """A reply's ``<information>`` block, cut (and marked) as the rollout cuts it."""
    return information_block(reply.text if reply.ok else f"Error: {reply.error}", info_max_chars,
                             mark_no_answer, reply=reply.ok, last_call=last_call)


def shown_text(block: str) -> str:
    """The reply as the policy sees it inside ``<information>`` (without the environment's notes)."""
    inner = block.strip().removeprefix("<information>").removesuffix("</information>")
    return inner.removesuffix("\n" + LAST_CALL_NOTE).removesuffix("\n" + NO_ANSWER_NOTE)


def demo_tokens(demo: dict[str, Any], tokenizer: Any, candidates: Sequence[Candidate],
                env_cfg: EnvConfig) -> TrajectoryTokens:
    """A demonstration in the policy's token space, masked like a rollout (information not trained on).

    Each search turn is shortened to fit the rollout's turn budget (``fit_search_turn``); with ``action:
    compact`` it is the name alone (``compact_turn``). With ``answer: reply`` the demonstration ends at its
    first route, as the rollout's trajectory does."""
    t = TrajectoryTokens(prompt_ids(tokenizer, demo["query"], candidates, env_cfg))
    budget = max(1, env_cfg.max_new_tokens - TURN_MARGIN)
    calls = list(demo.get("calls") or ([demo["model"]] if "model" in demo else []))
    searches = 0
    for i, (text, policy) in enumerate(demo["segments"]):
        if policy and searches < len(calls) and i == 2 * searches:  # search turns: segments 0, 2, ...
            if env_cfg.action == "compact":
                text = compact_turn(calls[searches], env_cfg.prefill, first=searches == 0)
            else:
                text = fit_search_turn(calls[searches], demo["sub_query"], tokenizer, budget,
                                       prefix="<think>" if searches else "")
            searches += 1
            if env_cfg.answer == "reply":
                ids = tokenizer.encode(text, add_special_tokens=False)
                t.add_policy(ids, [0.0] * len(ids))
                return t
        ids = tokenizer.encode(text, add_special_tokens=False)
        if policy:
            t.add_policy(ids, [0.0] * len(ids))
        else:
            t.add_observation(ids)
    return t
