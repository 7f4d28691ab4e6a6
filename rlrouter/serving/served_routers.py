"""Routers trained by jobs/train_router.py, served: RouteLLM's ``router-<name>-<threshold>`` model names.

A request names a served router and how to use it in its ``model`` (chat completions and ``/route``):

* ``router-<name>``: the router at its saved default (a threshold router's calibrated threshold);
* ``router-<name>-<threshold>``: strong when the router's score is at or above the threshold (a float on
  the router's own scale: MF's win probability, kNN's mean gain, ...; RouteLLM's convention);
* ``router-<name>-share<s>``: the threshold that sent a share ``s`` in [0, 1] of the router's training
  prompts to the strong candidate (calibrated when it was saved, ``rlrouter.routers.saved.Calibration``).

Router names may hold hyphens: the name is matched against the served names first, longest first. Any of
them may end in ``@<version>`` to pin a loaded version (``router-flow@2``); without it, the router's current
version decides, or, while a release's canary runs, the new version for its canary share.

:class:`ServedRouters` holds the loaded routers (one process: the app's ``ServedRoutersDeployment``)
and answers ``decide`` and ``feedback``. A router that learns online (the bandit selector) keeps its
decisions and learns from their feedback; the others are frozen, and ``feedback`` says so.

Releases (``rlrouter.serving.release``): ``load_version`` loads a retrained router folder beside the current
version and starts a canary; every feedback on a decision of either version adds its reward to the release,
and its rule promotes the new version (it becomes current) or rolls it back, between two requests, with no
restart. A decision remembers the version and the release it was made under, so feedback that arrives after
the swap still reaches the version that made the decision and still counts in that release (``late``).

With a journal (``serving.release_journal``, ``rlrouter.serving.release_journal``) every release step (a version
loaded, a canary decision, a reward counted, a verdict) is on disk before it is applied and answered, and a
restart replays it: the loaded versions, the release in progress with its counts, the decisions still waiting
for feedback under it, and the verdicts. Without one, releases live in memory: a restart serves the
configured versions again, with no release in progress.
"""

from __future__ import annotations

import json
import logging
import math
import re
import threading
import time
import uuid
from collections import OrderedDict
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any, Callable, Mapping

import numpy as np

from rlrouter.routers.adapters import SelectorRouter
from rlrouter.routers.online import FeedbackRouter
from rlrouter.routers.saved import Manifest, SavedRouter, embedder, load_router, read_manifest
from rlrouter.routers.traffic_router import reward_of
from rlrouter.serving.release import CANARY, PROMOTED, ROLLED_BACK, Release, ReleaseRule
from rlrouter.serving.release_journal import JournalRead, ReleaseJournal, read_journal
from rlrouter.serving.traffic_export import feedback_score

PREFIX = "router-"
SHARE = "share"
VERSION = "@"
SYNTAX = ("'router-<name>', 'router-<name>-<threshold>' or 'router-<name>-share<0..1>', each optionally "
          "ending in '@<version>'")
DEFAULT_VERSION = "1"
MAX_REMEMBERED = 200_000  # decisions whose feedback may still come, per app
log = logging.getLogger("rlrouter.serving.release")


@dataclass(frozen=True)
class RouterChoice:
    """A parsed ``router-...`` model name."""

    name: str
    threshold: float | None = None
    strong_share: float | None = None
    version: str | None = None


def is_router_model(model: str) -> bool:
    return model[: len(PREFIX)].lower() == PREFIX


def parse_router_model(model: str, routers: Mapping[str, bool]) -> RouterChoice:
    """Parse ``model`` (which starts with ``router-``) against the served ``routers`` ({name: takes a
    threshold}). A ValueError names the field ``model`` and says what is served and the syntax."""
    if not is_router_model(model):
        raise ValueError(f"field 'model': '{model}' does not start with '{PREFIX}'")
    rest, version = model[len(PREFIX):], None
    if VERSION in rest:
        rest, _, version = rest.rpartition(VERSION)
        if not version:
            raise ValueError(f"field 'model': '{model}' ends in '{VERSION}' with no version after it")
    for name in sorted(routers, key=len, reverse=True):
        if rest.casefold() == name.casefold():
            return RouterChoice(name, version=version)
        if rest[: len(name) + 1].casefold() == f"{name}-".casefold():
            return replace(_with_param(model, name, rest[len(name) + 1:], routers[name]), version=version)
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


def check_version(version: Any, where: str) -> str:
    """A version label: a non-empty string of letters, digits and ``._-`` (it travels in a model name)."""
    text = str(version) if isinstance(version, (str, int)) and not isinstance(version, bool) else None
    if not text or len(text) > 64 or not all(c.isalnum() or c in "._-" for c in text):
        raise ValueError(f"{where}: a version is 1-64 letters, digits, '.', '_' or '-', got {version!r}")
    return text


def router_entries(routers: Mapping[str, Any] | None, root: Path) -> dict[str, dict[str, str | None]]:
    """The serve config's ``routers`` ({name: folder} or {name: {path, state, version}}) with absolute paths;
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
        unknown = sorted(set(entry) - {"path", "state", "version"})
        if unknown:
            raise ValueError(f"{where}: unknown fields {unknown}; known: ['path', 'state', 'version']")
        if VERSION in name:
            raise ValueError(f"{where}: a router name holds no '{VERSION}' (it starts a version in a model name)")

        def absolute(p: Any) -> str | None:
            if p is None:
                return None
            q = Path(str(p))
            return str(q if q.is_absolute() else root / q)

        out[name] = {"path": absolute(entry["path"]), "state": absolute(entry.get("state")),
                     "version": check_version(entry.get("version", DEFAULT_VERSION), f"{where}.version")}
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
                 embed: Callable[[list[str]], np.ndarray] | None = None,
                 release: Mapping[str, Any] | ReleaseRule | None = None, root: Path | None = None,
                 journal: str | Path | None = None):
        """``entries``: {name: {path, state, version}} (``router_entries``). ``state``: a file where a router that
        learns online keeps what it learned (snapshot + write-ahead log, seeded from the folder on first
        start); without it, what it learns lives in memory until the app stops. ``embed``: one embedder for
        every router instead of the one each manifest names (tests). ``release``: the default rule of every
        release (``serving.release``); ``root``: what a relative folder in ``load_version`` (and ``journal``) is
        relative to. ``journal``: the release journal's file, replayed here when it exists; None: releases in
        memory."""
        self._lock = threading.RLock()
        self.feedback_state: dict[str, Path] = {}  # feedback routers' state files
        self.pending: dict[str, tuple[str, np.ndarray, str, int]] = {}  # request id -> (router, logits, group, arm)
        self._rng = np.random.default_rng()
        self._embed = embed
        self._embedders: dict[str, Any] = {}
        self.root = Path(root) if root is not None else Path.cwd()
        self.rule = release if isinstance(release, ReleaseRule) else ReleaseRule.from_dict(release)
        self.versions: dict[str, dict[str, SavedRouter]] = {}
        self.current: dict[str, str] = {}
        self.releases: dict[str, Release] = {}  # the canary in progress, per router
        self.ended: list[Release] = []  # releases decided, oldest first
        self.decided: OrderedDict[str, tuple[str, str, Release | None]] = OrderedDict()
        """request id -> (router, version, the release in progress then): where its feedback goes."""
        for name, e in entries.items():
            saved = self._load(str(e["path"]))
            if e.get("state") and isinstance(saved.router, FeedbackRouter):
                self.feedback_state[name] = Path(str(e["state"]))
                if self.feedback_state[name].exists():  # what it learned before the app restarted
                    saved.router.posteriors_from_dict(json.loads(self.feedback_state[name].read_text()))
            elif e.get("state"):
                _persist_online(saved, str(e["state"]))
            version = str(e.get("version") or DEFAULT_VERSION)
            self.versions[name] = {version: saved}
            self.current[name] = version
        self.journal: ReleaseJournal | None = None
        self.replayed: dict[str, Any] | None = None
        """What the start replayed of the journal: events, skipped (torn) lines, events it could not apply."""
        if journal is not None:
            path = Path(journal) if Path(journal).is_absolute() else self.root / journal
            self.journal = ReleaseJournal(path)  # cuts a torn last line first
            self.replayed = self._replay(read_journal(path))
            self.replayed["torn_tail_bytes"] = self.journal.torn_tail
            for rel in list(self.releases.values()):  # a reward landed, its verdict not yet: decide now
                verdict = rel.verdict() if rel.rule.auto else None
                if verdict is not None:
                    self._end(rel, *verdict)

    def _log(self, event: dict[str, Any]) -> None:
        """Journal a release step before it is applied (no journal: nothing)."""
        if self.journal is not None:
            self.journal.append({"time": time.time(), **event})

    def _replay(self, read: JournalRead) -> dict[str, Any]:
        """Apply the journal's events in order (no new lines are written). An event that no longer applies (its
        router is not served, its folder is gone, its version clashes with the config's) is set aside and
        named in ``ignored``, with every later event of its release."""
        releases: dict[tuple[str, str], Release] = {}
        ignored: list[str] = []
        for i, ev in enumerate(read.records):
            router, kind = ev.get("router"), ev["event"]
            try:
                if router not in self.versions:
                    raise ValueError(f"router '{router}' is not served")
                if kind == "load":
                    version = str(ev["version"])
                    if version in self.versions[router] or router in self.releases:
                        raise ValueError(f"version '{version}' clashes with the served ones "
                                         f"({sorted(self.versions[router])}) or a release in progress")
                    rule = ReleaseRule.from_dict(ev.get("rule"))
                    self.versions[router][version] = self._load(str(ev["path"]))
                    rel = Release(router, self.current[router], version, rule, started=float(ev.get("time", 0)))
                    self.releases[router] = releases[(router, version)] = rel
                    continue
                rel = releases.get((router, str(ev.get("release"))))
                if rel is None:
                    raise ValueError(f"its release ('{ev.get('release')}') was not loaded")
                if kind == "decision":
                    self.decided[str(ev["request_id"])] = (router, str(ev["version"]), rel)
                elif kind == "reward":
                    self.decided.pop(str(ev["request_id"]), None)
                    rel.record(str(ev["version"]), float(ev["reward"]), bool(ev.get("cost_known", True)))
                elif kind == "end" and self.releases.get(router) is rel:
                    self._apply_end(rel, "promote" if ev["state"] == PROMOTED else "rollback", str(ev["reason"]))
                    rel.ended = float(ev.get("time", rel.ended or 0))
            except (KeyError, TypeError, ValueError, OSError) as e:
                ignored.append(f"event {i + 1} ({kind}): {e}")
        while len(self.decided) > MAX_REMEMBERED:
            self.decided.popitem(last=False)
        for line in ignored[:20]:
            log.warning("release journal: %s", line)
        return {"events": len(read.records), "skipped": read.skipped, "skipped_at": read.skipped_at,
                "ignored": len(ignored), "ignored_first": ignored[:20]}

    def _load(self, path: str) -> SavedRouter:
        m = read_manifest(path)
        key = str(m.embedding.get("model", "minilm-l6"))
        if self._embed is None:  # one encoder per embedding model, shared by the routers that use it
            self._embedders.setdefault(key, embedder(m.embedding))
        return load_router(path, embed=self._embed or self._embedders[key])

    def warm(self) -> None:
        """Load every embedder now (one text each), so the first decision after a start does not pay for it."""
        for embed in self._embedders.values():
            embed(["warm up"])

    @property
    def routers(self) -> dict[str, SavedRouter]:
        """Each router's current version."""
        return {n: v[self.current[n]] for n, v in self.versions.items()}

    def describe(self) -> dict[str, dict[str, Any]]:
        return {n: {"type": s.manifest.type, "threshold_router": s.threshold_router, "online": s.manifest.online,
                    "weak": s.manifest.weak, "strong": s.manifest.strong, "threshold": s.manifest.threshold,
                    "version": self.current[n]}
                for n, s in self.routers.items()}

    def decide(self, name: str, query: str, threshold: float | None = None, strong_share: float | None = None,
               user_id: str | None = None, session_id: str | None = None,
               category: str | None = None, version: str | None = None) -> dict[str, Any]:
        """One decision: ``candidate`` (a manifest candidate name), what decided it, the ``version`` that did,
        ``request_id`` (the id its feedback must come back with) and, for a frozen router not pinned to a version,
        ``propensity``: the probability its release policy (current, or a canary share for the new version) had
        of choosing this candidate. ``version``: pin a loaded version; an unknown one answers ``error``."""
        self._get(name)
        with self._lock:
            rel = self.releases.get(name)
            if version is not None:
                if version not in self.versions[name]:
                    return {"error": f"router '{name}' has no version '{version}' (loaded: "
                                     f"{sorted(self.versions[name])})"}
                chosen, rel = version, None
            elif rel is not None:
                chosen = rel.candidate if self._rng.random() < rel.rule.canary_share else rel.current
            else:
                chosen = self.current[name]
        saved = self.versions[name][chosen]
        out = self._decide_with(name, saved, query, threshold, strong_share, user_id, session_id, category)
        other = None if rel is None else self.versions[name][rel.current if chosen == rel.candidate else rel.candidate]
        if version is None and _frozen(saved) and (other is None or _frozen(other)):
            p = 1.0
            if rel is not None and other is not None:  # the other version's route too: the mixture's probability
                alt = self._decide_with(name, other, query, threshold, strong_share, user_id, session_id,
                                        category)["candidate"]
                share = rel.rule.canary_share
                p = (share if chosen == rel.candidate else 1 - share) + (
                    (1 - share if chosen == rel.candidate else share) if alt == out["candidate"] else 0.0)
            out["propensity"] = p
        out.setdefault("request_id", f"rt-{uuid.uuid4().hex}")
        out["version"] = chosen
        with self._lock:
            if rel is not None:  # its feedback must find this release after a restart too
                self._log({"event": "decision", "router": name, "request_id": out["request_id"], "version": chosen,
                           "release": rel.candidate})
            self.decided[out["request_id"]] = (name, chosen, rel)
            while len(self.decided) > MAX_REMEMBERED:
                self.decided.popitem(last=False)
        return out

    def _decide_with(self, name: str, saved: SavedRouter, query: str, threshold: float | None,
                     strong_share: float | None, user_id: str | None, session_id: str | None,
                     category: str | None) -> dict[str, Any]:
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
                 confidence: float | None = None, reward: float | None = None,
                 cost: float | None = None) -> dict[str, Any]:
        """Feedback on a decision of ``name``: the version that made it learns from it when it learns online
        (``learned``: true, with its posterior deltas); a frozen one does not, and the note says so. While a
        release runs (or for a decision made under one), its reward counts there (``release``), and the
        rule's verdict, when it comes, is applied and reported (``event``). ``cost``: the call's cost in USD,
        when the app knows it."""
        self._get(name)
        with self._lock:
            made = self.decided.get(request_id)
            if made is not None and made[0] == name:
                del self.decided[request_id]
            else:  # not this router's decision (or forgotten): the current version, no release
                made = None
        version, rel = (made[1], made[2]) if made is not None else (self.current[name], None)
        saved = self.versions[name][version]
        out = self._learn(name, saved, request_id, outcome, label, confidence, reward)
        out["version"] = version
        score = feedback_score([{"outcome": outcome, "label": label, "reward": reward}])
        if rel is not None and score is not None:
            with self._lock:
                r = reward_of(score, float(cost or 0.0), rel.rule.cost_weight)
                self._log({"event": "reward", "router": name, "request_id": request_id, "version": version,
                           "release": rel.candidate, "reward": r, "cost_known": cost is not None})
                rel.record(version, r, cost is not None)
                verdict = rel.verdict() if rel.state == CANARY and rel.rule.auto else None
                if verdict is not None and self.releases.get(name) is rel:
                    out["event"] = self._end(rel, *verdict)
            out["release"] = rel.to_dict()
        return out

    def _learn(self, name: str, saved: SavedRouter, request_id: str, outcome: str | None, label: str | None,
               confidence: float | None, reward: float | None) -> dict[str, Any]:
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

    # ------------------------------------------------------------ releases

    def load_version(self, name: str, version: str, path: str,
                     release: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """Load the router folder ``path`` as ``version`` of router ``name`` and start its canary against the
        current version (``release``: overrides of the app's rule). A ValueError names the field."""
        self._get(name)
        version = check_version(version, "version")
        rule = ReleaseRule.from_dict(release, self.rule)
        folder = Path(path) if Path(path).is_absolute() else self.root / path
        with self._lock:
            if version in self.versions[name]:
                raise ValueError(f"version: router '{name}' already has version '{version}' (loaded: "
                                 f"{sorted(self.versions[name])})")
            if name in self.releases:
                raise ValueError(f"version: router '{name}' has a release in progress ('{self.releases[name].candidate}'"
                                 " against its current version); promote or roll it back first")
        try:
            saved = self._load(str(folder))
        except ValueError as e:
            raise ValueError(f"path: {e}") from None
        cur_saved = self.versions[name][self.current[name]]
        cur = cur_saved.manifest
        if sorted(saved.manifest.candidate_names) != sorted(cur.candidate_names):
            raise ValueError(f"path: {folder} routes between {saved.manifest.candidate_names}; router '{name}' "
                             f"routes between {cur.candidate_names} (a new version keeps the candidates)")
        if saved.threshold_router != cur_saved.threshold_router:
            what = "takes a threshold" if cur_saved.threshold_router else "picks a candidate itself"
            raise ValueError(f"path: {folder} is a {saved.manifest.type} router; router '{name}' {what}, and so must "
                             "a new version (the model names 'router-<name>-<threshold>' keep their meaning)")
        with self._lock:
            if name in self.releases or version in self.versions[name]:  # raced with another load
                raise ValueError(f"version: router '{name}' changed while '{version}' loaded; try again")
            self._log({"event": "load", "router": name, "version": version, "path": str(folder.resolve()),
                       "rule": asdict(rule)})
            self.versions[name][version] = saved
            rel = Release(name, self.current[name], version, rule)
            self.releases[name] = rel
        log.info("release of router '%s': version '%s' loaded from %s, canary %.0f%% against '%s'", name, version,
                 folder, 100 * rule.canary_share, rel.current)
        return {"event": {"router": name, "event": "loaded", "version": version, "reason": str(folder)},
                **self.status(name)}

    def promote(self, name: str, reason: str = "by an operator") -> dict[str, Any]:
        return self._decide_release(name, "promote", reason)

    def rollback(self, name: str, reason: str = "by an operator") -> dict[str, Any]:
        return self._decide_release(name, "rollback", reason)

    def _decide_release(self, name: str, what: str, reason: str) -> dict[str, Any]:
        self._get(name)
        with self._lock:
            rel = self.releases.get(name)
            if rel is None:
                raise ValueError(f"name: router '{name}' has no release in progress")
            event = self._end(rel, what, reason)
        return {"event": event, **self.status(name)}

    def _end(self, rel: Release, what: str, reason: str) -> dict[str, Any]:
        """Journal and apply a verdict (under the lock): the new version becomes current, or is set aside."""
        self._log({"event": "end", "router": rel.router, "release": rel.candidate,
                   "state": PROMOTED if what == "promote" else ROLLED_BACK, "reason": reason})
        return self._apply_end(rel, what, reason)

    def _apply_end(self, rel: Release, what: str, reason: str) -> dict[str, Any]:
        if what == "promote":
            self.current[rel.router] = rel.candidate
        rel.end(PROMOTED if what == "promote" else ROLLED_BACK, reason)
        del self.releases[rel.router]
        self.ended.append(rel)
        log.info("release of router '%s': version '%s' %s (%s)", rel.router, rel.candidate, rel.state, reason)
        return {"router": rel.router, "event": rel.state, "version": rel.candidate, "reason": reason}

    def release(self, name: str, action: str, args: Mapping[str, Any]) -> dict[str, Any]:
        """The API's entry to releases: ``action`` load (``args``: version, path, release), promote or
        rollback (``args``: reason). A refused request answers ``error`` and ``field`` instead of raising (the
        message crosses the deployment handle intact)."""
        try:
            if action == "load":
                unknown = sorted(set(args) - {"version", "path", "release"})
                if unknown:  # a key that cannot name a field itself ('', spaces, a colon) is the body's fault
                    key = unknown[0]
                    field_ = key if re.fullmatch(r"[A-Za-z_][\w.-]{0,63}", key) else "body"
                    raise ValueError(f"{field_}: unknown field {key!r}; known: ['path', 'release', 'version']")
                for f in ("version", "path"):
                    if not args.get(f):
                        raise ValueError(f"{f}: missing")
                if not isinstance(args["path"], str):
                    raise ValueError(f"path: a router folder (a string), got {args['path']!r}")
                if args.get("release") is not None and not isinstance(args["release"], Mapping):
                    raise ValueError(f"release: a mapping of rule fields, got {args['release']!r}")
                return self.load_version(name, args["version"], args["path"], args.get("release"))
            if action in ("promote", "rollback"):
                return self._decide_release(name, action, str(args.get("reason") or "by an operator"))
            raise ValueError(f"action: load, promote or rollback, got '{action}'")
        except ValueError as e:
            text = str(e)
            field = text.split(":", 1)[0] if ":" in text and " " not in text.split(":", 1)[0] else None
            return {"error": f"field '{field}': {text.split(':', 1)[1].strip()}" if field else text,
                    "field": field}

    def status(self, name: str | None = None) -> dict[str, Any]:
        """Each router's current version, its loaded versions, the release in progress and the ended ones."""
        with self._lock:
            names = [name] if name is not None else sorted(self.versions)
            return {"routers": {n: {"current": self.current[n], "versions": sorted(self.versions[n]),
                                    "release": self.releases[n].to_dict() if n in self.releases else None,
                                    "ended": [r.to_dict() for r in self.ended if r.router == n]}
                                for n in names},
                    "journal": None if self.journal is None else {"path": str(self.journal.path),
                                                                   "replayed": self.replayed,
                                                                   "appended": self.journal.appended}}

    def _decide_feedback(self, name: str, saved: SavedRouter, query: str, threshold: float | None,
                         strong_share: float | None, group: str) -> dict[str, Any]:
        """A router that learns from feedback: the request's context key (its category, else its user) picks
        the learned offsets; the decision waits, by request id, for its feedback."""
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
        """Save what the online routers learned (their write-ahead logs hold every update already); close the
        release journal."""
        if self.journal is not None:
            self.journal.close()
        for s in (v for versions in self.versions.values() for v in versions.values()):
            if s.manifest.online and isinstance(s.router, SelectorRouter):
                s.router.selector.close()

    def _get(self, name: str) -> SavedRouter:
        if name not in self.versions:
            raise KeyError(f"no served router '{name}' (served: {sorted(self.versions)})")
        return self.versions[name][self.current[name]]


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


def _frozen(saved: SavedRouter) -> bool:
    """A router whose decision is a function of the request (no online state, no draw): its route has
    probability 1, and asking it has no side effect."""
    return not saved.manifest.online and not isinstance(saved.router, FeedbackRouter)
