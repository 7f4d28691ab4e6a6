"""Spend budgets per tenant (``serving.budgets``): a USD limit per period, enforced when a request is routed.

A tenant is an API key's user (``user_id``) or a tag its requests carry (OpenAI's ``user`` field of a chat
completion, ``end_user``); ``"*"`` gives each user, or each tag, a budget of its own. Each limit has a period
(``hour``, ``day``, ``week`` from Monday, ``month``; UTC) and a rule for a request that would go over it:

- ``fit`` (default): the router decides among the candidates whose estimated cost fits what is left of every
  budget the request falls under; when none fits, the request is refused as below;
- ``reject``: 429, OpenAI's error shape (type ``insufficient_quota``, code ``budget_exceeded``), naming the
  budget, what was spent, the limit, and when the period resets.

A call's cost is estimated before it is made: the prompt's tokens (ceil(chars / 4)) at the candidate's input
price plus ``completion_tokens`` (256) at its output price. What it really cost (the pool's accounting, or a
replay's logged cost) is charged after it, to every budget the request falls under: one line in the spend
ledger, framed and fsynced before the reply goes out (``rlrouter.selector.persistence.FramedLog``), so a
``kill -9`` loses no spend that a client was answered for. On start the ledger is read back; a line torn by a
crash (never acknowledged) is cut. The ledger lives in the selector's one replica, so every ingress replica
sees one account. Pure logic, no Ray.
"""

from __future__ import annotations

import calendar
import math
import time
from dataclasses import asdict, dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

from rlrouter.pool.options import estimate_tokens
from rlrouter.selector.persistence import FramedLog, read_framed

PERIODS = ("hour", "day", "week", "month")
ON_EXCEED = ("fit", "reject")
LEDGER_FORMAT = "rlrouter.spend"


class BudgetConfigError(ValueError):
    def __init__(self, field_path: str, message: str):
        self.field = field_path
        super().__init__(f"{field_path}: {message}")


@dataclass(frozen=True)
class BudgetLimit:
    """One limit of ``serving.budgets.limits``."""

    name: str
    """Names the budget in errors, ``/v1/budgets`` and ``/metrics``."""
    limit_usd: float
    period: str = "day"
    user_id: str | None = None
    """The API key's user it applies to; ``"*"``: every user, each with its own account."""
    end_user: str | None = None
    """The chat completion's ``user`` tag it applies to; ``"*"``: every tag, each with its own account."""
    on_exceed: str = "fit"

    def tenant(self, user: str, end_user: str | None) -> str | None:
        """The account this request is charged to under this limit; None when the limit does not apply."""
        if self.user_id is not None:
            return f"user:{user}" if self.user_id in ("*", user) else None
        if end_user is not None and self.end_user in ("*", end_user):
            return f"end_user:{user}:{end_user}"  # a tag is its caller's: two keys' 'team-a' are two accounts
        return None


@dataclass
class BudgetConfig:
    """``serving.budgets``: the limits and where the spend is kept."""

    limits: list[BudgetLimit] = field(default_factory=list)
    path: str = "outputs/budgets/spend.log"
    """The spend ledger (relative paths are under the directory the app runs in)."""
    completion_tokens: int = 256
    """Completion tokens a call is expected to produce, when its cost is estimated before the call."""

    @property
    def enabled(self) -> bool:
        return bool(self.limits)

    @classmethod
    def from_dict(cls, d: Any, where: str = "budgets") -> BudgetConfig:
        if isinstance(d, BudgetConfig):
            return d
        if d is None:
            return cls()
        if not isinstance(d, dict):
            raise BudgetConfigError(where, f"expected a mapping {{limits, path, completion_tokens}}, got {d!r}")
        unknown = sorted(set(d) - {"limits", "path", "completion_tokens"})
        if unknown:
            raise BudgetConfigError(f"{where}.{unknown[0]}", "unknown field; known: ['completion_tokens', 'limits', 'path']")
        path = d.get("path", cls.path)
        if not isinstance(path, str) or not path:
            raise BudgetConfigError(f"{where}.path", f"expected a file path, got {path!r}")
        ct = d.get("completion_tokens", 256)
        if isinstance(ct, bool) or not isinstance(ct, int) or ct < 0:
            raise BudgetConfigError(f"{where}.completion_tokens", f"expected an integer >= 0, got {ct!r}")
        raw = d.get("limits") or []
        if not isinstance(raw, list):
            raise BudgetConfigError(f"{where}.limits", f"expected a list of limits, got {raw!r}")
        limits, names = [], set()
        for i, item in enumerate(raw):
            lim = _limit(item, f"{where}.limits[{i}]")
            if lim.name in names:
                raise BudgetConfigError(f"{where}.limits[{i}].name", f"'{lim.name}' names two limits")
            names.add(lim.name)
            limits.append(lim)
        return cls(limits, path, ct)

    def to_dict(self) -> dict[str, Any]:
        return {"limits": [asdict(x) for x in self.limits], "path": self.path,
                "completion_tokens": self.completion_tokens}


def _limit(item: Any, where: str) -> BudgetLimit:
    known = {"name", "limit_usd", "period", "user_id", "end_user", "on_exceed"}
    if not isinstance(item, dict):
        raise BudgetConfigError(where, f"expected a mapping {sorted(known)}, got {item!r}")
    unknown = sorted(set(item) - known)
    if unknown:
        raise BudgetConfigError(f"{where}.{unknown[0]}", f"unknown field; known: {sorted(known)}")
    name = item.get("name")
    if not isinstance(name, str) or not name.strip():
        raise BudgetConfigError(f"{where}.name", f"expected a non-empty string, got {name!r}")
    usd = item.get("limit_usd")
    if isinstance(usd, bool) or not isinstance(usd, (int, float)) or not math.isfinite(usd) or usd < 0:
        raise BudgetConfigError(f"{where}.limit_usd", f"expected USD >= 0, got {usd!r}")
    period = item.get("period", "day")
    if period not in PERIODS:
        raise BudgetConfigError(f"{where}.period", f"expected one of {list(PERIODS)}, got {period!r}")
    on_exceed = item.get("on_exceed", "fit")
    if on_exceed not in ON_EXCEED:
        raise BudgetConfigError(f"{where}.on_exceed", f"expected one of {list(ON_EXCEED)}, got {on_exceed!r}")
    user_id, end_user = item.get("user_id"), item.get("end_user")
    if (user_id is None) == (end_user is None):
        raise BudgetConfigError(f"{where}.user_id", "give exactly one of user_id and end_user ('*': each its own)")
    for k, v in (("user_id", user_id), ("end_user", end_user)):
        if v is not None and (not isinstance(v, str) or not v):
            raise BudgetConfigError(f"{where}.{k}", f"expected a non-empty string or '*', got {v!r}")
    return BudgetLimit(name.strip(), float(usd), period, user_id, end_user, on_exceed)


def period_bounds(period: str, now: float) -> tuple[float, float]:
    """The UTC period holding ``now``: (start, end) as Unix times."""
    t = datetime.fromtimestamp(now, tz=timezone.utc)
    if period == "hour":
        start = t.replace(minute=0, second=0, microsecond=0)
        end = start + timedelta(hours=1)
    elif period == "day":
        start = t.replace(hour=0, minute=0, second=0, microsecond=0)
        end = start + timedelta(days=1)
    elif period == "week":
        start = (t - timedelta(days=t.weekday())).replace(hour=0, minute=0, second=0, microsecond=0)
        end = start + timedelta(days=7)
    elif period == "month":
        start = t.replace(day=1, hour=0, minute=0, second=0, microsecond=0)
        end = start + timedelta(days=calendar.monthrange(t.year, t.month)[1])
    else:
        raise ValueError(f"period: one of {PERIODS}, got {period!r}")
    return start.timestamp(), end.timestamp()


def estimate_cost(price_in: float, price_out: float, prompt: str, completion_tokens: int) -> float:
    """USD a call is expected to cost before it is made (prices per 1M tokens)."""
    return (estimate_tokens(prompt) * price_in + completion_tokens * price_out) / 1e6


class BudgetLedger:
    """The accounts: spend per (limit, tenant, period start), kept in a framed, fsynced ledger."""

    def __init__(self, cfg: BudgetConfig, clock: Any = time.time):
        self.cfg = cfg
        self.clock = clock
        self.spent: dict[tuple[str, str, float], float] = {}
        self.charges = 0
        read = read_framed(cfg.path, LEDGER_FORMAT, _is_charge)
        for rec in read.records:
            self._apply(rec)
        self.replayed = {"charges": len(read.records), "skipped": read.skipped, "skipped_at": read.skipped_at}
        self._log = FramedLog(cfg.path, LEDGER_FORMAT)
        self.replayed["torn_tail_bytes"] = self._log.torn_tail

    def _apply(self, rec: dict[str, Any]) -> None:
        for name, tenant, start in rec["accounts"]:
            key = (name, tenant, float(start))
            self.spent[key] = self.spent.get(key, 0.0) + float(rec["usd"])
        self.charges += 1

    def accounts(self, user: str, end_user: str | None, now: float | None = None) -> list[dict[str, Any]]:
        """Every budget this request falls under, with what is spent and left in its current period."""
        now = self.clock() if now is None else now
        out = []
        for lim in self.cfg.limits:
            tenant = lim.tenant(user, end_user)
            if tenant is None:
                continue
            start, end = period_bounds(lim.period, now)
            spent = self.spent.get((lim.name, tenant, start), 0.0)
            out.append({"budget": lim.name, "tenant": tenant, "period": lim.period, "limit_usd": lim.limit_usd,
                        "spent_usd": spent, "remaining_usd": max(0.0, lim.limit_usd - spent),
                        "on_exceed": lim.on_exceed, "period_start": start, "resets_at": end})
        return out

    def check(self, user: str, end_user: str | None, estimates: dict[str, float]) -> dict[str, Any]:
        """Before a decision: ``{"fit", "accounts", "refused"}``. ``fit``: the candidates (of ``estimates``,
        candidate -> estimated USD) whose estimate fits what every ``fit`` budget of this request has left;
        ``refused``: the ``fit`` account that none fits, or an account with nothing left (None: routable)."""
        accounts = self.accounts(user, end_user)
        fit = list(estimates)
        for a in accounts:
            if a["remaining_usd"] <= 0:
                return {"fit": [], "accounts": accounts, "refused": a}
            if a["on_exceed"] == "fit":
                fit = [m for m in fit if estimates[m] <= a["remaining_usd"]]
                if not fit:
                    return {"fit": [], "accounts": accounts, "refused": a}
        return {"fit": fit, "accounts": accounts, "refused": None}

    @staticmethod
    def exceeded(accounts: list[dict[str, Any]], estimate: float) -> dict[str, Any] | None:
        """After a decision: the ``reject`` account that a call estimated at ``estimate`` USD would take over
        its limit (the request is refused, not re-routed), or None."""
        for a in accounts:
            if a["on_exceed"] == "reject" and estimate > a["remaining_usd"]:
                return a
        return None

    def charge(self, user: str, end_user: str | None, usd: float, request_id: str, model: str) -> list[dict[str, Any]]:
        """Add a call's cost to every account this request falls under; on disk (fsync) before it returns.
        Returns the accounts after the charge."""
        if not (isinstance(usd, (int, float)) and math.isfinite(usd) and usd >= 0):
            raise ValueError(f"usd: expected a cost >= 0, got {usd!r}")
        now = self.clock()
        accounts = self.accounts(user, end_user, now)
        if not accounts or usd == 0:
            return accounts
        rec = {"t": now, "request_id": request_id, "model": model, "usd": float(usd),
               "accounts": [[a["budget"], a["tenant"], a["period_start"]] for a in accounts]}
        self._log.append(rec)
        self._apply(rec)
        return self.accounts(user, end_user, now)

    def summary(self) -> dict[str, Any]:
        """Spend of every account in its current period (admins' ``/v1/budgets``, ``/metrics``)."""
        now = self.clock()
        cur = {lim.name: period_bounds(lim.period, now)[0] for lim in self.cfg.limits}
        by = {lim.name: lim for lim in self.cfg.limits}
        rows = [{"budget": n, "tenant": t, "spent_usd": v, "limit_usd": by[n].limit_usd, "period": by[n].period}
                for (n, t, start), v in sorted(self.spent.items()) if n in by and start == cur[n]]
        return {"charges": self.charges, "accounts": rows, "ledger": str(Path(self.cfg.path)), **self.replayed}

    def close(self) -> None:
        self._log.close()


def _is_charge(rec: Any) -> bool:
    return (isinstance(rec, dict) and isinstance(rec.get("usd"), (int, float)) and isinstance(rec.get("accounts"), list)
            and all(isinstance(a, list) and len(a) == 3 for a in rec["accounts"]))
