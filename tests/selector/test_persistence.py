"""Persistence: exact round trip, write-ahead log replay, kill -9 durability, corrupt and foreign files."""

import json
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from rlrouter.selector import SelectionRequest, Selector, SelectorConfig, StateFileError
from tests.helpers import ROOT


def cfg(path, **kw):
    kw.setdefault("seed", 0)
    return SelectorConfig(storage_path=str(path), **kw)


def test_round_trip_is_exact(tmp_path):
    s = Selector(cfg(tmp_path / "s.json", use_contextual=True), ["a", "b"])
    rng = np.random.default_rng(0)
    for i in range(40):
        d = s.select(SelectionRequest(candidates=[], user_id=f"u{i % 3}", session_id=f"s{i % 5}",
                                      category="math" if i % 2 else None, embedding=rng.normal(size=8)))
        if i % 4:
            s.feedback(d.request_id, label="satisfied", confidence=float(rng.random()))  # awkward floats
    s.save()
    t = Selector(cfg(tmp_path / "s.json", use_contextual=True), ["a", "b"])
    assert t.load() == 0
    for scope_s, scope_t in ((s.state.global_, t.state.global_), (s.state.users, t.state.users),
                             (s.state.categories, t.state.categories), (s.state.sessions, t.state.sessions)):
        assert scope_s == scope_t  # dataclass equality: alpha and beta bit for bit
    for m in ("a", "b"):
        assert np.array_equal(s.state.contextual[m].a_inv, t.state.contextual[m].a_inv)
        assert np.array_equal(s.state.contextual[m].b, t.state.contextual[m].b)
    assert list(s.state.pending) == list(t.state.pending)
    assert t.state.selections == 40
    pending = [rid for rid, d in t.state.pending.items() if d.feedback_seq is None]
    t.feedback(pending[0], outcome="win")  # a decision made before the restart still takes feedback


def test_log_replays_unsaved_feedback(tmp_path):
    s = Selector(cfg(tmp_path / "s.json"), ["a", "b"])
    s.save()
    for outcome in ("win", "tie", "loss"):
        s.feedback(s.select(SelectionRequest(candidates=[], user_id="u")).request_id, outcome=outcome)
    # no save since: only the log has the three updates
    t = Selector(cfg(tmp_path / "s.json"), ["a", "b"])
    assert t.load() == 3
    assert t.state.global_ == s.state.global_ and t.state.users == s.state.users
    # the replay was folded into a new snapshot and the log emptied
    assert (tmp_path / "s.json.wal").stat().st_size == 0


def test_torn_log_tail_is_dropped_but_a_bad_middle_line_is_corrupt(tmp_path):
    s = Selector(cfg(tmp_path / "s.json"), ["a"])
    for _ in range(2):
        s.feedback(s.select(SelectionRequest(candidates=[])).request_id, outcome="win")
    wal = tmp_path / "s.json.wal"
    with open(wal, "ab") as f:
        f.write(b'{"f":"rlrouter.selector.wal","crc":1,"bo')  # a crash mid-append, never acked
    t = Selector(cfg(tmp_path / "s.json"), ["a"])
    assert t.load() == 2 and t.state.global_["a"].alpha == 3.0
    lines = wal.read_bytes()
    s2 = Selector(cfg(tmp_path / "t.json"), ["a"])
    s2.feedback(s2.select(SelectionRequest(candidates=[])).request_id, outcome="win")
    s2.feedback(s2.select(SelectionRequest(candidates=[])).request_id, outcome="win")
    w2 = tmp_path / "t.json.wal"
    good = w2.read_bytes().split(b"\n")
    w2.write_bytes(good[0][:-5] + b"XXXXX\n" + good[1] + b"\n")
    with pytest.raises(StateFileError, match="line 1"):
        Selector(cfg(tmp_path / "t.json"), ["a"]).load()
    assert not w2.exists() and list(tmp_path.glob("t.json.wal.corrupt-*"))
    assert lines is not None


@pytest.mark.parametrize("content,reason", [(b"\x00\x01garbage", "not JSON"),
                                            (json.dumps({"alpha": 1}).encode(), "format"),
                                            (b'{"format": "rlrouter.selector.state", "version": 1, "wal_seq": 0, '
                                             b'"selections": 0, "feedback_count": 0, "global": {"a": [0, 1, 0, 0, 0]}}',
                                             "global.a.alpha")])
def test_corrupt_or_foreign_file_is_an_error_and_moved_aside(tmp_path, content, reason):
    path = tmp_path / "s.json"
    path.write_bytes(content)
    s = Selector(cfg(path), ["a"])
    with pytest.raises(StateFileError, match=reason) as e:
        s.load()
    moved = e.value.moved_to
    assert moved is not None and moved.read_bytes() == content  # kept, untouched
    assert not path.exists()
    assert str(moved) in str(e.value)
    # the next start begins fresh and never overwrites the set-aside file
    t = Selector(cfg(path), ["a"])
    t.load()
    t.save()
    assert moved.read_bytes() == content


def test_autosave_interval(tmp_path):
    s = Selector(cfg(tmp_path / "s.json", auto_save_interval="30s"), ["a"])
    assert not s.autosave_due()  # nothing changed
    s.select(SelectionRequest(candidates=[]))
    t0 = s._last_save
    assert not s.autosave_due(t0 + 29.9)
    assert s.autosave_due(t0 + 30.0)
    assert s.maybe_save(t0 + 30.0) and (tmp_path / "s.json").exists()
    assert not s.autosave_due(s._last_save + 100)  # saved and clean


CHILD = r"""
import sys
from rlrouter.selector import SelectionRequest, Selector, SelectorConfig
s = Selector(SelectorConfig(storage_path=sys.argv[1], auto_save_interval=3600, seed=0), ["a", "b"])
s.load()
i = 0
while True:
    d = s.select(SelectionRequest(candidates=[], user_id="u"))
    s.feedback(d.request_id, outcome="win" if i % 3 else "loss")
    print(f"ack {d.model} {i % 3 != 0}", flush=True)  # printed only after the fsync returned
    i += 1
"""


def test_acknowledged_feedback_survives_kill_9(tmp_path):
    path = tmp_path / "s.json"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen([sys.executable, "-c", CHILD, str(path)], stdout=subprocess.PIPE, env=env, cwd=ROOT)
    acks = []
    deadline = time.time() + 60
    while len(acks) < 60 and time.time() < deadline:
        line = proc.stdout.readline().decode()
        if line.startswith("ack"):
            acks.append(line.split())
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert len(acks) == 60
    # acks the child printed before it died but the test had not read yet count too
    acks += [line.split() for line in proc.stdout.read().decode().splitlines() if line.startswith("ack ")
             and len(line.split()) == 3]
    s = Selector(cfg(path), ["a", "b"])
    s.load()
    # every acknowledged update is there (one more may have been logged between the last read and the kill)
    for m in ("a", "b"):
        wins = sum(1 for _, model, won in acks if model == m and won == "True")
        losses = sum(1 for _, model, won in acks if model == m and won == "False")
        assert s.state.global_[m].alpha - 1 >= wins and s.state.global_[m].beta - 1 >= losses
        assert s.state.users["u"][m].alpha == s.state.global_[m].alpha
    total = sum(p.alpha + p.beta - 2 for p in s.state.global_.values())
    assert len(acks) <= total <= len(acks) + 1
