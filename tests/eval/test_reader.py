"""The evaluation-set reader: RouteLLM CSVs and RouterBench-style tables, pricing, and its errors."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from rlrouter.data.io import DataFileError
from rlrouter.eval.reader import EvalSet, TokenEstimate, read_eval_set

PRICES = {"big": {"input": 10.0, "output": 30.0}, "small": {"input": 0.6, "output": 0.6}}


def _table(**over) -> pd.DataFrame:
    d = {"sample_id": ["a", "b", "c"], "prompt": ["What is 2+2?", "Name a prime.", "Capital of France?"],
         "eval_name": ["gsm8k", "mmlu/x", "mmlu/y"],
         "big": [1.0, 1.0, 0.0], "big|model_response": ["4", "7", "Lyon"], "big|total_cost": [0.01, 0.02, 0.03],
         "small": [0.0, 1.0, 1.0], "small|model_response": ["5", "2", "Paris"], "small|total_cost": [1e-4, 2e-4, 3e-4]}
    d.update(over)
    return pd.DataFrame(d)


def test_routerbench_parquet_reads_scores_costs_and_sources(tmp_path):
    path = tmp_path / "rb.parquet"
    _table().to_parquet(path)
    es = read_eval_set(path)
    assert es.names == ["big", "small"]
    assert es.scores.tolist() == [[1.0, 0.0], [1.0, 1.0], [0.0, 1.0]]
    assert es.costs[:, 0].tolist() == pytest.approx([0.01, 0.02, 0.03])  # logged costs win
    assert es.sources == ["gsm8k", "mmlu/x", "mmlu/y"] and es.tasks == ["gsm8k", "mmlu", "mmlu"]


def test_routerbench_without_logged_costs_is_priced_from_config(tmp_path):
    path = tmp_path / "rb.parquet"
    _table().drop(columns=["big|total_cost", "small|total_cost"]).to_parquet(path)
    with pytest.raises(KeyError, match="no price for candidate 'big'"):
        read_eval_set(path)
    tokens = TokenEstimate(chars_per_token=4.0)
    es = read_eval_set(path, prices=PRICES, tokens=tokens)
    # "What is 2+2?" is 12 chars -> 3 tokens; big's response "4" -> 1 token: 3 * 10 + 1 * 30 per 1M
    assert es.prompt_tokens[0] == 3 and es.completion_tokens[0, 0] == 1
    assert es.costs[0, 0] == pytest.approx((3 * 10 + 1 * 30) / 1e6)


@pytest.mark.parametrize("column,value,why", [
    ("small", "maybe", "not a number"),
    ("big", 1.5, "outside"),
    ("small", float("nan"), "missing"),
])
def test_malformed_parquet_error_names_file_row_and_column(tmp_path, column, value, why):
    df = _table()
    col = df[column].tolist()
    col[2] = value
    # a column of strings ("True"/"False" and one bad cell) or of floats: parquet holds one type a column
    df[column] = [str(v) for v in col] if isinstance(value, str) else col
    path = tmp_path / "bad.parquet"
    df.to_parquet(path)
    with pytest.raises(DataFileError) as ei:
        read_eval_set(path)
    err = ei.value
    assert err.path == str(path) and err.location == "row 2" and err.field == column
    msg = str(err)
    assert str(path) in msg and "row 2" in msg and column in msg and why in msg


def test_malformed_cost_and_missing_prompt_column(tmp_path):
    df = _table()
    df["big|total_cost"] = ["0.01", "free", "0.03"]
    path = tmp_path / "cost.parquet"
    df.to_parquet(path)
    with pytest.raises(DataFileError, match=r"cost\.parquet:row 1: field 'big\|total_cost'"):
        read_eval_set(path)
    path2 = tmp_path / "noprompt.parquet"
    _table().drop(columns=["prompt"]).to_parquet(path2)
    with pytest.raises(DataFileError, match="field 'prompt'"):
        read_eval_set(path2)


def test_pickle_needs_explicit_opt_in(tmp_path):
    path = tmp_path / "rb.pkl"
    _table().to_pickle(path)
    with pytest.raises(ValueError, match="allow_pickle=True"):
        read_eval_set(path)
    es = read_eval_set(path, allow_pickle=True)
    assert len(es) == 3


def test_malformed_routellm_csv_error_names_file_row_and_column(tmp_path):
    path = tmp_path / "mmlu_toy.csv"
    path.write_text("prompt,small,big\n\"Q one\nA. x\",True,False\nQ two,True,perhaps\n", encoding="utf-8")
    with pytest.raises(DataFileError) as ei:
        read_eval_set(path, prices=PRICES)
    msg = str(ei.value)
    assert str(path) in msg and "row 2" in msg and "'big'" in msg and "perhaps" in msg


def test_routellm_csv_uses_responses_and_task_averages(tmp_path):
    (tmp_path / "mmlu_toy.csv").write_text("prompt,small,big\nAbcdefgh,True,False\n", encoding="utf-8")
    (tmp_path / "gsm8k_responses.csv").write_text(
        "prompt,small,big,small_response,big_response\nAbcd,False,True,12345678,1234\n", encoding="utf-8")
    es = read_eval_set(tmp_path, prices=PRICES, tokens=TokenEstimate(completion_tokens={"mmlu": 1}))
    rows = {s: i for i, s in enumerate(es.sources)}
    g, m = rows["gsm8k"], rows["mmlu/toy"]
    j_small = es.index("small")
    assert es.completion_tokens[g, j_small] == 2  # 8 chars of response -> 2 tokens
    assert es.completion_tokens[m, j_small] == 1  # no response: the task average
    assert es.costs[m, j_small] == pytest.approx((2 + 1) * 0.6 / 1e6)


def test_real_routellm_data_reads_whole(shared_data):
    prices = {"gpt-4-1106-preview": {"input": 10, "output": 30},
              "mistralai/Mixtral-8x7B-Instruct-v0.1": {"input": 0.6, "output": 0.6}}
    es = read_eval_set(shared_data / "routellm" / "gsm8k" / "gsm8k_responses.csv", prices=prices)
    assert len(es) == 1319
    acc = dict(zip(es.names, es.scores.mean(axis=0)))
    # the README's figures: GPT-4 85.7%, Mixtral 63.8% on GSM8K
    assert acc["gpt-4-1106-preview"] == pytest.approx(0.857, abs=0.001)
    assert acc["mistralai/Mixtral-8x7B-Instruct-v0.1"] == pytest.approx(0.638, abs=0.001)
    assert (es.costs[:, es.index("gpt-4-1106-preview")] > es.costs[:, es.index("mistralai/Mixtral-8x7B-Instruct-v0.1")]).all()


def test_evalset_validates_shapes_and_concat():
    from rlrouter.pool.base import Candidate

    cands = [Candidate("a", 1, 1), Candidate("b", 2, 2)]
    kw = dict(prompts=["p"], candidates=cands, costs=np.ones((1, 2)), sources=["t"],
              prompt_tokens=np.ones(1), completion_tokens=np.ones((1, 2)))
    with pytest.raises(ValueError, match="scores"):
        EvalSet(scores=np.array([[1.5, 0.0]]), **kw)
    with pytest.raises(ValueError, match=r"scores: expected shape \(1, 2\)"):
        EvalSet(scores=np.zeros((1, 3)), **kw)
    es = EvalSet(scores=np.array([[1.0, 0.0]]), **kw)
    both = EvalSet.concat([es, es])
    assert len(both) == 2 and both.subset([1]).scores.tolist() == [[1.0, 0.0]]
    assert math.isclose(both.costs.sum(), 4.0)


MT_BENCH = Path(__file__).parent / "data" / "mt_bench"
MT_PRICES = {"gpt-4": {"input": 10.0, "output": 30.0}, "mixtral": {"input": 0.6, "output": 0.6}}


def test_mt_bench_judgements_route_on_turn_one_and_score_mean_over_ten():
    es = read_eval_set(MT_BENCH, prices=MT_PRICES, tokens=TokenEstimate(chars_per_token=4.0))
    # llama-13b is judged but not priced, so it is not a candidate
    assert es.names == ["gpt-4", "mixtral"]
    assert es.prompts[0].startswith("Compose an engaging travel blog") and len(es) == 3
    assert es.sources == ["mt_bench/writing", "mt_bench/reasoning", "mt_bench/math"]
    # gpt-4 on 81: judgements 9 (turn 1) and 7 (turn 2) -> 0.8; mixtral on 101: the -1 verdict is skipped
    np.testing.assert_allclose(es.scores, [[0.8, 0.8], [1.0, 0.2], [0.6, 0.5]])
    # mixtral's answers give its completion lengths: "First place." is 12 chars -> 3 tokens
    assert es.completion_tokens[1, 1] == 3 and es.completion_tokens[1, 0] == 256


def test_mt_bench_missing_judgement_and_bad_score_name_the_place(tmp_path):
    import shutil

    root = tmp_path / "mt"
    shutil.copytree(MT_BENCH, root)
    judg = root / "model_judgment" / "gpt-4_single.jsonl"
    lines = judg.read_text().splitlines()
    judg.write_text("\n".join(line for line in lines if '"question_id": 111, "model": "mixtral"' not in line))
    with pytest.raises(DataFileError, match=r"question_id 111.*mixtral.*no valid judgement"):
        read_eval_set(root, prices=MT_PRICES)
    judg.write_text("\n".join(lines[:2] + [lines[2].replace('"score": 8.0', '"score": 12.0')] + lines[3:]))
    with pytest.raises(DataFileError, match=r"gpt-4_single.jsonl.*line 3.*score.*outside"):
        read_eval_set(root, prices=MT_PRICES)
