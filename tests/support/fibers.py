"""Deterministic concurrency for the simulator (tests/support/sim.py): synchronous code that blocks
(an episode calling its engines through RayEngineClient, which waits on `ray.wait` and sleeps on the
sweep's clock) runs in threads that take turns with the simulator, one at a time, and async code (the
engine replicas' EngineHost, its Lane and its lease timer) on an asyncio event loop whose time is the
virtual clock. Nothing runs unless the simulator hands it the turn, so a schedule replays exactly.

- `Fiber`: a thread that runs only while the simulator waits for it (`Fibers.switch`): it runs until it
  blocks (`Fibers.block`: until a reference is ready or a virtual deadline) or ends, and hands the
  turn back. `kill` unwinds it (`Killed`, a BaseException no code under it catches), as a process
  that died.
- `VirtualLoop`: asyncio's loop reading the simulator's clock; `Fibers.pump` runs what is ready on it
  and asks the simulator to pump again at its next timer.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable


class Killed(BaseException):
    """The fiber's process died (its worker crashed, its cluster is gone): it unwinds."""


class VirtualLoop(asyncio.SelectorEventLoop):
    def __init__(self, now: Callable[[], float]):
        super().__init__()
        self._now = now

    def time(self) -> float:
        return self._now()


class Fiber:
    def __init__(self, fibers: Fibers, body: Callable[[], object], done: Callable[[object, BaseException | None], None],
                 owner: object = None):
        self.fibers, self.body, self.done, self.owner = fibers, body, done, owner
        self.turn = threading.Semaphore(0)
        self.token = 0  # the current block's: a wake-up for an earlier one is stale
        self.killed = self.ended = False
        self.thread = threading.Thread(target=self._main, daemon=True, name="sim-fiber")

    def _main(self) -> None:
        self.turn.acquire()
        result, error = None, None
        try:
            result = self.body()
        except Killed:
            pass
        except BaseException as exc:  # noqa: BLE001 - the body's error is its outcome
            error = exc
        self.ended = True
        if not self.killed:
            self.done(result, error)
        self.fibers.baton.release()


class Fibers:
    """The fibers of one simulated cluster and the asyncio loop of its replicas. `at(t, fn)` schedules
    `fn` on the simulator's event queue; `now()` reads its clock."""

    def __init__(self, at: Callable[[float, Callable[[], None]], None], now: Callable[[], float]):
        self.at, self.now = at, now
        self.baton = threading.Semaphore(0)
        self.running: dict[int, Fiber] = {}  # thread id -> fiber
        self.all: list[Fiber] = []
        self.loop = VirtualLoop(now)
        self._pumps: set[float] = set()

    # -- fibers -------------------------------------------------------------------------------------
    def current(self) -> Fiber | None:
        """The fiber this code runs in (None: the simulator's own thread)."""
        return self.running.get(threading.get_ident())

    def spawn(self, body: Callable[[], object], done: Callable[[object, BaseException | None], None],
              owner: object = None) -> Fiber:
        """Start `body` in a fiber now (`owner`: what it runs for); `done(result, error)` once it ends
        (not when killed)."""
        fiber = Fiber(self, body, done, owner)
        self.all.append(fiber)
        fiber.thread.start()
        self.running[fiber.thread.ident] = fiber
        self.switch(fiber)
        return fiber

    def switch(self, fiber: Fiber) -> None:
        """Give `fiber` the turn until it blocks or ends (from the simulator's thread only)."""
        if fiber.ended:
            return
        fiber.turn.release()
        self.baton.acquire()
        if fiber.ended:
            self.running.pop(fiber.thread.ident, None)
            fiber.thread.join()

    def block(self, deadline: float, refs: list) -> None:
        """The current fiber waits until one of `refs` is ready or the clock reaches `deadline`."""
        fiber = self.current()
        if fiber.killed:
            raise Killed
        fiber.token += 1
        token = fiber.token
        for ref in refs:
            ref.waiters.append(lambda: self.at(self.now(), lambda: self.wake(fiber, token)))
        if deadline != float("inf"):
            self.at(deadline, lambda: self.wake(fiber, token))
        self.baton.release()
        fiber.turn.acquire()
        if fiber.killed:
            raise Killed

    def wake(self, fiber: Fiber, token: int) -> None:
        if fiber.token == token and not fiber.ended:
            fiber.token += 1
            self.switch(fiber)

    def kill(self, fiber: Fiber) -> None:
        """Unwind `fiber` now (its process died): it gets the turn and raises Killed where it waits."""
        if not fiber.ended:
            fiber.killed = True
            fiber.token += 1
            self.switch(fiber)

    def close(self) -> None:
        """Kill every fiber still running, and close the loop."""
        for fiber in self.all:
            self.kill(fiber)
        for task in asyncio.all_tasks(self.loop):
            task.cancel()
        self.pump()
        self.loop.close()

    # -- the replicas' event loop ---------------------------------------------------------------------
    def poke(self) -> None:
        """Pump the loop once the simulator's current event is done."""
        self._pump_at(self.now())

    def _pump_at(self, t: float) -> None:
        if t not in self._pumps:
            self._pumps.add(t)
            self.at(t, lambda: self._pumped(t))

    def _pumped(self, t: float) -> None:
        self._pumps.discard(t)
        self.pump()

    def pump(self) -> None:
        """Run every callback ready on the loop (timers due included), then pump again at its next timer."""
        loop = self.loop
        while loop._ready or self._due(loop):
            loop.call_soon(loop.stop)
            loop.run_forever()
        timers = [h.when() for h in loop._scheduled if not h.cancelled()]
        if timers:
            self._pump_at(max(min(timers), self.now()))

    def _due(self, loop) -> bool:
        return any(not h.cancelled() and h.when() <= self.now() for h in loop._scheduled)
