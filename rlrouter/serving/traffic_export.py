"""The traffic log as logged outcomes: the table a router is trained and judged on (``jobs/export_traffic.py``).

One row per logged request, in RouterBench's wide layout (``rlrouter.data.routerbench``): ``sample_id``, ``prompt``
(or, when the app kept no prompt text, ``prompt_sha256`` and ``embedding``), ``eval_name`` (the request's endpoint),
``time``, ``user``, and per candidate ``<model>`` (its score in [0, 1], from the feedback on the request; blank for
a candidate the request did not call, or with no feedback), ``<model>|model_response`` and ``<model>|total_cost``.
The logging policy is kept beside it: ``logged_model`` (the route the app chose), ``logged_propensity`` (the
probability its policy chose it), ``explored_model`` and ``explored_propensity`` (the candidate exploration
added, and the probability it was drawn), so the off-policy estimators (``rlrouter.eval.ope``: IPS, SNIPS, DR) can score a
new router on routes it would not have taken. Rows are split by time: the first ``1 - test_share`` train, the rest
test, so a router is judged on traffic that came after what it learned from.

Feedback becomes a score as the selector reads it: ``win`` 1, ``tie`` 0.5, ``loss`` 0; an implicit follow-up
``satisfied`` 1 and any other label 0; a Router-R1 reward clipped to [0, 1]. The last feedback on a request
counts. A reply the caller gave no feedback on, and every exploration reply (``serving.traffic.explore_share``),
is scored by its logged correctness when its backend knows it (a replay of logged outcomes), else by the judge's
grade (``serving.traffic.judge``) when it gave one, else left blank. Without exploration every row holds one scored candidate, the one the app chose: a
router learns only from the routes it took, and the report says so.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any, Sequence

from rlrouter.serving.traffic import TrafficRead

OUTCOME_SCORES = {"win": 1.0, "tie": 0.5, "loss": 0.0}


def feedback_score(feedback: Sequence[dict[str, Any]]) -> float | None:
    """The score of a request's reply from its feedback (the last one counts); None without feedback."""
    for fb in reversed(list(feedback)):
        if fb.get("outcome") in OUTCOME_SCORES:
            return OUTCOME_SCORES[fb["outcome"]]
        if fb.get("label") is not None:
            return 1.0 if fb["label"] == "satisfied" else 0.0
        if isinstance(fb.get("reward"), (int, float)) and math.isfinite(fb["reward"]):
            return min(1.0, max(0.0, float(fb["reward"])))
    return None


def export_rows(read: TrafficRead, candidates: Sequence[str] | None = None) -> tuple[list[dict[str, Any]], list[str]]:
    """One row per request (time order) and the candidates (given, else every model a request chose or called)."""
    requests = sorted(read.requests, key=lambda r: r.get("time", 0.0))
    if candidates is None:
        seen = {r["decision"]["model"] for r in requests if r.get("decision")}
        seen |= {c["model"] for r in requests for c in [*(r.get("calls") or []), *(r.get("explore") or [])]}
        candidates = sorted(seen)
    rows = []
    for r in requests:
        dec = r.get("decision") or {}
        chosen = dec.get("model")
        score = feedback_score(r.get("feedback") or [])
        row: dict[str, Any] = {"sample_id": r["id"], "time": r.get("time"), "user": r.get("user"),
                               "eval_name": r.get("endpoint", "traffic"), "logged_model": chosen,
                               "logged_propensity": dec.get("propensity"), "logged_router": dec.get("router"),
                               "feedback": len(r.get("feedback") or [])}
        if "prompt" in r:
            row["prompt"] = r["prompt"]
        else:
            row["prompt_sha256"], row["embedding"] = r.get("prompt_sha256"), r.get("embedding")
        explored = next((c for c in r.get("explore") or [] if c.get("model") != chosen), None)
        row["explored_model"] = explored["model"] if explored else None
        row["explored_propensity"] = explored.get("propensity") if explored else None
        calls = {c["model"]: c for c in [*(r.get("calls") or []), *(r.get("explore") or [])] if "model" in c}
        grades = {g["model"]: g["grade"] for g in r.get("judge") or [] if g.get("grade") is not None}
        for m in candidates:
            call = calls.get(m)
            judged = float(call["correct"]) if call and call.get("correct") is not None else grades.get(m)
            row[m] = (score if score is not None else judged) if m == chosen else judged
            row[f"{m}|model_response"] = call.get("reply") if call else None
            row[f"{m}|total_cost"] = call.get("cost") if call else None
        row["judged"] = score is None and row.get(chosen) is not None
        rows.append(row)
    return rows, list(candidates)


def write_export(read: TrafficRead, out_dir: str | Path, test_share: float = 0.2,
                 candidates: Sequence[str] | None = None) -> dict[str, Any]:
    """Write ``train.parquet``, ``test.parquet`` and ``report.json`` under ``out_dir``; returns the report."""
    import pandas as pd

    if not 0.0 <= test_share < 1.0:
        raise ValueError(f"test_share: a share in [0, 1), got {test_share!r}")
    rows, cands = export_rows(read, candidates)
    if not rows:
        raise ValueError("the traffic log holds no request to export")
    cut = len(rows) - int(round(test_share * len(rows)))
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    frames = {"train": pd.DataFrame(rows[:cut]), "test": pd.DataFrame(rows[cut:])}
    for name, df in frames.items():
        df.to_parquet(out / f"{name}.parquet", index=False)
    scored = [r for r in rows if r[r["logged_model"]] is not None and not r["judged"]]
    explored = sum(1 for r in rows if any(r[f"{m}|model_response"] is not None for m in cands if m != r["logged_model"]))
    report = {
        "requests": len(rows), "train": cut, "test": len(rows) - cut,
        "split": {"by": "time", "test_share": test_share,
                  "train_until": rows[cut - 1]["time"] if cut else None,
                  "test_from": rows[cut]["time"] if cut < len(rows) else None},
        "candidates": cands, "with_feedback": len(scored), "without_feedback": len(rows) - len(scored),
        "route_scored_without_feedback": sum(r["judged"] for r in rows),  # by logged correctness or the judge
        "judge_grades": sum(len([g for g in q.get("judge") or [] if g.get("grade") is not None]) for q in read.requests),
        "skipped_records": read.skipped, "orphan_feedback": len(read.orphan_feedback),
        "logged_routes": {m: sum(r["logged_model"] == m for r in rows) for m in cands},
        "with_propensity": sum(r["logged_propensity"] is not None for r in rows),
        "rows_with_counterfactual_replies": explored,
        "note": ("every row scores only the candidate the app chose: a router trained on this export learns only "
                 "from the routes the logging policy took, and its estimate on the others comes from the "
                 "propensities (off-policy), not from outcomes" if explored == 0 else
                 f"{explored} rows hold a reply of a candidate the app did not choose (exploration)"),
    }
    (out / "report.json").write_text(json.dumps(report, indent=1))
    return report
