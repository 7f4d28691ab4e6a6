"""Training and test logs from different readers name the same candidates in different orders (RouteLLM
keeps its CSV's column order, FastChat's MT-Bench layout is sorted): the job compares them as sets and
aligns the columns by name. Real files: RouteLLM's logs in ../shared/data and the MT-Bench folder of the
lockbox (benchmarks/data/lockbox/mt_bench)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from rlrouter.eval.job import load_split, run

ROOT = Path(__file__).resolve().parents[2]
GSM8K = ROOT.parent / "shared" / "data" / "routellm" / "gsm8k" / "gsm8k_responses.csv"
MT_BENCH = ROOT / "benchmarks" / "data" / "lockbox" / "mt_bench"
WEAK, STRONG = "mistralai/Mixtral-8x7B-Instruct-v0.1", "gpt-4-1106-preview"
PRICES = {STRONG: {"input": 10.0, "output": 30.0}, WEAK: {"input": 0.6, "output": 0.6}}


def _ev(**kw) -> dict:
    return {"train_data": [str(GSM8K)], "test_data": [str(MT_BENCH)], "format": "auto", "weak": WEAK,
            "strong": STRONG, "prices": PRICES, "max_prompts": 0, **kw}


def _mean_judgement(qid: int, model: str) -> float:
    rows = [json.loads(x) for x in (MT_BENCH / "model_judgment" / "gpt-4_single.jsonl").read_text().splitlines()]
    return float(np.mean([r["score"] for r in rows if r["question_id"] == qid and r["model"] == model])) / 10


@pytest.mark.skipif(not GSM8K.exists(), reason="needs ../shared/data/routellm")
def test_routellm_training_logs_and_an_mtbench_test_folder_align_by_name(tmp_path):
    train, test, _ = load_split(_ev(), seed=0)
    assert train.names == [WEAK, STRONG]  # the CSV's column order
    assert test.names == train.names  # MT-Bench's sorted order [gpt-4..., mistralai/...] realigned
    assert len(test) == 80
    # each column still holds its own model's judgements after the realignment
    first_q = json.loads((MT_BENCH / "question.jsonl").read_text().splitlines()[0])["question_id"]
    for j, name in enumerate(test.names):
        assert test.scores[0, j] == pytest.approx(_mean_judgement(first_q, name))
        assert test.candidates[j].name == name
    assert test.costs[:, test.index(STRONG)].mean() > test.costs[:, test.index(WEAK)].mean()

    cfg = {"seed": 0, "output_dir": str(tmp_path / "eval"), "command": "test", "router": None, "routers": {},
           "eval": {**_ev(), "bootstrap": {"enabled": False},
                    "baselines": {"always_weak": {"type": "always", "candidate": "weak"},
                                  "always_strong": {"type": "always", "candidate": "strong"},
                                  "random": {"type": "random", "p_strong": 0.5}}}}
    report = run(cfg)
    per = report["slices"]["all"]["routers"]
    assert per["always_strong"]["quality"] == pytest.approx(test.scores[:, test.index(STRONG)].mean())
    assert per["always_strong"]["shares"][STRONG] == 1.0


@pytest.mark.skipif(not GSM8K.exists(), reason="needs ../shared/data/routellm")
def test_other_candidates_are_refused_naming_both_lists():
    prices = {**PRICES, "other-llm": {"input": 1.0, "output": 1.0}}
    ev = _ev(prices=prices)
    train, test, _ = load_split(ev, seed=0)  # the same two judged models: fine
    with pytest.raises(ValueError, match=r"eval.test_data .*missing \['x'\]"):
        test.aligned([WEAK, "x"], where="eval.test_data (against eval.train_data)")
