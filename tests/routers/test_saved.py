"""Router folders (rlrouter.routers.saved): calibration, and a save/load round trip of every router type that
learns in fit() giving the saved router's scores and decisions; train_router.run on real RouteLLM rows."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from rlrouter.routers.reader import EvalSet
from rlrouter.routers.base import RouterContext, ThresholdRouter, build_router, share_threshold
from rlrouter.routers.saved import Calibration, SavedRouterError, load_router, read_manifest, save_router
from rlrouter.pool.base import Candidate
from tests.helpers import hash_embed

ROOT = Path(__file__).resolve().parents[2]
NAMES = ["weak-model", "strong-model"]


def topic(prompts: list[str]) -> list[str]:
    """An intent 'classifier' for the intent router: the prompt's first word."""
    return [p.split()[0] for p in prompts]


def _data(n: int = 60, seed: int = 0) -> EvalSet:
    rng = np.random.default_rng(seed)
    subjects = ["math", "law", "poetry"]
    prompts, sources = [], []
    for i in range(n):
        s = subjects[i % 3]
        opts = "\n".join(f"{c}. option {rng.integers(100)} for {s}" for c in "ABCD")
        prompts.append(f"{s} question {i}: what is {rng.integers(1000)} + {rng.integers(1000)}?\n{opts}\nAnswer:")
        sources.append(f"mmlu/{s}")
    strong_wins = np.array([i % 3 == 0 or rng.random() < 0.3 for i in range(n)], dtype=float)
    weak_wins = np.array([rng.random() < 0.4 for _ in range(n)], dtype=float)
    scores = np.stack([weak_wins, np.maximum(strong_wins, weak_wins)], axis=1)
    costs = np.tile([0.001, 0.02], (n, 1))
    return EvalSet(prompts=prompts, candidates=[Candidate(NAMES[0], 0.6, 0.6), Candidate(NAMES[1], 10.0, 30.0)],
                   scores=scores, costs=costs, sources=sources, prompt_tokens=np.ones(n),
                   completion_tokens=np.ones((n, 2)))


def test_calibration_maps_a_strong_share_to_the_training_quantile():
    s = np.random.default_rng(0).normal(size=997)
    cal = Calibration.from_scores(s)
    for share in (0.1, 0.25, 0.5, 0.9, 1.0):
        assert cal.threshold(share) == pytest.approx(share_threshold(s, share), abs=1e-9)
        assert cal.strong_share(cal.threshold(share)) == pytest.approx(share, abs=2e-3)
        assert (s >= cal.threshold(share)).mean() == pytest.approx(share, abs=2e-3)
    # between the 0.1% grid points: close to the exact quantile, never off by more than a grid step
    assert cal.threshold(0.3337) == pytest.approx(share_threshold(s, 0.3337), abs=0.01)
    assert cal.threshold(0.0) == math.inf and cal.strong_share(math.inf) == 0.0
    assert cal.strong_share(-1e9) == 1.0
    for bad in (-0.1, 1.5, float("nan")):
        with pytest.raises(ValueError, match="strong_share: must be a number in"):
            cal.threshold(bad)
    # +-inf scores (an intent category with no price gap) give no NaN thresholds
    inf = Calibration.from_scores(np.array([-np.inf, 0.1, 0.2, np.inf]))
    assert not any(math.isnan(q) for q in inf.quantiles)
    assert inf.threshold(0.5) == pytest.approx(0.15) and inf.threshold(1.0) == -np.inf
    assert Calibration.from_dict(json.loads(json.dumps(cal.to_dict()))) == cal


SPECS = {
    "knn": {"type": "knn", "k": 5},
    "mf": {"type": "mf", "dim": 8, "epochs": 2, "batch_size": 32},
    "probe_gain": {"type": "probe", "features": ["embedding", "form"], "head": "gain", "l2": 1.0},
    "probe_form_options": {"type": "probe", "features": ["form", "options"], "head": "two_heads"},
    "ensemble": {"type": "ensemble", "members": {"p": {"type": "probe", "features": ["form"]},
                                                 "k": {"type": "knn", "k": 3}}, "weights": {"p": 2.0}},
    "intent": {"type": "intent", "classifier": "tests.routers.test_saved:topic", "lam": 0.5},
    "selector": {"type": "selector", "config": {"use_contextual": True, "enable_personalization": False}},
    "random": {"type": "random", "p_strong": 0.3},
    "always": {"type": "always", "candidate": "strong"},
}


@pytest.mark.parametrize("name", sorted(SPECS))
def test_round_trip_gives_the_saved_routers_scores_and_decisions(name, tmp_path):
    data = _data()
    train, test = data.subset(range(45)), data.subset(range(45, 60))
    ctx = RouterContext(candidates=NAMES, weak=0, strong=1, train=train, embed=hash_embed, seed=0)
    spec = dict(SPECS[name])
    router = build_router({**spec, "name": name}, ctx)
    router.fit(train)
    cal = None
    if isinstance(router, ThresholdRouter):
        scores = router.strong_score(train.prompts)
        cal = Calibration.from_scores(scores)
        if name != "random":
            router.calibrate(train.prompts, 0.4, scores=scores)
    m = save_router(router, tmp_path / name, type_name=spec["type"], spec=spec, candidates=train.candidates, weak=0,
                    strong=1, calibration=cal, embedding={"model": "hash"}, seed=0, train={"prompts": len(train)})
    assert read_manifest(tmp_path / name).to_dict() == m.to_dict()
    saved = load_router(tmp_path / name, embed=hash_embed)
    assert saved.manifest.weak == NAMES[0] and saved.manifest.strong == NAMES[1]
    assert saved.manifest.online == (name == "selector")
    if isinstance(router, ThresholdRouter):
        np.testing.assert_array_equal(saved.router.strong_score(test.prompts), router.strong_score(test.prompts))
        assert saved.router.threshold == router.threshold == m.threshold
        idx, s, t = saved.route(test.prompts, strong_share=0.4)
        assert t == pytest.approx(cal.threshold(0.4)) and (idx == np.where(s >= t, 1, 0)).all()
        idx, _, t = saved.route(test.prompts)  # the saved default threshold
        np.testing.assert_array_equal(idx, router.decide(test.prompts))
    elif name == "selector":
        # the same posteriors: the mean of each candidate's contextual arm is the saved one
        for cand, arm in router.selector.state.contextual.items():
            np.testing.assert_array_equal(saved.router.selector.state.contextual[cand].mu, arm.mu)
        assert saved.router.selector.state.feedback_count == router.selector.state.feedback_count == 45
        with pytest.raises(ValueError, match="takes no threshold"):
            saved.route(test.prompts, threshold=0.5)
    else:
        np.testing.assert_array_equal(saved.route(test.prompts)[0], router.decide(test.prompts))


def test_encoder_router_round_trip(tmp_path):
    """The smallest encoder router: 2 supervised steps, no PPO (real MiniLM + LoRA)."""
    data = _data(40)
    ctx = RouterContext(candidates=NAMES, weak=0, strong=1, train=data, embed=hash_embed, seed=0)
    spec = {"type": "encoder", "train": {"max_length": 32, "supervised": {"max_steps": 2, "batch_size": 8},
                                         "ppo": {"iterations": 0}}}
    router = build_router(dict(spec), ctx)
    router.fit(data)
    scores = router.strong_score(data.prompts)
    save_router(router, tmp_path / "enc", type_name="encoder", spec=spec, candidates=data.candidates, weak=0, strong=1,
                calibration=Calibration.from_scores(scores))
    assert (tmp_path / "enc" / "encoder" / "adapter_config.json").exists()
    saved = load_router(tmp_path / "enc", embed=hash_embed)
    np.testing.assert_allclose(saved.router.strong_score(data.prompts[:8]), scores[:8], atol=1e-6)


def test_bad_folders_are_named(tmp_path):
    with pytest.raises(SavedRouterError, match="no manifest.json"):
        read_manifest(tmp_path)
    (tmp_path / "manifest.json").write_text('{"format": "something else"}')
    with pytest.raises(SavedRouterError, match="not a saved router"):
        read_manifest(tmp_path)
    (tmp_path / "manifest.json").write_text("{not json")
    with pytest.raises(SavedRouterError, match="not JSON"):
        read_manifest(tmp_path)
    data = _data()
    ctx = RouterContext(candidates=NAMES, weak=0, strong=1, train=data, embed=hash_embed)
    knn = build_router({"type": "knn"}, ctx)
    with pytest.raises(SavedRouterError, match="fit\\(\\) before saving"):
        save_router(knn, tmp_path / "k", type_name="knn", spec={}, candidates=data.candidates, weak=0, strong=1,
                    calibration=Calibration.from_scores(np.zeros(3)))
    knn.fit(data)
    with pytest.raises(SavedRouterError, match="saved with its calibration"):
        save_router(knn, tmp_path / "k", type_name="knn", spec={}, candidates=data.candidates, weak=0, strong=1)
    save_router(knn, tmp_path / "k", type_name="knn", spec={}, candidates=data.candidates, weak=0, strong=1,
                calibration=Calibration.from_scores(knn.strong_score(data.prompts)))
    (tmp_path / "k" / "knn.npz").unlink()
    with pytest.raises(SavedRouterError, match="does not load"):
        load_router(tmp_path / "k", embed=hash_embed)


def test_train_router_job_on_real_routellm_rows(tmp_path, shared_data, monkeypatch):
    from hydra import compose, initialize_config_dir

    from rlrouter.eval.train_router import run

    monkeypatch.chdir(ROOT)  # the config's data paths are relative to the project root
    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
        cfg = compose(config_name="train_router", overrides=[
            "eval=smoke", "eval.max_prompts=200", "eval.split.by=question", "baseline=knn",
            f"output_dir={tmp_path / 'knn'}"])
        both = compose(config_name="train_router", overrides=["baseline=knn", "eval/router@router=selector"])
        routers = sorted(p.stem for p in (ROOT / "conf" / "eval" / "router").glob("*.yaml"))
        for r in routers:  # every router entry evaluate_router takes composes here too
            assert compose(config_name="train_router", overrides=[f"eval/router@router={r}"]).router.type
    m = run(cfg)
    assert m.type == "knn" and m.weak.startswith("mistralai/") and m.strong == "gpt-4-1106-preview"
    assert m.train["rows"] == "evaluate_router's training split" and 100 < m.train["prompts"] < 200
    assert m.calibration.n == m.train["prompts"] and m.train["strong_share"] == 0.5
    saved = load_router(tmp_path / "knn")
    assert m.threshold == pytest.approx(m.calibration.threshold(0.5))
    idx, s, t = saved.route(["What is the capital of France?\nA. Paris\nB. Rome\nAnswer:"], strong_share=0.2)
    assert t == pytest.approx(m.calibration.threshold(0.2)) and idx[0] == (1 if s[0] >= t else 0)
    with pytest.raises(ValueError, match="set exactly one of router"):
        run(both)
