"""Exact, crash-safe persistence of the selector state: an atomic snapshot plus a write-ahead log.

An update acknowledged by ``/feedback`` must survive a ``kill -9`` of any process. The selector
therefore appends every resolved update to ``<storage_path>.wal`` and fsyncs it *before* applying
and acknowledging it. Snapshots (``<storage_path>``) are written every ``auto_save_interval`` to a
temporary file, fsynced, renamed over the old one and the directory fsynced, so a crash leaves
either the old or the new snapshot, never a torn one. The snapshot records the last log sequence
number it contains; loading replays the log entries after it, then the log is truncated.

Floats go through JSON as Python's shortest round-trip repr, so alpha and beta come back bit-exact;
arrays (the contextual model) are stored as base64 of their little-endian float64 bytes.

A snapshot that is not JSON, or JSON that is not ours (``format`` tag), or ours but malformed, is a
:class:`StateFileError`; the file is first moved aside to ``<path>.corrupt-<unix time>`` so it is
never overwritten by the next save. A log whose *last* line is torn (a crash mid-append, before the
fsync returned, so never acknowledged) is cut at that line; a bad line anywhere else is corrupt.
"""

from __future__ import annotations

import base64
import json
import os
import threading
import time
import zlib
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from rlrouter.selector.affinity import Pin
from rlrouter.selector.contextual import LinearThompsonArm
from rlrouter.selector.state import (
    ModelDelta,
    PendingDecision,
    Posterior,
    PosteriorUpdate,
    SelectorState,
    SessionStats,
)

FORMAT = "rlrouter.selector.state"
WAL_FORMAT = "rlrouter.selector.wal"
VERSION = 1


class StateFileError(RuntimeError):
    """A state or log file is corrupt or foreign. ``moved_to`` is where it was set aside."""

    def __init__(self, path: str | Path, reason: str, moved_to: Path | None = None):
        self.path = Path(path)
        self.reason = reason
        self.moved_to = moved_to
        where = f"; it was moved aside to {moved_to} and left untouched" if moved_to else ""
        super().__init__(f"selector state file {path}: {reason}{where}")


# ----------------------------------------------------------------------------- encoding


def _arr_to_b64(a: np.ndarray) -> str:
    return base64.b64encode(np.ascontiguousarray(a, dtype="<f8").tobytes()).decode("ascii")


def _b64_to_arr(s: str, shape: tuple[int, ...], where: str) -> np.ndarray:
    try:
        raw = base64.b64decode(s.encode("ascii"), validate=True)
    except Exception as e:
        raise ValueError(f"{where}: not base64 ({e})") from None
    a = np.frombuffer(raw, dtype="<f8").astype(np.float64)
    if a.size != int(np.prod(shape)):
        raise ValueError(f"{where}: {a.size} numbers, expected {int(np.prod(shape))} for shape {shape}")
    return a.reshape(shape).copy()


def _posterior_to(p: Posterior) -> list[float | int]:
    return [p.alpha, p.beta, p.interactions, p.explicit, p.implicit]


def _posterior_from(v: Any, where: str) -> Posterior:
    if not isinstance(v, list) or len(v) != 5:
        raise ValueError(f"{where}: expected [alpha, beta, interactions, explicit, implicit]")
    a, b = v[0], v[1]
    for name, x in (("alpha", a), ("beta", b)):
        if isinstance(x, bool) or not isinstance(x, (int, float)) or not x > 0:
            raise ValueError(f"{where}.{name}: expected a number > 0, got {x!r}")
    for i, name in ((2, "interactions"), (3, "explicit"), (4, "implicit")):
        if isinstance(v[i], bool) or not isinstance(v[i], int) or v[i] < 0:
            raise ValueError(f"{where}.{name}: expected an integer >= 0, got {v[i]!r}")
    return Posterior(float(a), float(b), v[2], v[3], v[4])


def _scope_to(scope: dict[str, dict[str, Posterior]]) -> dict[str, Any]:
    return {k: {m: _posterior_to(p) for m, p in v.items()} for k, v in scope.items()}


def _scope_from(d: Any, where: str) -> dict[str, dict[str, Posterior]]:
    if not isinstance(d, dict):
        raise ValueError(f"{where}: expected an object")
    out: dict[str, dict[str, Posterior]] = {}
    for k, v in d.items():
        if not isinstance(v, dict):
            raise ValueError(f"{where}.{k}: expected an object")
        out[k] = {m: _posterior_from(p, f"{where}.{k}.{m}") for m, p in v.items()}
    return out


def _pending_to(p: PendingDecision) -> dict[str, Any]:
    return {"request_id": p.request_id, "model": p.model, "mode": p.mode, "candidates": p.candidates,
            "user_id": p.user_id, "session_id": p.session_id, "category": p.category,
            "created_at": p.created_at, "models": p.models, "feedback_seq": p.feedback_seq,
            "context": None if p.context is None else _arr_to_b64(p.context)}


def _pending_from(d: Any, where: str) -> PendingDecision:
    if not isinstance(d, dict) or not isinstance(d.get("request_id"), str) or not isinstance(d.get("model"), str):
        raise ValueError(f"{where}: expected a decision with request_id and model")
    ctx = d.get("context")
    context = None
    if ctx is not None:
        raw = base64.b64decode(ctx.encode("ascii"))
        context = np.frombuffer(raw, dtype="<f8").astype(np.float64).copy()
    return PendingDecision(request_id=d["request_id"], model=d["model"], mode=str(d.get("mode", "")),
                           candidates=list(d.get("candidates") or []), user_id=d.get("user_id"),
                           session_id=d.get("session_id"), category=d.get("category"),
                           created_at=float(d.get("created_at") or 0.0), models=list(d.get("models") or []),
                           context=context, feedback_seq=d.get("feedback_seq"))


def encode_state(state: SelectorState) -> dict[str, Any]:
    """The snapshot document (JSON-ready) of ``state``."""
    return {
        "format": FORMAT,
        "version": VERSION,
        "saved_at": time.time(),
        "wal_seq": state.wal_seq,
        "selections": state.selections,
        "feedback_count": state.feedback_count,
        "global": {m: _posterior_to(p) for m, p in state.global_.items()},
        "users": _scope_to(state.users),
        "categories": _scope_to(state.categories),
        "sessions": {s: {m: [st.selections, st.successes] for m, st in v.items()} for s, v in state.sessions.items()},
        "contextual": {m: {"dim": arm.dim, "prior": arm.prior, "n": arm.n, "a_inv": _arr_to_b64(arm.a_inv),
                           "b": _arr_to_b64(arm.b)} for m, arm in state.contextual.items()},
        "pending": [_pending_to(p) for p in state.pending.values()],
        "pins": {k: p.to_list() for k, p in state.pins.items()},
    }


def decode_state(d: Any) -> SelectorState:
    """Inverse of :func:`encode_state`; a ValueError names the first bad field."""
    if not isinstance(d, dict):
        raise ValueError(f"expected a JSON object, got {type(d).__name__}")
    if d.get("format") != FORMAT:
        raise ValueError(f"field 'format': expected '{FORMAT}', got {d.get('format')!r} (not a selector state file)")
    if d.get("version") != VERSION:
        raise ValueError(f"field 'version': expected {VERSION}, got {d.get('version')!r}")
    for key in ("wal_seq", "selections", "feedback_count"):
        if isinstance(d.get(key), bool) or not isinstance(d.get(key), int) or d[key] < 0:
            raise ValueError(f"field '{key}': expected an integer >= 0, got {d.get(key)!r}")
    glob = d.get("global")
    if not isinstance(glob, dict):
        raise ValueError("field 'global': expected an object")
    state = SelectorState(
        global_={m: _posterior_from(p, f"global.{m}") for m, p in glob.items()},
        users=_scope_from(d.get("users", {}), "users"),
        categories=_scope_from(d.get("categories", {}), "categories"),
        selections=d["selections"], wal_seq=d["wal_seq"], feedback_count=d["feedback_count"])
    sessions = d.get("sessions", {})
    if not isinstance(sessions, dict):
        raise ValueError("field 'sessions': expected an object")
    for s, v in sessions.items():
        if not isinstance(v, dict):
            raise ValueError(f"field 'sessions.{s}': expected an object")
        state.sessions[s] = {}
        for m, st in v.items():
            if not (isinstance(st, list) and len(st) == 2 and all(isinstance(x, (int, float)) for x in st)):
                raise ValueError(f"field 'sessions.{s}.{m}': expected [selections, successes]")
            state.sessions[s][m] = SessionStats(float(st[0]), float(st[1]))
    ctx = d.get("contextual", {})
    if not isinstance(ctx, dict):
        raise ValueError("field 'contextual': expected an object")
    for m, a in ctx.items():
        where = f"contextual.{m}"
        if not isinstance(a, dict) or not isinstance(a.get("dim"), int) or a["dim"] < 1:
            raise ValueError(f"field '{where}.dim': expected an integer >= 1")
        arm = LinearThompsonArm(a["dim"], float(a.get("prior", 1.0)))
        arm.a_inv = _b64_to_arr(a.get("a_inv", ""), (arm.dim, arm.dim), f"field '{where}.a_inv'")
        arm.b = _b64_to_arr(a.get("b", ""), (arm.dim,), f"field '{where}.b'")
        arm.n = float(a.get("n", 0.0))
        state.contextual[m] = arm
    pins = d.get("pins", {})  # absent in snapshots from before session affinity
    if not isinstance(pins, dict):
        raise ValueError("field 'pins': expected an object")
    state.pins = OrderedDict((k, Pin.from_list(v, f"pins.{k}")) for k, v in pins.items())
    pending = d.get("pending", [])
    if not isinstance(pending, list):
        raise ValueError("field 'pending': expected a list")
    state.pending = OrderedDict()
    for i, p in enumerate(pending):
        dec = _pending_from(p, f"field 'pending[{i}]'")
        state.pending[dec.request_id] = dec
    return state


def encode_update(u: PosteriorUpdate) -> dict[str, Any]:
    return {"request_id": u.request_id, "kind": u.kind, "user_id": u.user_id, "category": u.category,
            "session_id": u.session_id, "detail": u.detail,
            "context": None if u.context is None else _arr_to_b64(u.context),
            "deltas": [[x.model, x.d_alpha, x.d_beta, x.session_success, x.target, x.weight] for x in u.deltas]}


def decode_update(d: Any) -> PosteriorUpdate:
    if not isinstance(d, dict) or not isinstance(d.get("request_id"), str) or not isinstance(d.get("deltas"), list):
        raise ValueError("expected an update with request_id and deltas")
    deltas = []
    for i, x in enumerate(d["deltas"]):
        if not (isinstance(x, list) and len(x) == 6 and isinstance(x[0], str)):
            raise ValueError(f"deltas[{i}]: expected [model, d_alpha, d_beta, session_success, target, weight]")
        deltas.append(ModelDelta(x[0], float(x[1]), float(x[2]), float(x[3]), float(x[4]), float(x[5])))
    ctx = d.get("context")
    context = None
    if ctx is not None:
        context = np.frombuffer(base64.b64decode(ctx.encode("ascii")), dtype="<f8").astype(np.float64).copy()
    return PosteriorUpdate(request_id=d["request_id"], kind=str(d.get("kind", "")), deltas=deltas,
                           user_id=d.get("user_id"), category=d.get("category"), session_id=d.get("session_id"),
                           context=context, detail=dict(d.get("detail") or {}))


# ----------------------------------------------------------------------------- files


def move_aside(path: Path) -> Path:
    """Rename a bad file to ``<path>.corrupt-<unix time>`` (never overwriting an earlier one)."""
    stamp = int(time.time())
    dest = path.with_name(f"{path.name}.corrupt-{stamp}")
    k = 1
    while dest.exists():
        dest = path.with_name(f"{path.name}.corrupt-{stamp}-{k}")
        k += 1
    os.replace(path, dest)
    return dest


def fsync_dir(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_snapshot(path: str | Path, doc: dict[str, Any]) -> None:
    """Atomically replace ``path`` by ``doc``: temp file, fsync, rename, fsync of the directory."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    data = json.dumps(doc, separators=(",", ":")).encode("utf-8")
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    fsync_dir(path.parent)


def read_snapshot(path: str | Path) -> SelectorState | None:
    """The state saved at ``path``; None when there is no file. Corrupt/foreign: moved aside, raised."""
    path = Path(path)
    if not path.exists():
        return None
    try:
        raw = path.read_bytes()
        try:
            doc = json.loads(raw.decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as e:
            raise ValueError(f"not JSON ({e})") from None
        return decode_state(doc)
    except ValueError as e:
        moved = move_aside(path)
        raise StateFileError(path, f"corrupt or foreign: {e}", moved) from None


def frame_line(tag: str, obj: Any) -> bytes:
    """One durable log line: ``obj`` as JSON inside an envelope with its format ``tag`` and the CRC-32 of
    that JSON, newline-terminated. The selector's write-ahead log and the serving traffic log write it."""
    body = json.dumps(obj, separators=(",", ":"))
    return json.dumps({"f": tag, "crc": zlib.crc32(body.encode()), "body": body},
                      separators=(",", ":")).encode("utf-8") + b"\n"


def unframe_line(line: bytes, tag: str) -> Any:
    """The object of a ``frame_line`` line (without its newline); ``ValueError`` saying why when the line
    is not one of ``tag``'s, or its checksum does not match (a torn or altered record)."""
    try:
        outer = json.loads(line.decode("utf-8"))
        if not isinstance(outer, dict) or outer.get("f") != tag:
            raise ValueError(f"not a {tag} entry")
        if zlib.crc32(outer["body"].encode()) != outer["crc"]:
            raise ValueError("checksum mismatch")
        return json.loads(outer["body"])
    except (KeyError, TypeError, AttributeError, UnicodeDecodeError) as e:
        raise ValueError(f"malformed entry ({type(e).__name__}: {e})") from None
    except json.JSONDecodeError as e:
        raise ValueError(f"not JSON ({e})") from None


@dataclass
class FramedRead:
    """What :func:`read_framed` found in a file of ``frame_line`` records."""

    records: list[Any]
    """The intact records, in the order they were written."""
    skipped: int
    """Lines that failed their frame, their checksum or the reader's check (torn by a crash, or altered)."""
    skipped_at: list[str]
    """Where they were, ``file:line``, the first 20."""


def read_framed(path: str | Path, tag: str, accept: Callable[[Any], bool] = lambda _: True,
                limit: int = 20) -> FramedRead:
    """Every intact ``frame_line`` record of ``tag`` in the file at ``path`` that ``accept`` takes (none when
    the file does not exist); the others are counted and located, never raised: a log that a crash tore,
    or a hand altered, still yields every record it holds intact."""
    path = Path(path)
    out = FramedRead([], 0, [])
    if not path.exists():
        return out
    for i, line in enumerate(path.read_bytes().split(b"\n")):
        if not line:
            continue
        try:
            rec = unframe_line(line, tag)
            if not accept(rec):
                raise ValueError(f"not a {tag} record")
        except ValueError:
            out.skipped += 1
            if len(out.skipped_at) < limit:
                out.skipped_at.append(f"{path}:{i + 1}")
            continue
        out.records.append(rec)
    return out


def cut_torn_tail(path: Path) -> int:
    """Truncate a last line that has no newline (an append a crash cut short: never acknowledged); returns
    the bytes cut."""
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


class FramedLog:
    """An append-only file of ``frame_line`` records of one ``tag``: ``append`` returns once its line is on disk
    (fsync; the file's name too, when new). A torn last line is cut on open, before the first append could
    land on it. Thread-safe. The release journal and the budget ledger write one."""

    def __init__(self, path: str | Path, tag: str):
        self.path = Path(path)
        self.tag = tag
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        new = not self.path.exists()
        self.torn_tail = cut_torn_tail(self.path) if not new else 0
        """Bytes of a last line torn by a crash, cut when the log was opened."""
        self._f = open(self.path, "ab")
        if new:
            fsync_dir(self.path.parent)
        self.appended = 0

    def append(self, obj: Any) -> None:
        line = frame_line(self.tag, obj)
        with self._lock:
            self._f.write(line)
            self._f.flush()
            os.fsync(self._f.fileno())
            self.appended += 1

    def close(self) -> None:
        with self._lock:
            if not self._f.closed:
                self._f.close()


class WriteAheadLog:
    """Append-only JSON-lines log of resolved updates; ``append`` returns once the line is on disk."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._f = None

    def _file(self):
        if self._f is None:
            self._f = open(self.path, "ab")
        return self._f

    def append(self, seq: int, update: PosteriorUpdate) -> None:
        f = self._file()
        f.write(frame_line(WAL_FORMAT, {"seq": seq, "update": encode_update(update)}))
        f.flush()
        # the acknowledgement waits for this: an acked /feedback must survive kill -9
        os.fsync(f.fileno())

    def read(self) -> list[tuple[int, PosteriorUpdate]]:
        """Every intact entry in order. A torn last line is cut off; any other bad line is an error."""
        if not self.path.exists():
            return []
        data = self.path.read_bytes()
        complete, _, tail = data.rpartition(b"\n")
        if tail:
            # torn tail of a crash mid-append: its fsync never returned, so it was never acknowledged
            self._truncate_to(len(complete) + 1 if complete else 0)
        entries: list[tuple[int, PosteriorUpdate]] = []
        if not complete:
            return entries
        for i, line in enumerate(complete.split(b"\n")):
            if not line:
                continue
            try:
                inner = unframe_line(line, WAL_FORMAT)
                entries.append((int(inner["seq"]), decode_update(inner["update"])))
            except (ValueError, KeyError, TypeError, UnicodeDecodeError) as e:
                self.close()
                moved = move_aside(self.path)
                raise StateFileError(self.path, f"corrupt write-ahead log: line {i + 1}: {e}", moved) from None
        return entries

    def _truncate_to(self, size: int) -> None:
        self.close()
        with open(self.path, "r+b") as f:
            f.truncate(size)
            f.flush()
            os.fsync(f.fileno())

    def reset(self) -> None:
        """Empty the log (after a snapshot that holds every entry)."""
        self.close()
        with open(self.path, "wb") as f:
            f.flush()
            os.fsync(f.fileno())
        fsync_dir(self.path.parent)

    def close(self) -> None:
        if self._f is not None:
            self._f.close()
            self._f = None
