"""OpenAI chat-completion shapes for answers from any backend (the Serve app's OpenAI-compatible proxy).

Live OpenAI-compatible candidates pass the endpoint's own JSON through; replay and vLLM candidates
answer with a ``CandidateResponse``, which these helpers dress as a ``chat.completion`` or as a
stream of ``chat.completion.chunk`` objects, so the proxy never needs to know the backend.
"""

from __future__ import annotations

import time
import uuid
from typing import Any

from rlrouter.pool.base import CandidateResponse


def last_user_text(messages: list[dict[str, Any]]) -> str:
    """The query a single-turn backend answers: the last user message's text.

    A replay table is keyed by the question alone, so earlier turns cannot change its answer.
    Multi-part content (``[{"type": "text", "text": ...}]``) is joined.
    """
    for m in reversed(messages):
        if m.get("role") == "user":
            c = m.get("content")
            if isinstance(c, list):
                return "\n".join(str(p.get("text", "")) for p in c if isinstance(p, dict))
            return "" if c is None else str(c)
    raise ValueError("messages: no message with role 'user'")


def _usage(r: CandidateResponse) -> dict[str, int]:
    return {"prompt_tokens": r.prompt_tokens, "completion_tokens": r.completion_tokens,
            "total_tokens": r.prompt_tokens + r.completion_tokens}


def completion_dict(model: str, r: CandidateResponse, request_id: str | None = None) -> dict[str, Any]:
    """A ``chat.completion`` object holding ``r``'s text, usage and cost (``x_cost_usd``)."""
    return {
        "id": request_id or f"chatcmpl-{uuid.uuid4().hex[:24]}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [{"index": 0, "message": {"role": "assistant", "content": r.text}, "finish_reason": "stop"}],
        "usage": _usage(r),
        "x_cost_usd": r.cost,
    }


def chunk_dicts(model: str, r: CandidateResponse, request_id: str | None = None) -> list[dict[str, Any]]:
    """``r`` as the chunks a streaming server sends: role, content, then finish_reason with usage."""
    rid = request_id or f"chatcmpl-{uuid.uuid4().hex[:24]}"
    created = int(time.time())

    def chunk(delta: dict[str, Any], finish: str | None = None, usage: dict | None = None) -> dict[str, Any]:
        d: dict[str, Any] = {"id": rid, "object": "chat.completion.chunk", "created": created, "model": model,
                             "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}
        if usage is not None:
            d["usage"] = usage
        return d

    return [chunk({"role": "assistant", "content": ""}), chunk({"content": r.text}),
            chunk({}, "stop", _usage(r))]
