"""The lockbox rule: development runs may not read it, the one reading trains on the development data and
tests on the lockbox, every reading goes to the ledger, and a second reading of the same config warns."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np
import pytest

from rlrouter.eval.job import check_lockbox, run

WEAK, STRONG = "weak-llm", "strong-llm"


def _subject(path: Path, name: str, n: int, p_weak: float, p_strong: float, seed: int) -> None:
    rng = np.random.default_rng(seed)
    path.mkdir(parents=True, exist_ok=True)
    with (path / f"mmlu_{name}.csv").open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["prompt", STRONG, WEAK])  # the other column order than the development files
        for i in range(n):
            w.writerow([f"{name} question {i}\nA. a\nB. b\nC. c\nD. d\nAnswer:", rng.random() < p_strong,
                        rng.random() < p_weak])


def _cfg(tmp_path: Path, **lockbox) -> dict:
    dev, box = tmp_path / "dev", tmp_path / "box"
    if not dev.exists():
        for k, (pw, ps) in enumerate([(0.5, 0.9), (0.8, 0.8), (0.6, 0.7)]):
            _subject(dev, f"dev{k}", 40, pw, ps, k)
        _subject(box, "boxed", 30, 0.4, 0.9, 7)
    return {"seed": 0, "output_dir": str(tmp_path / "out"), "command": "test", "router": None, "routers": {},
            "eval": {"data": [str(dev)], "format": "auto", "weak": WEAK, "strong": STRONG,
                     "prices": {WEAK: {"input": 1.0, "output": 1.0}, STRONG: {"input": 10.0, "output": 30.0}},
                     "split": {"by": "subject", "holdout_subjects": 1, "seed": 0}, "num_thresholds": 4,
                     "operating_strong_share": 0.5, "bootstrap": {"enabled": False},
                     "baselines": {"always_strong": {"type": "always", "candidate": "strong"},
                                   "random": {"type": "random"}},
                     "lockbox": {"data": [str(box)], "ledger": str(tmp_path / "ledger.jsonl"), **lockbox}}}


def test_a_development_run_that_lists_the_lockbox_is_refused(tmp_path):
    cfg = _cfg(tmp_path)
    ev = cfg["eval"]
    assert check_lockbox(ev) is False  # the development data alone: fine
    for bad in ({"data": [*ev["data"], str(tmp_path / "box")]},  # the lockbox folder itself
                {"data": [str(tmp_path)]},  # a folder that holds it
                {"train_data": ev["data"], "test_data": [str(tmp_path / "box" / "mmlu_boxed.csv")]}):  # a file in it
        with pytest.raises(ValueError, match=r"reads the lockbox .*eval.lockbox.read=true"):
            check_lockbox({**ev, **bad})
    with pytest.raises(ValueError, match="eval.lockbox.data lists no sources"):
        check_lockbox({**ev, "lockbox": {"read": True}})


def test_the_reading_tests_on_the_lockbox_writes_the_ledger_and_a_second_reading_warns(tmp_path):
    cfg = _cfg(tmp_path, read=True)
    cfg["routers"] = {"feedback": {"type": "feedback", "base": None, "context": "source"}}
    cfg["eval"]["bootstrap"] = {"enabled": True, "n_boot": 50, "baseline_types": ["mf"]}
    report = run(cfg)
    online = report["online"]["feedback"]  # the online router's stream, with its second half scored apart
    assert online["second_half"]["n"] == 15 and "feedback" in online["second_half"]["bootstrap"]["routers"]
    assert len(online["cumulative_quality"]["random"]) == 10
    assert report["data"]["split"]["protocol"] == "lockbox reading"
    assert report["data"]["train"] == 120 and report["data"]["test"] == 30  # every development row trains
    assert set(report["slices"]["all"]["routers"]) >= {"always_strong", "random"}
    ledger = [json.loads(x) for x in (tmp_path / "ledger.jsonl").read_text().splitlines()]
    assert len(ledger) == 1 and ledger[0]["fingerprint"] == report["lockbox"]["fingerprint"]
    assert ledger[0]["router_types"] == ["always", "feedback", "random"]
    assert report["lockbox"]["read_before_same_config"] == []
    # the lockbox's strong column came first in its file: aligned by name, always_strong is the strong column
    assert report["slices"]["all"]["routers"]["always_strong"]["shares"][STRONG] == 1.0

    with pytest.warns(UserWarning, match="already read the lockbox"):
        again = run({**cfg, "output_dir": str(tmp_path / "out2")})  # another output dir: the same config
    assert again["lockbox"]["read_before_same_config"] == [ledger[0]["date"]]
    assert len((tmp_path / "ledger.jsonl").read_text().splitlines()) == 2

    other = _cfg(tmp_path, read=True)
    other["eval"]["baselines"] = {"random": {"type": "random", "p_strong": 0.3}}
    third = run({**other, "output_dir": str(tmp_path / "out3")})  # a new config: no warning, families listed
    assert third["lockbox"]["read_before_same_config"] == []
    assert list(third["lockbox"]["read_before_by_type"]) == ["random"]
