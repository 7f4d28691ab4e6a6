"""The process that holds the selector's state: load, autosave, ordered durable feedback, final save.

:class:`SelectorHost` is what the Serve app's one selector replica wraps (serve/app.py), whether that
replica answers HTTP itself (``serving.selector_in_ingress``, no actor hop on ``/route``, for
latency) or is called by a separate ingress through its handle. No Ray imports: metrics arrive as an
``on_result`` callback.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from typing import Any

from rlrouter.selector import Selector, SelectorConfig
from rlrouter.serving.budgets import BudgetConfig, BudgetLedger
from rlrouter.serving.selector_client import run_selector_call, unwrap


BUDGET_METHODS = ("budget_check", "budget_charge", "budget_accounts", "budget_summary")


class SelectorHost:
    def __init__(self, selector: Selector, on_result: Callable[[str, tuple], None] | None = None,
                 budgets: BudgetConfig | None = None):
        """Loads the snapshot + write-ahead log now (a corrupt or foreign file raises, after being moved
        aside) and starts the autosave thread; ``on_result(method, envelope)`` sees every call's result.
        ``budgets``: the spend limits, whose ledger (``rlrouter.serving.budgets``) this one process keeps."""
        self.selector = selector
        self.selector.load()
        self.budgets = BudgetLedger(budgets) if budgets is not None and budgets.enabled else None
        self._on_result = on_result
        self._budget_lock = threading.Lock()
        self._stop = threading.Event()
        self._saver = threading.Thread(target=self._autosave, name="selector-autosave", daemon=True)
        self._saver.start()

    def _autosave(self) -> None:
        period = max(0.05, min(1.0, self.selector.config.auto_save_interval / 4 or 1.0))
        while not self._stop.wait(period):
            try:
                self.selector.maybe_save()
            except OSError:
                pass  # retried next period; feedback stays durable through the write-ahead log

    async def run(self, method: str, kwargs: dict[str, Any]) -> tuple:
        """One selector call as an envelope (``run_selector_call``), for callers across a Ray boundary."""
        if method in BUDGET_METHODS:
            r = (await asyncio.to_thread(self._budget, method, kwargs) if method == "budget_charge"  # fsync
                 else self._budget(method, kwargs))
        elif method == "feedback":
            # the write-ahead-log fsync runs off the event loop; the selector's lock orders updates, and
            # the envelope (hence the 200) comes back only after the fsync
            r = await asyncio.to_thread(run_selector_call, self.selector, method, kwargs)
        else:
            r = run_selector_call(self.selector, method, kwargs)
        if self._on_result is not None:
            self._on_result(method, r)
        return r

    def _budget(self, method: str, kwargs: dict[str, Any]) -> tuple:
        """A budget ledger call as an envelope (one thread at a time: the ledger is this lock's)."""
        led = self.budgets
        if led is None:
            return ("error", 500, "budgets", "serving.budgets has no limits on this server")
        try:
            with self._budget_lock:
                if method == "budget_check":
                    return ("ok", led.check(kwargs["user"], kwargs.get("end_user"), kwargs["estimates"]))
                if method == "budget_charge":
                    return ("ok", led.charge(kwargs["user"], kwargs.get("end_user"), kwargs["usd"],
                                             kwargs["request_id"], kwargs["model"]))
                if method == "budget_accounts":
                    return ("ok", led.accounts(kwargs["user"], kwargs.get("end_user")))
                return ("ok", led.summary())
        except (KeyError, ValueError) as e:
            return ("error", 422, "budgets", f"budget call {method}: {e}")

    async def call(self, method: str, **kwargs: Any) -> Any:
        """The service's :class:`~rlrouter.serving.service.SelectorClient` interface, in process."""
        return unwrap(await self.run(method, kwargs))

    def reconfigure(self, user_config: dict[str, Any] | None) -> None:
        """Runtime knobs (exploration, blends, weights); the storage path cannot change at run time."""
        cfg = self.selector.config.to_dict()
        for k in ("storage_path",):
            if k in (user_config or {}) and user_config[k] != cfg[k]:
                raise ValueError(f"user_config.{k}: cannot change while running")
        cfg.update(user_config or {})
        self.selector.config = SelectorConfig.from_dict(cfg)

    def close(self) -> None:
        """Stop the autosave thread and save once more (best effort: the log already holds every ack)."""
        self._stop.set()
        if self.budgets is not None:
            self.budgets.close()
        try:
            self.selector.close()
        except Exception:  # noqa: BLE001 - at shutdown; every acknowledged update is in the log
            pass
