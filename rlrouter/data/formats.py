"""Typed records of the two seed formats (Router-R1, GMTRouter), with validation that names the field.

Every record crosses a file boundary, so each is a dataclass whose ``from_dict`` checks types and
raises :class:`RecordError` naming the field. The file readers (``rlrouter.data.io``) add the file and
line on top.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any


class RecordError(ValueError):
    """A record failed validation. ``field`` is the dotted path of the offending field."""

    def __init__(self, field_path: str, message: str):
        self.field = field_path
        self.message = message
        super().__init__(f"field '{field_path}': {message}")


def _require(d: dict[str, Any], key: str, types: type | tuple[type, ...], prefix: str = "",
             allow_empty: bool = True) -> Any:
    path = f"{prefix}{key}"
    if key not in d:
        raise RecordError(path, "missing")
    value = d[key]
    if isinstance(value, bool) and bool not in (types if isinstance(types, tuple) else (types,)):
        raise RecordError(path, f"expected {_type_name(types)}, got bool")
    if not isinstance(value, types):
        raise RecordError(path, f"expected {_type_name(types)}, got {type(value).__name__}")
    if not allow_empty and isinstance(value, (str, list)) and len(value) == 0:
        raise RecordError(path, "must not be empty")
    return value


def _type_name(types: type | tuple[type, ...]) -> str:
    if isinstance(types, tuple):
        return " or ".join(t.__name__ for t in types)
    return types.__name__


def _require_dict(value: Any, path: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise RecordError(path, f"expected an object, got {type(value).__name__}")
    return value


# ---------------------------------------------------------------- Router-R1


@dataclass(frozen=True)
class CandidateRef:
    """A candidate as a Router-R1 record names it: price per query (cost) and latency in seconds."""

    name: str
    cost: float
    latency: float

    @classmethod
    def from_dict(cls, d: Any, prefix: str = "") -> "CandidateRef":
        d = _require_dict(d, prefix.rstrip(".") or "candidate")
        name = _require(d, "name", str, prefix, allow_empty=False)
        cost = float(_require(d, "cost", (int, float), prefix))
        latency = float(_require(d, "latency", (int, float), prefix))
        if cost < 0:
            raise RecordError(f"{prefix}cost", f"must be >= 0, got {cost}")
        if latency < 0:
            raise RecordError(f"{prefix}latency", f"must be >= 0, got {latency}")
        return cls(name=name, cost=cost, latency=latency)


@dataclass(frozen=True)
class RouterR1Record:
    """One Router-R1 training example: a query, the candidates it may route to and the gold answer."""

    query: str
    query_type: str
    candidate_models: list[CandidateRef]
    ground_truth: list[str]
    optimal_model: str | None = None
    reasoning: str = ""

    @classmethod
    def from_dict(cls, d: Any) -> "RouterR1Record":
        d = _require_dict(d, "record")
        query = _require(d, "query", str, allow_empty=False)
        query_type = _require(d, "query_type", str)
        raw_cands = _require(d, "candidate_models", list, allow_empty=False)
        cands = [CandidateRef.from_dict(c, f"candidate_models[{i}].") for i, c in enumerate(raw_cands)]
        gt = _require(d, "ground_truth", (str, list))
        if isinstance(gt, str):
            gt = [gt]
        for i, g in enumerate(gt):
            if not isinstance(g, str):
                raise RecordError(f"ground_truth[{i}]", f"expected str, got {type(g).__name__}")
        if not gt:
            raise RecordError("ground_truth", "must not be empty")
        optimal = d.get("optimal_model")
        if optimal is not None:
            if not isinstance(optimal, str):
                raise RecordError("optimal_model", f"expected str or null, got {type(optimal).__name__}")
            names = {c.name for c in cands}
            if optimal and optimal not in names:
                raise RecordError("optimal_model", f"'{optimal}' is not one of candidate_models {sorted(names)}")
        reasoning = d.get("reasoning", "") or ""
        if not isinstance(reasoning, str):
            raise RecordError("reasoning", f"expected str, got {type(reasoning).__name__}")
        return cls(query=query, query_type=query_type, candidate_models=cands, ground_truth=list(gt),
                   optimal_model=optimal or None, reasoning=reasoning)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


# ---------------------------------------------------------------- GMTRouter

FEEDBACK_RANGE = (-1.0, 5.0)

FEEDBACK_LABELS: dict[str, float] = {"positive": 1.0, "neutral": 0.0, "negative": -1.0}
"""GMTRouter's seed writes feedback as a word: each maps onto the signal end of ``FEEDBACK_RANGE``
(-1 bad, 0 no opinion, 1 good). A log that also carries 1-5 ratings should use numbers throughout,
since "positive" (1.0) would read as the lowest star."""


def parse_feedback(value: Any, field_path: str) -> float:
    """Feedback as a number in ``FEEDBACK_RANGE``: a number, a bool, a label of ``FEEDBACK_LABELS``
    (any case) or a rating written as text ("4", "4.5")."""
    if isinstance(value, str):
        text = value.strip().lower()
        if text in FEEDBACK_LABELS:
            return FEEDBACK_LABELS[text]
        try:
            fb = float(text)
        except ValueError:
            raise RecordError(field_path, f"expected a number, one of {sorted(FEEDBACK_LABELS)} or a rating as "
                                          f"text, got {value!r}") from None
    elif isinstance(value, (int, float, bool)):
        fb = float(value)
    else:
        raise RecordError(field_path, f"expected a number or a label, got {type(value).__name__}")
    lo, hi = FEEDBACK_RANGE
    if not lo <= fb <= hi:  # NaN fails this too
        raise RecordError(field_path, f"must be in [{lo}, {hi}], got {value!r}")
    return fb


def parse_context(value: Any, field_path: str = "context") -> dict[str, Any]:
    """A record's ``context``: an object as is; free text (the seed's form) as ``{"description": text}``."""
    if value is None or value == "":
        return {}
    if isinstance(value, str):
        return {"description": value}
    if not isinstance(value, dict):
        raise RecordError(field_path, f"expected an object or a string, got {type(value).__name__}")
    return dict(value)


@dataclass(frozen=True)
class Interaction:
    """One turn of a user's session: the query, the LLM that answered, and the user's feedback."""

    query: str
    model_used: str
    user_feedback: float
    """In ``FEEDBACK_RANGE``; files may write a word or a rating as text (:func:`parse_feedback`)."""
    timestamp: float
    session_id: str = ""
    response: str = ""

    @classmethod
    def from_dict(cls, d: Any, prefix: str = "") -> "Interaction":
        d = _require_dict(d, prefix.rstrip(".") or "interaction")
        query = _require(d, "query", str, prefix, allow_empty=False)
        model = _require(d, "model_used", str, prefix, allow_empty=False)
        fb = parse_feedback(_require(d, "user_feedback", (int, float, bool, str), prefix), f"{prefix}user_feedback")
        ts = _require(d, "timestamp", (int, float, str), prefix)
        if isinstance(ts, str):
            from datetime import datetime

            try:
                ts = datetime.fromisoformat(ts.replace("Z", "+00:00")).timestamp()
            except ValueError as e:
                raise RecordError(f"{prefix}timestamp", f"not a number or ISO-8601 time: {e}") from None
        session = d.get("session_id", "") or ""
        response = d.get("response", "") or ""
        if not isinstance(session, str):
            raise RecordError(f"{prefix}session_id", "expected str")
        if not isinstance(response, str):
            raise RecordError(f"{prefix}response", "expected str")
        return cls(query=query, model_used=model, user_feedback=fb, timestamp=float(ts),
                   session_id=session, response=response)


@dataclass(frozen=True)
class GMTRecord:
    """A user's interaction log, the unit GMTRouter learns preferences from."""

    user_id: str
    interactions: list[Interaction]
    preferred_models: list[str] = field(default_factory=list)
    context: dict[str, Any] = field(default_factory=dict)
    """Free text in a file becomes ``{"description": text}`` (:func:`parse_context`)."""

    @classmethod
    def from_dict(cls, d: Any) -> "GMTRecord":
        d = _require_dict(d, "record")
        user_id = _require(d, "user_id", (str, int), allow_empty=False)
        raw = _require(d, "interactions", list, allow_empty=False)
        inter = [Interaction.from_dict(x, f"interactions[{i}].") for i, x in enumerate(raw)]
        pref = d.get("preferred_models", []) or []
        if not isinstance(pref, list) or not all(isinstance(p, str) for p in pref):
            raise RecordError("preferred_models", "expected a list of str")
        ctx = parse_context(d.get("context"))
        return cls(user_id=str(user_id), interactions=inter, preferred_models=list(pref), context=ctx)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


FORMATS: dict[str, type] = {"router_r1": RouterR1Record, "gmtrouter": GMTRecord}
