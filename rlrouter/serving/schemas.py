"""Request and response bodies of the HTTP API (pydantic), which also make its OpenAPI schema.

Field constraints live here, so a bad request is a 4xx naming the field (``rlrouter.serving.api``
turns pydantic's errors into ``field 'x': why``) and never reaches the selector.
"""

from __future__ import annotations

import math
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

ID = Field(default=None, min_length=1, max_length=256, description="Opaque identifier")


def _finite(v: Any) -> Any:
    """NaN and infinity parse as JSON numbers in Python but are no reward, cost or temperature (without
    this check ``reward: NaN`` was refused as "less than or equal to 10")."""
    if isinstance(v, float) and not math.isfinite(v):
        raise ValueError(f"{v} is not a number this API accepts: send a finite number")
    return v


class ErrorBody(BaseModel):
    message: str
    type: str
    field: str | None = None
    param: str | None = Field(default=None, description="OpenAI's name for ``field``")
    code: int | str = Field(description="The HTTP status, or OpenAI's code where one applies "
                                        "(e.g. 'context_length_exceeded')")


class ErrorResponse(BaseModel):
    """Every 4xx/5xx has this shape (as OpenAI's API, so the ``openai`` client shows the message)."""

    error: ErrorBody


class RouteRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    query: str = Field(min_length=1, description="The user's query")
    user_id: str | None = Field(default=None, min_length=1, max_length=256,
                                description="Whose posteriors to use; defaults to the API key's user")
    session_id: str | None = Field(default=None, min_length=1, max_length=256,
                                   description="Conversation id, for the session win rate")
    candidates: list[str] | None = Field(default=None, min_length=1, max_length=64,
                                         description="Restrict the choice to these candidates")
    category: str | None = Field(default=None, min_length=1, max_length=128,
                                 description="Intent/category of the query, when known (category scope)")
    model: str | None = Field(default=None, min_length=1, max_length=256, description=(
        "'auto' (default): the selector's decision chain; or a served router, RouteLLM-style: 'router-<name>', "
        "'router-<name>-<threshold>' or 'router-<name>-share<0..1>' (docs/serve.md, 'Served routers')"))

    @field_validator("query")
    @classmethod
    def _query_not_blank(cls, v: str) -> str:
        if not v.strip():
            raise ValueError("must not be blank")
        return v


class ServedRouterDecision(BaseModel):
    """What a served router (``model: "router-..."``) decided, and why."""

    name: str
    version: str | None = Field(default=None, description="The version that decided: the current one, or the new "
                                                          "one of a release for its canary share")
    type: str = Field(description="Its router type: mf, knn, probe, encoder, gmtrouter, router_r1, selector, ...")
    online: bool = Field(description="True: it learns from this decision's feedback (the bandit selector)")
    candidate: str = Field(description="Its choice, in the candidate names it was trained on")
    weak: str | None = Field(default=None, description="The pool candidate serving its weak candidate")
    strong: str | None = Field(default=None, description="The pool candidate serving its strong candidate")
    score: float | None = Field(default=None, description="Threshold routers: how much the query needs the strong "
                                                          "candidate, on the router's own scale")
    threshold: float | None = Field(default=None, description="Strong when score >= threshold; null for share 0 "
                                                              "(nothing goes to strong)")
    strong_share: float | None = Field(default=None, description="The share the request asked for, if it did")
    training_strong_share: float | None = Field(
        default=None, description="Share of the router's training prompts at or above this threshold")
    report: dict[str, Any] | None = Field(default=None, description="Router-R1: where the policy routed")
    selector_mode: str | None = Field(default=None, description="The served selector's own mode (thompson, ...)")


class ExpectedLatency(BaseModel):
    """A candidate's measured latency, a decaying mean over its calls (``rlrouter.selector.latency``)."""

    ttft_ms: float = Field(description="Expected time to the first token, ms (a call not streamed: its total)")
    total_ms: float = Field(description="Expected time to the whole answer, ms")
    calls: int = Field(description="Calls measured")


class AffinityVerdict(BaseModel):
    """What session affinity did with one turn (``rlrouter.selector.affinity``)."""

    model: str = Field(description="The candidate this turn goes to")
    outcome: str = Field(description="new (first turn: pinned now) | kept (the decision chose the pin) | held "
                                     "(it chose another; the pin was kept) | moved (a rule let the session move)")
    reason: str | None = Field(default=None, description="Why it moved: unavailable | error | margin")
    proposed: str = Field(description="What the decision chose before affinity")
    turn: int = Field(description="This session's routed turns so far, this one included")
    moves: int = Field(description="Moves of this session so far")


class RouteResponse(BaseModel):
    model: str = Field(description="The chosen candidate")
    request_id: str = Field(description="Give it back to POST /feedback")
    mode: str = Field(description="thompson | epsilon_greedy | contextual | llm_routing | multi_round | arena | "
                                  "gmtrouter | router:<name> (a served router)")
    scores: dict[str, float] = Field(description="Per-candidate score that decided (a posterior draw or mean)")
    models: list[str] = Field(default_factory=list, description="Every model to call (multi-round)")
    fallback_reason: str | None = Field(default=None, description="Why LLM routing fell back, if it did")
    replay_miss: str | None = Field(default=None, description=(
        "Why a chosen candidate cannot answer this query (a replay with no logged answer for it), if one "
        "cannot: only when no candidate can, or under serving.replay_miss: error"))
    router: ServedRouterDecision | None = Field(default=None, description="Set when a served router decided")
    affinity: AffinityVerdict | None = Field(default=None, description=(
        "Set when session affinity (selector.session_affinity) applied to this turn of a session"))
    expected_latency: ExpectedLatency | None = Field(default=None, description=(
        "The chosen candidate's measured latency so far; null before its first measured call"))


class RouterR1Feedback(BaseModel):
    """Inputs of the Router-R1 reward (arXiv:2506.09033): the policy's trajectory and the gold answers."""

    model_config = ConfigDict(extra="forbid")

    completion: str = Field(min_length=1, description="The trajectory (<think>/<search>/<answer> text)")
    ground_truth: list[str] = Field(min_length=1, description="Gold answers")
    route_costs: float | None = Field(default=None, ge=0, description="USD spent by the routes (needed when alpha > 0)")

    _route_costs_finite = field_validator("route_costs", mode="before")(_finite)


class FeedbackRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    request_id: str = Field(min_length=1, max_length=256)
    outcome: Literal["win", "loss", "tie"] | None = Field(default=None, description="Explicit feedback")
    followup_text: str | None = Field(default=None, min_length=1, max_length=32_000,
                                      description="The user's next message: classified into implicit feedback")
    reward: float | None = Field(default=None, ge=-10, le=10,
                                 description="A precomputed Router-R1 reward (clipped to [0, 1] as a fractional win)")
    router_r1: RouterR1Feedback | None = Field(default=None, description="Compute the Router-R1 reward here")
    winner: str | None = Field(default=None, min_length=1, description="Multi-round / arena: the best model")

    _reward_finite = field_validator("reward", mode="before")(_finite)

    @model_validator(mode="after")
    def _exactly_one(self) -> FeedbackRequest:
        given = [n for n in ("outcome", "followup_text", "reward", "router_r1") if getattr(self, n) is not None]
        if len(given) != 1:
            raise ValueError(f"give exactly one of outcome, followup_text, reward, router_r1 (got {given or 'none'})")
        return self


class PosteriorDelta(BaseModel):
    model: str
    d_alpha: float
    d_beta: float


class OffsetUpdate(BaseModel):
    """A feedback router's learned logit offset for one candidate and context, after this feedback."""

    model: str = Field(description="weak | strong: the router's candidate that was called")
    context: str = Field(description="The request's context key (its category, else its user)")
    offset_mean: float
    offset_var: float
    events: int = Field(description="Feedback events this offset has learned from")


class RouterFeedback(BaseModel):
    """What became of the feedback at the served router that made the decision."""

    name: str
    learned: bool = Field(description="True: the router updated (it learns online); false: it is frozen, or refused")
    note: str
    deltas: list[PosteriorDelta] = Field(default_factory=list, description="The router's own posterior updates")
    offsets: list[OffsetUpdate] = Field(default_factory=list, description="A feedback router's offset updates")
    version: str | None = Field(default=None, description="The version that made the decision")
    release: dict[str, Any] | None = Field(
        default=None, description="The release the decision was made under: each version's reward on live "
                                  "feedback, their difference with its interval, its state")
    event: dict[str, Any] | None = Field(default=None, description="This feedback's verdict: promoted or rolled_back")


class FeedbackResponse(BaseModel):
    request_id: str
    kind: str = Field(description="outcome | implicit | reward")
    durable: bool = Field(description="True: the update is on disk (write-ahead log fsynced) before this reply")
    applied: list[PosteriorDelta]
    label: str | None = Field(default=None, description="Implicit feedback: the classifier's label")
    confidence: float | None = None
    reward: float | None = None
    router: RouterFeedback | None = Field(default=None, description="Set when a served router made the decision")


class ChatMessage(BaseModel):
    model_config = ConfigDict(extra="allow")

    role: Literal["system", "user", "assistant", "tool", "developer"]
    content: str | list[dict[str, Any]] | None = None


class ChatCompletionRequest(BaseModel):
    """The OpenAI chat-completions request; unknown sampling fields pass through to the candidate."""

    model_config = ConfigDict(extra="allow")

    model: str = Field(min_length=1, description='"auto" routes; "arena" calls every candidate; a candidate name; or '
                                                 'a served router, "router-<name>[-<threshold>|-share<s>]"')
    messages: list[ChatMessage] = Field(min_length=1)
    stream: bool = False
    user: str | None = Field(default=None, max_length=256,
                             description="OpenAI's end-user tag, echoed in x_rlrouter.end_user; the API key's "
                                         "user stays the identity (serving.openai_user: user_id makes it one)")
    n: int | None = Field(default=None, ge=1, description="Number of choices: only 1 is supported")
    session_id: str | None = Field(default=None, min_length=1, max_length=256)
    category: str | None = Field(default=None, min_length=1, max_length=128)
    max_tokens: int | None = Field(default=None, ge=1, le=131072)
    temperature: float | None = Field(default=None, ge=0, le=2)

    _temperature_finite = field_validator("temperature", mode="before")(_finite)

    @model_validator(mode="after")
    def _has_user_message(self) -> ChatCompletionRequest:
        if not any(m.role == "user" for m in self.messages):
            raise ValueError("messages: need at least one message with role 'user'")
        return self


class ModelCard(BaseModel):
    id: str
    object: str = "model"
    created: int = 0
    owned_by: str = "rlrouter"
    price_in: float | None = None
    price_out: float | None = None


class ModelList(BaseModel):
    object: str = "list"
    data: list[ModelCard]


class RouterR1RouteRequest(BaseModel):
    model_config = ConfigDict(extra="allow")

    query: str = Field(min_length=1)


class RouterR1RouteResponse(BaseModel):
    """VSR's Router-R1 server protocol, plus what decided (``backend``) and a request_id for feedback."""

    selected_model: str
    thinking: str
    full_response: str
    backend: str = Field(description="'router_r1_policy' or 'selector' (no policy configured)")
    request_id: str | None = None


class RouterR1Health(BaseModel):
    status: str
    model: str


class Health(BaseModel):
    status: str
    candidates: int
    selector: str
    port: int | None = Field(default=None, description="The port this answer came from")
    direct_ingress_ports: list[int] | None = Field(
        default=None, description="Direct ingress: the ingress replica's own HTTP port(s), which move on redeploy")


class ClassifyRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    texts: list[str] = Field(min_length=1, max_length=256, description="Queries to classify")


class IntentLabel(BaseModel):
    label: str = Field(description="The predicted category (MMLU-Pro's 14 by default)")
    confidence: float = Field(description="The classifier's probability for it")


class ClassifyResponse(BaseModel):
    labels: list[IntentLabel]
