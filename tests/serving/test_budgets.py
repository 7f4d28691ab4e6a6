"""Spend budgets (rlrouter.serving.budgets): the config's errors, the periods, the accounts' rules, and the
ledger across a real ``kill -9`` of the process that charges it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from datetime import datetime, timezone

import pytest

from rlrouter.serving.budgets import BudgetConfig, BudgetLedger, period_bounds
from rlrouter.serving.config import ServingConfig, ServingConfigError


def _cfg(tmp_path, *limits, **kw) -> BudgetConfig:
    return BudgetConfig.from_dict({"limits": list(limits), "path": str(tmp_path / "spend.log"), **kw})


@pytest.mark.parametrize("budgets, field", [
    ({"limits": [{"name": "a", "limit_usd": -1, "user_id": "u"}]}, "budgets.limits[0].limit_usd"),
    ({"limits": [{"name": "a", "limit_usd": "5", "user_id": "u"}]}, "budgets.limits[0].limit_usd"),
    ({"limits": [{"name": "a", "limit_usd": 1, "user_id": "u", "period": "fortnight"}]}, "budgets.limits[0].period"),
    ({"limits": [{"name": "a", "limit_usd": 1}]}, "budgets.limits[0].user_id"),
    ({"limits": [{"name": "a", "limit_usd": 1, "user_id": "u", "end_user": "t"}]}, "budgets.limits[0].user_id"),
    ({"limits": [{"name": "a", "limit_usd": 1, "user_id": "u", "on_exceed": "warn"}]}, "budgets.limits[0].on_exceed"),
    ({"limits": [{"name": "a", "limit_usd": 1, "user_id": "u", "cap": 2}]}, "budgets.limits[0].cap"),
    ({"limits": [{"name": "a", "limit_usd": 1, "user_id": "u"}, {"name": "a", "limit_usd": 2, "user_id": "v"}]},
     "budgets.limits[1].name"),
    ({"limits": {"name": "a"}}, "budgets.limits"),
    ({"limit": []}, "budgets.limit"),
    ({"limits": [], "completion_tokens": -5}, "budgets.completion_tokens"),
])
def test_a_malformed_budget_is_refused_naming_its_field(budgets, field):
    with pytest.raises(ServingConfigError) as e:
        ServingConfig.from_dict({"budgets": budgets})
    assert e.value.field == field, str(e.value)


def test_periods_are_utc_hours_days_weeks_from_monday_and_months():
    t = datetime(2026, 2, 18, 15, 42, tzinfo=timezone.utc).timestamp()  # a Wednesday
    iso = {p: tuple(datetime.fromtimestamp(x, tz=timezone.utc).isoformat()[:16] for x in period_bounds(p, t))
           for p in ("hour", "day", "week", "month")}
    assert iso == {"hour": ("2026-02-18T15:00", "2026-02-18T16:00"), "day": ("2026-02-18T00:00", "2026-02-19T00:00"),
                   "week": ("2026-02-16T00:00", "2026-02-23T00:00"), "month": ("2026-02-01T00:00", "2026-03-01T00:00")}


def test_fit_leaves_the_candidates_that_fit_and_reject_refuses_after_the_decision(tmp_path):
    now = [1_000_000.0]
    led = BudgetLedger(_cfg(tmp_path, {"name": "alice-day", "limit_usd": 1.0, "user_id": "alice"},
                            {"name": "tags", "limit_usd": 0.5, "end_user": "*", "on_exceed": "reject"}),
                       clock=lambda: now[0])
    est = {"big": 0.6, "small": 0.1}
    chk = led.check("alice", None, est)
    assert chk["fit"] == ["big", "small"] and chk["refused"] is None and [a["budget"] for a in chk["accounts"]] == ["alice-day"]
    led.charge("alice", None, 0.6, "r1", "big")
    assert led.check("alice", None, est)["fit"] == ["small"]  # 0.4 left: only the small one fits
    # a tag's account is its caller's own, and a reject budget does not narrow the choice
    chk = led.check("alice", "team-a", est)
    assert chk["fit"] == ["small"] and {a["tenant"] for a in chk["accounts"]} == {"user:alice", "end_user:alice:team-a"}
    assert led.exceeded(chk["accounts"], 0.1) is None
    led.charge("alice", "team-a", 0.35, "r2", "small")
    over = led.exceeded(led.check("alice", "team-a", {"small": 0.1})["accounts"], 0.2)
    assert over["budget"] == "tags" and over["remaining_usd"] == pytest.approx(0.15)
    assert led.check("bob", "team-a", est)["accounts"][0]["spent_usd"] == 0.0  # bob's team-a is another account
    led.charge("alice", None, 0.05, "r3", "small")  # alice-day: 0.6 + 0.35 + 0.05 = 1.0, nothing left
    assert led.check("alice", None, est)["refused"]["budget"] == "alice-day"
    now[0] += 86_400  # the next day: a new period
    assert led.check("alice", None, est)["refused"] is None
    led.close()
    again = BudgetLedger(led.cfg, clock=lambda: 1_000_000.0)  # read back from the ledger
    assert again.check("alice", None, est)["refused"]["budget"] == "alice-day" and again.replayed["charges"] == 3


CHARGER = textwrap.dedent("""
    import sys
    from rlrouter.serving.budgets import BudgetConfig, BudgetLedger
    led = BudgetLedger(BudgetConfig.from_dict({"limits": [{"name": "b", "limit_usd": 1e9, "user_id": "*"}],
                                               "path": sys.argv[1]}))
    i = 0
    while True:
        led.charge("u", None, 0.001, f"r{i}", "m")
        print(i, flush=True)  # acknowledged: the charge is on disk
        i += 1
""")


def test_kill_9_while_charging_loses_no_acknowledged_spend(tmp_path):
    path = tmp_path / "spend.log"
    p = subprocess.Popen([sys.executable, "-c", CHARGER, str(path)], stdout=subprocess.PIPE, text=True,
                         env={**os.environ, "PYTHONPATH": os.getcwd()})
    acked = -1
    for line in p.stdout:
        acked = int(line)
        if acked >= 300:
            break
    os.kill(p.pid, signal.SIGKILL)
    p.wait()
    with open(path, "ab") as f:  # and a torn line, as a crash mid-append leaves one
        f.write(b'{"f":"rlrouter.spend","crc":1,"bo')
    led = BudgetLedger(_cfg(tmp_path, {"name": "b", "limit_usd": 1e9, "user_id": "*"}))
    spent = led.accounts("u", None)[0]["spent_usd"]
    assert led.replayed["charges"] >= acked + 1 and led.replayed["torn_tail_bytes"] > 0
    assert spent == pytest.approx(0.001 * led.replayed["charges"])
    led.charge("u", None, 0.001, "after", "m")  # the next line does not land on the torn one
    led.close()
    assert BudgetLedger(led.cfg).replayed["skipped"] == 0
