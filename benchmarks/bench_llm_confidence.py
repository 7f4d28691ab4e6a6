"""How much a small local LLM's confidence features say about who wins, on RouteLLM's MMLU logs.

Reads ``../shared/data/routellm/mmlu/*.csv`` and each prompt's ``LM_FEATURES`` (``rlrouter.routers.confidence``,
from the disk cache after the first pass: 46.5 min for 13,074 prompts on 2 cores), and writes the
correlation of every feature with GPT-4's and Mixtral's logged correctness and with the gain (GPT-4 right
minus Mixtral right), across all prompts and within a subject (each subject's mean removed), to
``llm_confidence.json`` beside its study (``STUDY_RESULTS``).

    HF_HUB_OFFLINE=1 python benchmarks/bench_llm_confidence.py [--data ../shared/data/routellm/mmlu]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
STUDY = "2026-11-offline-routers-unseen-subjects"
"""The dated study this script belongs to (docs/experiments/): its results go there; make bench leaves it out."""
STUDY_RESULTS = ROOT / "docs" / "experiments" / STUDY / "results"

from rlrouter.provenance import write_result  # noqa: E402

# what this benchmark's figures depend on (rlrouter.provenance: the staleness report lists its results when these change)
MEASURES = ("benchmarks/bench_llm_confidence.py", "rlrouter/routers/confidence.py")
WEAK, STRONG = "mistralai/Mixtral-8x7B-Instruct-v0.1", "gpt-4-1106-preview"


def main() -> None:
    import pandas as pd

    from rlrouter.routers.confidence import LM_FEATURES, confidence_features

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", default=str(ROOT.parent / "shared" / "data" / "routellm" / "mmlu"))
    args = ap.parse_args()
    files = sorted(Path(args.data).glob("mmlu_*.csv"))
    if not files:
        raise SystemExit(f"--data: no mmlu_<subject>.csv under {args.data} (RouteLLM's routellm/mmlu folder)")
    df = pd.concat([pd.read_csv(f).assign(subject=f.stem.removeprefix("mmlu_")) for f in files], ignore_index=True)
    feats = pd.DataFrame(confidence_features(df["prompt"].tolist()), columns=list(LM_FEATURES))
    out = pd.DataFrame({"weak": df[WEAK].astype(float), "strong": df[STRONG].astype(float)})
    out["gain"] = out["strong"] - out["weak"]
    both = pd.concat([feats, out], axis=1).assign(subject=df["subject"])
    within = both.drop(columns="subject") - both.groupby("subject").transform("mean")

    def corr(frame: pd.DataFrame) -> dict:
        return {f: {t: round(float(np.corrcoef(frame[f], frame[t])[0, 1]), 3) for t in ("strong", "weak", "gain")}
                for f in LM_FEATURES}

    res = {"prompts": len(df), "subjects": int(df["subject"].nunique()),
           "means": {f: round(float(feats[f].mean()), 3) for f in LM_FEATURES},
           "corr_all": corr(both), "corr_within_subject": corr(within),
           "command": "python benchmarks/bench_llm_confidence.py"}
    path = STUDY_RESULTS / "llm_confidence.json"
    write_result(path, res, MEASURES, indent=1)
    print(json.dumps(res, indent=1))


if __name__ == "__main__":
    main()
