"""The encoder router (MiniLM + LoRA, supervised then PPO on a cost-aware reward) on a tiny set."""

from __future__ import annotations

import numpy as np
import pytest

from rlrouter.routers.encoder_router import EncoderRouterConfig, RoutingReward, label_of
from rlrouter.routers.reader import EvalSet
from rlrouter.routers.base import RouterContext, build_router
from rlrouter.pool.base import Candidate


def _set(prompts, scores, costs=(1.0, 10.0)) -> EvalSet:
    n = len(prompts)
    return EvalSet(prompts=prompts, candidates=[Candidate("weak", 0.6, 0.6), Candidate("strong", 10, 30)],
                   scores=np.asarray(scores, dtype=float), costs=np.tile(costs, (n, 1)), sources=["t"] * n,
                   prompt_tokens=np.ones(n), completion_tokens=np.ones((n, 2)))


def test_labels_and_cost_aware_reward_by_hand():
    es = _set(["a", "b", "b"], [[0, 1], [1, 1], [0, 1]])
    assert label_of(es.scores, 0, 1) == ["strong", "weak", "strong"]
    r = RoutingReward(es, 0, 1, lam=0.5)
    # strong's mean cost is 10: a strong call costs lam * 1 = 0.5, a weak one 0.5 * 0.1 = 0.05;
    # "b" is logged twice: weak scores (1 + 0) / 2
    assert r(["a", "a", "b", "b", "zz"], ["weak", "strong", "weak", "strong", "weak"]) == pytest.approx(
        [-0.05, 0.5, 0.45, 0.5, None], nan_ok=True)
    with pytest.raises(ValueError, match="encoder.lam"):
        EncoderRouterConfig(lam=-1)


@pytest.mark.slow
def test_encoder_router_trains_supervised_then_ppo_and_scores(tmp_path):
    rng = np.random.default_rng(0)
    prompts, scores = [], []
    for i in range(48):
        hard = i % 2 == 0
        prompts.append(f"Prove the theorem number {i} about prime ideals" if hard else f"What colour is sky {i}?")
        scores.append([0.0, 1.0] if hard else [1.0, float(rng.random() < 0.9)])
    train = _set(prompts, scores)
    ctx = RouterContext(candidates=["weak", "strong"], weak=0, strong=1, train=train, embed=lambda t: None,
                        work_dir=tmp_path)
    r = build_router({"type": "encoder", "train": {"max_length": 16, "supervised": {"epochs": 1, "batch_size": 8,
                                                                                     "max_steps": 4},
                                                    "ppo": {"iterations": 1, "batch_size": 8, "minibatch_size": 8,
                                                            "update_epochs": 1}}}, ctx)
    r.fit(train)
    assert set(r.summary) >= {"supervised", "ppo"} and r.summary["strong_label_share"] > 0.3
    s = r.strong_score(["Prove the theorem about ideals", "What colour is grass?"])
    assert s.shape == (2,) and ((0 <= s) & (s <= 1)).all()
    saved = tmp_path / "encoder_checkpoint"
    again = build_router({"type": "encoder", "checkpoint": str(saved)}, ctx)
    again.fit(train)
    np.testing.assert_allclose(again.strong_score(["Prove x"]), r.strong_score(["Prove x"]), atol=1e-5)


@pytest.mark.slow
def test_form_encoder_config_trains_both_members_and_scores(tmp_path):
    from pathlib import Path

    from omegaconf import OmegaConf

    from rlrouter.routers import learned as _learned  # noqa: F401 - registers the probe and ensemble routers

    spec = OmegaConf.to_container(OmegaConf.load(Path(__file__).resolve().parents[2] / "conf" / "eval" / "router"
                                                 / "form_encoder.yaml"))
    assert spec["type"] == "ensemble" and set(spec["members"]) == {"form", "encoder"}
    spec["members"]["encoder"]["train"] = {"max_length": 16, "supervised": {"epochs": 1, "batch_size": 8,
                                                                           "max_steps": 2}, "ppo": {"iterations": 0}}
    prompts = [f"Compute {i} * {i + 7} = ?" if i % 2 else f"What colour is sky {i}?" for i in range(40)]
    train = _set(prompts, [[0.0, 1.0] if i % 2 else [1.0, 1.0] for i in range(40)])
    ctx = RouterContext(candidates=["weak", "strong"], weak=0, strong=1, train=train, embed=lambda t: None,
                        work_dir=tmp_path)
    ens = build_router(spec, ctx)
    assert ens.name == "form_encoder"
    ens.fit(train)
    assert (tmp_path / "encoder_checkpoint").is_dir()  # the member trained inside the ensemble's fit
    s = ens.strong_score(["Compute 12 * 34 = ?", "What colour is grass?"])
    assert s.shape == (2,) and np.isfinite(s).all() and s[0] > s[1]  # the form member sees the digits
