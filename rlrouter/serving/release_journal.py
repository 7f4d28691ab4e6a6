"""The release journal: every step of a served router's releases, appended to one file and fsynced before the
app answers (``serving.release_journal``), so a restart (or ``kill -9``) brings the releases back as they were.

One JSON event a line, framed with a format tag and a CRC-32 as the selector's write-ahead log
(``rlrouter.selector.persistence.frame_line``):

- ``{"event": "load", "router", "version", "path", "rule"}``: a new version loaded and its canary started
  against the current version (``rule``: the release's ``ReleaseRule`` as a mapping);
- ``{"event": "decision", "router", "request_id", "version", "release"}``: a decision made while a release ran
  (``release``: its candidate version, which names the release), so its feedback counts there after a restart;
- ``{"event": "reward", "router", "request_id", "version", "release", "reward", "cost_known"}``: a feedback's
  reward counted in a release;
- ``{"event": "end", "router", "release", "state", "reason"}``: the verdict (``promoted`` or ``rolled_back``),
  the rule's or an operator's.

:class:`~rlrouter.serving.served_routers.ServedRouters` writes an event before it applies it in memory, and on
start replays the file in order: versions reloaded from their folders, counts rebuilt reward by reward, verdicts
re-applied. A line torn by a crash mid-append fails its checksum; it is skipped and counted, and the app answered
no request on it (the append had not returned). A canary decision and its feedback cost one line each (about
200 bytes); the file is never rewritten.
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rlrouter.selector.persistence import fsync_dir, frame_line, unframe_line

JOURNAL_FORMAT = "rlrouter.releases"
EVENTS = ("load", "decision", "reward", "end")


@dataclass
class JournalRead:
    events: list[dict[str, Any]]
    """The intact events, in the order they were written."""
    skipped: int
    """Lines that failed their frame or checksum (torn by a crash, or altered)."""
    skipped_at: list[str]
    """Where they were, ``file:line``, the first 20."""


class ReleaseJournal:
    """The writer. ``append`` returns once its line is on disk; thread-safe."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        new = not self.path.exists()
        self.torn_tail = _cut_torn_tail(self.path) if not new else 0
        """Bytes of a last line torn by a crash, cut before the first append (the line would swallow it)."""
        self._f = open(self.path, "ab")
        if new:
            fsync_dir(self.path.parent)  # the file's name survives a crash too
        self.appended = 0

    def append(self, event: dict[str, Any]) -> None:
        if event.get("event") not in EVENTS:
            raise ValueError(f"release journal event: one of {EVENTS}, got {event.get('event')!r}")
        line = frame_line(JOURNAL_FORMAT, event)
        with self._lock:
            self._f.write(line)
            self._f.flush()
            os.fsync(self._f.fileno())
            self.appended += 1

    def read(self) -> JournalRead:
        return read_journal(self.path)

    def close(self) -> None:
        with self._lock:
            if not self._f.closed:
                self._f.close()


def _cut_torn_tail(path: Path) -> int:
    """Truncate a last line that has no newline (an append a crash cut short: never acknowledged)."""
    size = path.stat().st_size
    if size == 0:
        return 0
    with open(path, "r+b") as f:
        f.seek(size - 1)
        if f.read(1) == b"\n":
            return 0
        keep, step = 0, 1 << 16
        pos = size
        while pos > 0:  # the last newline, read from the end in blocks
            start = max(0, pos - step)
            f.seek(start)
            block = f.read(pos - start)
            i = block.rfind(b"\n")
            if i >= 0:
                keep = start + i + 1
                break
            pos = start
        f.truncate(keep)
        f.flush()
        os.fsync(f.fileno())
    return size - keep


def read_journal(path: str | Path) -> JournalRead:
    """Every intact event of the journal at ``path`` (none when it does not exist)."""
    path = Path(path)
    if not path.exists():
        return JournalRead([], 0, [])
    events, skipped, where = [], 0, []
    for i, line in enumerate(path.read_bytes().split(b"\n")):
        if not line:
            continue
        try:
            ev = unframe_line(line, JOURNAL_FORMAT)
            if not isinstance(ev, dict) or ev.get("event") not in EVENTS:
                raise ValueError("not a release journal event")
        except ValueError:
            skipped += 1
            if len(where) < 20:
                where.append(f"{path}:{i + 1}")
            continue
        events.append(ev)
    return JournalRead(events, skipped, where)
