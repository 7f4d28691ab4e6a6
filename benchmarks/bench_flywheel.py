"""The flywheel, end to end: a router retrained on the Serve app's own traffic, released by canary, round
after round, through the real app (Ray Serve, HTTP) with RouterBench's 11 LLMs as replay candidates.

    .venv/bin/python benchmarks/bench_flywheel.py [--rounds 4] [--explore 0.3] [--canary 0.5] [--cost-weight 0.1]
    # -> benchmarks/results/flywheel.json, flywheel.png

What runs:

1. **The start** (``--start``), served as ``router-flow`` version 1:
   - ``always:<model>`` (default ``always:gpt-4``): the status quo of a team that sends everything to its
     strongest model; no labelled data (``--seed-per-task 0``);
   - ``knn``: a team that labelled a few prompts with every model's outcome (``--seed-per-task`` questions a
     task from RouterBench's *train* tables); ``jobs/train_router.py``'s code trains a ``traffic_knn`` router
     on them. The seed stays in every retrain.
2. **Rounds.** RouterBench's *test* questions, shuffled and cut into ``--rounds`` rounds, are sent as chat
   completions to ``router-flow``. The client knows each logged outcome, so it gives the app's
   ``/feedback`` the outcome of the model that answered (``win`` when it was right, ``loss`` when not). The
   app logs every request, feedback and exploration call (``serving.traffic``, ``explore_share``).
3. **After each round but the last:** the log is exported (``write_export``: train and test split by time),
   a new version (``traffic_knn``) is trained on the export's train split (and the seed, if any), its off-policy estimate (IPS,
   SNIPS, DR) is read on the export's test split, and it is loaded into the running app as the next version
   with a canary share (``POST /v1/routers/flow/versions``). The app's release rule decides on live
   feedback during the next round: promote when the interval of (new - current) lies above 0, roll back
   when below, or when ``max_feedback`` rewards a version leave it undecided. A canary the round ends
   before the rule decided is rolled back by the client, which says so.

Reward (the app's release rule, the router's objective and this report alike): correct - cost_weight x
cost in thousandths of a dollar (RouterBench's price weight; its logged cost of each call).

Reported per round: the loop's live reward and cost (every request, canary included), and on the same
questions the start router's and the best single model's (chosen on RouterBench's train tables), both
read from the logged outcomes. The target: on the last round, the router the loop promoted last beats the
start router (paired bootstrap over the round's questions, both routers' routes read from the logs), with an
interval above 0; and each canary's measured reward lies where the off-policy estimate made before it said.
"""

from __future__ import annotations

import argparse
import os
import socket
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from rlrouter.provenance import write_result  # noqa: E402

# what this benchmark's figures depend on (rlrouter.provenance: the staleness report lists its results when these change)
MEASURES = ("benchmarks/bench_flywheel.py", "serve", "rlrouter/serving", "rlrouter/selector",
            "rlrouter/storage.py", "rlrouter/eval", "rlrouter/pool")

RESULTS = ROOT / "benchmarks" / "results"
LEDGER = RESULTS / "test_ledger.jsonl"
DATA = ROOT.parent / "shared" / "data" / "routerbench"
TASKS = ("arc_challenge", "mbpp", "winograde")
USER, OPS = "k-team", "k-ops"
ROUTER = "flow"


def test_sources() -> list[str]:
    """The test tables as the ledger names them (the pool evaluation's key for the same files)."""
    return [f"../shared/data/routerbench/{t}_test.csv" for t in TASKS]


def load_tables(split: str) -> dict[str, Any]:
    """RouterBench's tables of one split as arrays keyed by the logged model names: questions, their ids (as
    the ledger keys them), scores, costs, task."""
    from rlrouter.data.routerbench import read_routerbench_table, routerbench_id

    tabs = [read_routerbench_table(DATA / f"{t}_{split}.csv", blank_scores="drop", repeated_ids="drop") for t in TASKS]
    names = list(tabs[0].candidates)
    return {"names": names, "questions": [q for t in tabs for q in t.questions()],
            "ids": [routerbench_id(i) for t in tabs for i in t.ids],
            "scores": np.concatenate([t.scores[:, [t.candidates.index(n) for n in names]] for t in tabs]),
            "costs": np.concatenate([t.costs[:, [t.candidates.index(n) for n in names]] for t in tabs]),
            "task": [s for t, name in zip(tabs, TASKS) for s in [name] * len(t.prompts)]}


def pool_names() -> dict[str, str]:
    """Pool candidate -> the logged model it replays (conf/pool/routerbench_replay.yaml)."""
    from rlrouter.pool import read_pool_config

    cfg = read_pool_config(ROOT / "conf" / "pool" / "routerbench_replay.yaml", ROOT)
    return {c["name"]: (c.get("options") or {}).get("model", c["name"]) for c in cfg["candidates"]}


def write_seed(train: dict[str, Any], per_task: int, seed: int, to_pool: dict[str, str], path: Path) -> list[int]:
    """``per_task`` questions a task of the train tables, every model's outcome, in the export's layout."""
    import pandas as pd

    rng = np.random.default_rng(seed)
    task = np.array(train["task"])
    rows = sorted(int(i) for t in TASKS for i in rng.choice(np.flatnonzero(task == t), per_task, replace=False))
    records = []
    for i in rows:
        rec: dict[str, Any] = {"sample_id": f"seed-{i}", "prompt": train["questions"][i], "eval_name": train["task"][i]}
        for pool_name, logged in to_pool.items():
            j = train["names"].index(logged)
            rec[pool_name], rec[f"{pool_name}|total_cost"] = float(train["scores"][i, j]), float(train["costs"][i, j])
        records.append(rec)
    pd.DataFrame(records).to_parquet(path, index=False)
    return rows


def save_always(model: str, names: list[str], out: Path) -> None:
    """The status-quo router: every request to ``model`` (a router folder the app serves like any other)."""
    from rlrouter.routers.baselines import FixedRouter
    from rlrouter.routers.saved import save_router
    from rlrouter.pool.base import Candidate

    if model not in names:
        raise ValueError(f"--start always:{model}: not a pool candidate ({names})")
    save_router(FixedRouter("always", names.index(model)), out, type_name="always", spec={"candidate": model},
                candidates=[Candidate(n, 0.0, 0.0) for n in names], weak=0, strong=names.index(model),
                train={"rows": "none: the status quo"})


def train_version(logs: list[Path], out: Path, cost_weight: float, setting: dict[str, Any]) -> None:
    from rlrouter.eval.train_router import run

    run({"logs": [str(p) for p in logs], "router": {"type": "traffic_knn", "cost_weight": cost_weight, **setting},
         "output_dir": str(out), "seed": 0})


GRID = {"k": [10, 40], "prior": [1.0, 10.0], "pessimism": [0.0, 1.0, 2.0]}
"""traffic_knn's settings the loop may use, chosen on RouterBench's train tables (``choose_settings``)."""


def simulate_loop(train: dict[str, Any], cols: list[int], pool_order: list[str], embed: Any, setting: dict[str, Any],
                  args: argparse.Namespace, seed: int) -> float:
    """The loop without the app, on the train tables: the same start, exploration draw (the app's own
    ``TrafficLog.explore_target``), canary split and release rule (``Release``), rounds and time split; returns
    the reward of the router current at the end, on the last round's questions."""
    from rlrouter.routers.traffic_router import TrafficKNNRouter, TrafficTable, reward_of
    from rlrouter.serving.release import CANARY, Release, ReleaseRule
    from rlrouter.serving.traffic import TrafficConfig, TrafficLog

    lam = args.cost_weight
    scores, costs = train["scores"][:, cols], train["costs"][:, cols]
    rewards = reward_of(scores, costs, lam)
    qs = train["questions"]
    rng = np.random.default_rng(seed)
    rounds = np.array_split(rng.permutation(len(qs)), args.rounds)
    with tempfile.TemporaryDirectory() as d:
        log = TrafficLog(TrafficConfig(enabled=True, path=d, explore_share=args.explore, explore_seed=seed))
    m = len(pool_order)
    start = pool_order.index(args.start.split(":", 1)[1]) if args.start.startswith("always:") else None

    def route(router: Any, idx: np.ndarray) -> np.ndarray:
        return np.full(len(idx), start) if router is None else router.decide([qs[i] for i in idx])

    current, rel, candidate = None, None, None
    seen_s, seen_c, rows = [], [], []
    rule = ReleaseRule(canary_share=args.canary, min_feedback=args.min_feedback, max_feedback=args.max_feedback,
                       cost_weight=lam)
    for k, idx in enumerate(rounds):
        routes_cur = route(current, idx)
        routes_can = route(candidate, idx) if rel is not None else routes_cur
        for n, i in enumerate(idx):
            use_canary = rel is not None and rel.state == CANARY and rng.random() < rule.canary_share
            a = int(routes_can[n] if use_canary else routes_cur[n])
            s_row, c_row = np.full(m, np.nan), np.full(m, np.nan)
            s_row[a], c_row[a] = scores[i, a], costs[i, a]
            log.replies[pool_order[a]] = log.replies.get(pool_order[a], 0) + 1
            drawn = log.explore_target(pool_order[a], pool_order)
            if drawn is not None:
                e = pool_order.index(drawn[0])
                s_row[e], c_row[e] = scores[i, e], costs[i, e]
                log.replies[drawn[0]] = log.replies.get(drawn[0], 0) + 1
            seen_s.append(s_row)
            seen_c.append(c_row)
            rows.append(i)
            if rel is not None and rel.state == CANARY:
                rel.record("2" if use_canary else "1", float(rewards[i, a]))
                verdict = rel.verdict()
                if verdict is not None:
                    rel.end(verdict[0], verdict[1])
                    if verdict[0] == "promote":
                        current = candidate
                    routes_cur = route(current, idx)
        rel = None
        if k == len(rounds) - 1:
            break
        cut = len(rows) - int(round(args.test_share * len(rows)))
        n_rows = cut
        table = TrafficTable(pool_order, [qs[i] for i in rows[:n_rows]], [None] * n_rows, np.array(seen_s[:n_rows]),
                             np.array(seen_c[:n_rows]), np.full(n_rows, -1), np.full(n_rows, np.nan),
                             np.full(n_rows, -1), np.full(n_rows, np.nan))
        candidate = TrafficKNNRouter("flow", pool_order, embed, cost_weight=lam, **setting)
        candidate.fit_logged(table)
        rel = Release("flow", "1", "2", rule)
    last = rounds[-1]
    final = route(current, last)
    return float(rewards[last, final].mean())


def choose_settings(train: dict[str, Any], cols: list[int], pool_order: list[str], args: argparse.Namespace) -> dict:
    """Each setting of ``GRID`` runs the loop on the train tables with three shuffles; the best mean final
    reward wins. The test tables are not read."""
    import itertools

    from rlrouter.routers.saved import embedder

    base = embedder({"model": "minilm-l6"}, cache=True)
    vecs = dict(zip(train["questions"], np.asarray(base(list(train["questions"])))))

    def embed(texts: list[str]) -> np.ndarray:
        missing = [t for t in texts if t not in vecs]
        if missing:
            vecs.update(zip(missing, np.asarray(base(missing))))
        return np.stack([vecs[t] for t in texts])

    table = []
    for values in itertools.product(*GRID.values()):
        setting = dict(zip(GRID, values))
        finals = [simulate_loop(train, cols, pool_order, embed, setting, args, seed) for seed in (1, 2, 3)]
        table.append({**setting, "final_rewards": finals, "mean": float(np.mean(finals))})
        print(f"[flywheel] on train: {setting} -> final reward {np.mean(finals):.3f} {np.round(finals, 3).tolist()}",
              flush=True)
    best = max(table, key=lambda r: r["mean"])
    return {"chosen": {k: best[k] for k in GRID}, "grid": table,
            "how": "the loop simulated on RouterBench's train tables (the app's exploration draw and release rule, "
                   "no HTTP), three shuffles a setting; the best mean final-round reward"}


def routes_of(folder: Path, questions: list[str], pool_order: list[str]) -> np.ndarray:
    """A saved router's route on each question, as an index into ``pool_order``."""
    from rlrouter.routers.saved import load_router

    saved = load_router(folder)
    names = saved.manifest.candidate_names
    idx = np.asarray(saved.router.decide(list(questions)))
    return np.array([pool_order.index(names[i]) for i in idx])


def start_app(tmp: Path, start_router: Path, explore: float, release: dict[str, Any]) -> tuple[str, Any]:
    """Ray (in this process) + Serve + the app, with router-flow version 1; returns the base URL."""
    import importlib

    import httpx
    import ray
    from ray import serve

    from rlrouter.pool import read_pool_config

    app_mod = importlib.import_module("serve.app")  # the app's module, as the other Serve benchmarks load it
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False,
             runtime_env={"env_vars": {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "PYTHONPATH": str(ROOT)}})
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    serve.start(http_options={"host": "127.0.0.1", "port": port})
    keys = [{"key": USER, "user_id": "team"}, {"key": OPS, "user_id": "ops", "admin": True}]
    args = {"pool": read_pool_config(ROOT / "conf" / "pool" / "routerbench_replay.yaml", ROOT),
            "selector": {"storage_path": str(tmp / "selector.json"), "seed": 0},
            "serving": {"api_keys": keys, "dev": True, "release": release,
                        "traffic": {"enabled": True, "path": str(tmp / "traffic"), "explore_share": explore,
                                    "explore_seed": 0}},
            "routers": {ROUTER: {"path": str(start_router), "version": "1"}}}
    serve.run(app_mod.build_app(args), name="flywheel", route_prefix="/", blocking=False)
    url = f"http://127.0.0.1:{port}"
    deadline = time.time() + 300
    while time.time() < deadline:
        try:
            if httpx.get(f"{url}/health", timeout=5).json().get("selector") == "ok":
                return url, serve
        except (httpx.HTTPError, ValueError):
            pass
        time.sleep(0.5)
    raise RuntimeError("the app did not come up in 300 s")


def ask(client: Any, url: str, question: str) -> dict[str, Any]:
    r = client.post(f"{url}/v1/chat/completions", headers={"Authorization": f"Bearer {USER}"},
                    json={"model": f"router-{ROUTER}", "messages": [{"role": "user", "content": question}]})
    r.raise_for_status()
    body = r.json()
    meta = body["x_rlrouter"]
    return {"model": body["model"], "request_id": meta["request_id"], "version": meta["router"]["version"]}


def feedback(client: Any, url: str, request_id: str, correct: bool) -> dict[str, Any]:
    r = client.post(f"{url}/feedback", headers={"Authorization": f"Bearer {USER}"},
                    json={"request_id": request_id, "outcome": "win" if correct else "loss"})
    r.raise_for_status()
    return r.json()


def wait_explorations(folder: Path, expected_at_least: int, timeout_s: float = 60.0) -> int:
    """Exploration calls run after the answers: wait until the log stops growing."""
    from rlrouter.serving.traffic import read_traffic

    last, stable, deadline = -1, 0, time.time() + timeout_s
    while time.time() < deadline:
        n = sum(len(r["explore"]) for r in read_traffic(folder).requests)
        stable = stable + 1 if n == last else 0
        if stable >= 3 and n >= expected_at_least:
            return n
        last = n
        time.sleep(0.5)
    return last


def run(args: argparse.Namespace) -> dict[str, Any]:
    import httpx

    from rlrouter.eval.route_scores import paired_diff
    from rlrouter.eval.ope import off_policy
    from rlrouter.routers.traffic_router import TrafficTable, read_logged_table, reward_of
    from rlrouter.routers.saved import load_router
    from rlrouter.serving.traffic import read_traffic
    from rlrouter.serving.traffic_export import write_export

    t0 = time.time()
    lam = args.cost_weight
    to_logged = pool_names()
    pool_order = list(to_logged)
    train, test = load_tables("train"), load_tables("test")
    cols = [test["names"].index(to_logged[p]) for p in pool_order]
    t_scores, t_costs = test["scores"][:, cols], test["costs"][:, cols]  # (N, 11) in pool order
    t_reward = reward_of(t_scores, t_costs, lam)
    tr_cols = [train["names"].index(to_logged[p]) for p in pool_order]
    best_single = int(reward_of(train["scores"][:, tr_cols], train["costs"][:, tr_cols], lam).mean(axis=0).argmax())

    if args.choose and not args.start.startswith("always:"):
        raise SystemExit("--choose simulates a start of always:<model>; give --no-choose --k K with --start knn")
    chosen = choose_settings(train, tr_cols, pool_order, args) if args.choose else None
    setting = chosen["chosen"] if chosen else {"k": args.k, "prior": 1.0, "pessimism": 0.0}
    print(f"[flywheel] traffic_knn settings: {setting}", flush=True)
    order = np.random.default_rng(args.seed).permutation(len(test["questions"]))
    if args.questions:
        order = order[: args.questions]
    rounds = np.array_split(order, args.rounds)
    out_dir = Path(args.out)
    work = Path(tempfile.mkdtemp(prefix="flywheel-"))
    routers = work / "routers"
    seed_file = work / "seed.parquet"
    seed_rows = write_seed(train, args.seed_per_task, args.seed, to_logged, seed_file) if args.seed_per_task else []
    seeds = [seed_file] if seed_rows else []
    if args.start == "knn":
        if not seeds:
            raise SystemExit("--start knn learns from the seed: give --seed-per-task > 0")
        train_version(seeds, routers / "v1", lam, setting)
    elif args.start.startswith("always:"):
        save_always(args.start.split(":", 1)[1], pool_order, routers / "v1")
    else:
        raise SystemExit(f"--start: always:<model> or knn, got '{args.start}'")
    release = {"canary_share": args.canary, "min_feedback": args.min_feedback, "max_feedback": args.max_feedback,
               "min_gain": 0.0, "level": 0.95, "cost_weight": lam, "auto": True}
    url, serve = start_app(work, routers / "v1", args.explore, release)
    print(f"[flywheel] app up at {url} after {time.time() - t0:.0f}s; start {args.start}; {len(order)} test "
          f"questions in {args.rounds} rounds; seed {len(seed_rows)} labelled questions", flush=True)

    start_routes = routes_of(routers / "v1", test["questions"], pool_order)
    per_round, releases, versions, current = [], [], ["1"], "1"
    client = httpx.Client(timeout=120)
    try:
        for k, rows in enumerate(rounds):
            tr = time.time()

            def one(i: int) -> dict[str, Any]:
                a = ask(client, url, test["questions"][i])
                j = pool_order.index(a["model"])
                fb = feedback(client, url, a["request_id"], bool(t_scores[i, j] >= 0.5))
                return {"row": int(i), "model": a["model"], "version": a["version"], "reward": float(t_reward[i, j]),
                        "cost": float(t_costs[i, j]), "event": (fb.get("router") or {}).get("event")}

            with ThreadPoolExecutor(args.concurrency) as ex:
                done = list(ex.map(one, rows))
            rel_status = client.get(f"{url}/v1/routers", headers={"Authorization": f"Bearer {USER}"}).json()
            flow = rel_status["routers"][ROUTER]
            if flow["release"] is not None:  # the round ended before the rule decided
                r = client.post(f"{url}/v1/routers/{ROUTER}/rollback", headers={"Authorization": f"Bearer {OPS}"},
                                json={"reason": "the round ended before the rule decided"})
                r.raise_for_status()
                flow = client.get(f"{url}/v1/routers", headers={"Authorization": f"Bearer {USER}"}).json()["routers"][ROUTER]
            if releases:  # the canary of the version loaded after the previous round: what it measured
                ended = next(e for e in flow["ended"] if e["candidate"] == releases[-1]["version"])
                can = ended["versions"][ended["candidate"]]
                releases[-1].update(state=ended["state"], reason=ended["reason"], canary=can,
                                    current_measured=ended["versions"][ended["current"]],
                                    difference=ended["difference"], late_feedback=ended["late_feedback"],
                                    feedback_without_cost=ended["feedback_without_cost"])
                dr = releases[-1]["off_policy"]["dr"]["value"]
                releases[-1]["dr_within_canary_interval"] = bool(can["lo"] is not None and can["lo"] <= dr <= can["hi"])
                releases[-1]["canary_mean_within_dr_interval"] = bool(
                    releases[-1]["off_policy"]["dr"]["lo"] <= can["mean"] <= releases[-1]["off_policy"]["dr"]["hi"])
            current = flow["current"]
            idx = np.array([d["row"] for d in done])
            rec = {"round": k + 1, "questions": len(done), "seconds": round(time.time() - tr, 1),
                   "current_at_end": current,
                   "loop": {"reward": float(np.mean([d["reward"] for d in done])),
                            "cost_usd": float(np.mean([d["cost"] for d in done])),
                            "by_version": {v: sum(d["version"] == v for d in done) for v in sorted({d["version"] for d in done})}},
                   "start": {"reward": float(t_reward[idx, start_routes[idx]].mean()),
                             "cost_usd": float(t_costs[idx, start_routes[idx]].mean())},
                   "best_single": {"model": pool_order[best_single], "reward": float(t_reward[idx, best_single].mean()),
                                   "cost_usd": float(t_costs[idx, best_single].mean())}}
            per_round.append(rec)
            print(f"[flywheel] round {k + 1}: loop {rec['loop']['reward']:.3f} (versions {rec['loop']['by_version']}), "
                  f"start {rec['start']['reward']:.3f}, {pool_order[best_single]} {rec['best_single']['reward']:.3f}; "
                  f"current '{current}' ({rec['seconds']}s)", flush=True)
            if k == len(rounds) - 1:
                break
            n_explore = wait_explorations(work / "traffic", 1 if args.explore else 0)
            export = work / f"export_{k + 1}"
            report = write_export(read_traffic(work / "traffic"), export, test_share=args.test_share,
                                  candidates=pool_order)
            version = str(k + 2)
            folder = routers / f"v{version}"
            train_version([*seeds, export / "train.parquet"], folder, lam, setting)
            ope = off_policy(load_router(folder).router, read_logged_table(export / "test.parquet", pool_order))
            r = client.post(f"{url}/v1/routers/{ROUTER}/versions", headers={"Authorization": f"Bearer {OPS}"},
                            json={"version": version, "path": str(folder)})
            if r.status_code != 200:
                raise RuntimeError(f"loading version {version}: {r.status_code} {r.text}")
            versions.append(version)
            releases.append({"version": version, "after_round": k + 1, "trained_on": report["train"] + len(seed_rows),
                             "export": {key: report[key] for key in ("requests", "train", "test",
                                                                    "rows_with_counterfactual_replies",
                                                                    "with_propensity", "skipped_records")},
                             "explore_calls": n_explore, "off_policy": ope})
            print(f"[flywheel] version {version} loaded: trained on {report['train']} logged + {len(seed_rows)} seed; "
                  f"off-policy DR {ope['dr']['value']:.3f} [{ope['dr']['lo']:.3f}, {ope['dr']['hi']:.3f}] on "
                  f"{ope['rows']} test rows", flush=True)
        # the last round, paired: the router the loop promoted last against the start, on the same questions
        last = rounds[-1]
        final = routes_of(routers / f"v{current}", [test["questions"][i] for i in last], pool_order)
        diff = paired_diff(t_reward[last, final], t_reward[last, start_routes[last]], seed=args.seed)
        metrics = client.get(f"{url}/metrics").text
    finally:
        client.close()
        serve.delete("flywheel")
        import ray

        ray.shutdown()
    result = {
        "command": "benchmarks/bench_flywheel.py " + " ".join(sys.argv[1:]),
        "date": time.strftime("%Y-%m-%d"), "seconds": round(time.time() - t0, 1),
        "setup": {"candidates": pool_order, "cost_weight": lam, "reward": "correct - cost_weight x 1000 x cost_usd",
                  "rounds": args.rounds, "test_questions": len(order), "all_test_questions": not args.questions, "seed_questions": len(seed_rows),
                  "start": args.start,
                  "explore_share": args.explore, "canary_share": args.canary, "release_rule": release,
                  "router": {"type": "traffic_knn", **setting}, "settings_chosen_on_train": chosen,
                  "export_test_share": args.test_share,
                  "best_single_on_train": pool_order[best_single]},
        "rounds": per_round, "releases": releases, "final_version": current,
        "promoted_minus_start": {"mean": diff.value, "lo": diff.lo, "hi": diff.hi, "round": args.rounds,
                                 "questions": len(last)},
        "metrics_lines": [ln for ln in metrics.splitlines()
                          if ln.startswith(("rlrouter_router_", "rlrouter_traffic_")) and "_created{" not in ln],
    }
    if args.ledger:  # this run read these test questions: the ledger says so, and how often they were read before
        from rlrouter.eval.ledger import readings_of, record_reading

        ids = [test["ids"][i] for i in order]
        before = readings_of(args.ledger, ids)
        result["ledger"] = {"path": str(args.ledger), "test_key": before["test_key"], "questions": before["questions"],
                            "readings_before": {"same_questions": len(before["same"]),
                                                "any_of_them": len(before["overlapping"])}}
        record_reading(args.ledger, question_ids=ids, test_sources=test_sources(), command=result["command"],
                       router_types=["traffic_knn", "always"], promoted_minus_start=result["promoted_minus_start"])
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    write_result(Path(f"{out_dir}.json"), result, MEASURES, indent=1)
    plot(result, Path(f"{out_dir}.png"))
    print(f"[flywheel] promoted - start on round {args.rounds}: {diff.value:+.3f} [{diff.lo:+.3f}, {diff.hi:+.3f}]; "
          f"-> {out_dir}.json, .png ({result['seconds']:.0f}s)", flush=True)
    return result


def plot(result: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rounds = [r["round"] for r in result["rounds"]]
    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    for ax, key, label in ((axes[0], "reward", "mean reward (correct - cost weight x cost)"),
                           (axes[1], "cost_usd", "mean cost per request, USD")):
        for who, style, name in (("loop", "o-", "the loop (live, canary included)"), ("start", "s--", "start router"),
                                 ("best_single", "^:", f"best single model ({result['setup']['best_single_on_train']})")):
            ax.plot(rounds, [r[who][key] for r in result["rounds"]], style, label=name)
        for rel in result["releases"]:
            if rel.get("state") == "promoted":
                ax.axvline(rel["after_round"] + 0.5, color="green", alpha=0.3)
            elif rel.get("state") == "rolled_back":
                ax.axvline(rel["after_round"] + 0.5, color="red", alpha=0.3, linestyle="--")
        ax.set_xlabel("round (green: a version promoted during the next round; red: rolled back)")
        ax.set_ylabel(label)
        ax.set_xticks(rounds)
    axes[0].legend(fontsize=8)
    d = result["promoted_minus_start"]
    fig.suptitle(f"Router retrained on its own traffic (RouterBench, 11 LLMs; start {result['setup']['start']}): "
                 f"last round promoted - start "
                 f"{d['mean']:+.3f} [{d['lo']:+.3f}, {d['hi']:+.3f}]", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rounds", type=int, default=4)
    p.add_argument("--start", default="always:gpt-4", help="always:<pool candidate> or knn (on the seed)")
    p.add_argument("--seed-per-task", type=int, default=0, help="labelled questions a task (train tables) the start "
                                                                "and every retrain learn from; 0: none")
    p.add_argument("--explore", type=float, default=0.3, help="serving.traffic.explore_share")
    p.add_argument("--canary", type=float, default=0.5, help="release.canary_share")
    p.add_argument("--min-feedback", type=int, default=50)
    p.add_argument("--max-feedback", type=int, default=100)
    p.add_argument("--cost-weight", type=float, default=0.1, help="per thousandth of a dollar")
    p.add_argument("--k", type=int, default=20, help="traffic_knn's neighbours (without --choose)")
    p.add_argument("--choose", action=argparse.BooleanOptionalAction, default=True,
                   help="choose traffic_knn's settings (GRID) by the loop simulated on the train tables")
    p.add_argument("--test-share", type=float, default=0.2, help="each export's latest share, for the estimate")
    p.add_argument("--concurrency", type=int, default=4)
    p.add_argument("--questions", type=int, default=0, help="only this many test questions (a smoke run); 0: all")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default=str(RESULTS / "flywheel"))
    p.add_argument("--ledger", default=str(LEDGER), help="the test ledger this run's reading is appended to ('' : none)")
    args = p.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    run(args)


if __name__ == "__main__":
    main()
