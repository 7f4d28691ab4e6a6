"""The one error type of the HTTP API: what a role raises, what ``rlrouter.serving.api`` reports; and the
mapping of a candidate's failure to it.

A candidate's error text comes from deep below (a Ray actor's traceback, an upstream's body). The client
gets what it can act on, never those internals (terminal colour codes, actor ids, tracebacks): a prompt
longer than the candidate's context is a 400 with OpenAI's code ``context_length_exceeded``, another
request the candidate refused as invalid a 400, any other failure a 502.
"""

from __future__ import annotations

import re


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


def candidate_error(model: str, error: str, field: str = "messages") -> ApiError:
    """The ApiError for candidate ``model``'s failure ``error`` (its raw text)."""
    said = public_text(error)
    if _CONTEXT.search(error):
        return ApiError(400, f"field '{field}': the prompt is longer than candidate '{model}' accepts ({said}); "
                             f"shorten it", field, code="context_length_exceeded")
    if _REFUSED.search(error):
        return ApiError(400, f"field '{field}': candidate '{model}' refused the request as invalid ({said})", field)
    return ApiError(502, f"candidate '{model}' failed: {said}", type_="upstream_error")
