"""The regret replay: hand-checked regret on a tiny table, and the real logged outcomes."""

import numpy as np
import pytest

from rlrouter.selector.replay import router_r1_rewards, simulate


def test_rewards_and_regret_by_hand():
    scores = np.array([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]])
    # alpha 0.3, model "b" is cheapest: R = 0.7 * correct + 0.3 * (1 - normalised cost)
    r = router_r1_rewards(scores, ["a", "b"], {"a": 20.0, "b": 0.6}, 0.3)
    np.testing.assert_allclose(r, [[0.7, 0.3], [0.0, 1.0], [0.7, 1.0]])
    oracle = simulate("oracle", r, ["a", "b"])
    assert oracle.total_regret == 0.0 and oracle.cumulative_reward[-1] == pytest.approx(2.7)
    # best fixed in hindsight: b (mean 0.767 > 0.467); regret = (0.7 - 0.3) + 0 + 0 = 0.4
    assert simulate("best_fixed", r, ["a", "b"]).total_regret == pytest.approx(0.4)


def test_thompson_beats_random_on_logged_outcomes(shared_data):
    from rlrouter.data.logged import load_routellm

    t = load_routellm(shared_data / "routellm" / "gsm8k" / "gsm8k_responses.csv")
    r = router_r1_rewards(t.scores, t.models, {}, 0.0)
    order = np.random.default_rng(0).permutation(len(t))
    ts = simulate("thompson", r, t.models, order, seed=0)
    rnd = simulate("random", r, t.models, order, seed=0)
    eps = simulate("epsilon_greedy", r, t.models, order, seed=0)
    best = simulate("best_fixed", r, t.models, order)
    assert ts.total_regret < rnd.total_regret and eps.total_regret < rnd.total_regret
    # Thompson's regret beyond the best fixed candidate (GPT-4) is small: exploration cost only
    assert ts.total_regret - best.total_regret < 0.1 * (rnd.total_regret - best.total_regret)
    with pytest.raises(ValueError, match="embeddings"):
        simulate("contextual", r, t.models, order)
