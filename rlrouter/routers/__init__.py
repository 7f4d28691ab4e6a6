"""Routers: what picks a candidate for each prompt, from logged outcomes or a trained model, and what the Serve
app serves. One floor below evaluation (``rlrouter.eval``: metrics, reports, the ledger) and serving, which both
import from here and nothing from each other (docs/architecture.md).

- ``base``: the router interface (``Router``, the two-candidate ``ThresholdRouter``) and the registry;
- ``pool_routers``: routers over N candidates (``PoolRouter``: a score and a cost a prompt and candidate, routed by
  willingness to pay, ``wtp``);
- ``baselines``, ``learned``, ``adapters``, ``online``, ``encoder_router``, ``traffic_router``: the router kinds;
- ``saved``: the saved-router format the app serves; ``reader``: the logged tables routers train on.
"""
