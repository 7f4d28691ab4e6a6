"""The FastAPI application of the HTTP API, independent of Ray Serve.

``create_app()`` declares every endpoint, its request/response schema (so ``/openapi.json``
documents the API), auth, the body-size cap and the error shape. Each endpoint delegates to the
:class:`~rlrouter.serving.service.RouterService` installed with :func:`install` (the Serve ingress
replica installs its own in its process; tests install one around a local selector).

Errors are always ``{"error": {"message", "type", "field", "param", "code"}}`` (OpenAI's shape; ``param``
is ``field`` under OpenAI's name, ``code`` the status or OpenAI's code): 401 without a valid key,
403 when a key acts for another user, 404 for an unknown request_id or model, 409 for a second
feedback, 408 for a body not received within ``body_timeout_s``, 413 for a body over ``max_body_bytes``, 422 (or 400 for unparsable JSON, an unsupported
option, or a prompt a candidate refuses) naming the field, 502/503 when a candidate or the Router-R1
server fails. Bad input never yields a 5xx, and no message carries a traceback or a Ray actor id.
"""

from __future__ import annotations

import asyncio
import json
import re
from typing import Any

from fastapi import Body, Depends, FastAPI, Header, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, PlainTextResponse, Response, StreamingResponse
from pydantic import ValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException

from rlrouter.serving.auth import ApiKeyAuth, AuthError, Principal
from rlrouter.serving.schemas import (
    ChatCompletionRequest,
    ClassifyRequest,
    ClassifyResponse,
    ErrorResponse,
    FeedbackRequest,
    FeedbackResponse,
    Health,
    ModelList,
    RouteRequest,
    RouteResponse,
    RouterR1Health,
    RouterR1RouteRequest,
    RouterR1RouteResponse,
)
from rlrouter.serving.errors import ApiError, public_text
from rlrouter.serving.metrics import METRICS, RequestMetrics
from rlrouter.serving.service import RouterService

_STATE: dict[str, Any] = {"service": None, "auth": None, "max_body_bytes": 1_000_000, "body_timeout_s": 30.0}


def install(service: RouterService, auth: ApiKeyAuth) -> None:
    """Make ``service`` and ``auth`` the ones this process's app uses."""
    _STATE.update(service=service, auth=auth, max_body_bytes=service.serving.max_body_bytes,
                  body_timeout_s=service.serving.body_timeout_s)


def _service() -> RouterService:
    svc = _STATE["service"]
    if svc is None:
        raise ApiError(503, "the router service is not initialised yet", type_="server_error")
    return svc


def _error(status: int, message: str, field: str | None = None, type_: str | None = None,
           headers: dict[str, str] | None = None, code: str | None = None) -> JSONResponse:
    t = type_ or ("invalid_request_error" if 400 <= status < 500 else "server_error")
    if status == 401:
        t = "authentication_error"
        headers = {**(headers or {}), "WWW-Authenticate": "Bearer"}
    elif status == 403:
        t = "permission_error"
    body = {"message": message, "type": t, "field": field, "param": field, "code": code or status}
    return JSONResponse({"error": body}, status_code=status, headers=headers)


def _field_path(loc: tuple | list) -> str:
    loc = list(loc)
    if loc and loc[0] in ("body", "query", "header", "path"):
        loc = loc[1:]  # where the value came from, not a field
    parts = [str(p) for p in loc]
    out = ""
    for p in parts:
        out += f"[{p}]" if p.isdigit() else (f".{p}" if out else p)
    return out or "body"


def principal(authorization: str | None = Header(default=None, description="Bearer <API key>"),
              x_api_key: str | None = Header(default=None, description="API key (alternative header)")) -> Principal:
    auth = _STATE["auth"]
    if auth is None:
        raise ApiError(503, "auth is not initialised yet")
    return auth.authenticate(authorization, x_api_key)


def router_r1_principal(request: Request, authorization: str | None = Header(default=None),
                        x_api_key: str | None = Header(default=None)) -> Principal | None:
    """A key, or none for a client inside ``serving.router_r1_keyless_networks`` (VSR sends no key).

    The address is the TCP peer's; an X-Forwarded-For header, which any client can write, counts only
    when the peer is in ``serving.trusted_proxies`` (:mod:`rlrouter.serving.peer`)."""
    svc = _STATE["service"]
    if authorization or x_api_key or svc is None:
        return principal(authorization, x_api_key)
    serving = svc.serving
    send = "missing API key: send 'Authorization: Bearer <key>' or 'X-API-Key'"
    if not serving.router_r1_keyless_networks:
        raise AuthError(401, f"{send} (VSR's Router-R1 client sends none: to let it in without one, list the "
                             f"network it calls from in serving.router_r1_keyless_networks)")
    forwarded = request.headers.getlist("x-forwarded-for")
    host = serving.client_address(request.client.host if request.client else None, forwarded)
    if serving.keyless(host):
        return None
    if host is None and forwarded:
        raise AuthError(401, f"{send} (the request carries X-Forwarded-For, and no proxy listed in "
                             f"serving.trusted_proxies sent it, so its client address is unknown and "
                             f"serving.router_r1_keyless_networks does not apply)")
    raise AuthError(401, f"{send} (client address {host} is not in serving.router_r1_keyless_networks)")


MAX_JSON_DEPTH = 100
"""Deeper JSON bodies get a 400 before parsing. Python's parser fails on deep nesting only at its recursion
limit, which a library may raise in the process: the answer to a body must not depend on what was imported."""

_JSON_SPECIAL = re.compile(rb'[\[\]{}"\\]')


class JsonDepth:
    """The deepest nesting of a JSON text fed in chunks; brackets inside strings (escapes included) do not
    count. Only the bytes that matter are visited (a regex finds them), so a large body costs little."""

    def __init__(self) -> None:
        self.depth = self.deepest = 0
        self.in_string = self.escaped = False

    def feed(self, chunk: bytes) -> int:
        escaped_at = 0 if self.escaped else -1  # the byte a backslash before it escapes
        self.escaped = False
        for m in _JSON_SPECIAL.finditer(chunk):
            j = m.start()
            if j == escaped_at:
                continue
            c = chunk[j]
            if self.in_string:
                if c == 0x5C:  # a backslash: the next byte is escaped (maybe the next chunk's first)
                    escaped_at = j + 1
                    self.escaped = j + 1 == len(chunk)
                elif c == 0x22:
                    self.in_string = False
            elif c == 0x22:
                self.in_string = True
            elif c in (0x5B, 0x7B):
                self.depth += 1
                self.deepest = max(self.deepest, self.depth)
            elif c in (0x5D, 0x7D):
                self.depth -= 1
        return self.deepest


class BodyLimits:
    """Pure ASGI middleware: 413 when the body is (or turns out to be) over the cap, before parsing; 408 when
    the whole body has not arrived ``body_timeout_s`` after the request's first read (a slow client, e.g.
    one that announces a body and never sends it, would otherwise hold its request open for ever: neither
    uvicorn nor Ray Serve's proxy times out a body).

    A chunked body has no Content-Length: the cap is then found while reading. FastAPI turns any
    exception raised by ``receive`` into "error parsing the body" (a 1.4 MB chunked body was
    called "not valid JSON"), so the failure is remembered here and the app's answer replaced by ours.
    """

    def __init__(self, app: Any):
        self.app = app

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        cap, wait_s = _STATE["max_body_bytes"], _STATE["body_timeout_s"]
        too_big = _error(413, f"body: larger than the {cap}-byte limit (max_body_bytes)", "body")
        too_deep = _error(400, f"body: JSON nested too deeply to parse (more than {MAX_JSON_DEPTH} levels)", "body")
        depth = JsonDepth()
        too_slow = _error(408, f"body: not received within {wait_s:g} s (serving.body_timeout_s); send the whole "
                               f"body at once", "body")
        for name, value in scope.get("headers", []):
            if name == b"content-length":
                try:
                    over = int(value) > cap
                except ValueError:
                    over = False
                if over:
                    return await too_big(scope, receive, send)
        seen = 0
        failed: JSONResponse | None = None
        started = False
        deadline: float | None = None
        body_done = False

        class _Refused(Exception):
            pass

        async def limited_receive() -> dict:
            nonlocal seen, failed, deadline, body_done
            if body_done:  # after the body only a disconnect can come: no deadline on that wait
                return await receive()
            loop = asyncio.get_running_loop()
            deadline = deadline or loop.time() + wait_s
            try:
                msg = await asyncio.wait_for(receive(), max(deadline - loop.time(), 0.001))
            except asyncio.TimeoutError:
                failed = too_slow
                raise _Refused() from None
            if msg["type"] == "http.request":
                seen += len(msg.get("body", b""))
                body_done = not msg.get("more_body", False)
                if seen > cap:
                    failed = too_big
                    raise _Refused()
                if depth.feed(msg.get("body", b"")) > MAX_JSON_DEPTH:
                    failed = too_deep
                    raise _Refused()
            return msg

        async def guarded_send(msg: dict) -> None:
            nonlocal started
            if failed is not None:
                return  # the app's answer to a truncated body is replaced by ours below
            started = True
            await send(msg)

        try:
            await self.app(scope, limited_receive, guarded_send)
        except _Refused:
            pass
        if failed is not None and not started:
            await failed(scope, receive, send)


def _parse_failure(cause: BaseException | None) -> str:
    """Why FastAPI could not parse a body, in words (it reports every case as one 400)."""
    if isinstance(cause, RecursionError):  # BodyLimits refuses deeper bodies first; kept for a lower limit
        return f"JSON nested too deeply to parse (more than {MAX_JSON_DEPTH} levels)"
    if isinstance(cause, UnicodeDecodeError):
        return "not valid JSON (bytes that are not UTF-8 text)"
    return f"not valid JSON ({type(cause).__name__}: {cause})" if cause is not None else "not valid JSON"


def create_app() -> FastAPI:
    app = FastAPI(
        title="rlrouter serve",
        version="1",
        description=("Online LLM routing: the rl_driven bandit selector (Thompson sampling, personalization, "
                     "implicit feedback, contextual linear TS), an OpenAI-compatible proxy with model 'auto', "
                     "and the Router-R1 server protocol of the vLLM Semantic Router. Auth: "
                     "'Authorization: Bearer <key>'; each key is bound to one user_id."),
        responses={401: {"model": ErrorResponse}, 422: {"model": ErrorResponse}},
    )
    app.add_middleware(BodyLimits)
    app.add_middleware(RequestMetrics)  # outermost: a 413 or 408 of the body limits is counted too

    @app.exception_handler(ApiError)
    async def _api_error(_: Request, e: ApiError) -> JSONResponse:
        return _error(e.status, e.message, e.field, e.type, code=e.code)

    @app.exception_handler(AuthError)
    async def _auth_error(_: Request, e: AuthError) -> JSONResponse:
        return _error(e.status, e.message, e.field)

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(_: Request, e: StarletteHTTPException) -> JSONResponse:
        # FastAPI's own 4xx (a body that is not UTF-8, an unknown path, a wrong method) in our error shape;
        # only a body can fail to parse, so that one names it (every 4xx names the field)
        detail = str(e.detail)
        if e.status_code == 400 and "parsing the body" in detail:
            return _error(400, f"body: {_parse_failure(e.__cause__)}", "body")
        if e.status_code == 404:
            return _error(404, "path: no such endpoint", "path")
        if e.status_code == 405:
            return _error(405, "method: not allowed on this path", "method", headers=dict(e.headers or {}))
        return _error(e.status_code, detail, None, headers=dict(e.headers or {}) or None)

    # an empty JSON object reaches FastAPI as "body missing": re-validate it to name the first missing field
    body_models = {"/route": RouteRequest, "/feedback": FeedbackRequest, "/v1/chat/completions": ChatCompletionRequest,
                   "/router_r1/route": RouterR1RouteRequest, "/classify": ClassifyRequest}

    @app.exception_handler(RequestValidationError)
    async def _validation(request: Request, e: RequestValidationError) -> JSONResponse:
        errs = e.errors()
        if any(err.get("type") == "json_invalid" for err in errs):
            return _error(400, "body: not valid JSON", "body")
        ctype = request.headers.get("content-type", "")
        if isinstance(e.body, (bytes, bytearray)) and "json" not in ctype:
            # FastAPI parses JSON only when the request says so (curl -d sends form encoding)
            return _error(415, f"body: send it as JSON with 'Content-Type: application/json' "
                               f"(got {ctype or 'no Content-Type'})", "body")
        model = body_models.get(request.url.path)
        if model is not None and errs and tuple(errs[0].get("loc", ())) == ("body",) and e.body in ({}, None, b""):
            try:
                model.model_validate({})
            except ValidationError as inner:
                errs = inner.errors()
        first = errs[0] if errs else {"loc": ("body",), "msg": "invalid"}
        field = _field_path(first.get("loc", ()))
        msg = str(first.get("msg", "invalid")).removeprefix("Value error, ")
        named = re.match(r"^([A-Za-z_][\w.\[\]]*): ", msg)
        if field == "body" and named:  # a whole-body validator names the field at the start of its message
            field, msg = named.group(1), msg[named.end():]
        more = f" (and {len(errs) - 1} more)" if len(errs) > 1 else ""
        return _error(422, f"field '{field}': {msg}{more}", field)

    @app.exception_handler(Exception)
    async def _unexpected(_: Request, e: Exception) -> JSONResponse:
        return _error(500, f"internal error: {public_text(f'{type(e).__name__}: {e}')}")

    @app.post("/route", response_model=RouteResponse, tags=["selector"],
              responses={403: {"model": ErrorResponse}, 503: {"model": ErrorResponse}})
    async def route(body: RouteRequest, who: Principal = Depends(principal)) -> RouteResponse:
        """Pick a candidate for a query. Give ``request_id`` back to ``/feedback``."""
        return await _service().route(body, who)

    @app.post("/feedback", response_model=FeedbackResponse, tags=["selector"],
              responses={403: {"model": ErrorResponse}, 404: {"model": ErrorResponse}, 409: {"model": ErrorResponse}})
    async def feedback(body: FeedbackRequest, who: Principal = Depends(principal)) -> FeedbackResponse:
        """Explicit (``outcome``), implicit (``followup_text``) or Router-R1 reward feedback on a decision.

        Returns 200 only once the update is durable (write-ahead log fsynced); 404 for an unknown
        request_id; 409 when that decision already got its feedback.
        """
        return await _service().feedback(body, who)

    @app.post("/v1/chat/completions", tags=["openai"],
              responses={200: {"description": "chat.completion, or text/event-stream of chunks when stream=true"},
                         404: {"model": ErrorResponse}, 502: {"model": ErrorResponse}})
    async def chat_completions(body: ChatCompletionRequest, request: Request,
                               who: Principal = Depends(principal)) -> Any:
        """OpenAI-compatible. ``model: "auto"`` routes then proxies to the chosen candidate (named in the
        answer's ``model``); ``"arena"`` calls every candidate and aggregates; a candidate name proxies
        directly. ``x_rlrouter.request_id`` (and header ``X-RLRouter-Request-Id``) is the id for ``/feedback``."""
        out, headers = await _service().chat(body, who, request.headers.get("x-session-id"))
        if isinstance(out, dict):
            return JSONResponse(out, headers=headers)
        return StreamingResponse(out, media_type="text/event-stream", headers=headers)

    @app.get("/v1/models", response_model=ModelList, tags=["openai"])
    async def models(who: Principal = Depends(principal)) -> ModelList:
        """The candidates, plus ``auto`` (routed) and ``arena`` (all candidates, aggregated)."""
        return _service().models()

    @app.post("/router_r1/route", response_model=RouterR1RouteResponse, tags=["router_r1"])
    async def router_r1_route(body: RouterR1RouteRequest,
                              who: Principal | None = Depends(router_r1_principal)) -> RouterR1RouteResponse:
        """The vLLM Semantic Router's Router-R1 server protocol. ``backend`` says whether a Router-R1
        policy or (when none is configured) the rl_driven selector decided."""
        return await _service().router_r1_route(body, who)

    @app.get("/router_r1/health", response_model=RouterR1Health, tags=["router_r1"])
    async def router_r1_health() -> dict[str, str]:
        return _service().router_r1_health()

    @app.post("/classify", response_model=ClassifyResponse, tags=["intent"],
              responses={404: {"model": ErrorResponse}})
    async def classify(body: ClassifyRequest, who: Principal = Depends(principal)) -> ClassifyResponse:
        """The intent classifier's category for each text (404 when none is configured)."""
        return ClassifyResponse(labels=await _service().classify(body.texts))

    @app.get("/stats", tags=["selector"])
    async def stats(who: Principal = Depends(principal)) -> Any:
        """Posteriors (alpha, beta, mean, counts) per scope: global, categories, and the caller's user
        scope (admin keys: every user)."""
        return JSONResponse(json.loads(json.dumps(await _service().stats(who))))

    @app.get("/v1/budgets", tags=["budgets"])
    async def budgets(end_user: str | None = None, who: Principal = Depends(principal)) -> Any:
        """The caller's budgets (``serving.budgets``) in their current period: limit, spent, left, when it
        resets; ``end_user`` adds the accounts of that tag. Admin keys also get every account's spend."""
        return await _service().budgets(who, end_user)

    @app.get("/v1/routers", tags=["routers"])
    async def routers(who: Principal = Depends(principal)) -> Any:
        """The served routers (``router-<name>``): each one's current version, its loaded versions, the release
        in progress (canary share, each version's reward on live feedback, the difference with its interval)
        and the releases that ended."""
        return await _service().router_status()

    @app.post("/v1/routers/{name}/versions", tags=["routers"],
              responses={400: {"model": ErrorResponse}, 403: {"model": ErrorResponse}, 404: {"model": ErrorResponse}})
    async def router_version(name: str, body: dict[str, Any] = Body(...), who: Principal = Depends(principal)) -> Any:
        """Admin: load a router folder (``path``, written by jobs/train_router.py) as ``version`` of router
        ``name``, beside the current one, and start its canary (``release``: overrides of ``serving.release``)."""
        return await _service().router_release(name, "load", body, who)

    @app.post("/v1/routers/{name}/promote", tags=["routers"],
              responses={400: {"model": ErrorResponse}, 403: {"model": ErrorResponse}, 404: {"model": ErrorResponse}})
    async def router_promote(name: str, body: dict[str, Any] | None = Body(None),
                             who: Principal = Depends(principal)) -> Any:
        """Admin: end the release in progress by making its new version current (optional ``reason``)."""
        return await _service().router_release(name, "promote", body, who)

    @app.post("/v1/routers/{name}/rollback", tags=["routers"],
              responses={400: {"model": ErrorResponse}, 403: {"model": ErrorResponse}, 404: {"model": ErrorResponse}})
    async def router_rollback(name: str, body: dict[str, Any] | None = Body(None),
                              who: Principal = Depends(principal)) -> Any:
        """Admin: end the release in progress by setting its new version aside (optional ``reason``)."""
        return await _service().router_release(name, "rollback", body, who)

    @app.get("/metrics", tags=["ops"], response_class=PlainTextResponse,
             responses={200: {"content": {"text/plain": {}}, "description": "Prometheus text format"}})
    async def metrics() -> Response:
        """This replica's request counts by route and status, latency histogram and selector decision /
        feedback counters, in Prometheus text format (docs/metrics.md). No key needed, as ``/health``."""
        return Response(METRICS.render(), media_type=METRICS.content_type)

    @app.get("/health", response_model=Health, tags=["ops"])
    async def health(request: Request) -> Health:
        """Liveness: the ingress answers and the selector actor responds. ``port``: the port this answer
        came from; ``direct_ingress_ports``: the replica's own HTTP ports (direct ingress), which move
        when a replica is replaced."""
        server = request.scope.get("server") or (None, None)
        return await _service().health(port=server[1])

    return app
