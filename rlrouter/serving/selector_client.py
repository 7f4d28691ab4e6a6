"""Calls to the selector, as plain data: how every role reaches the one selector holding the posteriors.

In the Serve app the selector is a single actor behind a ``DeploymentHandle`` (serve/app.py); in unit
tests a :class:`LocalSelectorClient` wraps a :class:`~rlrouter.selector.Selector`. Calls travel as an
*envelope* (:func:`run_selector_call`), so selector errors cross the Ray boundary as plain tuples and
come back (:func:`unwrap`) as :class:`~rlrouter.serving.errors.ApiError` with the right status and field.
"""

from __future__ import annotations

import asyncio
import dataclasses
from typing import Any, Protocol

from rlrouter.selector.selector import SelectionRequest, Selector, SelectorError
from rlrouter.serving.errors import ApiError

SELECTOR_METHODS = ("select", "select_top_k", "select_all", "register", "set_chosen", "stick", "affinity_error",
                    "observe_latency",
                    "feedback", "pending_info", "stats", "ping")


def run_selector_call(selector: Selector, method: str, kwargs: dict[str, Any]) -> tuple:
    """Run one selector method; returns ``("ok", value)`` or ``("error", status, field, message)``.

    Used inside the selector actor: plain tuples cross the Ray boundary without exception pickling.
    """
    if method not in SELECTOR_METHODS:
        return ("error", 500, None, f"unknown selector method '{method}'")
    try:
        if method == "ping":
            return ("ok", {"selections": selector.state.selections})
        if method == "pending_info":
            dec = selector.pending(kwargs["request_id"])
            return ("ok", {"model": dec.model, "models": list(dec.models), "mode": dec.mode, "user_id": dec.user_id,
                           "answered": dec.feedback_seq is not None})
        if method == "feedback":
            owner = kwargs.pop("owner", None)
            admin = kwargs.pop("admin", False)
            dec = selector.pending(kwargs["request_id"])
            if not admin and dec.user_id is not None and dec.user_id != owner:
                return ("error", 403, "request_id",
                        f"request '{kwargs['request_id']}' was routed for another user; this key may not give its feedback")
            u = selector.feedback(**kwargs)
            return ("ok", {"kind": u.kind, "detail": u.detail,
                           "deltas": [{"model": d.model, "d_alpha": d.d_alpha, "d_beta": d.d_beta} for d in u.deltas],
                           "durable": bool(selector.config.storage_path)})
        if method in ("select", "select_top_k", "select_all", "register"):
            kwargs = dict(kwargs)
            kwargs["req"] = SelectionRequest(**kwargs["req"])
        value = getattr(selector, method)(**kwargs)
        if dataclasses.is_dataclass(value):
            value = dataclasses.asdict(value)
        return ("ok", value)
    except SelectorError as e:
        return ("error", e.status, e.field, str(e))


def unwrap(envelope: tuple) -> Any:
    if envelope[0] == "ok":
        return envelope[1]
    _, status, field, message = envelope
    raise ApiError(status, message, field)


def selection_request(candidates: list[str] | None, user_id: str | None, session_id: str | None,
                      category: str | None, embedding: list[float] | None) -> dict[str, Any]:
    """A :class:`~rlrouter.selector.selector.SelectionRequest` as the plain dict a selector call carries."""
    return {"candidates": candidates or [], "user_id": user_id, "session_id": session_id, "category": category,
            "embedding": embedding}


class SelectorClient(Protocol):
    async def call(self, method: str, **kwargs: Any) -> Any: ...


class LocalSelectorClient:
    """In-process selector (tests, single-process use); blocking work runs in a thread."""

    def __init__(self, selector: Selector):
        self.selector = selector

    async def call(self, method: str, **kwargs: Any) -> Any:
        if method == "feedback":
            # the fsync must not stall the event loop
            return unwrap(await asyncio.to_thread(run_selector_call, self.selector, method, kwargs))
        return unwrap(run_selector_call(self.selector, method, kwargs))
