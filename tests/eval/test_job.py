"""The evaluate_router job end to end on real RouteLLM outcomes (a small subsample), and its configs."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from hydra import compose, initialize_config_dir

from rlrouter.eval.bootstrap import paired_bootstrap
from rlrouter.eval.job import load_split, run, share_for_quality, split_by_question, split_by_subject
from rlrouter.routers.reader import EvalSet
from rlrouter.pool.base import Candidate

CONF = Path(__file__).resolve().parents[2] / "conf"
ROOT = CONF.parent


def _compose(overrides: list[str]):
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        return compose(config_name="evaluate_router", overrides=overrides)


def test_every_eval_and_router_option_composes():
    evals = sorted(p.stem for p in (CONF / "eval").glob("*.yaml"))
    routers = sorted(p.stem for p in (CONF / "eval" / "router").glob("*.yaml"))
    assert "routellm" in evals and "selector" in routers
    for e in evals:
        for r in [None, *routers]:
            cfg = _compose([f"eval={e}"] + ([f"eval/router@router={r}"] if r else []))
            if e == "routerbench":  # a pool: every candidate, no weak/strong pair (rlrouter.eval.pool_job)
                assert not cfg.eval.get("weak") and cfg.eval.routers
            else:
                assert cfg.eval.weak and cfg.eval.strong and cfg.eval.baselines
            assert (cfg.router is None) == (r is None)


def test_split_by_question_keeps_copies_together_and_task_shares():
    prompts = [f"q{i}" for i in range(100)] + ["q1", " q2 "]  # two repeated questions
    n = len(prompts)
    es = EvalSet(prompts=prompts, candidates=[Candidate("a", 1, 1), Candidate("b", 2, 2)],
                 scores=np.zeros((n, 2)), costs=np.zeros((n, 2)),
                 sources=["gsm8k"] * 50 + ["mmlu/x"] * 50 + ["gsm8k", "gsm8k"],
                 prompt_tokens=np.ones(n), completion_tokens=np.ones((n, 2)))
    train, test = split_by_question(es, 0.2, seed=0)
    assert len(set(train) | set(test)) == n and not set(train) & set(test)
    key = {i: prompts[i].strip() for i in range(n)}
    assert not {key[i] for i in train} & {key[i] for i in test}
    tasks = np.array(es.tasks)
    assert (tasks[test] == "mmlu").sum() == 10  # 20% of each task's questions
    again = split_by_question(es, 0.2, seed=0)
    assert again[1].tolist() == test.tolist()


def test_job_end_to_end_on_real_routellm_data(tmp_path, shared_data, monkeypatch):
    monkeypatch.chdir(ROOT)  # the config's data paths are relative to the project root
    cfg = _compose(["eval=smoke", "eval.max_prompts=200", f"output_dir={tmp_path}", "eval/router@router=selector",
                    "eval.baselines.mf.epochs=5", "eval.ope.n_boot=200", "eval.split.by=question",
                    "eval.bootstrap.n_boot=50",
                    # an ensemble of two baselines the job fitted before it (ref: reused, not refitted)
                    "+routers.mf_knn={type: ensemble, members: {m: {ref: mf}, k: {ref: knn}}}"])
    report = run(cfg)
    for name in ("report.json", "report.md", "cost_quality_all.png", "cost_quality_gsm8k.png",
                 "cost_quality_mmlu.png", "call_shares.png"):
        assert (tmp_path / name).stat().st_size > 0, name
    on_disk = json.loads((tmp_path / "report.json").read_text())
    assert on_disk["slices"]["all"]["n"] == report["data"]["test"] > 0
    sl = report["slices"]["all"]
    routers = sl["routers"]
    assert set(routers) == {"always_weak", "always_strong", "random", "knn", "mf", "selector", "mf_knn", "oracle",
                            "subject_oracle"}
    # fixed baselines equal the slice's reference candidates; shares sum to one
    assert routers["always_strong"]["quality"] == pytest.approx(sl["strong"]["quality"])
    assert routers["always_weak"]["quality"] == pytest.approx(sl["weak"]["quality"])
    strong = report["data"]["strong"]
    for name, r in routers.items():
        assert sum(r["shares"].values()) == pytest.approx(1.0), name
        assert r["quality"] <= routers["oracle"]["quality"] + 1e-12, name
    assert routers["always_strong"]["shares"][strong] == 1.0
    # threshold routers carry a full sweep from 0% to 100% strong calls and the curve metrics
    for name in ("random", "knn", "mf", "subject_oracle"):
        c = routers[name]["curve"]
        assert c["strong_share"][0] == 0.0 and c["strong_share"][-1] == 1.0, name
        assert np.isfinite(routers[name]["apgr"]) and 0.0 <= routers[name]["aiq"] <= 1.0, name
    # the operating point of a threshold router is calibrated to 50% strong calls (up to ties)
    assert routers["mf"]["shares"][strong] == pytest.approx(0.5, abs=0.1)
    # per-task slices partition the test split
    assert sum(report["slices"][t]["n"] for t in ("gsm8k", "mmlu")) == sl["n"]
    ope = report["ope"]
    assert set(ope["routers"]) == set(routers) - {"always_weak"}
    assert ope["routers"]["always_strong"]["true"] == pytest.approx(sl["strong"]["quality"])
    md = (tmp_path / "report.md").read_text()
    assert "| router | quality |" in md and "APGR" in md and "selector" in md and "Off-policy" in md


def _subjects_set() -> EvalSet:
    sources = [f"mmlu/s{k}" for k in range(6) for _ in range(10)] + ["gsm8k"] * 10
    prompts = [f"q{i}" for i in range(len(sources))]
    prompts[-1] = "q0"  # a GSM8K copy of a question of subject s0
    n = len(prompts)
    return EvalSet(prompts=prompts, candidates=[Candidate("a", 1, 1), Candidate("b", 2, 2)],
                   scores=np.zeros((n, 2)), costs=np.zeros((n, 2)), sources=sources,
                   prompt_tokens=np.ones(n), completion_tokens=np.ones((n, 2)))


def test_split_by_subject_holds_whole_subjects_out_and_never_leaks_a_question():
    es = _subjects_set()
    train, test = split_by_subject(es, 2, seed=3, prefix="mmlu/")
    src = np.array(es.sources)
    held = set(src[test])
    assert len(held) == 2 and all(h.startswith("mmlu/") for h in held)
    assert not held & set(src[train])  # a held-out subject has no training row
    assert len(test) == 20
    test_text = {es.prompts[i] for i in test}
    assert not test_text & {es.prompts[i] for i in train}
    assert split_by_subject(es, 2, seed=3, prefix="mmlu/")[1].tolist() == test.tolist()
    _, named = split_by_subject(es, 0, seed=0, subjects=["mmlu/s0"])
    assert set(src[named]) == {"mmlu/s0"}
    with pytest.raises(ValueError, match="eval.split.test_subjects.*mmlu/nope"):
        split_by_subject(es, 0, seed=0, subjects=["mmlu/nope"])
    with pytest.raises(ValueError, match="eval.split.holdout_subjects"):
        split_by_subject(es, 6, seed=0, prefix="mmlu/")


def test_separate_train_and_test_data_need_both(tmp_path):
    ev = {"train_data": ["x.parquet"], "prices": {}}
    with pytest.raises(ValueError, match="eval.train_data / eval.test_data: set both"):
        load_split(ev, 0)


def test_paired_bootstrap_separates_a_real_router_from_random_and_ties_with_itself():
    rng = np.random.default_rng(0)
    n = 400
    scores = np.stack([rng.random(n) < 0.5, rng.random(n) < 0.8], axis=1).astype(float)  # (N, 2): weak, strong
    costs = np.tile([0.0, 1.0], (n, 1))
    gain = scores[:, 1] - scores[:, 0]
    good = gain + 0.5 * rng.random(n)  # knows the gain, up to noise
    rand = rng.random(n)
    dec = {name: np.where(s >= np.median(s), 1, 0) for name, s in (("good", good), ("random", rand))}
    dec["copy"] = dec["good"]
    ss = {"good": good, "random": rand, "copy": good}
    out = paired_bootstrap(scores, costs, 0, 1, dec, ss, {"random": "random", "best_baseline": "copy"},
                           n_boot=200, seed=0)
    assert out["good"]["apgr_minus_random"]["lo"] > 0 and out["good"]["apgr_minus_random"]["excludes_zero"]
    assert out["good"]["quality_minus_random"]["lo"] > 0
    same = out["good"]["apgr_minus_best_baseline"]
    assert same["value"] == same["lo"] == same["hi"] == 0.0 and not same["excludes_zero"]
    assert "apgr_minus_random" not in out["random"]


def test_share_for_quality_interpolates_the_first_crossing():
    assert share_for_quality(np.array([0.0, 0.5, 1.0]), np.array([0.6, 0.8, 0.9]), 0.7) == pytest.approx(0.25)
    assert np.isnan(share_for_quality(np.array([0.0, 1.0]), np.array([0.6, 0.7]), 0.9))
