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

from pathlib import Path
from typing import Any

from rlrouter.selector.persistence import FramedLog, FramedRead, read_framed

JOURNAL_FORMAT = "rlrouter.releases"
EVENTS = ("load", "decision", "reward", "end")

JournalRead = FramedRead
"""``records``: the intact events in order; ``skipped`` / ``skipped_at``: lines that failed their frame."""


def _is_event(ev: Any) -> bool:
    return isinstance(ev, dict) and ev.get("event") in EVENTS


class ReleaseJournal(FramedLog):
    """The writer. ``append`` returns once its line is on disk; thread-safe; a torn last line is cut on open."""

    def __init__(self, path: str | Path):
        super().__init__(path, JOURNAL_FORMAT)

    def append(self, event: dict[str, Any]) -> None:
        if not _is_event(event):
            raise ValueError(f"release journal event: one of {EVENTS}, got {event.get('event')!r}")
        super().append(event)

    def read(self) -> JournalRead:
        return read_journal(self.path)


def read_journal(path: str | Path) -> JournalRead:
    """Every intact event of the journal at ``path`` (none when it does not exist)."""
    return read_framed(path, JOURNAL_FORMAT, _is_event)
