"""Thin Serve deployments around the trained GMTRouter, the intent classifier and the routers saved by
jobs/train_router.py (logic in rlrouter/).

Enabled from the app config (serve/config.yaml):
    gmtrouter: {checkpoint: outputs/gmtrouter/<run>/best}
    intent:    {checkpoint: outputs/intent/<run>/rl}
    routers:   {mf: {path: outputs/routers/mf, version: "1"}, selector: {path: outputs/routers/selector, state: ...}}
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


@serve.deployment(num_replicas=1, ray_actor_options={"num_cpus": 0.5}, max_ongoing_requests=64)
class ServedRoutersDeployment:
    """Every router of ``routers:`` in one process (one MiniLM for all); exactly one replica, so a router
    that learns online sees every feedback."""

    def __init__(self, entries: dict[str, dict[str, Any]], release: dict[str, Any] | None = None,
                 journal: str | None = None):
        from rlrouter.serving.served_routers import ServedRouters

        self.host = ServedRouters(entries, release=release, root=ROOT, journal=journal)
        self.host.warm()  # the encoder loads before the replica takes traffic

    def decide(self, name: str, query: str, **kwargs: Any) -> dict[str, Any]:
        return self.host.decide(name, query, **kwargs)

    def feedback(self, name: str, request_id: str, **kwargs: Any) -> dict[str, Any]:
        return self.host.feedback(name, request_id, **kwargs)

    def release(self, name: str, action: str, args: dict[str, Any]) -> dict[str, Any]:
        return self.host.release(name, action, args)

    def status(self) -> dict[str, Any]:
        return self.host.status()

    def __del__(self) -> None:
        host = getattr(self, "host", None)
        if host is not None:
            host.close()
