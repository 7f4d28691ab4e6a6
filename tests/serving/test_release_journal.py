"""The release journal (``serving.release_journal``): a served router's release survives a restart of the
process that holds it. Pure logic, no Ray: ServedRouters is started, driven, dropped without closing (as
``kill -9`` would leave it) and started again on the same journal."""

from __future__ import annotations

import pytest

from rlrouter.serving.release_journal import ReleaseJournal, read_journal
from rlrouter.serving.served_routers import ServedRouters, router_entries
from tests.helpers import hash_embed


@pytest.fixture(scope="module")
def folders(shared_data, tmp_path_factory):
    from rlrouter.routers.reader import read_eval_set
    from rlrouter.routers.base import RouterContext, build_router
    from rlrouter.routers.saved import Calibration, save_router

    logged = read_eval_set(shared_data / "routellm" / "mmlu" / "mmlu_philosophy.csv",
                           prices={"gpt-4-1106-preview": {"input": 10, "output": 30},
                                   "mistralai/Mixtral-8x7B-Instruct-v0.1": {"input": 0.6, "output": 0.6}}).subset(range(80))
    weak, strong = logged.index("mistralai/Mixtral-8x7B-Instruct-v0.1"), logged.index("gpt-4-1106-preview")
    ctx = RouterContext(candidates=logged.names, weak=weak, strong=strong, train=logged, embed=hash_embed)
    out = tmp_path_factory.mktemp("journal_routers")
    for name, k in (("knn", 5), ("knn2", 1)):
        spec = {"type": "knn", "k": k, "name": name}
        r = build_router(spec, ctx)
        r.fit(logged)
        save_router(r, out / name, type_name="knn", spec=spec, candidates=logged.candidates, weak=weak, strong=strong,
                    calibration=Calibration.from_scores(r.strong_score(logged.prompts)), embedding={"model": "hash"})
    return out, logged.prompts


def _host(folders, journal):
    out, _ = folders
    return ServedRouters(router_entries({"knn": str(out / "knn")}, out), embed=hash_embed, root=out, journal=journal)


def _counts(host):
    rel = host.status("knn")["routers"]["knn"]["release"]
    return {v: (s["n"], s["mean"]) for v, s in rel["versions"].items()}


def test_a_release_resumes_with_its_counts_its_pending_decisions_and_its_verdict(folders, tmp_path):
    out, prompts = folders
    journal = tmp_path / "releases.jsonl"
    a = _host(folders, journal)
    a.release("knn", "load", {"version": "2", "path": str(out / "knn2"),
                              "release": {"canary_share": 0.5, "min_feedback": 500, "max_feedback": 1000}})
    decided = [a.decide("knn", prompts[i % len(prompts)]) for i in range(40)]
    for i, d in enumerate(decided[:30]):
        fb = a.feedback("knn", d["request_id"], outcome="win" if i % 3 else "loss")
        assert fb["release"]["state"] == "canary"
    before = _counts(a)
    assert sum(n for n, _ in before.values()) == 30 and {"1", "2"} == {d["version"] for d in decided}
    del a  # no close: what kill -9 leaves

    b = _host(folders, journal)
    assert _counts(b) == before  # every counted reward, once
    assert b.status()["journal"]["replayed"]["ignored"] == 0
    for d in decided[30:]:  # decisions made before the restart: their feedback reaches the version that made them
        fb = b.feedback("knn", d["request_id"], outcome="win")
        assert fb["version"] == d["version"] and fb["release"]["candidate"] == "2"
    assert sum(n for n, _ in _counts(b).values()) == 40
    again = b.feedback("knn", decided[0]["request_id"], outcome="win")  # counted already: not a second time
    assert "release" not in again and sum(n for n, _ in _counts(b).values()) == 40
    b.promote("knn", "by the test")
    del b

    c = _host(folders, journal)
    st = c.status("knn")["routers"]["knn"]
    assert st["current"] == "2" and st["release"] is None and st["versions"] == ["1", "2"]
    assert st["ended"][0]["state"] == "promoted" and st["ended"][0]["reason"] == "by the test"
    assert sum(v["n"] for v in st["ended"][0]["versions"].values()) == 40
    assert c.decide("knn", prompts[0])["version"] == "2"  # the promotion holds, with no release running


def test_a_torn_last_line_is_cut_and_the_rest_replayed(folders, tmp_path):
    out, prompts = folders
    journal = tmp_path / "releases.jsonl"
    a = _host(folders, journal)
    a.release("knn", "load", {"version": "2", "path": str(out / "knn2"), "release": {"min_feedback": 500,
                                                                                      "max_feedback": 600}})
    for i in range(10):
        a.feedback("knn", a.decide("knn", prompts[i])["request_id"], outcome="win")
    before = _counts(a)
    del a
    with journal.open("ab") as f:  # a crash mid-append: half a line, no newline
        f.write(b'{"f":"rlrouter.releases","crc":1,"bo')
    b = _host(folders, journal)
    rep = b.status()["journal"]["replayed"]
    assert rep["torn_tail_bytes"] > 0 and rep["skipped"] == 0 and _counts(b) == before
    b.feedback("knn", b.decide("knn", prompts[0])["request_id"], outcome="win")
    assert read_journal(journal).skipped == 0  # the next line did not land on the torn one


def test_a_rule_verdict_a_crash_cut_off_is_applied_on_start(folders, tmp_path):
    out, prompts = folders
    journal = tmp_path / "releases.jsonl"
    a = _host(folders, journal)
    a.release("knn", "load", {"version": "2", "path": str(out / "knn2"),
                              "release": {"canary_share": 0.5, "min_feedback": 5}})
    events = read_journal(journal).records
    load = events[0]
    del a
    # a journal whose rewards reach the rule's verdict, written as if the crash came before the verdict's line
    w = ReleaseJournal(journal)
    for i in range(12):
        v = "2" if i % 2 else "1"
        w.append({"event": "reward", "router": "knn", "request_id": f"r{i}", "version": v, "release": "2",
                  "reward": 1.0 if v == "2" else float(i % 4 == 0), "cost_known": True})
    w.close()
    b = _host(folders, journal)
    st = b.status("knn")["routers"]["knn"]
    assert st["release"] is None and st["ended"][0]["state"] in ("promoted", "rolled_back")
    assert read_journal(journal).records[-1]["event"] == "end" and load["event"] == "load"


def test_events_that_no_longer_apply_are_named_not_fatal(folders, tmp_path):
    out, _ = folders
    journal = tmp_path / "releases.jsonl"
    w = ReleaseJournal(journal)
    w.append({"event": "load", "router": "knn", "version": "3", "path": str(tmp_path / "gone"), "rule": {}})
    w.append({"event": "reward", "router": "knn", "request_id": "x", "version": "3", "release": "3", "reward": 1.0})
    w.append({"event": "load", "router": "retired", "version": "2", "path": str(out / "knn2"), "rule": {}})
    w.close()
    b = _host(folders, journal)
    rep = b.status()["journal"]["replayed"]
    assert rep["ignored"] == 3 and "not served" in rep["ignored_first"][2]
    assert b.status("knn")["routers"]["knn"]["current"] == "1"  # the configured version serves
    with pytest.raises(ValueError, match="release journal event"):
        ReleaseJournal(tmp_path / "other.jsonl").append({"event": "nope"})
