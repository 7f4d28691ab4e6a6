"""The router that learns from feedback (rlrouter.routers.online): its pieces against hand-computed values,
and on a synthetic stream it learns which context group pays for the strong candidate from the outcomes
of its own calls alone."""

from __future__ import annotations

import numpy as np
import pytest

from rlrouter.routers.online import FeedbackRouter, OffsetPosterior, fit_logistic_1d
from rlrouter.routers.reader import EvalSet
from rlrouter.pool.base import Candidate


def test_logistic_fit_recovers_the_log_odds_and_a_slope():
    y = np.array([1, 1, 1, 0], dtype=float)
    c0, c1 = fit_logistic_1d(np.zeros(4), y, l2=1e-9)
    assert c0 == pytest.approx(np.log(3.0), abs=1e-4) and c1 == pytest.approx(0.0, abs=1e-6)
    rng = np.random.default_rng(0)
    z = rng.normal(size=4000)
    y = (rng.random(4000) < 1 / (1 + np.exp(-(0.5 + 2.0 * z)))).astype(float)
    c0, c1 = fit_logistic_1d(z, y)
    assert c0 == pytest.approx(0.5, abs=0.15) and c1 == pytest.approx(2.0, abs=0.25)


def test_offset_posterior_is_the_penalised_maximum_with_laplace_variance():
    post = OffsetPosterior(prior_sd=1.0)
    for o, y in [(0.0, 1.0), (0.5, 1.0), (-0.5, 0.0), (0.0, 1.0)]:
        post.update(o, y)
    o, y = np.array(post.offsets), np.array(post.outcomes)
    p = 1 / (1 + np.exp(-(o + post.mean)))
    assert float((y - p).sum()) - post.mean == pytest.approx(0.0, abs=1e-7)  # the gradient vanishes
    assert post.var == pytest.approx(1 / (float((p * (1 - p)).sum()) + 1.0))
    assert 0 < post.mean and post.var < 1.0
    with pytest.raises(ValueError, match="feedback.prior_sd"):
        OffsetPosterior(prior_sd=0.0)


def _stream(n_per_group: int, seed: int = 0) -> EvalSet:
    """Group "pays": strong right 90%, weak 30%; group "same": both 70%. Candidates [weak, strong]."""
    rng = np.random.default_rng(seed)
    rows, sources = [], []
    for g, (pw, ps) in {"pays": (0.3, 0.9), "same": (0.7, 0.7)}.items():
        for _ in range(n_per_group):
            rows.append([rng.random() < pw, rng.random() < ps])
            sources.append(f"mmlu/{g}")
    n = len(rows)
    cands = [Candidate("weak", 1.0, 1.0), Candidate("strong", 10.0, 30.0)]
    costs = np.tile([1e-6, 3e-5], (n, 1))
    return EvalSet(prompts=[f"q{i}" for i in range(n)], candidates=cands, scores=np.array(rows, dtype=float),
                   costs=costs, sources=sources, prompt_tokens=np.ones(n), completion_tokens=np.ones((n, 2)))


def test_the_router_learns_which_group_pays_from_its_own_calls():
    train, test = _stream(100, seed=1), _stream(300, seed=2)
    router = FeedbackRouter("fb", weak=0, strong=1, base=None, context="source", share=0.5, seed=0)
    router.fit(train)
    before = router.strong_score(test.prompts[:1], ["mmlu/pays"])[0]
    assert before == pytest.approx(router.strong_score(test.prompts[:1], ["mmlu/same"])[0])  # no feedback yet
    dec = router.replay(test)
    late = router.stream_order[len(test) // 2:]
    pays = np.array([s == "mmlu/pays" for s in test.sources])
    share_pays = (dec[late][pays[late]] == 1).mean()
    share_same = (dec[late][~pays[late]] == 1).mean()
    assert share_pays > 0.75 and share_same < 0.35
    assert router.strong_score(["x"], ["mmlu/pays"])[0] > router.strong_score(["x"], ["mmlu/same"])[0] + 0.3
    # bandit feedback: one event per routed prompt, for the candidate called only
    events = router.report()["feedback_events"]
    assert events["weak"] + events["strong"] == len(test) and events["strong"] == int((dec == 1).sum())
    assert router.arrival_scores.shape == (len(test),)


def test_bad_settings_name_the_field():
    with pytest.raises(ValueError, match="feedback.context"):
        FeedbackRouter("fb", 0, 1, None, context="tenant")
    with pytest.raises(ValueError, match="feedback.share"):
        FeedbackRouter("fb", 0, 1, None, share=1.5)
    with pytest.raises(ValueError, match="'cluster' needs an embedder"):
        FeedbackRouter("fb", 0, 1, None, context="cluster")


def test_saved_and_served_it_routes_and_learns_one_request_at_a_time(tmp_path):
    """Saved after fitting and served (no Ray: ServedRouters), it routes one request per context, learns
    from that request's feedback only, and its state file keeps what it learned across a restart."""
    from rlrouter.routers.base import RouterContext, build_router
    from rlrouter.routers.saved import Calibration, save_router
    from rlrouter.serving.served_routers import ServedRouters

    train = _stream(100, seed=1)
    ctx = RouterContext(candidates=train.names, weak=0, strong=1, train=train, embed=lambda t: np.zeros((len(t), 4)))
    spec = {"base": None, "context": "source", "explore": False}
    router = build_router({"type": "feedback", **spec}, ctx)
    router.fit(train)
    save_router(router, tmp_path / "fb", type_name="feedback", spec=spec, candidates=train.candidates, weak=0,
                strong=1, calibration=Calibration.from_scores(router.strong_score(train.prompts)))
    entries = {"fb": {"path": str(tmp_path / "fb"), "state": str(tmp_path / "fb_state.json")}}
    served = ServedRouters(entries, embed=lambda t: np.zeros((len(t), 4)))
    first = served.decide("fb", "q", threshold=0.0, category="mmlu/pays")
    assert first["online"] is True and first["report"]["group"] == "mmlu/pays"
    for _ in range(20):  # the weak candidate keeps failing on "pays"
        d = served.decide("fb", "q", threshold=1.0, category="mmlu/pays")  # threshold 1: always weak
        assert d["candidate"] == "weak"
        fb = served.feedback("fb", d["request_id"], outcome="loss")
        assert fb["learned"] is True
    assert served.feedback("fb", d["request_id"], outcome="loss")["learned"] is False  # already answered
    gain_pays = served.decide("fb", "q", threshold=0.0, category="mmlu/pays")["score"]
    gain_same = served.decide("fb", "q", threshold=0.0, category="mmlu/same")["score"]
    assert gain_pays > gain_same + 0.2
    restarted = ServedRouters(entries, embed=lambda t: np.zeros((len(t), 4)))
    assert restarted.decide("fb", "q", threshold=0.0, category="mmlu/pays")["score"] == pytest.approx(gain_pays)
