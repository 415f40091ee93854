"""Where a sweep's output goes (docs/sweep.md, "What the terminal shows").

The terminal (and so a Ray Job's log or a SLURM log) gets what the user needs: the plan, the
progress, warnings about the inputs, errors with their tracebacks, and where the results are. The
engines', the workers' and the libraries' own logs (vLLM, torch, Ray) go to files in <run>/logs/,
one per actor process; `verbose=true` leaves them on the terminal, as they were before.

An actor process sends its file descriptors 1 and 2 (print, Python logging, C++ libraries, child
processes such as vLLM's engine core) to its log file and keeps a stream to its original stderr,
which Ray forwards to the driver's terminal: what must reach the user (an engine's failure with its
traceback) is written there as well.
"""

from __future__ import annotations

import logging
import os
import re
import socket
import sys
from pathlib import Path
from typing import TextIO

LOGS = "logs"
TAIL_LINES = 40  # of an actor's log, shown on the terminal with its failure
TRACEBACK_LINES = 6  # of a failed shard's innermost traceback, on the terminal from the driver (more: failed/<id>.json)
_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
_TRACEBACK = "Traceback (most recent call last):"
# Ray writes a remote traceback's header as the actor's call: "ray::EngineHost.generate() (pid=..., ...)"
_TRACEBACK_START = re.compile(r"^Traceback \(most recent call last\):|ray::\S+\(\) \(pid=[^\n]*", re.MULTILINE)
_IDS = re.compile(r"[0-9a-f]{8,}")


def plain(text: str) -> str:
    """`text` without terminal colour codes (Ray colours the actor names in its errors)."""
    return _ANSI.sub("", text)


def traceback_excerpt(error: str, lines: int = TRACEBACK_LINES) -> str | None:
    """The innermost traceback in `error` (an episode's error as the driver records it, which for an
    actor's failure holds the remote tracebacks, each headed by Ray with the actor's call), cut to its
    last `lines` lines; None when it has none."""
    text = plain(error)
    starts = list(_TRACEBACK_START.finditer(text))
    if not starts:
        return None
    where = starts[-1].group(0)
    head = _TRACEBACK if where == _TRACEBACK else f"{_TRACEBACK[:-1]}, in {where}:"
    body = text[starts[-1].end():].strip("\n").splitlines()
    cut = ["  ..."] if len(body) > lines else []
    return "\n".join([head, *cut, *body[-lines:]])


def error_key(error: str) -> str:
    """What tells one error from another: its last line, without ids (a request's uuid, an actor's)."""
    last = plain(error).strip().splitlines()
    return _IDS.sub("…", last[-1]) if last else ""


def log_dir(run_root: str | Path, verbose: bool) -> str | None:
    """The directory actors log into; None (the terminal) when verbose."""
    return None if verbose else str(Path(run_root).resolve() / LOGS)


class ActorOutput:
    """An actor process's output: `terminal` reaches the driver's terminal (and a Ray Job's log);
    everything else the process writes goes to `path` (None: verbose, all on the terminal)."""

    def __init__(self, directory: str | None, name: str):
        self.name, self.path = name, None
        self.terminal: TextIO = sys.stderr
        self._seen: set[str] = set()
        self.to(directory)
        _log_to_stderr()

    def to(self, directory: str | None) -> None:
        """Log into `directory` from now on (None: the terminal); an episode worker moves on with
        the sweeps it serves."""
        # by host and pid: on a cluster's shared file system two nodes' processes may share a pid
        path = None if directory is None else Path(directory) / f"{self.name}-{socket.gethostname()}-{os.getpid()}.log"
        if path == self.path:
            return
        if path is None:
            self._restore()
        else:
            self._redirect(path)

    def _redirect(self, path: Path) -> None:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        except OSError as exc:  # e.g. a node that does not see the run directory
            self._restore()
            print(f"cannot log to {path} ({exc}); this process logs to the terminal", file=sys.stderr, flush=True)
            return
        sys.stdout.flush()
        sys.stderr.flush()
        if self.path is None:  # keep the original stdout and stderr
            self._stdout, self.terminal = os.dup(1), os.fdopen(os.dup(2), "w", buffering=1)
        os.dup2(fd, 1)
        os.dup2(fd, 2)
        os.close(fd)
        self.path = path

    def _restore(self) -> None:
        """Fds 1 and 2 back to the original ones, which Ray forwards to the terminal."""
        if self.path is None:
            return
        sys.stdout.flush()
        sys.stderr.flush()
        os.dup2(self._stdout, 1)
        os.dup2(self.terminal.fileno(), 2)
        self.path = None

    def say(self, line: str) -> None:
        """One line on the terminal (and in the log file)."""
        print(line, file=self.terminal, flush=True)
        if self.path is not None:
            print(line, file=sys.stderr, flush=True)

    def failure(self, what: str, formatted: str) -> None:
        """An error with its traceback on the terminal, after the end of this process's log (where a
        library's own account of it is, e.g. vLLM's engine core's); a repeat of the same error is
        one line."""
        key = formatted.strip().splitlines()[-1] if formatted.strip() else what
        if key in self._seen:
            self.say(f"{what}: {key}")
            return
        self._seen.add(key)
        if self.path is None:
            print(f"{what}\n{formatted}", file=self.terminal, flush=True)
            return
        tail = self.path.read_text(errors="replace").splitlines()[-TAIL_LINES:]
        print(formatted, file=sys.stderr, flush=True)
        head = (f"{what}. The last {len(tail)} lines of {self.path} before it:\n" + "".join(f"  {ln}\n" for ln in tail)
                if tail else f"{what} (its log: {self.path}):\n")
        self.terminal.write(head + formatted.rstrip("\n") + "\n")
        self.terminal.flush()


def _log_to_stderr() -> None:
    """handoff's own log records (e.g. the engine's dtype choice) to stderr: the log file, or the
    terminal when verbose."""
    logger = logging.getLogger("handoff")
    if not logger.handlers:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
        logger.addHandler(handler)
        logger.setLevel(logging.INFO)
