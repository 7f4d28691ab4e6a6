"""Router evaluation on logged outcomes: metrics (APGR, CPT, AIQ), paired bootstrap intervals, off-policy
estimators, reports, the test ledger and the evaluation jobs. The routers it evaluates are in
``rlrouter.routers``. See docs/evaluation.md and docs/many_models.md."""
