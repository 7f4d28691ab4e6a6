"""The small LLM's confidence features (real SmolLM2-135M) and the per-text cache they share with MiniLM."""

from __future__ import annotations

import numpy as np
import pytest

from rlrouter.embeddings import cached_rows
from rlrouter.routers.confidence import LM_FEATURES, ConfidenceScorer
from rlrouter.routers.reader import EvalSet
from rlrouter.routers.base import RouterContext, build_router
from rlrouter.pool.base import Candidate

MCQ = "What is the capital of France?\nA. Berlin\nB. Paris\nC. Rome\nD. Madrid\nAnswer:"
PLAIN = "The cat sat on the mat and looked out of the window at the birds."
NOISE = "qzx vvkp jrrw ploq xxzt wqmf krrp zzqv"


@pytest.fixture(scope="module")
def scorer():
    return ConfidenceScorer(max_length=64, batch_size=4)


def test_features_are_bounded_and_read_the_prompt(scorer):
    f = scorer.features([MCQ, PLAIN, NOISE])
    assert f.shape == (3, len(LM_FEATURES)) and np.isfinite(f).all()
    col = {k: f[:, i] for i, k in enumerate(LM_FEATURES)}
    assert ((col["lm_letter_mass"] >= 0) & (col["lm_letter_mass"] <= 1)).all()
    assert ((col["lm_letter_entropy"] >= 0) & (col["lm_letter_entropy"] <= 1 + 1e-5)).all()
    assert ((col["lm_letter_max"] >= 0.25 - 1e-5) & (col["lm_letter_max"] <= 1 + 1e-5)).all()
    # English is less surprising than random letters; after "Answer:" an option letter is likelier
    assert col["lm_nll_mean"][1] < col["lm_nll_mean"][2]
    assert col["lm_letter_mass"][0] > col["lm_letter_mass"][1]


def test_a_prompt_scores_the_same_alone_and_left_padded_in_a_batch(scorer):
    alone = scorer.features([MCQ])[0]
    batched = scorer.features([PLAIN, MCQ + " " * 0, "Short?", NOISE * 3])[1]
    np.testing.assert_allclose(batched, alone, rtol=2e-3, atol=2e-3)


def test_a_long_prompt_keeps_its_end(scorer):
    long = "Background. " * 200 + MCQ  # about 400 tokens, truncated to the scorer's 64 from the left
    f = scorer.features([long, MCQ])
    mass = LM_FEATURES.index("lm_letter_mass")
    assert f[0, mass] > 0.5 * f[1, mass]  # the options and the cue survived the truncation


def test_cached_rows_computes_each_text_once_and_keeps_finished_chunks(tmp_path):
    seen: list[str] = []

    def compute(texts):
        seen.extend(texts)
        return np.array([[len(t), t.count("a")] for t in texts], dtype=np.float32)

    texts = ["a", "bb", "aaa", "bb"]
    out = cached_rows(texts, tmp_path / "c", compute, chunk=1)
    assert out.tolist() == [[1, 1], [2, 0], [3, 3], [2, 0]]
    assert sorted(seen) == ["a", "aaa", "bb"]  # the duplicate is computed once
    seen.clear()
    again = cached_rows(["aaa", "cc"], tmp_path / "c", compute)
    assert again.tolist() == [[3, 3], [2, 0]] and seen == ["cc"]

    def fails(texts):
        if "boom" in texts:
            raise RuntimeError("interrupted")
        return compute(texts)

    seen.clear()
    with pytest.raises(RuntimeError):
        cached_rows(["d", "boom"], tmp_path / "c", fails, chunk=1)  # "d" (shorter) is stored first
    seen.clear()
    cached_rows(["d"], tmp_path / "c", compute)
    assert seen == []


def _set(prompts, scores):
    n = len(prompts)
    return EvalSet(prompts=prompts, candidates=[Candidate("weak", 0.6, 0.6), Candidate("strong", 10, 30)],
                   scores=np.asarray(scores, dtype=float), costs=np.tile([1.0, 10.0], (n, 1)), sources=["t"] * n,
                   prompt_tokens=np.ones(n), completion_tokens=np.ones((n, 2)))


def test_probe_on_llm_features_routes_what_the_llm_finds_hard(monkeypatch):
    import rlrouter.routers.learned as learned

    # the LLM features stand in as a lookup (the probe's logic, not the LLM, is under test here)
    table = {f"q{i}": [float(i % 2), 0, 0, 0, 0, 0] for i in range(200)}
    monkeypatch.setattr(learned, "confidence_features",
                        lambda prompts, **kw: np.array([table[p] for p in prompts], dtype=np.float32))
    rng = np.random.default_rng(0)
    prompts = list(table)
    scores = [[float(rng.random() < (0.2 if i % 2 else 0.9)), float(rng.random() < 0.9)] for i in range(200)]
    train = _set(prompts, scores)
    ctx = RouterContext(candidates=["weak", "strong"], weak=0, strong=1, train=train, embed=None)
    r = build_router({"type": "probe", "features": ["llm"]}, ctx)
    r.fit(train)
    s = r.strong_score(["q1", "q2"])
    assert s[0] > s[1] + 0.3
    with pytest.raises(ValueError, match="probe.features"):
        build_router({"type": "probe", "features": ["llm", "vibes"]}, ctx)
    with pytest.raises(ValueError, match="probe.llm_max_length"):
        build_router({"type": "probe", "features": ["llm"], "llm_max_length": 0}, ctx)
