"""The personalization-set generator: seeded, valid records, real outcomes, profiles that matter."""

from __future__ import annotations

import json

import numpy as np
import pytest

from rlrouter.data.formats import GMTRecord
from rlrouter.gmt.simulate import (DOMAINS, SimConfig, _json_list_items, domain_of, simulate_personalization,
                                   turn_length_sampler)


def test_same_seed_same_set_other_seed_other_users(small_logged):
    cfg = dict(num_users=6, sessions_per_user=3, turns="geometric", pool_size=40)
    a = simulate_personalization(small_logged, SimConfig(seed=1, **cfg))
    b = simulate_personalization(small_logged, SimConfig(seed=1, **cfg))
    c = simulate_personalization(small_logged, SimConfig(seed=2, **cfg))
    assert [r.to_dict() for r in a.records] == [r.to_dict() for r in b.records]
    assert [r.to_dict() for r in a.records] != [r.to_dict() for r in c.records]
    # pool_seed keeps the prompts when only the seed changes
    qa = {it.query for r in a.records for it in r.interactions}
    qc = {it.query for r in c.records for it in r.interactions}
    pool = set(np.array(small_logged.prompts, dtype=object)[
        np.random.default_rng(0).choice(len(small_logged), 40, replace=False)])
    assert qa <= pool and qc <= pool


def test_records_are_valid_and_use_real_logged_prompts(small_sim, small_logged):
    for rec in small_sim.records:
        again = GMTRecord.from_dict(json.loads(json.dumps(rec.to_dict())))
        assert again == rec
        for it in rec.interactions:
            assert small_logged.index(it.query) is not None
            assert it.model_used in small_logged.models
            assert it.user_feedback in (1.0, 2.0, 3.0, 4.0, 5.0)
        ts = [it.timestamp for it in rec.interactions]
        assert ts == sorted(ts)
    assert small_sim.stats["profiles"] == {"accuracy_first": 5, "cost_sensitive": 5, "subject_specific": 4,
                                           "brand_loyal": 2}


def test_accuracy_first_users_prefer_the_candidate_that_was_right(small_logged):
    """When exactly one candidate answered correctly (RouteLLM's grade), accuracy-first users rate it
    higher; cost-sensitive users rate the cheap one higher when both were right."""
    sim = simulate_personalization(small_logged, SimConfig(
        num_users=12, sessions_per_user=8, turns="geometric", pool_size=300, seed=5,
        profile_mix={"accuracy_first": 0.5, "cost_sensitive": 0.5}))
    kinds = {p.user_id: p.kind for p in sim.profiles}
    cheap = "mistralai/Mixtral-8x7B-Instruct-v0.1"
    right_wins, right_n, cheap_wins, cheap_n = 0, 0, 0, 0
    for rec in sim.records:
        turns: dict[tuple, dict[str, float]] = {}
        for it in rec.interactions:
            turns.setdefault((it.session_id, it.query), {})[it.model_used] = it.user_feedback
        for (_, q), fb in turns.items():
            row = small_logged.index(q)
            correct = {m: small_logged.scores[row, small_logged.model_index(m)] for m in fb}
            a, b = fb
            if fb[a] == fb[b]:
                continue
            if kinds[rec.user_id] == "accuracy_first" and correct[a] != correct[b]:
                right = a if correct[a] > correct[b] else b
                right_n += 1
                right_wins += fb[right] > min(fb.values())
            if kinds[rec.user_id] == "cost_sensitive" and correct[a] == correct[b] == 1:
                cheap_n += 1
                cheap_wins += fb[cheap] == max(fb.values())
    assert right_n >= 20 and right_wins / right_n > 0.85
    assert cheap_n >= 20 and cheap_wins / cheap_n > 0.85


def test_domains_and_turn_lengths():
    assert domain_of("gsm8k") == "math_word"
    assert domain_of("mmlu/philosophy") == "humanities"
    assert domain_of("mmlu/high_school_mathematics") == "stem"
    assert domain_of("something_else") == "other"
    assert "math_word" in DOMAINS
    draw = turn_length_sampler(SimConfig(turns="geometric", mean_turns=2.0, max_turns=4),
                               np.random.default_rng(0))
    lengths = [draw() for _ in range(2000)]
    assert min(lengths) == 1 and max(lengths) == 4
    assert 1.6 < np.mean(lengths) < 2.0  # geometric(1/2) truncated at 4: mean 1.875


def test_truncated_json_list_keeps_complete_items():
    text = '[\n {"id": 1, "conversations": []},\n {"id": 2, "conversations": [{"from": "human"}]},\n {"id": 3, "conv'
    assert [o["id"] for o in _json_list_items(text)] == [1, 2]
    assert [o["id"] for o in _json_list_items('[{"id": 1}, {"id": 2}]')] == [1, 2]


def test_config_errors_name_the_field():
    with pytest.raises(ValueError, match="turns: expected 'sharegpt' or 'geometric'"):
        SimConfig(turns="poisson")
    with pytest.raises(ValueError, match="profile_mix"):
        SimConfig(profile_mix={"night_owl": 1.0})
