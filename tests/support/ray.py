"""Real faults on a real local Ray cluster: find this test's Ray actor processes and SIGKILL them
once a run has recorded enough episodes."""

from __future__ import annotations

import signal
import threading
import time
from pathlib import Path

import psutil

from handoff.records import read_shard_header
from handoff.rundir import RunPaths


def ray_processes(title: str) -> list[psutil.Process]:
    """This test's Ray actor processes of one class (children of the cluster it started)."""
    return processes(f"ray::{title}")


def processes(title: str) -> list[psutil.Process]:
    """This test's processes whose title starts with `title` (descendants of this process)."""
    found = []
    for p in psutil.Process().children(recursive=True):
        try:
            if p.cmdline() and p.cmdline()[0].startswith(title):
                found.append(p)
        except psutil.Error:
            continue
    return found


def recorded(run_dir: Path) -> int:
    """Finished episodes so far: in partial shards and in complete ones."""
    partial = sum(1 for p in RunPaths(run_dir).partial_dir.glob("*.jsonl") for line in p.read_bytes().splitlines() if line)
    return partial + sum(read_shard_header(p)["n"] for p in RunPaths(run_dir).shards_dir.glob("*.jsonl"))


def kill_mid_run(run_dir: Path, plan: list[tuple[int, str]], killed: list, timeout: float = 900,
                 find=ray_processes) -> threading.Thread:
    """In the background: for each (n, title) of `plan` in turn, once the run has finished n
    episodes, SIGKILL every process `find(title)` returns (default: every `ray::<title>` process);
    `killed` gets (episodes done, title, pids)."""

    def watch():
        deadline = time.monotonic() + timeout
        for n, title in plan:
            while time.monotonic() < deadline:
                done = recorded(run_dir) if run_dir.exists() else 0
                victims = find(title) if done >= n else []
                if victims:
                    for p in victims:
                        p.send_signal(signal.SIGKILL)
                    killed.append((done, title, [p.pid for p in victims]))
                    break
                time.sleep(0.2)

    thread = threading.Thread(target=watch, daemon=True)
    thread.start()
    return thread
