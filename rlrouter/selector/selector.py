"""The online bandit selector (vLLM Semantic Router ``rl_driven``), as plain Python without Ray.

One :class:`Selector` holds all the learned state; the Serve app runs exactly one of it inside one
Ray actor, so decisions and updates never race across replicas. The flow reads top to
bottom:

``select``   - one decision: Thompson draw (or epsilon-greedy) on the blended Beta posterior of each
               candidate, or a linear-Thompson draw on the query embedding (``use_contextual``), then
               the cost bonus and the session blend; the argmax wins. The decision is remembered
               under a fresh ``request_id`` for its feedback.
``select_top_k`` / ``select_all`` - multi-round aggregation and arena decisions (several candidates).
``register`` - a decision made elsewhere (the Router-R1 LLM router) so that its feedback still counts.
``resolve_feedback`` - feedback (win/loss/tie, an implicit label with confidence, or a reward) becomes
               a :class:`PosteriorUpdate`: which models gain how much alpha/beta in which scopes.
``commit``   - write-ahead log (fsync) first, then apply: returning means the update is durable.
``save`` / ``load`` - exact snapshots; ``autosave_due`` tells the host when ``auto_save_interval`` has passed.

Every method takes the selector's lock, so a host may call it from several threads.
"""

from __future__ import annotations

import itertools
import random
import secrets
import threading
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from rlrouter.selector import affinity, rules
from rlrouter.selector.config import SelectorConfig
from rlrouter.selector.contextual import LinearThompsonArm, context_vector
from rlrouter.selector.latency import LatencyWindow
from rlrouter.selector.persistence import (
    StateFileError,
    WriteAheadLog,
    encode_state,
    read_snapshot,
    write_snapshot,
)
from rlrouter.selector.rules import Beta
from rlrouter.selector.state import (
    ModelDelta,
    PendingDecision,
    Posterior,
    PosteriorUpdate,
    SelectorState,
    SessionStats,
)

IMPLICIT_LABELS = ("satisfied", "need_clarification", "wrong_answer", "want_different")
# How a follow-up's label reads as an outcome for the model that answered. A request for
# clarification is neither a win nor a loss: it counts as a tie (half a success).
IMPLICIT_OUTCOME = {"satisfied": "win", "need_clarification": "tie", "wrong_answer": "loss",
                    "want_different": "loss"}
MODES = ("thompson", "epsilon_greedy", "contextual", "llm_routing", "multi_round", "arena", "min_samples")
_PRIOR = Beta(1.0, 1.0)


class SelectorError(ValueError):
    """A bad selector call; ``field`` names the offending request field, ``status`` the HTTP code."""

    def __init__(self, field_path: str, message: str, status: int = 422):
        self.field = field_path
        self.status = status
        super().__init__(f"field '{field_path}': {message}")


class UnknownRequest(SelectorError):
    def __init__(self, request_id: str):
        super().__init__("request_id", f"unknown request_id '{request_id}' (never routed, or forgotten)", 404)


class FeedbackConflict(SelectorError):
    def __init__(self, request_id: str):
        super().__init__("request_id", f"feedback for request_id '{request_id}' was already recorded", 409)


@dataclass
class SelectionRequest:
    """What a decision depends on. ``embedding`` is the query's MiniLM vector (contextual mode)."""

    candidates: list[str]
    user_id: str | None = None
    session_id: str | None = None
    category: str | None = None
    embedding: list[float] | np.ndarray | None = None


@dataclass
class Decision:
    """A routing decision. ``models`` lists every model to call (one, or several in multi-round/arena)."""

    request_id: str
    model: str
    mode: str
    scores: dict[str, float]
    models: list[str] = field(default_factory=list)
    explored: bool = False
    detail: dict[str, Any] = field(default_factory=dict)
    propensity: float | None = None
    """The probability that the selector's policy picks ``model`` for this request, as it stood (the
    logging policy's propensity that off-policy estimators weigh by): exact for random and epsilon-greedy
    picks, a Monte Carlo estimate over ``propensity_draws`` posterior draws for Thompson sampling (None when
    that is 0); None for the contextual mode and for several models at once."""
    expected_latency: dict[str, float] | None = None
    """``model``'s measured latency so far (``rlrouter.selector.latency``: ttft_ms, total_ms, calls); None
    before its first measured call."""


class Selector:
    """The rl_driven selector: posteriors per scope, decisions, feedback, persistence."""

    def __init__(self, config: SelectorConfig | None = None, candidates: list[str] | None = None):
        self.config = config or SelectorConfig()
        self.state = SelectorState()
        self.candidates: list[str] = list(candidates or [])
        self._rng = random.Random(self.config.seed)
        # the propensity's own draws: the decisions' random stream stays what it was
        seed = self.config.seed
        self._mc = np.random.default_rng(None if seed is None else [seed, 7])
        self._lock = threading.RLock()
        self._dirty = False
        self._last_save = time.monotonic()
        self._wal: WriteAheadLog | None = None
        self._id_prefix = secrets.token_hex(8)
        self._ids = itertools.count(1)
        self._norm_costs: tuple[int, dict[str, float | None]] = (0, {})
        if self.config.storage_path:
            self._wal = WriteAheadLog(self.config.storage_path + ".wal")
        for m in self.candidates:
            self.state.global_.setdefault(m, Posterior())
        self._known = frozenset(self.candidates) if self.candidates else None
        self.latency: dict[str, LatencyWindow] = {}
        """Each candidate's measured latency (in memory: measured afresh after a restart)."""

    # ------------------------------------------------------------------ posteriors

    def posterior(self, model: str, user_id: str | None = None, category: str | None = None) -> Beta:
        """The blended Beta of ``model`` for this user and category (VSR ``getPreference``)."""
        g = self.state.global_.get(model)
        blended = g.params() if g is not None else _PRIOR
        cfg = self.config
        if cfg.enable_personalization and user_id:
            u = self.state.users.get(user_id, {}).get(model)
            if u is not None:  # no user history: the user scope *is* the global one
                blended = rules.blend(blended, u.params(), cfg.personalization_blend)
        if category:
            c = self.state.categories.get(category, {}).get(model)
            if c is not None:
                blended = rules.blend(blended, c.params(), cfg.category_blend)
        return blended

    def session_win_rate(self, session_id: str | None, model: str) -> float | None:
        if not session_id:
            return None
        st = self.state.sessions.get(session_id, {}).get(model)
        return st.win_rate if st is not None else None

    def exploration_rate(self, selections: int | None = None) -> float:
        cfg = self.config
        n = self.state.selections if selections is None else selections
        return rules.exploration_rate(n, cfg.exploration_rate, cfg.exploration_decay, cfg.min_exploration)

    def _normalised_cost(self, model: str) -> float | None:
        costs = self.config.costs
        key, table = self._norm_costs
        if key != id(costs):  # the config (and its prices) may be replaced by reconfigure()
            table = {m: rules.normalised_cost(m, costs) for m in costs}
            self._norm_costs = (id(costs), table)
        return table.get(model)

    def _adjust(self, model: str, score: float, session_id: str | None) -> float:
        """Cost bonus, then session blend, as VSR applies them to a sampled score."""
        cfg = self.config
        if cfg.cost_awareness and cfg.cost_weight > 0:
            score = rules.cost_bonus(score, self._normalised_cost(model), cfg.cost_weight)
        if cfg.latency_weight > 0 and (w := self.latency.get(model)) is not None and w.calls:
            score -= cfg.latency_weight * w.total_s
        if session_id and cfg.session_context_weight > 0:
            score = rules.session_adjust(score, self.session_win_rate(session_id, model), cfg.session_context_weight)
        return score

    # ------------------------------------------------------------------ decisions

    def _check_request(self, req: SelectionRequest) -> list[str]:
        cands = list(req.candidates) if req.candidates else list(self.candidates)
        if not cands:
            raise SelectorError("candidates", "no candidates: give some or configure the pool")
        if self._known is not None and self._known.issuperset(cands) and len(set(cands)) == len(cands):
            return cands  # the common case, checked in one set operation
        if len(set(cands)) != len(cands):
            raise SelectorError("candidates", f"duplicate names in {cands}")
        for i, c in enumerate(cands):
            if not isinstance(c, str) or not c:
                raise SelectorError(f"candidates[{i}]", "expected a non-empty string")
        if self.candidates:
            unknown = [c for c in cands if c not in self.candidates]
            if unknown:
                raise SelectorError("candidates", f"unknown candidate(s) {unknown}; known: {self.candidates}")
        return cands

    def _context(self, req: SelectionRequest) -> np.ndarray | None:
        if not self.config.use_contextual or req.embedding is None:
            return None
        try:
            return context_vector(req.embedding)
        except ValueError as e:
            raise SelectorError("embedding", str(e)) from None

    def _arm(self, model: str, dim: int) -> LinearThompsonArm:
        arm = self.state.contextual.get(model)
        if arm is None or arm.dim != dim:
            arm = LinearThompsonArm(dim, self.config.contextual_prior)
            self.state.contextual[model] = arm
        return arm

    def _scores(self, cands: list[str], req: SelectionRequest, x: np.ndarray | None,
                sample: bool = True) -> tuple[str, dict[str, float]]:
        """Mode and per-candidate scores: a posterior draw (or mean) after cost and session adjustments."""
        rng = self._rng
        scores: dict[str, float] = {}
        if x is not None:
            noise = self.config.contextual_noise if sample else 0.0
            for m in cands:
                scores[m] = self._adjust(m, self._arm(m, x.size).sample(x, noise, rng), req.session_id)
            return "contextual", scores
        for m in cands:
            p = self.posterior(m, req.user_id, req.category)
            s = rng.betavariate(p.alpha, p.beta) if sample else p.mean
            scores[m] = self._adjust(m, s, req.session_id)
        return ("thompson" if sample else "epsilon_greedy"), scores

    def _remember(self, model: str, mode: str, cands: list[str], req: SelectionRequest,
                  scores: dict[str, float], models: list[str], x: np.ndarray | None,
                  explored: bool = False, detail: dict[str, Any] | None = None,
                  request_id: str | None = None, propensity: float | None = None) -> Decision:
        # unguessable per-process prefix + counter: unique, and ~10x cheaper than uuid4
        rid = request_id or f"{self._id_prefix}{next(self._ids):x}"
        pending = self.state.pending
        pending[rid] = PendingDecision(request_id=rid, model=model, mode=mode, candidates=cands,
                                       user_id=req.user_id, session_id=req.session_id, category=req.category,
                                       created_at=time.time(), models=models, context=x)
        if len(pending) > self.config.max_pending_decisions:
            pending.popitem(last=False)
        self._dirty = True
        return Decision(request_id=rid, model=model, mode=mode, scores=scores, models=models,
                        explored=explored, detail=detail or {}, propensity=propensity,
                        expected_latency=self.expected_latency(model))

    def observe_latency(self, model: str, total_s: float, ttft_s: float | None = None) -> dict[str, Any]:
        """One answered call of ``model`` took ``total_s`` (its first token after ``ttft_s``, when streamed);
        returns ``{model, ttft_ms, total_ms, calls}``, the candidate's expected latency now."""
        with self._lock:
            if self._known is not None and model not in self._known:
                raise SelectorError("model", f"unknown candidate '{model}'; known: {self.candidates}")
            w = self.latency.setdefault(model, LatencyWindow())
            w.observe(float(total_s), ttft_s, self.config.latency_half_life)
            return {"model": model, **(w.expected() or {"ttft_ms": None, "total_ms": None, "calls": 0})}

    def expected_latency(self, model: str) -> dict[str, float] | None:
        w = self.latency.get(model)
        return w.expected() if w is not None else None

    def _within_latency(self, cands: list[str]) -> tuple[list[str], dict[str, Any]]:
        """``cands`` without those whose expected time to first token is over ``max_ttft_ms`` (unmeasured ones
        fit); all of them, said in the detail, when none fits."""
        limit = self.config.max_ttft_ms
        if limit is None:
            return cands, {}
        over = [m for m in cands if (w := self.latency.get(m)) is not None and w.calls and w.ttft_s * 1e3 > limit]
        if not over:
            return cands, {}
        fit = [m for m in cands if m not in over]
        if not fit:
            return cands, {"latency_limit": f"no candidate within max_ttft_ms={limit:g}; all considered"}
        return fit, {"over_max_ttft": over}

    def select(self, req: SelectionRequest) -> Decision:
        """One routing decision (VSR ``Select`` without the LLM router, which the serving layer adds)."""
        with self._lock:
            cands, limited = self._within_latency(self._check_request(req))
            x = self._context(req)
            self.state.selections += 1
            cfg = self.config
            under = self._under_sampled(cands)
            if under:
                model = self._random_candidate(under)
                return self._remember(model, "min_samples", cands, req, {model: 0.5}, [model], x, explored=True,
                                      detail={"min_samples": cfg.min_samples, **limited},
                                      propensity=self._random_share(model, under))
            if x is not None or cfg.use_thompson_sampling:
                mode, scores = self._scores(cands, req, x, sample=True)
                model = max(cands, key=scores.__getitem__)
                return self._remember(model, mode, cands, req, scores, [model], x, detail=limited,
                                      propensity=self._thompson_share(model, cands, req) if x is None else None)
            # epsilon-greedy: explore with probability eps (cheaper candidates first when cost-aware)
            eps = self.exploration_rate(self.state.selections)
            _, means = self._scores(cands, req, None, sample=False)  # no draw: the random stream is untouched
            greedy = max(cands, key=means.__getitem__)
            if self._rng.random() < eps:
                model = self._random_candidate(cands)
                return self._remember(model, "epsilon_greedy", cands, req, {model: 0.5}, [model], x,
                                      explored=True, detail={"epsilon": eps, **limited},
                                      propensity=eps * self._random_share(model, cands) + (1 - eps) * (model == greedy))
            return self._remember(greedy, "epsilon_greedy", cands, req, means, [greedy], x, detail={"epsilon": eps, **limited},
                                  propensity=eps * self._random_share(greedy, cands) + (1 - eps))

    def _random_share(self, model: str, cands: list[str]) -> float:
        """The probability that ``_random_candidate(cands)`` picks ``model``."""
        costs = self.config.costs
        n = len(cands)
        if not self.config.cost_awareness or not costs:
            return 1.0 / n
        ordered = sorted(cands, key=lambda m: costs.get(m, 0.0))
        if n > 2:
            third = ordered[: n // 3]
            return 0.5 * (model in third) / len(third) + 0.5 / n
        return 1.0 / n

    def _thompson_share(self, model: str, cands: list[str], req: SelectionRequest) -> float | None:
        """Monte Carlo estimate of the probability that a Thompson draw ranks ``model`` first: every
        candidate's posterior drawn ``propensity_draws`` times, through the same (affine) cost and session
        adjustments as the decision, from the selector's own second random stream. None when off."""
        k = self.config.propensity_draws
        if k <= 0:
            return None
        draws = np.empty((len(cands), k))
        for i, m in enumerate(cands):
            p = self.posterior(m, req.user_id, req.category)
            lo, hi = self._adjust(m, 0.0, req.session_id), self._adjust(m, 1.0, req.session_id)
            draws[i] = lo + (hi - lo) * self._mc.beta(p.alpha, p.beta, size=k)
        wins = np.bincount(draws.argmax(axis=0), minlength=len(cands))
        return float(wins[cands.index(model)] / k)

    def _under_sampled(self, cands: list[str]) -> list[str]:
        """Candidates with the fewest global feedbacks, when that is below ``min_samples`` (VSR: the
        posterior cannot be exploited before it has seen enough samples); empty otherwise."""
        n = self.config.min_samples
        if n <= 0:
            return []
        counts = {m: (p.interactions if (p := self.state.global_.get(m)) is not None else 0) for m in cands}
        least = min(counts.values())
        return [m for m in cands if counts[m] == least] if least < n else []

    def _random_candidate(self, cands: list[str]) -> str:
        """VSR ``selectRandomModel``: uniform, or half the time from the cheapest third when cost-aware."""
        rng = self._rng
        costs = self.config.costs
        if not self.config.cost_awareness or not costs:
            return cands[rng.randrange(len(cands))]
        ordered = sorted(cands, key=lambda m: costs.get(m, 0.0))
        if len(ordered) > 2 and rng.random() < 0.5:
            return ordered[rng.randrange(len(ordered) // 3)]
        return ordered[rng.randrange(len(ordered))]

    def select_top_k(self, req: SelectionRequest, k: int | None = None) -> Decision:
        """Multi-round aggregation (VSR ``SelectMultiRound``): the top-k candidates by Thompson draw."""
        with self._lock:
            cands, limited = self._within_latency(self._check_request(req))
            x = self._context(req)
            k = min(k or self.config.max_aggregation_rounds, len(cands))
            self.state.selections += 1
            _, scores = self._scores(cands, req, x, sample=True)
            ranked = sorted(cands, key=scores.__getitem__, reverse=True)[:k]
            return self._remember(ranked[0], "multi_round", cands, req, scores, ranked, x, detail=limited)

    def select_all(self, req: SelectionRequest) -> Decision:
        """Arena: every candidate is called; scores are still drawn so aggregation can weigh them."""
        with self._lock:
            cands = self._check_request(req)
            x = self._context(req)
            self.state.selections += 1
            _, scores = self._scores(cands, req, x, sample=True)
            ranked = sorted(cands, key=scores.__getitem__, reverse=True)
            return self._remember(ranked[0], "arena", cands, req, scores, ranked, x)

    def register(self, req: SelectionRequest, model: str, mode: str, detail: dict[str, Any] | None = None,
                 request_id: str | None = None) -> Decision:
        """Remember a decision made outside the bandit (LLM routing, a served router) so its feedback still
        teaches. ``request_id``: the id the decision already has where it was made (a served router that
        learns online keeps its own pending decision under it), so one id reaches both; else a new one."""
        with self._lock:
            cands = self._check_request(req)
            if model not in cands:
                raise SelectorError("model", f"'{model}' is not one of the candidates {cands}")
            if request_id is not None and request_id in self.state.pending:
                raise SelectorError("request_id", f"'{request_id}' is already a pending decision")
            x = self._context(req)
            self.state.selections += 1
            return self._remember(model, mode, cands, req, {model: 1.0}, [model], x, detail=detail,
                                  request_id=request_id)

    def pending(self, request_id: str) -> PendingDecision:
        with self._lock:
            dec = self.state.pending.get(request_id)
            if dec is None:
                raise UnknownRequest(request_id)
            return dec

    def set_chosen(self, request_id: str, model: str) -> None:
        """After aggregation, record which model's answer was returned (feedback applies to it)."""
        with self._lock:
            dec = self.pending(request_id)
            if model not in dec.models:
                raise SelectorError("model", f"'{model}' was not called for request {request_id}")
            dec.model = model

    def stick(self, request_id: str, session_key: str, scores: dict[str, float] | None = None) -> dict[str, Any]:
        """Session affinity (``rlrouter.selector.affinity``) for the one-candidate decision ``request_id`` of
        session ``session_key``: the candidate to call this turn. When the pin overrides the decision,
        feedback applies to the pin, and the propensity is 1 (the pin decides, not a draw)."""
        with self._lock:
            dec = self.pending(request_id)
            if len(dec.models) > 1:
                raise SelectorError("request_id", f"request {request_id} called {len(dec.models)} candidates; "
                                    "session affinity pins one")
            if not isinstance(session_key, str) or not session_key:
                raise SelectorError("session_key", "expected a non-empty string")
            if dec.session_key is not None or dec.feedback_seq is not None:
                raise SelectorError("request_id", f"request {request_id} was already "
                                    + ("pinned" if dec.session_key is not None else "answered"), 409)
            dec.session_key = session_key
            cfg = self.config
            v = affinity.turn(self.state.pins, session_key, dec.model, dec.candidates, scores or {}, time.time(),
                              margin=cfg.affinity_margin, move_on_error=cfg.affinity_move_on_error,
                              ttl_s=cfg.affinity_ttl_s, max_sessions=cfg.max_affinity_sessions)
            dec.model, dec.models = v.model, [v.model]
            self._dirty = True
            return {**v.as_dict(), "expected_latency": self.expected_latency(v.model)}

    def affinity_error(self, session_key: str, model: str) -> bool:
        """The call to ``model`` for ``session_key`` failed: its next turn may move (``affinity_move_on_error``)."""
        with self._lock:
            marked = affinity.mark_error(self.state.pins, session_key, model)
            self._dirty = self._dirty or marked
            return marked

    # ------------------------------------------------------------------ feedback

    def resolve_feedback(self, request_id: str, *, outcome: str | None = None, label: str | None = None,
                         confidence: float | None = None, reward: float | None = None,
                         winner: str | None = None, detail: dict[str, Any] | None = None) -> PosteriorUpdate:
        """Turn one feedback into the update it implies, without applying it.

        Exactly one of ``outcome`` (explicit, weight 1), ``label`` + ``confidence`` (implicit, weight
        implicit_feedback_weight * confidence) or ``reward`` (fractional win, weight 1) is given. For
        multi-round and arena decisions, ``winner`` names the best answer: it wins, the others lose.
        """
        given = [n for n, v in (("outcome", outcome), ("followup_text", label), ("reward", reward)) if v is not None]
        if len(given) != 1:
            raise SelectorError("outcome", "give exactly one of outcome, followup_text or reward"
                                f" (got {given or 'none'})")
        with self._lock:
            dec = self.pending(request_id)
            if dec.feedback_seq is not None:
                raise FeedbackConflict(request_id)
            cfg = self.config
            weight = 1.0
            kind = "outcome"
            info: dict[str, Any] = dict(detail or {})
            if label is not None:
                if label not in IMPLICIT_OUTCOME:
                    raise SelectorError("label", f"expected one of {IMPLICIT_LABELS}, got {label!r}")
                conf = 1.0 if confidence is None else float(confidence)
                if not 0.0 <= conf <= 1.0:
                    raise SelectorError("confidence", f"must be in [0, 1], got {conf}")
                kind, outcome = "implicit", IMPLICIT_OUTCOME[label]
                weight = cfg.implicit_feedback_weight * conf
                info.update(label=label, confidence=conf)
            if outcome is not None and outcome not in rules.OUTCOMES:
                raise SelectorError("outcome", f"expected one of {rules.OUTCOMES}, got {outcome!r}")
            deltas: list[ModelDelta] = []
            if reward is not None:
                if not cfg.use_router_r1_rewards:
                    raise SelectorError("reward", "reward feedback is off (use_router_r1_rewards: false)")
                try:
                    da, db = rules.reward_delta(float(reward), weight)
                except (TypeError, ValueError) as e:
                    raise SelectorError("reward", str(e)) from None
                r = min(1.0, max(0.0, float(reward)))
                kind = "reward"
                info["reward"] = float(reward)
                deltas.append(ModelDelta(dec.model, da, db, r, r, weight))
            elif winner is not None:
                if winner not in dec.models:
                    raise SelectorError("winner", f"'{winner}' was not called for this request; called: {dec.models}")
                if len(dec.models) < 2:
                    raise SelectorError("winner", "only multi-round and arena decisions have a winner")
                for m in dec.models:
                    o = "tie" if outcome == "tie" else ("win" if m == winner else "loss")
                    deltas.append(self._outcome_delta(m, o, weight))
            else:
                deltas.append(self._outcome_delta(dec.model, outcome, weight))
            return PosteriorUpdate(
                request_id=request_id, kind=kind, deltas=deltas,
                user_id=dec.user_id if cfg.enable_personalization else None,
                category=dec.category, session_id=dec.session_id, context=dec.context, detail=info)

    @staticmethod
    def _outcome_delta(model: str, outcome: str, weight: float) -> ModelDelta:
        da, db = rules.outcome_delta(outcome, weight)
        # session win rate counts wins only (VSR: a tie is a selection without a success)
        success = 1.0 if outcome == "win" else 0.0
        target = {"win": 1.0, "loss": 0.0, "tie": 0.5}[outcome]
        return ModelDelta(model, da, db, success, target, weight)

    def commit(self, update: PosteriorUpdate) -> int:
        """Log (fsync) then apply. When this returns, the update survives a crash. Returns its seq."""
        with self._lock:
            dec = self.state.pending.get(update.request_id)
            if dec is not None and dec.feedback_seq is not None:
                raise FeedbackConflict(update.request_id)
            seq = self.state.wal_seq + 1
            if self._wal is not None:
                self._wal.append(seq, update)
            self._apply(seq, update)
            return seq

    def feedback(self, request_id: str, **kwargs: Any) -> PosteriorUpdate:
        """resolve_feedback + commit."""
        with self._lock:
            update = self.resolve_feedback(request_id, **kwargs)
            self.commit(update)
            return update

    def _apply(self, seq: int, u: PosteriorUpdate) -> None:
        st = self.state
        implicit = u.kind == "implicit"
        scopes = [st.global_]
        if u.user_id:
            scopes.append(st.users.setdefault(u.user_id, {}))
        if u.category:
            scopes.append(st.categories.setdefault(u.category, {}))
        for d in u.deltas:
            for scope in scopes:
                p = scope.get(d.model)
                if p is None:
                    p = scope[d.model] = Posterior()
                p.alpha += d.d_alpha
                p.beta += d.d_beta
                p.interactions += 1
                if implicit:
                    p.implicit += 1
                else:
                    p.explicit += 1
            if u.session_id:
                ss = st.sessions.setdefault(u.session_id, {}).setdefault(d.model, SessionStats())
                ss.selections += 1.0
                ss.successes += d.session_success
            if u.context is not None:
                self._arm(d.model, u.context.size).update(u.context, d.target, d.weight)
        dec = st.pending.get(u.request_id)
        if dec is not None:
            dec.feedback_seq = seq
        st.wal_seq = max(st.wal_seq, seq)
        st.feedback_count += 1
        self._dirty = True

    # ------------------------------------------------------------------ persistence

    def load(self) -> int:
        """Read the snapshot and replay the log after it. Returns the number of replayed entries.

        A corrupt or foreign file raises :class:`StateFileError` after moving it aside.
        """
        if not self.config.storage_path:
            return 0
        with self._lock:
            snap = read_snapshot(self.config.storage_path)
            if snap is not None:
                self.state = snap
            for m in self.candidates:
                self.state.global_.setdefault(m, Posterior())
            replayed = 0
            assert self._wal is not None
            for seq, update in self._wal.read():
                if seq <= self.state.wal_seq:
                    continue  # already inside the snapshot
                self._apply(seq, update)
                replayed += 1
            if replayed:
                self.save()
            self._dirty = False
            return replayed

    def save(self) -> None:
        """Atomic snapshot of the exact state, then an empty log (every entry is in the snapshot)."""
        if not self.config.storage_path:
            return
        with self._lock:
            write_snapshot(self.config.storage_path, encode_state(self.state))
            if self._wal is not None:
                self._wal.reset()
            self._dirty = False
            self._last_save = time.monotonic()

    def autosave_due(self, now: float | None = None) -> bool:
        """True when there are unsaved changes and ``auto_save_interval`` has passed since the last save."""
        if not self.config.storage_path or not self._dirty:
            return False
        now = time.monotonic() if now is None else now
        return now - self._last_save >= self.config.auto_save_interval

    def maybe_save(self, now: float | None = None) -> bool:
        if self.autosave_due(now):
            self.save()
            return True
        return False

    def close(self) -> None:
        with self._lock:
            if self._dirty:
                self.save()
            if self._wal is not None:
                self._wal.close()

    # ------------------------------------------------------------------ introspection

    def stats(self, user_id: str | None = None, all_users: bool = False) -> dict[str, Any]:
        """Posteriors per scope: global, categories, and the given user's (or every user's)."""
        with self._lock:
            def scope(d: dict[str, Posterior]) -> dict[str, Any]:
                return {m: {"alpha": p.alpha, "beta": p.beta, "mean": p.params().mean,
                            "interactions": p.interactions, "explicit": p.explicit, "implicit": p.implicit}
                        for m, p in sorted(d.items())}

            st = self.state
            users = st.users if all_users else ({user_id: st.users[user_id]} if user_id in st.users else {})
            out: dict[str, Any] = {
                "selections": st.selections,
                "feedback": st.feedback_count,
                "exploration_rate": self.exploration_rate(),
                "mode": ("contextual" if self.config.use_contextual else
                         "thompson" if self.config.use_thompson_sampling else "epsilon_greedy"),
                "global": scope(st.global_),
                "categories": {c: scope(v) for c, v in sorted(st.categories.items())},
                "users": {u: scope(v) for u, v in sorted(users.items())},
                "pending_decisions": len(st.pending),
                "contextual": {m: {"dim": a.dim, "updates": a.n} for m, a in sorted(st.contextual.items())},
                "affinity": {"enabled": self.config.session_affinity, **affinity.summary(st.pins)},
                "latency": {m: w.expected() for m, w in sorted(self.latency.items())},
            }
            return out


__all__ = ["Selector", "SelectionRequest", "Decision", "SelectorError", "UnknownRequest", "FeedbackConflict",
           "StateFileError", "IMPLICIT_LABELS", "IMPLICIT_OUTCOME", "MODES"]
