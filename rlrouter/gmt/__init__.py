"""GMTRouter: personalized routing with a heterogeneous graph transformer.

``graph`` builds the user / session / query / response / llm graph from GMTRouter records,
``model`` is the HGT encoder and the cross-attention predictor, ``train`` the loss, metrics, loop
and checkpoints, ``scorer`` the serving object (``GMTRouterScorer``), ``simulate`` the seeded
personalization set, ``baselines`` what it is measured against and ``job`` the Ray Train job.
"""

from rlrouter.gmt.scorer import GMTRouterScorer, UnknownUserError

__all__ = ["GMTRouterScorer", "UnknownUserError"]
