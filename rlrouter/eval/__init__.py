"""Router evaluation on logged outcomes: reader, metrics (APGR, CPT, AIQ), baselines, adapters,
off-policy estimators, report, and the evaluate_router job. See docs/evaluation.md."""
