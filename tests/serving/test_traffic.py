"""The traffic log: records framed and fsynced, rotation and retention, prompts kept as a hash when told,
torn records skipped with a count, and no acknowledged record lost when the writing process is killed -9."""

import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

from rlrouter.serving.traffic import TrafficConfig, TrafficLog, prompt_fields, read_traffic, segments

ROOT = Path(__file__).resolve().parents[2]


def _request(i, **kw):
    return {"kind": "request", "id": f"r{i}", "user": "alice", "prompt": f"q{i}",
            "decision": {"model": "m", "router": "selector", "version": "1", "mode": "thompson"},
            "calls": [{"model": "m", "reply": "a", "prompt_tokens": 3, "completion_tokens": 1, "cost": 0.1,
                       "latency_s": 0.2}], **kw}


def test_records_round_trip_and_feedback_joins_its_request(tmp_path):
    log = TrafficLog(TrafficConfig(enabled=True, path=str(tmp_path)))
    log.append(_request(1))
    log.append({"kind": "feedback", "request_id": "r1", "outcome": "win"})
    log.append(_request(2))
    log.append({"kind": "feedback", "request_id": "gone", "outcome": "loss"})
    log.close()
    got = read_traffic(tmp_path)
    assert [r["id"] for r in got.requests] == ["r1", "r2"] and got.skipped == 0
    assert [f["outcome"] for f in got.requests[0]["feedback"]] == ["win"] and got.requests[1]["feedback"] == []
    assert got.requests[0]["calls"][0]["cost"] == 0.1 and got.requests[0]["time"] > 0
    assert [f["request_id"] for f in got.orphan_feedback] == ["gone"]
    with pytest.raises(ValueError, match="traffic record kind"):
        log.append({"id": "x"})


def test_prompts_are_kept_as_a_hash_and_embedding_when_told(tmp_path):
    assert prompt_fields("secret plan", True) == {"prompt": "secret plan"}
    kept = prompt_fields("secret plan", False, [0.5, -1.0])
    assert set(kept) == {"prompt_sha256", "embedding"} and len(kept["prompt_sha256"]) == 64
    log = TrafficLog(TrafficConfig(enabled=True, path=str(tmp_path), store_prompts=False))
    log.append({"kind": "request", "id": "r1", **kept})
    log.close()
    assert b"secret" not in b"".join(p.read_bytes() for p in segments(tmp_path))
    assert read_traffic(tmp_path).requests[0]["embedding"] == [0.5, -1.0]


def test_segments_rotate_by_size_and_retention_keeps_the_newest(tmp_path):
    log = TrafficLog(TrafficConfig(enabled=True, path=str(tmp_path), max_segment_mb=0.001, retention_segments=3))
    for i in range(40):  # about 300 bytes a record: a segment holds four
        log.append(_request(i))
    log.close()
    files = segments(tmp_path)
    assert len(files) == 3 and log.rotations >= 9
    ids = [r["id"] for r in read_traffic(tmp_path).requests]
    assert ids == [f"r{i}" for i in range(40 - len(ids), 40)]  # the newest records, in order, none repeated


def test_a_torn_or_altered_record_is_skipped_and_counted_and_the_rest_kept(tmp_path):
    log = TrafficLog(TrafficConfig(enabled=True, path=str(tmp_path)))
    for i in range(5):
        log.append(_request(i))
    log.close()
    (seg,) = segments(tmp_path)
    lines = seg.read_bytes().split(b"\n")
    lines[1] = lines[1].replace(b"q1", b"q9")  # altered: its checksum no longer matches
    seg.write_bytes(b"\n".join(lines) + b'{"f": "rlrouter.traffic", "crc": 1')  # and a torn tail
    got = read_traffic(tmp_path)
    assert [r["id"] for r in got.requests] == ["r0", "r2", "r3", "r4"]
    assert got.skipped == 2 and got.skipped_at[0].endswith(":2")


def test_bad_traffic_config_names_its_field():
    for kw, field in (({"enabled": "yes"}, "enabled"), ({"max_segment_mb": 0}, "max_segment_mb"),
                      ({"retention_segments": -1}, "retention_segments"), ({"path": ""}, "path"),
                      ({"store_prompts": 1}, "store_prompts")):
        with pytest.raises(ValueError, match=f"serving.traffic.{field}"):
            TrafficConfig(**kw)


WRITER = """
import sys
from rlrouter.serving.traffic import TrafficConfig, TrafficLog
log = TrafficLog(TrafficConfig(enabled=True, path=sys.argv[1], max_segment_mb=0.02))
i = 0
while True:
    log.append({"kind": "request", "id": f"r{i}", "prompt": "x" * 200})
    print(i, flush=True)  # acknowledged: append returned
    i += 1
"""


def test_no_acknowledged_record_is_lost_when_the_writer_is_killed(tmp_path):
    """A real process appends as fast as it can and prints each id once ``append`` returned; it is killed
    -9 mid-stream, three times on the same folder. Every printed id is in the log."""
    acked = []
    for _ in range(3):
        proc = subprocess.Popen([sys.executable, "-c", WRITER, str(tmp_path)], stdout=subprocess.PIPE,
                                cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)})
        lines = []
        t0 = time.time()
        while len(lines) < 150 and time.time() - t0 < 60:
            lines.append(proc.stdout.readline())
        os.kill(proc.pid, signal.SIGKILL)
        rest = proc.stdout.read()  # what it printed before the kill
        proc.wait()
        acked += [int(x) for x in (b"".join(lines) + rest).split()]
    got = read_traffic(tmp_path)
    logged = [int(r["id"][1:]) for r in got.requests]
    assert len(acked) >= 450 and len(segments(tmp_path)) > 3
    # the three runs each count from 0: every acknowledged id is logged at least as often as it was acked
    assert not Counter(acked) - Counter(logged)
    assert got.skipped <= 3  # at most one torn tail per kill


def test_exploration_draws_the_least_logged_candidates_more_and_logs_the_probability(tmp_path):
    """The second candidate is drawn with weight 1 / (1 + its logged replies); the probability returned is the
    draw's (explore_share x weight / total), which the off-policy estimators divide by."""
    log = TrafficLog(TrafficConfig(enabled=True, path=str(tmp_path), explore_share=0.5, explore_seed=3))
    log.replies = {"a": 0, "b": 1, "c": 3}
    weights = {"b": 1 / 2, "c": 1 / 4, "d": 1.0}
    total = sum(weights.values())
    draws = [log.explore_target("a", ["a", "b", "c", "d"]) for _ in range(20_000)]
    picked = Counter(d[0] for d in draws if d is not None)
    assert abs(sum(picked.values()) / 20_000 - 0.5) < 0.02 and "a" not in picked
    for c, w in weights.items():
        p = 0.5 * w / total
        assert abs(picked[c] / 20_000 - p) < 0.015
        assert all(abs(d[1] - p) < 1e-12 for d in draws if d is not None and d[0] == c)
    assert log.explore_target("a", ["a"]) is None  # nothing else to ask


@pytest.mark.parametrize("reply, grade", [("yes", 1.0), ("Yes.", 1.0), ("**YES** it is", 1.0), ("No", 0.0),
                                          ("no, the answer is 4", 0.0), ("maybe", None), ("", None), (None, None),
                                          ("yesterday", None), ("The answer is yes", None)])
def test_a_judges_reply_becomes_a_grade_by_its_first_word(reply, grade):
    from rlrouter.serving.traffic import parse_grade

    assert parse_grade(reply) == grade
