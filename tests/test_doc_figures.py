"""The figures the docs quote are the committed results' figures (``benchmarks/results/*.json``, and a dated
study's own ``docs/experiments/<study>/results/*.json``).

Each :class:`Figure` names a doc, a results file, a path into it and a formatter that turns the value
found there into the text the doc must contain. The doc is compared with bold markers removed and
whitespace collapsed, so a re-wrapped paragraph still matches. To pin another figure, add an entry.
"""

from __future__ import annotations

import json
import os
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import ROOT

RESULTS = ROOT / "benchmarks" / "results"
TWO_MODELS = "docs/experiments/2026-11-router-r1-two-models.md"
"""The Router-R1 study between GPT-4 and Mixtral: its history, moved out of the README."""
TWO_MODELS_RESULTS = "docs/experiments/2026-11-router-r1-two-models/results"
"""The results only that study quotes (its runs' variants), beside it rather than in benchmarks/results/."""
ROUTERBENCH = "docs/experiments/2026-12-router-r1-routerbench.md"
"""Router-R1 at scale on RouterBench's 11 LLMs: the runs before the preset, the pilots, the at-scale run."""
ROUTERBENCH_RESULTS = "docs/experiments/2026-12-router-r1-routerbench/results"
NEVER_IN_A_DOC = "\u2063the condition behind this figure no longer holds\u2063"
"""What a conditional figure expects when its condition fails: text no doc holds, so the check fails (the old
fallback, "differs", was a word the docs contain, and those checks could never fail)."""


@dataclass(frozen=True)
class Figure:
    doc: str
    """The doc, relative to the project root."""
    results: str
    """A file under benchmarks/results/ (a plain name), or a path from the project root (a name with a "/"): a
    study's own results under docs/experiments/<study>/results/."""
    path: str
    """Dotted keys into that JSON (a number indexes a list); "" is the whole file."""
    fmt: Callable[[Any], str]
    """The value -> the text the doc must contain."""
    what: str
    """A short name for the test id."""

    @property
    def file(self) -> Path:
        """The results file this figure reads."""
        return result_path(self.results)


def result_path(results: str) -> Path:
    """A Figure's ``results``: a plain name is a file under benchmarks/results/, a name with a "/" a path from
    the project root."""
    return ROOT / results if "/" in results else RESULTS / results


def _interval(d: dict[str, Any]) -> str:
    """A paired difference as the docs write it: value [low, high]."""
    return f"{d['value']:+.3f} [{d['lo']:+.3f}, {d['hi']:+.3f}]"


def _escalated(board: dict[str, Any], kind: str, of: str = "of") -> str:
    """How often a routing board's policy escalated after one kind of cheap reply: "16 of 18"."""
    e = board["policy_escalation"][kind]
    return f"{e['escalated']:,} {of} {e['n']:,}"


def _esc(cell: dict[str, Any]) -> str:
    """A second call's worth after one kind of cheap reply: "-0.053 (se 0.032"; the caller closes it."""
    return f"{cell['mean']:+.3f} (se {cell['se']:.3f}"


def _second_call_036(v: dict[str, Any]) -> str:
    """What the r37 paragraph quotes at alpha 0.36: make run's training questions, then the sweep's job mix."""
    a, mix = v["make run's training questions"]["0.36"], v["job mix (tasks equal)"]["0.36"]
    per_task = mix["gsm8k"]["stated"]["n"] + mix["gsm8k"]["not_stated"]["n"]
    return (f"by {_esc(a['gsm8k']['stated'])}) a question on GSM8K ({a['gsm8k']['stated']['n']} questions) and "
            f"{_esc(a['mmlu']['stated'])}) on MMLU ({a['mmlu']['stated']['n']} questions), and after a reply that "
            f"states no answer by {_esc(a['gsm8k']['not_stated'])}, {a['gsm8k']['not_stated']['n']} questions); "
            f"on the sweep's job mix ({per_task:,} questions a task) {mix['gsm8k']['stated']['mean']:+.3f}, "
            f"{mix['mmlu']['stated']['mean']:+.3f} and {mix['gsm8k']['not_stated']['mean']:+.3f}.")


def _second_call_050(v: dict[str, Any]) -> str:
    b = v["make run's training questions"]["0.5"]
    return (f"At alpha 0.5 the training questions give {_esc(b['gsm8k']['stated'])}) on GSM8K, "
            f"{_esc(b['mmlu']['stated'])}) on MMLU and {_esc(b['gsm8k']['not_stated'])}) after no answer")


def _curve_row(label: str) -> Callable[[list[dict[str, Any]]], str]:
    """A held-out curve's mean rewards as a table row headed ``label``."""
    return lambda c: f"| {label} | " + " | ".join(f"{m['eval/mean_reward']:.3f}" for m in c) + " |"


def lookup(data: Any, path: str) -> Any:
    for key in filter(None, path.split(".")):
        data = data[int(key)] if isinstance(data, list) else data[key]
    return data


def _three(values: list[float], fmt: str) -> str:
    return f"{format(values[0], fmt)}, {format(values[1], fmt)} and {format(values[2], fmt)}"


def _every_call_cost(r: dict[str, Any]) -> str:
    """A cascade's cost with every call priced, and the random mix at that cost, per seed."""
    at = [r["per_seed"][s]["random_quality_at_cost_all_calls"] for s in "012"]
    gain = [r["per_seed"][s]["quality"] - a for s, a in zip("012", at)]
    return (f"costs ${1000 * r['cost_mean_all_calls']:.3f} per 1k prompts, and the random mix at that cost scores "
            f"{_three(at, '.3f')}: the policy stays above it on every seed, by {_three(gain, '+.3f')}")


def normalised(text: str) -> str:
    return " ".join(text.replace("**", "").split())


# -- docs/operations.md: benchmarks/results/{fuzz,durability,faults}.json --------------------------------

OPERATIONS = "docs/operations.md"
OPERATIONS_FIGURES = [
    Figure(OPERATIONS, "fuzz_live.json", "slow_client",
           lambda v: f"answered `{v['answer']}` after {v['after_s']:.0f} s", "slow client, live"),
    Figure(OPERATIONS, "fuzz.json", "slow_client", lambda v: "in-process `slow_client` is null" if v is None else "-",
           "slow client, in-process"),
    Figure(OPERATIONS, "faults.json", "runs",
           lambda runs: "completed (clean {:.0f} s, faulted {:.0f} s)".format(*(r["wall_s"] for r in runs)),
           "faults wall times"),
    Figure(OPERATIONS, "faults.json", "final_metrics_vs_clean",
           lambda c: f"({c['keys_compared']} keys, max abs diff {c['max_abs_diff']:.2g})", "faults final metrics"),
]

# -- docs/gmtrouter.md: benchmarks/results/gmtrouter.json ------------------------------------------------

GMT = "docs/gmtrouter.md"
SHORT_NAMES = {"mistralai/Mixtral-8x7B-Instruct-v0.1": "Mixtral-8x7B", "gpt-4-1106-preview": "GPT-4"}


def _gmt_row(label: str, method: str, std: bool) -> Callable[[dict[str, Any]], str]:
    def fmt(d: dict[str, Any]) -> str:
        seeds = " | ".join(f"{r['methods'][method]['auc']:.3f}" for r in d["runs"])
        s = d["summary"][method]
        mean = f"{s['auc']['mean']:.3f}" + (f" +- {s['auc']['std']:.3f}" if std else "")
        return f"| {label} | {seeds} | {mean} | {s['accuracy']['mean']:.3f} |"
    return fmt


def _best_single(d: dict[str, Any]) -> str:
    models = [SHORT_NAMES[r["methods"]["best_single"]["model"]] for r in d["runs"]]
    which = f"{models[0]} on both seeds" if len(set(models)) == 1 else " / ".join(models)
    return _gmt_row(f"best single model ({which})", "best_single", std=False)(d)


def _few_shot_row(label: str, method: str, seed: int) -> Callable[[dict[str, Any]], str]:
    def fmt(d: dict[str, Any]) -> str:
        curve = d["runs"][seed]["few_shot"]["curve"]
        return f"| {label}, seed {seed} | " + " | ".join(f"{p[method]['accuracy']:.3f}" for p in curve) + " |"
    return fmt


GMT_FIGURES = [
    Figure(GMT, "gmtrouter.json", "", _gmt_row("GMTRouter (HGT, 3 layers)", "gmtrouter", std=True), "row gmtrouter"),
    Figure(GMT, "gmtrouter.json", "", _gmt_row("per-user Beta posterior", "per_user_beta", std=True), "row per-user"),
    Figure(GMT, "gmtrouter.json", "", _gmt_row("MLP on query embeddings", "query_mlp", std=False), "row query MLP"),
    Figure(GMT, "gmtrouter.json", "", _gmt_row("global Thompson sampling (posterior mean)", "global_thompson",
                                               std=False), "row global TS"),
    Figure(GMT, "gmtrouter.json", "", _best_single, "row best single model"),
    Figure(GMT, "gmtrouter.json", "",
           lambda d: " / ".join(str(r["test_pairs"]) for r in d["runs"]) + " held-out test pairs", "test pairs"),
    Figure(GMT, "gmtrouter.json", "seconds", lambda v: f"{v:.0f} s for both seeds", "seconds"),
    *[Figure(GMT, "gmtrouter.json", "", _few_shot_row(label, method, seed), f"few-shot {method} seed {seed}")
      for seed in (0, 1) for label, method in (("GMTRouter", "gmtrouter"), ("per-user Beta", "per_user_beta"))],
]

# -- docs/evaluation.md: benchmarks/results/unseen_{variants,subjects}.json --------------------------------

EVALUATION = "docs/evaluation.md"
UNSEEN = "docs/experiments/2026-11-offline-routers-unseen-subjects.md"
"""The study of offline routers on unseen MMLU subjects: evaluation.md's development history."""
UNSEEN_RESULTS = "docs/experiments/2026-11-offline-routers-unseen-subjects/results"
"""The results only that study names (its runs' variants), beside it rather than in benchmarks/results/."""
MF_VARIANTS = ["MF (the baseline: torch seed 0, 30 epochs, ties 0.5)", "MF, torch seed 1", "MF, 5 epochs",
               "MF, ties dropped"]


def _mf_variants_seed0(variants: dict[str, Any]) -> str:
    apgr = [variants[v]["0"]["apgr"] for v in MF_VARIANTS]
    return f"lands at {min(apgr):.2f}–{max(apgr):.2f} there"


EVALUATION_FIGURES = [
    Figure(UNSEEN, f"{UNSEEN_RESULTS}/unseen_variants.json", "variants", _mf_variants_seed0, "MF variants on seed 0"),
    Figure(UNSEEN, f"{UNSEEN_RESULTS}/unseen_variants.json", "variants",
           lambda v: f"a plain logistic regression on the same embeddings at "
                     f"{v['logistic P(strong wins) on embeddings, l2 1']['0']['apgr']:.3f} with l2 1; only with "
                     f"l2 100 does it reach {v['logistic P(strong wins) on embeddings, l2 100']['0']['apgr']:.3f}",
           "logistic regression on seed 0"),
    Figure(UNSEEN, f"{UNSEEN_RESULTS}/unseen_subjects.json", "routers.random.per_seed.0.apgr", lambda v: f"above random's {v:.3f}",
           "random on seed 0"),
]


# -- the two-model make run (routing_make_run.json) and docs/benchmarks.md's routing tables (routing.json) --


def _sweep_table(sweep: dict[str, Any]) -> str:
    from benchmarks.bench_routing import sweep_table

    return sweep_table(sweep)


def _gap_table(sweep: dict[str, Any]) -> str:
    from benchmarks.bench_routing import gap_table

    return gap_table(sweep)


def _gap_036(sweep: dict[str, Any]) -> str:
    """Each task's questions to tell its routes apart at alpha 0.36, rounded to hundreds, as the docs write it."""
    row = next(r for r in sweep["rows"] if r["alpha"] == 0.36)["by_task"]
    n = {t: round(v["gap"]["questions_to_tell"], -2) for t, v in row.items()}
    return f"about {n['mmlu']:,} MMLU and {n['gsm8k']:,} GSM8K questions"


def _unseen_weak_split_table(summary: dict[str, Any]) -> str:
    """The weak-split table of bench_unseen_subjects' markdown (its last lines)."""
    from benchmarks.bench_unseen_subjects import markdown

    md = markdown(summary)
    return md[md.index("| router | strong share (mean)"):].strip()


def _unseen_apgr_rows(summary: dict[str, Any]) -> str:
    """The header and the routers with an APGR of bench_unseen_subjects' first table (its rows sorted by APGR)."""
    from benchmarks.bench_unseen_subjects import markdown

    lines = markdown(summary).splitlines()
    return "\n".join(lines[:2] + [ln for ln in lines[2:] if ln.startswith("| ") and "| – | – |" not in ln][:6])


def _escalation_table(d: dict[str, Any]) -> str:
    from benchmarks.bench_escalation import markdown

    return markdown(d)


def _groups_table(d: dict[str, Any]) -> str:
    from benchmarks.bench_escalation import groups_markdown

    return groups_markdown(d["entries"])


def _share_row(label: str) -> Callable[[list[dict[str, Any]]], str]:
    """A held-out curve's strong-call shares (GSM8K / MMLU) as a table row headed ``label``."""
    return lambda c: f"| {label} | " + " | ".join(
        f"{m['eval/strong_share/gsm8k']:.2f} / {m['eval/strong_share/mmlu']:.2f}" for m in c) + " |"


def _first(checkpoint: dict[str, Any]) -> str:
    s = checkpoint["summary"]
    return f"{s['not_stated']['mean_p_escalate_first']:.2f} / {s['stated']['mean_p_escalate_first']:.2f}"


MAKE_RUN = "runs.0"  # bench_routing.py --runs <the make run run> first
ROUTING_FIGURES = [
    Figure(TWO_MODELS, f"{TWO_MODELS_RESULTS}/routing_make_run.json", f"{MAKE_RUN}.routing.policy_minus_best_fixed",
           lambda d: f"policy minus best fixed route {d['value']:+.3f} [{d['lo']:+.3f}, {d['hi']:+.3f}]",
           "the two-model make run: policy minus best fixed"),
    Figure(TWO_MODELS, f"{TWO_MODELS_RESULTS}/routing_eval2000_t256_fp.json", "runs.2.routing.policy_minus_best_fixed",
           lambda d: f"({d['value']:+.3f} [{d['lo']:+.3f}, {d['hi']:+.3f}]", "make run: 2,000 held-out questions (two-model study)"),
    Figure(TWO_MODELS, f"{TWO_MODELS_RESULTS}/routing_eval2000_t256_fp.json", "runs.1.routing.policy_minus_best_fixed",
           lambda d: f"{d['value']:+.3f} without the greedy frequency penalty", "make run: 2,000, no penalty (two-model study)"),
    Figure(TWO_MODELS, f"{TWO_MODELS_RESULTS}/routing_eval2000_t256.json", "runs.1.routing.policy_minus_best_fixed",
           lambda d: f"**{d['value']:+.3f} [{d['lo']:+.3f},\n  {d['hi']:+.3f}]**", "benchmarks: 2,000 held-out questions"),
    Figure(TWO_MODELS, f"{TWO_MODELS_RESULTS}/routing_eval2000_t256_fp.json", "runs.2.selection.scored",
           lambda rows: "mean reward " + ", ".join(f"{r['mean_reward']:.3f}" for r in rows)
           + "; format validity " + ", ".join(f"{r['format_valid']:.3f}" for r in rows), "penalty picked on training"),
    Figure(TWO_MODELS, f"{TWO_MODELS_RESULTS}/routing_eval2000_t256_fp.json", "runs.2",
           lambda e: f"| {e['selection']['chosen']:g} | {e['results']['policy_trained']['mean_reward']:.3f} | "
                     f"{_interval(e['routing']['policy_minus_best_fixed'])} | "
                     f"{e['results']['policy_trained']['format_valid']:.3f} |", "penalty on 2,000 held-out"),
    Figure(TWO_MODELS, f"{TWO_MODELS_RESULTS}/routing_eval2000_s30.json", "runs.2.routing.policy_minus_best_fixed",
           lambda d: f"policy - best fixed route **{d['value']:+.3f}\n  [{d['lo']:+.3f}, {d['hi']:+.3f}]**",
           "30 steps on 2,000 held-out"),
    # larger groups (train.n_samples=8) from make run's own cold start, beside make run
    Figure(TWO_MODELS, f"{TWO_MODELS_RESULTS}/routing_groups.json", "runs",
           lambda runs: "Held-out reward on the 32 questions, steps 0 to 10: four samples "
                        + ", ".join(f"{e['eval/mean_reward']:.3f}" for e in runs[0]["held_out_curve"]) + "; eight "
                        + ", ".join(f"{e['eval/mean_reward']:.3f}" for e in runs[1]["held_out_curve"])
                        + f". At step 10 eight samples end **{runs[1]['routing']['policy_minus_best_fixed']['value']:+.3f} "
                        + _interval(runs[1]["routing"]["policy_minus_best_fixed"]).split(" ", 1)[1] + "** below always-Mixtral",
           "larger groups: curves"),
    Figure(TWO_MODELS, f"{TWO_MODELS_RESULTS}/routing_groups.json", "runs",
           lambda runs: "(GSM8K / MMLU " + " / ".join(f"{runs[1]['held_out_curve'][1][f'eval/strong_share/{t}']:.2f}"
                                                      for t in ("gsm8k", "mmlu"))
                        + " at\n  step 2 against " + " / ".join(f"{runs[0]['held_out_curve'][1][f'eval/strong_share/{t}']:.2f}"
                                                               for t in ("gsm8k", "mmlu")) + ")",
           "larger groups: strong share at step 2"),
    Figure(TWO_MODELS, f"{TWO_MODELS_RESULTS}/routing_casc400.json", "runs.1.routing.cascade_minus_best_fixed",
           lambda d: f"+{d['value']:.3f} [{d['lo']:+.3f}, {d['hi']:+.3f}]** (0.673", "cascade on 400 held-out"),
    Figure(TWO_MODELS, f"{TWO_MODELS_RESULTS}/routing_casc400.json", "runs.1.routing",
           lambda b: f"asks GPT-4 after **{b['policy_escalation']['not_stated']['escalated']} of the "
                     f"{b['policy_escalation']['not_stated']['n']}** Mixtral replies that state no answer (and "
                     f"{b['policy_escalation']['stated']['escalated']} of the {b['policy_escalation']['stated']['n']}",
           "cascade run: escalation"),
    Figure(TWO_MODELS, f"{TWO_MODELS_RESULTS}/routing_casc400.json", "runs.1.routing.policy_minus_best_fixed",
           lambda d: f"**{d['value']:+.3f} [{d['lo']:+.3f}, {d['hi']:+.3f}]** below the best fixed route",
           "cascade run on 400 held-out"),
    Figure(TWO_MODELS, f"{TWO_MODELS_RESULTS}/routing_casc400.json", "runs.0.held_out_curve",
           _curve_row("mean reward"),
           "cascade run: curve"),
    Figure(TWO_MODELS, f"{TWO_MODELS_RESULTS}/routing_rescored.json", "rescored.0.cascade_minus_best_fixed",
           lambda d: f"is {d['value']:+.3f} [{d['lo']:+.3f}, {d['hi']:+.3f}] above always-Mixtral", "cascade (two-model study)"),
    Figure(TWO_MODELS, f"{TWO_MODELS_RESULTS}/routing_rescored.json", "rescored.0",
           lambda b: f"cascade is **{b['cascade_minus_best_fixed']['value']:+.3f} "
                     f"[{b['cascade_minus_best_fixed']['lo']:+.3f}, {b['cascade_minus_best_fixed']['hi']:+.3f}]** "
                     f"above always-Mixtral ({b['routes']['cascade']['mean_reward']:.3f} against "
                     f"{b['routes'][b['best_fixed']]['mean_reward']:.3f})", "cascade on 2,000 held-out"),
    Figure(TWO_MODELS, f"{TWO_MODELS_RESULTS}/routing_rescored.json", "rescored.0",
           lambda b: f"policy is {b['policy_minus_cascade']['value']:+.3f} [{b['policy_minus_cascade']['lo']:+.3f}, "
                     f"{b['policy_minus_cascade']['hi']:+.3f}] below the cascade, asking GPT-4 after "
                     f"{_escalated(b, 'not_stated', 'of the')} Mixtral replies", "30-step policy vs cascade"),
    Figure(TWO_MODELS, f"{TWO_MODELS_RESULTS}/escalation.json", "", _escalation_table, "escalation probe table"),
    Figure(TWO_MODELS, f"{TWO_MODELS_RESULTS}/routing.json", "escalation_value", _second_call_036,
           "a second call's worth at alpha 0.36"),
    Figure(TWO_MODELS, f"{TWO_MODELS_RESULTS}/routing.json", "escalation_value", _second_call_050,
           "a second call's worth at alpha 0.5"),
    Figure(TWO_MODELS, f"{TWO_MODELS_RESULTS}/escalation_decision.json", "runs.0.checkpoints",
           lambda cs: f"{_first(cs[0])} after the cold start, {_first(cs[-1])} at step\n{cs[-1]['step']};",
           "escalation at the decision point (two-model study)"),
    Figure(TWO_MODELS, f"{TWO_MODELS_RESULTS}/escalation_decision.json", "", _escalation_table, "decision-point probe table"),
    Figure(TWO_MODELS, f"{TWO_MODELS_RESULTS}/escalation_dynamic_sampling.json", "", _escalation_table,
           "dynamic sampling probe table"),
    Figure(TWO_MODELS, f"{TWO_MODELS_RESULTS}/escalation_dynamic_sampling.json", "seconds",
           lambda t: f"--steps 24,32 --name escalation_dynamic_sampling`, {t:.0f} s;", "dynamic sampling probe time"),
    Figure(TWO_MODELS, f"{TWO_MODELS_RESULTS}/escalation_no_answer_share.json", "", _escalation_table,
           "stratified prompts probe table"),
    Figure(TWO_MODELS, f"{TWO_MODELS_RESULTS}/escalation_no_answer_share.json", "seconds",
           lambda t: f"--name escalation_no_answer_share`, {t:.0f} s;", "stratified prompts probe time"),
    Figure(TWO_MODELS, f"{TWO_MODELS_RESULTS}/routing_eval2000_na50.json", "runs.1",
           lambda e: f"scores {e['results']['policy_trained']['mean_reward']:.3f}, "
                     f"{_interval(e['routing']['policy_minus_best_fixed'])} below the best fixed route",
           "stratified prompts on 2,000 held-out"),
    Figure(TWO_MODELS, f"{TWO_MODELS_RESULTS}/routing_eval2000_na50.json", "runs.1.routing",
           lambda b: f"(strong share {b['routes']['policy']['strong_share_by_task']['gsm8k']:.2f} / "
                     f"{b['routes']['policy']['strong_share_by_task']['mmlu']:.2f}), "
                     f"{-b['policy_minus_best_fixed']['value']:.3f} below always-Mixtral on the 2,000",
           "stratified prompts (two-model study)"),
    Figure(TWO_MODELS, f"{TWO_MODELS_RESULTS}/routing_eval2000_na50.json", "runs.0.held_out_curve",
           _curve_row("`r27_na50` mean reward"),
           "stratified prompts: curve"),
    Figure(TWO_MODELS, f"{TWO_MODELS_RESULTS}/routing_eval2000_na50.json", "seconds",
           lambda t: f"--name routing_eval2000_na50`, {t:,.0f} s;", "stratified prompts eval time"),
    Figure(TWO_MODELS, f"{TWO_MODELS_RESULTS}/escalation_no_answer_first_call.json", "", _escalation_table,
           "first call written: probe table"),
    Figure(TWO_MODELS, f"{TWO_MODELS_RESULTS}/escalation_no_answer_first_call.json", "seconds",
           lambda t: f"--name escalation_no_answer_first_call` ({t:.0f} s;", "first call written: probe time"),
    Figure(TWO_MODELS, f"{TWO_MODELS_RESULTS}/routing_na50fc.json", "runs.0.held_out_curve",
           _curve_row("`r27_na50fc` mean reward"),
           "first call written: curve"),
    Figure(TWO_MODELS, f"{TWO_MODELS_RESULTS}/escalation_mark.json", "", _escalation_table, "note at the choice: probe table"),
    Figure(TWO_MODELS, f"{TWO_MODELS_RESULTS}/escalation_mark.json", "seconds",
           lambda t: f"--name escalation_mark`, {t:.0f} s;", "note at the choice: probe time"),
    Figure(TWO_MODELS, f"{TWO_MODELS_RESULTS}/routing_mark.json", "runs.0.held_out_curve", _curve_row("`r29_mark` mean reward"),
           "note at the choice: curve"),
    Figure(TWO_MODELS, f"{TWO_MODELS_RESULTS}/routing_drgrpo400.json", "runs.1.routing",
           lambda b: f"GPT-4 after {_escalated(b, 'not_stated', 'of the')} Mixtral replies that state no answer "
                     f"and after {_escalated(b, 'stated', 'of the')} that state one", "Dr. GRPO: escalation on 400 held-out"),
    Figure(TWO_MODELS, f"{TWO_MODELS_RESULTS}/routing_drgrpo400.json", "runs.1",
           lambda e: f"Mean reward {e['results']['policy_trained']['mean_reward']:.3f} against always-Mixtral's "
                     f"{e['routing']['routes']['always_cheapest']['mean_reward']:.3f}: "
                     f"{_interval(e['routing']['policy_minus_best_fixed'])}", "Dr. GRPO: reward on 400 held-out"),
    Figure(TWO_MODELS, f"{TWO_MODELS_RESULTS}/routing_drgrpo400.json", "runs.1.routing",
           lambda b: f"after {_escalated(b, 'not_stated')} Mixtral replies that state no answer and "
                     f"{_escalated(b, 'stated')} that state one, a tie with always-Mixtral "
                     f"({_interval(b['policy_minus_best_fixed'])})",
           "Dr. GRPO on 400 held-out (two-model study)"),
    Figure(TWO_MODELS, f"{TWO_MODELS_RESULTS}/routing_drgrpo400.json", "seconds",
           lambda t: f"--name routing_drgrpo400`, {t:,.0f} s alone;", "Dr. GRPO eval time"),
    Figure(TWO_MODELS, f"{TWO_MODELS_RESULTS}/routing_first_call.json", "runs.0.held_out_curve",
           _curve_row("`r32_fc` held-out reward"), "first call written for half: curve"),
    Figure(TWO_MODELS, f"{TWO_MODELS_RESULTS}/routing_first_call.json", "runs.1.held_out_curve",
           _curve_row("`r33_casc` held-out reward (first call written)"), "first call written for all: curve"),
    Figure(TWO_MODELS, f"{TWO_MODELS_RESULTS}/escalation_drgrpo.json", "", _escalation_table, "Dr. GRPO: probe table"),
    Figure(TWO_MODELS, f"{TWO_MODELS_RESULTS}/routing_drgrpo400_rescored.json", "rescored.0.policy_escalation",
           lambda e: f"After the {e['not_stated']['escalated']} no-answer replies it escalated on, GPT-4 was right on "
                     f"{e['not_stated']['strong_right']} and the policy's answer was wrong on "
                     f"{e['not_stated']['miscopied']} of them; after stated replies, on {e['stated']['miscopied']} of "
                     f"{e['stated']['strong_right']}.", "Dr. GRPO on 400: GPT-4's reply not copied back"),
    Figure(TWO_MODELS, f"{TWO_MODELS_RESULTS}/routing_drgrpo1600.json", "runs.1.selection.scored",
           lambda sc: f"by mean reward ({', '.join(format(x['mean_reward'], '.3f') for x in sc)}: "
                      f"{max(sc, key=lambda x: (x['mean_reward'], -x['penalty']))['penalty']:g} wins)",
           "Dr. GRPO on 1,600: the penalty picked on training questions"),
    Figure(TWO_MODELS, f"{TWO_MODELS_RESULTS}/routing_drgrpo1600.json", "",
           lambda d: f"--name routing_drgrpo1600` ({d['seconds']:,.0f} s alone, {d['runs'][1]['wall_s']:,.0f} s of it the 1,600;",
           "Dr. GRPO on 1,600: time"),
    Figure(TWO_MODELS, f"{TWO_MODELS_RESULTS}/routing_drgrpo1600.json", "runs.1.routing",
           lambda b: f"asks GPT-4 after {_escalated(b, 'not_stated', 'of the')} Mixtral replies that state no answer and "
                     f"after {_escalated(b, 'stated', 'of the')} that state one "
                     f"({b['policy_escalation']['stated']['share']:.0%}); format validity "
                     f"{b['routes']['policy']['format_valid']:.3f}, accuracy {b['routes']['policy']['accuracy']:.3f} "
                     f"(always-Mixtral {b['routes'][b['best_fixed']]['accuracy']:.3f}). Mean reward "
                     f"{b['routes']['policy']['mean_reward']:.3f} against always-Mixtral's "
                     f"{b['routes'][b['best_fixed']]['mean_reward']:.3f}: {_interval(b['policy_minus_best_fixed'])}, "
                     f"a tie again, and {_interval(b['policy_minus_cascade'])} against the cascade, which is "
                     f"{_interval(b['cascade_minus_best_fixed'])} above always-Mixtral on the same questions. Of the "
                     f"escalations where GPT-4 was right, the answer was still wrong on "
                     f"{b['policy_escalation']['not_stated']['miscopied']} of {b['policy_escalation']['not_stated']['strong_right']} "
                     f"(no-answer replies) and {b['policy_escalation']['stated']['miscopied']} of "
                     f"{b['policy_escalation']['stated']['strong_right']} (stated)",
           "Dr. GRPO on 1,600 unread held-out"),
    Figure(TWO_MODELS, f"{TWO_MODELS_RESULTS}/routing_drgrpo1600.json", "runs.1.routing",
           lambda b: f"after {_escalated(b, 'not_stated', 'of the')} no-answer replies and "
                     f"{_escalated(b, 'stated', 'of the')} others: {_interval(b['policy_minus_best_fixed'])}, still a "
                     f"tie, where the cascade is {_interval(b['cascade_minus_best_fixed'])}.",
           "Dr. GRPO on 1,600 unread held-out (two-model study)"),
    Figure(TWO_MODELS, f"{TWO_MODELS_RESULTS}/routing_first_call.json", "runs.4",
           lambda r: f"{r['wall_s']:,.0f} s alone, settings fixed before it ran",
           "Dr. GRPO resumed with fewer stratum prompts: time"),
    Figure(TWO_MODELS, f"{TWO_MODELS_RESULTS}/routing_first_call.json", "runs",
           lambda rs: (lambda b, before: f"asks GPT-4 after {b['policy_escalation']['stated']['escalated']} of the "
                       f"{b['policy_escalation']['stated']['n']} stated replies at step 36 "
                       f"({before['policy_escalation']['stated']['escalated']} at step 24), "
                       f"{b['routes']['policy']['mean_reward']:.3f} against always-Mixtral's "
                       f"{b['routes'][b['best_fixed']]['mean_reward']:.3f} ({_interval(b['policy_minus_best_fixed'])};"
                       )(rs[4]["routing"], rs[3]["routing"]),
           "Dr. GRPO resumed with fewer stratum prompts: 32 held-out"),
    Figure(TWO_MODELS, f"{TWO_MODELS_RESULTS}/escalation_drgrpo.json", "seconds",
           lambda t: f"--name escalation_drgrpo`, {t:.0f} s alone;", "Dr. GRPO: probe time"),
    Figure(TWO_MODELS, f"{TWO_MODELS_RESULTS}/routing_mark.json", "runs.0.held_out_curve",
           _share_row("`r29_mark` strong share GSM8K / MMLU"), "note at the choice: shares"),
    Figure(TWO_MODELS, f"{TWO_MODELS_RESULTS}/routing_mark.json", "runs.1.held_out_curve",
           _curve_row("`r29_mark_t1536` mean reward"), "1,536-token budget: curve"),
    Figure(TWO_MODELS, f"{TWO_MODELS_RESULTS}/routing_mark.json", "runs.1.held_out_curve",
           _share_row("`r29_mark_t1536` strong share GSM8K / MMLU"), "1,536-token budget: shares"),
    Figure(TWO_MODELS, f"{TWO_MODELS_RESULTS}/groups_mark_t1536.json", "", _groups_table, "sampled groups table"),
    Figure(TWO_MODELS, f"{TWO_MODELS_RESULTS}/groups_mark_t1536.json", "seconds",
           lambda t: f"groups_mark_t1536`, {t:,.0f} s,", "sampled groups time"),
    Figure(TWO_MODELS, f"{TWO_MODELS_RESULTS}/groups_mark_t1536.json", "entries.0.groups",
           lambda g: f"({g['escalate_minus_answer']:+.3f} over the {g['groups_with_both']} groups holding both moves)",
           "sampled groups: within-group difference"),
    Figure(TWO_MODELS, f"{TWO_MODELS_RESULTS}/escalation_decision.json", "seconds",
           lambda t: f"--steps 0,8,20 --name escalation_decision`, {t:.0f} s;", "decision probe time"),
    Figure(TWO_MODELS, f"{TWO_MODELS_RESULTS}/routing.json", "sweeps.job mix (tasks equal).most_cascade_gain",
           lambda g: f"gains **{g['gain']:+.3f}** over the best fixed route at alpha {g['alpha']:g}", "cascade gain"),
    Figure(TWO_MODELS, f"{TWO_MODELS_RESULTS}/routing.json", "sweeps.job mix (tasks equal)", _sweep_table, "sweep, job mix"),
    Figure(TWO_MODELS, f"{TWO_MODELS_RESULTS}/routing.json", "sweeps.logs as they are", _sweep_table, "sweep, logs as they are"),
    Figure(TWO_MODELS, f"{TWO_MODELS_RESULTS}/routing.json", "sweeps.job mix (tasks equal)", _gap_table, "gap table, job mix"),
    Figure(TWO_MODELS, f"{TWO_MODELS_RESULTS}/routing.json", "sweeps.job mix (tasks equal)",
           lambda sw: _gap_036(sw) + " just to see which route leads", "gap at alpha 0.36"),
    Figure(TWO_MODELS, f"{TWO_MODELS_RESULTS}/routing.json", "sweeps.job mix (tasks equal)",
           lambda sw: _gap_036(sw) + ",", "gap at alpha 0.36 (two-model study)"),
    # r39: RL's prompts from GSM8K alone (train.sources)
    Figure(TWO_MODELS, f"{TWO_MODELS_RESULTS}/routing_gsm1600.json", "runs.0",
           lambda r: f"train.sources=[gsm8k] train.total_steps=48\"`; {r['wall_s']:,.0f} s alone;", "GSM8K only: time"),
    Figure(TWO_MODELS, f"{TWO_MODELS_RESULTS}/routing_gsm1600.json", "runs.0.routing",
           lambda b: f"({_escalated(b, 'stated')} stated replies, {_escalated(b, 'not_stated')} without an answer: "
                     f"{b['routes']['policy']['mean_reward']:.3f}, the cascade's figure there)"
           if abs(b["routes"]["policy"]["mean_reward"] - b["routes"]["cascade"]["mean_reward"]) < 5e-4 else NEVER_IN_A_DOC,
           "GSM8K only: 32 held-out"),
    Figure(TWO_MODELS, f"{TWO_MODELS_RESULTS}/routing_gsm1600.json", "runs.1.selection",
           lambda sel: f"(the greedy penalty's choice, 0 and 0.6 tied at {sel['scored'][0]['mean_reward']:.3f}"
           if [x["penalty"] for x in sel["scored"]] == [0, 0.6] and sel["chosen"] == 0
           and round(sel["scored"][0]["mean_reward"], 3) == round(sel["scored"][1]["mean_reward"], 3) else NEVER_IN_A_DOC,
           "GSM8K only: penalty choice"),
    Figure(TWO_MODELS, f"{TWO_MODELS_RESULTS}/routing_gsm1600.json", "",
           lambda d: f"--name routing_gsm1600` ({d['seconds']:,.0f} s alone;", "GSM8K only on 1,600: time"),
    Figure(TWO_MODELS, f"{TWO_MODELS_RESULTS}/routing_gsm1600.json", "runs.1.routing",
           lambda b: f"It asks GPT-4 after {_escalated(b, 'not_stated', 'of the')} replies that state no answer and "
                     f"{_escalated(b, 'stated', 'of the')} that state one; format validity "
                     f"{b['routes']['policy']['format_valid']:.3f}, accuracy {b['routes']['policy']['accuracy']:.3f}. "
                     f"Mean reward {b['routes']['policy']['mean_reward']:.3f} against always-Mixtral's "
                     f"{b['routes'][b['best_fixed']]['mean_reward']:.3f}: {_interval(b['policy_minus_best_fixed'])}, "
                     f"{_interval(b['policy_minus_cascade'])} against the cascade",
           "GSM8K only on 1,600"),
    Figure(TWO_MODELS, f"{TWO_MODELS_RESULTS}/routing_gsm1600_rescored.json", "rescored.0.versus",
           lambda v: f"{_interval(v['policy_minus_versus'])} against `r35_s24` on the same questions"
           if v["run"].endswith("r35_s24_heldout1600_unread_fp0") else "other run",
           "GSM8K only against r35_s24 on the 1,600"),
    Figure(TWO_MODELS, f"{TWO_MODELS_RESULTS}/escalation_gsm.json", "", _escalation_table, "GSM8K only: probe table"),
    Figure(TWO_MODELS, f"{TWO_MODELS_RESULTS}/escalation_gsm.json", "seconds",
           lambda t: f"--name escalation_gsm`, {t:.0f} s alone;", "GSM8K only: probe time"),
    # r40: r39 resumed with half its prompts from the no-answer stratum
    Figure(TWO_MODELS, f"{TWO_MODELS_RESULTS}/routing_gsm_na50_1600.json", "runs.0",
           lambda r: f"the rest as `r39_gsm`; {r['wall_s']:,.0f} s alone;", "r40: time"),
    Figure(TWO_MODELS, f"{TWO_MODELS_RESULTS}/routing_gsm_na50_1600.json", "runs.0.routing",
           lambda b: f"at step 60 it asks GPT-4 after {b['policy_escalation']['stated']['escalated']} of the 31 stated replies"
           if b["policy_escalation"]["stated"]["n"] == 31 else NEVER_IN_A_DOC, "r40: 32 held-out"),
    Figure(TWO_MODELS, f"{TWO_MODELS_RESULTS}/routing_gsm_na50_1600.json", "runs.1.routing",
           lambda b: f"it asks after {_escalated(b, 'not_stated')} no-answer replies and "
                     f"{b['policy_escalation']['stated']['escalated']} of {b['policy_escalation']['stated']['n']} "
                     f"stated ones: {b['routes']['policy']['mean_reward']:.3f}, {_interval(b['policy_minus_best_fixed'])} "
                     f"above always-Mixtral", "r40: 256 training questions"),
    Figure(TWO_MODELS, f"{TWO_MODELS_RESULTS}/routing_gsm_na50_1600.json", "runs.2.routing",
           lambda b: f"it asks GPT-4 after {_escalated(b, 'not_stated', 'of the')} replies that state no answer and "
                     f"{_escalated(b, 'stated', 'of the')} that state one "
                     f"({b['policy_escalation']['stated']['share']:.0%}); format validity "
                     f"{b['routes']['policy']['format_valid']:.3f}, accuracy {b['routes']['policy']['accuracy']:.3f}. "
                     f"Mean reward {b['routes']['policy']['mean_reward']:.3f} against always-Mixtral's "
                     f"{b['routes'][b['best_fixed']]['mean_reward']:.3f}: {_interval(b['policy_minus_best_fixed'])}, "
                     f"the first interval of a policy here that excludes 0, and level with the cascade "
                     f"({_interval(b['policy_minus_cascade'])})", "r40 on the 1,600"),
    Figure(TWO_MODELS, f"{TWO_MODELS_RESULTS}/routing_gsm_na50_1600.json", "rescored.0.versus",
           lambda v: f"{_interval(v['policy_minus_versus'])} against `r35_s24` on the same questions"
           if v["run"].endswith("r35_s24_heldout1600_unread_fp0") else "other run", "r40 against r35_s24"),
    Figure(TWO_MODELS, f"{TWO_MODELS_RESULTS}/routing_gsm_na50_1600.json", "runs.2.routing",
           lambda b: f"asks GPT-4 after {b['policy_escalation']['not_stated']['escalated']} of the "
                     f"{b['policy_escalation']['not_stated']['n']} and {_escalated(b, 'stated', 'of the')} others "
                     f"and scores {_interval(b['policy_minus_best_fixed'])} above always-Mixtral",
           "r40 on the 1,600 (two-model study)"),
    # which stated replies r40 escalates on: the 1,600, then the lockbox read once
    Figure(TWO_MODELS, f"{TWO_MODELS_RESULTS}/routing_signal1600.json", "rescored.2.policy_signal",
           lambda g: f"those `r40_gsm_na50` kept minus on those it escalated on is "
                     f"{_interval(g['cheap_right_kept_minus_escalated'])} ({g['kept']['cheap_right']:.3f} against "
                     f"{g['escalated']['cheap_right']:.3f};", "r40 signal on the 1,600"),
    Figure(TWO_MODELS, f"{TWO_MODELS_RESULTS}/routing_signal1600.json", "rescored.0.policy_signal",
           lambda g: f"where `r35_s24`'s is {_interval(g['cheap_right_kept_minus_escalated'])}", "r35 signal on the 1,600"),
    Figure(TWO_MODELS, f"{TWO_MODELS_RESULTS}/routing_signal1600.json", "rescored.2.policy_by_task",
           lambda t: f"GSM8K {_interval(t['gsm8k']['signal']['cheap_right_kept_minus_escalated'])}, MMLU "
                     f"{_interval(t['mmlu']['signal']['cheap_right_kept_minus_escalated'])})", "r40 signal per task"),
    Figure(TWO_MODELS, f"{TWO_MODELS_RESULTS}/routing_lockbox.json", "rescored.0",
           lambda b: f"Mixtral is right on {b['policy_signal']['kept']['cheap_right']:.3f} of the stated replies the "
                     f"policy kept and {b['policy_signal']['escalated']['cheap_right']:.3f} of the "
                     f"{b['policy_signal']['escalated']['n']} it escalated on, "
                     f"{_interval(b['policy_signal']['cheap_right_kept_minus_escalated'])} (MMLU alone "
                     f"{_interval(b['policy_by_task']['mmlu']['signal']['cheap_right_kept_minus_escalated'])}; GSM8K, "
                     f"{b['policy_by_task']['gsm8k']['signal']['all']['n']} stated replies, "
                     f"{_interval(b['policy_by_task']['gsm8k']['signal']['cheap_right_kept_minus_escalated'])}), and those "
                     f"escalations are worth {_interval(b['policy_signal']['gain_escalated_minus_all'])} each",
           "lockbox: signal"),
    Figure(TWO_MODELS, f"{TWO_MODELS_RESULTS}/routing_lockbox.json", "rescored.0",
           lambda b: f"Reward: {b['policy_mean_reward']:.3f} against always-Mixtral's "
                     f"{b['routes']['always_cheapest']['mean_reward']:.3f}, {_interval(b['policy_minus_best_fixed'])}, and "
                     f"{_interval(b['policy_minus_cascade'])} above the cascade", "lockbox: reward"),
    Figure(TWO_MODELS, f"{TWO_MODELS_RESULTS}/routing_lockbox.json", "rescored.0",
           lambda b: f"always-GPT-4 scores {b['routes']['always_strongest']['mean_reward']:.3f}: the policy ties it, "
                     f"{_interval(b['policy_minus_fixed']['always_strongest'])}", "lockbox: always-GPT-4"),
    Figure(TWO_MODELS, f"{TWO_MODELS_RESULTS}/routing_lockbox.json", "rescored.0",
           lambda b: f"Per task: MMLU {b['policy_by_task']['mmlu']['mean_reward']:.3f} (GPT-4 "
                     f"{b['routes']['always_strongest']['mean_reward_by_task']['mmlu']:.3f}, Mixtral "
                     f"{b['routes']['always_cheapest']['mean_reward_by_task']['mmlu']:.3f}; it asks GPT-4 after "
                     f"{b['policy_by_task']['mmlu']['escalation']['stated']['escalated']:,} of "
                     f"{b['policy_by_task']['mmlu']['escalation']['stated']['n']:,}", "lockbox: MMLU"),
    Figure(TWO_MODELS, f"{TWO_MODELS_RESULTS}/routing_lockbox.json", "rescored.0.routes",
           lambda r: f"its MMLU reward {r['always_strongest']['mean_reward_by_task']['mmlu']:.3f} against Mixtral's "
                     f"{r['always_cheapest']['mean_reward_by_task']['mmlu']:.3f} here", "lockbox: MMLU routes"),
    Figure(UNSEEN, f"{TWO_MODELS_RESULTS}/routing_lockbox.json", "rescored.0.policy_by_task.mmlu.escalation.stated",
           lambda e: f"(44% against {e['share']:.0%})", "lockbox: MMLU share"),
    # the cascade-shaped policy on the unseen subjects (bench_unseen_subjects.py --router-r1 r40 ...)
    Figure(UNSEEN, f"{UNSEEN_RESULTS}/unseen_subjects_subset100_r40.json", "routers.router_r1",
           lambda r: f"| router_r1 (`r40_gsm_na50`) | quality {r['quality_mean']:.3f} at {100 * r['strong_share_mean']:.1f}% "
                     f"strong, ${1000 * r['cost_mean']:.3f} per 1k prompts |", "unseen subjects: r40 row"),
    Figure(UNSEEN, f"{UNSEEN_RESULTS}/unseen_subjects_subset100_r40.json", "routers.router_r1.per_seed",
           lambda p: f"It asks GPT-4 after {p['0']['escalated']}, {p['1']['escalated']} and {p['2']['escalated']} "
                     f"of each seed's 100 Mixtral replies", "unseen subjects: r40 escalations"),
    Figure(UNSEEN, f"{UNSEEN_RESULTS}/unseen_subjects_subset100_r40.json", "routers.router_r1.per_seed",
           lambda p: f"Per seed its quality is {p['0']['quality']:.2f}, {p['1']['quality']:.2f} and "
                     f"{p['2']['quality']:.2f}", "unseen subjects: r40 per seed"),
    Figure(UNSEEN, f"{UNSEEN_RESULTS}/unseen_subjects_subset100_r40.json", "routers.router_r1",
           lambda r: f"with the Mixtral call before each escalation priced too (`cost_mean_all_calls` in each seed's "
                     f"`report.json`, since 2026-11-27) it costs ${1000 * r['cost_mean_all_calls']:.3f} per 1k prompts",
           "unseen subjects: r40 every call's cost"),
    Figure(UNSEEN, f"{UNSEEN_RESULTS}/unseen_subjects_subset100_r40.json", "routers.router_r1.per_seed",
           lambda p: "(" + _three([p[s]["quality"] - p[s]["random_quality_at_cost_all_calls"] for s in "012"], "+.3f")
                     + " against the mix at the cost of every call)", "unseen subjects: r40 per seed, every call"),
    Figure(UNSEEN, f"{UNSEEN_RESULTS}/unseen_subjects_subset100_r40.json", "seconds",
           lambda t: f"`{UNSEEN_RESULTS}/unseen_subjects_subset100_r40.md`, {t:.0f} s alone with the embeddings",
           "unseen subjects: r40 time"),
    Figure(TWO_MODELS, f"{UNSEEN_RESULTS}/unseen_subjects_subset300_r40.json", "routers.router_r1.weak_split_pooled",
           lambda p: f"Mixtral is right on {p['kept']:.3f} of those it kept and {p['sent']:.3f} of those it escalated on "
                     f"(+{p['value']:.3f} [{p['lo']:+.3f}, {p['hi']:+.3f}];", "unseen subjects r40 weak split (two-model study)"),
    Figure(TWO_MODELS, f"{UNSEEN_RESULTS}/unseen_subjects_subset300_r40.json", "routers",
           lambda r: f"+{r['probe_form']['weak_split_pooled']['value']:.3f} and +{r['knn']['weak_split_pooled']['value']:.3f};",
           "unseen subjects offline weak split (two-model study)"),
    Figure(UNSEEN, f"{UNSEEN_RESULTS}/unseen_subjects_subset300_r40.json", "", _unseen_weak_split_table,
           "unseen subjects 300: weak-split table"),
    Figure(UNSEEN, f"{UNSEEN_RESULTS}/unseen_subjects_subset300_r40.json", "routers.router_r1.weak_split_pooled",
           lambda p: f"Mixtral is right on {p['kept']:.3f} of the prompts it kept and {p['sent']:.3f} of those it "
                     f"escalated on, +{p['value']:.3f} [{p['lo']:+.3f}, {p['hi']:+.3f}]", "unseen subjects 300: r40 weak split"),
    Figure(UNSEEN, f"{UNSEEN_RESULTS}/unseen_subjects_subset300_r40.json", "routers.router_r1",
           lambda r: f"quality {r['quality_mean']:.3f} at {100 * r['strong_share_mean']:.1f}% strong, "
                     f"${1000 * r['cost_mean']:.3f} per 1k prompts", "unseen subjects 300: r40 point"),
    Figure(UNSEEN, f"{UNSEEN_RESULTS}/unseen_subjects_subset300_r40.json", "routers.router_r1.per_seed",
           lambda p: f"per seed {p['0']['quality']:.3f}, {p['1']['quality']:.3f} and {p['2']['quality']:.3f} against the "
                     f"random mix at the same cost {p['0']['random_quality_at_cost']:.3f}, "
                     f"{p['1']['random_quality_at_cost']:.3f} and {p['2']['random_quality_at_cost']:.3f}",
           "unseen subjects 300: r40 per seed"),
    Figure(UNSEEN, f"{UNSEEN_RESULTS}/unseen_subjects_subset300_r40.json", "seconds",
           lambda t: f"--name\nunseen_subjects_subset300_r40`, {t:.0f} s (652 s the first time", "unseen subjects 300: time"),
    Figure(UNSEEN, f"{UNSEEN_RESULTS}/unseen_subjects_subset300_r40.json", "routers.router_r1", _every_call_cost,
           "unseen subjects 300: r40 every call's cost"),
    # the same policy's odds of escalating as a threshold router (--router-r1-score escalation)
    Figure(UNSEEN, f"{UNSEEN_RESULTS}/unseen_subjects_subset300_r40_odds.json", "", _unseen_apgr_rows,
           "unseen subjects 300: odds APGR table"),
    Figure(UNSEEN, f"{UNSEEN_RESULTS}/unseen_subjects_subset300_r40_odds.json", "routers",
           lambda r: f"give APGR {r['router_r1_odds']['apgr_mean']:.3f} on the unseen subjects, above MF "
                     f"({r['mf']['apgr_mean']:.3f}) and random ({r['random']['apgr_mean']:.3f}) and below kNN "
                     f"({r['knn']['apgr_mean']:.3f}) and `probe_form` ({r['probe_form']['apgr_mean']:.3f})",
           "unseen subjects 300: odds APGR sentence"),
    Figure(UNSEEN, f"{UNSEEN_RESULTS}/unseen_subjects_subset300_r40_odds.json", "routers.router_r1_odds.per_seed.0.apgr_minus_random",
           lambda d: f"only seed 0's interval against random excludes 0 ({d['value']:+.3f} [{d['lo']:+.3f}, {d['hi']:+.3f}])",
           "unseen subjects 300: odds vs random"),
    Figure(UNSEEN, f"{UNSEEN_RESULTS}/unseen_subjects_subset300_r40_odds.json", "routers.router_r1_odds",
           lambda r: f"Mixtral is right on {r['weak_split_pooled']['kept']:.3f} of the prompts it keeps and "
                     f"{r['weak_split_pooled']['sent']:.3f} of those it sends ({r['weak_split_pooled']['value']:+.3f} "
                     f"[{r['weak_split_pooled']['lo']:+.3f}, {r['weak_split_pooled']['hi']:+.3f}]). The score reads "
                     f"Mixtral's reply, so every prompt pays that call: ${1000 * r['cost_mean_all_calls']:.3f} per 1k "
                     "prompts at 50% strong", "unseen subjects 300: odds split and cost"),
    Figure(TWO_MODELS, f"{UNSEEN_RESULTS}/unseen_subjects_subset300_r40_odds.json", "routers",
           lambda r: f"give APGR {r['router_r1_odds']['apgr_mean']:.3f} on those prompts (MF {r['mf']['apgr_mean']:.3f}, "
                     f"random {r['random']['apgr_mean']:.3f}, kNN {r['knn']['apgr_mean']:.3f}, `probe_form` "
                     f"{r['probe_form']['apgr_mean']:.3f})", "odds APGR (two-model study)"),
    Figure(UNSEEN, f"{UNSEEN_RESULTS}/unseen_subjects_subset300_r40_odds.json", "seconds",
           lambda t: f"`{UNSEEN_RESULTS}/unseen_subjects_subset300_r40_odds.md`, {t:.0f} s alone", "unseen subjects 300: odds time"),
    Figure(UNSEEN, f"{UNSEEN_RESULTS}/unseen_subjects_subset300_r40_odds.json", "routers.router_r1_odds.per_seed",
           lambda p: f"Greedy decoding escalated on {_three([p[s]['escalated_greedy'] for s in '012'], 'd')} of each "
                     f"seed's 300, as in the run above, and {sum(p[s]['no_decision_point'] for s in '012')} of the 900 "
                     "turns had no decision point", "unseen subjects 300: odds greedy counts"),
    Figure(UNSEEN, f"{UNSEEN_RESULTS}/unseen_subjects_subset100_r40.json", "", _unseen_weak_split_table,
           "unseen subjects: weak-split table"),
    Figure(UNSEEN, f"{UNSEEN_RESULTS}/unseen_subjects_subset100_r40.json", "routers.router_r1.weak_split_pooled",
           lambda p: f"Mixtral is right on {p['kept']:.3f} of the prompts the policy kept and {p['sent']:.3f} of those it "
                     f"escalated on, +{p['value']:.3f} [{p['lo']:+.3f}, {p['hi']:+.3f}]", "unseen subjects: r40 weak split"),
    Figure(UNSEEN, f"{UNSEEN_RESULTS}/unseen_subjects_subset100_r40.json", "routers.probe_form.per_seed",
           lambda p: f"({sum(v['at_share']['0.5']['quality'] for v in p.values()) / len(p):.3f} at 50% strong, mean)",
           "unseen subjects: probe_form at 50%"),
    Figure(UNSEEN, f"{UNSEEN_RESULTS}/unseen_subjects_subset100_r40.json", "routers.router_r1.per_seed",
           lambda p: "the random mix of the two models at the same cost scores " + ", ".join(
               f"{p[s]['random_quality_at_cost']:.3f}" for s in "01") + f" and {p['2']['random_quality_at_cost']:.3f}",
           "unseen subjects: random mix at r40's cost"),
    Figure(TWO_MODELS, f"{TWO_MODELS_RESULTS}/routing_lockbox1540.json", "rescored.0",
           lambda b: f"On the 1,540 never read: signal {_interval(b['policy_signal']['cheap_right_kept_minus_escalated'])}, "
                     f"worth over random {_interval(b['policy_signal']['gain_escalated_minus_all'])}, policy minus "
                     f"always-Mixtral {_interval(b['policy_minus_best_fixed'])}, minus always-GPT-4 "
                     f"{_interval(b['policy_minus_fixed']['always_strongest'])}"
           if sum(b["tasks"].values()) == 1540 else NEVER_IN_A_DOC, "lockbox without the 22"),
    Figure(TWO_MODELS, f"{TWO_MODELS_RESULTS}/routing_lockbox.json", "seconds",
           lambda t: f"(`benchmarks/results/routing_lockbox.*`, {t:.0f} s)", "lockbox: rescore time"),
    Figure(TWO_MODELS, f"{TWO_MODELS_RESULTS}/routing_lockbox.json", "rescored.0",
           lambda b: f"Mixtral is right on {b['policy_signal']['kept']['cheap_right']:.3f} of the stated replies it "
                     f"kept and {b['policy_signal']['escalated']['cheap_right']:.3f} of those it escalated on "
                     f"({_interval(b['policy_signal']['cheap_right_kept_minus_escalated'])}), and the policy scores "
                     f"{_interval(b['policy_minus_best_fixed'])} above always-Mixtral", "lockbox (two-model study)"),
    Figure(TWO_MODELS, f"{TWO_MODELS_RESULTS}/routing_gsm1600.json", "runs.1.routing",
           lambda b: f"removed them ({_escalated(b, 'stated')}) and most of the needed ones with them "
                     f"({_escalated(b, 'not_stated')}; {_interval(b['policy_minus_best_fixed'])})",
           "r39 on the 1,600 (two-model study)"),
]

def _lockbox_tables(d: dict[str, Any]) -> str:
    from benchmarks.bench_lockbox import markdown

    return markdown(d)


def _development_table(d: dict[str, Any]) -> str:
    from benchmarks.bench_lockbox import development_table

    return development_table(d)


LOCKBOX_FIGURES = [
    Figure(EVALUATION, "lockbox.json", "", _lockbox_tables, "lockbox tables"),
    Figure(EVALUATION, "lockbox_development.json", "", _development_table, "lockbox development table"),
    Figure(EVALUATION, "lockbox_explain.json", "",
           lambda d: f"correlate {d['corr_learned_vs_true']:+.2f} with the true ones, less than MF's mean scores do "
                     f"({d['corr_mf_vs_true']:+.2f})", "lockbox: why the online router fell short"),
]

# -- the trainer's speed: benchmarks/results/router_r1.json (bench_router_r1.py, bench_learning.py) --------

TRAINER_FIGURES = [
    Figure("docs/benchmarks.md", "router_r1.json", "step",
           lambda s: f"| step time (median) | {s['ours_tensors']['step_s_median']:.1f} s | "
                     f"{s['ours_lora']['step_s_median']:.1f} s | {s['trl_step_s']:.1f} s |",
           "benchmarks: step times"),
    Figure("docs/benchmarks.md", "router_r1.json", "step",
           lambda s: f"| ours / TRL | {s['ratio_tensors']:.2f} (target <= 0.5: "
                     f"{'met' if s['ratio_tensors'] <= 0.5 else 'missed'}) | {s['ratio_lora']:.2f} "
                     f"({'met' if s['ratio_lora'] <= 0.5 else 'missed'}) | 1 |", "benchmarks: step ratios"),
    Figure("docs/benchmarks.md", "router_r1.json", "learning.arms", lambda a: _rl_time_row(a, "grpo"),
           "benchmarks: GRPO's RL time"),
    Figure("docs/benchmarks.md", "router_r1.json", "learning.arms", lambda a: _rl_time_row(a, "trl"),
           "benchmarks: TRL's RL time"),
    Figure("docs/benchmarks.md", "router_r1.json", "step_timing",
           lambda t: f"--steps {len(t['ours']['steps'])}`, {t['wall_s']:,.0f} s; both arms", "benchmarks: TRL steps run"),
    Figure("docs/benchmarks.md", "router_r1.json", "step_timing",
           lambda t: "same prompts at every step: checked" if t["same_prompts"] else NEVER_IN_A_DOC,
           "benchmarks: TRL steps on the same prompts"),
]


def _rl_seconds(arms: dict[str, Any], arm: str) -> float:
    return sum(r["time/step_s"] for r in arms[arm]["train_curve"])


def _rl_time_row(arms: dict[str, Any], arm: str) -> str:
    """The start of an arm's row in benchmarks.md's table of RL time against TRL (bench_learning.py)."""
    steps = [r["time/step_s"] for r in arms[arm]["train_curve"]]
    name = {"grpo": "GRPO (ours)", "trl": "TRL `GRPOTrainer`"}[arm]
    fixed = arms["time_to_quality"]["best_fixed_route"]
    side = "ours" if arm == "grpo" else arm  # time_to_quality names our arm "ours"
    reached = (f"{fixed[f'{side}_s']:,.0f} s (step {fixed[f'{side}_step']}" if fixed[f"{side}_s"] is not None
               else f"not reached (best {max(r['eval/mean_reward'] for r in arms[arm]['held_out_curve']):.3f}")
    return f"| {name} | {_rl_seconds(arms, arm):,.0f} s | {min(steps):.0f}-{max(steps):.0f} | {reached}"


def _logits(runs: list[dict[str, Any]], path: str, window: int, key: str = "backward_bytes_per_element") -> str:
    [run] = [r for r in runs if r["path"] == path and r["window"] == window]
    return f"{run[key]:.1f}"


GPU_FIGURES = [
    Figure(TWO_MODELS, f"{TWO_MODELS_RESULTS}/same_curve_chunked_logprobs.json", "max_abs_diff",
           lambda d: "every held-out point the same to the last digit" if max(d.values()) == 0 else NEVER_IN_A_DOC,
           "make run after the chunked log-probs (two-model study)"),
    Figure("docs/gpu.md", "logits_memory.json", "runs",
           lambda r: f"the plain path {_logits(r, 'plain', 1024)} at W = 1,024 "
                     f"({_logits(r, 'plain', 1024, 'forward_bytes_per_element')} forward alone); the chunked path "
                     f"{_logits(r, 'chunked', 1024)} at W = 1,024 and {_logits(r, 'chunked', 2048)} at W = 2,048, against "
                     f"the {_logits(r, 'chunked', 1024, 'arithmetic_bytes_per_element')} and "
                     f"{_logits(r, 'chunked', 2048, 'arithmetic_bytes_per_element')} that", "logits bytes per element"),
]

# -- docs/benchmarks.md: the selector's regret (benchmarks/results/selector.json) ---------------------------------

SERVE = "docs/benchmarks.md"  # the Serve app's measures (bench_selector.py)


def _per_seed(r: dict[str, Any]) -> str:
    return " / ".join(f"{x:.0f}" for x in r["per_seed"])


SERVE_FIGURES = [
    Figure(SERVE, "selector.json", "regret.alphas",
           lambda a: f"At α = 0 it is {a['0.0']['contextual']['final_regret_mean']:.0f} against "
                     f"{a['0.0']['thompson']['final_regret_mean']:.0f}, within "
                     f"{a['0.0']['contextual']['final_regret_mean'] - a['0.0']['best_fixed']['final_regret_mean']:.0f} of "
                     f"the best fixed candidate ({a['0.0']['best_fixed']['final_regret_mean']:.0f}). At α = 0.1 it is "
                     f"{a['0.1']['contextual']['final_regret_mean']:.0f} against {a['0.1']['thompson']['final_regret_mean']:.0f}",
           "contextual against Thompson"),
    Figure(SERVE, "selector.json", "regret.alphas",
           lambda a: "on every one of the three shuffles" if all(
               c < t for al in ("0.0", "0.1") for c, t in zip(a[al]["contextual"]["per_seed"], a[al]["thompson"]["per_seed"]))
           else NEVER_IN_A_DOC, "contextual below Thompson on every shuffle"),
    Figure(SERVE, "selector.json", "regret.alphas",
           lambda a: _alpha_03(a["0.3"]), "alpha 0.3 per shuffle"),
]


def _alpha_03(r: dict[str, Any]) -> str:
    """At alpha 0.3: the contextual mode's and Thompson's regret, per shuffle, and the best fixed candidate's."""
    mean = {k: round(r[k]["final_regret_mean"]) for k in ("contextual", "thompson", "best_fixed")}
    return (f"{mean['contextual']} against {mean['thompson']}. Per shuffle it is {_per_seed(r['contextual'])} against "
            f"Thompson's {_per_seed(r['thompson'])}. The best fixed candidate is at {mean['best_fixed']}")


SERVE_FIGURES += [
    Figure(SERVE, "selector.json", "regret",
           lambda r: f"{r['contextual_decisions_per_s']:,.0f} `Selector.select` calls per second in-process", "decisions/s"),
]

def _ms(v: float) -> str:
    """A latency as benchmarks.md writes it (``tools/render_docs.py``'s rule)."""
    return _render_docs().ms(v)


SERVE_FIGURES += [
    Figure(SERVE, "selector.json", "latency.setups",
           lambda s: f"**{_ms(s['direct_main_loop']['rates']['200.0']['p50_ms'])} ms / "
                     f"{_ms(s['direct_main_loop']['rates']['200.0']['p99_ms'])} ms, "
                     f"{s['direct_main_loop']['rates']['200.0']['achieved_rate_per_s']:.0f} requests/s achieved** (before: "
                     f"{_ms(s['two_hop']['rates']['200.0']['p50_ms'])} ms / {_ms(s['two_hop']['rates']['200.0']['p99_ms'])} ms, "
                     f"{s['two_hop']['rates']['200.0']['achieved_rate_per_s']:.0f} achieved)", "latency at 200 requests/s"),
    Figure(SERVE, "selector.json", "decisions",
           lambda d: f"| decisions/s inside the selector actor (Thompson, 2 candidates) | "
                     f"{round(d['in_actor_thompson_per_s'], -3):,.0f} |", "decisions/s in the actor"),
    Figure("README.md", "selector.json", "latency.setups.direct_main_loop.rates",
           lambda r: f"`/route` p50 / p99 {_ms(r['200.0']['p50_ms'])} ms / {_ms(r['200.0']['p99_ms'])} ms at "
                     f"{r['200.0']['target_rate_per_s']:.0f} requests/s", "README: serve latency"),
]

# -- docs/intent.md: benchmarks/results/intent.json ------------------------------------------------------------

INTENT = "docs/intent.md"


def _bandit_readme(d: dict[str, Any]) -> str:
    grpo = d["real_stack"]["uniform"]["grpo"]
    return f"learns the 0.3-gap context (P(best) {grpo['final_p_optimal'][0]:.2f} after {grpo['episodes']:,} episodes)"


def _bandit_tabular(d: dict[str, Any]) -> str:
    ref = d["references"]["uniform"]
    ok = min(ref["tabular_grpo"]["final_p_optimal"]) > 0.9 and min(ref["tabular_rloo"]["final_p_optimal"]) > 0.9
    trapped = all(p > 0.9 for p in ref["tabular_grpo_std"]["p_trap"][-1][1:])
    return ("the tabular `grpo_std` ends on the trap in the 0.1 and 0.03 contexts" if ok and trapped
            else NEVER_IN_A_DOC)


BANDIT_FIGURES = [
    Figure("README.md", "rl_bandit.json", "", _bandit_readme, "README: learning test"),
    Figure("docs/router_r1.md", "rl_bandit.json", "", _bandit_readme, "router_r1: learning test"),
    Figure("docs/router_r1.md", "rl_bandit.json", "", _bandit_tabular, "router_r1: tabular trap"),
    Figure("docs/router_r1.md", "rl_bandit.json", "", lambda d: f"the run below took {d['wall_s']:,.0f} s on 2 cores",
           "router_r1: learning test wall time"),
    Figure("docs/router_r1.md", "rl_bandit.json", "task",
           lambda t: f"the best fixed route is {t['optimum'] - t['best_fixed_route']:.2f} below the optimum",
           "router_r1: best fixed route"),
]

def _throughput_learner_share(d: dict) -> str:
    shares = [a["share"]["learn"] for n, a in d["arms"].items() if n.startswith("router")]
    return f"the learner is {100 * min(shares):.0f}-{100 * max(shares):.0f}% of a router's step"


THROUGHPUT_FIGURES = [
    Figure("README.md", "rl_throughput.json", "arms",
           lambda a: f"{a['router']['episodes_per_hour']:,.0f} with the router's episode, "
                     f"{a['router']['episodes_per_hour'] / a['today']['episodes_per_hour']:.2f}x the "
                     f"{a['today']['episodes_per_hour']:,.0f} of the settings before it", "README: episodes per hour"),
    Figure("docs/router_r1.md", "rl_throughput.json", "", _throughput_learner_share, "router_r1: learner share"),
    Figure("docs/router_r1.md", "rl_throughput.json", "arms.router.learner_tokens_per_episode",
           lambda v: f"about {round(v, -1):.0f} learner tokens", "router_r1: learner tokens an episode"),
]

README_FIGURES = [
    Figure("README.md", "fresh_clone.json", "",
           lambda d: f"From a fresh clone on this 2-core machine: {d['passed']:,} passed, {d['skipped']} skipped in "
                     f"{d['seconds']:,.0f} s ({d['seconds'] / 60:.0f} min, the venv install not counted; commit {d['provenance']['commit']}",
           "README: fresh-clone count"),
    Figure("README.md", "durability.json", "",
           lambda d: f"kill -9 of every Serve process ({d['runs']['serve']['cycles']} cycles) and of the whole stack "
                     f"({d['runs']['stack']['cycles']}) under mixed traffic, every stateful part on: {d['lost']} of "
                     f"{d['acknowledged']:,} acknowledged requests, feedback and release steps lost, "
                     f"{d['double_counted']} double-counted, {d['5xx']} 5xx", "README: durability"),
]

TWO_MODELS_FIGURES = [
    Figure(TWO_MODELS, f"{TWO_MODELS_RESULTS}/routing_eval2000_t256_fp.json", "runs.2.routing.routes.policy",
           lambda p: f"| 0.6 | {p['mean_reward']:.3f} | -0.029 [-0.038, -0.019] | {p['format_valid']:.3f} | 32 (2) | "
                     f"{p['accuracy']:.3f} |", "greedy penalty 0.6 row"),
]

INTENT_FIGURES = [
    Figure(INTENT, "intent.json", "table",
           lambda t: f"The default (lr 1e-5) lost {100 * (t['supervised']['accuracy'] - t['rl']['accuracy']):.1f} points of "
                     f"accuracy; lr 1e-4 lost {100 * (t['supervised']['accuracy'] - t['rl lr=1e-4']['accuracy']):.1f}; the "
                     f"calibration and F1 rewards gained "
                     f"{100 * (t['rl calibration reward']['accuracy'] - t['supervised']['accuracy']):.1f} and "
                     f"{100 * (t['rl f1 (leave-one-out) lr=1e-4']['accuracy'] - t['supervised']['accuracy']):.1f}",
           "PPO against supervised"),
    Figure(INTENT, "intent.json", "main",
           lambda m: f"Whole main run {m['total_wall_s']:.0f} s wall, of which {m['train_wall_s']:.0f} s training",
           "main run time"),
]

# -- the flywheel: benchmarks/results/flywheel.json (bench_flywheel.py) ------------------------------------------


def _within(rel: dict[str, Any], how: str) -> bool:
    dr, c = rel["off_policy"]["dr"], rel["canary"]
    return dr["lo"] <= c["mean"] <= dr["hi"] if how == "canary in dr" else c["lo"] <= dr["value"] <= c["hi"]


FLYWHEEL_FIGURES = [
    Figure("docs/retraining.md", "flywheel.json", "",
           lambda f: f"On the last round's {f['promoted_minus_start']['questions']} questions the router the loop "
                     f"promoted scores {_interval({'value': f['promoted_minus_start']['mean'], **f['promoted_minus_start']})} "
                     f"above the start", "serve: flywheel promoted - start"),
    Figure("docs/retraining.md", "flywheel.json", "rounds",
           lambda r: f"reward went from {r[0]['loop']['reward']:.3f} to {r[-1]['loop']['reward']:.3f} while its cost "
                     f"fell from {1000 * r[0]['loop']['cost_usd']:.2f} to {1000 * r[-1]['loop']['cost_usd']:.2f} "
                     f"thousandths", "serve: flywheel reward and cost"),
    Figure("docs/retraining.md", "flywheel.json", "rounds",
           lambda r: f"scores {r[-1]['best_single']['reward']:.3f} on the last round", "serve: flywheel best single"),
    Figure("docs/retraining.md", "flywheel.json", "releases",
           lambda rs: f"inside the off-policy DR interval made before it for "
                      f"{sum(_within(r, 'canary in dr') for r in rs)} of {len(rs)} releases" if
           sum(_within(r, 'canary in dr') for r in rs) < len(rs) else
           f"inside the off-policy DR interval made before it for all {len(rs)} releases",
           "serve: flywheel canary within DR"),
    Figure("docs/retraining.md", "flywheel.json", "releases",
           lambda rs: f"point estimate lies inside the canary's own interval for "
                      f"{sum(_within(r, 'dr in canary') for r in rs)} of {len(rs)}", "serve: flywheel DR within canary"),
    Figure("docs/retraining.md", "flywheel.json", "seconds", lambda v: f"the run took {v:.0f} s", "serve: flywheel time"),
]

FIGURES = (FLYWHEEL_FIGURES + OPERATIONS_FIGURES + GPU_FIGURES + GMT_FIGURES + EVALUATION_FIGURES + ROUTING_FIGURES + LOCKBOX_FIGURES
           + TRAINER_FIGURES + SERVE_FIGURES + INTENT_FIGURES + TWO_MODELS_FIGURES + README_FIGURES + BANDIT_FIGURES
           + THROUGHPUT_FIGURES)


def test_a_failed_condition_cannot_pass() -> None:
    docs = [p.read_text() for p in [ROOT / "README.md", *(ROOT / "docs").rglob("*.md")]]  # the studies too
    assert not any(normalised(NEVER_IN_A_DOC) in normalised(d) for d in docs)


@pytest.mark.parametrize("fig", FIGURES, ids=[f"{f.doc.split('/')[-1]}: {f.what}" for f in FIGURES])
def test_the_doc_quotes_the_committed_result(fig: Figure) -> None:
    value = lookup(json.loads(fig.file.read_text()), fig.path)
    expected = normalised(fig.fmt(value))
    doc = normalised((ROOT / fig.doc).read_text())
    assert expected in doc, (f"{fig.doc} should say {expected!r}: {fig.results} {fig.path or '(whole file)'}; "
                             f"closest line: {_closest(doc, expected)!r}")


def _closest(doc: str, expected: str) -> str:
    """The doc's stretch that shares the longest prefix with ``expected`` (for the failure message)."""
    words = expected.split()
    for n in range(len(words), 0, -1):
        m = re.search(re.escape(" ".join(words[:n])), doc)
        if m:
            return doc[m.start(): m.start() + len(expected) + 20]
    return ""


def test_router_r1_headline_is_rebuilt_from_its_sections() -> None:
    """router_r1.json's headline is what ``bench_router_r1.headline`` makes of the file's own sections: no
    block left over from an older version of the script. The learning figures live only in the
    "learning" section, which bench_learning.py rewrites without touching the headline."""
    saved = dict(os.environ)
    try:  # the script sets its own environment defaults on import; the test session keeps its own
        from benchmarks.bench_router_r1 import headline
    finally:
        os.environ.clear()
        os.environ.update(saved)
    report = json.loads((RESULTS / "router_r1.json").read_text())
    assert report["headline"] == headline(report)


def test_a_quick_bench_run_keeps_the_full_summary(tmp_path, monkeypatch) -> None:
    """``run_all --quick`` skips every script without a quick mode: its summary goes to its own file."""
    from benchmarks import run_all

    monkeypatch.setattr(run_all, "RESULTS", tmp_path)
    full = tmp_path / "summary.json"
    full.write_text('{"quick": false}')
    assert run_all.main(["--quick", "--only", "no_such_benchmark"]) == 0
    assert full.read_text() == '{"quick": false}'
    assert json.loads((tmp_path / "summary_quick.json").read_text())["quick"] is True


def _render_docs():
    sys.path.insert(0, str(ROOT / "tools"))
    import render_docs

    return render_docs


@pytest.mark.parametrize("table", _render_docs().TABLES, ids=lambda t: f"{t.doc}: {t.name}")
def test_rendered_tables_are_their_results(table) -> None:
    """Every figure table between a doc's render markers is what ``tools/render_docs.py`` (``make docs``)
    renders from its JSON, cell for cell, so no figure in it can drift from its source."""
    from rlrouter.eval.pool_report import doc_block

    block = doc_block((ROOT / table.doc).read_text(), table.name)
    assert block is not None, f"{table.doc} has lost the markers of its '{table.name}' table"
    assert block == table.body(), f"{table.doc}: '{table.name}' differs from {table.results}; run make docs"


def test_a_one_digit_edit_of_a_rendered_table_fails(tmp_path) -> None:
    from rlrouter.eval.pool_report import doc_block

    table = next(t for t in _render_docs().TABLES if t.name == "selector regret")
    text = (ROOT / table.doc).read_text().replace("| 742 |", "| 743 |", 1)
    assert doc_block(text, table.name) != table.body()


def _rb_check(check: dict[str, Any], name: str, key: str = "ours") -> str:
    return " / ".join(f"{check[name][t][key]:.3f}" for t in ("arc-challenge", "mbpp", "winogrande"))


MANY_MODELS_FIGURES = [
    Figure("docs/many_models.md", "many_models.json", "routerbench_check",
           lambda c: f"the zero router {_rb_check(c, 'zero_router')} (ARC / MBPP / Winogrande), kNN with k = 40 "
                     f"{_rb_check(c, 'knn40')} (published {_rb_check(c, 'knn40', 'published')}), the oracle "
                     f"{_rb_check(c, 'oracle')}", "RouterBench check"),
    Figure("docs/many_models.md", "many_models.json", "routerbench_check",
           lambda c: f"kNN with k = 10 comes out lower than published ({_rb_check(c, 'knn10')} against "
                     f"{_rb_check(c, 'knn10', 'published')})", "RouterBench check, k = 10"),
    Figure("docs/many_models.md", "many_models.json", "data",
           lambda d: f"the test tables hold {d['test']} prompts (ARC {d['tasks']['arc-challenge']}, MBPP "
                     f"{d['tasks']['mbpp']}, Winogrande {d['tasks']['winogrande']}) and train {d['train']:,}",
           "table sizes"),
]


def _mz(d: dict[str, Any]) -> str:
    """An AIQ difference as many_models.md writes it: +0.019 [+0.010, +0.032]."""
    return f"{d['mean']:+.3f} [{d['lo']:+.3f}, {d['hi']:+.3f}]"


def _reward(r: dict[str, Any], name: str, lam: str = "0.1") -> str:
    return f"{r['routers'][name]['at_price'][lam]['overall']['reward']:.3f}"


MANY_MODELS_FIGURES += [
    Figure("docs/many_models.md", "many_models.json", "routers",
           lambda r: f"AIQ {r['escalate']['aiq']['overall']:.3f} against the zero router's "
                     f"{r['zero_router']['aiq']['overall']:.3f}, {_mz(r['escalate']['aiq_minus_zero']['overall'])}, and "
                     f"above it on each task (ARC {_mz(r['escalate']['aiq_minus_zero']['arc-challenge'])}, MBPP "
                     f"{_mz(r['escalate']['aiq_minus_zero']['mbpp'])}, Winogrande "
                     f"{_mz(r['escalate']['aiq_minus_zero']['winogrande'])})", "escalate"),
    Figure("docs/many_models.md", "many_models.json", "routers",
           lambda r: f"closes {100 * r['escalate']['aiq_minus_zero']['overall']['mean'] / r['oracle']['aiq_minus_zero']['overall']['mean']:.0f}% "
                     f"of the gap to the oracle ({r['oracle']['aiq_minus_zero']['overall']['mean']:+.3f})", "share of the gap"),
    Figure("docs/many_models.md", "many_models.json", "routers",
           lambda r: f"RouterBench's kNN (k = {r['knn']['params']['k']}, chosen on train from 5, 10, 40, 80) does not: "
                     f"{_mz(r['knn']['aiq_minus_zero']['overall'])}; nor does the per-model logistic probe "
                     f"({_mz(r['probe']['aiq_minus_zero']['overall'])})", "knn and probe"),
    Figure("docs/many_models.md", "many_models.json", "routers",
           lambda r: f"far below ({r['mlp']['aiq_minus_zero']['overall']['mean']:+.3f}): its per-model regressors overfit "
                     f"2,205 questions. MF ({r['mf']['aiq_minus_zero']['overall']['mean']:+.3f}), the learned cascade "
                     f"({r['cascade']['aiq_minus_zero']['overall']['mean']:+.3f}) and the online selector "
                     f"({r['selector']['aiq_minus_zero']['overall']['mean']:+.3f}", "the routers below"),
    Figure("docs/many_models.md", "many_models.json", "routers",
           lambda r: f"errs one time in five ({r['cascade_judge']['aiq_minus_zero']['overall']['mean']:+.3f}", "judge cascade"),
    Figure("docs/many_models.md", "many_models.json", "",
           lambda r: f"its reward is {_reward(r, 'per_task')}, against Yi-34B's {_reward(r, 'zero_router')} (the best "
                     f"single model on train), the probe's {_reward(r, 'probe')}, escalate's {_reward(r, 'escalate')} "
                     f"(whose setting, chosen on train, buys no probe) and the oracle's {_reward(r, 'oracle')}",
           "price weight 0.1"),
    Figure("docs/many_models.md", "many_models.json", "",
           lambda r: f"The evaluation took {r['bench_seconds']:.0f} s on 2 cores (the check against RouterBench's figures aside); of that, choosing settings on train took "
                     f"{r['routers']['mlp']['seconds_by_stage']['select_on_train']:.0f} s for the MLP and "
                     f"{r['routers']['escalate']['seconds_by_stage']['select_on_train']:.0f} s for escalate", "run time"),
]


def _rb_r1_gap(r: dict[str, Any]) -> str:
    g, loss, best = r["routing"]["policy_minus_best_fixed"], r["routing"]["policy_loss"], r["routes"]["always_yi-34b"]
    return (f"earns {best['mean_reward']:.3f} and the per-task rule (Yi-34B for ARC and Winogrande, GPT-3.5 for MBPP) "
            f"{r['routes']['per_task_rule']['mean_reward']:.3f}: the policy is {g['value']:+.3f} [{g['lo']:+.3f}, "
            f"{g['hi']:+.3f}] below the best fixed route, most of it the route ({loss['route']:.3f} of the "
            f"{loss['gap']:.3f} gap)")


MANY_MODELS_FIGURES += [
    Figure(ROUTERBENCH, f"{ROUTERBENCH_RESULTS}/router_r1_routerbench.json", "held_out_curve",
           lambda c: "| mean reward | " + " | ".join(f"{m['eval/mean_reward']:.3f}" for m in c) + " |", "R1 curve"),
    Figure(ROUTERBENCH, f"{ROUTERBENCH_RESULTS}/router_r1_routerbench.json", "held_out_curve",
           lambda c: "| accuracy | " + " | ".join(f"{m['eval/accuracy']:.3f}" for m in c) + " |", "R1 accuracy"),
    Figure(ROUTERBENCH, f"{ROUTERBENCH_RESULTS}/router_r1_routerbench.json", "", _rb_r1_gap, "R1 against fixed routes"),
    Figure(ROUTERBENCH, f"{ROUTERBENCH_RESULTS}/router_r1_routerbench.json", "routes.policy.route_share",
           lambda s: f"asks GPT-3.5 on {100 * s['gpt-3.5']:.0f}% of the held-out questions and GPT-4 on "
                     f"{100 * s['gpt-4']:.0f}%", "R1 call shares"),
    Figure(ROUTERBENCH, f"{ROUTERBENCH_RESULTS}/router_r1_routerbench.json", "",
           lambda r: f"1,{int(r['wall_s']) - 1000:03d} s on 2 cores", "R1 wall time"),
    Figure("README.md", "many_models.json", "routers",
           lambda r: f"`escalate` (buys the cheapest models' replies, then answers with one of them or pays for one more "
                     f"model) is {_mz(r['escalate']['aiq_minus_zero']['overall'])} above the zero router"
                     if max(r, key=lambda k: -1 if k == "oracle" else r[k]["aiq"]["overall"]) == "escalate" else NEVER_IN_A_DOC,
           "README: many models"),
]


MANY_MODELS_FIGURES += [
    Figure("docs/many_models.md", "many_models.json", "routers.gmtrouter",
           lambda g: f"AIQ {g['aiq']['overall']:.3f}, {_mz(g['aiq_minus_zero']['overall'])} (ARC "
                     f"{_mz(g['aiq_minus_zero']['arc-challenge'])}, MBPP {_mz(g['aiq_minus_zero']['mbpp'])}, Winogrande "
                     f"{_mz(g['aiq_minus_zero']['winogrande'])})", "gmtrouter"),
    Figure("docs/many_models.md", "many_models.json", "merged_runs",
           lambda m: f"`python benchmarks/bench_many_models.py --only gmtrouter`, {m[0]['bench_seconds']:.0f} s,",
           "gmtrouter run time"),
]

PER_TASK_RUN = f"{ROUTERBENCH_RESULTS}/router_r1_routerbench_per_task.json"


def _rb_r2(r: dict[str, Any]) -> str:
    g, t, routes = r["routing"]["policy_minus_best_fixed"], r["routing"]["policy_minus_per_task_rule"], r["routes"]
    return (f"After the cold start the policy scores {r['held_out_curve'][0]['eval/mean_reward']:.3f}, above "
            f"always-Yi-34B's {routes['always_yi-34b']['mean_reward']:.3f} on the same questions, and RL then lowers it: "
            f"the trained policy calls Yi-34B on every question of every task, MBPP included, and is "
            f"{g['value']:+.3f} [{g['lo']:+.3f}, {g['hi']:+.3f}] below always-Yi-34B (its format, not its route) and "
            f"{t['value']:+.3f} [{t['lo']:+.3f}, {t['hi']:+.3f}] below the per-task rule "
            f"({routes['per_task_rule']['mean_reward']:.3f})")


MANY_MODELS_FIGURES += [
    Figure(ROUTERBENCH, PER_TASK_RUN, "held_out_curve",
           lambda c: "| mean reward | " + " | ".join(f"{m['eval/mean_reward']:.3f}" for m in c) + " |", "R1 per-task curve"),
    Figure(ROUTERBENCH, PER_TASK_RUN, "", _rb_r2, "R1 per-task cold start against the routes"),
    Figure(ROUTERBENCH, PER_TASK_RUN, "routes.policy.route_share_by_task",
           lambda s: "calls Yi-34B on every question of every task" if all(v["yi-34b"] == 1.0 for v in s.values())
           else NEVER_IN_A_DOC, "R1 per-task calls"),
    Figure(ROUTERBENCH, PER_TASK_RUN, "", lambda r: f"2026-11-28, {r['wall_s']:,.0f} s on 2 cores beside other work",
           "R1 per-task wall time"),
    Figure(ROUTERBENCH, PER_TASK_RUN, "routing.tasks",
           lambda t: f"scored on {sum(t.values())} held-out questions, {t['mbpp']} a task"
           if len(set(t.values())) == 1 else NEVER_IN_A_DOC, "R1 per-task held-out size"),
]


BALANCED_RUN = f"{ROUTERBENCH_RESULTS}/router_r1_routerbench_balanced.json"


def _gap(g: dict[str, Any]) -> str:
    return f"{g['value']:+.3f} [{g['lo']:+.3f}, {g['hi']:+.3f}]"


def _rb_r4(r: dict[str, Any]) -> str:
    loss = r["routing"]["policy_loss"]
    return (f"{_gap(r['routing']['policy_minus_best_fixed'])} below always-Yi-34B, of which\n  the route is "
            f"{loss['route']:.3f}, format {loss['format']:.3f} and copying the reply {loss['copy']:.3f}")


def _kl_at(rows: list[dict[str, Any]], step: int) -> float:
    return next(m["learner/kl"] for m in rows if m["step"] == step)


MANY_MODELS_FIGURES += [
    Figure(ROUTERBENCH, BALANCED_RUN, "held_out_curve",
           lambda c: "| mean reward, prompts balanced over tasks (rb_r4) | "
                     + " | ".join(f"{m['eval/mean_reward']:.3f}" for m in c) + " |", "R1 balanced curve"),
    Figure(ROUTERBENCH, BALANCED_RUN, "natural_mix.held_out_curve",
           lambda c: "| mean reward, the natural mix (rb_r2) | "
                     + " | ".join(f"{m['eval/mean_reward']:.3f}" for m in c) + " |", "R1 natural-mix curve beside it"),
    Figure(ROUTERBENCH, BALANCED_RUN, "", _rb_r4, "R1 balanced against the best fixed route"),
    Figure(ROUTERBENCH, BALANCED_RUN, "routes.policy.route_share_by_task",
           lambda s: "Mistral-7B, on every question of every task" if all(v["mistral-7b"] == 1.0 for v in s.values())
           else NEVER_IN_A_DOC, "R1 balanced calls"),
    Figure(ROUTERBENCH, BALANCED_RUN, "",
           lambda r: f"its KL to the cold start reaches {_kl_at(r['rl_steps'], 6):.3f} at step 6 against rb_r2's "
                     f"{_kl_at(r['natural_mix']['rl_steps'], 6):.4f}", "R1 balanced KL"),
    Figure(ROUTERBENCH, BALANCED_RUN, "with_filter_groups.held_out_curve",
           lambda c: f"the held-out\nreward fell to {c[-1]['eval/mean_reward']:.3f} at step {c[-1]['step']}",
           "R1 balanced with filter_groups"),
    Figure(ROUTERBENCH, BALANCED_RUN, "", lambda r: f"2026-11-29, {r['wall_s']:,.0f} s on 2 cores beside other work",
           "R1 balanced wall time"),
]


def _iv(d: dict) -> str:
    return f"{d['mean']:+.3f} [{d['lo']:+.3f}, {d['hi']:+.3f}]"


SCALE = "router_r1.rb_scale_grpo_v3"  # many_models.json's entry of the at-scale GRPO run (bench_many_models.py --router-r1)
MANY_MODELS_FIGURES += [
    Figure("README.md", "many_models.json", SCALE,
           lambda r: f"{r['episodes']:,} GRPO episodes; a lockbox of {r['questions']} RouterBench test questions read once",
           "README: R1 at scale, its size"),
    Figure("README.md", "many_models.json", SCALE,
           lambda r: f"above the best fixed route: {_iv(r['policy_minus_best_fixed'])} over always-Yi-34B, and level with "
                     f"the per-task rule ({_iv(r['policy_minus_per_task'])})"
                     if r["best_fixed"] == "always_yi-34b" and r["policy_minus_best_fixed"]["lo"] > 0 else NEVER_IN_A_DOC,
           "README: R1 at scale against the best fixed route and the rule"),
    Figure("docs/experiments/README.md", "many_models.json", f"{SCALE}.policy_minus_best_fixed",
           lambda d: f"cold start's per-task rule: {_iv(d)}", "experiments index: R1 at scale"),
]


@pytest.mark.parametrize("fig", MANY_MODELS_FIGURES, ids=[f.what for f in MANY_MODELS_FIGURES])
def test_many_models_doc_quotes_the_committed_result(fig: Figure) -> None:
    test_the_doc_quotes_the_committed_result(fig)
