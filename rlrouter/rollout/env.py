"""The multi-turn Router-R1 environment: generate, route, append ``<information>``, repeat.

Pure logic: it takes a ``generate`` function (token ids in, token ids out; a vLLM engine in a
``RolloutWorker``, a fake in unit tests) and a candidate pool, and turns a batch of prompts into
trajectories. Each turn generates for every live trajectory at once, then sends every route call of
the batch to the pool concurrently (the pool bounds the concurrency). After ``max_turns`` turns a final
turn may only answer. With ``answer: reply`` the first reply a trajectory gets is its answer: it ends there,
and the policy's only decision is the route (a router's episode).
"""

from __future__ import annotations

import asyncio
import hashlib
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Protocol, Sequence

from rlrouter.pool.base import Candidate, CandidateResponse
from rlrouter.protocol import REPLY_GOLD, extract_answer, failed_call_error, format_information, parse_turn
from rlrouter.rollout.parsing import TrajectoryTokens
from rlrouter.rollout.prompt import ACTIONS, build_prompt, render_chat
from rlrouter.selector.aggregate import answer_key, states_answer

NO_ROUTE_ERROR = "Error: this turn made no call."
NO_ANSWER_NOTE = "(The reply above states no final answer.)"
"""What ``rollout.env.mark_no_answer`` adds to the information block of a reply without a final answer."""
LAST_CALL_NOTE = "(No calls are left: the next turn must answer.)"
"""What ``rollout.env.note_last_call`` adds to the information block that the answer-only turn follows."""


def information_block(text_or_error: str, max_chars: int | None, mark_no_answer: bool = False,
                      reply: bool = True, last_call: bool = False) -> str:
    """A candidate's reply (``reply``) or an error text as the ``<information>`` block the policy reads;
    with ``mark_no_answer``, a reply that states no final answer ends with ``NO_ANSWER_NOTE``; with
    ``last_call`` (the next turn may only answer), the block ends with ``LAST_CALL_NOTE``. The one
    rendering of a reply used by the rollout, the demonstrations and the escalation probe."""
    marked = mark_no_answer and reply and not states_answer(text_or_error)
    notes = [NO_ANSWER_NOTE] * marked + [LAST_CALL_NOTE] * last_call
    return format_information(text_or_error, max_chars, note="\n".join(notes))


ANSWERS = ("policy", "reply")
"""``rollout.env.answer``: who writes a trajectory's answer (``EnvConfig.answer``)."""


@dataclass
class EnvConfig:
    """How one trajectory unrolls."""

    max_turns: int = 4
    """Turns that may call a candidate; one final turn after them may only answer (Router-R1: 4).
    0: single-turn, one answer-only generation (the prompt then states no call limit)."""
    max_new_tokens: int = 96
    """Tokens the policy may generate per turn."""
    max_total_tokens: int = 1024
    """A trajectory stops once prompt + generated + information tokens pass this."""
    temperature: float = 1.0
    top_p: float = 1.0
    info_max_chars: int = 600
    """A candidate's reply is cut to this many characters in ``<information>`` (small policy context)."""
    action: str = "subquery"
    """How the policy routes: ``subquery`` (Router-R1's ``<search>MODEL: sub-query</search>``) or ``compact``
    (``<search>MODEL</search>``: the call asks the trajectory's question itself, and the prompt is the short
    ``COMPACT_TEMPLATE``). Compact puts the whole gradient of a route on the candidate's name: with replay
    candidates answering the original question, a sub-query's 60-odd tokens change nothing the reward sees.
    A compact route is valid in either mode."""
    constrain_route: bool = False
    """With ``action: compact`` and a ``prefill`` ending in ``<search>``: the first turn may write only a
    candidate's name and ``</search>`` (the engine's structured outputs, a choice over the item's candidates),
    so no route is malformed. The learner's log-probs stay the unconstrained model's: with a group-mean
    baseline the normaliser the constraint adds at the first token is the same for every sample of a group
    and cancels; at later tokens it does not (an approximation: ``docs/router_r1.md``, "What to set"). vLLM
    rollouts only."""
    replay_query: str = "original"
    """Replay candidates answer the trajectory's original question ("original"; logged outcomes exist only
    for it) or the policy's sub-query ("subquery", fuzzy-matched)."""
    route_max_tokens: int = 512
    """max_tokens passed to live candidates."""
    prefill: str = "<think>\n"
    """Text put at the start of the assistant turn (part of the prompt, not trained on). A 135M policy
    rarely opens with <think> by itself; the reward still sees the prefill as the start of the text."""
    greedy_frequency_penalty: float = 0.0
    """OpenAI-style frequency penalty (subtracted from a token's logit once per time the turn already
    generated it) on greedy turns only: held-out evaluation and serving. Greedy decoding of a small policy
    that copies a question into its sub-query can fall into a loop that runs to the turn budget without
    ``</search>``; a penalty breaks the loop (the measured effect is in the two-model study,
    docs/experiments/). Sampled training turns never get it: the learner's log-probs are those of the plain
    tempered distribution."""

    answer: str = "policy"
    """Who answers: ``policy`` (Router-R1's: the policy reads the reply and writes ``<answer>``) or ``reply``
    (a router's episode: the first reply is the answer and the trajectory ends at it). With ``reply`` the
    reward sees ``<search>..</search><information>..</information><answer>..</answer>`` and no ``<think>`` is
    required (``Trajectory.reply_answer``). A reply with a logged outcome (replay) is graded by that outcome
    (the answer names the candidate, ``rlrouter.protocol.REPLY_GOLD``); a live reply by the answer it
    states (``rlrouter.selector.aggregate.answer_key``) against the gold. The learner trains on the prompt
    and the route only: no reply tokens, no answer turn. A failed call or a malformed route ends the trajectory
    unanswered (no error block, no second turn)."""
    mark_no_answer: bool = False
    """End a candidate's ``<information>`` with ``NO_ANSWER_NOTE`` when its reply states no final answer
    (``rlrouter.selector.aggregate.states_answer``: no "####", boxed answer or option letter). The
    environment reads the reply the way the cascade baseline does and says so beside the choice, so the
    policy's next move can condition on a few tokens instead of the absence of a pattern in the reply. It
    says nothing of what to do: whether to ask another candidate is still RL's to learn (demonstrations
    route at random). Errors are never marked. Off by default."""
    note_last_call: bool = False
    """End the ``<information>`` block after the last call the turn limit allows (``max_turns``) with
    ``LAST_CALL_NOTE``: the next turn may only answer. A 135M policy does not count its turns, and the note
    alone does not make it (the counts are in the two-model study, docs/experiments/): it is there for RL to
    learn from, not a fix by itself. Off by default."""

    def __post_init__(self) -> None:
        for key in ("mark_no_answer", "note_last_call"):
            if not isinstance(getattr(self, key), bool):
                raise ValueError(f"rollout.env.{key}: true or false, got {getattr(self, key)!r}")
        if self.max_turns < 0:
            raise ValueError(f"rollout.env.max_turns: must be >= 0 (0: one answer-only turn), got {self.max_turns}")
        if self.max_new_tokens < 1:
            raise ValueError(f"rollout.env.max_new_tokens: must be >= 1, got {self.max_new_tokens}")
        if not 0.0 <= self.greedy_frequency_penalty <= 2.0:
            raise ValueError("rollout.env.greedy_frequency_penalty: must be in [0, 2] (OpenAI's range, "
                             f"non-negative), got {self.greedy_frequency_penalty}")
        if self.action not in ACTIONS:
            raise ValueError(f"rollout.env.action: expected one of {ACTIONS}, got {self.action!r}")
        if self.answer not in ANSWERS:
            raise ValueError(f"rollout.env.answer: expected one of {ANSWERS}, got {self.answer!r}")
        if self.answer == "reply" and self.max_turns < 1:
            raise ValueError("rollout.env.answer: 'reply' needs a call, so rollout.env.max_turns >= 1 "
                             f"(got {self.max_turns})")
        if not isinstance(self.constrain_route, bool):
            raise ValueError(f"rollout.env.constrain_route: true or false, got {self.constrain_route!r}")
        if self.constrain_route and not (self.action == "compact" and self.prefill.rstrip().endswith("<search>")):
            raise ValueError("rollout.env.constrain_route: needs rollout.env.action=compact and a rollout.env.prefill "
                             f"ending in '<search>' (the turn is then only a name), got action={self.action!r}, "
                             f"prefill={self.prefill!r}")
        if self.replay_query not in ("original", "subquery"):
            raise ValueError(f"rollout.env.replay_query: 'original' or 'subquery', got {self.replay_query!r}")


@dataclass
class RouteRecord:
    """One route call a trajectory made."""

    model: str
    query: str
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost: float = 0.0
    error: str | None = None
    correct: bool | None = None


@dataclass
class Trajectory:
    """One sampled episode: its tokens with the loss mask, its text, and what it routed where."""

    prompt_index: int
    sample_index: int
    item: dict[str, Any]
    tokens: TrajectoryTokens
    text: str = ""
    routes: list[RouteRecord] = field(default_factory=list)
    answer: str | None = None
    turns: int = 0
    protocol_errors: int = 0
    done: bool = False
    reply_answer: bool = False
    """The answer is a candidate's reply (``rollout.env.answer: reply``), not text the policy wrote."""

    @property
    def cost(self) -> float:
        return sum(r.cost for r in self.routes)

    @property
    def route_completion_tokens(self) -> int:
        return sum(r.completion_tokens for r in self.routes)


class Tokenizer(Protocol):
    def encode(self, text: str, add_special_tokens: bool = ...) -> list[int]: ...

    def decode(self, ids: Sequence[int], skip_special_tokens: bool = ...) -> str: ...


@dataclass
class SamplingSpec:
    """One generation request: engine-agnostic, so the env does not import vLLM."""

    max_tokens: int
    stop: list[str]
    temperature: float
    top_p: float
    seed: int
    frequency_penalty: float = 0.0
    """Subtracted from a token's logit once per time this generation already produced it."""
    choices: tuple[str, ...] | None = None
    """The only texts the generation may be (``rollout.env.constrain_route``: ``NAME</search>`` per candidate)."""


class SampledTokens(list):
    """Generated token ids (a plain list) that may also carry the engine's log-prob of each one.

    A list subclass so that every caller of a ``GenerateFn`` keeps working; ``logprobs`` is None when the
    engine gave none (a test fake, an HF ``generate`` backend without scores)."""

    def __init__(self, token_ids: Sequence[int] = (), logprobs: Sequence[float] | None = None):
        super().__init__(token_ids)
        if logprobs is not None and len(logprobs) != len(self):
            raise ValueError(f"SampledTokens.logprobs: expected {len(self)} values, got {len(logprobs)}")
        self.logprobs = None if logprobs is None else [float(x) for x in logprobs]

    def __reduce__(self):  # pickles (Ray) with its log-probs
        return (SampledTokens, (list(self), self.logprobs))


def constrained(spec: SamplingSpec, names: Sequence[str], cfg: EnvConfig) -> SamplingSpec:
    """``spec`` limited to one ``NAME</search>`` per candidate of ``names`` when ``rollout.env.constrain_route``
    is on (unchanged otherwise, or without names). The engine may spell a choice in any tokens it allows,
    down to one character a token, so the turn's budget covers the longest choice's bytes: a route cut short
    would be malformed after all."""
    if not (cfg.constrain_route and names):
        return spec
    choices = tuple(f"{n}</search>" for n in names)
    return replace(spec, choices=choices, max_tokens=max(spec.max_tokens, max(len(c.encode()) for c in choices)))


GenerateFn = Callable[[list[list[int]], list[SamplingSpec]], list[list[int]]]


class RoutePool(Protocol):
    def get(self, name: str) -> Candidate: ...

    @property
    def names(self) -> list[str]: ...

    async def route(self, calls: Sequence[tuple[str, str]], **kwargs: Any) -> list[CandidateResponse]: ...


def sample_seed(base: int, *parts: Any) -> int:
    """A per-request sampling seed from (run seed, step, prompt, sample, turn): reruns sample the same."""
    h = hashlib.blake2b(repr((base, *parts)).encode(), digest_size=4).digest()
    return int.from_bytes(h, "little")


def prompt_ids(tokenizer: Any, question: str, candidates: Sequence[Candidate], cfg: EnvConfig,
               system_prompt: str | None = None) -> list[int]:
    """The policy's prompt tokens: chat-rendered Router-R1 prompt plus the assistant prefill."""
    text = render_chat(tokenizer, build_prompt(question, candidates, cfg.max_turns or None, cfg.action),
                       system=system_prompt)
    return tokenizer.encode(text + cfg.prefill, add_special_tokens=False)


class RouterEnv:
    """Unrolls Router-R1 trajectories for a batch of dataset items (dicts with ``query``, ``id``)."""

    def __init__(self, cfg: EnvConfig, tokenizer: Any, pool: RoutePool, generate: GenerateFn,
                 system_prompt: str | None = None):
        self.cfg = cfg
        self.tokenizer = tokenizer
        self.pool = pool
        self.generate = generate
        self.system_prompt = system_prompt
        self.candidates = [pool.get(n) for n in pool.names]
        self._replay = {c.name for c in self.candidates if c.backend == "replay"}

    def prompt_ids(self, question: str, candidates: Sequence[Candidate] | None = None) -> list[int]:
        return prompt_ids(self.tokenizer, question, self.candidates if candidates is None else candidates,
                          self.cfg, self.system_prompt)

    def item_candidates(self, item: dict[str, Any]) -> tuple[list[Candidate], dict[str, float]]:
        """The candidates a question may be routed to, and a price factor per name.

        A Router-R1 record's ``candidate_models`` (``[{name, cost, latency}]``), when given, restricts the
        question's routes to those candidates (the prompt lists only them; a route to another is a protocol
        error) and prices them: a route's cost is the pool's cost scaled by ``cost / price_out``, so the
        record's price per 1M output tokens replaces the pool's. Without it: every pool candidate, at the
        pool's prices."""
        refs = item.get("candidate_models")
        if not refs:
            return self.candidates, {}
        by_name = {c.name.lower(): c for c in self.candidates}
        chosen, factor = set(), {}
        for i, ref in enumerate(refs):
            name = str(ref.get("name", "")) if isinstance(ref, dict) else str(getattr(ref, "name", ""))
            c = by_name.get(name.lower())
            if c is None:
                raise ValueError(f"item '{str(item.get('query', ''))[:60]}': candidate_models[{i}].name '{name}' "
                                 f"is not a candidate of the pool {sorted(self.pool.names)}")
            cost = ref.get("cost") if isinstance(ref, dict) else getattr(ref, "cost", None)
            chosen.add(c.name)
            if cost is not None and c.price_out > 0:
                factor[c.name] = float(cost) / c.price_out
        # the pool's order, so a question listing every candidate gets the prompt it always had
        return [c for c in self.candidates if c.name in chosen], factor

    def run(self, items: Sequence[dict[str, Any]], n_samples: int = 1, seed: int = 0, step: int = 0,
            index_offset: int = 0, temperature: float | None = None) -> list[Trajectory]:
        """``n_samples`` trajectories per item, laid out item-major (row ``i * n + j``).

        ``temperature`` overrides the config's (0 for greedy evaluation). An item's ``first_turn`` (text)
        stands in for its first sampled turn, as an observation (``curriculum.no_answer_first_call``); its call asks
        the item's whole question, whatever the written sub-query shows (the policy reads it cut short). An item's
        ``stop_at_call`` (N >= 1) ends its trajectories once their N-th call is written, before that call is
        sent: the route is known and nothing is paid for it (a served cascade's decision)."""
        temp = self.cfg.temperature if temperature is None else temperature
        trajs = []
        allowed: dict[int, list[str]] = {}  # prompt index -> the names its routes may use
        price: dict[int, dict[str, float]] = {}
        for i, item in enumerate(items):
            cands, factor = self.item_candidates(item)
            allowed[index_offset + i], price[index_offset + i] = [c.name for c in cands], factor
            ids = self.prompt_ids(item["query"], cands)
            for j in range(n_samples):
                trajs.append(Trajectory(prompt_index=index_offset + i, sample_index=j, item=dict(item),
                                        tokens=TrajectoryTokens(ids), text=self.cfg.prefill))
        for turn in range(self.cfg.max_turns + 1):
            live = [t for t in trajs if not t.done]
            if not live:
                break
            final = turn == self.cfg.max_turns
            stop = ["</answer>"] if final else ["</search>", "</answer>"]
            # an item's ``first_turn`` is written for the policy: an observation, neither sampled nor learned on
            given = {id(t): self.tokenizer.encode(t.item["first_turn"], add_special_tokens=False)
                     for t in live if turn == 0 and t.item.get("first_turn")}
            sampled = [t for t in live if id(t) not in given]
            specs = [constrained(SamplingSpec(max_tokens=self._budget(t), stop=stop, temperature=temp,
                                              top_p=self.cfg.top_p,
                                              seed=sample_seed(seed, step, t.prompt_index, t.sample_index, turn),
                                              frequency_penalty=self.cfg.greedy_frequency_penalty if temp == 0 else 0.0),
                                 allowed[t.prompt_index] if turn == 0 else (), self.cfg)
                     for t in sampled]
            outs = iter(self.generate([t.tokens.input_ids for t in sampled], specs) if sampled else [])
            pending: list[tuple[Trajectory, str, str]] = []
            infos: dict[int, str] = {}
            replied: set[int] = set()  # trajectories whose information is a candidate's reply
            for t in live:
                t.turns += 1
                if id(t) in given:
                    out_ids = given[id(t)]
                    t.tokens.add_observation(out_ids)
                else:
                    out_ids = next(outs)
                    t.tokens.add_policy(out_ids, getattr(out_ids, "logprobs", None))
                chunk = self.tokenizer.decode(out_ids, skip_special_tokens=True)
                t.text += chunk
                # the prefill opens the first turn (a prefill of "<search>" leaves the policy only the name)
                opened = self.cfg.prefill if turn == 0 and id(t) not in given else ""
                parsed = parse_turn(opened + chunk, allowed[t.prompt_index])
                if parsed.kind == "answer" and parsed.ok:
                    t.answer, t.done = parsed.content, True
                elif final:
                    # the last turn must answer; whatever it wrote instead ends the trajectory unanswered
                    t.answer = extract_answer(t.text)
                    t.protocol_errors += 1
                    t.done = True
                elif parsed.kind == "search" and parsed.ok and parsed.call is not None:
                    model = parsed.call.model
                    # a written first turn's sub-query is the question cut short for the policy to read; the call
                    # asks the question itself, as a replay candidate's does (live candidates included)
                    original = (id(t) in given or not parsed.call.query
                                or (model in self._replay and self.cfg.replay_query == "original"))
                    query = t.item["query"] if original else parsed.call.query
                    t.routes.append(RouteRecord(model=model, query=parsed.call.query))
                    if t.item.get("stop_at_call") and len(t.routes) >= t.item["stop_at_call"]:
                        t.done = True  # the route is what was asked for: this call is not sent
                    else:
                        pending.append((t, model, query))
                elif self.cfg.answer == "reply":
                    # a router's episode is its one route: a malformed one ends it unanswered, with no error
                    # block and no second turn to learn on (they cost a second rollout round and the learner
                    # ~100 positions a row, padded across the row's group)
                    t.protocol_errors += 1
                    t.done = True
                else:
                    t.protocol_errors += 1
                    infos[id(t)] = parsed.error or NO_ROUTE_ERROR
            if pending:
                responses = self._route([(m, q) for _, m, q in pending])
                for (t, model, _), resp in zip(pending, responses):
                    rec = t.routes[-1]
                    rec.prompt_tokens, rec.completion_tokens = resp.prompt_tokens, resp.completion_tokens
                    rec.cost = resp.cost * price[t.prompt_index].get(model, 1.0)
                    rec.correct, rec.error = resp.correct, resp.error
                    if self.cfg.answer == "reply":
                        self._answer_with_reply(t, model, resp)
                    elif resp.ok:
                        infos[id(t)] = resp.text
                        replied.add(id(t))
                    else:
                        t.protocol_errors += 1
                        infos[id(t)] = failed_call_error(model, resp.error or "")
            for t in live:
                if t.done or id(t) not in infos:
                    continue
                block = information_block(infos[id(t)], self.cfg.info_max_chars, self.cfg.mark_no_answer,
                                          reply=id(t) in replied,
                                          last_call=self.cfg.note_last_call and turn + 1 == self.cfg.max_turns)
                t.text += block
                t.tokens.add_observation(self.tokenizer.encode(block, add_special_tokens=False))
                if len(t.tokens) >= self.cfg.max_total_tokens:
                    t.done = True
        return trajs

    def _answer_with_reply(self, t: Trajectory, model: str, resp: CandidateResponse) -> None:
        """``answer: reply``: the call's reply ends the trajectory as its answer (``EnvConfig.answer``). Its text
        gets the information and answer blocks for the reward; its tokens stop at the route."""
        t.done, t.reply_answer = True, True
        if not resp.ok:
            t.protocol_errors += 1
            t.text += information_block(failed_call_error(model, resp.error or ""), self.cfg.info_max_chars,
                                        reply=False)
            return
        if resp.correct is not None:  # a logged outcome grades the reply (by reference: the answer names it)
            t.item["ground_truth"], answer = [REPLY_GOLD], model
        else:
            answer = answer_key(resp.text or "") or (resp.text or "").strip()
        t.text += information_block(resp.text, self.cfg.info_max_chars) + f"<answer>{answer}</answer>"
        t.answer = answer

    def _budget(self, t: Trajectory) -> int:
        return max(1, min(self.cfg.max_new_tokens, self.cfg.max_total_tokens - len(t.tokens)))

    def _route(self, calls: list[tuple[str, str]]) -> list[CandidateResponse]:
        # route_sync keeps one event loop alive across turns, so HTTP clients keep their connections
        if hasattr(self.pool, "route_sync"):
            return self.pool.route_sync(calls, max_tokens=self.cfg.route_max_tokens)
        return asyncio.run(self.pool.route(calls, max_tokens=self.cfg.route_max_tokens))
