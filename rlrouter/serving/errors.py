"""The one error type of the HTTP API: what a role raises, what ``rlrouter.serving.api`` reports; and the
mapping of a candidate's failure to it.

A candidate's error text comes from deep below (a Ray actor's traceback, an upstream's body). The client
gets what it can act on, never those internals (terminal colour codes, actor ids, tracebacks) nor the
backend's name or words. One rule for a prompt too long, whatever found it (docs/serve.md "Errors"): a 400
of type ``invalid_request_error`` with OpenAI's code ``context_length_exceeded`` and ``param: messages``, in
OpenAI's words ("... maximum context length is N tokens. However, your messages resulted in M tokens ...");
this server's own character cap (``serving.max_query_chars``) answers the same way. A ``max_tokens`` that
leaves the prompt no room is a 400 naming ``max_tokens`` and the model's limit (OpenAI's ``invalid_value``).
Another request the candidate refused as invalid is a 400, any other failure a 502.
"""

from __future__ import annotations

import re

from rlrouter.pool.base import RequestTooLong


class ApiError(Exception):
    """An error the API reports as ``{"error": {...}}`` with ``status`` (and ``code``: OpenAI's code, else
    the status)."""

    def __init__(self, status: int, message: str, field: str | None = None, type_: str | None = None,
                 code: str | None = None):
        self.status = status
        self.message = message
        self.field = field
        self.type = type_ or ("invalid_request_error" if 400 <= status < 500 else "server_error")
        self.code = code
        super().__init__(message)


def budget_error(account: dict, estimate: float) -> ApiError:
    """429 for a request its budget cannot pay for (``rlrouter.serving.budgets``), in OpenAI's shape for a
    spent quota (type ``insufficient_quota``), naming the budget, the account, what is spent and when it resets."""
    from datetime import datetime, timezone

    resets = datetime.fromtimestamp(account["resets_at"], tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    return ApiError(429, f"field 'budget': budget '{account['budget']}' of {account['tenant']} has "
                         f"{account['remaining_usd']:.6f} USD left this {account['period']} (spent "
                         f"{account['spent_usd']:.6f} of {account['limit_usd']:g}); this request is estimated at "
                         f"{estimate:.6f} USD. It resets at {resets}", "budget", type_="insufficient_quota",
                    code="budget_exceeded")


_ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]")
# Ray's task-error header: "ray::Class.method() (pid=1, ip=..., actor_id=..., repr=...)"
_RAY_FRAME = re.compile(r"ray::\S+\(\)\s*(\(pid=.*)?")
_RAY_WRAPPER = re.compile(r"\bRayTaskError\((\w+)\)")
_LONG_ID = re.compile(r"\b[0-9a-f]{16,}\b")
_MODULE_PATH = re.compile(r"\b(?:[A-Za-z_]\w*\.)+([A-Za-z_]\w*(?:Error|Exception))\b")  # vllm.x.YError -> YError
# vLLM: "The decoder prompt (length N) is longer than the maximum model length of M";
# OpenAI and compatible servers: "This model's maximum context length is M tokens"
_CONTEXT = re.compile(r"longer than the maximum model length|maximum context length|context_length_exceeded",
                      re.IGNORECASE)
_VLLM_NUMBERS = re.compile(r"prompt \(length (\d+)\) is longer than the maximum model length of (\d+)")
_OPENAI_NUMBERS = re.compile(r"maximum context length is (\d+) tokens\. However, your messages resulted in (\d+) tokens")
# the backend's prefix of a candidate's error ("vllm 'name': ", "openai 'name' at URL: HTTP 400: ") and an
# exception's class name ("ValueError: "): who said it, not what is wrong
_BACKEND_PREFIX = re.compile(r"^(?:\w+ '[^']*'(?: at \S+)?: )?(?:HTTP \d{3}: )?(?:\w*(?:Error|Exception)(?::\s*|$))*")
# a candidate that refused the request itself as invalid (vLLM's validation of prompt and sampling)
_REFUSED = re.compile(r"\b(VLLMValidationError|HTTP 400)\b")


def public_text(text: str) -> str:
    """``text`` without terminal codes, Ray frames, actor ids or traceback lines: one line."""
    text = _ANSI.sub("", text)
    lines = [ln.rstrip() for ln in text.splitlines() if ln.strip()]
    if any(ln.startswith("Traceback") or ln.lstrip().startswith("File \"") for ln in lines):
        lines = [ln for ln in lines if not ln.startswith((" ", "\t", "Traceback"))][-1:]  # the exception's line
    line = " ".join(ln.strip() for ln in lines[:1])
    line = _MODULE_PATH.sub(r"\1", _RAY_WRAPPER.sub(r"\1", _RAY_FRAME.sub("", line)))
    line = _LONG_ID.sub("<id>", line)
    return re.sub(r"[\s:]+$", "", line)


def context_length_exceeded(field: str, limit: str, used: str | None = None) -> ApiError:
    """The one answer to a prompt too long (a model's context, or this server's character cap)."""
    what = "messages" if field == "messages" else f"'{field}'"
    used = f" However, your {what} resulted in {used}." if used else ""
    return ApiError(400, f"field '{field}': {limit}.{used} Please reduce the length of the {what}.", field,
                    code="context_length_exceeded")


def too_long_error(model: str, e: RequestTooLong) -> ApiError:
    """A request that does not fit ``model``'s context: the messages (400 ``context_length_exceeded``) or the
    caller's ``max_tokens`` (400 ``invalid_value``, with the largest value that fits)."""
    if e.prompt_too_long:
        return context_length_exceeded("messages", f"model '{model}' has a maximum context length of {e.context} "
                                                   f"tokens", f"{e.prompt_tokens} tokens")
    return ApiError(400, f"field 'max_tokens' is too large: {e.max_tokens}. Model '{model}' has a maximum context "
                         f"length of {e.context} tokens and your messages use {e.prompt_tokens} of them, so "
                         f"max_tokens may be at most {e.context - e.prompt_tokens}.", "max_tokens",
                    code="invalid_value")


def candidate_error(model: str, error: str, field: str = "messages") -> ApiError:
    """The ApiError for candidate ``model``'s failure ``error`` (its raw text)."""
    said = public_text(error)
    ours = RequestTooLong.find(error)
    if ours is not None:
        return too_long_error(model, ours)
    if _CONTEXT.search(error):
        if m := _VLLM_NUMBERS.search(error):
            return too_long_error(model, RequestTooLong(int(m.group(2)), int(m.group(1))))
        if m := _OPENAI_NUMBERS.search(error):
            return too_long_error(model, RequestTooLong(int(m.group(1)), int(m.group(2))))
        return context_length_exceeded(field, f"the messages are longer than model '{model}' accepts")
    if _REFUSED.search(error):
        reason = _BACKEND_PREFIX.sub("", said)
        return ApiError(400, f"field '{field}': model '{model}' refused the request as invalid"
                             f"{': ' + reason if reason else ''}", field)
    return ApiError(502, f"candidate '{model}' failed: {said}", type_="upstream_error")
