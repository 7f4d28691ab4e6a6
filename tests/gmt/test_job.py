"""The Hydra job: config composition, a records-file run in process, and a short Ray Train run."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rlrouter.data.io import DataFileError, write_records
from rlrouter.gmt.job import GMTJobConfig, run
from rlrouter.gmt.scorer import GMTRouterScorer

ROOT = Path(__file__).resolve().parents[2]
FAST = ["gmt.train.epochs=4", "gmt.train.eval_every=2", "gmt.model.hidden_dim=32"]


def compose(overrides: list[str]):
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir

    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
        return hydra_compose(config_name="train_gmtrouter", overrides=overrides)


@pytest.mark.parametrize("data", ["simulated", "smoke"])
def test_every_data_preset_composes(tmp_path, data):
    job = GMTJobConfig.from_cfg(compose([f"gmt/data={data}", f"output_dir={tmp_path}"]))
    assert job.data.source == "simulated" and job.resources.learner.num_workers == 2 and not job.resources.use_gpu
    assert job.train.seed == job.seed == job.data.sim.seed == 0


def test_config_errors_name_the_key(tmp_path):
    with pytest.raises(ValueError, match=r"gmt.train.lr: expected > 0"):
        GMTJobConfig.from_cfg(compose([f"output_dir={tmp_path}", "gmt.train.lr=0"]))
    with pytest.raises(ValueError, match=r"gmt.model.bogus: unknown key"):
        GMTJobConfig.from_cfg(compose([f"output_dir={tmp_path}", "+gmt.model.bogus=1"]))
    with pytest.raises(ValueError, match=r"data.path: required"):
        GMTJobConfig.from_cfg(compose([f"output_dir={tmp_path}", "gmt/data=records",
                                       "gmt.data.path=null"]))


def test_records_file_run_in_process(tmp_path, small_sim):
    logs = write_records(tmp_path / "logs.jsonl", small_sim.records[:10])
    cfg = compose([*FAST, "gmt/data=records", f"gmt.data.path={logs}", "resources=in_process",
                   f"output_dir={tmp_path / 'run'}"])
    metrics = run(cfg)
    assert metrics["graph"]["user"] == 10 and metrics["num_layers"] == 3
    assert metrics["test"]["pairs"] > 0 and "few_shot" not in metrics
    scorer = GMTRouterScorer.load(tmp_path / "run" / "checkpoint")
    user = small_sim.records[0].user_id
    assert set(scorer.score(user, "Is this a new question?")) == set(small_sim.llms)
    saved = json.loads((tmp_path / "run" / "checkpoint" / "config.json").read_text())
    assert saved["metrics"]["test"]["pairs"] == metrics["test"]["pairs"]


def test_malformed_records_file_stops_the_job(tmp_path, small_sim):
    logs = tmp_path / "logs.jsonl"
    rows = [r.to_dict() for r in small_sim.records[:2]]
    del rows[1]["interactions"][0]["model_used"]
    logs.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    cfg = compose([*FAST, "gmt/data=records", f"gmt.data.path={logs}", "resources=in_process",
                   f"output_dir={tmp_path / 'run'}"])
    with pytest.raises(DataFileError, match=r"logs.jsonl:2: field 'interactions\[0\].model_used': missing"):
        run(cfg)


@pytest.mark.ray
@pytest.mark.slow
def test_short_ray_train_run(ray_cluster, tmp_path, small_logged, shared_data):
    cfg = compose([*FAST, "gmt/data=smoke", "resources.learner.num_workers=2",
                   f"gmt.data.logged={shared_data / 'routellm' / 'mmlu' / 'mmlu_philosophy.csv'}",
                   f"output_dir={tmp_path}"])
    metrics = run(cfg)
    assert metrics["ray"]["val/auc"] == pytest.approx(metrics["train"]["val"]["auc"])
    assert metrics["test"]["pairs"] > 0
    assert [r["k"] for r in metrics["few_shot"]] == [0, 4, 16]
    scorer = GMTRouterScorer.load(tmp_path / "checkpoint")
    assert len(scorer.users) == 12  # served graph holds every user, the few-shot ones included
    assert (tmp_path / "personalization.jsonl").is_file() and (tmp_path / "metrics.json").is_file()
