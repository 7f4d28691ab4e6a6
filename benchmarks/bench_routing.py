"""Where routing pays under Router-R1's reward: the alpha sweep over the logged outcomes, and the trained
policies scored against every fixed route on the same questions.

    python benchmarks/bench_routing.py                       # the alpha sweep (seconds)
    python benchmarks/bench_routing.py --runs outputs/A outputs/B ...   # add trained runs' report.json

The sweep sends every logged question to every candidate of the replay pool (what a fixed route does)
and scores each call with the Router-R1 reward on one reference cost scale (every call of the mix), for
alpha from 0 to 1: each task's best fixed route, the best fixed route, the per-task rule, the oracle
(cheapest correct candidate), the per-question best, and the cascade (the cheapest candidate, then the
strongest too when the cheap reply states no final answer: what a policy that reads its
``<information>`` could do). Two mixes: the logs as they are (90% MMLU) and
the training job's mix (GSM8K and MMLU in equal numbers). The questions of ``--exclude`` (a run's test
split) are left out, so the alpha chosen here is not chosen on the questions a run reports on. At alpha
0.36, 0.5 and 0.6 it also gives what a second call after the cheap reply is worth against copying it, per
task and kind of reply (``route_scores.escalation_value``), on the job mix and on the default job's
training questions at their own cost window: the choice a reply-reading policy learns, and its signal.

``--runs`` adds each run's held-out ``routing`` block (``report.json``: the policy and the routes on the
run's test questions) to the JSON and to the accuracy-against-cost plot: the cost knob.

``--evaluate RUN --questions N`` first scores RUN's final policy on N logged questions that RUN never
trained on (tasks in equal numbers; GSM8K has 1,319 logged questions in all): it builds that held-out
split (``jobs/prepare_data.py`` with a large test size, minus RUN's training questions), then runs the
training job with ``train.total_steps=0 train.init_from=<RUN's last checkpoint>`` on it, at RUN's alpha
and with RUN's training questions as the reference cost scale. The new run folder (``RUN_heldout<N>``)
joins ``--runs``. Enough questions for the paired interval of policy minus best fixed route to be
narrow: at 32 it spans about +-0.2. ``--unread SPLIT ...`` leaves out the questions of those test splits
(an earlier evaluation's ``outputs/data/heldout_*/test.parquet``): a choice made after reading them is then
scored on questions it never saw (``RUN_heldout<N>_unread``).

``--greedy-penalties 0,0.3,0.6`` (with ``--evaluate``) first picks the greedy frequency penalty
(``rollout.env.greedy_frequency_penalty``) on ``--select-questions`` of RUN's own training questions, by
mean reward, then scores the held-out questions once with it (``RUN_heldout<N>_fp<penalty>``); the JSON
keeps the choice and each candidate's scores under the run's ``selection``. ``--steps 36,40,48`` makes the
choice over those checkpoints of RUN too (each penalty at each step; default: the last checkpoint only), and
the held-out questions are scored once with the chosen one (``..._step<N>``). One penalty and no
``--steps`` leaves nothing to choose: the held-out questions are scored at it with no selection run.

Writes ``routing.json`` and ``routing.png`` beside its study (``STUDY_RESULTS``) (``--name`` changes the stem).
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from pathlib import Path
from typing import Sequence

ROOT = Path(__file__).resolve().parents[1]
STUDY = "2026-11-router-r1-two-models"
"""The dated study this script belongs to (docs/experiments/): its results go there; make bench leaves it out."""
STUDY_RESULTS = ROOT / "docs" / "experiments" / STUDY / "results"
LEDGER = ROOT / "benchmarks" / "results" / "test_ledger.jsonl"
"""Where every --evaluate reading of held-out questions is recorded (``rlrouter.eval.ledger``)."""
sys.path.insert(0, str(ROOT))

from rlrouter.provenance import write_result  # noqa: E402

# what this benchmark's figures depend on (rlrouter.provenance: the staleness report lists its results when these change)
MEASURES = ("benchmarks/bench_routing.py", "rlrouter/trainer", "rlrouter/learner", "rlrouter/rollout",
            "rlrouter/algos", "rlrouter/rewards", "rlrouter/sync", "rlrouter/pool", "conf",
            "rlrouter/eval/route_scores.py")

ALPHAS = [round(0.02 * i, 2) for i in range(51)]
ESCALATION_ALPHAS = [0.36, 0.5, 0.6]


def logged_items(exclude: set[str]) -> list[dict]:
    from rlrouter.data.logged import normalize_prompt
    from rlrouter.pool.replay import shared_table

    table = shared_table(None)
    items = []
    for prompt, source in zip(table.prompts, table.source):
        if normalize_prompt(prompt) in exclude:
            continue
        task = "gsm8k" if source.startswith("gsm8k") else "mmlu" if source.startswith("mmlu") else source
        items.append({"query": prompt, "ground_truth": [""], "source": task})
    return items


def excluded_prompts(paths: list[str]) -> set[str]:
    from rlrouter.data.build import load_router_r1_split
    from rlrouter.data.logged import normalize_prompt

    out: set[str] = set()
    for p in paths:
        out |= {normalize_prompt(it["query"]) for it in load_router_r1_split(p)}
    return out


def balanced(table, seed: int = 0):
    """Every task in equal numbers (the smallest task's count), as the training job's data mix."""
    rng = random.Random(seed)
    by_task: dict[str, list[int]] = {}
    for i, t in enumerate(table.tasks):
        by_task.setdefault(t, []).append(i)
    n = min(len(v) for v in by_task.values())
    rows = [i for t in sorted(by_task) for i in sorted(rng.sample(by_task[t], n))]
    return table.subset(rows)


def plot(result: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    runs = result.get("runs", [])
    fig, ax = plt.subplots(1, 3 if runs else 2, figsize=(17 if runs else 12, 4.4))
    for a, (mix, sweep) in zip(ax, result["sweeps"].items()):
        rows = sweep["rows"]
        alphas = [r["alpha"] for r in rows]
        for k, task in enumerate(sorted(rows[0]["by_task"])):
            for j, cand in enumerate(sweep["candidates"]):
                a.plot(alphas, [r["by_task"][task]["rewards"][cand] for r in rows], ls="-" if j == 0 else "--",
                       color=f"C{k}", lw=1, label=f"{task}: always {cand.split('-')[0]}")
        a.plot(alphas, [r["best_fixed_reward"] for r in rows], color="k", lw=2, label="best fixed route")
        a.plot(alphas, [r["per_task_rule_reward"] for r in rows], color="C3", lw=1.5, ls=":", label="per-task rule")
        a.plot(alphas, [r["oracle_reward"] for r in rows], color="C4", lw=1, label="oracle (cheapest correct)")
        if "cascade_reward" in rows[0]:
            a.plot(alphas, [r["cascade_reward"] for r in rows], color="C5", lw=1.5, ls="-.",
                   label="cascade: cheap, strong when its reply states no answer")
        lo, hi = sweep["tasks_differ"]["low"], sweep["tasks_differ"]["high"]
        if lo is not None:
            a.axvspan(lo - 0.01, hi + 0.01, color="C3", alpha=0.12, label="tasks' best routes differ")
        a.set_xlabel("alpha (cost weight)"), a.set_ylabel("mean Router-R1 reward")
        a.set_title(f"{mix}: {', '.join(f'{t} {n}' for t, n in sweep['tasks'].items())}", fontsize=9)
        a.grid(alpha=0.3)
    ax[0].legend(fontsize=7)
    if runs:
        a = ax[2]
        first = runs[0]["routing"]["routes"]
        for name, mk in (("always_cheapest", "s"), ("always_strongest", "D"), ("random", "v"),
                         ("per_task_rule", "P"), ("oracle", "*"), ("cascade", "X")):
            if name in first:
                a.scatter(first[name]["cost_per_query"], first[name]["accuracy"], marker=mk, s=60, color="grey")
                a.annotate(name, (first[name]["cost_per_query"], first[name]["accuracy"]), fontsize=7,
                           xytext=(4, 3), textcoords="offset points")
        for k, run in enumerate(runs):
            p = run["routing"]["routes"]["policy"]
            a.scatter(p["cost_per_query"], p["accuracy"], s=80, color=f"C{k}", marker="o")
            a.annotate(f"{Path(run['run']).name}: alpha {run['alpha']:g}\nstrong {p['strong_share']:.0%}",
                       (p["cost_per_query"], p["accuracy"]),
                       fontsize=7, xytext=(4, -12), textcoords="offset points", color=f"C{k}")
        a.set_xlabel("mean cost per query (USD)"), a.set_ylabel("held-out accuracy")
        a.set_title("the cost knob: trained policies against the routes", fontsize=9)
        a.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


TABLE_ALPHAS = (0.0, 0.2, 0.3, 0.32, 0.34, 0.36, 0.38, 0.4, 0.42, 0.5, 0.6, 0.8, 1.0)


def sweep_table(sweep: dict) -> str:
    """Mean reward of each task's fixed routes, the best fixed route, the per-task rule, the cascade and the
    oracle (gains over the best fixed route in brackets)."""
    tasks = sorted(sweep["tasks"])
    cands = sweep["candidates"]
    cascade = "cascade_reward" in sweep["rows"][0]
    head = ["alpha"] + [f"{t}: {c.split('-')[0]}" for t in tasks for c in cands] + [
        "best fixed route", "per-task rule (gain)"] + (["cascade (gain)"] if cascade else []) + ["oracle (headroom)"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in sweep["rows"]:
        if r["alpha"] not in TABLE_ALPHAS:
            continue
        cells = [f"{r['alpha']:g}"]
        for t in tasks:
            for c in cands:
                v = r["by_task"][t]["rewards"][c]
                cells.append(f"**{v:.3f}**" if r["by_task"][t]["best"] == c else f"{v:.3f}")
        gain, head_q = r["per_task_rule_reward"] - r["best_fixed_reward"], r["oracle_reward"] - r["best_fixed_reward"]
        cells += [f"{r['best_fixed_reward']:.3f} ({r['best_fixed'].split('-')[0]})",
                  f"{r['per_task_rule_reward']:.3f} ({gain:+.4f})"]
        if cascade:
            cells.append(f"{r['cascade_reward']:.3f} ({r['cascade_reward'] - r['best_fixed_reward']:+.4f})")
        cells.append(f"{r['oracle_reward']:.3f} ({head_q:+.3f})")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


GAP_ALPHAS = (0.3, 0.34, 0.36, 0.38, 0.42)
GAP_SAMPLE = 256  # the default job's training questions per task


def gap_table(sweep: dict) -> str:
    """Per alpha and task: the best fixed route's per-question lead over the runner-up (mean, sd), the
    questions needed to tell them apart at 2 standard errors, and the chance that a sample of GAP_SAMPLE
    questions (the default job's training questions of one task) favours the runner-up."""
    from rlrouter.eval.route_scores import wrong_sign

    lines = ["| alpha | task | best - runner-up | sd per question | questions to tell (2 se) | "
             f"P({GAP_SAMPLE} questions favour the runner-up) |", "|---|---|---|---|---|---|"]
    for r in sweep["rows"]:
        if r["alpha"] not in GAP_ALPHAS:
            continue
        for t, v in sorted(r["by_task"].items()):
            g = v.get("gap")
            if g is None:
                continue
            need = "never (a tie)" if g["questions_to_tell"] is None else f"{g['questions_to_tell']:,}"
            lines.append(f"| {r['alpha']:g} | {t} | {g['best'].split('-')[0]} by {g['gap']:+.4f} | {g['sd']:.3f} | "
                         f"{need} | {wrong_sign(g, GAP_SAMPLE):.2f} |")
    return "\n".join(lines) + "\n"


def escalation_table(values: dict) -> str:
    """Escalate minus answer after the cheap reply, per question set, alpha, task and kind of reply."""
    lines = ["| questions | alpha | task | cheap reply | n | escalate - answer (se) |", "|---|---|---|---|---|---|"]
    for name, by_alpha in values.items():
        for alpha, by_task in by_alpha.items():
            for task, kinds in by_task.items():
                for kind, v in kinds.items():
                    lines.append(f"| {name} | {float(alpha):g} | {task} | {kind.replace('_', ' ')} | {v['n']} | "
                                 f"{v['mean']:+.3f} ({'–' if v['se'] is None else format(v['se'], '.3f')}) |")
    return "\n".join(lines) + "\n"


def runs_table(runs: list[dict]) -> str:
    """Each trained run's policy on its held-out questions against the routes, with the paired interval, and
    whether it escalates where the cheap reply states no answer (runs scored before the cascade: "–")."""
    lines = ["| run | alpha | questions | policy reward | best fixed route | policy - best fixed [95%] | "
             "per-task rule | cascade | oracle | strong share per task | escalates after the cheap reply: "
             "no answer / an answer | format valid | accuracy |", "|" + "---|" * 13]
    for run in runs:
        b = run["routing"]
        p, d = b["routes"]["policy"], b["policy_minus_best_fixed"]
        shares = ", ".join(f"{t} {v:.2f}" for t, v in p["strong_share_by_task"].items())
        cascade = f"{b['routes']['cascade']['mean_reward']:.3f}" if "cascade" in b["routes"] else "–"
        esc = b.get("policy_escalation")
        escalates = (f"{esc['not_stated']['escalated']}/{esc['not_stated']['n']} / "
                     f"{esc['stated']['escalated']}/{esc['stated']['n']}") if esc else "–"
        lines.append(f"| {Path(run['run']).name} | {b['alpha']:g} | {p['n']} | {p['mean_reward']:.3f} | "
                     f"{b['routes'][b['best_fixed']]['mean_reward']:.3f} ({b['best_fixed']}) | "
                     f"{d['value']:+.3f} [{d['lo']:+.3f}, {d['hi']:+.3f}] | {b['routes']['per_task_rule']['mean_reward']:.3f} | "
                     f"{cascade} | {b['routes']['oracle']['mean_reward']:.3f} | {shares} | {escalates} | "
                     f"{p['format_valid']:.3f} | {p['accuracy']:.3f} |")
    return "\n".join(lines) + "\n"


def rescored_table(boards: list[dict]) -> str:
    """``rescore``'s boards: the policy, the best fixed route and the cascade on each run's held-out questions."""
    lines = ["| run | questions | policy reward | best fixed route | cascade | policy - best fixed [95%] | "
             "cascade - best fixed [95%] | policy - cascade [95%] | escalates after the cheap reply: no answer / an answer |",
             "|" + "---|" * 9]

    def ci(d: dict) -> str:
        return f"{d['value']:+.3f} [{d['lo']:+.3f}, {d['hi']:+.3f}]"

    for b in boards:
        esc = b["policy_escalation"]
        lines.append(f"| {Path(b['run']).name} | {sum(b['tasks'].values())} | {b['policy_mean_reward']:.3f} | "
                     f"{b['routes'][b['best_fixed']]['mean_reward']:.3f} ({b['best_fixed']}) | "
                     f"{b['routes']['cascade']['mean_reward']:.3f} | {ci(b['policy_minus_best_fixed'])} | "
                     f"{ci(b['cascade_minus_best_fixed'])} | {ci(b['policy_minus_cascade'])} | "
                     f"{esc['not_stated']['escalated']}/{esc['not_stated']['n']} / "
                     f"{esc['stated']['escalated']}/{esc['stated']['n']} |")
    each = [b for b in boards if "policy_minus_fixed" in b]
    if each:
        lines += ["", "| run | policy - each fixed route [95%] |", "|---|---|"]
        for b in each:
            lines.append(f"| {Path(b['run']).name} | " + "; ".join(
                f"{name} ({b['routes'][name]['mean_reward']:.3f}): {ci(d)}" for name, d in b["policy_minus_fixed"].items())
                + " |")
    by_task = [b for b in boards if "policy_by_task" in b]
    if by_task:
        lines += ["", "| run | task | policy reward | escalates after the cheap reply: no answer / an answer | "
                      "policy - other run [95%] |", "|" + "---|" * 5]
        for b in by_task:
            vs = b.get("versus")
            for task, t in b["policy_by_task"].items():
                e = t["escalation"]
                lines.append(f"| {Path(b['run']).name} | {task} | {t['mean_reward']:.3f} | "
                             f"{e['not_stated']['escalated']}/{e['not_stated']['n']} / "
                             f"{e['stated']['escalated']}/{e['stated']['n']} | |")
            if vs:
                lines.append(f"| {Path(b['run']).name} | all | {b['policy_mean_reward']:.3f} | | "
                             f"{ci(vs['policy_minus_versus'])} against {Path(vs['run']).name} "
                             f"({vs['mean_reward']:.3f}) |")
    signal = [b for b in boards if "policy_signal" in b]
    if signal:
        lines += ["", "Which stated cheap replies the policy escalates on (`escalation_signal`): the cheap model's "
                      "logged accuracy and the share only the strong one got right, escalated / kept; the logged "
                      "escalation gain of those escalated against all stated replies.", "",
                  "| run | task | escalated / kept | cheap right | strong only right | kept - escalated, cheap right [95%] | "
                  "gain: escalated / all | escalated - all [95%] |", "|" + "---|" * 8]

        def num(v: float | None) -> str:
            return "–" if v is None else f"{v:.3f}"

        def interval(d: dict) -> str:
            return "–" if d["value"] != d["value"] else ci(d)  # nan: nothing escalated

        for b in signal:
            for task, sg in [("all", b["policy_signal"])] + [(k, v["signal"]) for k, v in b["policy_by_task"].items()
                                                             if "signal" in v]:
                e, k, a = sg["escalated"], sg["kept"], sg["all"]
                lines.append(f"| {Path(b['run']).name} | {task} | {e['n']} / {k['n']} | {num(e['cheap_right'])} / "
                             f"{num(k['cheap_right'])} | {num(e['strong_only_right'])} / {num(k['strong_only_right'])} | "
                             f"{interval(sg['cheap_right_kept_minus_escalated'])} | {num(e['gain'])} / {num(a['gain'])} | "
                             f"{interval(sg['gain_escalated_minus_all'])} |")
    return "\n".join(lines) + "\n"


def plot_curves(runs: list[dict], path: Path) -> None:
    """Each run's held-out curve side by side: format validity, mean reward (with the run's best fixed route
    as a dotted line) and the strong-call share per task, against the RL step."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(1, 3, figsize=(16, 4.2))
    for k, run in enumerate(runs):
        rows = run["held_out_curve"]
        steps = [m["step"] for m in rows]
        label = f"{Path(run['run']).name} (alpha {run['alpha']:g})"
        ax[0].plot(steps, [m["eval/format_valid"] for m in rows], marker="o", color=f"C{k}", label=label)
        ax[1].plot(steps, [m["eval/mean_reward"] for m in rows], marker="o", color=f"C{k}", label=label)
        best = run["routing"]["routes"][run["routing"]["best_fixed"]]["mean_reward"]
        ax[1].axhline(best, ls=":", color=f"C{k}", lw=1)
        for task, mk in zip(sorted({t for m in rows for t in m if t.startswith("eval/strong_share/")}), "os^v"):
            ax[2].plot(steps, [m.get(task, float("nan")) for m in rows], marker=mk, color=f"C{k}",
                       label=f"{label}: {task.rsplit('/', 1)[1]}")
    for a, title in zip(ax, ("held-out format validity", "held-out mean reward (dotted: best fixed route)",
                             "strong-call share per task")):
        a.set_title(title, fontsize=9), a.set_xlabel("RL step (0 = after the cold start)"), a.grid(alpha=0.3)
        a.legend(fontsize=6)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def run_entry(run_dir: str) -> dict:
    report = json.loads((Path(run_dir) / "report.json").read_text())
    if "routing" not in report:
        raise SystemExit(f"{run_dir}/report.json has no 'routing' block: run it with the current job")
    routing = report["routing"]
    run = Path(run_dir).resolve()
    return {"run": str(run.relative_to(ROOT)) if run.is_relative_to(ROOT) else str(run), "alpha": routing["alpha"],
            "routing": routing, "results": report.get("results", {}),
            "held_out_curve": report.get("held_out_curve", []), "wall_s": report.get("wall_s"),
            "train_s": report.get("train_s"), "escalation_curve": escalation_curve(run / "metrics.jsonl")}


ESCALATION_KEYS = ("rollout/no_answer/escalated", "rollout/states_answer/escalated")


def escalation_curve(metrics: Path) -> list[dict]:
    """Per RL step of a run trained with ``curriculum.no_answer_share``, the share of its sampled trajectories that
    asked a second candidate after a cheap reply that states no answer and after one that states one
    (the trainer's stratum metrics); [] for runs without them."""
    if not metrics.exists():
        return []
    rows = [json.loads(line) for line in metrics.read_text().splitlines() if line.strip()]
    return [{"step": r["step"], **{k: r[k] for k in ESCALATION_KEYS if k in r}}
            for r in rows if any(k in r for k in ESCALATION_KEYS)]


def plot_escalation(runs: list[dict], path: Path) -> None:
    """The runs' training escalation side by side: after a cheap reply that states no answer (where asking
    again pays) and after one that states an answer (where it costs), against the RL step."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(1, 2, figsize=(11, 4))
    for k, run in enumerate(r for r in runs if r.get("escalation_curve")):
        rows = run["escalation_curve"]
        for a, key in zip(ax, ESCALATION_KEYS):
            pts = [(m["step"], m[key]) for m in rows if key in m]
            a.plot([p[0] for p in pts], [p[1] for p in pts], marker=".", color=f"C{k}", label=Path(run["run"]).name)
    for a, title in zip(ax, ("after a reply that states no answer", "after a reply that states one")):
        a.set_title(f"sampled: asked the strong model too, {title}", fontsize=9)
        a.set_xlabel("RL step"), a.set_ylim(-0.05, 1.05), a.grid(alpha=0.3), a.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _balanced(rows: list[dict], n: int) -> list[dict]:
    """The first ``n // 2`` rows of each task (``source``), tasks in sorted order."""
    by_task: dict[str, list] = {}
    for r in rows:
        by_task.setdefault(r["source"], []).append(r)
    return [r for t in sorted(by_task) for r in by_task[t][:n // 2]]


def unseen(rows: list[dict], seen: set[str], n: int) -> list[dict]:
    """``n`` of ``rows`` (tasks equal, ``_balanced``) whose normalized question is not in ``seen``."""
    from rlrouter.data.logged import normalize_prompt

    return _balanced([r for r in rows if normalize_prompt(r["query"]) not in seen], n)


def heldout_counts(usable: dict[str, int], want: int) -> dict[str, int]:
    """Test questions to ask of each source: ``want``, or all but one of a source that has fewer (the one
    goes to the throwaway train split)."""
    return {k: min(want, n - 1) for k, n in usable.items()}


def heldout_split(run: Path, cfg: dict, questions: int, unread: Sequence[str] = ()) -> Path:
    """A data folder whose test split is ``questions`` logged questions RUN never trained on (tasks equal),
    none of them in the test splits ``unread`` (an earlier evaluation's questions), and whose train split is
    RUN's (the reference cost scale)."""
    import subprocess
    import tempfile

    import yaml
    from datasets import Dataset

    from rlrouter.data.build import load_router_r1_split

    train_path = Path(cfg["data"]["out_dir"]) / "train.parquet"
    read = excluded_prompts(list(unread))
    seen = excluded_prompts([str(train_path)]) | read
    data = ROOT / "outputs" / "data" / (f"heldout_{run.name}_{questions}" + ("_unread" if unread else ""))
    if not (data / "test.parquet").exists():
        # seed 0's shuffle puts the run's own test questions first; the run's training questions are removed.
        # Each task asks for what it needs, or all it has (GSM8K has 1,319): the shuffle of each source is
        # the same whatever the counts. Built aside and written last, so a folder is never half a split.
        with tempfile.TemporaryDirectory() as tmp:
            prepare = [sys.executable, str(ROOT / "jobs" / "prepare_data.py"), "data.train_size=2", f"data.out_dir={tmp}"]
            subprocess.run(prepare + ["data.test_size=2"], check=True, cwd=ROOT)
            usable = {k: v["usable"] for k, v in json.loads((Path(tmp) / "stats.json").read_text())["sources"].items()}
            counts = heldout_counts(usable, (questions + len(read)) // 2 + 300)
            names = [s["name"] for s in yaml.safe_load((ROOT / "conf" / "data" / "default.yaml").read_text())["sources"]]
            subprocess.run(prepare + [f"data.test_size={sum(counts.values())}"]
                           + [f"data.sources.{names.index(k)}.weight={n}" for k, n in counts.items()],
                           check=True, cwd=ROOT)
            rows = unseen(load_router_r1_split(Path(tmp) / "test.parquet"), seen, questions)
        data.mkdir(parents=True, exist_ok=True)
        Dataset.from_list(load_router_r1_split(train_path)).to_parquet(str(data / "train.parquet"))
        Dataset.from_list(rows).to_parquet(str(data / "test.parquet"))
    return data


def training_split(run: Path, cfg: dict, questions: int) -> Path:
    """A data folder whose test split is ``questions`` of RUN's own training questions (tasks equal): where a
    decoding setting is chosen without reading a held-out question."""
    from datasets import Dataset

    from rlrouter.data.build import load_router_r1_split

    train = load_router_r1_split(Path(cfg["data"]["out_dir"]) / "train.parquet")
    data = ROOT / "outputs" / "data" / f"select_{run.name}_{questions}"
    if not (data / "test.parquet").exists():
        data.mkdir(parents=True, exist_ok=True)
        Dataset.from_list(_balanced(train, questions)).to_parquet(str(data / "test.parquet"))
        Dataset.from_list(train).to_parquet(str(data / "train.parquet"))
    return data


def checkpoint(run: Path, step: int | None = None) -> Path:
    """RUN's checkpoint of ``step`` (None: its last); a step RUN has no checkpoint of is an error naming those
    it has."""
    ckpts = sorted((run / "checkpoints").glob("step_*"))
    if not ckpts:
        raise SystemExit(f"{run}: no checkpoints")
    if step is None:
        return ckpts[-1]
    want = run / "checkpoints" / f"step_{step:06d}"
    if want not in ckpts:
        raise SystemExit(f"{run}: no checkpoint of step {step} (it has {[int(c.name[5:]) for c in ckpts]})")
    return want


def score_policy(run: Path, cfg: dict, data: Path, out_name: str, env: dict | None = None,
                 step: int | None = None) -> Path:
    """Run the training job with ``train.total_steps=0`` from RUN's checkpoint of ``step`` (None: the last) on
    DATA's test split: the episode as RUN trained it (turn budget, turns, reply length), at RUN's alpha,
    ``env`` overriding ``rollout.env`` keys. Returns the new run folder."""
    import subprocess

    import yaml

    from rlrouter.data.build import load_router_r1_split

    start = checkpoint(run, step)
    n = len(load_router_r1_split(data / "test.parquet"))
    alpha = cfg["reward"].get("alpha", cfg["reward"].get("params", {}).get("alpha"))
    cmd = [sys.executable, str(ROOT / "jobs" / "train_router_r1.py"), f"run_name={out_name}", f"data.out_dir={data}",
           f"train.init_from={start}", "train.total_steps=0", "train.eval_every=0", f"eval.num_questions={n}",
           "eval.untrained=false", f"reward.alpha={alpha}", f"model={cfg['model']}",
           "experiment=two_model_escalation",  # the study's knobs (eval.first_call_written)
           f"eval.first_call_written={str(cfg.get('eval', {}).get('first_call_written', False)).lower()}"]
    # the prefill is passed only by being the job's default
    default_prefill = yaml.safe_load((ROOT / "conf" / "rollout" / "vllm_cpu.yaml").read_text())["env"]["prefill"]
    if cfg["rollout"]["env"].get("prefill", default_prefill) != default_prefill:
        raise SystemExit(f"{run}: rollout.env.prefill differs from the job's default; evaluate it by hand")
    episode = {k: v for k, v in cfg["rollout"]["env"].items()
               if isinstance(v, (int, float)) or k == "replay_query"}  # bools too: mark_no_answer
    cmd += [f"rollout.env.{k}={str(v).lower() if isinstance(v, bool) else v}"
            for k, v in {**episode, **(env or {})}.items()]
    print("+", " ".join(cmd))
    subprocess.run(cmd, check=True, cwd=ROOT)
    return ROOT / "outputs" / out_name


def choose_penalty(run: Path, cfg: dict, penalties: list[float], questions: int,
                   steps: Sequence[int] | None = None) -> dict:
    """Score RUN's policy on ``questions`` of its own training questions at each greedy frequency penalty
    (``rollout.env.greedy_frequency_penalty``) and, with ``steps``, at each of those checkpoints (else the
    last); the highest mean reward there wins (ties: the smaller penalty, then the later step). No held-out
    question is read."""
    data = training_split(run, cfg, questions)
    scored = []
    for step in steps or [None]:
        for fp in penalties:
            name = f"{run.name}_select{questions}_fp{fp:g}" + (f"_step{step}" if step is not None else "")
            out = score_policy(run, cfg, data, name, {"greedy_frequency_penalty": fp}, step)
            report = json.loads((out / "report.json").read_text())
            policy = report["results"]["policy_trained"]
            scored.append({"penalty": fp, **({"step": step} if step is not None else {}),
                           "mean_reward": policy["mean_reward"], "format_valid": policy["format_valid"],
                           "accuracy": policy["accuracy"],
                           "run": str(out.relative_to(ROOT) if out.is_relative_to(ROOT) else out),
                           **({"escalation": report["routing"]["policy_escalation"]}
                              if "policy_escalation" in report.get("routing", {}) else {})})
            print(f"select: penalty {fp:g}" + (f", step {step}" if step is not None else "")
                  + f": reward {policy['mean_reward']:.3f}, format valid {policy['format_valid']:.3f}")
    best = max(scored, key=lambda r: (r["mean_reward"], -r["penalty"], r.get("step", 0)))
    return {"questions": questions, "on": "the run's training questions", "scored": scored, "chosen": best["penalty"],
            **({"chosen_step": best["step"]} if steps else {})}


def evaluate_run(run_dir: str, questions: int, penalties: list[float] | None = None,
                 select_questions: int = 256, unread: Sequence[str] = (),
                 steps: Sequence[int] | None = None) -> tuple[str, dict | None]:
    """Score RUN's final policy on ``questions`` held-out logged questions (module docstring); with
    ``penalties``, at the greedy frequency penalty ``choose_penalty`` picks on RUN's training questions.
    Returns the new run folder and the selection (None without ``penalties``)."""
    import yaml

    from rlrouter.data.build import load_router_r1_split

    run = Path(run_dir).resolve()
    cfg = yaml.safe_load((run / "config.yaml").read_text())
    if steps and not penalties:
        raise SystemExit("--steps: the checkpoint is chosen with the penalty; give --greedy-penalties too")
    if penalties and len(penalties) == 1 and not steps:  # nothing to choose: no selection run
        selection = {"questions": 0, "on": "given, not chosen", "scored": [], "chosen": penalties[0]}
    else:
        selection = choose_penalty(run, cfg, penalties, select_questions, steps) if penalties else None
    data = heldout_split(run, cfg, questions, unread)
    n = len(load_router_r1_split(data / "test.parquet"))
    env, name = None, f"{run.name}_heldout{n}" + ("_unread" if unread else "")
    if selection is not None:
        env, name = {"greedy_frequency_penalty": selection["chosen"]}, f"{name}_fp{selection['chosen']:g}"
    step = selection.get("chosen_step") if selection else None
    name += f"_step{step}" if step is not None else ""
    scored = score_policy(run, cfg, data, name, env, step)
    record_evaluation(scored, data / "test.parquet")
    return str(scored), selection


def record_evaluation(scored: Path, test_split: Path, ledger: Path = LEDGER) -> dict | None:
    """A trained policy scored on held-out logged questions is a reading of those questions: append it to
    the ledger of test readings (``rlrouter.eval.ledger``), keyed by the question ids read."""
    import pandas as pd

    from rlrouter.eval.ledger import record_reading

    rows = pd.read_parquet(test_split)
    ids = [str(i) for i in (rows["id"] if "id" in rows else rows["query"])]
    routing = json.loads((Path(scored) / "report.json").read_text()).get("routing") or {}
    return record_reading(ledger, question_ids=ids, test_sources=[str(test_split)], router_types=["router_r1"],
                          command="benchmarks/bench_routing.py --evaluate", run=Path(scored).name,
                          policy_minus_best_fixed=routing.get("policy_minus_best_fixed"))


def held_out_rows(run: Path, test: list[dict]) -> list[dict]:
    """RUN's ``held_out.jsonl`` records (one per question) in the order of ``test``'s questions; a question
    without one is an error naming it."""
    from rlrouter.data.io import read_jsonl

    records = {r["query"]: r for _, r in read_jsonl(run / "held_out.jsonl")}
    missing = [it["query"][:60] for it in test if it["query"] not in records]
    if missing:
        raise SystemExit(f"{run}/held_out.jsonl: no trajectory for {len(missing)} test questions, e.g. {missing[0]!r}")
    return [records[it["query"]] for it in test]


def rescore(run_dir: str, versus: str | None = None) -> dict:
    """RUN's held-out questions scored again with today's routes, beside the policy's logged rewards
    (``held_out.jsonl``: one reward per question, on the run's reference scale): the cascade and every
    route, the paired intervals of the policy and of the cascade against the best fixed route and of the
    policy against the cascade, the policy's mean reward per task and its escalation, in all and per task.
    ``versus``: another held-out run on the same questions (another policy, e.g. the one before a change):
    the paired interval of this policy minus that one. No policy is run; for runs scored before a
    route was added to the scoreboard."""
    from types import SimpleNamespace

    import numpy as np
    import yaml

    from rlrouter.data.build import load_router_r1_split
    from rlrouter.eval.route_scores import (cascade_rows, cost_bounds, escalation, escalation_signal, fixed_name,
                                            fixed_route_rewards, paired_diff, route_table, scoreboard)
    from rlrouter.pool.pool import CandidatePool

    run = Path(run_dir).resolve()
    cfg = yaml.safe_load((run / "config.yaml").read_text())
    data = Path(cfg["data"]["out_dir"])
    data = data if data.is_absolute() else ROOT / data
    test, train = load_router_r1_split(data / "test.parquet"), load_router_r1_split(data / "train.parquet")
    pool = CandidatePool.from_config(cfg["pool"])
    metric = cfg["reward"].get("metric", "em")
    table, reference = route_table(pool, test, metric), route_table(pool, train, metric)
    alpha = float(cfg["reward"]["alpha"])
    rows = held_out_rows(run, test)
    seed = int((cfg.get("eval") or {}).get("seed", 0))  # the job's bootstrap seed: the same resamples as its report
    board = scoreboard(table, reference, alpha, seed=seed)
    bounds = cost_bounds(reference.cost)
    fixed = fixed_route_rewards(table, alpha, bounds)
    best = fixed[:, table.candidates.index(next(c for c in table.candidates if fixed_name(table, c) == board["best_fixed"]))]
    policy = np.asarray([r["reward"] for r in rows], dtype=np.float64)
    cascade = cascade_rows(table, alpha, bounds).reward
    trajs = [SimpleNamespace(routes=[SimpleNamespace(model=m) for m in r["routes"]], answer=r.get("answer"),
                             item={"ground_truth": list(it["ground_truth"])}) for r, it in zip(rows, test)]
    board.update({"run": str(run.relative_to(ROOT)) if run.is_relative_to(ROOT) else str(run),
                  "policy_mean_reward": float(policy.mean()),
                  "policy_minus_best_fixed": paired_diff(policy, best, seed=seed).to_dict(),
                  "policy_minus_cascade": paired_diff(policy, cascade, seed=seed).to_dict(),
                  # every fixed route, not only the one the training questions chose: on a set whose task mix
                  # differs from theirs another may score higher
                  "policy_minus_fixed": {fixed_name(table, c): paired_diff(policy, fixed[:, j], seed=seed).to_dict()
                                         for j, c in enumerate(table.candidates)},
                  "policy_escalation": escalation(trajs, table, metric),
                  "policy_signal": escalation_signal(trajs, table, alpha, bounds, seed=seed), "policy_by_task": {}})
    for task in sorted(set(table.tasks)):
        idx = [i for i, t in enumerate(table.tasks) if t == task]
        sub, sub_trajs = table.subset(idx), [trajs[i] for i in idx]
        board["policy_by_task"][task] = {"mean_reward": float(policy[idx].mean()),
                                         "escalation": escalation(sub_trajs, sub, metric),
                                         "signal": escalation_signal(sub_trajs, sub, alpha, bounds, seed=seed)}
    if versus:
        other = Path(versus).resolve()
        theirs = np.asarray([r["reward"] for r in held_out_rows(other, test)], dtype=np.float64)
        board["versus"] = {"run": str(other.relative_to(ROOT)) if other.is_relative_to(ROOT) else str(other),
                           "mean_reward": float(theirs.mean()),
                           "policy_minus_versus": paired_diff(policy, theirs, seed=seed).to_dict()}
    return board


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--exclude", nargs="*", default=None,
                    help="parquet splits whose questions the sweep leaves out (default: the default job's test split)")
    ap.add_argument("--runs", nargs="*", default=[], help="run folders (report.json with a routing block)")
    ap.add_argument("--runs-from", default=None,
                    help="an earlier result JSON whose runs' entries to keep (their run folders may be gone), "
                         "before --runs")
    ap.add_argument("--evaluate", nargs="*", default=[], help="run folders whose final policy to score on --questions")
    ap.add_argument("--questions", type=int, default=2000)
    ap.add_argument("--unread", nargs="*", default=[],
                    help="with --evaluate: test splits (parquet) whose questions the held-out split leaves out, "
                         "e.g. those an earlier evaluation read")
    ap.add_argument("--rescore", nargs="*", default=[],
                    help="held-out run folders (held_out.jsonl) to score again against today's routes (rescore())")
    ap.add_argument("--versus", nargs="*", default=[],
                    help="with --rescore: one held-out run per rescored run, on the same questions (another policy): "
                         "the paired interval of the rescored policy minus it")
    ap.add_argument("--greedy-penalties", default="",
                    help="comma-separated greedy frequency penalties: --evaluate picks one on the run's own "
                         "training questions (--select-questions of them), then scores the held-out set with it")
    ap.add_argument("--select-questions", type=int, default=256)
    ap.add_argument("--steps", default="",
                    help="comma-separated checkpoint steps: --greedy-penalties' choice is made over them too "
                         "(default: the last checkpoint)")
    ap.add_argument("--name", default="routing")
    ap.add_argument("--out", default=str(STUDY_RESULTS))
    args = ap.parse_args()
    from rlrouter.data.build import load_router_r1_split
    from rlrouter.eval.route_scores import alpha_sweep, cost_bounds, escalation_value, route_table
    from rlrouter.pool.pool import CandidatePool, read_pool_config

    t0 = time.perf_counter()
    penalties = [float(x) for x in args.greedy_penalties.split(",")] if args.greedy_penalties else None
    steps = [int(x) for x in args.steps.split(",")] if args.steps else None
    evaluated = [evaluate_run(r, args.questions, penalties, args.select_questions, args.unread, steps)
                 for r in args.evaluate]
    runs = list(args.runs) + [r for r, _ in evaluated]
    selections = {Path(r).name: sel for r, sel in evaluated if sel is not None}
    exclude = args.exclude
    if exclude is None:
        default = ROOT / "outputs" / "data" / "gsm8k_mmlu_n512-128_s0" / "test.parquet"
        exclude = [str(default)] if default.exists() else []
    pool = CandidatePool.from_config(read_pool_config(ROOT / "conf" / "pool" / "routellm_replay.yaml"))
    items = logged_items(excluded_prompts(exclude))
    table = route_table(pool, items)
    sweeps = {"logs as they are": alpha_sweep(table, ALPHAS), "job mix (tasks equal)": alpha_sweep(balanced(table), ALPHAS)}
    # what a second call after the cheap reply is worth: on the sweep's mix, and on the default job's training
    # questions at their own cost window (the training reward's)
    sets = {"job mix (tasks equal)": balanced(table)}
    train_split = ROOT / "outputs" / "data" / "gsm8k_mmlu_n512-128_s0" / "train.parquet"
    if train_split.exists():
        sets["make run's training questions"] = route_table(pool, load_router_r1_split(train_split))
    values = {name: {str(a): escalation_value(t, a, cost_bounds(t.cost)) for a in ESCALATION_ALPHAS}
              for name, t in sets.items()}
    shown = [str(Path(e).resolve().relative_to(ROOT)) if Path(e).resolve().is_relative_to(ROOT) else e for e in exclude]
    kept = json.loads(Path(args.runs_from).read_text())["runs"] if args.runs_from else []
    if args.versus and len(args.versus) != len(args.rescore):
        raise SystemExit(f"--versus: one held-out run per --rescore run ({len(args.rescore)}), got {len(args.versus)}")
    rescored = [rescore(r, v) for r, v in zip(args.rescore, args.versus or [None] * len(args.rescore))]
    result = {"alphas": ALPHAS, "excluded": shown, "questions": len(items), "sweeps": sweeps,
              "runs": kept + [{**run_entry(r), **({"selection": selections[Path(r).name]}
                                                   if Path(r).name in selections else {})} for r in runs],
              "escalation_value": values, **({"rescored": rescored} if rescored else {})}
    for mix, sweep in sweeps.items():
        best = max(sweep["rows"], key=lambda r: r["per_task_rule_reward"] - r["best_fixed_reward"])
        sweep["most_per_task_gain"] = {"alpha": best["alpha"],
                                       "gain": best["per_task_rule_reward"] - best["best_fixed_reward"]}
        print(f"{mix}: tasks' best routes differ at alpha {sweep['tasks_differ']['alphas']}; largest per-task "
              f"gain over the best fixed route {sweep['most_per_task_gain']['gain']:+.4f} at alpha "
              f"{best['alpha']:g} (oracle {best['oracle_reward']:.3f}, best fixed {best['best_fixed_reward']:.3f})")
        casc = max(sweep["rows"], key=lambda r: r["cascade_reward"] - r["best_fixed_reward"])
        sweep["most_cascade_gain"] = {"alpha": casc["alpha"], "gain": casc["cascade_reward"] - casc["best_fixed_reward"]}
        print(f"{mix}: the cascade's largest gain over the best fixed route {sweep['most_cascade_gain']['gain']:+.4f} "
              f"at alpha {casc['alpha']:g}")
    result["seconds"] = time.perf_counter() - t0
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    write_result(out / f"{args.name}.json", result, MEASURES, indent=1)
    md = "".join(f"### {mix}\n\n{sweep_table(sweep)}\n" for mix, sweep in sweeps.items())
    md += "".join(f"### telling each task's routes apart: {mix}\n\n{gap_table(sweep)}\n" for mix, sweep in sweeps.items())
    md += "### a second call after the cheap reply\n\n" + escalation_table(values) + "\n"
    if result["runs"]:
        md += "### trained runs\n\n" + runs_table(result["runs"])
    if rescored:
        md += "### held-out runs scored again\n\n" + rescored_table(rescored)
    (out / f"{args.name}.md").write_text(md)
    print(md)
    plot(result, out / f"{args.name}.png")
    if result["runs"]:
        plot_curves(result["runs"], out / f"{args.name}_curves.png")
        if any(r.get("escalation_curve") for r in result["runs"]):
            plot_escalation(result["runs"], out / f"{args.name}_escalation.png")
    print(f"wrote {out / (args.name + '.json')} and .png ({result['seconds']:.1f} s)")


if __name__ == "__main__":
    main()
