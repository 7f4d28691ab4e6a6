"""Adapters that put trained routers behind the evaluation ``Router`` interface.

* ``selector``: the online bandit selector (``rlrouter.selector``). ``fit`` warms it up on the training
  split *as a bandit*: for each training prompt it selects a candidate and gets feedback (win/loss)
  for that candidate only, exactly what it would see in production. A saved state
  (``storage_path``) can be loaded instead of, or before, the warm-up. On the test split its
  decisions are those of the policy at the end of warm-up (Thompson draws, so stochastic; seeded).
* ``intent``: an intent classifier and a category -> candidate map. ``category_map: auto`` learns the
  map with a cost-aware rule: the weak candidate serves a category when its training-split quality loss
  there is below ``lam`` times the price saved; lam is the router's threshold, so a sweep gives a curve.

* ``gmtrouter``: a GMTRouter checkpoint (``rlrouter.gmt``) as a threshold router: how much it prefers
  the strong candidate is its logit for strong minus its logit for weak. Logged outcomes carry no
  user ids, so every prompt is scored for a user with no history (the cold-start user, the k = 0 point
  of GMTRouter's few-shot curve) unless ``user_id`` names a user of the checkpoint's graph. Prompts are
  encoded as new query nodes by default (``graph_queries: false``), so ratings the training logs hold
  on a test question never reach its score.
* ``router_r1``: a Router-R1 policy (``checkpoint``: a training checkpoint, or ``base`` for the
  untrained base policy): the candidate its first ``<search>`` names.
"""

from __future__ import annotations

from typing import Any, Callable, Mapping, Sequence

import numpy as np

from rlrouter.routers.reader import EvalSet
from rlrouter.routers.base import Router, RouterContext, ThresholdRouter, _import_attr, register_router


class SelectorRouter(Router):
    """The bandit selector as a router (see module docstring)."""

    def __init__(self, name: str, candidates: list[str], config: Mapping[str, Any] | None,
                 embed: Callable[[list[str]], np.ndarray] | None, warmup: bool = True,
                 warmup_max: int = 0, seed: int = 0, prices: Mapping[str, float] | None = None,
                 online: bool = False):
        from rlrouter.selector import Selector, SelectorConfig

        cfg = dict(config or {})
        cfg.setdefault("seed", seed)
        if prices and "costs" not in cfg:
            cfg["costs"] = dict(prices)  # cost awareness reads USD per 1M tokens
        self.config = SelectorConfig.from_dict(cfg)
        self.selector = Selector(self.config, candidates=list(candidates))
        if self.config.storage_path:
            self.selector.load()
        self.name = name
        self.candidates = list(candidates)
        self.embed = embed if self.config.use_contextual else None
        self.warmup = warmup
        self.warmup_max = warmup_max
        self.seed = seed
        self.warmup_reward = float("nan")
        self.online = online

    def _requests(self, prompts: list[str]):
        from rlrouter.selector import SelectionRequest

        emb = self.embed(prompts) if self.embed is not None else None
        for i in range(len(prompts)):
            yield SelectionRequest(candidates=self.candidates, embedding=None if emb is None else emb[i])

    def _bandit_pass(self, data: EvalSet, order: np.ndarray) -> np.ndarray:
        """Select for each prompt of ``order`` in turn and feed back the chosen candidate's logged
        outcome only (bandit feedback); returns the chosen candidate per row of ``order``."""
        prompts = [data.prompts[i] for i in order]
        chosen = np.empty(len(order), dtype=np.int64)
        for k, (i, req) in enumerate(zip(order, self._requests(prompts))):
            dec = self.selector.select(req)
            j = self.candidates.index(dec.model)
            chosen[k] = j
            s = float(data.scores[i, j])
            # a logged score in (0, 1) is a graded answer: >= 0.5 reads as a win (ties at exactly 0.5)
            outcome = "win" if s > 0.5 else ("tie" if s == 0.5 else "loss")
            self.selector.feedback(dec.request_id, outcome=outcome)
        return chosen

    def fit(self, train: EvalSet) -> None:
        if not self.warmup:
            return
        order = np.random.default_rng(self.seed).permutation(len(train))
        if self.warmup_max > 0:
            order = order[: self.warmup_max]
        chosen = self._bandit_pass(train, order)
        self.warmup_reward = float(train.scores[order, chosen].mean()) if len(order) else float("nan")

    def replay(self, test: EvalSet) -> np.ndarray:
        """``online: false``: frozen decisions. ``online: true``: the held-out stream (a seeded shuffle of
        the test split) is served in turn, each decision's logged outcome fed back before the next, so
        the selector keeps learning on subjects it never saw."""
        if not self.online:
            return self.decide(test.prompts)
        order = np.random.default_rng(self.seed + 1).permutation(len(test))
        out = np.empty(len(test), dtype=np.int64)
        out[order] = self._bandit_pass(test, order)
        self.stream_order = order
        return out

    def objective(self, scores: np.ndarray) -> np.ndarray:
        """(N, M) the selector's own per-decision objective: the score times its cost bonus
        (``rules.cost_bonus``), the quantity its regret is measured in."""
        from rlrouter.selector import rules

        cfg = self.config
        out = np.array(scores, dtype=np.float64)
        if cfg.cost_awareness and cfg.cost_weight > 0 and cfg.costs:
            for j, m in enumerate(self.candidates):
                out[:, j] = [rules.cost_bonus(x, rules.normalised_cost(m, cfg.costs), cfg.cost_weight) for x in out[:, j]]
        return out

    def decide(self, prompts: list[str]) -> np.ndarray:
        out = np.empty(len(prompts), dtype=np.int64)
        for k, req in enumerate(self._requests(prompts)):
            out[k] = self.candidates.index(self.selector.select(req).model)
        # evaluation decisions are never given feedback: drop them so they are not kept as pending
        self.selector.state.pending.clear()
        return out


class CategoryMapRouter(Router):
    """Route by the category an intent classifier gives each prompt, through a given map."""

    def __init__(self, name: str, classify: Callable[[list[str]], Sequence[str]], category_map: Mapping[str, int],
                 default: int):
        self.name = name
        self.classify = classify
        self.category_map = dict(category_map)
        self.default = default

    def decide(self, prompts: list[str]) -> np.ndarray:
        return np.array([self.category_map.get(c, self.default) for c in self.classify(prompts)], dtype=np.int64)


class CostAwareCategoryRouter(ThresholdRouter):
    """An intent classifier with a category map learned by a cost-aware rule.

    For each category c, with the training-split quality q and mean cost (USD per 1,000 prompts) of the
    two candidates there, the weak candidate serves c when its quality loss is below ``lam`` times the
    price saved: ``q_strong(c) - q_weak(c) < lam * (cost_strong(c) - cost_weak(c))``, i.e. the candidate
    with the higher ``q - lam * cost``. As a threshold router a prompt's score is its category's loss per
    dollar saved, ``(q_strong - q_weak) / (cost_strong - cost_weak)``, and lam is the threshold: sweeping
    it moves categories to the weak candidate in order of how little they lose per dollar, which gives a
    cost-quality curve and an APGR. Categories the training split never showed go to ``default``.
    """

    def __init__(self, name: str, classify: Callable[[list[str]], Sequence[str]], default: int, weak: int,
                 strong: int, lam: float = 0.05):
        if lam < 0:
            raise ValueError(f"intent.lam: must be >= 0, got {lam}")
        super().__init__(name, weak, strong, threshold=lam)
        self.classify = classify
        self.default = default
        self.score_of: dict[str, float] = {}  # category -> loss per USD saved per 1,000 prompts

    def fit(self, train: EvalSet) -> None:
        cats = np.array(list(self.classify(train.prompts)))
        self.score_of = {}
        for c in sorted(set(cats.tolist())):
            rows = cats == c
            q = train.scores[rows].mean(axis=0)
            cost = 1000.0 * train.costs[rows].mean(axis=0)
            loss, saved = q[self.strong] - q[self.weak], cost[self.strong] - cost[self.weak]
            self.score_of[c] = float(loss / saved) if saved > 0 else (np.inf if loss > 0 else -np.inf)

    @property
    def lam(self) -> float:
        return self.threshold

    @property
    def category_map(self) -> dict[str, int]:
        """The map at the current lam."""
        return {c: self.strong if v >= self.lam else self.weak for c, v in self.score_of.items()}

    def strong_score(self, prompts: list[str]) -> np.ndarray:
        unseen = np.inf if self.default == self.strong else -np.inf
        return np.array([self.score_of.get(c, unseen) for c in self.classify(prompts)])


@register_router("selector")
def _build_selector(cfg: dict[str, Any], ctx: RouterContext) -> Router:
    # cost awareness ranks candidates by price: the input price per 1M tokens stands for it
    prices = {c.name: c.price_in for c in ctx.train.candidates}
    router = SelectorRouter("selector", ctx.candidates, cfg.pop("config", None), ctx.embed,
                            warmup=bool(cfg.pop("warmup", True)), warmup_max=int(cfg.pop("warmup_max", 0)),
                            seed=ctx.seed, prices=prices if cfg.pop("cost_aware_prices", True) else None,
                            online=bool(cfg.pop("online", False)))
    _no_leftovers(cfg, "selector")
    return router


@register_router("intent")
def _build_intent(cfg: dict[str, Any], ctx: RouterContext) -> Router:
    """``checkpoint``: a saved intent classifier (``rlrouter.intent``); or ``classifier``:
    'module:callable' mapping a list of prompts to a list of category names."""
    if cfg.get("checkpoint"):
        from rlrouter.intent.model import IntentClassifier

        clf = IntentClassifier.load(cfg.pop("checkpoint"))

        def classify(prompts: list[str]) -> list[str]:
            return [label for label, _ in clf.classify(prompts)]
    elif cfg.get("classifier"):
        classify = _import_attr(cfg.pop("classifier"))
    else:
        raise ValueError("router type 'intent': set checkpoint (a saved intent classifier) or classifier")
    raw_map = cfg.pop("category_map", "auto")
    default = ctx.index(cfg.pop("default", "strong"), "default")
    if "tolerance" in cfg:
        raise ValueError("router type 'intent': 'tolerance' was replaced by the cost-aware 'lam': the weak "
                         "candidate serves a category when its quality loss there is below lam x the USD saved per 1k prompts")
    router: Router
    if raw_map == "auto":
        router = CostAwareCategoryRouter("intent", classify, default, ctx.weak, ctx.strong, lam=float(cfg.pop("lam", 0.05)))
    else:
        cfg.pop("lam", None)
        cmap = {k: ctx.index(v, f"category_map.{k}") for k, v in dict(raw_map).items()}
        router = CategoryMapRouter("intent", classify, cmap, default)
    _no_leftovers(cfg, "intent")
    return router


class GMTRouterAdapter(ThresholdRouter):
    """A GMTRouter scorer as a two-candidate threshold router (see the module docstring).

    ``scorer.score_batch(prompts, user_id=..., query_x=..., graph_queries=...) -> (N, L)`` logits over
    ``scorer.llms``; ``llm_of`` maps the eval set's weak and strong candidates to llm node names.
    ``strong_score`` is logit(strong) - logit(weak), so the default threshold 0 routes each prompt to
    the candidate GMTRouter ranks first (ties to strong).
    """

    def __init__(self, name: str, scorer: Any, weak: int, strong: int, llm_of: Mapping[int, str],
                 embed: Callable[[list[str]], np.ndarray] | None = None, user_id: str | None = None,
                 graph_queries: bool = False, threshold: float = 0.0):
        super().__init__(name, weak, strong, threshold)
        llms = list(scorer.llms)
        missing = {i: m for i, m in llm_of.items() if m not in llms}
        if missing:
            raise ValueError(f"router.llm_map: {sorted(missing.values())} are not llm nodes of the GMTRouter "
                             f"checkpoint {llms}")
        self.scorer = scorer
        self.col_weak, self.col_strong = llms.index(llm_of[weak]), llms.index(llm_of[strong])
        self.embed = embed
        self.user_id = user_id
        self.graph_queries = graph_queries

    def strong_score(self, prompts: list[str]) -> np.ndarray:
        if not prompts:
            return np.zeros(0)
        x = self.embed(prompts) if self.embed is not None else None
        s = np.asarray(self.scorer.score_batch(prompts, user_id=self.user_id, query_x=x,
                                               graph_queries=self.graph_queries))  # (N, L)
        return s[:, self.col_strong] - s[:, self.col_weak]


@register_router("gmtrouter")
def _build_gmtrouter(cfg: dict[str, Any], ctx: RouterContext) -> Router:
    """``checkpoint``: a GMTRouter checkpoint folder (``<train_gmtrouter output>/checkpoint``);
    ``user_id``: a user of its graph (null: the cold-start user); ``graph_queries``; ``threshold``;
    ``llm_map``: eval candidate name -> llm node name where they differ."""
    from rlrouter.gmt.scorer import GMTRouterScorer

    if not cfg.get("checkpoint"):
        raise ValueError("router type 'gmtrouter': checkpoint is required (<train_gmtrouter output_dir>/checkpoint)")
    scorer = GMTRouterScorer.load(cfg.pop("checkpoint"))
    llm_map = dict(cfg.pop("llm_map", None) or {})
    llm_of = {i: llm_map.get(ctx.candidates[i], ctx.candidates[i]) for i in (ctx.weak, ctx.strong)}
    user_id = cfg.pop("user_id", None)
    # the eval job's embedder is the same MiniLM the checkpoint was built with, and disk-cached
    embed = ctx.embed if scorer.config.get("embedding_model", "minilm-l6") == "minilm-l6" else None
    router = GMTRouterAdapter("gmtrouter", scorer, ctx.weak, ctx.strong, llm_of, embed=embed,
                              user_id=None if user_id is None else str(user_id),
                              graph_queries=bool(cfg.pop("graph_queries", False)),
                              threshold=float(cfg.pop("threshold", 0.0)))
    _no_leftovers(cfg, "gmtrouter")
    return router


class PolicyRouter(Router):
    """A Router-R1 policy as an evaluation router: the candidate its first ``<search>`` names.

    ``route_batch(prompts) -> [{selected_model}]`` is a ``RouterR1Policy`` (vLLM on a checkpoint).
    Pool names map to the eval set's candidates through ``name_map``; a policy that routes nowhere
    (answers directly or writes a malformed call) gets ``default``.
    """

    def __init__(self, name: str, policy: Any, candidates: list[str], name_map: Mapping[str, str], default: int):
        self.escalated: int | None = None
        self.paid_calls: list[list[int]] | None = None
        self.name = name
        self.policy = policy
        self.candidates = candidates
        self.name_map = dict(name_map)
        self.default = default
        self.unrouted = 0
        self.routes: dict[str, int] = {}

    def decide(self, prompts: list[str]) -> np.ndarray:
        out = np.full(len(prompts), self.default, dtype=int)
        self.unrouted = 0
        self.routes = {}
        self.escalated = None
        self.paid_calls = None
        for i, answer in enumerate(self.policy.route_batch(prompts)):
            if "escalated" in answer:  # a cascade's second stage: did it call another after the cheap reply
                self.escalated = (self.escalated or 0) + int(bool(answer["escalated"]))
            if "calls" in answer:  # a cascade pays for every call it made, the cheap one included
                if self.paid_calls is None:
                    self.paid_calls = [[] for _ in prompts]
                mapped = (self.name_map.get(m, m) for m in answer["calls"])
                self.paid_calls[i] = [self.candidates.index(m) for m in mapped if m in self.candidates]
            model = answer.get("selected_model")
            self.routes[model or "none"] = self.routes.get(model or "none", 0) + 1
            target = self.name_map.get(model, model) if model else None
            if target in self.candidates:
                out[i] = self.candidates.index(target)
            else:
                self.unrouted += 1
        return out

    def report(self) -> dict[str, Any]:
        """What the policy named on the last batch ("none": no call) and how many fell to ``default``; for a
        cascade's second stage, how many escalated past the written cheap call (each of those also paid
        for the cheap call: the eval job prices every call of ``paid_calls`` as ``cost_mean_all_calls``)."""
        out = {"policy_routes": dict(self.routes), "unrouted": self.unrouted}
        if self.escalated is not None:
            out["escalated"] = self.escalated
        return out


class EscalationOddsRouter(ThresholdRouter):
    """A cascade-shaped Router-R1 policy's log-odds of escalating after the cheap reply
    (``RouterR1Policy.escalation_odds``) as a strong score: a threshold cuts it at any share of strong calls, as
    RouteLLM's routers are cut. Every prompt pays the cheap call the score reads (``reads_weak_reply``: the eval
    job prices it as ``cost_mean_all_calls``). A turn with no decision point scores by what greedy decoding did
    (+/- ``NO_ODDS``). Threshold 0: the more likely of the two words, about the policy's own greedy choice."""

    NO_ODDS = 1e3
    reads_weak_reply = True

    def __init__(self, name: str, policy: Any, weak: int, strong: int, threshold: float = 0.0):
        super().__init__(name, weak, strong, threshold)
        self.policy = policy
        self.info: dict[str, int] = {}

    def strong_score(self, prompts: list[str]) -> np.ndarray:
        if not prompts:
            return np.zeros(0)
        rows = self.policy.escalation_odds(prompts)
        self.info = {"escalated_greedy": sum(bool(r["escalated"]) for r in rows),
                     "no_decision_point": sum(r["odds"] is None for r in rows)}
        return np.array([r["odds"] if r["odds"] is not None else (self.NO_ODDS if r["escalated"] else -self.NO_ODDS)
                         for r in rows], dtype=np.float64)

    def report(self) -> dict[str, Any]:
        """On the last scored batch: how many the policy's greedy episode escalated, and how many turns had no
        decision point to read."""
        return dict(self.info)


@register_router("router_r1")
def _build_router_r1(cfg: dict[str, Any], ctx: RouterContext) -> Router:
    """``checkpoint``: a Router-R1 training checkpoint; ``pool``: the pool config it was trained with
    (its replay candidates' ``options.model`` name their logged column); ``base_model``; ``default``;
    ``first_call``: ``auto`` (what the checkpoint's run evaluated: ``eval.first_call_written``), ``written``
    (each episode starts after a written call to the cheapest candidate and the route is the last candidate
    the policy called: a cascade's second stage) or ``policy`` (the candidate the policy's first turn names);
    ``score``: ``route`` (the candidate it calls) or ``escalation`` (a cascade's second stage as a threshold router
    on its log-odds of escalating after the cheap reply, ``EscalationOddsRouter``); ``until`` (a cascade):
    ``answer`` (default: the whole episode, as its run evaluated it) or ``route`` (stop at the call after the cheap
    reply, unsent: ``RouterR1Policy``)."""
    from rlrouter.pool import read_pool_config
    from rlrouter.rollout.policy import RouterR1Policy, check_until, resolve_first_call

    if not cfg.get("checkpoint"):
        raise ValueError("router type 'router_r1': checkpoint is required (outputs/<run>/checkpoints/step_N, "
                         "or 'base' for the untrained base policy)")
    pool = read_pool_config(cfg.pop("pool", "conf/pool/routellm_replay.yaml"), where="router type 'router_r1': pool")
    name_map = {c["name"]: (c.get("options") or {}).get("model", c["name"]) for c in pool["candidates"]}
    checkpoint = cfg.pop("checkpoint")
    written, query_words = resolve_first_call(None if checkpoint == "base" else checkpoint,
                                              cfg.pop("first_call", "auto"), "router type 'router_r1': first_call")
    score = cfg.pop("score", "route")
    until = check_until(cfg.pop("until", "answer"), "router type 'router_r1': until")
    if score not in ("route", "escalation"):
        raise ValueError(f"router type 'router_r1': score must be 'route' or 'escalation', got {score!r}")
    if score == "escalation" and not written:
        raise ValueError("router type 'router_r1': score 'escalation' reads the policy's choice after the cheap reply; "
                         "it needs a cascade-shaped checkpoint (eval.first_call_written in its run) or "
                         "first_call: written")
    policy = RouterR1Policy(None if checkpoint == "base" else checkpoint, cfg.pop("base_model", "smollm2-135m-instruct"),
                            pool["candidates"], env=cfg.pop("env", None), pool=pool if written else None,
                            first_call_written=written, query_words=query_words, until=until)
    if score == "escalation":
        cfg.pop("default", None)  # every prompt gets a score: nothing falls to a default
        if name_map.get(policy.cheap, policy.cheap) != ctx.candidates[ctx.weak]:
            raise ValueError(f"router type 'router_r1': score 'escalation' needs the pool's cheapest candidate "
                             f"({policy.cheap}) to be the eval set's weak one ({ctx.candidates[ctx.weak]})")
        router: Router = EscalationOddsRouter("router_r1", policy, ctx.weak, ctx.strong)
    else:
        router = PolicyRouter("router_r1", policy, ctx.candidates, name_map,
                              default=ctx.index(cfg.pop("default", "weak"), "default"))
    _no_leftovers(cfg, "router_r1")
    return router


def _no_leftovers(cfg: dict[str, Any], type_name: str) -> None:
    if cfg:
        raise ValueError(f"router type '{type_name}': unknown fields {sorted(cfg)}")
