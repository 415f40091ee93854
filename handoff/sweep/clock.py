"""The clock the sweep's timers read and wait on (the driver's outage clocks and episode timeouts, the
rolling schedule's load timeouts, the engine client's request deadlines, the engine host's admission
times). The real one is `time`'s; the deterministic simulator (tests/support/sim.py) puts a virtual one
in its place with `use`, so that a fault schedule runs the real dispatch code in milliseconds, never
sleeping."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from typing import Protocol


class Clock(Protocol):
    def monotonic(self) -> float: ...

    def sleep(self, seconds: float) -> None: ...


class SystemClock:
    """time.monotonic and time.sleep (looked up at each call: a test that patches them is obeyed)."""

    def monotonic(self) -> float:
        return time.monotonic()

    def sleep(self, seconds: float) -> None:
        time.sleep(seconds)


_clock: Clock = SystemClock()


def monotonic() -> float:
    return _clock.monotonic()


def sleep(seconds: float) -> None:
    _clock.sleep(seconds)


@contextlib.contextmanager
def use(clock: Clock) -> Iterator[Clock]:
    """`clock` in place of the system's until the block ends (one at a time: the simulator's)."""
    global _clock
    held, _clock = _clock, clock
    try:
        yield clock
    finally:
        _clock = held
