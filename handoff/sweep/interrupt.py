"""Ctrl-C of a sweep, an extension or `handoff follow`: one line saying what was kept and the command
that continues the run, exit status 130, no traceback.

The KeyboardInterrupt unwinds the driver as any exception does: its `finally` stops the engines and
kills the episode workers, and the embedded Ray is shut down on the way out (handoff.sweep.session).
What the run directory holds is safe by construction (finished shards written atomically, finished
episodes of unfinished shards fsynced to partial/), so a resume runs only what is missing.

Python can lose a Ctrl-C: a KeyboardInterrupt raised while the main thread runs a weakref callback or a
`__del__` is printed as "Exception ignored" and dropped, and a follow waiting for its next checkpoint
would then wait for ever. Under `latched_ctrl_c()` (the command's entry points) a Ctrl-C is also
remembered, and the long loops (the driver's dispatch, follow's wait) call `raise_if_pressed()`; the
dropped one is not printed (it is not a traceback of ours).
"""

from __future__ import annotations

import json
import signal
import sys
import threading
from contextlib import contextmanager
from pathlib import Path

from handoff.rundir import RunPaths

INTERRUPTED_STATUS = 130  # 128 + SIGINT, as a shell reports a command ended by Ctrl-C


class Interrupted(KeyboardInterrupt):
    """A KeyboardInterrupt that knows the run it stopped and the command that continues it."""

    def __init__(self, run_root: Path | str, command: str):
        super().__init__(str(run_root))
        self.run_root, self.command = Path(run_root), command


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


def resume_command(run_root: Path | str) -> str:
    return f"handoff sweep resume={run_root}"


def kept_episodes(run: RunPaths) -> tuple[int, int]:
    """(finished shards, episodes of unfinished shards in partial/) that a resume will not redo."""
    partial = 0
    for path in run.partial_dir.glob("*.jsonl"):
        for line in path.read_bytes().splitlines():
            try:
                partial += bool(line.strip()) and isinstance(json.loads(line), dict)
            except ValueError:  # a line torn by the interruption is not kept
                continue
    return len(run.shards()), partial


def interrupted_line(exc: KeyboardInterrupt) -> str:
    """The one line printed for a Ctrl-C."""
    if not isinstance(exc, Interrupted):
        return "interrupted before the sweep started: nothing new ran"
    shards, partial = kept_episodes(RunPaths(exc.run_root))
    return (f"interrupted: kept {shards} finished shard(s) and {partial} episode(s) of unfinished ones in "
            f"{exc.run_root}; continue with: {exc.command}")
