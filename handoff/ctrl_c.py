"""Ctrl-C remembered, for the commands' long loops.

Python can lose a Ctrl-C: a KeyboardInterrupt raised while the main thread runs a weakref callback or a
`__del__` is printed as "Exception ignored" and dropped, and a follow waiting for its next checkpoint
would then wait for ever. Under `latched_ctrl_c()` (the commands' entry points) a Ctrl-C is also
remembered, and the long loops (the driver's dispatch, follow's wait) call `raise_if_pressed()`; the
dropped one is not printed (it is not a traceback of ours). Standard library only: every `handoff`
command enters it.
"""

from __future__ import annotations

import signal
import sys
import threading
from contextlib import contextmanager

_pressed = threading.Event()


def _on_sigint(signum, frame) -> None:
    _pressed.set()
    signal.default_int_handler(signum, frame)  # raises KeyboardInterrupt, where Python can drop it


@contextmanager
def latched_ctrl_c():
    """Remember a Ctrl-C until the block ends (a no-op off the main thread, or inside another)."""
    if threading.current_thread() is not threading.main_thread() or signal.getsignal(signal.SIGINT) is _on_sigint:
        yield
        return
    previous, previous_hook = signal.signal(signal.SIGINT, _on_sigint), sys.unraisablehook

    def unraisable(info) -> None:
        if not (_pressed.is_set() and issubclass(info.exc_type, KeyboardInterrupt)):
            previous_hook(info)

    _pressed.clear()
    sys.unraisablehook = unraisable
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
        sys.unraisablehook = previous_hook
        _pressed.clear()


def raise_if_pressed() -> None:
    """Raise the KeyboardInterrupt of a Ctrl-C pressed under latched_ctrl_c(), even one Python dropped."""
    if _pressed.is_set():
        raise KeyboardInterrupt
