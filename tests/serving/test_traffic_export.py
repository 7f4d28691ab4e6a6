"""The traffic log exported as logged outcomes: one row per request, the chosen candidate scored from its
feedback, replies and costs per candidate, the logging policy's route and propensity, a split by time."""

import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from rlrouter.serving.traffic import TrafficConfig, TrafficLog, read_traffic
from rlrouter.serving.traffic_export import feedback_score, write_export

ROOT = Path(__file__).resolve().parents[2]


def _log(folder, n=10):
    log = TrafficLog(TrafficConfig(enabled=True, path=str(folder)))
    for i in range(n):
        chosen = "cheap" if i % 2 else "strong"
        log.append({"kind": "request", "id": f"r{i}", "user": "u", "endpoint": "chat", "prompt": f"q{i}",
                    "decision": {"model": chosen, "mode": "thompson", "router": "selector", "propensity": 0.25 + i / 100},
                    "calls": [{"model": chosen, "reply": f"a{i}", "cost": 0.001 * (i + 1), "prompt_tokens": 3,
                               "completion_tokens": 2, "latency_s": 0.1}]})
        if i < n - 2:  # the last two got no feedback
            log.append({"kind": "feedback", "request_id": f"r{i}", "user": "u",
                        "outcome": "win" if i % 3 else "loss"})
    log.close()


def test_feedback_becomes_the_score_the_selector_reads():
    assert feedback_score([]) is None
    assert feedback_score([{"outcome": "tie"}]) == 0.5
    assert feedback_score([{"outcome": "loss"}, {"outcome": "win"}]) == 1.0  # the last one counts
    assert feedback_score([{"label": "satisfied", "confidence": 0.9}]) == 1.0
    assert feedback_score([{"label": "wrong_answer"}]) == 0.0
    assert feedback_score([{"reward": 1.7}]) == 1.0 and feedback_score([{"reward": -0.4}]) == 0.0


def test_the_export_is_routerbench_wide_with_the_logging_policy_and_a_time_split(tmp_path):
    _log(tmp_path / "log")
    report = write_export(read_traffic(tmp_path / "log"), tmp_path / "out", test_share=0.2)
    train, test = pd.read_parquet(tmp_path / "out" / "train.parquet"), pd.read_parquet(tmp_path / "out" / "test.parquet")
    assert list(train["sample_id"]) == [f"r{i}" for i in range(8)] and list(test["sample_id"]) == ["r8", "r9"]
    assert train["time"].max() <= test["time"].min()
    row = train.iloc[1]  # r1: cheap chosen, outcome win
    assert row["logged_model"] == "cheap" and row["cheap"] == 1.0 and pd.isna(row["strong"])
    assert row["cheap|model_response"] == "a1" and row["cheap|total_cost"] == pytest.approx(0.002)
    assert pd.isna(row["strong|model_response"]) and pd.isna(row["strong|total_cost"])
    assert row["logged_propensity"] == pytest.approx(0.26) and row["prompt"] == "q1"
    assert train.iloc[0]["strong"] == 0.0  # r0: loss
    assert test["cheap"].isna().all() and test["strong"].isna().all()  # no feedback: no score
    assert report["with_feedback"] == 8 and report["without_feedback"] == 2 and report["candidates"] == ["cheap", "strong"]
    assert report["logged_routes"] == {"cheap": 5, "strong": 5} and report["rows_with_counterfactual_replies"] == 0
    assert "learns only from the routes" in report["note"]
    with pytest.raises(ValueError, match="no request"):
        write_export(read_traffic(tmp_path / "empty"), tmp_path / "out2")


def test_the_export_job_runs_from_the_command_line(tmp_path):
    _log(tmp_path / "log", n=5)
    out = tmp_path / "out"
    r = subprocess.run([sys.executable, "jobs/export_traffic.py", f"traffic={tmp_path / 'log'}", f"out={out}",
                        "test_share=0.4"], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    assert len(pd.read_parquet(out / "train.parquet")) == 3 and len(pd.read_parquet(out / "test.parquet")) == 2
    assert (out / "report.json").exists()
