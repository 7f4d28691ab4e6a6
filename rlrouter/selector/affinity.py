"""Session affinity: a conversation keeps its candidate across turns unless a rule lets it move.

Without it every turn is a fresh decision, so a Thompson draw can bounce a conversation between models
mid-session (vLLM Semantic Router #1439, #1458, #1513): the user sees a change of voice and of facts, and
a multi-turn context is re-read by a model that did not write it. With ``selector.session_affinity`` on,
the first routed turn of a session *pins* the candidate it chose; later turns go to the pin whatever the
decision proposed, unless

- ``unavailable``: the pinned candidate cannot answer this turn (not among the candidates offered: it was
  removed, restricted away, or is a replay without this prompt);
- ``error``: the pinned candidate's last call failed (``selector.affinity_move_on_error``);
- ``margin``: the decision scores the proposed candidate above the pin by ``selector.affinity_margin`` or
  more (None, the default: never for score).

A pin expires ``affinity_ttl_s`` after its session's last turn, and past ``max_affinity_sessions`` the
least recently seen session is forgotten first. Pure logic: :class:`~rlrouter.selector.Selector` holds the
pins in its state (saved in its snapshot) and applies :func:`turn` under its lock.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

MOVE_REASONS = ("unavailable", "error", "margin")
OUTCOMES = ("new", "kept", "held", "moved")
"""new: the session's first turn (pinned now); kept: the decision proposed the pin itself; held: it proposed
another candidate and the pin was kept; moved: a rule let the session move (the pin follows)."""


@dataclass
class Pin:
    """One session's candidate and its history."""

    model: str
    turns: int = 1
    moves: int = 0
    last_seen: float = 0.0
    errored: bool = False
    """The pinned candidate's last call for this session failed: the next turn may move."""

    def to_list(self) -> list[Any]:
        return [self.model, self.turns, self.moves, self.last_seen, self.errored]

    @classmethod
    def from_list(cls, v: Any, where: str) -> Pin:
        if not (isinstance(v, list) and len(v) == 5 and isinstance(v[0], str) and v[0]
                and all(isinstance(x, int) and not isinstance(x, bool) and x >= 0 for x in v[1:3])
                and isinstance(v[3], (int, float)) and isinstance(v[4], bool)):
            raise ValueError(f"field '{where}': expected [model, turns, moves, last_seen, errored]")
        return cls(v[0], v[1], v[2], float(v[3]), v[4])


@dataclass
class Verdict:
    """What :func:`turn` decided for one turn."""

    model: str
    outcome: str
    """One of ``OUTCOMES``."""
    reason: str | None = None
    """Why it moved (one of ``MOVE_REASONS``); None unless ``outcome == "moved"``."""
    proposed: str = ""
    turn: int = 1
    moves: int = 0

    def as_dict(self) -> dict[str, Any]:
        return {"model": self.model, "outcome": self.outcome, "reason": self.reason, "proposed": self.proposed,
                "turn": self.turn, "moves": self.moves}


def _forget_stale(pins: OrderedDict[str, Pin], now: float, ttl_s: float, max_sessions: int) -> None:
    """Drop pins unseen for ``ttl_s`` (the order is last-seen order, so the stale ones are at the front),
    then the least recently seen beyond ``max_sessions``."""
    while pins:
        key, pin = next(iter(pins.items()))
        if now - pin.last_seen < ttl_s and len(pins) <= max_sessions:
            break
        del pins[key]


def turn(pins: OrderedDict[str, Pin], key: str, proposed: str, candidates: list[str], scores: dict[str, float],
         now: float, *, margin: float | None, move_on_error: bool, ttl_s: float, max_sessions: int) -> Verdict:
    """One routed turn of session ``key``, whose decision proposed ``proposed`` among ``candidates`` with
    ``scores``: the candidate to call, and the pins updated."""
    _forget_stale(pins, now, ttl_s, max_sessions)
    pin = pins.get(key)
    if pin is None:
        pins[key] = Pin(proposed, last_seen=now)
        _forget_stale(pins, now, ttl_s, max_sessions)
        return Verdict(proposed, "new", proposed=proposed)
    pins.move_to_end(key)
    pin.turns += 1
    pin.last_seen = now
    reason = None
    if proposed == pin.model:
        pin.errored = False
        return Verdict(pin.model, "kept", proposed=proposed, turn=pin.turns, moves=pin.moves)
    if pin.model not in candidates:
        reason = "unavailable"
    elif pin.errored and move_on_error:
        reason = "error"
    elif (margin is not None and proposed in scores and pin.model in scores
          and scores[proposed] - scores[pin.model] >= margin):
        reason = "margin"
    if reason is None:
        return Verdict(pin.model, "held", proposed=proposed, turn=pin.turns, moves=pin.moves)
    pin.model, pin.errored = proposed, False
    pin.moves += 1
    return Verdict(proposed, "moved", reason, proposed=proposed, turn=pin.turns, moves=pin.moves)


def mark_error(pins: OrderedDict[str, Pin], key: str, model: str) -> bool:
    """The call to ``model`` for session ``key`` failed: if it is the pin, the next turn may move. Returns
    whether a pin was marked."""
    pin = pins.get(key)
    if pin is None or pin.model != model:
        return False
    pin.errored = True
    return True


def summary(pins: OrderedDict[str, Pin]) -> dict[str, Any]:
    """Sessions pinned now, their turns and moves (``GET /stats``)."""
    n = len(pins)
    moves = sum(p.moves for p in pins.values())
    return {"sessions": n, "turns": sum(p.turns for p in pins.values()), "moves": moves,
            "moves_per_session": moves / n if n else 0.0,
            "by_model": {m: sum(p.model == m for p in pins.values()) for m in sorted({p.model for p in pins.values()})}}
