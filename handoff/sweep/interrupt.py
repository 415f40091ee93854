"""Ctrl-C of a sweep, an extension or `handoff follow`: one line saying what was kept and the command
that continues the run, exit status 130, no traceback.

The KeyboardInterrupt unwinds the driver as any exception does: its `finally` stops the engines and
kills the episode workers, and the embedded Ray is shut down on the way out (handoff.sweep.session).
What the run directory holds is safe by construction (finished shards written atomically, finished
episodes of unfinished shards fsynced to partial/), so a resume runs only what is missing.

A Ctrl-C that Python drops is remembered all the same (handoff.ctrl_c).
"""

from __future__ import annotations

import json
from pathlib import Path

from handoff.rundir import RunPaths

INTERRUPTED_STATUS = 130  # 128 + SIGINT, as a shell reports a command ended by Ctrl-C


class Interrupted(KeyboardInterrupt):
    """A KeyboardInterrupt that knows the run it stopped and the command that continues it."""

    def __init__(self, run_root: Path | str, command: str):
        super().__init__(str(run_root))
        self.run_root, self.command = Path(run_root), command


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
