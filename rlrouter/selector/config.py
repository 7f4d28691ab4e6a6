"""The online selector's configuration: the vLLM Semantic Router ``rl_driven`` fields and defaults.

Every field of VSR's ``RLDrivenConfig`` that its rl_driven documentation page lists exists here with that
page's default (``session_context_weight`` is 0.5 as the page gives it; VSR's code ships 0.3), and the
page's YAML block loads as printed: :meth:`SelectorConfig.from_vsr` takes ``algorithm: {type: rl_driven,
rl_driven: {...}}`` or a ``decisions:`` list holding one (VSR's integration YAML). A few fields go beyond VSR and
say so: the contextual linear Thompson sampler (``use_contextual`` and its priors), the Router-R1
HTTP timeout, the category blend and the bound on pending decisions. Validation names the field.
"""

from __future__ import annotations

import math
import re
from dataclasses import asdict, dataclass, field, fields
from typing import Any


class SelectorConfigError(ValueError):
    """A selector config field is invalid; ``field`` names it."""

    def __init__(self, field_path: str, message: str):
        self.field = field_path
        self.message = message
        super().__init__(f"selector config field '{field_path}': {message}")


_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h)?\s*$")
_UNITS = {"ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0, None: 1.0}


def parse_duration(value: Any, field_path: str) -> float:
    """Seconds from a number or a Go-style duration string ("30s", "500ms", "2m")."""
    if isinstance(value, bool):
        raise SelectorConfigError(field_path, f"expected seconds or a duration like '30s', got {value!r}")
    if isinstance(value, (int, float)):
        seconds = float(value)
    elif isinstance(value, str) and (m := _DURATION.match(value)):
        seconds = float(m.group(1)) * _UNITS[m.group(2)]
    else:
        raise SelectorConfigError(field_path, f"expected seconds or a duration like '30s', got {value!r}")
    if not math.isfinite(seconds) or seconds < 0:
        raise SelectorConfigError(field_path, f"must be >= 0 seconds, got {value!r}")
    return seconds


@dataclass
class SelectorConfig:
    """Knobs of the rl_driven selector. Defaults are VSR's documented ones, except where noted."""

    # --- exploration (VSR) ---
    use_thompson_sampling: bool = True
    """Thompson sampling on Beta posteriors; when false, epsilon-greedy on posterior means."""
    exploration_rate: float = 0.3
    """Initial epsilon of epsilon-greedy."""
    exploration_decay: float = 0.99
    """epsilon = max(min_exploration, exploration_rate * exploration_decay ** (selections / 100))."""
    min_exploration: float = 0.05
    """Floor of epsilon, so a drifting candidate is still re-tried."""

    # --- personalization and session (VSR) ---
    enable_personalization: bool = True
    """Keep per-user posteriors and blend them with the global one."""
    personalization_blend: float = 0.7
    """b in alpha = (1 - b) alpha_global + b alpha_user (same for beta)."""
    category_blend: float = 0.3
    """Blend weight of the category (query intent) scope, applied after the user blend (VSR uses 0.3)."""
    session_context_weight: float = 0.5
    """w in score = (1 - w) score + w * session win rate (VSR's documentation: 0.5; its code ships 0.3)."""

    # --- latency (beyond VSR: rlrouter.selector.latency) ---
    latency_weight: float = 0.0
    """score -= latency_weight x the candidate's expected total seconds (its measured latency, a decaying
    mean); 0: latency does not enter the score (it is still measured and reported)."""
    max_ttft_ms: float | None = None
    """A candidate whose expected time to first token is above this is not chosen while another fits (a
    session pinned to it moves: ``unavailable``); None: no limit."""
    latency_half_life: int = 20
    """Calls after which a measured latency weighs half in a candidate's expected latency."""

    # --- session affinity (beyond VSR: rlrouter.selector.affinity) ---
    session_affinity: bool = False
    """A conversation (``session_id``, or the opening of ``messages``) keeps the candidate its first routed turn
    chose, unless the pin cannot answer, its last call failed, or ``affinity_margin`` lets it move."""
    affinity_margin: float | None = None
    """A later turn moves when its decision scores another candidate this much above the pin; None: never
    for score (only when the pin is unavailable or failed)."""
    affinity_move_on_error: bool = True
    """The turn after a failed call to the pin decides afresh."""
    affinity_ttl_s: float = 3600.0
    """A session unseen this long is forgotten (its next turn is a new session). Seconds or '30m'."""
    max_affinity_sessions: int = 100_000
    """Pins kept; past it the least recently seen session is forgotten first."""

    # --- feedback (VSR) ---
    implicit_feedback_weight: float = 0.5
    """An implicit (follow-up text) label updates the posterior with weight w * classifier confidence."""
    cost_awareness: bool = True
    """Multiply scores by 1 + (1 - normalised cost) * cost_weight; explore cheaper candidates first."""
    cost_weight: float = 0.2

    # --- persistence (VSR) ---
    storage_path: str | None = None
    """Snapshot file of the exact posteriors; a write-ahead log sits next to it (<path>.wal)."""
    auto_save_interval: float = 30.0
    """Seconds between snapshots (a number or a duration string such as "30s")."""

    min_samples: int = 0
    """VSR: Thompson sampling needs samples before it exploits. While some candidate has fewer than this
    many feedbacks (global scope), ``select`` picks among the least-tried (mode ``min_samples``); 0: off."""

    # --- Router-R1 rewards (VSR, arXiv:2506.09033) ---
    use_router_r1_rewards: bool = False
    """Feedback may carry a Router-R1 reward (or its inputs); it updates the posterior fractionally.
    Off by default, as in VSR."""
    cost_reward_alpha: float = 0.3
    """R = R_format + (1 - alpha) R_outcome + alpha R_cost: the seed's additive formula, every term counted
    (``rlrouter.rewards.router_r1.combine(formula="additive")``; training uses Router-R1's code instead)."""
    format_reward_penalty: float = -1.0
    """R_format of a badly formatted trajectory; the other terms are still added."""
    router_model_path: str | None = None
    """VSR's ``router_model_path``: a trained Router-R1 checkpoint (``outputs/<run>/checkpoints/step_N``). The Serve app
    loads it as its ``router_r1`` deployment, and with ``enable_llm_routing`` (and no server URL) it
    decides ``/route`` in-process."""

    # --- LLM routing through a Router-R1 server (VSR) ---
    enable_llm_routing: bool = False
    """Ask a Router-R1 server (POST {url}/route) first; fall back on timeout or any error."""
    router_r1_server_url: str | None = None
    """Base URL of a server speaking the Router-R1 protocol, e.g. http://host:8000/router_r1."""
    llm_routing_timeout_s: float = 5.0
    """Beyond VSR (which uses its HTTP client's 30 s): the whole LLM-routing call's deadline."""
    llm_routing_fallback: str = "thompson"
    """"thompson": fall back to the bandit; "error": fail the request (HTTP 503)."""

    # --- multi-round aggregation and arena (VSR) ---
    enable_multi_round_aggregation: bool = False
    """Route to the top-k candidates by Thompson draw, call them in parallel, aggregate."""
    max_aggregation_rounds: int = 3
    """k of multi-round aggregation (capped by the number of candidates)."""
    concurrent: bool = False
    """VSR's ``type: concurrent`` (arena): ``/route`` and ``model: auto`` call every candidate at once and
    aggregate the answers by ``serving.aggregation`` (vote or confidence)."""

    # --- contextual (beyond VSR) ---
    use_contextual: bool = False
    """Linear Thompson sampling on the query's MiniLM embedding, one Bayesian linear model per candidate."""
    contextual_prior: float = 100.0
    """lambda of the ridge prior on the embedding weights (the intercept's is 0.01): strong, so only a
    topic the data keeps pointing at moves the choice away from the candidate's mean (tuned on the logged-outcome replays)."""
    contextual_noise: float = 0.7
    """v: the draw is x.mu + v sqrt(rbar (1 - rbar)) sqrt(x' A^-1 x) z, i.e. v times the reward's own
    scale (Agrawal & Goyal 2013, scaled down); tuned on replay shuffles 100-102, see docs/serve.md."""

    # --- bookkeeping (beyond VSR) ---
    max_pending_decisions: int = 10_000
    """Decisions kept for later /feedback; the oldest are forgotten first."""
    seed: int | None = None
    """Seed of the sampling RNG (tests and benchmarks); None draws from the OS."""
    propensity_draws: int = 0
    """Posterior draws per candidate that estimate a Thompson decision's propensity (the probability the
    policy picks what it picked, for off-policy estimates on the traffic log); 0: not estimated (random
    and epsilon-greedy picks carry their exact propensity anyway). The Serve app sets 512 when
    ``serving.traffic`` is on and this is not set."""
    costs: dict[str, float] = field(default_factory=dict)
    """Candidate -> price (USD per 1M tokens) used by cost awareness."""

    def __post_init__(self) -> None:
        for f in ("use_thompson_sampling", "enable_personalization", "cost_awareness", "use_router_r1_rewards",
                  "enable_llm_routing", "enable_multi_round_aggregation", "use_contextual", "concurrent",
                  "session_affinity", "affinity_move_on_error"):
            if not isinstance(getattr(self, f), bool):
                raise SelectorConfigError(f, f"expected true/false, got {getattr(self, f)!r}")
        for f in ("exploration_rate", "exploration_decay", "min_exploration", "personalization_blend",
                  "category_blend", "session_context_weight", "implicit_feedback_weight", "cost_reward_alpha"):
            self._check_number(f, 0.0, 1.0)
        self._check_number("cost_weight", 0.0, math.inf)
        self._check_number("format_reward_penalty", -math.inf, 0.0)
        self._check_number("contextual_prior", 1e-9, math.inf)
        self._check_number("contextual_noise", 0.0, math.inf)
        self._check_number("llm_routing_timeout_s", 1e-3, math.inf)
        self.auto_save_interval = parse_duration(self.auto_save_interval, "auto_save_interval")
        self.affinity_ttl_s = parse_duration(self.affinity_ttl_s, "affinity_ttl_s")
        if self.affinity_margin is not None:
            self._check_number("affinity_margin", 0.0, math.inf)
        self._check_number("latency_weight", 0.0, math.inf)
        if self.max_ttft_ms is not None:
            self._check_number("max_ttft_ms", 1e-9, math.inf)
        if self.router_r1_server_url == "":  # VSR's printed default: unset
            self.router_r1_server_url = None
        if self.llm_routing_fallback not in ("thompson", "error"):
            raise SelectorConfigError("llm_routing_fallback",
                                      f"expected 'thompson' or 'error', got {self.llm_routing_fallback!r}")
        if self.router_model_path == "":
            self.router_model_path = None
        if self.enable_llm_routing and not self.router_r1_server_url and not self.router_model_path:
            raise SelectorConfigError("router_r1_server_url", "required when enable_llm_routing is true "
                                      "(or router_model_path, a checkpoint this app serves itself)")
        if self.router_r1_server_url is not None and not (
                isinstance(self.router_r1_server_url, str)
                and self.router_r1_server_url.startswith(("http://", "https://"))):
            raise SelectorConfigError("router_r1_server_url",
                                      f"expected an http(s) URL, got {self.router_r1_server_url!r}")
        if isinstance(self.min_samples, bool) or not isinstance(self.min_samples, int) or self.min_samples < 0:
            raise SelectorConfigError("min_samples", f"expected an integer >= 0, got {self.min_samples!r}")
        if self.router_model_path is not None and not isinstance(self.router_model_path, str):
            raise SelectorConfigError("router_model_path", f"expected a path or null, got {self.router_model_path!r}")
        for f in ("max_aggregation_rounds", "max_pending_decisions", "max_affinity_sessions", "latency_half_life"):
            v = getattr(self, f)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise SelectorConfigError(f, f"expected an integer >= 1, got {v!r}")
        v = self.propensity_draws
        if isinstance(v, bool) or not isinstance(v, int) or v < 0:
            raise SelectorConfigError("propensity_draws", f"expected an integer >= 0 (0 = off), got {v!r}")
        if self.seed is not None and (isinstance(self.seed, bool) or not isinstance(self.seed, int)):
            raise SelectorConfigError("seed", f"expected an integer or null, got {self.seed!r}")
        if self.storage_path is not None and (not isinstance(self.storage_path, str) or not self.storage_path):
            raise SelectorConfigError("storage_path", f"expected a file path or null, got {self.storage_path!r}")
        if not isinstance(self.costs, dict):
            raise SelectorConfigError("costs", f"expected a mapping candidate -> price, got {self.costs!r}")
        for name, price in self.costs.items():
            if isinstance(price, bool) or not isinstance(price, (int, float)) or price < 0 or not math.isfinite(price):
                raise SelectorConfigError(f"costs.{name}", f"expected a price >= 0, got {price!r}")
        self.costs = {str(k): float(v) for k, v in self.costs.items()}

    def _check_number(self, f: str, lo: float, hi: float) -> None:
        v = getattr(self, f)
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(float(v)):
            raise SelectorConfigError(f, f"expected a number, got {v!r}")
        if not lo <= v <= hi:
            raise SelectorConfigError(f, f"must be in [{lo}, {hi}], got {v}")
        setattr(self, f, float(v))

    @classmethod
    def from_dict(cls, d: dict[str, Any] | None) -> SelectorConfig:
        """Build from a plain mapping (Hydra / YAML); an unknown key is an error naming it. VSR's nested
        shapes (``algorithm:``, ``type:``, ``decisions:``) are read by :meth:`from_vsr`."""
        d = dict(d or {})
        if _VSR_KEYS & set(d):
            return cls.from_vsr(d)
        known = {f.name for f in fields(cls)}
        for key in d:
            if key not in known:
                raise SelectorConfigError(key, f"unknown field; known fields: {sorted(known)}")
        return cls(**d)

    @classmethod
    def from_vsr(cls, d: dict[str, Any] | None) -> SelectorConfig:
        """VSR's YAML as its documentation prints it: ``algorithm: {type: rl_driven, rl_driven: {...}}``,
        the ``algorithm`` mapping itself, or ``decisions: [{name, algorithm: ...}]`` with one rl_driven
        (or ``concurrent``) decision. Plain fields pass through. Errors name the dotted path."""
        path, body = _vsr_body(dict(d or {}), "")
        try:
            return cls.from_dict(body)
        except SelectorConfigError as e:
            raise SelectorConfigError(f"{path}{e.field}", e.message) from None

    @staticmethod
    def flat_fields(d: dict[str, Any] | None) -> dict[str, Any]:
        """The plain fields a VSR-shaped mapping sets (only those it gives), for merging config files."""
        return _vsr_body(dict(d or {}), "")[1]

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


_VSR_KEYS = {"algorithm", "type", "decisions"}


def _vsr_body(d: dict[str, Any], path: str) -> tuple[str, dict[str, Any]]:
    """(dotted path of the block, its plain fields) of a VSR-shaped mapping; a plain one is returned as is."""
    if "decisions" in d:
        decisions = d["decisions"]
        if not isinstance(decisions, list) or not decisions:
            raise SelectorConfigError(f"{path}decisions", "expected a non-empty list of decisions")
        ours = [i for i, x in enumerate(decisions)
                if isinstance(x, dict) and isinstance(x.get("algorithm"), dict)
                and x["algorithm"].get("type") in ("rl_driven", "concurrent")]
        if len(ours) != 1:
            raise SelectorConfigError(f"{path}decisions", f"expected exactly one decision with algorithm.type "
                                                          f"rl_driven or concurrent, found {len(ours)}")
        return _vsr_body(dict(decisions[ours[0]]["algorithm"]), f"{path}decisions[{ours[0]}].algorithm.")
    if "algorithm" in d:
        if set(d) != {"algorithm"}:
            raise SelectorConfigError(f"{path}{sorted(set(d) - {'algorithm'})[0]}", "unknown key beside 'algorithm'")
        if not isinstance(d["algorithm"], dict):
            raise SelectorConfigError(f"{path}algorithm", "expected a mapping with type and rl_driven")
        return _vsr_body(dict(d["algorithm"]), f"{path}algorithm.")
    if "type" not in d:
        if path.endswith("algorithm."):  # inside an algorithm block the type is required
            raise SelectorConfigError(f"{path}type", "missing; expected 'rl_driven' or 'concurrent'")
        return "", d
    kind = d["type"]
    if kind not in ("rl_driven", "concurrent"):
        raise SelectorConfigError(f"{path}type", f"expected 'rl_driven' or 'concurrent', got {kind!r}")
    extra = sorted(set(d) - {"type", kind})
    if extra:
        raise SelectorConfigError(f"{path}{extra[0]}", f"unknown key; expected type and {kind}")
    body = d.get(kind) or {}
    if not isinstance(body, dict):
        raise SelectorConfigError(f"{path}{kind}", f"expected a mapping, got {type(body).__name__}")
    if _VSR_KEYS & set(body):
        raise SelectorConfigError(f"{path}{kind}", "nested algorithm blocks are not allowed here")
    if kind == "concurrent":  # the arena, with the selector's knobs for its scores and feedback
        body = {**body, "concurrent": True}
    return f"{path}{kind}.", dict(body)
