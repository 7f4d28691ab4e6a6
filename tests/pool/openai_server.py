"""A small but real OpenAI-compatible server for the pool's HTTP tests (FastAPI + uvicorn on 127.0.0.1).

It answers ``POST /v1/chat/completions`` (JSON or SSE streaming) with ``usage``, and lets a test steer
its behaviour through the last user message, so every behaviour is reached over real sockets:

- ``FAIL<n>:<key> ...``: the first n requests carrying that key get HTTP 503, later ones succeed;
- ``SLEEP<seconds> ...``: answer after that delay (timeouts, concurrency);
- ``BAD400``: HTTP 400 with an OpenAI-style error body (must not be retried);
- ``NOUSAGE``: omit ``usage`` (the client must estimate tokens).

The reply text is ``echo: <message>``; with ``model: grader-1`` the server is a judge (``rlrouter.serving.traffic.
JUDGE_PROMPT``): "Yes." when the graded answer holds a digit, else "no"; ``usage`` counts whitespace-separated words of all messages
(prompt) and of the reply (completion), so tests can check the numbers by hand. ``GET /stats``
reports requests seen and the peak number in flight; ``POST /reset`` clears them.
"""

from __future__ import annotations

import asyncio
import json
import re
import socket
import threading
import time
from collections import Counter
from typing import Any

import uvicorn
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, StreamingResponse


def make_app(api_key: str | None = None) -> FastAPI:
    app = FastAPI()
    state: dict[str, Any] = {"in_flight": 0, "peak": 0, "requests": 0, "seen": Counter(), "bodies": []}

    @app.get("/stats")
    async def stats() -> dict[str, Any]:
        return {"peak": state["peak"], "requests": state["requests"], "in_flight": state["in_flight"]}

    @app.post("/reset")
    async def reset() -> dict[str, Any]:
        state.update(in_flight=0, peak=0, requests=0, seen=Counter(), bodies=[])
        return {"ok": True}

    @app.get("/last_body")
    async def last_body() -> dict[str, Any]:
        return state["bodies"][-1] if state["bodies"] else {}

    @app.get("/v1/models")
    async def models() -> dict[str, Any]:
        return {"object": "list", "data": [{"id": "echo-1", "object": "model"}]}

    @app.post("/v1/chat/completions")
    async def chat(request: Request):
        if api_key is not None and request.headers.get("authorization") != f"Bearer {api_key}":
            return JSONResponse({"error": {"message": "invalid api key", "type": "auth"}}, status_code=401)
        body = await request.json()
        state["bodies"].append(body)
        state["requests"] += 1
        state["in_flight"] += 1
        state["peak"] = max(state["peak"], state["in_flight"])
        try:
            messages = body.get("messages") or []
            last = str(messages[-1].get("content", "")) if messages else ""
            m = re.search(r"SLEEP([0-9.]+)", last)
            if m:
                await asyncio.sleep(float(m.group(1)))
            m = re.search(r"FAIL(\d+):(\w+)", last)
            if m:
                state["seen"][m.group(2)] += 1
                if state["seen"][m.group(2)] <= int(m.group(1)):
                    return JSONResponse({"error": {"message": "overloaded, try again", "type": "server"}},
                                        status_code=503)
            if "BAD400" in last:
                return JSONResponse({"error": {"message": "bad request: unknown parameter", "type": "invalid"}},
                                    status_code=400)
            reply = f"echo: {last}"
            if body.get("model") == "grader-1":  # a judge: "yes" when the graded answer holds a digit
                answer = last.split("Answer:", 1)[-1].rsplit("Is the answer correct?", 1)[0]
                reply = "Yes." if re.search(r"\d", answer) else "no"
            usage = {"prompt_tokens": sum(len(str(x.get("content", "")).split()) for x in messages),
                     "completion_tokens": len(reply.split())}
            usage["total_tokens"] = usage["prompt_tokens"] + usage["completion_tokens"]
            rid = f"chatcmpl-test{state['requests']}"
            if body.get("stream"):
                include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
                return StreamingResponse(_sse(rid, body["model"], reply, usage if include_usage else None),
                                         media_type="text/event-stream")
            out = {"id": rid, "object": "chat.completion", "created": int(time.time()), "model": body["model"],
                   "choices": [{"index": 0, "message": {"role": "assistant", "content": reply},
                                "finish_reason": "stop"}]}
            if "NOUSAGE" not in last:
                out["usage"] = usage
            return out
        finally:
            state["in_flight"] -= 1

    return app


async def _sse(rid: str, model: str, reply: str, usage: dict | None):
    def chunk(delta: dict, finish: str | None = None, **extra: Any) -> str:
        d = {"id": rid, "object": "chat.completion.chunk", "created": int(time.time()), "model": model,
             "choices": [{"index": 0, "delta": delta, "finish_reason": finish}], **extra}
        return f"data: {json.dumps(d)}\n\n"

    yield chunk({"role": "assistant", "content": ""})
    words = reply.split(" ")
    for i, w in enumerate(words):
        await asyncio.sleep(0)
        yield chunk({"content": w if i == 0 else " " + w})
    yield chunk({}, "stop")
    if usage is not None:
        last = {"id": rid, "object": "chat.completion.chunk", "model": model, "choices": [], "usage": usage}
        yield f"data: {json.dumps(last)}\n\n"
    yield "data: [DONE]\n\n"


class ServerThread:
    """uvicorn in a daemon thread on a free 127.0.0.1 port; ``url`` is ready when ``start`` returns."""

    def __init__(self, app: FastAPI):
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self.server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="off",
                                                    timeout_keep_alive=30, timeout_graceful_shutdown=1))
        self.thread = threading.Thread(target=self.server.run, kwargs={"sockets": [self.sock]}, daemon=True)

    def start(self, timeout: float = 20.0) -> ServerThread:
        self.thread.start()
        t0 = time.time()
        while not self.server.started:
            if time.time() - t0 > timeout or not self.thread.is_alive():
                raise RuntimeError("test OpenAI server did not start")
            time.sleep(0.02)
        return self

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(10)
        self.sock.close()
