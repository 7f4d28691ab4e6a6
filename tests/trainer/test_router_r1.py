"""The trainer's data cursor (the batch is a pure function of the step), its metrics log on resume, and
dynamic sampling's batch (fake rollout and learners: the step's bookkeeping only)."""

import json
from types import SimpleNamespace

import pytest

from rlrouter.trainer.router_r1 import batch_indices, cut_metrics


def test_data_cursor_is_a_pure_function_of_step():
    a = [batch_indices(10, 4, s, seed=3) for s in range(6)]
    assert a == [batch_indices(10, 4, s, seed=3) for s in range(6)]
    flat = [i for b in a for i in b]
    assert sorted(flat[:10]) == list(range(10))  # epoch 0 is a permutation
    assert batch_indices(10, 4, 2, seed=3) != batch_indices(10, 4, 2, seed=4)


def test_a_resumed_run_drops_the_rows_of_the_steps_it_replays(tmp_path):
    path = tmp_path / "metrics.jsonl"
    rows = [{"step": 0, "eval/format_valid": 0.5}] + [{"step": s, "reward/total": s / 10} for s in range(1, 7)]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert cut_metrics(path, 4) == 2  # the checkpoint is step 4; steps 5 and 6 will be logged again
    assert [json.loads(x) for x in path.read_text().splitlines()] == rows[:5]
    assert cut_metrics(path, 4) == 0 and [json.loads(x) for x in path.read_text().splitlines()] == rows[:5]
    assert cut_metrics(tmp_path / "missing.jsonl", 3) == 0 and not (tmp_path / "missing.jsonl").exists()


def test_informative_groups_and_the_dynamic_sampling_batch():
    from rlrouter.trainer.router_r1 import informative_groups, pick_groups

    assert informative_groups([1.0, 1.0, 0.5, 1.0, 0.2, 0.2], 2) == [False, True, False]
    with pytest.raises(ValueError, match="whole groups of 2"):
        informative_groups([1.0, 1.0, 0.5], 2)
    # informative groups in draw order across rounds, capped at the batch size
    assert pick_groups([[False, True, False], [True, True, True]], 3) == [(0, 1), (1, 0), (1, 1)]
    # too few after every round: round 0's uninformative groups fill the batch, in order
    assert pick_groups([[False, True, False], [False, False, False]], 3) == [(0, 1), (0, 0), (0, 2)]


class _Rollout:
    """Trajectories whose GRPO group rewards are set by the item: ``spread`` groups score 0 and 1."""

    def __init__(self):
        self.calls = []

    def rollout(self, items, n_samples, seed, step):
        self.calls.append((step, seed, [it["id"] for it in items]))
        return [SimpleNamespace(item=it, sample_index=j, routes=[], answer="a", turns=1, cost=0.0,
                                tokens=_Tokens((it["id"], j))) for it in items for j in range(n_samples)]


class _Tokens:
    num_policy_tokens = 1

    def __init__(self, id_):
        self.id = id_

    def __len__(self):
        return 3


class _Learners:
    world_size = 1

    def __init__(self):
        self.seen = []

    def train_step(self, shards, rewards, pad_to, well_formed=None):
        self.seen.append((shards, rewards))
        return {"learner/loss": 0.0}

    def sync_payload(self, *_):
        return SimpleNamespace(nbytes=0)


def _score(reward, trajs):
    return [SimpleNamespace(total=float(t.sample_index % 2 if t.item["spread"] else 1.0), format=0, outcome=1.0,
                            cost=None) for t in trajs]


@pytest.mark.parametrize("filter_groups", [0, 3])
def test_a_step_learns_on_informative_groups_only_with_filter_groups(monkeypatch, tmp_path, filter_groups):
    """Half the prompts give groups with equal rewards. Without dynamic sampling the step learns on the
    drawn batch as it is; with it, on informative groups drawn over extra rounds, the metrics still
    describe round 0 (the batch an unfiltered step draws)."""
    import rlrouter.trainer.router_r1 as tr
    from rlrouter.learner.config import RouterR1TrainConfig

    monkeypatch.setattr(tr, "score_trajectories", _score)
    monkeypatch.setattr(tr, "sync_policy", lambda *a: 0.0)
    items = [{"id": i, "spread": i % 2 == 0} for i in range(40)]
    cfg = RouterR1TrainConfig(prompts_per_step=4, n_samples=2, filter_groups=filter_groups, out_dir=str(tmp_path),
                              progress=False)
    rollout, learners = _Rollout(), _Learners()
    trainer = tr.RouterR1Trainer(cfg, rollout, learners, ["a", "b"], items)
    metrics = trainer.train_step(5)
    (shards,), (rewards,) = learners.seen[0]
    drawn = rollout.calls[0][2]
    assert drawn == [items[i]["id"] for i in tr.batch_indices(40, 4, 5, cfg.seed)]  # round 0 is the usual batch
    assert metrics["rollout/informative_groups"] == sum(items[i]["spread"] for i in drawn) / 4
    if not filter_groups:
        assert len(rollout.calls) == 1 and "rollout/sampling_rounds" not in metrics
        assert [tok.id[0] for tok in shards] == [i for i in drawn for _ in range(2)]
    else:
        learned = [tok.id[0] for tok in shards][::2]
        assert len(learned) == 4 and all(items[i]["spread"] for i in learned)
        assert all(len(set(rewards[k:k + 2])) == 2 for k in range(0, 8, 2))  # every group has spread
        assert metrics["rollout/sampling_rounds"] == len(rollout.calls) > 1
        assert metrics["rollout/filled_groups"] == 0
        assert len({c[1] for c in rollout.calls}) == len(rollout.calls)  # each round samples with its own seed


def test_filter_groups_must_be_a_count():
    from rlrouter.learner.config import RouterR1TrainConfig

    with pytest.raises(ValueError, match="train.filter_groups"):
        RouterR1TrainConfig(filter_groups=-1)
    with pytest.raises(ValueError, match="needs train.n_samples >= 2"):
        RouterR1TrainConfig(filter_groups=1, n_samples=1)


def test_the_no_answer_stratum_is_read_from_the_cheap_candidates_logged_replies():
    import numpy as np

    from rlrouter.eval.route_scores import RouteTable
    from rlrouter.trainer.job import no_answer_items

    stated = np.array([[1, 0], [0, 1], [1, 1], [0, 0]], dtype=float)  # columns: gpt-4, mixtral (the cheap one)
    table = RouteTable(["gsm8k"] * 4, ["gpt-4", "mixtral"], np.ones((4, 2)), np.ones((4, 2)), "gpt-4",
                       {"gpt-4": 30.0, "mixtral": 0.6}, stated)
    assert no_answer_items(table) == [0, 3]
    assert no_answer_items(None) == []  # live candidates: no logged replies
    assert no_answer_items(RouteTable(["a"], ["x"], np.ones((1, 1)), np.ones((1, 1)), "x", {"x": 1.0})) == []


def test_held_out_rollout_goes_in_chunks_in_order_with_a_progress_line_each(capsys):
    from rlrouter.trainer.router_r1 import held_out_rollout

    calls = []

    class Rollout:
        def rollout(self, items, n, seed, step, temperature=None):
            calls.append((len(items), n, seed, step, temperature))
            return [f"t{it['i']}" for it in items]

    items = [{"i": i} for i in range(7)]
    assert held_out_rollout(Rollout(), items, 5, chunk=8) == [f"t{i}" for i in range(7)]
    assert calls == [(7, 1, 5, -1, 0.0)] and capsys.readouterr().out == ""  # up to a chunk: one call, no lines
    calls.clear()
    assert held_out_rollout(Rollout(), items, 5, desc="held-out", chunk=3) == [f"t{i}" for i in range(7)]
    assert [c[0] for c in calls] == [3, 3, 1] and all(c[1:] == (1, 5, -1, 0.0) for c in calls)
    lines = capsys.readouterr().out.splitlines()
    assert [ln.split(" [")[0] for ln in lines] == [f"held-out: question {n}/7" for n in (3, 6, 7)]
    held_out_rollout(Rollout(), items, 5, chunk=3, enabled=False)
    assert capsys.readouterr().out == ""
    calls.clear()  # the sampled policy: k a question at the rollout's own (training) temperature
    held_out_rollout(Rollout(), items, 5, chunk=3, enabled=False, samples=4)
    assert [c[0] for c in calls] == [3, 3, 1] and all(c[1:] == (4, 5, -1, None) for c in calls)


def test_a_step_draws_its_prompts_from_the_curriculum_and_reports_its_strata(monkeypatch, tmp_path):
    import rlrouter.trainer.router_r1 as tr
    from rlrouter.learner.config import RouterR1TrainConfig
    from rlrouter.trainer.curriculum import CurriculumConfig, build_curriculum

    monkeypatch.setattr(tr, "score_trajectories", _score)
    monkeypatch.setattr(tr, "sync_policy", lambda *a: 0.0)
    items = [{"id": i, "spread": True, "source": "mbpp" if i < 4 else "arc"} for i in range(40)]
    cfg = RouterR1TrainConfig(prompts_per_step=4, n_samples=2, out_dir=str(tmp_path), progress=False)
    curriculum = build_curriculum(CurriculumConfig(balance="task"), items)
    rollout, learners = _Rollout(), _Learners()
    trainer = tr.RouterR1Trainer(cfg, rollout, learners, ["a", "b"], items, curriculum=curriculum)
    for step in range(3):
        metrics = trainer.train_step(step)
    for step, _, drawn in rollout.calls:
        assert drawn == curriculum.draw(step, 4, cfg.seed)
        assert sum(items[i]["source"] == "mbpp" for i in drawn) == 2  # a tenth of the items, half the prompts
    assert "rollout/mbpp/reward" in metrics and "rollout/arc/reward" in metrics


def test_rollout_rows_name_each_trajectorys_question_and_stratum():
    from rlrouter.trainer.curriculum import Curriculum
    from rlrouter.trainer.router_r1 import rollout_rows

    t = lambda *models: SimpleNamespace(routes=[SimpleNamespace(model=m) for m in models], text="x")  # noqa: E731
    s = SimpleNamespace(total=1.0, format=0.0, outcome=1.0, cost=0.5, failure=None)
    c = Curriculum({"no_answer": [2], "states_answer": [7]}, "share", 0.5)
    rows = rollout_rows(3, [7, 2], [t("a"), t("a", "b"), t(), t("b")], [s] * 4, 2, c)
    assert [(r["question"], r["sample"], r["stratum"]) for r in rows] == [
        (7, 0, "states_answer"), (7, 1, "states_answer"), (2, 0, "no_answer"), (2, 1, "no_answer")]
    assert rows[1]["calls"] == ["a", "b"] and rows[0]["step"] == 3 and rows[0]["failure"] is None


def test_step_metrics_give_the_sampled_calls_per_task():
    from rlrouter.trainer.router_r1 import trajectory_metrics

    def traj(task, model):
        return SimpleNamespace(item={"source": task}, routes=[SimpleNamespace(model=model)], cost=0.0, turns=1,
                               answer="x", tokens=SimpleNamespace(num_policy_tokens=3))

    trajs = [traj("arc", "yi"), traj("arc", "yi"), traj("mbpp", "gpt"), traj("mbpp", "yi")]
    scores = [SimpleNamespace(total=1.0, format=0, outcome=1.0, cost=None)] * 4
    m = trajectory_metrics(trajs, scores, ["yi", "gpt"])
    assert m["rollout/share/yi"] == 0.75
    assert m["rollout/share/arc/yi"] == 1.0 and "rollout/share/arc/gpt" not in m  # only candidates it called
    assert m["rollout/share/mbpp/gpt"] == 0.5 and m["rollout/share/mbpp/yi"] == 0.5
    assert not any(k.count("/") == 3 for k in trajectory_metrics(trajs[:2], scores[:2], ["yi", "gpt"]))  # one task: none
