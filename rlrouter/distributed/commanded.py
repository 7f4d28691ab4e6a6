"""Long-lived Ray Train ranks that the job's driver commands, one call at a time.

verl's ``RayPPOTrainer.fit`` drives its worker groups from one controller. Ray Train owns its
workers (gloo/NCCL process group, ``FailureConfig`` restarts, checkpoints), so the ranks here run
``serve_commands`` inside ``train_loop_per_worker`` and the driver reaches them through a mailbox
actor:

    driver                            mailbox actor                 rank r (Ray Train worker)
    CommandedWorkers.call(args) -> submit(gen, seq, args)  <- next(r, gen, seq) -> handler(*args[r])
                                <- collect(gen, seq)       <- done(r, gen, seq, result)

``trainer.fit()`` runs in a driver thread (Ray Train supports a non-main thread; Tune does it).

A rank that dies makes Ray Train restart the whole group from the last reported checkpoint. The
new ranks agree on a fresh generation token (broadcast from rank 0) and join the mailbox with it;
the pending call then raises ``WorkersRestarted`` with what the ranks restored, and the driver
redoes its work from there. If the restarts are used up, ``fit`` fails and the call raises.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
import uuid
from typing import Any, Callable

log = logging.getLogger(__name__)

STOP = "__stop__"


class WorkersRestarted(RuntimeError):
    """The rank group restarted (Ray Train FailureConfig) while a call was pending."""

    def __init__(self, infos: list[Any]):
        super().__init__("learner ranks restarted from their last checkpoint")
        self.infos = infos


class WorkersFailed(RuntimeError):
    """The Ray Train run ended (failed past max_failures, or stopped) while the driver waited on it."""


class Mailbox:
    """Async actor: the current command of the current generation and the ranks' answers to it."""

    def __init__(self, world_size: int):
        self.world = world_size
        self.gen: str | None = None
        self.joined: dict[int, Any] = {}
        self.cmd: tuple[int, list[Any]] | None = None  # (seq, per-rank args)
        self.results: dict[int, Any] = {}
        self._cond: asyncio.Condition | None = None

    def _c(self) -> asyncio.Condition:
        if self._cond is None:
            self._cond = asyncio.Condition()
        return self._cond

    async def join(self, rank: int, gen: str, info: Any) -> None:
        async with self._c():
            if gen != self.gen:
                # a new group: whatever the old one was doing is void
                self.gen, self.joined, self.cmd, self.results = gen, {}, None, {}
            self.joined[rank] = info
            self._c().notify_all()

    async def wait_ready(self, timeout_s: float) -> tuple[str, list[Any]] | None:
        """The generation whose ranks all joined, with their infos by rank; None on timeout."""
        async with self._c():
            try:
                await asyncio.wait_for(self._c().wait_for(lambda: len(self.joined) == self.world), timeout_s)
            except asyncio.TimeoutError:
                return None
            return self.gen, [self.joined[r] for r in range(self.world)]

    async def submit(self, gen: str, seq: int, args: list[Any]) -> bool:
        async with self._c():
            if gen != self.gen:
                return False
            self.cmd, self.results = (seq, args), {}
            self._c().notify_all()
            return True

    async def next(self, rank: int, gen: str, after: int, timeout_s: float = 30.0) -> tuple[int, Any] | None:
        """The next command for ``rank`` (seq, args); None when there is none yet (ask again)."""
        def ready() -> bool:
            return gen != self.gen or (self.cmd is not None and self.cmd[0] > after)

        async with self._c():
            try:
                await asyncio.wait_for(self._c().wait_for(ready), timeout_s)
            except asyncio.TimeoutError:
                return None
            if gen != self.gen:
                return (-1, STOP)  # superseded: Ray Train is replacing this group
            seq, args = self.cmd
            return seq, args[rank]

    async def done(self, rank: int, gen: str, seq: int, result: Any) -> None:
        async with self._c():
            if gen == self.gen and self.cmd is not None and self.cmd[0] == seq:
                self.results[rank] = result
                self._c().notify_all()

    async def collect(self, gen: str, seq: int, timeout_s: float) -> tuple[str, Any]:
        """("done", results by rank) | ("restarted", None) | ("pending", None) after ``timeout_s``."""
        def ready() -> bool:
            return gen != self.gen or len(self.results) == self.world

        async with self._c():
            try:
                await asyncio.wait_for(self._c().wait_for(ready), timeout_s)
            except asyncio.TimeoutError:
                return "pending", None
            if gen != self.gen:
                return "restarted", None
            return "done", [self.results[r] for r in range(self.world)]


def serve_commands(mailbox: Any, rank: int, info: Any, handler: Callable[..., Any]) -> None:
    """A rank's command loop: join the mailbox, then run ``handler(*args)`` for each command addressed
    to it (``None`` args: nothing to do this time) until the driver sends ``STOP``."""
    import ray

    gen = _generation_token()
    ray.get(mailbox.join.remote(rank, gen, info))
    seq = 0
    while True:
        msg = ray.get(mailbox.next.remote(rank, gen, seq))
        if msg is None:
            continue
        seq, args = msg
        if args == STOP:
            return
        result = None if args is None else handler(*args)
        ray.get(mailbox.done.remote(rank, gen, seq, result))


def _generation_token() -> str:
    """One token per rank group, the same on every rank of it (rank 0 draws, Ray Train broadcasts)."""
    from ray.train.collective import broadcast_from_rank_zero

    return broadcast_from_rank_zero(uuid.uuid4().hex)


class CommandedWorkers:
    """Driver side: start ``trainer`` (whose ranks run ``serve_commands``) in a thread; ``call`` them."""

    def __init__(self, make_trainer: Callable[[Any], Any], world_size: int, poll_s: float = 5.0):
        import ray

        self._ray = ray
        self.world_size = world_size
        self.poll_s = poll_s
        self.mailbox = ray.remote(num_cpus=0)(Mailbox).remote(world_size)
        self.trainer = make_trainer(self.mailbox)
        self.result: Any = None
        self.error: BaseException | None = None
        self._thread = threading.Thread(target=self._fit, name="ray-train-fit", daemon=True)
        self._thread.start()
        self.gen: str | None = None
        self.seq = 0

    def _fit(self) -> None:
        try:
            self.result = self.trainer.fit()
        except BaseException as e:  # noqa: BLE001 - handed to the driver's next call
            self.error = e

    def _check_alive(self) -> None:
        if not self._thread.is_alive():
            raise WorkersFailed(f"the Ray Train run ended: {self.error or 'stopped'}") from self.error

    def wait_ready(self, timeout_s: float = 1800.0) -> list[Any]:
        """Block until every rank of the current group joined; their ``info`` by rank."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            got = self._ray.get(self.mailbox.wait_ready.remote(self.poll_s))
            if got is not None:
                self.gen, infos = got
                return infos
            self._check_alive()
        raise TimeoutError(f"learner ranks not ready within {timeout_s:.0f}s")

    def call(self, args: list[Any]) -> list[Any]:
        """Send ``args[r]`` (a tuple for the handler, or None) to each rank r; their results by rank.
        Raises ``WorkersRestarted`` if the group restarted meanwhile (call ``wait_ready`` again)."""
        if len(args) != self.world_size:
            raise ValueError(f"call: {len(args)} argument sets for {self.world_size} ranks")
        self.seq += 1
        if not self._ray.get(self.mailbox.submit.remote(self.gen, self.seq, args)):
            raise WorkersRestarted(self.wait_ready())
        while True:
            state, results = self._ray.get(self.mailbox.collect.remote(self.gen, self.seq, self.poll_s))
            if state == "done":
                return results
            if state == "restarted":
                log.warning("learner ranks restarted (Ray Train FailureConfig); waiting for the new group")
                raise WorkersRestarted(self.wait_ready())
            self._check_alive()

    def stop(self, timeout_s: float = 300.0) -> Any:
        """Let the ranks return; the Ray Train ``Result``."""
        if self._thread.is_alive() and self.gen is not None:
            self.seq += 1
            self._ray.get(self.mailbox.submit.remote(self.gen, self.seq, [STOP] * self.world_size))
        self._thread.join(timeout_s)
        try:
            self._ray.kill(self.mailbox)
        except Exception:  # noqa: BLE001 - already gone
            pass
        if self.error is not None:
            raise WorkersFailed(f"the Ray Train run failed: {self.error}") from self.error
        return self.result
