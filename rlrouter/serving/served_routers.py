"""Routers trained by jobs/train_router.py, served: RouteLLM's ``router-<name>-<threshold>`` model names.

A request names a served router and how to use it in its ``model`` (chat completions and ``/route``):

* ``router-<name>``: the router at its saved default (a threshold router's calibrated threshold);
* ``router-<name>-<threshold>``: strong when the router's score is at or above the threshold (a float on
  the router's own scale: MF's win probability, kNN's mean gain, ...; RouteLLM's convention);
* ``router-<name>-share<s>``: the threshold that sent a share ``s`` in [0, 1] of the router's training
  prompts to the strong candidate (calibrated when it was saved, ``rlrouter.eval.saved.Calibration``).

Router names may hold hyphens: the name is matched against the served names first, longest first.

:class:`ServedRouters` holds the loaded routers (one process: the app's ``ServedRoutersDeployment``)
and answers ``decide`` and ``feedback``. A router that learns online (the bandit selector) keeps its
decisions and learns from their feedback; the others are frozen, and ``feedback`` says so.
"""

from __future__ import annotations

import json
import math
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping

import numpy as np

from rlrouter.eval.adapters import SelectorRouter
from rlrouter.eval.online import FeedbackRouter
from rlrouter.eval.saved import Manifest, SavedRouter, embedder, load_router, read_manifest

PREFIX = "router-"
SHARE = "share"
SYNTAX = "'router-<name>', 'router-<name>-<threshold>' or 'router-<name>-share<0..1>'"


@dataclass(frozen=True)
class RouterChoice:
    """A parsed ``router-...`` model name."""

    name: str
    threshold: float | None = None
    strong_share: float | None = None


def is_router_model(model: str) -> bool:
    return model[: len(PREFIX)].lower() == PREFIX


def parse_router_model(model: str, routers: Mapping[str, bool]) -> RouterChoice:
    """Parse ``model`` (which starts with ``router-``) against the served ``routers`` ({name: takes a
    threshold}). A ValueError names the field ``model`` and says what is served and the syntax."""
    if not is_router_model(model):
        raise ValueError(f"field 'model': '{model}' does not start with '{PREFIX}'")
    rest = model[len(PREFIX):]
    for name in sorted(routers, key=len, reverse=True):
        if rest.casefold() == name.casefold():
            return RouterChoice(name)
        if rest[: len(name) + 1].casefold() == f"{name}-".casefold():
            return _with_param(model, name, rest[len(name) + 1:], routers[name])
    served = sorted(routers) or "none (serve config: routers)"
    raise ValueError(f"field 'model': no served router in '{model}'; served routers: {served}; use {SYNTAX}")


def _with_param(model: str, name: str, param: str, takes_threshold: bool) -> RouterChoice:
    if not takes_threshold:
        raise ValueError(f"field 'model': router '{name}' picks a candidate itself and takes no threshold or "
                         f"share; use 'router-{name}'")
    share = param[: len(SHARE)].lower() == SHARE
    text = param[len(SHARE):] if share else param
    try:
        value = float(text)
    except ValueError:
        what = "a strong share in [0, 1]" if share else "a threshold (a float) or share<0..1>"
        raise ValueError(f"field 'model': '{param}' in '{model}' is not {what}; use {SYNTAX}") from None
    if not math.isfinite(value):
        raise ValueError(f"field 'model': the threshold in '{model}' must be a finite number")
    if share:
        if not 0.0 <= value <= 1.0:
            raise ValueError(f"field 'model': the strong share in '{model}' must be in [0, 1], got {value:g}")
        return RouterChoice(name, strong_share=value)
    return RouterChoice(name, threshold=value)


def router_entries(routers: Mapping[str, Any] | None, root: Path) -> dict[str, dict[str, str | None]]:
    """The serve config's ``routers`` ({name: folder} or {name: {path, state}}) with absolute paths;
    every error names ``routers.<name>``."""
    out: dict[str, dict[str, str | None]] = {}
    for name, entry in dict(routers or {}).items():
        where = f"routers.{name}"
        if not isinstance(name, str) or not name or name.lower() in ("auto", "arena"):
            raise ValueError(f"{where}: a router name is a non-empty string other than 'auto' and 'arena'")
        if isinstance(entry, str):
            entry = {"path": entry}
        if not isinstance(entry, Mapping) or not entry.get("path"):
            raise ValueError(f"{where}.path: missing (a router folder written by jobs/train_router.py)")
        unknown = sorted(set(entry) - {"path", "state"})
        if unknown:
            raise ValueError(f"{where}: unknown fields {unknown}; known: ['path', 'state']")

        def absolute(p: Any) -> str | None:
            if p is None:
                return None
            q = Path(str(p))
            return str(q if q.is_absolute() else root / q)

        out[name] = {"path": absolute(entry["path"]), "state": absolute(entry.get("state"))}
    return out


def read_manifests(entries: Mapping[str, Mapping[str, Any]]) -> dict[str, Manifest]:
    """Each configured router folder's manifest (cheap: JSON only); errors name ``routers.<name>.path``."""
    out = {}
    for name, e in entries.items():
        try:
            out[name] = read_manifest(e["path"])
        except ValueError as err:
            raise ValueError(f"routers.{name}.path: {err}") from None
        if e.get("state") and not out[name].online:
            raise ValueError(f"routers.{name}.state: router '{name}' ({out[name].type}) is frozen; only a router "
                             "that learns online (selector) keeps a state file")
    return out


class ServedRouters:
    """The loaded routers of the app (no Ray: ``serve/routers.py`` wraps it in a deployment)."""

    def __init__(self, entries: Mapping[str, Mapping[str, Any]],
                 embed: Callable[[list[str]], np.ndarray] | None = None):
        """``entries``: {name: {path, state}} (``router_entries``). ``state``: a file where a router that
        learns online keeps what it learned (snapshot + write-ahead log, seeded from the folder on first
        start); without it, what it learns lives in memory until the app stops. ``embed``: one embedder for
        every router instead of the one each manifest names (tests)."""
        self._lock = threading.Lock()
        self.feedback_state: dict[str, Path] = {}  # feedback routers' state files
        self.pending: dict[str, tuple[str, np.ndarray, str, int]] = {}  # request id -> (router, logits, group, arm)
        self._rng = np.random.default_rng()
        embedders: dict[str, Any] = {}
        self.routers: dict[str, SavedRouter] = {}
        for name, e in entries.items():
            m = read_manifest(e["path"])
            key = str(m.embedding.get("model", "minilm-l6"))
            if embed is None:  # one encoder per embedding model, shared by the routers that use it
                embedders.setdefault(key, embedder(m.embedding))
            saved = load_router(e["path"], embed=embed or embedders[key])
            if e.get("state") and isinstance(saved.router, FeedbackRouter):
                self.feedback_state[name] = Path(str(e["state"]))
                if self.feedback_state[name].exists():  # what it learned before the app restarted
                    saved.router.posteriors_from_dict(json.loads(self.feedback_state[name].read_text()))
            elif e.get("state"):
                _persist_online(saved, str(e["state"]))
            self.routers[name] = saved

    def describe(self) -> dict[str, dict[str, Any]]:
        return {n: {"type": s.manifest.type, "threshold_router": s.threshold_router, "online": s.manifest.online,
                    "weak": s.manifest.weak, "strong": s.manifest.strong, "threshold": s.manifest.threshold}
                for n, s in self.routers.items()}

    def decide(self, name: str, query: str, threshold: float | None = None, strong_share: float | None = None,
               user_id: str | None = None, session_id: str | None = None,
               category: str | None = None) -> dict[str, Any]:
        """One decision: ``candidate`` (a manifest candidate name) and what decided it. An online router's
        decision also has ``request_id``: the id its feedback must come back with."""
        saved = self._get(name)
        m = saved.manifest
        out: dict[str, Any] = {"name": name, "type": m.type, "online": m.online}
        if isinstance(saved.router, FeedbackRouter):
            return {**out, "online": True, **self._decide_feedback(name, saved, query, threshold, strong_share,
                                                                   category or user_id or "default")}
        if m.online:
            from rlrouter.selector import SelectionRequest

            r = saved.router
            emb = r.embed([query])[0] if r.embed is not None else None
            with self._lock:
                dec = r.selector.select(SelectionRequest(candidates=r.candidates, user_id=user_id,
                                                         session_id=session_id, category=category, embedding=emb))
            return {**out, "candidate": dec.model, "request_id": dec.request_id, "scores": dict(dec.scores),
                    "selector_mode": dec.mode}
        with self._lock:
            idx, scores, t = saved.route([query], threshold=threshold, strong_share=strong_share)
        out["candidate"] = m.candidate_names[int(idx[0])]
        if scores is not None:
            assert m.calibration is not None
            out.update(score=float(scores[0]), threshold=t, strong_share=strong_share,
                       training_strong_share=m.calibration.strong_share(t))
        if callable(getattr(saved.router, "report", None)):
            out["report"] = saved.router.report()
        return out

    def feedback(self, name: str, request_id: str, outcome: str | None = None, label: str | None = None,
                 confidence: float | None = None, reward: float | None = None) -> dict[str, Any]:
        """Feedback on a decision of ``name``: an online router learns from it (``learned``: true, with its
        posterior deltas); a frozen one does not, and the note says so."""
        saved = self._get(name)
        m = saved.manifest
        if isinstance(saved.router, FeedbackRouter):
            return self._learn_feedback(name, saved.router, request_id, outcome, label, reward)
        if not m.online:
            return {"name": name, "learned": False,
                    "note": f"router '{name}' ({m.type}) is frozen: it learns offline (jobs/train_router.py), "
                            "so this feedback updated the app's selector only"}
        from rlrouter.selector.selector import SelectorError

        try:
            with self._lock:
                u = saved.router.selector.feedback(request_id, outcome=outcome, label=label, confidence=confidence,
                                                   reward=reward)
        except SelectorError as e:
            return {"name": name, "learned": False, "note": f"router '{name}' did not learn from it: {e}"}
        return {"name": name, "learned": True,
                "note": f"router '{name}' ({m.type}) learned from it" + (
                    " (durable: in its write-ahead log)" if saved.router.selector.config.storage_path else
                    " (in memory: serve config routers.<name>.state keeps it across restarts)"),
                "deltas": [{"model": d.model, "d_alpha": d.d_alpha, "d_beta": d.d_beta} for d in u.deltas]}

    def _decide_feedback(self, name: str, saved: SavedRouter, query: str, threshold: float | None,
                         strong_share: float | None, group: str) -> dict[str, Any]:
        """A router that learns from feedback: the request's context key (its category, else its user) picks
        the learned offsets; the decision waits, by request id, for its feedback."""
        import uuid

        r = saved.router
        t = saved.threshold_for(threshold, strong_share)
        with self._lock:
            arm, gain, logits = r.route_one(query, group, t, self._rng)
            request_id = f"rt-{uuid.uuid4().hex}"
            self.pending[request_id] = (name, logits, group, arm)
        m = saved.manifest
        assert m.calibration is not None
        return {"candidate": m.candidate_names[arm], "request_id": request_id, "score": float(gain), "threshold": t,
                "strong_share": strong_share, "training_strong_share": m.calibration.strong_share(t),
                "report": {"context": r.context, "group": group}}

    def _learn_feedback(self, name: str, r: FeedbackRouter, request_id: str, outcome: str | None,
                        label: str | None, reward: float | None) -> dict[str, Any]:
        from rlrouter.selector.selector import IMPLICIT_OUTCOME

        if label is not None and outcome is None:
            outcome = IMPLICIT_OUTCOME.get(label)
        value = ({"win": 1.0, "loss": 0.0, "tie": 0.5}.get(outcome) if outcome is not None
                 else (min(1.0, max(0.0, float(reward))) if reward is not None else None))
        with self._lock:
            pending = self.pending.get(request_id)
            if pending is None or pending[0] != name or value is None:
                why = ("no pending decision of this router has that request id" if pending is None or pending[0] != name
                       else "the feedback carries no outcome, label or reward it can read")
                return {"name": name, "learned": False, "note": f"router '{name}' did not learn from it: {why}"}
            del self.pending[request_id]
            _, logits, group, arm = pending
            r.feedback(logits, group, arm, value)
            post = r.posteriors[(arm, group)]
            state = self.feedback_state.get(name)
            if state is not None:
                tmp = state.with_suffix(state.suffix + ".tmp")
                tmp.write_text(json.dumps(r.posteriors_to_dict()))
                tmp.replace(state)
        return {"name": name, "learned": True,
                "note": f"router '{name}' (feedback) learned from it: context '{group}', outcome {value:g}"
                        + (" (saved to its state file)" if state is not None else
                           " (in memory: serve config routers.<name>.state keeps it across restarts)"),
                "offsets": [{"model": "strong" if arm == r.strong else "weak", "context": group,
                             "offset_mean": post.mean, "offset_var": post.var, "events": len(post.outcomes)}]}

    def close(self) -> None:
        """Save what the online routers learned (their write-ahead logs hold every update already)."""
        for s in self.routers.values():
            if s.manifest.online and isinstance(s.router, SelectorRouter):
                s.router.selector.close()

    def _get(self, name: str) -> SavedRouter:
        if name not in self.routers:
            raise KeyError(f"no served router '{name}' (served: {sorted(self.routers)})")
        return self.routers[name]


def _persist_online(saved: SavedRouter, state: str) -> None:
    """Give an online router a state file: seeded from the router folder when it does not exist yet,
    then loaded (snapshot + write-ahead log) and written on every feedback, as the app's selector."""
    from rlrouter.selector import Selector, SelectorConfig
    from rlrouter.selector.persistence import encode_state, write_snapshot

    r = saved.router
    if not Path(state).exists():
        write_snapshot(state, encode_state(r.selector.state))
    cfg = SelectorConfig.from_dict({**r.selector.config.to_dict(), "storage_path": state})
    r.selector = Selector(cfg, candidates=list(r.candidates))
    r.selector.load()
