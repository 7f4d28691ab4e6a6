"""The Router-R1 training job (``jobs/train_router_r1.py``, ``make run``): data -> Ray -> rollout
workers -> evaluate the untrained policy -> train on Ray Train -> evaluate -> report and plots."""

from __future__ import annotations

import json
import logging
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from collections.abc import Mapping
from typing import Any

import numpy as np
import yaml

from rlrouter.config import to_plain, to_plain_dict, typed_config
from rlrouter.data.build import load_router_r1_split
from rlrouter.data.io import read_jsonl, write_jsonl
from rlrouter.data.job import ensure_data, logged_source
from rlrouter.data.question import task_of
from rlrouter.distributed.cluster import connect
from rlrouter.distributed.resources import ResourceSpec
from rlrouter.eval.ledger import question_digests, read_in_run, record_reading, unread
from rlrouter.eval.route_scores import cost_bounds, per_task_rule, route_table, scoreboard
from rlrouter.learner.config import RouterR1TrainConfig
from rlrouter.learner.group import LearnerGroup
from rlrouter.models import load_tokenizer
from rlrouter.pool.pool import CandidatePool
from rlrouter.rollout.demos import build_demonstrations, demo_tokens
from rlrouter.engine import EngineConfig
from rlrouter.rollout.env import EnvConfig
from rlrouter.rollout.group import RolloutGroup
from rlrouter.learner.checkpoint import latest_checkpoint
from rlrouter.storage import RunStorage, list_dirs
from rlrouter.provenance import stamp
from rlrouter.trainer.report import held_out_records, held_out_summary, plot_held_out, plot_run, results_table, write_train_report
from rlrouter.trainer.curriculum import CurriculumConfig, build_curriculum, write_first_calls
from rlrouter.trainer.router_r1 import RouterR1Trainer, build_train_reward, held_out_rollout

log = logging.getLogger(__name__)


# what a run's figures depend on (its report's provenance block; tools/staleness.py lists reports whose code changed)
RUN_MEASURES = ("conf", "jobs/train_router_r1.py", "rlrouter/algos", "rlrouter/learner", "rlrouter/pool",
                "rlrouter/rewards", "rlrouter/rollout", "rlrouter/sync", "rlrouter/trainer", "rlrouter/engine.py")
JOB_ONLY_TRAIN_FIELDS = ("warmup_demos", "warmup_query_words", "warmup_route", "warmup_answer")
"""``train`` fields the job reads itself (building the demonstrations: ``DemoConfig``) and
``RouterR1TrainConfig`` does not take."""

LEGACY_CURRICULUM_FIELDS = {"no_answer_share": "no_answer_share", "no_answer_first_call": "no_answer_first_call",
                            "first_call_share": "first_call_share", "sources": "sources",
                            "warmup_second_call": "demo_second_call"}
"""``train`` fields of runs made before the curriculum (their ``config.yaml``) -> ``curriculum`` fields."""


@dataclass
class DemoConfig:
    """The cold start's demonstrations, which the job builds (``train.warmup_demos`` etc.)."""

    demos: int = 64
    query_words: int = 24
    route: str = "random"
    answer: str = "reply"


@dataclass
class HeldOutConfig:
    """``eval``: the held-out questions every evaluation of the run scores."""

    num_questions: int = 32
    """Held-out questions read after training; 0 (with ``dev_questions``): a pilot that reads none, so a
    lockbox stays unread while settings are chosen on the dev curve."""
    per_task: bool = False
    samples: int = 0
    """k > 0: the trained policy is also read sampled, k trajectories a held-out question at the training
    temperature (the policy RL trained), beside the greedy read; each question's reward is the mean of its k."""
    seed: int = 1234
    untrained: bool = True
    first_call_written: bool = False
    ledger: str | None = None
    """A test-readings ledger (``rlrouter.eval.ledger``, e.g. ``benchmarks/results/test_ledger.jsonl``): the run
    appends one reading of its held-out questions there, with how many evaluations read them. None: no record
    (a user's own run)."""
    dev_questions: int = 0
    """Training questions kept out of training, taken from the end of the training file (``per_task`` as the
    held-out's): the untrained and cold-start levels and the curve (``train.eval_every``) score these, and
    the held-out (test) questions are read once, by the trained policy after the last step. 0: the held-out
    questions serve all of them (a quick run)."""
    unread_by: list[str] = field(default_factory=list)
    """Router types (e.g. ``[router_r1]``): held-out questions that any reading in ``ledger`` by one of them
    read are left out before ``num_questions`` are taken, so the held-out set is a lockbox those routers have
    never read. Needs ``ledger``."""
    same_questions_as: str | None = None
    """A run name (e.g. ``rb_scale_grpo_v3``): the held-out questions are those that run's reading in ``ledger``
    read, and no others, so two policies (GRPO and PPO) are compared on the same lockbox; this run's reading is
    ledgered as another reading of it. Needs ``ledger``; not with ``unread_by``."""

    def __post_init__(self) -> None:
        if isinstance(self.dev_questions, bool) or not isinstance(self.dev_questions, int) or self.dev_questions < 0:
            raise ValueError(f"eval.dev_questions: an int >= 0, got {self.dev_questions!r}")
        if isinstance(self.unread_by, str) or not all(isinstance(t, str) for t in self.unread_by):
            raise ValueError(f"eval.unread_by: a list of router types, got {self.unread_by!r}")
        if self.unread_by and not self.ledger:
            raise ValueError("eval.unread_by: needs eval.ledger (the readings that say what was read)")
        if self.same_questions_as is not None and (not self.ledger or self.unread_by):
            raise ValueError("eval.same_questions_as: needs eval.ledger and no eval.unread_by (it reads the questions "
                             f"run {self.same_questions_as!r} read, which unread_by would leave out)")
        if isinstance(self.samples, bool) or not isinstance(self.samples, int) or self.samples < 0:
            raise ValueError(f"eval.samples: an int >= 0 (samples a held-out question), got {self.samples!r}")
        if self.num_questions == 0 and not self.dev_questions:
            raise ValueError("eval.num_questions: 0 (read no held-out question) needs eval.dev_questions > 0 for the "
                             "curve to score something")


@dataclass
class RayConnect:
    """``ray``: the embedded cluster's logical resources (ignored when ``RAY_ADDRESS`` names a cluster)."""

    num_cpus: int | None = None
    num_gpus: int | None = None
    include_dashboard: bool = False


@dataclass
class RouterR1JobConfig:
    """The Router-R1 job's config, typed once at the job's entry (``from_cfg``): what the rooms below take.

    ``plain`` is the composed config resolved to plain containers (the run's ``config.yaml``, its report,
    the data job); every section the job acts on is a typed object, checked when built."""

    plain: dict[str, Any]
    train: RouterR1TrainConfig
    demos: DemoConfig
    curriculum: CurriculumConfig
    eval: HeldOutConfig
    resources: ResourceSpec
    ray: RayConnect
    engine: dict[str, Any]
    """``rollout.engine`` with what it shares with the learner derived (``engine_config``)."""
    env: dict[str, Any]
    """``rollout.env`` at the learner's sampling temperature (``env_config``)."""
    max_restarts: int = 3

    @property
    def model(self) -> str:
        return self.plain["model"]

    @property
    def pool(self) -> dict[str, Any]:
        return self.plain["pool"]

    @classmethod
    def from_cfg(cls, cfg: Any) -> "RouterR1JobConfig":
        """Type the job's whole config (a Hydra node or its plain form, e.g. an old run's ``config.yaml``) once.
        A bad field fails here, before any data, model or Ray work, with its path. A run made before the
        curriculum had its prompt-mix fields under ``train``; they are read as ``curriculum`` fields."""
        # Hydra's own node (its run folder's resolver is the entry point's) is not the job's
        plain = {k: to_plain_dict(v) if isinstance(v, Mapping) else to_plain(v)
                 for k, v in cfg.items() if k != "hydra"}
        train = dict(plain.get("train") or {})
        curriculum = dict(plain.get("curriculum") or {})
        for old, new in LEGACY_CURRICULUM_FIELDS.items():
            if old in train:
                curriculum.setdefault(new, train.pop(old))
        root = Path(plain["paths"]["root_dir"])
        demos = DemoConfig(**{k.removeprefix("warmup_"): train.pop(k) for k in JOB_ONLY_TRAIN_FIELDS if k in train})
        if train.get("init_from") and not Path(train["init_from"]).is_absolute():
            # the learner ranks run in Ray's own working directories, where a path relative to the project
            # is not found: resolve it against the project
            train["init_from"] = str(root / train["init_from"])
        learner = {**(plain.get("learner") or {}), "model": plain["model"]}
        typed = typed_config(RouterR1TrainConfig, {**train, "out_dir": str(plain["out_dir"]),
                                                   "reward": plain.get("reward"), "learner": learner}, "train")
        rollout = plain.get("rollout") or {}
        engine = dict(rollout.get("engine") or {})
        return cls(plain, typed, demos, typed_config(CurriculumConfig, curriculum, "curriculum"),
                   typed_config(HeldOutConfig, plain.get("eval"), "eval"),
                   ResourceSpec(**(plain.get("resources") or {})),
                   typed_config(RayConnect, plain.get("ray"), "ray"), engine_config(engine, typed),
                   env_config(rollout.get("env") or {}, typed), int(rollout.get("max_restarts", 3)))


def check_fresh(out: Path, resume: bool, run_name: str, checkpoints: str | None = None) -> None:
    """A run that does not resume must not find another run's checkpoints in its checkpoint folder (a path
    or a URI; default ``out/checkpoints``): the learner ranks restore the newest of them (the mechanism
    that restarts a failed learner group), so the "new" run would silently continue the old one."""
    if resume:
        return
    checkpoints = checkpoints or str(out / "checkpoints")
    found = [n for n in list_dirs(checkpoints) if n.startswith("step_")]
    if found:
        raise FileExistsError(f"run_name={run_name}: {checkpoints} already holds a run ({found[-1]}); set resume=true "
                              "to continue it, or choose another run_name (the default is time-stamped)")


def engine_config(engine: dict[str, Any], train: RouterR1TrainConfig) -> dict[str, Any]:
    """The rollout engine's config (``rollout.engine``); what it must share with the learner is derived here,
    once: the LoRA rank it must accept, whether it serves adapters (the ``lora`` sync transport) and whether
    it joins an NCCL weight transfer (the ``nccl`` transport)."""
    return {**engine, "max_lora_rank": max(train.learner_cfg.lora_r, 8), "enable_lora": train.sync == "lora",
            "weight_transfer": "nccl" if train.sync == "nccl" else engine.get("weight_transfer")}


def env_config(env: dict[str, Any], train: RouterR1TrainConfig, **changes: Any) -> dict[str, Any]:
    """The rollout environment's config (``rollout.env``); it samples at the learner's temperature (the
    log-probs of the update are taken from the same tempered distribution)."""
    return {**env, "temperature": train.learner_cfg.temperature, **changes}


def demonstrations(job: RouterR1JobConfig, pool: Any, items: list[dict[str, Any]], reference: Any = None) -> list[Any]:
    """The cold start's demonstrations as token sequences (none when ``train.warmup_steps`` is 0).
    ``reference``: the training questions' route table, whose per-task rule ``train.warmup_route=per_task``
    demonstrates (at the run's alpha, on the reference cost scale); ``curriculum.demo_second_call`` of them
    ask a second candidate."""
    train, env, route = job.train, job.env, job.demos.route
    if not train.warmup_steps:
        return []
    task_routes = None
    if route == "per_task" and reference is not None:
        task_routes = per_task_rule(reference, train.reward_spec.alpha, tuple(train.eval_reference["cost_bounds"]))
        print(f"cold start: demonstrations route by the training questions' per-task rule {task_routes}")
    tok = load_tokenizer(job.model)
    cands = [pool.get(n) for n in pool.names]
    return [demo_tokens(d, tok, cands, EnvConfig(**env))
            for d in build_demonstrations(items, pool, job.demos.demos, seed=train.seed,
                                          query_words=job.demos.query_words,
                                          route=route, task_routes=task_routes, answer=job.demos.answer,
                                          second_call=job.curriculum.demo_second_call,
                                          info_max_chars=env.get("info_max_chars", 400),
                                          mark_no_answer=bool(env.get("mark_no_answer", False)),
                                          last_call=int(env.get("max_turns", 0)) if env.get("note_last_call") else 0)]


def held_out_items(items: list[dict[str, Any]], n: int, per_task: bool = False) -> list[dict[str, Any]]:
    """The held-out questions: the file's first ``n``, or with ``per_task`` the first ``n // tasks`` of each
    task (``task_of``) in file order, tasks in order of first appearance. A task with fewer questions gives
    all it has, and the run says so. ``n`` 0: none (a pilot)."""
    if n <= 0:
        return []
    if not per_task:
        return items[:n]
    by_task: dict[str, list[dict[str, Any]]] = {}
    for it in items:
        by_task.setdefault(task_of(it), []).append(it)
    each = max(1, n // len(by_task)) if by_task else 0
    short = {t: len(v) for t, v in by_task.items() if len(v) < each}
    if short:
        print(f"held-out: {each} questions a task asked (eval.per_task), but {short} hold fewer: all of those")
    return [it for v in by_task.values() for it in v[:each]]


def item_id(item: dict[str, Any]) -> str:
    """The id a question is ledgered by (``rlrouter.eval.ledger``): the data's own id, else its query."""
    return str(item.get("id") or item["query"])


def same_items(items: list[dict[str, Any]], ledger: str | None, run: str | None) -> list[dict[str, Any]]:
    """``items`` that run ``run``'s readings in ``ledger`` read (``eval.same_questions_as``), in order."""
    if run is None:
        return items
    seen = read_in_run(ledger, run)
    if not seen:
        raise ValueError(f"eval.same_questions_as: the ledger {ledger} holds no reading by run {run!r}")
    kept = [it for it in items if question_digests([item_id(it)])[0] in seen]
    print(f"held-out: the {len(kept)} of {len(items)} questions run {run!r} read ({ledger}; eval.same_questions_as)")
    return kept


def unread_items(items: list[dict[str, Any]], ledger: str | None, router_types: list[str]) -> list[dict[str, Any]]:
    """``items`` that no reading in ``ledger`` by one of ``router_types`` read (``eval.unread_by``), in order."""
    if not router_types:
        return items
    keep = unread(ledger, [item_id(it) for it in items], router_types)
    kept = [it for it, k in zip(items, keep) if k]
    print(f"held-out: {len(items) - len(kept)} of {len(items)} questions were read before by {router_types} "
          f"({ledger}); {len(kept)} unread remain (eval.unread_by)")
    return kept


def split_dev(items: list[dict[str, Any]], n: int, per_task: bool = False) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(training questions, dev questions): the last ``n`` of ``items`` kept out of training, or with ``per_task``
    the last ``n // tasks`` of each task (``eval.dev_questions``). A split that would leave no training
    question fails, naming the field."""
    if not n:
        return items, []
    picked = {id(it) for it in held_out_items(items[::-1], n, per_task)}
    train = [it for it in items if id(it) not in picked]
    dev = [it for it in items if id(it) in picked]
    if not train:
        raise ValueError(f"eval.dev_questions: {n} would leave none of the {len(items)} training questions to train on")
    return train, dev


def set_reference(train: RouterR1TrainConfig, pool: Any, items: list[dict[str, Any]]) -> Any:
    """Fix the run's reference cost scale on ``train`` (``eval_reference``): every candidate's call on the
    training questions (``rlrouter.eval.route_scores``). Every held-out evaluation scores on it, and so
    does the training reward where it says ``cost_bounds: reference``. Returns the route table.

    Only a pool of replay candidates has these calls for free. With live candidates it would call every
    candidate on every training question, so there is no reference: ``None``, the training reward keeps
    Router-R1's window and evaluations scale on the held-out questions' own calls."""
    if any(pool.get(n).backend != "replay" for n in pool.names):
        train.eval_reference = None
        log.warning("live candidates: no reference cost scale; cost_bounds: reference falls back to the window")
        return None
    table = route_table(pool, items, train.reward_spec.metric)
    train.eval_reference = {"cost_bounds": list(cost_bounds(table.cost)), "strong": table.strong}
    return table


def no_answer_items(table: Any) -> list[int]:
    """Indices of the training questions whose cheapest candidate's logged reply states no final answer
    (``curriculum.no_answer_share``'s stratum); none without a reference table (live candidates)."""
    return [] if table is None else [int(i) for i in np.flatnonzero(table.cheap_states_none())]


def held_out_evaluations(dev_curve: bool, metrics: list[dict[str, Any]], untrained: bool, sampled: bool) -> int:
    """How many times a run read its held-out questions, for the ledger: with a dev curve only the trained
    policy read them; without one, every curve point, the trained policy and the untrained one did; the
    sampled read of the trained policy (``eval.samples``) is one more either way."""
    reads = 1 if dev_curve else sum(1 for m in metrics if "eval/mean_reward" in m) + 1 + untrained
    return reads + sampled


def read_jsonl_rows(path: Path) -> list[dict[str, Any]]:
    """The rows of a run's JSON-lines log; none when it is missing."""
    return [row for _, row in read_jsonl(path)] if path.exists() else []


def run(cfg: Any) -> dict[str, Any]:
    """The job, from its composed config (typed here, once: ``RouterR1JobConfig.from_cfg``)."""
    import ray

    t_start = time.perf_counter()
    job = RouterR1JobConfig.from_cfg(cfg)
    plain, train = job.plain, job.train
    EngineConfig(**job.engine)  # a bad engine fails here too (train.sync=nccl on a CPU engine)
    store = RunStorage.from_cfg(plain)  # where reports, checkpoints and plots go
    print(store.banner())
    out = store.prepare(resume=plain["resume"])
    check_fresh(out, plain["resume"], plain["run_name"], store.checkpoints())
    (out / "config.yaml").write_text(yaml.safe_dump(plain, sort_keys=False))
    print(f"paths: project {plain['paths']['root_dir']} (shared data {plain['paths']['shared_data']})")
    train_path, test_path = ensure_data(plain)
    print(f"data: {train_path}, {test_path.name}; logged outcomes {logged_source(plain)}")
    train_items, dev_items = split_dev(load_router_r1_split(train_path), job.eval.dev_questions, job.eval.per_task)
    test_items = unread_items(load_router_r1_split(test_path), job.eval.ledger, job.eval.unread_by)
    test_items = same_items(test_items, job.eval.ledger, job.eval.same_questions_as)
    test_items = held_out_items(test_items, job.eval.num_questions, job.eval.per_task)
    if dev_items:
        print(f"dev: {len(dev_items)} training questions kept out of training score the curve; "
              + (f"the {len(test_items)} held-out questions are read once, after training (eval.dev_questions)"
                 if test_items else "no held-out question is read (eval.num_questions=0: a pilot)"))
    pool = CandidatePool.from_config(job.pool)
    candidates = pool.names
    train.out_dir, train.train_path = str(out), str(train_path)
    # the learner ranks store checkpoints there themselves, from whichever node they run on
    train.checkpoint_dir = store.checkpoints()
    build_train_reward(train, candidates)  # a bad reward fails here naming its path, before any work that reads it
    reference_table = set_reference(train, pool, train_items)
    curriculum = build_curriculum(job.curriculum, train_items, no_answer_items(reference_table),
                                  reference_table is not None, train.seed)
    train_items, dev_items, test_items = write_first_calls(
        curriculum, job.eval.first_call_written, train_items, dev_items, test_items,
        reference_table.cheap if reference_table is not None else None, job.demos.query_words)
    print(curriculum.describe())
    spec = train.reward_spec  # alpha, cost window, metric: every held-out evaluation's, as the training reward's
    metric = spec.metric
    cluster = connect(num_cpus=job.ray.num_cpus, num_gpus=job.ray.num_gpus,
                      include_dashboard=job.ray.include_dashboard)
    print(f"ray: {cluster['mode']} cluster at {cluster['address']}")
    if plain["resume"]:
        train.resume_from = latest_checkpoint(train.checkpoints)
        print(f"resume: {train.resume_from or 'no checkpoint yet, starting fresh'}")
    group = RolloutGroup(job.model, job.engine, job.env, job.pool, job.resources, max_restarts=job.max_restarts)
    print(f"rollout: {len(group)} vLLM worker(s) ready in {group.ready_s:.1f}s")
    report: dict[str, Any] = {"config": plain, "cluster": cluster, "results": {}}
    stamp(report, RUN_MEASURES)  # the command, date and commit at the run's start (rlrouter.provenance)
    eval_seed = job.eval.seed
    curve_items = dev_items or test_items  # what every evaluation before the last scores
    if not train.resume_from and job.eval.untrained:
        base = held_out_rollout(group, curve_items, eval_seed, "dev, untrained" if dev_items else "held-out, untrained",
                                train.progress)
        report["results"]["policy_untrained"] = held_out_summary(base, candidates, spec, train.eval_reference)
        report["results"]["policy_untrained"]["scored_on"] = "dev" if dev_items else "held-out"
        print("untrained policy:", json.dumps(report["results"]["policy_untrained"]))
    demos = demonstrations(job, pool, train_items, reference_table) if not (train.resume_from or train.init_from) else []
    t0 = time.perf_counter()
    with LearnerGroup(train, job.resources, max_failures=plain["learner_failures"]) as learners:
        RouterR1Trainer(train, group, learners, candidates, train_items, demos, eval_items=curve_items,
                        curriculum=curriculum).fit()
    result = learners.result
    report["train_s"] = time.perf_counter() - t0
    if getattr(result, "error", None):
        raise RuntimeError(f"training failed: {result.error}")
    trained: list[Any] = []
    if test_items:
        trained = held_out_rollout(group, test_items, eval_seed, "held-out, trained", train.progress)
        report["results"]["policy_trained"] = held_out_summary(trained, candidates, spec, train.eval_reference)
        print("trained policy:  ", json.dumps(report["results"]["policy_trained"]))
        write_jsonl(out / "held_out.jsonl", held_out_records(trained, candidates, spec, train.eval_reference))
        sampled = (held_out_rollout(group, test_items, eval_seed, "held-out, sampled", train.progress,
                                    samples=job.eval.samples) if job.eval.samples else None)
        test_table = route_table(pool, test_items, metric)
        board = scoreboard(test_table, reference_table or test_table, spec.alpha,
                           trajs=trained, seed=eval_seed, metric=metric, sampled=sampled)
        board["reference"] = "training questions" if reference_table is not None else "held-out questions (live pool)"
        if reference_table is None:  # the policy's row on the board's scale too, not on its own window's
            report["results"]["policy_trained"].update(
                {k: board["routes"]["policy"][k] for k in ("mean_reward", "strong_share", "strong_share_by_task",
                                                           "mean_reward_by_task")})
        report["routing"] = board
        report["results"].update({k: v for k, v in board["routes"].items() if k != "policy"})
        print("routing:", json.dumps({k: board[k] for k in ("best_fixed", "per_task", "policy_minus_best_fixed")}))
        if job.eval.ledger:  # held-out questions read by this run's evaluations: one record in the ledger
            ids = [item_id(it) for it in test_items]
            evaluations = held_out_evaluations(bool(dev_items), read_jsonl_rows(out / "metrics.jsonl"),
                                               "policy_untrained" in report["results"], sampled is not None)
            report["ledger"] = record_reading(
                job.eval.ledger, question_ids=ids, test_sources=[str(test_path)], router_types=["router_r1"],
                command="jobs/train_router_r1.py", run=plain["run_name"], evaluations=evaluations,
                policy_minus_best_fixed=board.get("policy_minus_best_fixed"))
    else:  # a pilot (eval.num_questions=0): the curve on the dev questions only, the held-out set stays unread
        print("held-out: none read (eval.num_questions=0); the dev curve is the run's only evaluation")
    metrics = read_jsonl_rows(out / "metrics.jsonl")
    report["steps"] = metrics
    report["checkpoint"] = latest_checkpoint(train.checkpoints)
    report["samples"] = [{"query": t.item["query"][:200], "text": t.text[:1200], "answer": t.answer,
                          "routes": [asdict(r) for r in t.routes]} for t in trained[:4]]
    report["held_out_curve"] = [{k: v for k, v in m.items() if k == "step" or k.startswith("eval/")}
                                for m in metrics if "eval/format_valid" in m]
    train_rows = [m for m in metrics if "reward/total" in m]
    report["plots"] = plot_run(train_rows, report["results"], out)
    lines = {k: v for k, v in report["results"].items() if k.startswith("always_") or k == "per_task_rule"}
    if dev_items:  # the curve scored the dev questions: so do its reference lines and the dev summary
        dev_table = route_table(pool, dev_items, metric)
        dev_board = scoreboard(dev_table, reference_table or dev_table, spec.alpha, seed=eval_seed, metric=metric)
        lines = {k: v for k, v in dev_board["routes"].items() if k.startswith("always_") or k == "per_task_rule"}
        report["dev"] = {"questions": len(dev_items), "best_fixed": dev_board["best_fixed"],
                         "routes": {k: v["mean_reward"] for k, v in dev_board["routes"].items()}}
    held = plot_held_out(metrics, out, lines, scored_on="dev" if dev_items else "held-out")
    if held:
        report["plots"].append(held)
    report["wall_s"] = time.perf_counter() - t_start
    path = write_train_report(out, report)
    group.shutdown()
    pool.close_sync()
    if cluster["mode"] == "embedded":
        ray.shutdown()
    print(results_table(report))
    print(f"report: {path} (the table above: {path.with_suffix('.md')})")
    for p in report["plots"]:
        print(f"plot:   {p}")
    if store.push():
        print(f"stored: {store.remote}")
    return report
