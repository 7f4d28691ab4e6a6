"""The intent-classifier role: ``POST /classify``, and the category scope of a ``/route`` query."""

from __future__ import annotations

from typing import Any

from rlrouter.serving.context import ServiceContext
from rlrouter.serving.errors import ApiError


class IntentRole:
    def __init__(self, ctx: ServiceContext, intent: Any = None):
        """``intent``: async ``classify(texts) -> [(label, confidence)]``, or None when not configured."""
        self.ctx = ctx
        self.intent = intent

    @property
    def configured(self) -> bool:
        return self.intent is not None

    async def category(self, query: str) -> str | None:
        """The query's label (the selector's category scope), or None without a classifier."""
        if self.intent is None:
            return None
        return (await self.intent.classify([query]))[0][0]

    async def classify(self, texts: list[str]) -> list[dict[str, Any]]:
        """The intent classifier's label and confidence per text (``POST /classify``)."""
        if self.intent is None:
            raise ApiError(404, "no intent classifier is configured (serve config: intent.checkpoint)",
                           type_="not_configured")
        for i, t in enumerate(texts):
            self.ctx.check_query(t, f"texts[{i}]")
        return [{"label": label, "confidence": float(conf)} for label, conf in await self.intent.classify(texts)]
