"""The GMTRouter role: the trained graph router decides for the users it knows."""

from __future__ import annotations

from typing import Any

from rlrouter.serving.context import ServiceContext


class GMTRole:
    def __init__(self, ctx: ServiceContext, gmt: Any, name_map: dict[str, str] | None = None):
        """``gmt``: async ``score(user_id, query) -> {llm: score}`` (KeyError for an unknown user);
        ``name_map``: candidate name -> the model name GMTRouter was trained on (the logged name)."""
        self.ctx = ctx
        self.gmt = gmt
        self.to_candidate = {v: k for k, v in (name_map or {}).items()}

    async def decide(self, query: str, user_id: str, cands: list[str], req: dict[str, Any]) -> dict[str, Any] | None:
        """GMTRouter's choice for a user it knows; None for an unknown user (the bandit decides)."""
        try:
            raw = await self.gmt.score(user_id, query)
        except KeyError:
            return None
        scores = {self.to_candidate.get(m, m): float(v) for m, v in raw.items()}
        known = {c: scores[c] for c in cands if c in scores}
        if not known:
            return None
        model = max(known, key=known.get)
        dec = await self.ctx.selector.call("register", req=req, model=model, mode="gmtrouter",
                                           detail={"gmt_scores": known})
        dec["scores"] = known
        return dec
