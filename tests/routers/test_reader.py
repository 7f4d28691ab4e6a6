"""The evaluation-set reader: RouteLLM CSVs and RouterBench-style tables, pricing, and its errors."""

from __future__ import annotations

import ast
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from rlrouter.data.io import DataFileError
from rlrouter.routers.reader import EvalSet, TokenEstimate, read_eval_set

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


MT_BENCH = Path(__file__).parents[1] / "eval" / "data" / "mt_bench"
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


# ---------------------------------------------------------------- RouterBench's CSV layout and its quirks


def _rb_csv(path: Path, rows: list[dict]) -> Path:
    pd.DataFrame(rows).to_csv(path)  # pandas writes the unnamed index column first, as RouterBench's files have
    return path


def _rb_row(sid: str, prompt: str, a, b, task: str = "arc-challenge") -> dict:
    return {"sample_id": sid, "prompt": repr([prompt]), "eval_name": task,
            "big": a, "big|model_response": repr(["A"]), "big|total_cost": 0.01,
            "small": b, "small|model_response": repr(["B\n"]), "small|total_cost": 0.0001}


FEW_SHOT = "Q: 1+1?\nA) 2\nB) 3\nAnswer:\nA\n\nQ: 2+2?\nA) 4\nB) 5\nAnswer:\nA\n\nQ: 3+3?\nA) 5\nB) 6\nAnswer:"


def test_routerbench_csv_reads_list_literals_and_routes_on_the_question(tmp_path):
    path = _rb_csv(tmp_path / "t.csv", [_rb_row("x1", FEW_SHOT, 1.0, 0.0), _rb_row("x2", "Write f.", 0.0, 1.0, "mbpp")])
    es = read_eval_set(path)  # auto: the header's |model_response columns say RouterBench
    assert es.names == ["big", "small"] and es.ids == ["x1", "x2"]
    assert es.prompts == ["Q: 3+3?\nA) 5\nB) 6\nAnswer:", "Write f."]
    assert es.responses == {"big": ["A", "A"], "small": ["B\n", "B\n"]}
    assert es.costs[:, 1].tolist() == pytest.approx([1e-4, 1e-4])
    # tokens are counted on the whole prompt, few-shot examples included
    assert es.prompt_tokens[0] == math.ceil(len(FEW_SHOT) / 4)
    full = read_eval_set(path, question="full")
    assert full.prompts[0] == FEW_SHOT


def test_routerbench_blank_scores_and_repeated_ids_are_counted_and_follow_the_config(tmp_path):
    rows = [_rb_row("x1", "Q1", 1.0, 0.0), _rb_row("x2", "Q2", "", 1.0), _rb_row("x1", "Q3", 0.0, 1.0)]
    path = _rb_csv(tmp_path / "t.csv", rows)
    with pytest.raises(DataFileError, match=r"t\.csv:row 1: field 'big': score is missing"):
        read_eval_set(path)  # the reader's default refuses a blank cell
    rep = []
    es = read_eval_set(path, blank_scores="drop", repeated_ids="drop", report=rep)
    assert es.ids == ["x1"]
    t = rep[0]
    assert (t.rows, t.kept, t.blank_cells, t.blank_rows, t.repeated_ids) == (3, 1, {"big": 1}, 1, 1)
    assert any("1 blank correctness cells in 1 rows (rows dropped" in line for line in t.lines())
    assert any("1 rows repeat an earlier sample_id (later rows dropped" in line for line in t.lines())
    assert "row 2, column 'sample_id': 'x1' repeats row 0" in t.examples
    es = read_eval_set(path, blank_scores="zero", repeated_ids="keep")
    assert es.ids == ["x1", "x2", "x1"] and es.scores[1].tolist() == [0.0, 1.0]
    with pytest.raises(ValueError, match="eval.blank_scores"):
        read_eval_set(path, blank_scores="guess")


@pytest.mark.parametrize("column,cell,why", [
    ("prompt", "['unclosed", "not a Python list literal"),
    ("prompt", "[1, 2]", "expected a list of strings"),
    ("prompt", "__import__('os').system('true')", None),  # not a list literal: read as the plain text, never run
    ("small", "perhaps", "not a number"),
    ("big|total_cost", "-1", "negative"),
    ("big|model_response", "['x', 3]", "expected a list of strings"),
])
def test_bad_routerbench_csv_names_file_row_and_column(tmp_path, column, cell, why):
    rows = [_rb_row("x1", "Q1", 1.0, 0.0), _rb_row("x2", "Q2", 1.0, 0.0)]
    rows[1][column] = cell
    path = _rb_csv(tmp_path / "bad.csv", rows)
    if why is None:
        assert read_eval_set(path).prompts[1] == cell
        return
    with pytest.raises(DataFileError) as ei:
        read_eval_set(path)
    assert (ei.value.path, ei.value.location, ei.value.field) == (str(path), "row 1", column)
    assert why in str(ei.value)


def test_the_question_rule_on_routerbench_three_tasks(shared_data):
    """The last paragraph is the question: ARC's and Winogrande's few-shot prompts end in the question with
    its options and answer instruction, and MBPP's prompts are the task alone."""
    from rlrouter.data.routerbench import question_text

    root = shared_data / "routerbench"
    if not root.exists():
        pytest.skip(f"{root} is absent")
    for name, task in (("arc_challenge_test.csv", "arc-challenge"), ("winograde_test.csv", "winogrande"),
                       ("mbpp_test.csv", "mbpp")):
        df = pd.read_csv(root / name, dtype=str, keep_default_na=False)
        es = read_eval_set(root / name, blank_scores="drop", repeated_ids="keep")
        assert set(es.tasks) == {task} and len(es.names) == 11
        for q, raw in zip(es.prompts[:50], df["prompt"][:50]):
            whole = "\n\n".join(ast.literal_eval(raw))
            assert whole.rstrip().endswith(q)  # the prompt's last paragraph, whole
            assert "\n\n" not in q and q.strip() == q and q
        if task == "mbpp":
            assert es.prompts[0].startswith("Write a ") and question_text(es.prompts[0]) == es.prompts[0]
        else:
            # one question with its options: the few-shot examples' answers are gone
            assert all(p.count("Answer:") == 1 and p.rstrip().endswith("Answer:") for p in es.prompts)
            assert all("A) " in p and "B) " in p for p in es.prompts)


def _scores_only(tmp_path, suffix: str) -> Path:
    """A user's logged table of scores only: prompt, eval_name, one score column per model (and an index)."""
    df = _table()[["sample_id", "prompt", "eval_name", "big", "small"]]
    path = tmp_path / f"scores{suffix}"
    if suffix == ".csv":
        df.to_csv(path)  # pandas writes its index as an unnamed first column
    else:
        df.to_parquet(path)
    return path


@pytest.mark.parametrize("suffix", [".csv", ".parquet"])
def test_a_table_of_scores_only_reads_its_score_columns_as_candidates(tmp_path, suffix):
    path = _scores_only(tmp_path, suffix)
    tokens = TokenEstimate(chars_per_token=4.0)
    es = read_eval_set(path, prices=PRICES, tokens=tokens)
    assert es.names == ["big", "small"] and es.scores.tolist() == [[1.0, 0.0], [1.0, 1.0], [0.0, 1.0]]
    # priced from eval.prices: 3 prompt tokens, and the estimate's reply length where no reply is logged
    assert es.prompt_tokens[0] == 3
    assert es.costs[0, 0] == pytest.approx((3 * 10 + es.completion_tokens[0, 0] * 30) / 1e6)
    # the models eval.prices names are the candidates when it names some of the columns
    es = read_eval_set(path, prices={"big": PRICES["big"], "small": PRICES["small"], "absent": PRICES["big"]},
                       tokens=tokens)
    assert es.names == ["big", "small"]


def test_a_table_with_one_score_column_names_the_settings_that_fix_it(tmp_path):
    path = tmp_path / "one.parquet"
    _table()[["prompt", "eval_name", "big"]].assign(note=["x", "y", "z"]).to_parquet(path)
    for prices, how in [(None, "the columns of scores in"), (PRICES, "the columns eval.prices names")]:
        with pytest.raises(DataFileError, match=rf"found 1 candidate columns \({how}.*eval.candidates.*eval.prices"):
            read_eval_set(path, prices=prices)
