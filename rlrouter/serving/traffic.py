"""The traffic log: every routed request and every feedback, appended to disk as it happens (opt-in,
``serving.traffic``), the raw material of a router retrained on the app's own traffic.

Records are JSON objects, one a line, each framed with a format tag and a CRC-32 like the selector's
write-ahead log (``rlrouter.selector.persistence.frame_line``), in segment files
``traffic-<first unix ms>-<pid>-<n>.jsonl`` under ``serving.traffic.path``:

- ``{"kind": "request", "id", "time", "user", "endpoint", "prompt" | "prompt_sha256" + "embedding", "decision":
  {"model", "models", "mode", "router", "propensity"}, "calls": [{"model", "reply", "prompt_tokens",
  "completion_tokens", "cost", "latency_s"}]}``: one per routed request. With ``store_prompts: false`` the prompt's text never reaches
  the disk: only its SHA-256 and, when the app has an encoder, its embedding.
- ``{"kind": "feedback", "request_id", "time", "user", ...}``: one per feedback as it arrives (``outcome``,
  ``reward``, ``followup`` class, a judge's grade), joined to its request when the log is read.
- ``{"kind": "explore", "request_id", "calls": [...]}``: with ``explore_share``, the reply of a second candidate
  the app asked in the background (``correct`` when a replay backend logged whether it was right, and
  ``propensity``: the probability this candidate was drawn for the request), joined to its request as
  ``explore``.
- ``{"kind": "judge", "request_id", "grades": [{"model", "judge", "grade", "reply", "cost"}]}``: with ``judge``,
  a candidate's grade of the request's replies (the routed one, and the explored one), asked in the
  background: ``grade`` 1 (its reply starts with "yes"), 0 ("no"), or null (anything else, or an error).
  Joined to its request as ``judge``; the export scores a reply by it where no feedback and no logged
  correctness says better.

``append`` returns once its line is fsynced, so a record the app acknowledged survives ``kill -9``. A crash
mid-append leaves a torn line; ``read_traffic`` skips every line that fails its frame or checksum and counts
it, so one torn record never hides the others. A segment is closed after ``max_segment_mb`` and a new one
started; ``retention_segments`` keeps the newest N (older ones are deleted at rotation). Readers open the
segments read-only and take no lock: reading never blocks serving.
"""

from __future__ import annotations

import hashlib
import os
import random
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Sequence

from rlrouter.selector.persistence import frame_line, fsync_dir, read_framed

TRAFFIC_FORMAT = "rlrouter.traffic"
SEGMENT_GLOB = "traffic-*.jsonl"


@dataclass
class TrafficConfig:
    """``serving.traffic``: the opt-in traffic log."""

    enabled: bool = False
    path: str = "outputs/traffic"
    """The folder of the log's segment files (created when missing)."""
    store_prompts: bool = True
    """False: a request's prompt is kept as its SHA-256 (and embedding, when the app has an encoder) only."""
    max_segment_mb: float = 64.0
    """A segment is closed when it reaches this size, and the next record starts a new one."""
    retention_segments: int = 0
    """Keep the newest N segments, deleting older ones at rotation; 0 keeps them all."""
    explore_share: float = 0.0
    """This share of routed requests is also sent, in the background, to a second candidate, drawn with weight
    ``1 / (1 + its logged replies so far)`` so the gaps of the log fill first. The draw's probability is logged
    with the reply, so the off-policy estimators can use it. The caller still gets the routed answer; the added
    calls and cost are counted on ``/metrics``. 0: no exploration."""
    explore_seed: int | None = None
    """Seed of the exploration draws (tests); None draws from the OS."""
    judge: str | None = None
    """A pool candidate that grades routed replies in the background (``JUDGE_PROMPT``): the routed chat
    completion's reply and every exploration reply. None: no judge."""
    judge_share: float = 1.0
    """The share of routed chat completions whose replies the judge grades."""

    def __post_init__(self) -> None:
        for name in ("enabled", "store_prompts"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"serving.traffic.{name}: true or false, got {getattr(self, name)!r}")
        if not isinstance(self.path, str) or not self.path:
            raise ValueError(f"serving.traffic.path: a folder, got {self.path!r}")
        if isinstance(self.max_segment_mb, bool) or not isinstance(self.max_segment_mb, (int, float)) \
                or self.max_segment_mb <= 0:
            raise ValueError(f"serving.traffic.max_segment_mb: a size in MB > 0, got {self.max_segment_mb!r}")
        if isinstance(self.retention_segments, bool) or not isinstance(self.retention_segments, int) \
                or self.retention_segments < 0:
            raise ValueError(f"serving.traffic.retention_segments: an int >= 0 (0 = keep all), "
                             f"got {self.retention_segments!r}")
        if isinstance(self.explore_share, bool) or not isinstance(self.explore_share, (int, float)) \
                or not 0.0 <= self.explore_share <= 1.0:
            raise ValueError(f"serving.traffic.explore_share: a share in [0, 1] (0 = off), got {self.explore_share!r}")
        if self.judge is not None and (not isinstance(self.judge, str) or not self.judge):
            raise ValueError(f"serving.traffic.judge: a candidate's name, or null, got {self.judge!r}")
        if isinstance(self.judge_share, bool) or not isinstance(self.judge_share, (int, float)) \
                or not 0.0 <= self.judge_share <= 1.0:
            raise ValueError(f"serving.traffic.judge_share: a share in [0, 1], got {self.judge_share!r}")


PROPENSITY_DRAWS = 512
"""``selector.propensity_draws`` the Serve app sets when the traffic log is on and the selector config
leaves it out: every Thompson decision then carries its estimated propensity (its standard error is at
most 0.5 / sqrt(512) = 0.022)."""


def selector_defaults(selector: dict[str, Any], serving: dict[str, Any] | None) -> dict[str, Any]:
    """The selector section as the app runs it: with ``serving.traffic.enabled``, ``propensity_draws``
    defaults to ``PROPENSITY_DRAWS`` so the log holds the logging policy's propensities."""
    traffic = (serving or {}).get("traffic") or {}
    enabled = traffic.enabled if isinstance(traffic, TrafficConfig) else bool(traffic.get("enabled", False))
    return {"propensity_draws": PROPENSITY_DRAWS, **selector} if enabled else dict(selector)


def prompt_fields(prompt: str, store_prompts: bool, embedding: Sequence[float] | None = None) -> dict[str, Any]:
    """What a request record keeps of its prompt: the text, or (``store_prompts`` false) its SHA-256 and,
    when given, its embedding."""
    if store_prompts:
        return {"prompt": prompt}
    out: dict[str, Any] = {"prompt_sha256": hashlib.sha256(prompt.encode("utf-8")).hexdigest()}
    if embedding is not None:
        out["embedding"] = [float(x) for x in embedding]
    return out


KINDS = ("request", "feedback", "explore", "judge")

JUDGE_PROMPT = ("You grade answers. Question:\n{question}\n\nAnswer:\n{answer}\n\nIs the answer correct? "
                "Reply with one word, yes or no.")
"""What the judge candidate is asked, per reply."""


def judge_prompt(question: str, answer: str) -> str:
    return JUDGE_PROMPT.format(question=question, answer=answer)


def parse_grade(reply: str | None) -> float | None:
    """A judge's reply as a grade: 1 when it starts with "yes", 0 with "no" (case, spaces and punctuation
    before the word aside), else None."""
    if not reply:
        return None
    word = reply.strip().lstrip("*\"'`([ ").split(maxsplit=1)
    first = word[0].rstrip(".,!:;*\"')]").lower() if word else ""
    return 1.0 if first == "yes" else 0.0 if first == "no" else None


class TrafficLog:
    """The writer: one per app process. Thread-safe; ``append`` blocks until its record is on disk."""

    def __init__(self, cfg: TrafficConfig):
        self.cfg = cfg
        self.dir = Path(cfg.path)
        self.dir.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._f: Any = None
        self._size = 0
        self.records = 0
        self.rotations = 0
        self.replies: dict[str, int] = {}
        """Replies logged per candidate by this process (what exploration fills)."""
        self._rng = random.Random(cfg.explore_seed)

    def judge_draw(self) -> bool:
        """Whether this request's replies are graded (``judge`` set, with probability ``judge_share``)."""
        return bool(self.cfg.judge) and self._rng.random() < self.cfg.judge_share

    def explore_target(self, chosen: str, candidates: Sequence[str]) -> tuple[str, float] | None:
        """A second candidate for this request and the probability it was drawn, or None: with probability
        ``explore_share``, a candidate other than ``chosen`` drawn with weight ``1 / (1 + its logged replies)``."""
        others = [c for c in dict.fromkeys(candidates) if c != chosen]
        if not others or self._rng.random() >= self.cfg.explore_share:
            return None
        with self._lock:
            weights = [1.0 / (1 + self.replies.get(c, 0)) for c in others]
        pick = self._rng.choices(range(len(others)), weights=weights)[0]
        return others[pick], self.cfg.explore_share * weights[pick] / sum(weights)

    def _segment(self) -> Any:
        if self._f is None or self._size >= self.cfg.max_segment_mb * 1024 * 1024:
            if self._f is not None:
                self._f.close()
                self.rotations += 1
            n = len(segments(self.dir))
            path = self.dir / f"traffic-{int(time.time() * 1000):013d}-{os.getpid()}-{n:06d}.jsonl"
            self._f = open(path, "ab")
            self._size = self._f.tell()
            fsync_dir(self.dir)  # the new segment's name survives a crash too
            self._retain()
        return self._f

    def _retain(self) -> None:
        keep = self.cfg.retention_segments
        if keep:
            for old in segments(self.dir)[:-keep]:
                old.unlink(missing_ok=True)

    def append(self, record: dict[str, Any]) -> None:
        """Write ``record`` (needs ``kind``) and fsync it; returning means it survives a crash."""
        if record.get("kind") not in KINDS:
            raise ValueError(f"traffic record kind: one of {KINDS}, got {record.get('kind')!r}")
        line = frame_line(TRAFFIC_FORMAT, {"time": time.time(), **record})
        with self._lock:
            f = self._segment()
            f.write(line)
            f.flush()
            os.fsync(f.fileno())
            self._size += len(line)
            self.records += 1
            for call in record.get("calls") or []:
                if call.get("reply") is not None:
                    self.replies[call["model"]] = self.replies.get(call["model"], 0) + 1

    def close(self) -> None:
        with self._lock:
            if self._f is not None:
                self._f.close()
                self._f = None


def segments(folder: str | Path) -> list[Path]:
    """The log's segment files, oldest first (their names start with the time they were opened)."""
    return sorted(Path(folder).glob(SEGMENT_GLOB))


@dataclass
class TrafficRead:
    requests: list[dict[str, Any]]
    """Request records in log order, each with ``feedback``: its feedback records in arrival order,
    ``explore``: the calls exploration added to it, and ``judge``: the judge's grades of its replies."""
    orphan_feedback: list[dict[str, Any]]
    """Feedback (or exploration) whose request is not in the log (logged before the log was on, or deleted by
    retention)."""
    skipped: int
    """Lines that failed their frame or checksum (torn by a crash, or altered), skipped."""
    skipped_at: list[str]
    """Where they were, ``file:line``, the first 20."""


def read_traffic(folder: str | Path, files: Iterable[Path] | None = None) -> TrafficRead:
    """Every intact record of the log at ``folder``, requests joined to their feedback."""
    requests: list[dict[str, Any]] = []
    feedback: list[dict[str, Any]] = []
    skipped, where = 0, []
    for path in (segments(folder) if files is None else files):
        got = read_framed(path, TRAFFIC_FORMAT, lambda r: isinstance(r, dict) and r.get("kind") in KINDS)
        skipped += got.skipped
        where += got.skipped_at[: 20 - len(where)]
        for rec in got.records:
            (requests if rec["kind"] == "request" else feedback).append(
                {**rec, "feedback": [], "explore": [], "judge": []} if rec["kind"] == "request" else rec)
    # joined after every segment is read: with several app processes, a feedback may sit in a segment
    # opened before its request's
    by_id = {str(r.get("id")): r for r in requests}
    orphans = []
    for fb in sorted(feedback, key=lambda r: r.get("time", 0.0)):  # feedback, exploration and judge records
        target = by_id.get(str(fb.get("request_id")))
        if target is None:
            orphans.append(fb)
        elif fb["kind"] == "explore":
            target["explore"].extend(fb.get("calls") or [])
        elif fb["kind"] == "judge":
            target["judge"].extend(fb.get("grades") or [])
        else:
            target["feedback"].append(fb)
    return TrafficRead(requests, orphans, skipped, where)
