"""The evaluate_router job over a pool (no weak/strong pair): tables in RouterBench's layout, their quirks,
settings chosen on train, the report and the ledger."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from hydra import compose, initialize_config_dir

from rlrouter.cli import main as cli
from rlrouter.eval.pool_job import load_pool, run_evaluation, run_pool, select_settings, task_folds

CONF = Path(__file__).resolve().parents[2] / "conf"
MODELS = {"cheap": 1e-4, "mid": 1e-3, "dear": 1e-2}


def _table(path: Path, n: int, start: int, seed: int) -> Path:
    """Two tasks; 'cheap' is right on the easy half, 'mid' on most, 'dear' on all. Easy prompts say so."""
    rng = np.random.default_rng(seed)
    rows = []
    for i in range(start, start + n):
        easy = i % 2 == 0
        task = "arc-challenge" if i % 3 else "mbpp"
        q = f"{'What colour is the sky' if easy else 'Which gas do plants fix in photosynthesis'} (item {i})?\nA) x\nB) y"
        row = {"sample_id": f"s{i}", "prompt": repr([f"Example.\nA) a\nAnswer:\nA\n\n{q}"]), "eval_name": task}
        for m, cost in MODELS.items():
            right = {"cheap": easy, "mid": easy or rng.random() < 0.5, "dear": True}[m]
            row[m] = 1.0 if right else 0.0
            row[f"{m}|model_response"] = repr(["A" if right else "B"])
            row[f"{m}|total_cost"] = cost * (1 + 0.1 * rng.random())
        rows.append(row)
    pd.DataFrame(rows).to_csv(path)
    return path


@pytest.fixture
def tables(tmp_path):
    train = _table(tmp_path / "train.csv", 60, 0, 0)
    test = _table(tmp_path / "test.csv", 30, 58, 1)  # s58, s59 are also training ids
    return train, test


def _cfg(tmp_path, train, test, routers, **ev):
    return {"seed": 0, "output_dir": str(tmp_path / "out"),
            "eval": {"train_data": [str(train)], "test_data": [str(test)], "blank_scores": "drop",
                     "repeated_ids": "drop", "overlap": "drop", "wtp": {"num": 20}, "price_weights": [0.1],
                     "select": {"folds": 3}, "bootstrap": {"n_boot": 100}, "ledger": str(tmp_path / "ledger.jsonl"),
                     "routers": routers, **ev}}


def test_overlap_between_train_and_test_is_reported_and_dropped_or_kept(tmp_path, tables):
    train, test = tables
    ev = _cfg(tmp_path, train, test, {})["eval"]
    tr, te, data = load_pool(ev, 0)
    assert data["overlap"]["train_rows"] == 2 and data["overlap"]["examples"] == ["s58", "s59"]
    assert len(tr) == 58 and len(te) == 30
    assert any("2 training rows share a sample_id with a test row (dropped from train" in q for q in data["quirks"])
    tr, _, data = load_pool({**ev, "overlap": "keep"}, 0)
    assert len(tr) == 60 and data["overlap"]["policy"] == "keep"
    with pytest.raises(ValueError, match="eval.overlap"):
        load_pool({**ev, "overlap": "maybe"}, 0)


def test_pool_job_end_to_end_report_curves_intervals_and_ledger(tmp_path, tables):
    train, test = tables
    routers = {"oracle": {"type": "oracle"}, "per_task": {"type": "per_task"},
               "knn": {"type": "knn", "select": {"k": [3, 30]}}, "escalate": {"type": "escalate", "max_probes": 1},
               "selector": {"type": "selector", "cost_weights": [0.0, 10.0]}}
    report = run_pool(_cfg(tmp_path, train, test, routers))
    out = Path(report["paths"]["report.json"]).parent
    saved = json.loads((out / "report.json").read_text())
    assert set(saved["routers"]) == {"zero_router", "oracle", "per_task", "knn", "escalate", "selector"}
    for name, r in saved["routers"].items():
        for key in ("overall", "arc-challenge", "mbpp"):
            iv = r["aiq_minus_zero"][key]
            assert iv["lo"] <= iv["mean"] <= iv["hi"], (name, key)
        assert set(r["aiq"]) == {"arc-challenge", "mbpp", "overall"}
    # the oracle reads the outcomes: above the zero router on every task
    assert saved["routers"]["oracle"]["aiq_minus_zero"]["overall"]["lo"] > 0
    # kNN's k was chosen on train by cross-validation: both values scored, the best kept
    cv = saved["routers"]["knn"]["cv"]
    assert [r["params"]["k"] for r in cv] == [3, 30]
    assert saved["routers"]["knn"]["params"]["k"] == max(cv, key=lambda r: r["cv_aiq_minus_zero"])["params"]["k"]
    # easy prompts are answerable by the cheap model, and their text says so: kNN beats mixing fixed models
    assert saved["routers"]["knn"]["aiq"]["overall"] > saved["routers"]["zero_router"]["aiq"]["overall"]
    price = saved["routers"]["per_task"]["at_price"]["0.1"]["overall"]
    assert price["reward"] == pytest.approx(price["quality"] - 0.1 * price["cost_per_1k"])
    assert sum(price["shares"].values()) == pytest.approx(1.0, abs=1e-3)
    # every router has a setting at each price weight, chosen on train, whatever its settings are
    assert saved["routers"]["selector"]["at_price"]["0.1"]["setting"] in ("cost_weight=0", "cost_weight=10")
    assert saved["routers"]["zero_router"]["at_price"]["0.1"]["setting"] == saved["best_fixed_on_train"]["0.1"]
    for f in ("report.md", "cost_quality_arc-challenge.png", "cost_quality_mbpp.png"):
        assert (out / f).stat().st_size > 0
    md = (out / "report.md").read_text()
    assert "| oracle (reads test outcomes) |" in md and "training rows share a sample_id" in md
    ledger = [json.loads(x) for x in (tmp_path / "ledger.jsonl").read_text().splitlines()]
    assert len(ledger) == 1 and ledger[0]["router_types"] == ["escalate", "fixed", "knn", "oracle", "per_task", "selector"]
    again = run_pool(_cfg(tmp_path, train, test, {"knn": {"type": "knn", "k": 3}}))
    assert again["ledger"]["read_before_by_type"] == {"fixed": [ledger[0]["date"]], "knn": [ledger[0]["date"]]}
    # keyed by the test rows' questions: the second reading counts the first as a reading of the same questions
    assert again["ledger"]["readings_before"] == {"same_questions": 1, "any_of_them": 1}
    assert ledger[0]["questions"] == again["ledger"]["questions"] == len(ledger[0]["question_digests"])


def test_select_settings_names_a_bad_grid_and_keeps_the_first_of_ties(tmp_path, tables):
    train, test = tables
    tr, _, _ = load_pool(_cfg(tmp_path, train, test, {})["eval"], 0)
    folds = task_folds(tr, 3, 0)
    with pytest.raises(ValueError, match=r"eval.routers.o.select"):
        select_settings("o", {"type": "oracle", "select": {"x": 3}}, tr, None, folds, 10, 0)
    spec, table = select_settings("p", {"type": "per_task"}, tr, None, folds, 10, 0)
    assert spec == {"type": "per_task"} and table == []


def test_evaluate_dispatches_pairs_to_the_pairwise_job_and_pools_here(tmp_path, tables, monkeypatch):
    import rlrouter.eval.pool_job as pj

    calls = []
    monkeypatch.setattr(pj, "run", lambda cfg: calls.append("pair"))
    monkeypatch.setattr(pj, "run_pool", lambda cfg: calls.append("pool"))
    run_evaluation({"eval": {"weak": "a", "strong": "b"}})
    run_evaluation({"eval": {"routers": {}}})
    assert calls == ["pair", "pool"]


def test_routerbench_config_composes_and_names_only_known_routers():
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        cfg = compose(config_name="evaluate_router", overrides=["eval=routerbench"])
    assert len(cfg.eval.train_data) == 3 and len(cfg.eval.test_data) == 3
    assert {"oracle", "per_task", "knn", "mlp", "mf", "gmtrouter", "cascade", "escalate"} <= set(cfg.eval.routers)


def test_cli_validate_routerbench_names_row_and_column(tmp_path, tables, capsys):
    train, _ = tables
    assert cli(["validate", str(train), "--format", "routerbench"]) == 0
    assert "RouterBench table, 60 rows, 3 candidates" in capsys.readouterr().out
    df = pd.read_csv(train, index_col=0, dtype=str, keep_default_na=False)
    df.iloc[4, df.columns.get_loc("mid|total_cost")] = "free"
    df.iloc[2, df.columns.get_loc("cheap")] = ""
    bad = tmp_path / "bad.csv"
    df.to_csv(bad)
    assert cli(["validate", str(bad), "--format", "routerbench"]) == 1
    err = capsys.readouterr().err
    assert f"{bad}:row 4: field 'mid|total_cost': cost 'free' is not a number" in err
    df.iloc[4, df.columns.get_loc("mid|total_cost")] = "0.001"
    df.to_csv(bad)
    assert cli(["validate", str(bad), "--format", "routerbench"]) == 0
    out = capsys.readouterr().out
    assert "1 blank correctness cells in 1 rows" in out and "row 2, column 'cheap': blank correctness" in out


def test_one_table_is_split_by_question_and_only_names_known_routers(tmp_path, tables):
    train, _ = tables
    ev = {**_cfg(tmp_path, train, train, {})["eval"], "train_data": None, "test_data": None, "data": [str(train)],
          "split": {"test_fraction": 0.25, "seed": 0}}
    tr, te, data = load_pool(ev, 0)
    assert data["protocol"] == "split by question" and len(tr) + len(te) == 60 and len(te) == 15
    assert not {*tr.ids} & {*te.ids}
    cfg = _cfg(tmp_path, train, train, {"knn": {"type": "knn", "k": 3}}, only=["knn", "nope"], overlap="keep")
    with pytest.raises(ValueError, match=r"eval.only: \['nope'\] are not configured routers"):
        run_pool(cfg)


def test_a_router_that_cannot_apply_is_skipped_first_and_a_failing_one_loses_no_other(tmp_path, tables, caplog):
    """A user's tables of scores only (no replies, no costs; eval.prices prices them): the cascade, which reads
    replies, is skipped before any router runs; a router that fails while it runs costs only its own row."""
    train, test = tables
    for path in (train, test):
        df = pd.read_csv(path, index_col=0)
        df[["sample_id", "prompt", "eval_name", *MODELS]].to_csv(path)
    prices = {m: {"input": 1e3 * c, "output": 1e3 * c} for m, c in MODELS.items()}
    routers = {"per_task": {"type": "per_task"}, "cascade": {"type": "cascade"},
               "knn": {"type": "knn", "k": 5}}
    report = run_pool(_cfg(tmp_path, train, test, routers, prices=prices))
    assert report["data"]["candidates"] == list(MODELS)
    assert set(report["routers"]) == {"zero_router", "per_task", "knn"}
    assert "reads logged replies" in report["skipped"]["cascade"]
    md = (tmp_path / "out" / "report.md").read_text()
    assert "- cascade: it reads logged replies" in md
    # a router that fails as it fits (a chain naming no candidate): the others' results stay
    routers["cascade"] = {"type": "per_task"}
    routers["bad_chain"] = {"type": "escalate", "chain": ["cheap", "absent"]}
    _table(train, 60, 0, 0), _table(test, 30, 58, 1)  # the full tables again: replies logged
    report = run_pool(_cfg(tmp_path, train, test, routers))
    assert set(report["routers"]) == {"zero_router", "per_task", "cascade", "knn"}
    assert list(report["skipped"]) == ["bad_chain"]
    assert report["skipped"]["bad_chain"].startswith("failed: ValueError: cascade.chain: ['absent'] not among")
    assert "bad_chain failed" in caplog.text
