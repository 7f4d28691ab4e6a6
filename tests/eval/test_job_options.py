"""Job options added for routers that are slow or keep their own threshold, the training-split export
and the Router-R1 base policy: pure logic on small hand-written RouteLLM CSVs (no embeddings, no vLLM)."""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np
import pytest

from rlrouter.eval.export_split import write_train_split
from rlrouter.eval.job import load_eval_set, run, split_by_question
from rlrouter.routers.base import Router, RouterContext, ThresholdRouter, build_router, register_router

WEAK, STRONG = "weak-llm", "strong-llm"


def _write_csvs(root: Path) -> None:
    """gsm8k/gsm8k_responses.csv (40 questions, 2 repeated) and mmlu/mmlu_x.csv (60 questions)."""
    rng = np.random.default_rng(0)
    (root / "gsm8k").mkdir(parents=True)
    (root / "mmlu").mkdir()
    with (root / "gsm8k" / "gsm8k_responses.csv").open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["prompt", WEAK, STRONG, f"{WEAK}_response", f"{STRONG}_response"])
        for i in [*range(40), 3, 7]:
            w.writerow([f"math question {i}", bool(rng.random() < 0.5), bool(rng.random() < 0.8), "42", "42"])
    with (root / "mmlu" / "mmlu_x.csv").open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["prompt", WEAK, STRONG])
        for i in range(60):
            w.writerow([f"Fact question {i}\nA. a\nB. b\nC. c\nD. d\nAnswer:", rng.random() < 0.6, rng.random() < 0.8])


def _cfg(root: Path, out: Path, **ev) -> dict:
    return {"seed": 0, "output_dir": str(out), "command": "test", "router": None, "routers": {},
            "eval": {"data": [str(root / "gsm8k" / "gsm8k_responses.csv"), str(root / "mmlu")], "format": "auto",
                     "weak": WEAK, "strong": STRONG, "prices": {WEAK: {"input": 1.0, "output": 1.0},
                                                               STRONG: {"input": 10.0, "output": 30.0}},
                     "split": {"test_fraction": 0.25, "seed": 0}, "num_thresholds": 4,
                     "operating_strong_share": 0.5, "ope": {"enabled": False},
                     "baselines": {"always_weak": {"type": "always", "candidate": "weak"},
                                   "always_strong": {"type": "always", "candidate": "strong"}}, **ev}}


class LengthRouter(ThresholdRouter):
    """Strong score = prompt length - 20: its own threshold 0 sends MMLU prompts (> 40 characters) to
    strong and GSM8K ones ("math question N", at most 16) to weak."""

    def strong_score(self, prompts):
        return np.array([len(p) - 20.0 for p in prompts])


@register_router("test_length")
def _length(cfg, ctx: RouterContext):
    return LengthRouter("len", ctx.weak, ctx.strong, threshold=0.0)


def test_train_split_export_drops_every_test_question(tmp_path):
    root, out = tmp_path / "logs", tmp_path / "train_logs"
    _write_csvs(root)
    cfg = _cfg(root, tmp_path / "eval")
    counts = write_train_split(cfg, out)
    assert counts["kept"] + counts["dropped"] == 102
    assert sorted(p.relative_to(out).as_posix() for p in out.rglob("*.csv")) == [
        "gsm8k/gsm8k_responses.csv", "mmlu/mmlu_x.csv"]
    full = load_eval_set(cfg["eval"])
    _, test_rows = split_by_question(full, 0.25, seed=0)
    test_keys = {" ".join(full.prompts[i].split()) for i in test_rows}
    assert len(test_rows) == counts["dropped"]
    exported = load_eval_set({**cfg["eval"], "data": [str(out / "gsm8k" / "gsm8k_responses.csv"), str(out / "mmlu")]})
    assert len(exported) == counts["kept"]
    assert not {" ".join(p.split()) for p in exported.prompts} & test_keys


def test_train_split_export_by_subject_writes_no_file_for_a_held_out_subject(tmp_path):
    root, out = tmp_path / "logs", tmp_path / "train_logs"
    _write_csvs(root)
    with (root / "mmlu" / "mmlu_y.csv").open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["prompt", WEAK, STRONG])
        w.writerows([[f"Other question {i}\nAnswer:", True, False] for i in range(5)])
    cfg = _cfg(root, tmp_path / "eval", split={"by": "subject", "test_subjects": ["mmlu/y"], "seed": 0})
    counts = write_train_split(cfg, out)
    assert counts == {"kept": 102, "dropped": 5}  # every row of gsm8k (42) and mmlu_x (60)
    assert sorted(p.relative_to(out).as_posix() for p in out.rglob("*.csv")) == [
        "gsm8k/gsm8k_responses.csv", "mmlu/mmlu_x.csv"]
    # the export is a valid RouteLLM folder (an empty CSV would not load)
    from rlrouter.data.logged import load_routellm

    assert len(load_routellm(out).prompts) == 102


def test_test_subset_and_a_router_keeping_its_own_threshold(tmp_path):
    root = tmp_path / "logs"
    _write_csvs(root)
    cfg = _cfg(root, tmp_path / "eval", test_subset=10)
    cfg["routers"] = {"own": {"type": "test_length", "operating_strong_share": None},
                      "calibrated": {"type": "test_length"}}
    report = run(cfg)
    assert report["data"]["test_subset"] == 10 and report["slices"]["all"]["n"] == report["data"]["test"] == 10
    routers = report["slices"]["all"]["routers"]
    assert routers["own"]["shares"][STRONG] == pytest.approx(report["slices"]["mmlu"]["n"] / 10)
    assert routers["calibrated"]["shares"][STRONG] == pytest.approx(0.5, abs=0.1)
    # the same seed gives the same subset
    again = run({**cfg, "output_dir": str(tmp_path / "eval2")})
    assert again["slices"]["all"]["routers"]["own"]["quality"] == routers["own"]["quality"]


class WeakReplyReader(LengthRouter):
    """A threshold router that decides after reading the weak candidate's reply: every prompt pays for it."""

    reads_weak_reply = True


@register_router("test_weak_reply_reader")
def _reader(cfg, ctx: RouterContext):
    return WeakReplyReader("reader", ctx.weak, ctx.strong, threshold=0.0)


class CascadeRouter(Router):
    """Routes every prompt to strong, having paid for a weak call first on the even-numbered ones (a cascade
    that escalates there) and on none of the odd ones."""

    def __init__(self, weak, strong):
        self.name, self.weak, self.strong, self.paid_calls = "cascade", weak, strong, None

    def decide(self, prompts):
        self.paid_calls = [[self.weak, self.strong] if i % 2 == 0 else [self.strong] for i in range(len(prompts))]
        return np.full(len(prompts), self.strong)


@register_router("test_cascade")
def _cascade(cfg, ctx: RouterContext):
    return CascadeRouter(ctx.weak, ctx.strong)


def test_a_router_that_pays_for_more_calls_than_its_route_is_priced_on_all_of_them(tmp_path):
    root = tmp_path / "logs"
    _write_csvs(root)
    cfg = _cfg(root, tmp_path / "eval")
    cfg["routers"] = {"cascade": {"type": "test_cascade"}}
    report = run(cfg)
    for sname, sl in report["slices"].items():
        r, strong = sl["routers"]["cascade"], sl["routers"]["always_strong"]
        assert r["cost_mean"] == pytest.approx(strong["cost_mean"])  # the route alone: always strong's
        assert "cost_mean_all_calls" not in strong  # routers that pay only for their route have no such key
    # by hand: the weak call's logged cost added on the test rows with an even index
    from rlrouter.eval.job import load_split

    _, test, _ = load_split(cfg["eval"], 0)
    weak, strong = test.names.index(WEAK), test.names.index(STRONG)
    paid = test.costs[:, strong] + np.where(np.arange(len(test)) % 2 == 0, test.costs[:, weak], 0.0)
    r = report["slices"]["all"]["routers"]["cascade"]
    assert r["cost_mean_all_calls"] == pytest.approx(paid.mean())
    assert r["cost_mean_all_calls"] > r["cost_mean"]
    assert r["random_quality_at_cost_all_calls"] == pytest.approx(report["slices"]["all"]["strong"]["quality"])
    # a threshold router that reads the weak reply: the weak call on every prompt, the strong one where it escalates
    cfg["routers"] = {"reader": {"type": "test_weak_reply_reader", "operating_strong_share": None}}
    r = run({**cfg, "output_dir": str(tmp_path / "eval2")})["slices"]["all"]["routers"]["reader"]
    sent = np.array([len(p) - 20.0 >= 0 for p in test.prompts])  # LengthRouter's rule: MMLU to strong
    paid = test.costs[:, weak] + np.where(sent, test.costs[:, strong], 0.0)
    assert r["cost_mean_all_calls"] == pytest.approx(paid.mean())
    assert r["cost_mean"] == pytest.approx(np.where(sent, test.costs[:, strong], test.costs[:, weak]).mean())


FIT_SOURCES: dict[str, list[str]] = {}


class SourceRecordingRouter(LengthRouter):
    def fit(self, train):
        FIT_SOURCES[self.name] = sorted(set(train.sources))


@register_router("test_record_sources")
def _recording(cfg, ctx: RouterContext):
    return SourceRecordingRouter("rec", ctx.weak, ctx.strong, threshold=0.0)


def test_train_prefix_fits_a_router_on_one_task_and_tests_it_on_all(tmp_path):
    root = tmp_path / "logs"
    _write_csvs(root)
    cfg = _cfg(root, tmp_path / "eval")
    cfg["routers"] = {"all_rows": {"type": "test_record_sources"},
                      "mmlu_rows": {"type": "test_record_sources", "train_prefix": "mmlu/"}}
    report = run(cfg)
    assert FIT_SOURCES["all_rows"] == ["gsm8k", "mmlu/x"]
    assert FIT_SOURCES["mmlu_rows"] == ["mmlu/x"]
    assert report["slices"]["all"]["routers"]["mmlu_rows"]["n"] == report["data"]["test"]
    cfg["routers"] = {"none": {"type": "test_record_sources", "train_prefix": "mtbench/"}}
    with pytest.raises(ValueError, match="routers.none.train_prefix: no training source starts with 'mtbench/'"):
        run({**cfg, "output_dir": str(tmp_path / "eval2")})


def test_router_r1_base_policy_needs_no_checkpoint(monkeypatch):
    import rlrouter.rollout.policy as mod

    seen = {}

    class FakePolicy:
        def __init__(self, checkpoint, base_model, candidates, env=None, pool=None, first_call_written=False,
                     query_words=24, until="answer"):
            seen.update(checkpoint=checkpoint, base_model=base_model, names=[c["name"] for c in candidates],
                        pool=pool, first_call_written=first_call_written)

        def route_batch(self, prompts):
            return [{"selected_model": "mixtral-8x7b-instruct"} for _ in prompts]

    monkeypatch.setattr(mod, "RouterR1Policy", FakePolicy)
    from rlrouter.routers.reader import EvalSet
    from rlrouter.pool.base import Candidate

    names = ["mistralai/Mixtral-8x7B-Instruct-v0.1", "gpt-4-1106-preview"]
    train = EvalSet(prompts=["x"], candidates=[Candidate(n, 1.0, 1.0) for n in names], scores=np.ones((1, 2)),
                    costs=np.ones((1, 2)), sources=["t"], prompt_tokens=np.ones(1), completion_tokens=np.ones((1, 2)))
    ctx = RouterContext(candidates=names, weak=0, strong=1, train=train, embed=lambda t: np.zeros((len(t), 2)))
    root = Path(__file__).resolve().parents[2]
    r = build_router({"type": "router_r1", "checkpoint": "base", "pool": str(root / "conf/pool/routellm_replay.yaml"),
                      "default": "strong"}, ctx)
    assert seen["checkpoint"] is None and seen["base_model"] == "smollm2-135m-instruct"
    assert seen["first_call_written"] is False and seen["pool"] is None  # the base policy names its first call
    assert r.decide(["q1", "q2"]).tolist() == [0, 0]
    assert "escalated" not in r.report()


def test_router_r1_cascade_policy_is_scored_by_its_last_call(monkeypatch, tmp_path):
    """A checkpoint whose run evaluated it after a written cheap call (``eval.first_call_written``) is run that
    way (``first_call: auto``), with the pool, and routes to the last candidate it called; ``policy`` and
    ``written`` force either; anything else is refused by name."""
    import yaml

    import rlrouter.rollout.policy as mod

    seen = {}
    answers = [{"selected_model": "mixtral-8x7b-instruct", "calls": ["mixtral-8x7b-instruct"], "escalated": False},
               {"selected_model": "gpt-4-1106-preview", "calls": ["mixtral-8x7b-instruct", "gpt-4-1106-preview"],
                "escalated": True},
               {"selected_model": None, "calls": [], "escalated": False}]

    class FakePolicy:
        def __init__(self, checkpoint, base_model, candidates, env=None, pool=None, first_call_written=False,
                     query_words=24, until="answer"):
            seen.update(pool=pool, first_call_written=first_call_written, query_words=query_words, until=until)

        def route_batch(self, prompts):
            return answers if seen["first_call_written"] else [{"selected_model": "gpt-4-1106-preview"}] * 3

    monkeypatch.setattr(mod, "RouterR1Policy", FakePolicy)
    from rlrouter.routers.reader import EvalSet
    from rlrouter.pool.base import Candidate

    ck = tmp_path / "run" / "checkpoints" / "step_000060"
    ck.mkdir(parents=True)
    (tmp_path / "run" / "config.yaml").write_text(yaml.safe_dump(
        {"eval": {"first_call_written": True}, "train": {"warmup_query_words": 16}}))
    assert mod.trained_first_call(ck) == (True, 16)
    assert mod.trained_first_call(tmp_path) == (False, 24)  # no run config: the policy's own first call
    names = ["mistralai/Mixtral-8x7B-Instruct-v0.1", "gpt-4-1106-preview"]
    train = EvalSet(prompts=["x"], candidates=[Candidate(n, 1.0, 1.0) for n in names], scores=np.ones((1, 2)),
                    costs=np.ones((1, 2)), sources=["t"], prompt_tokens=np.ones(1), completion_tokens=np.ones((1, 2)))
    ctx = RouterContext(candidates=names, weak=0, strong=1, train=train, embed=lambda t: np.zeros((len(t), 2)))
    pool = str(Path(__file__).resolve().parents[2] / "conf/pool/routellm_replay.yaml")
    r = build_router({"type": "router_r1", "checkpoint": str(ck), "pool": pool, "default": "weak"}, ctx)
    assert seen["first_call_written"] is True and seen["query_words"] == 16
    assert seen["until"] == "answer"  # the whole episode, as its run evaluated it
    assert [c["name"] for c in seen["pool"]["candidates"]] == ["gpt-4-1106-preview", "mixtral-8x7b-instruct"]
    assert r.decide(["a", "b", "c"]).tolist() == [0, 1, 0]  # the last call; no call: the default
    assert r.report() == {"policy_routes": {"mixtral-8x7b-instruct": 1, "gpt-4-1106-preview": 1, "none": 1},
                          "unrouted": 1, "escalated": 1}
    assert r.paid_calls == [[0], [0, 1], []]  # every call paid, the cheap one before the escalation included
    r = build_router({"type": "router_r1", "checkpoint": str(ck), "pool": pool, "first_call": "policy"}, ctx)
    assert seen["first_call_written"] is False and seen["pool"] is None
    assert r.decide(["a", "b", "c"]).tolist() == [1, 1, 1] and "escalated" not in r.report()
    assert r.paid_calls is None  # a first-turn policy pays for its route only
    with pytest.raises(ValueError, match="first_call must be 'auto', 'written' or 'policy', got 'always'"):
        build_router({"type": "router_r1", "checkpoint": str(ck), "pool": pool, "first_call": "always"}, ctx)
    build_router({"type": "router_r1", "checkpoint": str(ck), "pool": pool, "until": "route"}, ctx)
    assert seen["until"] == "route"
    with pytest.raises(ValueError, match=r"router type 'router_r1': until: expected one of \('answer', 'route'\), "
                                         "got 'reply'"):
        build_router({"type": "router_r1", "checkpoint": str(ck), "pool": pool, "until": "reply"}, ctx)

    # score: escalation, the policy's log-odds of escalating after the cheap reply as a threshold router
    FakePolicy.cheap = "mixtral-8x7b-instruct"
    FakePolicy.escalation_odds = lambda self, prompts: [{"odds": 2.0, "escalated": True, "calls": []},
                                                        {"odds": -1.5, "escalated": False, "calls": []},
                                                        {"odds": None, "escalated": True, "calls": []}]
    r = build_router({"type": "router_r1", "checkpoint": str(ck), "pool": pool, "score": "escalation"}, ctx)
    assert r.strong_score(["a", "b", "c"]).tolist() == [2.0, -1.5, 1e3]  # no decision point: its greedy choice
    assert r.decide(["a", "b", "c"]).tolist() == [1, 0, 1] and r.reads_weak_reply
    assert r.report() == {"escalated_greedy": 2, "no_decision_point": 1}
    with pytest.raises(ValueError, match="score must be 'route' or 'escalation', got 'odds'"):
        build_router({"type": "router_r1", "checkpoint": str(ck), "pool": pool, "score": "odds"}, ctx)
    with pytest.raises(ValueError, match="score 'escalation' reads the policy's choice after the cheap reply"):
        build_router({"type": "router_r1", "checkpoint": str(ck), "pool": pool, "score": "escalation",
                      "first_call": "policy"}, ctx)
    FakePolicy.cheap = "gpt-4-1106-preview"
    with pytest.raises(ValueError, match="needs the pool's cheapest candidate"):
        build_router({"type": "router_r1", "checkpoint": str(ck), "pool": pool, "score": "escalation"}, ctx)
