"""A Ctrl-C that Python drops still stops a follow and a sweep (handoff.ctrl_c).

Python raises a Ctrl-C's KeyboardInterrupt wherever the main thread is; inside a weakref callback or a
`__del__` it is printed as "Exception ignored" and lost. CI saw it: a follow, SIGINT'd while waiting
for its next checkpoint, printed that traceback from weakref.py and waited on until the test's 300 s
deadline. Here the SIGINT is delivered inside a `__del__`, so that Python drops it every time."""

from __future__ import annotations

import signal
import sys
import threading

import pytest

from handoff.ctrl_c import latched_ctrl_c, raise_if_pressed


class _DiesPressingCtrlC:
    def __del__(self):
        signal.pthread_kill(threading.main_thread().ident, signal.SIGINT)
        for _ in range(100_000):  # the handler runs here, inside __del__, and its exception is dropped
            pass


def press_ctrl_c_where_python_drops_it() -> None:
    _DiesPressingCtrlC()  # returns: the KeyboardInterrupt raised in __del__ was dropped


def test_a_dropped_ctrl_c_is_raised_at_the_next_check_unprinted_and_forgotten_after_the_block(monkeypatch):
    printed: list = []  # what Python's hook would print as "Exception ignored in: ..."
    monkeypatch.setattr(sys, "unraisablehook", lambda info: printed.append(info.exc_type))
    with latched_ctrl_c():
        raise_if_pressed()  # nothing pressed yet
        press_ctrl_c_where_python_drops_it()
        for _ in range(2):  # every check raises until the command ends
            with pytest.raises(KeyboardInterrupt):
                raise_if_pressed()
    assert printed == []
    raise_if_pressed()
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    press_ctrl_c_where_python_drops_it()  # unlatched: dropped, printed and forgotten
    assert printed == [KeyboardInterrupt]
    raise_if_pressed()


class _Watcher:
    """follow's watcher with no checkpoint ever arriving; the Ctrl-C is pressed during its first wait."""

    def __init__(self):
        self.waits = 0
        self.arrived = self

    def snapshot(self) -> dict:
        return {}

    def wait(self, timeout: float) -> bool:
        self.waits += 1
        assert self.waits < 5, "follow went on waiting for a checkpoint after a Ctrl-C"
        if self.waits == 1:
            press_ctrl_c_where_python_drops_it()
        return False


def test_follow_waiting_for_a_checkpoint_stops_on_a_dropped_ctrl_c(tmp_path):
    from handoff.sweep.follow import Stop, _loop
    from handoff.sweep.rundir import SweepRun

    watcher = _Watcher()
    with latched_ctrl_c(), pytest.raises(KeyboardInterrupt):
        _loop(SweepRun(tmp_path / "run"), [], watcher, Stop(until_step=100), poll_s=0.01)
    assert watcher.waits == 1


def test_a_sweeps_dispatch_stops_on_a_dropped_ctrl_c(monkeypatch):
    """On the dispatch simulator (tests/support/sim.py): the Ctrl-C is dropped as the first episode
    ends; the driver raises before it dispatches more, as it does for a Ctrl-C Python delivers."""
    from handoff.sweep.driver import Driver
    from tests.support import sim
    from tests.sweep.test_sim import _schedule

    release, released = Driver._release, []

    def release_pressing_ctrl_c(self, item):
        released.append(item)
        if len(released) == 1:
            press_ctrl_c_where_python_drops_it()
        return release(self, item)

    monkeypatch.setattr(Driver, "_release", release_pressing_ctrl_c)
    sched = _schedule([10, 20, 30, 40], workers=1)
    with latched_ctrl_c(), pytest.raises(KeyboardInterrupt):
        sim.run(0, sched=sched)
    assert len(released) == 1  # no episode ended after the Ctrl-C
