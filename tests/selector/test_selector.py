"""The Selector: decisions, updates in every scope, feedback rules, config validation."""

import numpy as np
import pytest

from rlrouter.selector import (
    FeedbackConflict,
    SelectionRequest,
    Selector,
    SelectorConfig,
    SelectorConfigError,
    SelectorError,
    UnknownRequest,
)
from rlrouter.selector.contextual import LinearThompsonArm, context_vector


def make(**kw):
    kw.setdefault("seed", 0)
    kw.setdefault("cost_awareness", False)
    return Selector(SelectorConfig(**kw), ["a", "b"])


def test_defaults_are_the_issue_defaults():
    c = SelectorConfig()
    assert (c.use_thompson_sampling, c.exploration_rate, c.exploration_decay, c.min_exploration) == (True, 0.3, 0.99, 0.05)
    assert (c.enable_personalization, c.personalization_blend, c.session_context_weight) == (True, 0.7, 0.5)
    assert (c.implicit_feedback_weight, c.cost_awareness, c.cost_weight) == (0.5, True, 0.2)
    # use_router_r1_rewards is off, as VSR documents it (tests/fixtures/seeds/001_*)
    assert (c.auto_save_interval, c.use_router_r1_rewards, c.cost_reward_alpha, c.format_reward_penalty) == (30.0, False, 0.3, -1.0)
    assert (c.min_samples, c.router_r1_server_url, c.router_model_path) == (0, None, None)
    assert (c.enable_llm_routing, c.llm_routing_fallback, c.use_contextual) == (False, "thompson", False)
    assert SelectorConfig(auto_save_interval="500ms").auto_save_interval == 0.5


@pytest.mark.parametrize("field,value", [("personalization_blend", 1.5), ("exploration_rate", -0.1),
                                         ("llm_routing_fallback", "random"), ("auto_save_interval", "soon"),
                                         ("use_contextual", "yes"), ("max_aggregation_rounds", 0)])
def test_bad_config_names_the_field(field, value):
    with pytest.raises(SelectorConfigError, match=field):
        SelectorConfig(**{field: value})
    with pytest.raises(SelectorConfigError, match="nonsense"):
        SelectorConfig.from_dict({"nonsense": 1})
    with pytest.raises(SelectorConfigError, match="router_r1_server_url"):
        SelectorConfig(enable_llm_routing=True)


def test_win_loss_tie_update_every_scope():
    s = make()
    req = SelectionRequest(candidates=["a", "b"], user_id="u", session_id="s", category="math")
    for outcome in ("win", "win", "loss", "tie"):
        d = s.select(req)
        s.feedback(d.request_id, outcome=outcome)
    # whatever model was chosen, the totals over both models: alpha - 1 = 2 + 0.5, beta - 1 = 1 + 0.5
    for scope in (s.state.global_, s.state.users["u"], s.state.categories["math"]):
        assert sum(p.alpha - 1 for p in scope.values()) == pytest.approx(2.5)
        assert sum(p.beta - 1 for p in scope.values()) == pytest.approx(1.5)
    sess = s.state.sessions["s"]
    assert sum(st.selections for st in sess.values()) == 4
    assert sum(st.successes for st in sess.values()) == 2  # a tie is not a success (VSR)


def test_personalized_posterior_matches_hand_blend():
    s = make()
    s.state.global_["a"].alpha, s.state.global_["a"].beta = 3.0, 5.0
    from rlrouter.selector.state import Posterior

    s.state.users["u"] = {"a": Posterior(7.0, 2.0)}
    s.state.categories["math"] = {"a": Posterior(2.0, 6.0)}
    p = s.posterior("a", "u", "math")
    assert (p.alpha, p.beta) == pytest.approx((4.66, 3.83))
    assert s.posterior("a", "stranger").alpha == 3.0  # no user history: the global posterior
    assert s.posterior("b", "u").alpha == 1.0  # no history at all: the Beta(1, 1) prior
    off = Selector(SelectorConfig(enable_personalization=False, seed=0), ["a"])
    off.state = s.state
    assert off.posterior("a", "u").alpha == 3.0


def test_exploit_scores_apply_cost_then_session():
    # epsilon-greedy with eps = 0: deterministic exploitation of posterior means, so the scores are exact
    s = Selector(SelectorConfig(use_thompson_sampling=False, exploration_rate=0.0, min_exploration=0.0,
                                costs={"a": 20.0, "b": 0.6}, seed=0), ["a", "b"])
    s.state.global_["a"].alpha = 4.0  # mean 0.8
    from rlrouter.selector.state import SessionStats

    s.state.sessions["s"] = {"b": SessionStats(selections=4, successes=3)}
    d = s.select(SelectionRequest(candidates=["a", "b"], session_id="s"))
    # a: mean 0.8, most expensive -> no bonus -> 0.8, no session history -> 0.8
    # b: mean 0.5 * (1 + 0.2) = 0.6, then 0.5 * 0.6 + 0.5 * 0.75 = 0.675
    assert d.scores["a"] == pytest.approx(0.8)
    assert d.scores["b"] == pytest.approx(0.675)
    assert d.model == "a" and d.mode == "epsilon_greedy"


def test_epsilon_greedy_explores_at_the_decayed_rate():
    s = Selector(SelectorConfig(use_thompson_sampling=False, cost_awareness=False, seed=1), ["a", "b"])
    s.state.global_["a"].alpha = 50.0
    explored = sum(s.select(SelectionRequest(candidates=[])).explored for _ in range(4000))
    # eps decays from 0.3 to 0.3 * 0.99 ** 40 = 0.2006 over the run; its mean is ~0.247
    mean_eps = np.mean([s.exploration_rate(n) for n in range(1, 4001)])
    assert abs(explored / 4000 - mean_eps) < 0.03


def test_thompson_learns_the_better_candidate():
    s = make(seed=3)
    rng = np.random.default_rng(0)
    p = {"a": 0.8, "b": 0.3}
    picks = []
    for _ in range(400):
        d = s.select(SelectionRequest(candidates=["a", "b"]))
        picks.append(d.model)
        s.feedback(d.request_id, outcome="win" if rng.random() < p[d.model] else "loss")
    assert picks[-100:].count("a") >= 90


def test_implicit_and_reward_weights():
    s = make(use_router_r1_rewards=True)
    d = s.select(SelectionRequest(candidates=["a"]))
    u = s.feedback(d.request_id, label="satisfied", confidence=0.8)
    # weight = implicit_feedback_weight 0.5 * confidence 0.8 = 0.4 on alpha
    assert (u.deltas[0].d_alpha, u.deltas[0].d_beta) == pytest.approx((0.4, 0.0))
    assert s.state.global_["a"].implicit == 1
    d = s.select(SelectionRequest(candidates=["a"]))
    u = s.feedback(d.request_id, label="need_clarification", confidence=1.0)
    assert (u.deltas[0].d_alpha, u.deltas[0].d_beta) == pytest.approx((0.25, 0.25))  # a tie at weight 0.5
    d = s.select(SelectionRequest(candidates=["a"]))
    s.feedback(d.request_id, reward=0.7)
    assert (s.state.global_["a"].alpha, s.state.global_["a"].beta) == pytest.approx((1 + 0.4 + 0.25 + 0.7, 1 + 0.25 + 0.3))


def test_feedback_errors():
    s = make()
    with pytest.raises(UnknownRequest) as e:
        s.feedback("nope", outcome="win")
    assert e.value.status == 404 and e.value.field == "request_id"
    d = s.select(SelectionRequest(candidates=["a", "b"]))
    with pytest.raises(SelectorError, match="outcome"):
        s.feedback(d.request_id, outcome="draw")
    with pytest.raises(SelectorError, match="exactly one"):
        s.feedback(d.request_id, outcome="win", reward=1.0)
    s.feedback(d.request_id, outcome="win")
    with pytest.raises(FeedbackConflict) as e:
        s.feedback(d.request_id, outcome="win")
    assert e.value.status == 409
    with pytest.raises(SelectorError, match="unknown candidate"):
        s.select(SelectionRequest(candidates=["a", "zzz"]))
    off = make(use_router_r1_rewards=False)
    d = off.select(SelectionRequest(candidates=["a"]))
    with pytest.raises(SelectorError, match="use_router_r1_rewards"):
        off.feedback(d.request_id, reward=0.5)


def test_arena_winner_is_pairwise():
    s = Selector(SelectorConfig(seed=0, cost_awareness=False), ["a", "b", "c"])
    d = s.select_all(SelectionRequest(candidates=[]))
    assert sorted(d.models) == ["a", "b", "c"] and d.mode == "arena"
    s.feedback(d.request_id, outcome="win", winner="b")
    g = s.state.global_
    assert (g["b"].alpha, g["b"].beta) == (2.0, 1.0)
    assert (g["a"].alpha, g["a"].beta) == (1.0, 2.0) and (g["c"].alpha, g["c"].beta) == (1.0, 2.0)
    d = s.select_top_k(SelectionRequest(candidates=[]), k=2)
    assert len(d.models) == 2 and d.mode == "multi_round"
    with pytest.raises(SelectorError, match="winner"):
        s.feedback(d.request_id, outcome="win", winner=[m for m in "abc" if m not in d.models][0])


def test_pending_decisions_are_bounded():
    s = make(max_pending_decisions=3)
    ids = [s.select(SelectionRequest(candidates=["a"])).request_id for _ in range(5)]
    with pytest.raises(UnknownRequest):
        s.feedback(ids[0], outcome="win")
    s.feedback(ids[-1], outcome="win")


def test_sherman_morrison_matches_direct_inverse():
    rng = np.random.default_rng(0)
    arm = LinearThompsonArm(5, prior=2.0, intercept_prior=0.5)
    a = np.diag([2.0, 2.0, 2.0, 2.0, 0.5])  # the last feature is the intercept
    b = np.zeros(5)
    for _ in range(30):
        x, r, w = rng.normal(size=5), rng.random(), rng.uniform(0.2, 1.0)
        arm.update(x, r, w)
        a += w * np.outer(x, x)
        b += w * r * x
    np.testing.assert_allclose(arm.a_inv, np.linalg.inv(a), rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(arm.mu, np.linalg.solve(a, b), rtol=1e-9, atol=1e-12)


def test_contextual_learns_context_dependent_best_arm():
    # two query clusters; "a" is right on cluster 0 and "b" on cluster 1: no single arm is good
    rng = np.random.default_rng(0)
    centres = rng.normal(size=(2, 16))
    regret = {}
    for contextual in (False, True):
        s = Selector(SelectorConfig(seed=0, cost_awareness=False, use_contextual=contextual), ["a", "b"])
        total = 0.0
        for _ in range(600):
            k = int(rng.integers(2))
            emb = centres[k] + 0.3 * rng.normal(size=16)
            d = s.select(SelectionRequest(candidates=[], embedding=emb))
            good = d.model == ("a" if k == 0 else "b")
            total += 0.0 if good else 1.0
            s.feedback(d.request_id, outcome="win" if good else "loss")
        regret[contextual] = total
    assert regret[True] < 0.5 * regret[False]
    assert context_vector([3.0, 4.0]).tolist() == pytest.approx([0.6, 0.8, 1.0])


def _three(**kw):
    s = Selector(SelectorConfig(seed=5, min_samples=0, **kw), ["a", "b", "c"])
    for m, (al, be) in {"a": (8.0, 4.0), "b": (6.0, 5.0), "c": (2.0, 2.0)}.items():
        s.state.global_[m].alpha, s.state.global_[m].beta = al, be
    return s


@pytest.mark.parametrize("cost_awareness", [False, True])
def test_thompson_propensities_match_the_decisions_they_describe(cost_awareness):
    """The estimated probability of each pick agrees with how often the selector, in the same state, picks it;
    the estimate has its own random stream, so the decisions are those it makes without it."""
    kw = {"cost_awareness": cost_awareness, "costs": {"a": 30.0, "b": 1.0, "c": 0.2}}
    s, plain = _three(propensity_draws=512, **kw), _three(**kw)
    req = SelectionRequest(candidates=["a", "b", "c"], session_id=None)
    decs = [s.select(req) for _ in range(3000)]
    assert [d.model for d in decs] == [plain.select(req).model for _ in range(3000)]
    assert all(d.propensity is None for d in [plain.select(req)])
    for m in ("a", "b", "c"):
        freq = np.mean([d.model == m for d in decs])
        prop = np.mean([d.propensity for d in decs if d.model == m])
        assert abs(freq - prop) < 0.04, (m, freq, prop)


def test_epsilon_greedy_and_random_picks_carry_their_exact_propensity():
    s = _three(use_thompson_sampling=False, cost_awareness=False)
    req = SelectionRequest(candidates=["a", "b", "c"])
    for _ in range(50):
        eps = s.exploration_rate(s.state.selections + 1)
        d = s.select(req)
        expected = eps / 3 + (1 - eps) * (d.model == "a")  # "a" has the highest mean
        assert d.propensity == pytest.approx(expected)
    costly = _three(use_thompson_sampling=False, cost_awareness=True, costs={"a": 30.0, "b": 1.0, "c": 0.2})
    # random picks, cost-aware: half the time among the cheapest third (c), half among all
    assert costly._random_share("c", ["a", "b", "c"]) == pytest.approx(0.5 + 0.5 / 3)
    assert costly._random_share("a", ["a", "b", "c"]) == pytest.approx(0.5 / 3)
    fresh = Selector(SelectorConfig(seed=1, min_samples=2, cost_awareness=False), ["a", "b"])
    d = fresh.select(SelectionRequest(candidates=["a", "b"]))
    assert d.mode == "min_samples" and d.propensity == 0.5
    with pytest.raises(SelectorConfigError, match="propensity_draws"):
        SelectorConfig(propensity_draws=-1)
    # the production default draws from the OS: no seed, propensities all the same
    unseeded = Selector(SelectorConfig(propensity_draws=64, cost_awareness=False), ["a", "b"])
    assert 0 < unseeded.select(SelectionRequest(candidates=["a", "b"])).propensity <= 1
