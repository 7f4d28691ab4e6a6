"""The probe and ensemble routers and the form features: against hand-checkable data."""

from __future__ import annotations

import numpy as np
import pytest

from rlrouter.routers.learned import (FORM_FEATURES, OPTION_FEATURES, fit_logistic, fit_ridge, option_match_features,
                                   prompt_form_features, split_options)
from rlrouter.routers.reader import EvalSet
from rlrouter.routers.base import RouterContext, build_router
from rlrouter.pool.base import Candidate


def test_form_features_read_form_not_topic():
    mcq = "Which is NOT prime?\nA. 2\nB. 3\nC. 4\nD. 5\nAnswer:"
    f = dict(zip(FORM_FEATURES, prompt_form_features([mcq, "Tell me a story about a cat"])[0]))
    assert f["has_options"] == 1.0 and f["negation"] == 1.0 and f["question_marks"] == 1.0
    assert f["log_option_chars_mean"] == pytest.approx(np.log1p(1.0))
    assert f["digit_share"] == pytest.approx(4 / len(mcq))
    g = dict(zip(FORM_FEATURES, prompt_form_features(["Tell me a story about a cat"])[0]))
    assert g["has_options"] == 0.0 and g["negation"] == 0.0


def test_ridge_and_logistic_recover_a_known_rule():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(2000, 3))
    w = fit_ridge(x, 2.0 * x[:, 0] - x[:, 2] + 0.5, l2=1e-6)
    assert w == pytest.approx([2.0, 0.0, -1.0, 0.5], abs=1e-6)
    y = (rng.random(2000) < 1 / (1 + np.exp(-(3 * x[:, 1] - 1)))).astype(float)
    w = fit_logistic(x, y, l2=1e-3)
    assert w[1] == pytest.approx(3.0, abs=0.4) and w[3] == pytest.approx(-1.0, abs=0.25)
    assert abs(w[0]) < 0.25 and abs(w[2]) < 0.25


def _set(prompts: list[str], scores: np.ndarray) -> EvalSet:
    n = len(prompts)
    return EvalSet(prompts=prompts, candidates=[Candidate("weak", 0.6, 0.6), Candidate("strong", 10, 30)],
                   scores=scores, costs=np.tile([1.0, 10.0], (n, 1)), sources=["t"] * n,
                   prompt_tokens=np.ones(n), completion_tokens=np.ones((n, 2)))


def test_probe_on_form_features_and_an_ensemble_route_long_math_to_strong():
    rng = np.random.default_rng(1)
    prompts, scores = [], []
    for i in range(400):
        hard = i % 2 == 0
        prompts.append(f"Compute {rng.integers(1000, 9999)} * {rng.integers(1000, 9999)} = ?" if hard
                       else "Name a colour of the sky")
        scores.append([float(rng.random() < (0.2 if hard else 0.9)), float(rng.random() < 0.95)])
    train = _set(prompts, np.array(scores))
    ctx = RouterContext(candidates=["weak", "strong"], weak=0, strong=1, train=train,
                        embed=lambda t: np.zeros((len(t), 4), dtype=np.float32))
    test = ["Compute 1234 * 5678 = ?", "Name a colour of grass"]
    for head in ("gain", "two_heads"):
        r = build_router({"type": "probe", "features": ["form"], "head": head}, ctx)
        r.fit(train)
        s = r.strong_score(test)
        assert s[0] > s[1], head
    ens = build_router({"type": "ensemble", "members": {"a": {"type": "probe", "features": "form"},
                                                       "b": {"type": "random"}}, "weights": {"a": 3.0}}, ctx)
    ens.fit(train)
    s = ens.strong_score(test)
    assert s[0] > s[1]
    with pytest.raises(ValueError, match="probe.head"):
        build_router({"type": "probe", "head": "mlp"}, ctx)
    with pytest.raises(ValueError, match="ensemble.weights.*zz"):
        build_router({"type": "ensemble", "members": {"a": {"type": "random"}}, "weights": {"zz": 1}}, ctx)
    with pytest.raises(ValueError, match="ensemble.members.a.*not a threshold router"):
        build_router({"type": "ensemble", "members": {"a": {"type": "always", "candidate": "weak"}}}, ctx)


def test_an_ensemble_member_by_ref_is_the_fitted_router_and_is_not_fitted_again():
    prompts = ["Compute 1234 * 5678 = ?", "Name a colour of the sky"] * 50
    train = _set(prompts, np.array([[0.0, 1.0], [1.0, 1.0]] * 50))
    ctx = RouterContext(candidates=["weak", "strong"], weak=0, strong=1, train=train,
                        embed=lambda t: np.zeros((len(t), 4), dtype=np.float32))
    probe = build_router({"type": "probe", "features": ["form"]}, ctx)
    probe.fit(train)
    fits = []
    probe.fit = lambda t: fits.append(t)  # a refit would show here
    ctx.extra["fitted"] = {"probe": probe}
    ens = build_router({"type": "ensemble", "members": {"p": {"ref": "probe"}, "r": {"type": "random"}},
                        "weights": {"r": 0.0}}, ctx)
    assert ens.members["p"] is probe
    ens.fit(train)
    assert fits == []
    s, own = ens.strong_score(prompts[:2]), probe.strong_score(prompts[:2])
    assert s[0] > s[1] and own[0] > own[1]
    with pytest.raises(ValueError, match=r"ensemble.members.p.ref: no router 'mf' was fitted.*\['probe'\]"):
        build_router({"type": "ensemble", "members": {"p": {"ref": "mf"}}}, ctx)
    with pytest.raises(ValueError, match="ensemble.members.p: a 'ref' member takes no other fields"):
        build_router({"type": "ensemble", "members": {"p": {"ref": "probe", "type": "probe"}}}, ctx)
    ctx.extra["fitted"]["weak"] = build_router({"type": "always", "candidate": "weak"}, ctx)
    with pytest.raises(ValueError, match="ensemble.members.w: ref 'weak' is not a threshold router"):
        build_router({"type": "ensemble", "members": {"w": {"ref": "weak"}}}, ctx)


def _vectors(table: dict[str, list[float]], calls: list[list[str]]):
    """A hand-made embedder: each text's vector from ``table``; records every call's texts."""
    def embed(texts: list[str]) -> np.ndarray:
        calls.append(list(texts))
        return np.array([table[t] for t in texts], dtype=np.float32)
    return embed


def test_split_options_takes_lettered_lines_and_leaves_the_rest_as_the_question():
    assert split_options("Passage.\nWhich one?\nA. x\nB) y\nAnswer:") == ("Passage.\nWhich one?", ["x", "y"])
    assert split_options("Tell me a story") == ("Tell me a story", [])


def test_option_match_features_measure_options_against_question_and_each_other():
    s = 1 / np.sqrt(2)
    table = {"Q?": [1, 0, 0], "near": [s, s, 0], "far": [0, 0, 1], "also far": [0, 1, 0], "P?": [0, 0, 1]}
    calls: list[list[str]] = []
    prompts = ["Q?\nA. near\nB. far\nC. also far\nAnswer:", "A story", "P?\nA. far\nB. far"]
    f = option_match_features(prompts, _vectors(table, calls))
    a, story, tie = (dict(zip(OPTION_FEATURES, row)) for row in f)
    assert calls == [["Q?", "P?"], ["near", "far", "also far", "far", "far"]]  # one call for each kind of text
    assert a["no_options"] == 0.0
    assert a["sim_top1"] == pytest.approx(s) and a["sim_top2"] == pytest.approx(0) and a["sim_min"] == pytest.approx(0)
    assert a["sim_margin"] == pytest.approx(s) and a["sim_mean"] == pytest.approx(s / 3)
    assert a["sim_top1_over_mean"] == pytest.approx(s - s / 3) and a["sim_std"] == pytest.approx(np.std([s, 0, 0]))
    assert a["option_pair_max"] == pytest.approx(s) and a["option_pair_min"] == pytest.approx(0)
    assert a["option_pair_mean"] == pytest.approx(s / 3)
    assert 0 < a["sim_entropy"] < 0.01  # one option stands out: near-zero normalised entropy
    assert story == dict(zip(OPTION_FEATURES, [1.0] + [0.0] * (len(OPTION_FEATURES) - 1)))
    assert tie["sim_margin"] == 0 and tie["sim_entropy"] == pytest.approx(1.0)  # identical options: a tie
    assert tie["option_pair_mean"] == pytest.approx(1.0)
    assert option_match_features(["No options here"], _vectors(table, calls)).tolist() == [
        [1.0] + [0.0] * (len(OPTION_FEATURES) - 1)]


def test_probe_on_option_features_routes_items_with_look_alike_options_to_strong():
    rng = np.random.default_rng(2)
    table: dict[str, list[float]] = {}
    prompts, scores = [], []
    for i in range(300):
        hard = i % 2 == 0
        q = f"Question {i}?"
        table[q] = [1.0, 0.0, 0.0]
        opts = [f"o{i}{k}" for k in "ABCD"]
        for k, o in enumerate(opts):  # hard: four near-copies; easy: one option echoes the question
            table[o] = [0.3, 1.0, 0.01 * k] if hard else ([1.0, 0.1, 0.0] if k == 0 else [0.0, 0.2 * k, 1.0])
        prompts.append(q + "\n" + "\n".join(f"{L}. {o}" for L, o in zip("ABCD", opts)) + "\nAnswer:")
        scores.append([float(rng.random() < (0.2 if hard else 0.9)), float(rng.random() < 0.95)])
    train = _set(prompts, np.array(scores))
    ctx = RouterContext(candidates=["weak", "strong"], weak=0, strong=1, train=train, embed=_vectors(table, []))
    r = build_router({"type": "probe", "features": ["options"]}, ctx)
    r.fit(train)
    s = r.strong_score(prompts[:2])
    assert s[0] > s[1] + 0.3
    ctx_none = RouterContext(candidates=["weak", "strong"], weak=0, strong=1, train=train, embed=None)
    with pytest.raises(ValueError, match="probe.features: 'options' needs the job's embedder"):
        build_router({"type": "probe", "features": ["form", "options"]}, ctx_none)


def test_option_match_features_on_real_mmlu_items_and_minilm(shared_data):
    """Real MMLU prompts, real MiniLM: an item with an option that restates the question stands out."""
    import pandas as pd

    from rlrouter.embeddings import embed_texts

    prompts = pd.read_csv(shared_data / "routellm" / "mmlu" / "mmlu_anatomy.csv")["prompt"].tolist()[:40]
    f = option_match_features(prompts + ["What is 2 + 2?"], lambda t: embed_texts(t, cache=False))
    assert np.isfinite(f).all() and f[:-1, 0].tolist() == [0.0] * 40 and f[-1, 0] == 1.0
    cols = {n: f[:-1, j] for j, n in enumerate(OPTION_FEATURES)}
    assert (cols["sim_top1"] >= cols["sim_top2"]).all() and (cols["sim_top2"] >= cols["sim_min"]).all()
    assert ((cols["sim_entropy"] >= 0) & (cols["sim_entropy"] <= 1 + 1e-9)).all()
    echo, copies = option_match_features(
        ["Which organ pumps blood through the body?\nA. The heart pumps blood\nB. Granite\nC. Violin\nD. Tuesday",
         "Which organ pumps blood through the body?\nA. The left lung\nB. The right lung\nC. Both lungs\nD. A lung"],
        lambda t: embed_texts(t, cache=False))
    m = OPTION_FEATURES.index("sim_margin"), OPTION_FEATURES.index("option_pair_mean")
    assert echo[m[0]] > copies[m[0]] + 0.1 and copies[m[1]] > echo[m[1]] + 0.2
