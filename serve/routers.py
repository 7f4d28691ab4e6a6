"""Thin Serve deployments around the trained GMTRouter and intent classifier (logic in rlrouter/).

Enabled from the app config (serve/config.yaml):
    gmtrouter: {checkpoint: outputs/gmtrouter/<run>/best}
    intent:    {checkpoint: outputs/intent/<run>/rl}
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ray import serve

ROOT = Path(__file__).resolve().parents[1]


def _path(p: str) -> str:
    q = Path(p)
    return str(q if q.is_absolute() else ROOT / q)


@serve.deployment(num_replicas=1, ray_actor_options={"num_cpus": 0.5})
class GMTRouterDeployment:
    def __init__(self, checkpoint: str):
        from rlrouter.gmt.scorer import GMTRouterScorer

        self.scorer = GMTRouterScorer.load(_path(checkpoint))

    def score(self, user_id: str, query: str) -> dict[str, Any]:
        try:
            return {"scores": self.scorer.score(user_id, query)}
        except KeyError:
            return {"unknown_user": user_id}


@serve.deployment(num_replicas=1, ray_actor_options={"num_cpus": 0.5})
class IntentDeployment:
    def __init__(self, checkpoint: str):
        from rlrouter.intent.model import IntentClassifier

        self.clf = IntentClassifier.load(_path(checkpoint))

    def classify(self, texts: list[str]) -> list[tuple[str, float]]:
        return [(str(label), float(conf)) for label, conf in self.clf.classify(texts)]


class HandleGMT:
    """The service's GMTRouter client (KeyError for an unknown user, as the service expects)."""

    def __init__(self, handle: Any):
        self.handle = handle

    async def score(self, user_id: str, query: str) -> dict[str, float]:
        out = await self.handle.score.remote(user_id, query)
        if "unknown_user" in out:
            raise KeyError(user_id)
        return out["scores"]


class HandleIntent:
    def __init__(self, handle: Any):
        self.handle = handle

    async def classify(self, texts: list[str]) -> list[tuple[str, float]]:
        return await self.handle.classify.remote(texts)
