"""Render the docs' figure tables from the results that hold them (``make docs``).

Each table below sits in its doc between ``<!-- begin NAME ... -->`` / ``<!-- end NAME -->`` markers and is
written here from its JSON under ``benchmarks/results/``. After a benchmark re-runs, ``make docs`` rewrites
every table; ``tests/test_doc_figures.py`` fails while a doc's table differs from what its JSON renders, and
pins the figures quoted in prose one by one.

    python tools/render_docs.py            # rewrite every table
    python tools/render_docs.py --check    # exit 1 and name each table that differs
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
sys.path.insert(0, str(ROOT))


@dataclass(frozen=True)
class Table:
    doc: str
    """The doc, relative to the project root."""
    name: str
    """Its markers' name."""
    results: tuple[str, ...]
    """The files under benchmarks/results/ it is rendered from."""
    render: Callable[..., str]
    """The files' parsed JSON (or, for ``paths=True``, their paths) -> the table."""
    paths: bool = False

    def body(self) -> str:
        files = [ROOT / r if "/" in r else RESULTS / r for r in self.results]  # a study's own: a path from the root
        table = self.render(*(files if self.paths else [json.loads(f.read_text()) for f in files]))
        return table if self.paths else f"{table}\n\n{measured_caption(self.results)}"


def measured_caption(results: tuple[str, ...]) -> str:
    """When the table was true: each result's date and commit (``rlrouter.provenance``), rendered under it."""
    parts = []
    for name in results:
        block = json.loads((RESULTS / name).read_text()).get("provenance") or {}
        parts.append(f"`{name}`: measured {block.get('date', '(no date)')} at commit {block.get('commit', '(none)')}")
    return "<sub>" + "; ".join(parts) + " (`python tools/staleness.py` says whether its code changed since)</sub>"


# -- docs quoting figures read on RouterBench's test tables: how often those questions were read -------------

ROUTERBENCH_TEST_KEY = "03a2df2cd4f7dad8"
"""The ledger key of RouterBench's 945 ``*_test`` questions as the pool evaluation reads them (eval=routerbench)."""


def test_readings(ledger: Path, key: str = ROUTERBENCH_TEST_KEY) -> str:
    """One line: how many readings in the ledger (``rlrouter.eval.ledger``) read any of the test set ``key``."""
    recs = [json.loads(line) for line in ledger.read_text().splitlines() if line.strip()]
    full = next(r for r in recs if r.get("test_key") == key)
    mine = set(full["question_digests"])
    over = [r for r in recs if mine & set(r.get("question_digests") or [])]
    same = [r for r in over if r.get("test_key") == key]
    looks = sum(int(r.get("evaluations") or 1) for r in over)
    dates = sorted(str(r["date"])[:10] for r in over)
    return (f"<sub>Readings of RouterBench's {len(mine)} test questions in the ledger (`test_ledger.jsonl`): "
            f"{len(over)} ({len(same)} of all of them, {len(over) - len(same)} of a subset), {looks} looks counting "
            f"each held-out evaluation of a training run, from {dates[0]} to {dates[-1]}.</sub>")


# -- README.md: when each headline figure was measured (the provenance of every result the README quotes) -------

README_RESULTS = ("durability.json", "fresh_clone.json", "make_run.json", "many_models.json", "rl_bandit.json",
                  "rl_throughput.json", "selector.json")
"""Every result the README's figures read (``tools/staleness.py`` readme_results; a test keeps them equal)."""


def readme_dates(*paths: Path) -> str:
    """One line under the headline table: the span of dates its figures were measured on, and where each is."""
    dates = sorted(str((json.loads(p.read_text()).get("provenance") or {}).get("date", "")) for p in paths)
    return (f"Measured between {dates[0]} and {dates[-1]}; each figure's date, commit and command, and whether "
            f"its code changed since: [benchmarks.md](docs/benchmarks.md#when-each-result-was-true-toolsstalenesspy) "
            f"(`python tools/staleness.py`; `make test` prints it at its end).")


def readme_measured_table(*paths: Path) -> str:
    lines = ["| result | measured | commit | command |", "|---|---|---|---|"]
    for path in paths:
        block = json.loads(path.read_text()).get("provenance") or {}
        cmd = str(block.get("command", "")).replace("|", "\\|")
        lines.append(f"| `{path.name}` | {block.get('date', '')} | {block.get('commit', '')} | `{cmd}` |")
    return "\n".join(lines)


def calls_per_task(by_task: dict[str, dict[str, float]], colon: bool = True) -> str:
    """Each task's called candidates with their shares (at least 0.01), most called first."""
    return "; ".join(f"{t}{':' if colon else ''} " + ", ".join(
        f"{c} {v:.2f}" for c, v in sorted(sh.items(), key=lambda kv: -kv[1]) if v >= 0.01) for t, sh in sorted(by_task.items()))


def interval(d: dict[str, float], mean: str = "value") -> str:
    """A paired interval as the docs write it: ``+0.077 [+0.042, +0.114]``."""
    return f"{d[mean]:+.3f} [{d['lo']:+.3f}, {d['hi']:+.3f}]"


# -- README.md: make run's table (make_run.json: a copy of the make run's report.json) ---------------------------

def make_run_table(report: dict[str, Any]) -> str:
    """make run's report in brief: the policy before and after RL (greedy and sampled) beside the per-task rule,
    the best fixed route on the training questions, the best and the cheapest fixed route on the held-out
    questions and the oracle; the paired intervals; the calls per task."""
    res, routing = report["results"], report["routing"]
    curve = report.get("held_out_curve") or []
    scored_on = "dev" if report.get("dev") else "held-out"
    fixed = {k: v for k, v in res.items() if k.startswith("always_")}
    best_here = max(fixed, key=lambda k: fixed[k]["mean_reward"])
    samp = routing.get("policy_sampled")
    rows = [(f"policy after {curve[-1]['step'] if curve else '?'} RL steps, greedy", res["policy_trained"])]
    if samp:
        rows.append((f"the same, sampled ({samp['samples']} routes a question)",
                     {"accuracy": samp["accuracy"], "mean_reward": samp["mean_reward"], "cost_per_query": None}))
    rows.append(("per-task rule (" + ", ".join(f"{t} -> {c}" for t, c in routing["per_task"].items()) + ")",
                 res["per_task_rule"]))
    for name in dict.fromkeys([routing["best_fixed"], best_here, "always_cheapest"]):
        label = name.replace("always_", "always ")
        if name == routing["best_fixed"]:
            label += " (the best fixed route on the training questions)"
        elif name == best_here:
            label += " (the best fixed route on these questions)"
        rows.append((label, res[name]))
    rows.append(("oracle (each question's cheapest correct candidate)", res["oracle"]))
    lines = ["| route (held-out questions) | accuracy | mean reward | cost / query (USD) |", "|---|---|---|---|"]
    for label, r in rows:
        cost = "-" if r.get("cost_per_query") is None else f"{r['cost_per_query']:.5f}"
        lines.append(f"| {label} | {r['accuracy']:.3f} | {r['mean_reward']:.3f} | {cost} |")
    d, t = routing["policy_minus_best_fixed"], routing["policy_minus_per_task_rule"]
    n = routing["routes"]["policy"]["n"]
    levels = [f"untrained {res['policy_untrained']['mean_reward']:.3f}"] + [
        (f"cold start {c['eval/mean_reward']:.3f}" if c["step"] == 0 else f"RL step {c['step']} {c['eval/mean_reward']:.3f}")
        for c in curve]
    lines += ["", f"Alpha {routing['alpha']:g}, {n} held-out questions. Mean reward on the {scored_on} curve"
              + (f" ({report['dev']['questions']} training questions kept out of training)" if report.get("dev") else "")
              + ": " + ", ".join(levels) + f". Policy minus best fixed route {interval(d)}, minus per-task rule {interval(t)}"
              + (f"; sampled: {interval(samp['minus_best_fixed'])} and {interval(samp['minus_per_task_rule'])}" if samp else "")
              + f" (paired bootstrap, 95%). Wall time {report['wall_s']:,.0f} s."]
    by_task = routing["routes"]["policy"].get("route_share_by_task") or {}
    lines += ["", "The trained policy's calls per task, greedy: " + calls_per_task(by_task, colon=False) + "."]
    return "\n".join(lines)


# -- docs/benchmarks.md: the selector's regret and /route latency (selector.json) -----------------------------

REGRET_ROWS = {"0.0": "0 (correctness only)", "0.1": "0.1", "0.3": "0.3 (the default `cost_reward_alpha`)"}
REGRET_COLUMNS = {"thompson": "Thompson", "epsilon_greedy": "ε-greedy", "contextual": "contextual (defaults)",
                  "best_fixed": "best fixed", "random": "random"}


def regret_table(selector: dict[str, Any]) -> str:
    """Cumulative regret per reward alpha (mean of the shuffles), the lowest of the routers in bold."""
    lines = ["| reward α | " + " | ".join(REGRET_COLUMNS.values()) + " |", "|---" * (len(REGRET_COLUMNS) + 1) + "|"]
    for alpha, label in REGRET_ROWS.items():
        r = selector["regret"]["alphas"][alpha]
        means = {k: r[k]["final_regret_mean"] for k in REGRET_COLUMNS}
        best = min(("thompson", "epsilon_greedy", "contextual"), key=lambda k: means[k])
        cells = [f"**{means[k]:.0f}**" if k == best else f"{means[k]:.0f}" for k in REGRET_COLUMNS]
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


LATENCY_ROWS = {
    "two_hop": "`two_hop`, before: Serve proxy → `Ingress` replica → selector replica",
    "one_hop": "`one_hop`: the selector replica is the ingress (`serving.selector_in_ingress`)",
    "one_hop_no_access_log": "`one_hop_no_access_log`: the same, no Serve access log",
    "direct_two_hop": "`direct_two_hop`: direct ingress, still two replicas",
    "direct": "`direct`: direct ingress into the selector replica",
    "direct_main_loop_access_log": "`direct_main_loop_access_log`: and user code on the replica's main event loop",
    "throughput_optimized": "`throughput_optimized`: Ray's `RAY_SERVE_THROUGHPUT_OPTIMIZED=1` bundle instead",
    "direct_main_loop": "**`direct_main_loop`**: direct ingress, selector as ingress, main loop, no access log (final)",
}


def ms(v: float) -> str:
    """A latency in milliseconds: one decimal under 100, whole (with thousands separators) above."""
    return f"{v:,.0f}" if v >= 100 else f"{v:.1f}"


def latency_table(selector: dict[str, Any]) -> str:
    """p50 / p99 per setup at 20 and 200 requests/s (achieved rate in brackets); the final setup in bold."""
    lines = ["| setup (`LATENCY_SETUPS` in `benchmarks/bench_selector.py`) | 20 req/s | 200 req/s (achieved) |",
             "|---|---|---|"]
    for name, label in LATENCY_ROWS.items():
        slow, fast = (selector["latency"]["setups"][name]["rates"][r] for r in ("20.0", "200.0"))
        a = f"{ms(slow['p50_ms'])} / {ms(slow['p99_ms'])}"
        b = f"{ms(fast['p50_ms'])} / {ms(fast['p99_ms'])} ({fast['achieved_rate_per_s']:.0f})"
        if name == "direct_main_loop":
            a, b = f"**{a}**", f"**{b}**"
        lines.append(f"| {label} | {a} | {b} |")
    return "\n".join(lines)


# -- docs/intent.md: supervised against PPO (intent.json) ------------------------------------------------

INTENT_ROWS = {"supervised": "supervised", "rl": "rl (lr 1e-5, accuracy reward; default)",
               "rl lr=1e-4": "rl lr 1e-4, accuracy", "rl calibration reward": "rl lr 1e-5, calibration reward (Brier)",
               "rl f1 (leave-one-out) lr=1e-4": "rl lr 1e-4, F1 (leave-one-out)"}


def intent_table(intent: dict[str, Any]) -> str:
    lines = ["| adapter | accuracy | macro-F1 | ECE (15 bins) | ms/query (batch 32) | ms (1 query, p50) | n test |",
             "|---|---|---|---|---|---|---|"]
    for key, label in INTENT_ROWS.items():
        r = intent["table"][key]
        lines.append(f"| {label} | {r['accuracy']:.4f} | {r['macro_f1']:.4f} | {r['ece']:.4f} | "
                     f"{r['ms_per_query']:.2f} | {r['single_query_ms_p50']:.2f} | {r['n_test']:.0f} |")
    return "\n".join(lines)


# -- docs/benchmarks.md: GRPO against TRL on steps that learn (router_r1.json, bench_trl_steps.py) ----------

def trl_steps_table(report: dict[str, Any]) -> str:
    """Each timed step of both arms and what it held; the medians of the steps after the warm-up, their ratio."""
    t = report["step_timing"]

    def cell(v: Any, fmt: str) -> str:
        return "-" if v is None else format(v, fmt)

    lines = ["| step | arm | seconds | mean reward | groups with reward spread | completion tokens (mean) | loss | "
             "grad norm |", "|---|---|---|---|---|---|---|---|"]
    for ours, trl in zip(t["ours"]["steps"], t["trl"]["steps"]):
        for name, s in (("ours", ours), ("TRL", trl)):
            lines.append(f"| {s['step']}{' (warm-up)' if s['step'] == 1 else ''} | {name} | {s['seconds']:.1f} | "
                         f"{cell(s['reward_mean'], '.3f')} | {cell(s['groups_with_spread'], '.2f')} | "
                         f"{cell(s['completion_tokens_mean'], '.1f')} | {cell(s['loss'], '.3f')} | "
                         f"{cell(s['grad_norm'], '.3f')} |")
    med = t["step_s_median"]
    lines.append(f"| median of 2-{len(t['ours']['steps'])} | ours / TRL | {med['ours']:.1f} / {med['trl']:.1f} = "
                 f"**{t['ours_over_trl']:.2f}** | | | | | |")
    return "\n".join(lines)


# -- docs/retraining.md: the flywheel, round by round, and its releases (flywheel.json, bench_flywheel.py) -------

def flywheel_table(report: dict[str, Any]) -> str:
    """Per round: the loop's live reward and cost, the start router's and the best single model's on the same
    questions; per release: the off-policy estimate before it, the canary's measurement, the verdict."""
    best = report["setup"]["best_single_on_train"]
    lines = [f"| round | the loop: reward | cost per request (m$) | versions that decided | start: reward | cost (m$) | "
             f"{best}: reward | cost (m$) |", "|---|---|---|---|---|---|---|---|"]
    for r in report["rounds"]:
        versions = ", ".join(f"{v}: {n}" for v, n in r["loop"]["by_version"].items())
        lines.append(f"| {r['round']} | {r['loop']['reward']:.3f} | {1000 * r['loop']['cost_usd']:.2f} | {versions} | "
                     f"{r['start']['reward']:.3f} | {1000 * r['start']['cost_usd']:.2f} | "
                     f"{r['best_single']['reward']:.3f} | {1000 * r['best_single']['cost_usd']:.2f} |")
    lines += ["", "| version (loaded after round) | trained on | off-policy DR before | IPS before | canary measured | "
                  "canary - current | verdict |", "|---|---|---|---|---|---|---|"]
    for rel in report["releases"]:
        dr, ips, c, d = rel["off_policy"]["dr"], rel["off_policy"]["ips"], rel["canary"], rel["difference"]
        lines.append(f"| {rel['version']} ({rel['after_round']}) | {rel['trained_on']} requests | {dr['value']:.3f} "
                     f"[{dr['lo']:.3f}, {dr['hi']:.3f}] | {ips['value']:.3f} [{ips['lo']:.3f}, {ips['hi']:.3f}] | "
                     f"{c['mean']:.3f} [{c['lo']:.3f}, {c['hi']:.3f}] (n {c['n']}) | {d['mean']:+.3f} "
                     f"[{d['lo']:+.3f}, {d['hi']:+.3f}] | {rel['state'].replace('_', ' ')} |")
    return "\n".join(lines)


# -- docs/router_r1.md: the learning test (rl_bandit.json, bench_rl_bandit.py) ------------------------------

def rl_bandit_table(report: dict[str, Any]) -> str:
    """Per start and learner: episodes, final P(optimal) and P(trap) per context, final regret; the real stack's
    rows first, then the references on the same table."""
    gaps = report["task"]["gaps"]
    head = " | ".join(f"P(best) / P(trap), gap {g:.2f}" for g in gaps)
    lines = [f"| start | learner | episodes | {head} | regret |", "|---|---|---|" + "---|" * len(gaps) + "---|"]

    def row(start: str, name: str, r: dict[str, Any], at: int, episodes: int | None) -> str:
        cells = " | ".join(f"{b:.2f} / {t:.2f}" for b, t in zip(r["p_optimal"][at], r["p_trap"][at]))
        return f"| {start} | {name} | {'-' if episodes is None else f'{episodes:,}'} | {cells} | {r['regret'][at]:.3f} |"

    for start, runs in report["real_stack"].items():
        steps = max((len(r["p_optimal"]) - 1 for r in runs.values()), default=0)
        for est, r in runs.items():
            lines.append(row(start, f"SmolLM2 + LoRA, `{est}`", r, -1, r["episodes"]))
        refs = report["references"][start]
        r = refs["exact_ascent"]
        lines.append(row(start, f"exact gradient ascent ({len(r['p_optimal']) - 1} steps)", r, -1, None))
        for name in ("thompson", *(k for k in refs if k.startswith("tabular_"))):
            r = refs[name]
            label = "Thompson sampling" if name == "thompson" else \
                f"tabular softmax, `{name.removeprefix('tabular_')}` (mean of {r.get('seeds', 1)} seeds)"
            for at in (steps, len(r["p_optimal"]) - 1):
                lines.append(row(start, label, r, at, at * r["episodes_per_step"]))
    return "\n".join(lines)


# -- docs/router_r1.md: episodes per hour (rl_throughput.json, bench_rl_throughput.py) -------------------------

def rl_throughput_table(report: dict[str, Any]) -> str:
    """Per arm: batch, median RL step, episodes per hour and over today's, where the step goes, the learner's
    tokens an episode, its FLOP ceiling and the share of it reached."""
    arms = report["arms"]
    today = arms.get("today", {}).get("episodes_per_hour")
    lines = ["| arm | prompts x samples | median RL step | episodes / hour | over today | rollout / learner share "
             "| learner tokens / episode | learner FLOP ceiling | of ceiling |", "|---|---|---|---|---|---|---|---|---|"]
    for name, a in arms.items():
        over = f"{a['episodes_per_hour'] / today:.2f}x" if today else "-"
        lines.append(f"| `{name}` | {a['prompts_per_step']} x {a['n_samples']} | {a['median_step_s']:.1f} s "
                     f"| {a['episodes_per_hour']:,.0f} | {over} | {a['share']['rollout']:.2f} / {a['share']['learn']:.2f} "
                     f"| {a['learner_tokens_per_episode']:.0f} | {a['ceiling']['episodes_per_hour']:,.0f} "
                     f"| {a['of_ceiling']:.2f} |")
    return "\n".join(lines) + (f"\n\nfp32 matmul on these cores: {report['matmul_gflops']:.0f} GFLOP/s; target "
                               f"{report['target_episodes_per_hour']:,} episodes an hour: "
                               f"{'met' if report.get('target_met') else 'not met'}.")


# -- docs/many_models.md and docs/gpu.md: rendered by their own modules ----------------------------------

def many_models_table(report: dict[str, Any]) -> str:
    from rlrouter.eval.pool_report import aiq_table

    return aiq_table(report)


def gpu_check_table(*paths: Path) -> str:
    sys.path.insert(0, str(ROOT / "tools"))
    import gpu_check

    return gpu_check.render([p for p in paths if p.exists()])


def durability_table(d: dict[str, Any]) -> str:
    """Per kill mode: what was acknowledged, what came back, recovery; then the stateful parts covered."""
    rows = ["| killed each cycle | cycles | acknowledged (requests / feedback / operator steps) | requests by kind "
            "| unanswered | lost | double-counted | 5xx | recovery | torn lines skipped | exploration / judge records "
            "| release at the end |",
            "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    what = {"serve": "every Serve process (controller, proxy, selector replica, served-routers replica)",
            "replica": "the app's replicas", "stack": "the whole server (its Ray cluster, Serve, the app)"}
    for kill, r in d["runs"].items():
        log, rel = r["final_check"]["traffic_log"], r["final_check"]["releases"]
        kinds = ", ".join(f"{k} {n:,}" for k, n in sorted(log["acknowledged_by_kind"].items()))
        restarts = [c["restart_s"] for c in r["per_cycle"]]
        ended = [s["step"] for s in r["operator_steps"] if s["step"] != "load"]
        rows.append(f"| {what.get(kill, kill)} | {r['cycles']} | {r['acknowledged_requests']:,} / "
                    f"{r['acknowledged_feedback']:,} / {r['acknowledged_operator_steps']} | {kinds} | {r['unanswered']:,} "
                    f"| {r['lost']} | {r['double_counted']} | {r['5xx']} | {min(restarts):.1f}-{max(restarts):.1f} s "
                    f"| {log['torn_lines_skipped']} | {log['explore_records']:,} / {log['judge_grades']:,} "
                    f"| version {rel['current']} current, {rel['running'] or 'none'} in canary, {len(ended)} ended "
                    f"({', '.join(ended) or 'none'}), as acknowledged: {'yes' if rel['state_as_acknowledged'] else 'NO'} |")
    m = (d["runs"].get("serve") or {}).get("metrics_endpoint")
    lines = ["\n".join(rows), "", "Stateful parts on: " + "; ".join(d["parts"]) + "."]
    if m:
        lines.append(f"After the last kill, the selector's feedback counter on the head's metrics endpoint "
                     f"{'matched' if m['feedback_counter_matches_acked'] else 'did NOT match'} the {m['acked']} "
                     f"feedback acknowledged since.")
    return "\n".join(lines)


def fuzz_table(live: dict[str, Any], inproc: dict[str, Any]) -> str:
    """Both fuzz targets side by side, then every hand-made attack's answer on each."""
    rows = ["| target | requests | schemathesis cases | statuses | 5xx | 4xx without the error shape or the field "
            "| refused requests audited | refused that changed state | fuzzing |", "|---|---|---|---|---|---|---|---|---|"]
    for name, d in (("live: the Serve app over HTTP", live), ("in-process: the FastAPI app, no Ray", inproc)):
        statuses = ", ".join(f"{n:,}×{code}" for code, n in d["by_status"].items())
        rows.append(f"| {name} | {d['cases']:,} | {d['cases'] - len(d['attacks']):,} | {statuses} | {d['server_errors']} "
                    f"| {d['bad_4xx']} | {d.get('refused_audited', 'not audited')} "
                    f"| {d.get('state_changed_by_refused', '-')} | {d['fuzz_s']:.0f} s |")
    inner = {a["attack"]: a for a in inproc["attacks"]}
    att = ["| hand-made attack | live | in-process | held |", "|---|---|---|---|"]
    for a in live["attacks"]:
        b = inner.get(a["attack"])
        held = a["held"] and (b is None or b["held"])
        att.append(f"| {a['attack']} | {a['status']} | {b['status'] if b else '-'} | {'yes' if held else 'NO'} |")
    slow = live.get("slow_client")
    tail = (f"Slow client (a body announced, a third sent, then nothing), live only: answered `{slow['answer']}` "
            f"after {slow['after_s']:.0f} s.") if slow else ""
    return "\n".join(rows) + "\n\n" + "\n".join(att) + ("\n\n" + tail if tail else "")


# -- docs/many_models.md and the RouterBench study: Router-R1's lockbox rows (many_models.json's router_r1) ------

def router_r1_lockbox_table(path: Path) -> str:
    """Each trained Router-R1 run of many_models.json, greedy and sampled: its reward, its paired intervals
    against the best fixed route and the per-task rule, and the candidates it calls per task; the caption is
    each run's own provenance (the AIQ figures' is another measurement)."""
    many = json.loads(path.read_text())

    lines = ["| run | policy | questions | episodes | mean reward | minus best fixed route | minus per-task rule "
             "| calls per task |", "|---|---|---|---|---|---|---|---|"]
    for name, r in (many.get("router_r1") or {}).items():
        arms = [("greedy", r)] + ([(f"sampled ({r['sampled']['samples']} a question)", r["sampled"])] if r.get("sampled") else [])
        for label, a in arms:
            lines.append(f"| `{name}` ({r['algo']}) | {label} | {r['questions']} | {r['episodes']:,} | {a['mean_reward']:.3f} "
                         f"| {interval(a['policy_minus_best_fixed'], 'mean')} | {interval(a['policy_minus_per_task'], 'mean')} "
                         f"| {calls_per_task(a['route_share_by_task'])} |")
    first = next(iter((many.get("router_r1") or {}).values()), None)
    if first:
        refs = ", ".join(f"{k} {v:.3f}" for k, v in first["reference_rewards"].items())
        lines += ["", f"Alpha {first['alpha']:g}; best fixed route {first['best_fixed']} and per-task rule "
                  + ", ".join(f"{t} -> {c}" for t, c in first["per_task"].items())
                  + f", both chosen on the training questions; on these questions {refs}. Paired bootstrap, 95%."]
    for name, r in (many.get("router_r1") or {}).items():
        p = r["provenance"]
        lines += ["", f"<sub>`{name}`: `{p['command']}`, {p['date']} at commit {p['commit']} (its report: "
                  f"`{r['report']}`)</sub>"]
    return "\n".join(lines)


# -- the RouterBench study: the RL runs' sampled routes, block by block (their reports' per-step metrics) ---------

STUDY_RB = "docs/experiments/2026-12-router-r1-routerbench/results"
RB_RUNS = (f"{STUDY_RB}/router_r1_routerbench_scale.json", f"{STUDY_RB}/router_r1_routerbench_scale_ppo.json")
"""The at-scale runs of the study, GRPO then PPO: their reports (``report.json``, copied beside the study)."""


def rl_blocks_table(*paths: Path, block: int = 10) -> str:
    """Per run and block of ``block`` RL steps: the share of the training rollouts' sampled routes on each task's
    per-task-rule candidate, Winogrande's share sent to GPT-3.5, and the greedy dev reward at the block's end."""
    lines = ["| run | RL steps | episodes | sampled routes on the task's rule: ARC -> Yi-34B / Winogrande -> Yi-34B / "
             "MBPP -> GPT-3.5 | Winogrande -> GPT-3.5 | dev reward (greedy) at the block's end |",
             "|---|---|---|---|---|---|"]
    rule = {"arc-challenge": "yi-34b", "winogrande": "yi-34b", "mbpp": "gpt-3.5"}
    notes = []
    for path in paths:
        if not path.is_file():
            continue
        report = json.loads(path.read_text())
        name, algo = report["config"]["run_name"], report["config"]["learner"]["algo"]
        steps = {s["step"]: s for s in report["steps"] if "time/step_s" in s}
        dev = {r["step"]: r["eval/mean_reward"] for r in report.get("held_out_curve") or []}
        per = report["config"]["train"]["prompts_per_step"] * report["config"]["train"]["n_samples"]
        for start in range(1, max(steps, default=0) + 1, block):
            got = [s for s in range(start, start + block) if s in steps]
            mean = lambda k: sum(steps[s].get(k, 0.0) for s in got) / len(got)  # noqa: E731
            shares = " / ".join(f"{mean(f'rollout/share/{task}/{c}'):.2f}" for task, c in rule.items())
            lines.append(f"| `{name}` ({algo}) | {got[0]}-{got[-1]} | {len(got) * per:,} | {shares} | "
                         f"{mean('rollout/share/winogrande/gpt-3.5'):.2f} | "
                         + (f"{dev[got[-1]]:.3f} |" if got[-1] in dev else "- |"))
        p = report.get("provenance") or {}
        notes.append(f"`{name}`: measured {p.get('date', '(no date)')} at commit {p.get('commit', '(none)')}")
    return "\n".join(lines) + "\n\n<sub>" + "; ".join(notes) + " (the runs' reports, beside the study)</sub>"


TABLES = [
    Table("README.md", "make run table", ("make_run.json",), make_run_table),
    Table("README.md", "headline dates", README_RESULTS, readme_dates, paths=True),
    Table("docs/many_models.md", "test readings: pool", ("test_ledger.jsonl",), test_readings, paths=True),
    Table("docs/many_models.md", "test readings: router_r1", ("test_ledger.jsonl",), test_readings, paths=True),
    Table("docs/retraining.md", "test readings: flywheel", ("test_ledger.jsonl",), test_readings, paths=True),
    Table("docs/benchmarks.md", "headline provenance", README_RESULTS, readme_measured_table, paths=True),
    Table("docs/benchmarks.md", "selector regret", ("selector.json",), regret_table),
    Table("docs/benchmarks.md", "route latency", ("selector.json",), latency_table),
    Table("docs/intent.md", "intent results", ("intent.json",), intent_table),
    Table("docs/benchmarks.md", "trl steps", ("router_r1.json",), trl_steps_table),
    Table("docs/retraining.md", "flywheel", ("flywheel.json",), flywheel_table),
    Table("docs/many_models.md", "many_models aiq", ("many_models.json",), many_models_table),
    Table("docs/many_models.md", "router_r1 lockbox", ("many_models.json",), router_r1_lockbox_table, paths=True),
    Table("docs/experiments/2026-12-router-r1-routerbench.md", "router_r1 lockbox", ("many_models.json",),
          router_r1_lockbox_table, paths=True),
    Table("docs/experiments/2026-12-router-r1-routerbench.md", "rl blocks", RB_RUNS, rl_blocks_table, paths=True),
    Table("docs/router_r1.md", "rl bandit", ("rl_bandit.json",), rl_bandit_table),
    Table("docs/router_r1.md", "rl throughput", ("rl_throughput.json",), rl_throughput_table),
    Table("docs/operations.md", "durability", ("durability.json",), durability_table),
    Table("docs/operations.md", "hostile input", ("fuzz_live.json", "fuzz.json"), fuzz_table),
    Table("docs/gpu.md", "gpu check", ("gpu_check_cpu.json", "gpu_check_cuda.json"), gpu_check_table, paths=True),
]


def main(argv: list[str] | None = None) -> int:
    from rlrouter.eval.pool_report import doc_block, replace_doc_block

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="change nothing; exit 1 naming each table that differs")
    args = ap.parse_args(argv)
    differ = []
    for t in TABLES:
        body = t.body()
        if args.check:
            if doc_block((ROOT / t.doc).read_text(encoding="utf-8"), t.name) != body:
                differ.append(f"{t.doc}: {t.name}")
        elif not replace_doc_block(ROOT / t.doc, t.name, body):
            differ.append(f"{t.doc}: no '{t.name}' markers")
    for d in differ:
        print(f"differs: {d}" if args.check else f"not written: {d}")
    if not differ:
        print(f"{len(TABLES)} tables {'match their results' if args.check else 'rendered'}")
    if args.check:  # which of the README's results were measured on code that changed since (a report only)
        from tools.staleness import report_lines

        print("\n".join(report_lines()[0]))
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
