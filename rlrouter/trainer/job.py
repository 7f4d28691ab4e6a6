"""The Router-R1 training job (``jobs/train_router_r1.py``, ``make run``): data -> Ray -> rollout
workers -> evaluate the untrained policy -> train on Ray Train -> evaluate -> report and plots."""

from __future__ import annotations

import json
import logging
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np
from omegaconf import DictConfig, OmegaConf

from rlrouter.config import to_plain, typed_config
from rlrouter.data.build import load_router_r1_split
from rlrouter.data.io import read_jsonl, write_jsonl
from rlrouter.data.job import ensure_data, logged_source
from rlrouter.data.question import task_of
from rlrouter.distributed.cluster import connect
from rlrouter.distributed.resources import ResourceSpec
from rlrouter.eval.route_scores import cost_bounds, per_task_rule, route_table, scoreboard
from rlrouter.learner.config import RouterR1TrainConfig
from rlrouter.learner.group import LearnerGroup
from rlrouter.models import load_tokenizer
from rlrouter.pool.pool import CandidatePool
from rlrouter.rollout.demos import build_demonstrations, demo_tokens, with_first_turn
from rlrouter.engine import EngineConfig
from rlrouter.rollout.env import EnvConfig
from rlrouter.rollout.group import RolloutGroup
from rlrouter.learner.checkpoint import latest_checkpoint
from rlrouter.storage import RunStorage, list_dirs
from rlrouter.trainer.report import held_out_records, held_out_summary, plot_held_out, plot_run, results_table, write_train_report
from rlrouter.trainer.curriculum import CurriculumConfig, build_curriculum
from rlrouter.trainer.router_r1 import RouterR1Trainer, build_train_reward, held_out_reward, held_out_rollout

log = logging.getLogger(__name__)


JOB_ONLY_TRAIN_FIELDS = ("warmup_demos", "warmup_query_words", "warmup_route", "warmup_answer")
"""``train`` fields the job reads itself (building the demonstrations) and ``RouterR1TrainConfig`` does not take."""


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


def train_config(cfg: DictConfig, out_dir: str | Path | None = None,
                 train_path: str | Path = "") -> RouterR1TrainConfig:
    """The run's ``RouterR1TrainConfig``: ``train``, the ``reward`` group and the ``learner`` (with the policy)."""
    train = {k: v for k, v in to_plain(cfg.train).items() if k not in JOB_ONLY_TRAIN_FIELDS}
    if train.get("init_from") and not Path(train["init_from"]).is_absolute():
        # the learner ranks run in Ray's own working directories, where a path relative to the project
        # is not found: resolve it against the project
        train["init_from"] = str(Path(cfg.paths.root_dir) / train["init_from"])
    return typed_config(RouterR1TrainConfig, {**train, "out_dir": str(out_dir or cfg.out_dir),
                                              "train_path": str(train_path), "reward": to_plain(cfg.reward),
                                              "learner": {**to_plain(cfg.learner), "model": cfg.model}}, "train")


def engine_config(cfg: DictConfig, train: RouterR1TrainConfig) -> dict[str, Any]:
    """The rollout engine's config; what it must share with the learner is derived here, once: the LoRA
    rank it must accept, whether it serves adapters (the ``lora`` sync transport) and whether it joins
    an NCCL weight transfer (the ``nccl`` transport)."""
    engine = to_plain(cfg.rollout.engine)
    return {**engine, "max_lora_rank": max(train.learner_cfg.lora_r, 8), "enable_lora": train.sync == "lora",
            "weight_transfer": "nccl" if train.sync == "nccl" else engine.get("weight_transfer")}


def env_config(cfg: DictConfig, train: RouterR1TrainConfig, **changes: Any) -> dict[str, Any]:
    """The rollout environment's config; it samples at the learner's temperature (the log-probs of the
    update are taken from the same tempered distribution)."""
    return {**to_plain(cfg.rollout.env), "temperature": train.learner_cfg.temperature, **changes}


def demonstrations(cfg: DictConfig, train: RouterR1TrainConfig, pool: Any, items: list[dict[str, Any]],
                   env: dict[str, Any], reference: Any = None, second_call: float = 0.0) -> list[Any]:
    """The cold start's demonstrations as token sequences (none when ``train.warmup_steps`` is 0).
    ``reference``: the training questions' route table, whose per-task rule ``train.warmup_route=per_task``
    demonstrates (at the run's alpha, on the reference cost scale); ``second_call``: the share of them that
    asks a second candidate (``curriculum.demo_second_call``)."""
    if not train.warmup_steps:
        return []
    route = cfg.train.get("warmup_route", "random")
    task_routes = None
    if route == "per_task" and reference is not None:
        scoring = held_out_reward(train)
        task_routes = per_task_rule(reference, scoring["alpha"], tuple(scoring["reference"]["cost_bounds"]))
        print(f"cold start: demonstrations route by the training questions' per-task rule {task_routes}")
    tok = load_tokenizer(cfg.model)
    cands = [pool.get(n) for n in pool.names]
    return [demo_tokens(d, tok, cands, EnvConfig(**env))
            for d in build_demonstrations(items, pool, cfg.train.warmup_demos, seed=train.seed,
                                          query_words=cfg.train.get("warmup_query_words", 24),
                                          route=route, task_routes=task_routes,
                                          answer=cfg.train.get("warmup_answer", "reply"),
                                          second_call=second_call,
                                          info_max_chars=env.get("info_max_chars", 400),
                                          mark_no_answer=bool(env.get("mark_no_answer", False)),
                                          last_call=int(env.get("max_turns", 0)) if env.get("note_last_call") else 0)]


def held_out_items(items: list[dict[str, Any]], n: int, per_task: bool = False) -> list[dict[str, Any]]:
    """The held-out questions: the file's first ``n``, or with ``per_task`` the first ``n // tasks`` of each
    task (``task_of``) in file order, tasks in order of first appearance. A task with fewer questions gives
    all it has, and the run says so."""
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
    table = route_table(pool, items, held_out_reward(train)["metric"])
    train.eval_reference = {"cost_bounds": list(cost_bounds(table.cost)), "strong": table.strong}
    return table


def no_answer_items(table: Any) -> list[int]:
    """Indices of the training questions whose cheapest candidate's logged reply states no final answer
    (``curriculum.no_answer_share``'s stratum); none without a reference table (live candidates)."""
    return [] if table is None else [int(i) for i in np.flatnonzero(table.cheap_states_none())]


def resource_spec(cfg: DictConfig) -> ResourceSpec:
    return ResourceSpec(**to_plain(cfg.resources))


def run(cfg: DictConfig) -> dict[str, Any]:
    import ray

    t_start = time.perf_counter()
    store = RunStorage.from_cfg(cfg)  # where reports, checkpoints and plots go
    print(store.banner())
    out = store.prepare(resume=cfg.resume)
    check_fresh(out, cfg.resume, cfg.run_name, store.checkpoints())
    (out / "config.yaml").write_text(OmegaConf.to_yaml(cfg, resolve=True))
    print(f"paths: project {cfg.paths.root_dir} (shared data {cfg.paths.shared_data})")
    train_path, test_path = ensure_data(cfg)
    print(f"data: {train_path}, {test_path.name}; logged outcomes {logged_source(cfg)}")
    train_items = load_router_r1_split(train_path)
    test_items = held_out_items(load_router_r1_split(test_path), cfg.eval.num_questions,
                                bool(cfg.eval.get("per_task", False)))
    pool_cfg = to_plain(cfg.pool)
    pool = CandidatePool.from_config(pool_cfg)
    candidates = pool.names
    resources = resource_spec(cfg)
    train = train_config(cfg, out, train_path)
    # the learner ranks store checkpoints there themselves, from whichever node they run on
    train.checkpoint_dir = store.checkpoints()
    reference_table = set_reference(train, pool, train_items)
    plan = typed_config(CurriculumConfig, cfg.get("curriculum"), "curriculum")
    curriculum = build_curriculum(plan, train_items, no_answer_items(reference_table),
                                  reference_table is not None, train.seed)
    query_words = cfg.train.get("warmup_query_words", 24)
    for i in curriculum.first_call:  # these rollouts start after the cheap call
        train_items[i] = with_first_turn(train_items[i], reference_table.cheap, query_words)
    if cfg.eval.get("first_call_written", False):  # the policy scored as a cascade's second stage
        if reference_table is None:
            raise ValueError("eval.first_call_written=true needs a replay pool (logged replies to write the first "
                             "call from); set it to false")
        test_items = [with_first_turn(it, reference_table.cheap, query_words) for it in test_items]
        print(f"held-out: every question starts after the call to {reference_table.cheap} (eval.first_call_written)")
    if curriculum.first_call:
        print(f"first call written: {len(curriculum.first_call)} of {len(train_items)} training questions start "
              f"after the call to {reference_table.cheap}")
    print(curriculum.describe())
    scoring = held_out_reward(train)  # alpha, cost window, metric, reference: every held-out evaluation's
    metric = scoring["metric"]
    build_train_reward(train, candidates)  # a bad reward or learner config fails here, before any Ray work
    EngineConfig(**engine_config(cfg, train))  # so does a bad engine (train.sync=nccl on a CPU engine)
    cluster = connect(num_cpus=cfg.ray.num_cpus, num_gpus=cfg.ray.num_gpus,
                      include_dashboard=cfg.ray.include_dashboard)
    print(f"ray: {cluster['mode']} cluster at {cluster['address']}")
    if cfg.resume:
        train.resume_from = latest_checkpoint(train.checkpoints)
        print(f"resume: {train.resume_from or 'no checkpoint yet, starting fresh'}")
    env = env_config(cfg, train)
    group = RolloutGroup(cfg.model, engine_config(cfg, train), env, pool_cfg, resources,
                         max_restarts=cfg.rollout.max_restarts)
    print(f"rollout: {len(group)} vLLM worker(s) ready in {group.ready_s:.1f}s")
    report: dict[str, Any] = {"config": to_plain(cfg), "cluster": cluster, "results": {}}
    eval_seed = cfg.eval.seed
    if not train.resume_from and cfg.eval.get("untrained", True):
        base = held_out_rollout(group, test_items, eval_seed, "held-out, untrained", train.progress)
        report["results"]["policy_untrained"] = held_out_summary(base, candidates, **scoring)
        print("untrained policy:", json.dumps(report["results"]["policy_untrained"]))
    demos = (demonstrations(cfg, train, pool, train_items, env, reference_table, plan.demo_second_call)
             if not (train.resume_from or train.init_from) else [])
    t0 = time.perf_counter()
    with LearnerGroup(train, resources, max_failures=cfg.learner_failures) as learners:
        RouterR1Trainer(train, group, learners, candidates, train_items, demos, eval_items=test_items,
                        curriculum=curriculum).fit()
    result = learners.result
    report["train_s"] = time.perf_counter() - t0
    if getattr(result, "error", None):
        raise RuntimeError(f"training failed: {result.error}")
    trained = held_out_rollout(group, test_items, eval_seed, "held-out, trained", train.progress)
    report["results"]["policy_trained"] = held_out_summary(trained, candidates, **scoring)
    print("trained policy:  ", json.dumps(report["results"]["policy_trained"]))
    write_jsonl(out / "held_out.jsonl", held_out_records(trained, candidates, **scoring))
    test_table = route_table(pool, test_items, metric)
    board = scoreboard(test_table, reference_table or test_table, scoring["alpha"],
                       trajs=trained, seed=eval_seed, metric=metric)
    board["reference"] = "training questions" if reference_table is not None else "held-out questions (live pool)"
    if reference_table is None:  # the policy's row on the board's scale too, not on its own window's
        report["results"]["policy_trained"].update(
            {k: board["routes"]["policy"][k] for k in ("mean_reward", "strong_share", "strong_share_by_task",
                                                       "mean_reward_by_task")})
    report["routing"] = board
    report["results"].update({k: v for k, v in board["routes"].items() if k != "policy"})
    print("routing:", json.dumps({k: board[k] for k in ("best_fixed", "per_task", "policy_minus_best_fixed")}))
    metrics_file = out / "metrics.jsonl"
    metrics = [row for _, row in read_jsonl(metrics_file)] if metrics_file.exists() else []
    report["steps"] = metrics
    report["checkpoint"] = latest_checkpoint(train.checkpoints)
    report["samples"] = [{"query": t.item["query"][:200], "text": t.text[:1200], "answer": t.answer,
                          "routes": [asdict(r) for r in t.routes]} for t in trained[:4]]
    report["held_out_curve"] = [{k: v for k, v in m.items() if k == "step" or k.startswith("eval/")}
                                for m in metrics if "eval/format_valid" in m]
    train_rows = [m for m in metrics if "reward/total" in m]
    report["plots"] = plot_run(train_rows, report["results"], out)
    held = plot_held_out(metrics, out, {k: v for k, v in report["results"].items()
                                        if k.startswith("always_") or k == "per_task_rule"})
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
