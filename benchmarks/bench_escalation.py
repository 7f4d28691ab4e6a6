"""Does a Router-R1 policy's next move depend on the reply it just read? A teacher-forced probe.

For each held-out GSM8K question, the trajectory is forced up to the first reply: the prompt, a search
turn to the cheap candidate (as a demonstration writes it, ``rlrouter.rollout.demos``) and that
candidate's logged reply in ``<information>``, cut as the rollout cuts it. The probe then reads the
policy's log-probability of its two next moves: escalating (``<think>I will ask <strong>...</search>``,
the search turn a two-call demonstration writes) and answering (``<think>The reply says <answer
key>.</think>\\n<answer>...</answer>``). ``P(escalate) = sigmoid(log p(escalate) - log p(answer))``,
averaged over the questions whose reply states a final answer and over those whose reply does not
(``rlrouter.selector.aggregate.states_answer``). A policy that reads the reply escalates more where it
states none; the cascade of ``bench_routing.py`` escalates on all of those and none of the others.

The whole-turn probability also carries everything after the choice: the two turns' lengths and, in
the answer turn, how likely the policy finds the number it would copy (a guess where the reply states
none). So the probe also reads the decision point, the first token where the two moves differ (``I``
of "I will ask" against ``The`` of "The reply says", right after ``<think>``): the policy's odds of the
escalating token against the answering one there, and whether it is the most likely token (what greedy
decoding would write). A policy that has learned when to escalate differs between the two kinds of reply
*there*; a contrast in the whole-turn probability alone is the answer turn's content, not a choice.

Greedy held-out counts (``report.json``'s ``policy_escalation``) say what the policy did; this says
how far each checkpoint is from doing otherwise, step by step, without sampling.

    python benchmarks/bench_escalation.py --run outputs/r26_casc [--data outputs/data/heldout_r26_casc_400]

``--groups N`` asks what RL's reward says instead: from each checkpoint it samples N trajectories (as a
GRPO group does, at the run's temperature, ``transformers`` generation) on each of the run's
``curriculum.no_answer_share`` questions (training questions whose cheap reply states no final answer), each
starting after the written call to the cheap candidate (``curriculum.no_answer_first_call``), scores them with
the run's training reward and splits them into those that escalated and those that answered: mean reward,
format validity, accuracy, the share cut by the trajectory's token budget (``rollout.env.max_total_tokens``)
and, over groups holding both, the mean reward of escalating minus answering (the sign GRPO's advantage
gives the escalating turn). The table's notes count, per branch, the format rule each broken trajectory
breaks and the trajectories that write a ``<search>`` in the answer-only turn; the JSON keeps every
trajectory's text. ``--env key=value`` changes the run's ``rollout.env`` for the sample.

    python benchmarks/bench_escalation.py --run outputs/r29_mark --steps 4 --groups 6 [--env max_total_tokens=1536]

Writes ``escalation.json``, ``.md`` (the table) and ``.png`` (``--name`` changes the stem) beside its study (``STUDY_RESULTS``).
"""

from __future__ import annotations

import argparse
import math
import re
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
STUDY = "2026-11-router-r1-two-models"
"""The dated study this script belongs to (docs/experiments/): its results go there; make bench leaves it out."""
STUDY_RESULTS = ROOT / "docs" / "experiments" / STUDY / "results"
sys.path.insert(0, str(ROOT))

from rlrouter.provenance import write_result  # noqa: E402

# what this benchmark's figures depend on (rlrouter.provenance: the staleness report lists its results when these change)
MEASURES = ("benchmarks/bench_escalation.py", "rlrouter/rollout", "rlrouter/rewards", "rlrouter/pool",
            "rlrouter/trainer", "rlrouter/eval/route_scores.py")


def probe(checkpoint: Path, base_model: str, items: list[dict], pool, env_cfg) -> list[dict]:
    """Each item's log-probs of escalating and of answering after the cheap reply, under ``checkpoint``'s
    policy."""
    import torch
    from transformers import AutoModelForCausalLM

    from rlrouter.algos.common import token_logprobs
    from rlrouter.eval.route_scores import cheapest, strongest
    from rlrouter.models import load_tokenizer
    from rlrouter.rollout.demos import answer_turn, demo_tokens, search_turn, short_query, shown_reply, shown_text
    from rlrouter.rollout.policy import merged_policy_dir
    from rlrouter.selector.aggregate import answer_key, states_answer

    model = AutoModelForCausalLM.from_pretrained(merged_policy_dir(checkpoint, base_model), dtype=torch.float32).eval()
    tok = load_tokenizer(base_model)
    cands = [pool.get(n) for n in pool.names]
    cheap, strong = cheapest(cands), strongest(cands)
    replies = pool.route_sync([(cheap, it["query"]) for it in items])
    out = []
    for it, reply in zip(items, replies):
        sub_query = short_query(it["query"])
        shown = shown_reply(reply, env_cfg.info_max_chars, env_cfg.mark_no_answer)
        demo = {"query": it["query"], "segments": [(search_turn(cheap, sub_query), True), (shown, False)],
                "calls": [cheap], "sub_query": sub_query}
        prefix = demo_tokens(demo, tok, cands, env_cfg).input_ids
        key = answer_key(shown_text(shown))
        moves = {"escalate": "<think>" + search_turn(strong, sub_query),
                 "answer": answer_turn(key)}
        logp, ids = {}, {name: tok.encode(text, add_special_tokens=False) for name, text in moves.items()}
        # the decision point: the first token where the two moves differ (greedy decoding chooses there)
        d = next(i for i, (a, b) in enumerate(zip(ids["escalate"], ids["answer"])) if a != b)
        for name in moves:
            x = torch.tensor([list(prefix) + ids[name]])
            with torch.no_grad():
                logits = model(x).logits
            logp[name] = float(token_logprobs(logits, x)[0, len(prefix):].sum())
            if name == "escalate":
                at = torch.log_softmax(logits[0, len(prefix) + d - 1].float(), -1)
                first = {"escalate": float(at[ids["escalate"][d]]), "answer": float(at[ids["answer"][d]])}
                greedy = int(at.argmax()) == ids["escalate"][d]
        out.append({"query": it["query"], "stated": states_answer(reply.text or "") if reply.ok else False,
                    "logp_escalate": logp["escalate"], "logp_answer": logp["answer"],
                    "p_escalate": _sigmoid(logp["escalate"] - logp["answer"]),
                    "p_escalate_first": _sigmoid(first["escalate"] - first["answer"]), "greedy_escalates": greedy})
    return out


def sampled_groups(run: Path, checkpoint: Path, n: int, env_changes: dict, seed: int = 1) -> dict:
    """``n`` sampled trajectories per stratum question from ``checkpoint``, scored with the run's training
    reward, split by whether they escalated (see the module docstring)."""
    from omegaconf import OmegaConf

    from rlrouter.config import to_plain
    from rlrouter.data.build import load_router_r1_split
    from rlrouter.models import load_tokenizer
    from rlrouter.pool.pool import CandidatePool
    from rlrouter.rewards.router_r1 import score_trajectories
    from rlrouter.rollout.demos import with_first_turn
    from rlrouter.rollout.env import EnvConfig, RouterEnv
    from rlrouter.rollout.hf_backend import HFGenerator
    from rlrouter.rollout.policy import merged_policy_dir
    from rlrouter.trainer.job import RouterR1JobConfig, no_answer_items, set_reference
    from rlrouter.trainer.router_r1 import build_train_reward

    cfg = OmegaConf.load(run / "config.yaml")
    for k, v in env_changes.items():
        OmegaConf.update(cfg, f"rollout.env.{k}", v)
    train_path = Path(cfg.data.out_dir) / "train.parquet"
    items = load_router_r1_split(train_path if train_path.is_absolute() else ROOT / train_path)
    pool = CandidatePool.from_config(to_plain(cfg.pool))
    job = RouterR1JobConfig.from_cfg(cfg)  # an old run's config.yaml: its train.no_answer_share etc. read as curriculum fields
    train = job.train
    train.out_dir, train.train_path = str(run), str(train_path)
    table = set_reference(train, pool, items)
    if table is None:
        raise SystemExit(f"{run}: --groups needs a replay pool (the stratum is read from its logged replies)")
    stratum = [with_first_turn(items[i], table.cheap, job.demos.query_words) for i in no_answer_items(table)]
    env_cfg = EnvConfig(**{k: v for k, v in job.env.items() if k in EnvConfig.__dataclass_fields__})
    tok = load_tokenizer(cfg.model)
    gen = HFGenerator(merged_policy_dir(checkpoint, cfg.model), tok)  # one request at a time, each its own seed
    trajs = RouterEnv(env_cfg, tok, pool, gen.generate_ids).run(stratum, n_samples=n, seed=seed)
    scores = score_trajectories(build_train_reward(train, pool.names), trajs)
    rows = [{"question": t.prompt_index, "escalated": len(t.routes) >= 2, "reward": s.total,
             "format_valid": s.format == 0.0, "correct": s.outcome == 1.0,
             "budget_cut": len(t.tokens) >= env_cfg.max_total_tokens, "tokens": len(t.tokens),
             "format_error": format_rule(s.failure),
             "late_search": t.text.count("<search>") > env_cfg.max_turns, "text": t.text}
            for t, s in zip(trajs, scores)]

    return {"questions": len(stratum), "samples": n, "env": {"max_total_tokens": env_cfg.max_total_tokens,
                                                             "mark_no_answer": env_cfg.mark_no_answer},
            **branch_summary(rows, n), "format_failures": failure_counts(rows), "rows": rows}


def format_rule(reason: str | None) -> str | None:
    """The format rule a failure reason names (the reward's ``RouterR1Score.failure``, a ``FormatError``
    message), its quoted detail and numbers cut off so that equal failures count together; ``None`` for
    none."""
    return None if reason is None else re.sub(r"\d+", "N", reason.split(": '")[0].split(" '")[0])


def failure_counts(rows: list[dict]) -> dict:
    """``by_rule``: per branch (escalated, answered), how many trajectories broke each format rule, most
    first; ``late_search``: per branch, how many wrote a ``<search>`` in the answer-only turn (more than
    ``max_turns``)."""
    branches = (("escalated", True), ("answered", False))
    by_rule = {}
    for branch, want in branches:
        counts: dict[str, int] = {}
        for r in rows:
            if r["escalated"] == want and r.get("format_error"):
                counts[r["format_error"]] = counts.get(r["format_error"], 0) + 1
        by_rule[branch] = dict(sorted(counts.items(), key=lambda kv: -kv[1]))
    return {"by_rule": by_rule,
            "late_search": {b: sum(1 for r in rows if r["escalated"] == want and r.get("late_search"))
                            for b, want in branches}}


def branch_summary(rows: list[dict], n: int) -> dict:
    """Per branch (escalated, answered): count and mean reward, format validity, accuracy, budget cuts and
    tokens; and over the groups (``n`` consecutive rows, one question) holding both branches, the mean of
    (mean reward escalating - mean reward answering)."""
    def part(sel: list[dict]) -> dict:
        mean = lambda key: sum(float(r[key]) for r in sel) / len(sel) if sel else float("nan")  # noqa: E731
        return {"n": len(sel), **{k: mean(k) for k in ("reward", "format_valid", "correct", "budget_cut", "tokens")}}

    gaps = []
    for q in range(0, len(rows), n):
        g = rows[q:q + n]
        esc, ans = [r["reward"] for r in g if r["escalated"]], [r["reward"] for r in g if not r["escalated"]]
        if esc and ans:
            gaps.append(sum(esc) / len(esc) - sum(ans) / len(ans))
    return {"escalated": part([r for r in rows if r["escalated"]]),
            "answered": part([r for r in rows if not r["escalated"]]),
            "groups_with_both": len(gaps), "escalate_minus_answer": sum(gaps) / len(gaps) if gaps else float("nan")}


def groups_markdown(entries: list[dict]) -> str:
    """One row per (run, checkpoint, budget): each branch's reward, format validity, accuracy and budget cuts."""
    lines = ["  | run | RL step | token budget | escalated: n, reward, format valid, correct, cut by budget |"
             " answered: n, reward, format valid, correct, cut by budget | escalate - answer (groups) |",
             "  |---|---|---|---|---|---|"]
    for e in entries:
        g = e["groups"]
        cell = lambda b: (f"{b['n']}, {b['reward']:.3f}, {b['format_valid']:.2f}, {b['correct']:.2f}, "  # noqa: E731
                          f"{b['budget_cut']:.2f}")
        lines.append(f"  | {Path(e['run']).name} | {e['step']} | {g['env']['max_total_tokens']} | {cell(g['escalated'])} | "
                     f"{cell(g['answered'])} | {g['escalate_minus_answer']:+.3f} ({g['groups_with_both']}) |")
    notes = []
    for e in entries:
        fails = e["groups"].get("format_failures") or {}
        parts = [f"{b}: " + (", ".join(f"{k} {v}" for k, v in c.items()) or "none")
                 for b, c in fails.get("by_rule", {}).items()]
        late = fails.get("late_search")
        if parts:
            notes.append(f"  - {Path(e['run']).name} step {e['step']}, broken format by rule: " + "; ".join(parts)
                         + (f"; a search in the answer-only turn: escalated {late['escalated']}, answered "
                            f"{late['answered']}" if late else ""))
    return "\n".join(lines) + "\n" + ("\n" + "\n".join(notes) + "\n" if notes else "")


def _sigmoid(x: float) -> float:
    return 1.0 / (1.0 + math.exp(min(50.0, -x)))


def summary(rows: list[dict]) -> dict:
    def mean(xs: list[float]) -> float:
        return sum(xs) / len(xs) if xs else float("nan")

    by = {name: [r for r in rows if r["stated"] == want] for name, want in (("stated", True), ("not_stated", False))}
    out = {k: {"n": len(v), "mean_p_escalate": mean([r["p_escalate"] for r in v]),
               "mean_p_escalate_first": mean([r["p_escalate_first"] for r in v]),
               "greedy_escalates": mean([float(r["greedy_escalates"]) for r in v])} for k, v in by.items()}
    return out | {"gap": out["not_stated"]["mean_p_escalate"] - out["stated"]["mean_p_escalate"]}


def odds_ratio(summary_: dict) -> float:
    """Odds of escalating after a reply without an answer over the odds after one with an answer (of the
    mean probabilities); NaN where either is below 0.01 or above 0.99 (a ratio of two near-zeros says nothing)."""
    a, b = summary_["not_stated"]["mean_p_escalate"], summary_["stated"]["mean_p_escalate"]
    if not 0.01 <= a <= 0.99 or not 0.01 <= b <= 0.99:
        return float("nan")
    return (a / (1 - a)) / (b / (1 - b))


def _has_decision_point(result: dict) -> bool:
    """Whether every checkpoint of a result has the decision-point reading (results written before it lack it)."""
    return all("mean_p_escalate_first" in c["summary"]["stated"] for run in result["runs"] for c in run["checkpoints"])


def markdown(result: dict) -> str:
    """One row per probed checkpoint: mean P(escalate) after each kind of reply, and their odds ratio; with
    the decision point (results written since it is measured), the first differing token's P(escalate) and
    the share of questions where greedy decoding would take the escalating token there."""
    first = _has_decision_point(result)
    head = "  | run | RL step | P(escalate): reply states no answer | P(escalate): reply states one | odds ratio |"
    rule = "  |---|---|---|---|---|"
    if first:
        head += " first token P(escalate): no answer / one | greedy escalates: no answer / one |"
        rule += "---|---|"
    lines = [head, rule]
    for run in result["runs"]:
        for c in run["checkpoints"]:
            s = c["summary"]
            r = odds_ratio(s)
            line = (f"  | {Path(run['run']).name} | {c['step']} | {s['not_stated']['mean_p_escalate']:.3f} | "
                    f"{s['stated']['mean_p_escalate']:.3f} | {'–' if r != r else f'{r:.1f}'} |")
            if first:
                no, one = s["not_stated"], s["stated"]
                line += (f" {no['mean_p_escalate_first']:.3f} / {one['mean_p_escalate_first']:.3f} |"
                         f" {no['greedy_escalates']:.2f} / {one['greedy_escalates']:.2f} |")
            lines.append(line)
    return "\n".join(lines) + "\n"


def plot(result: dict, path: Path) -> None:
    """Mean P(escalate) per checkpoint after each kind of reply: over whole turns and, where measured, at the
    decision point (a second panel)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    first = _has_decision_point(result)
    panels = (("mean_p_escalate", "whole turns"),) + ((("mean_p_escalate_first", "decision point (first token)"),)
                                                      if first else ())
    fig, axes = plt.subplots(1, len(panels), figsize=(7 * len(panels), 4), squeeze=False)
    for ax, (key, title) in zip(axes[0], panels):
        for run in result["runs"]:
            steps = [c["step"] for c in run["checkpoints"]]
            for name, ls in (("not_stated", "-"), ("stated", "--")):
                ax.plot(steps, [c["summary"][name][key] for c in run["checkpoints"]], marker="o", ls=ls,
                        label=f"{Path(run['run']).name}: reply states {'no' if name == 'not_stated' else 'an'} answer")
        ax.set_xlabel("RL step (0 = after the cold start)"), ax.set_ylabel("mean P(escalate) after the cheap reply")
        ax.set_title(f"P(escalate), {title} (teacher-forced, held-out GSM8K)", fontsize=9)
        ax.set_ylim(-0.02, 1.02), ax.grid(alpha=0.3), ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--run", nargs="*", default=[], help="run folders; every saved checkpoint is probed")
    ap.add_argument("--data", default=None,
                    help="a data folder whose test split holds the questions (default: the run's own test split)")
    ap.add_argument("--task", default="gsm8k", help="the task whose questions are probed (its replies can lack an answer)")
    ap.add_argument("--name", default="escalation")
    ap.add_argument("--out", default=str(STUDY_RESULTS))
    ap.add_argument("--limit", type=int, default=0, help="probe only the first N questions (0: all)")
    ap.add_argument("--stated", type=int, default=40,
                    help="probe every question whose cheap reply states no answer, and only the first N of those "
                         "whose reply states one (0: all; each question costs about a second per checkpoint)")
    ap.add_argument("--steps", default="", help="comma-separated checkpoint steps to probe (default: every one saved)")
    ap.add_argument("--groups", type=int, default=0,
                    help="instead of the probe: sample N trajectories per no-answer training question (module docstring)")
    ap.add_argument("--env", nargs="*", default=[], metavar="KEY=VALUE",
                    help="with --groups: rollout.env changes for the sample (e.g. max_total_tokens=1536)")
    args = ap.parse_args()
    if args.groups and args.run:
        return _groups_main(args)
    if not args.run:  # make bench runs every script without arguments: there is no trained run to probe
        print("bench_escalation: nothing to probe; give --run <run folder> (a trained Router-R1 run)")
        return
    import yaml

    from rlrouter.data.build import load_router_r1_split
    from rlrouter.eval.route_scores import cheapest, task_of
    from rlrouter.pool.pool import CandidatePool
    from rlrouter.progress import Progress
    from rlrouter.rollout.env import EnvConfig
    from rlrouter.selector.aggregate import states_answer

    t0 = time.perf_counter()
    runs = []
    for run_dir in args.run:
        run = Path(run_dir).resolve()
        cfg = yaml.safe_load((run / "config.yaml").read_text())
        data = Path(args.data or cfg["data"]["out_dir"])
        data = data if data.is_absolute() else ROOT / data
        items = [it for it in load_router_r1_split(data / "test.parquet") if task_of(it) == args.task]
        items = items[:args.limit] if args.limit else items
        if not items:
            raise SystemExit(f"--task {args.task}: no such question in {data / 'test.parquet'}")
        pool = CandidatePool.from_config(cfg["pool"])
        if args.stated:
            cheap = cheapest([pool.get(n) for n in pool.names])
            stated = [r.ok and states_answer(r.text or "") for r in pool.route_sync([(cheap, it["query"]) for it in items])]
            keep = [i for i, st in enumerate(stated) if not st] + [i for i, st in enumerate(stated) if st][:args.stated]
            items = [items[i] for i in sorted(keep)]
        env_cfg = EnvConfig(**{k: v for k, v in cfg["rollout"]["env"].items() if k in EnvConfig.__dataclass_fields__})
        ckpts = _checkpoints(run, args.steps)
        entry = {"run": _rel(run), "data": _rel(data),
                 "questions": len(items), "checkpoints": []}
        bar = Progress(len(ckpts), f"probe {run.name}", unit="checkpoint")
        for ck in ckpts:
            rows = probe(ck, cfg["model"], items, pool, env_cfg)
            bar.update()
            entry["checkpoints"].append({"step": int(ck.name.removeprefix("step_")), "summary": summary(rows),
                                         "rows": rows})
            s = entry["checkpoints"][-1]["summary"]
            print(f"{run.name} {ck.name}: P(escalate) reply states no answer {s['not_stated']['mean_p_escalate']:.3f} "
                  f"(n {s['not_stated']['n']}), states one {s['stated']['mean_p_escalate']:.3f} (n {s['stated']['n']})")
        bar.close()
        runs.append(entry)
    result = {"runs": runs, "seconds": time.perf_counter() - t0}
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    write_result(out / f"{args.name}.json", result, MEASURES, indent=1)
    (out / f"{args.name}.md").write_text(markdown(result))
    print(markdown(result))
    plot(result, out / f"{args.name}.png")
    print(f"wrote {out / (args.name + '.json')} and .png ({result['seconds']:.0f} s)")


def _checkpoints(run: Path, steps: str) -> list[Path]:
    """RUN's saved checkpoints, only those of STEPS (comma-separated) when given; none is an error."""
    ckpts = sorted((run / "checkpoints").glob("step_*"))
    if steps:
        wanted = {int(x) for x in steps.split(",")}
        ckpts = [c for c in ckpts if int(c.name.removeprefix("step_")) in wanted]
    if not ckpts:
        raise SystemExit(f"{run}: no checkpoints")
    return ckpts


def _rel(path: Path) -> str:
    return str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path)


def _groups_main(args: argparse.Namespace) -> None:
    import yaml

    changes = {}
    for kv in args.env:
        key, sep, value = kv.partition("=")
        if not sep:
            raise SystemExit(f"--env {kv!r}: expected KEY=VALUE")
        changes[key] = yaml.safe_load(value)
    t0 = time.perf_counter()
    entries = []
    for run_dir in args.run:
        run = Path(run_dir).resolve()
        for ck in _checkpoints(run, args.steps):
            g = sampled_groups(run, ck, args.groups, changes)
            entries.append({"run": _rel(run), "step": int(ck.name.removeprefix("step_")), "groups": g})
            print(groups_markdown(entries[-1:]))
    result = {"mode": "groups", "env_changes": changes, "entries": entries, "seconds": time.perf_counter() - t0}
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    write_result(out / f"{args.name}.json", result, MEASURES, indent=1)
    (out / f"{args.name}.md").write_text(groups_markdown(entries))
    print(groups_markdown(entries))
    print(f"wrote {out / (args.name + '.json')} ({result['seconds']:.0f} s)")


if __name__ == "__main__":
    main()
