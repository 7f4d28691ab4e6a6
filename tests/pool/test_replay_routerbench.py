"""The replay pool over RouterBench's tables: logged replies and logged costs, the Router-R1 data built from
them, and the Router-R1 reward of hand-computed episodes."""

from __future__ import annotations

import asyncio
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from omegaconf import OmegaConf

from rlrouter.data.build import BuildConfig, CandidateSpec, SourceSpec, build, load_router_r1_split
from rlrouter.data.routerbench import load_logged_outcomes
from rlrouter.data.sources import routerbench_golds
from rlrouter.pool import Candidate, CandidatePool
from rlrouter.pool.replay import ReplayBackend
from rlrouter.protocol import REPLY_GOLD
from rlrouter.rewards.router_r1 import RouterR1Reward

ROOT = Path(__file__).resolve().parents[2]
FEW_SHOT = "Q: 1+1?\nA) 2\nB) 3\nAnswer:\nA\n\n"


def _table(path: Path, split: str, n: int) -> Path:
    """n prompts; 'big' is right on every prompt, 'small' on even ones; prompt 0 of test: nobody is right."""
    rows = []
    for i in range(n):
        q = f"Question {split} {i}: which colour is the sky at noon?\nA) green\nB) blue\nAnswer:"
        nobody = split == "test" and i == 0
        big_right, small_right = not nobody, i % 2 == 0 and not nobody
        rows.append({"sample_id": f"{split}.{i}", "prompt": repr([FEW_SHOT + q]), "eval_name": "arc-challenge",
                     "big": float(big_right), "big|model_response": repr(["B" if big_right else "A"]),
                     "big|total_cost": 0.005,
                     "small": float(small_right), "small|model_response": repr(["B\n" if small_right else "A\n"]),
                     "small|total_cost": 0.0001 * (1 + i)})
    f = path / f"toy_{split}.csv"
    pd.DataFrame(rows).to_csv(f)
    return f


@pytest.fixture
def folder(tmp_path):
    _table(tmp_path, "train", 8)
    _table(tmp_path, "test", 4)
    return tmp_path


def _backend(folder: Path, model: str) -> ReplayBackend:
    return ReplayBackend(Candidate(model, price_in=1.0, price_out=1.0,
                                   options={"model": model, "source": str(folder), "match": "fuzzy"}))


def test_replay_answers_with_the_logged_reply_correctness_and_cost(folder):
    small = _backend(folder, "small")
    q = "Question train 3: which colour is the sky at noon?\nA) green\nB) blue\nAnswer:"
    r = small.answer(q)  # the question without the few-shot example, as the policy sees it
    assert (r.text, r.correct, r.cost) == ("A\n", False, pytest.approx(0.0004))
    r = _backend(folder, "big").answer("Question test 2: which colour is the sky at noon?\nA) green\nB) blue\nAnswer:")
    assert (r.text, r.correct, r.cost) == ("B", True, pytest.approx(0.005))
    assert len(small.table) == 12 and small.table.costs.shape == (12, 2)  # both splits of the folder


def test_golds_are_the_correct_replies_letters_or_by_reference():
    assert routerbench_golds(["B", "B\n", "A"], [True, True, False]) == ["B"]
    # a program is graded by reference: the policy names the candidate whose reply it returns
    assert routerbench_golds(["def f(): return 1", "def f(): return 2"], [False, True]) == [REPLY_GOLD]
    assert routerbench_golds(["A", "C"], [False, False]) == []


def test_build_reads_train_and_test_tables_into_their_own_splits(folder):
    cands = [CandidateSpec("big", 10.0, 30.0, logged_as="big"), CandidateSpec("small", 0.2, 0.2, logged_as="small")]
    cfg = BuildConfig(sources=[SourceSpec("routerbench", path=str(folder), split="train", feeds="train"),
                               SourceSpec("routerbench", path=str(folder), split="test", feeds="test")],
                      candidates=cands, train_size=8, test_size=3, out_dir=str(folder / "built"))
    stats = build(cfg, load_logged_outcomes(folder))
    train, test = (load_router_r1_split(stats[s]["path"]) for s in ("train", "test"))
    assert sorted(r["id"] for r in train) == [f"routerbench-train.{i}" for i in range(8)]
    # test.0 has no correct reply, so no gold answer: left out; the three others are the test split
    assert sorted(r["id"] for r in test) == ["routerbench-test.1", "routerbench-test.2", "routerbench-test.3"]
    assert all(list(r["ground_truth"]) == ["B"] for r in train + test)
    assert {r["source"] for r in train + test} == {"arc-challenge"}  # the task: what reports slice by
    assert train[0]["query"].startswith("Question train") and "Q: 1+1?" not in train[0]["query"]
    odd = next(r for r in train if r["id"] == "routerbench-train.1")
    assert odd["optimal_model"] == "big"  # the cheapest model logged right
    even = next(r for r in train if r["id"] == "routerbench-train.2")
    assert even["optimal_model"] == "small"
    with pytest.raises(ValueError, match="feeds"):
        SourceSpec("routerbench", feeds="dev")


def test_reward_of_hand_computed_episodes_uses_the_logged_reply_and_cost(folder):
    """An episode that asks the cheap model and copies its reply, against the golds and the logged cost:
    Router-R1's rule, correct -> (1 + format)(1 - alpha) + alpha * cost_reward, wrong -> format."""
    small = _backend(folder, "small")
    q_right = "Question train 2: which colour is the sky at noon?\nA) green\nB) blue\nAnswer:"
    q_wrong = "Question train 3: which colour is the sky at noon?\nA) green\nB) blue\nAnswer:"
    episodes, costs = [], []
    for q in (q_right, q_wrong):
        r = small.answer(q)
        episodes.append(f"<think>ask the cheap one</think><search>small: {q}</search>"
                        f"<information>{r.text}</information><think>copy it</think><answer>{r.text.strip()}</answer>")
        costs.append(r.cost)
    assert costs == pytest.approx([0.0003, 0.0004])
    lo, hi = 0.0, float(np.sqrt(0.005))  # sqrt-cost scale from free to the dear model's call
    reward = RouterR1Reward(alpha=0.5, candidates=["big", "small"], cost_bounds=[lo, hi])
    got = reward(["q", "q"], episodes, ground_truth=[["B"], ["B"]], route_costs=costs,
                 tool_calls=[["small"], ["small"]])
    cost_reward = 1.0 - np.sqrt(0.0003) / hi
    assert got[0] == pytest.approx((1.0 + 0.0) * 0.5 + 0.5 * cost_reward)  # right, format 0
    assert got[1] == pytest.approx(0.0)  # wrong: its format reward only


def test_shipped_pool_answers_a_real_question_with_each_models_logged_reply_and_cost(shared_data):
    root = shared_data / "routerbench"
    if not root.exists():
        pytest.skip(f"{root} is absent")
    cfg = OmegaConf.load(ROOT / "conf" / "pool" / "routerbench_replay.yaml")
    cfg = OmegaConf.merge({"paths": {"shared_data": str(shared_data)}}, {"pool": cfg}).pool
    pool = CandidatePool.from_config(OmegaConf.to_container(cfg, resolve=True))
    assert len(pool.candidates) == 11
    table = load_logged_outcomes(root)
    row = 7
    q = table.prompts[row]
    cands = list(pool.candidates.values())
    replies = asyncio.run(pool.route([(c.name, q) for c in cands]))
    for c, r in zip(cands, replies):
        col = c.options["model"]
        assert r.text == table.response(row, col) and r.cost == pytest.approx(table.cost(row, col))
        assert r.correct == (table.scores[row, table.model_index(col)] >= 0.5)
