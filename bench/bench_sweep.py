"""The default `make sweep` end to end, as a user runs it: wall time, CPU seconds per process kind, the
lines its terminal shows, the load average around it, and the CPU model and flags.

Each run is `python -m handoff.sweep <overrides> run_dir=<tmp>` in a fresh process, in a pseudo-terminal
(as a user's terminal; `--no-tty` pipes it to a file as a Ray Job or SLURM log would). Measured:

- `wall_s` (start of the process to its exit) and `sweep_s` (the sweep's own "N/N episodes in Ts");
- `cpu_s` by process kind (the vLLM engine core, the engine actor, episode workers, the driver, Ray's
  daemons), sampled from the process tree every second (a process's last sample before it exits);
- `terminal_lines`: lines written (a progress bar redrawn in place with carriage returns is one line;
  `carriage_returns` counts the redraws);
- the run's engine counters where the sweep wrote them (<run>/logs/engines.json: requests, prompt,
  cached and generated tokens per checkpoint and role, prefix-cache hits per turn);
- `load_average` at the start and end, and its mean over the run (other work on the machine slows
  every wall-clock figure: they are upper bounds under load).

`--emulate avx2` runs under bench/emulate/avx2 (an AVX2-only CPU approximated on an AVX-512 one).
`--profile SECONDS` records vLLM's engine-core process with py-spy (`--native`, collapsed stacks in
the work directory) for that long once it is serving (past PROFILE_AFTER_CPU_S of CPU), and reports the functions with the most samples
(own and in their callees).

    python -m bench.bench_sweep [--runs 3] [--emulate avx2] [--no-tty] [-- OVERRIDES...]
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import json
import os
import re
import shlex
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
PROFILE_AFTER_CPU_S = 45.0  # an engine core that has used this much CPU is past loading the model
KINDS = (("engine core", "VLLM::Engine"), ("engine actor", "EngineHost"), ("episode workers", "EpisodeWorker"),
         ("driver", "handoff.sweep"), ("ray daemons", ""))


def kind_of(cmdline: str, kinds: tuple = KINDS) -> str:
    """The kind of the first marker `cmdline` contains; the last kind (marker "") otherwise."""
    return next((kind for kind, marker in kinds if marker and marker in cmdline), kinds[-1][0])


class TreeSampler(threading.Thread):
    """CPU seconds of every process under `pid`, by kind (`kinds`: (kind, marker in the command
    line) pairs, the last one the rest), sampled every `interval_s`; a process counts with its last
    sample, a pid reused later as another process. With `since` (an epoch second), every process on
    the machine started since then counts too, whoever started it (not all of a Ray node's daemons
    stay descendants of `pid`). With `profile` (seconds, output path), py-spy records the engine
    core once it appears."""

    def __init__(self, pid: int, profile: tuple[float, Path] | None = None, kinds: tuple = KINDS,
                 interval_s: float = 1.0, since: float | None = None):
        super().__init__(daemon=True)
        self.pid, self.last, self.loads, self.profile = pid, {}, [], profile
        self.kinds, self.interval_s, self.since = kinds, interval_s, since
        self.spy: subprocess.Popen | None = None
        self.done = threading.Event()

    def _maybe_profile(self, pid: int, kind: str, cpu: float) -> None:
        """py-spy on the engine core once it has loaded (PROFILE_AFTER_CPU_S of CPU: serving, not loading)."""
        if self.profile and self.spy is None and kind == "engine core" and cpu > PROFILE_AFTER_CPU_S:
            seconds, out = self.profile
            self.spy = subprocess.Popen([str(Path(sys.executable).parent / "py-spy"), "record", "--pid", str(pid),
                                         "--native", "--rate", "20", "--duration", str(int(seconds)), "--format", "raw",
                                         "--output", str(out)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def run(self) -> None:
        import psutil

        while not self.done.is_set():
            try:
                root = psutil.Process(self.pid)
                procs = [root, *root.children(recursive=True)]
            except psutil.NoSuchProcess:
                break
            if self.since is not None:
                procs += self._started_since({p.pid for p in procs})
            for p in procs:
                try:
                    t = p.cpu_times()
                    key = (p.pid, p.create_time())  # a Ray worker's title names its actor once it has one
                    self.last[key] = (kind_of(" ".join(p.cmdline()) or p.name(), self.kinds), t.user + t.system)
                    self._maybe_profile(p.pid, *self.last[key])
                except (psutil.NoSuchProcess, psutil.AccessDenied):
                    continue
            self.loads.append(os.getloadavg()[0])
            self.done.wait(self.interval_s)

    def _started_since(self, seen: set[int]) -> list:
        import psutil

        # psutil's create_time can read up to a second early: its boot time is in whole seconds.
        mine, since = os.getpid(), self.since - 2
        return [p for p in psutil.process_iter(["create_time"])
                if p.pid not in seen and p.pid != mine and (p.info["create_time"] or 0) >= since]

    def by_kind(self) -> dict[str, float]:
        out: dict[str, float] = {}
        for kind, cpu in self.last.values():
            out[kind] = round(out.get(kind, 0.0) + cpu, 1)
        return out

    def processes_by_kind(self) -> dict[str, int]:
        """How many processes of each kind were seen."""
        return dict(collections.Counter(kind for kind, _ in self.last.values()))


def top_frames(collapsed: Path, n: int = 15) -> list[tuple[str, float]]:
    """The frames in the most samples of py-spy's collapsed stacks (a frame counts once per sample)."""
    counts: dict[str, int] = {}
    total = 0
    for line in collapsed.read_text().splitlines():
        stack, _, samples = line.rpartition(" ")
        total += int(samples)
        for frame in set(stack.split(";")):
            counts[frame] = counts.get(frame, 0) + int(samples)
    best = sorted(counts.items(), key=lambda kv: -kv[1])[:n]
    return [(frame, round(c / max(1, total), 3)) for frame, c in best]


def stop_tree(proc: subprocess.Popen, grace_s: float = 60.0) -> None:
    """Interrupt the sweep (its driver shuts down the Ray cluster it started), then kill what is left."""
    import psutil

    tree = psutil.Process(proc.pid).children(recursive=True)
    for p in tree:
        with contextlib.suppress(psutil.NoSuchProcess):
            if "handoff.sweep" in " ".join(p.cmdline()):
                p.send_signal(signal.SIGINT)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=grace_s)
    for p in tree:
        with contextlib.suppress(psutil.NoSuchProcess):
            p.kill()
    if proc.poll() is None:
        proc.kill()


def one_run(overrides: list[str], tty: bool, env: dict, work: Path, index: int,
            profile_s: float | None = None, limit_s: float | None = None) -> dict:
    run_dir = work / f"run{index}"
    cmd = [sys.executable, "-m", "handoff.sweep", *overrides, f"run_dir={run_dir}"]
    out_path = work / f"terminal{index}.txt"
    if tty:  # util-linux script: a pseudo-terminal of 120 columns, output to out_path
        inner = f"stty cols 120 rows 40; exec {shlex.join(cmd)}"
        argv = ["script", "-q", "-e", "-c", inner, str(out_path)]
    else:
        argv = cmd
    load0, started = os.getloadavg(), time.monotonic()
    with open(os.devnull if tty else out_path, "w") as sink:
        proc = subprocess.Popen(argv, cwd=HERE.parent, env=env, stdout=sink, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL)
        collapsed = work / f"engine-core{index}.txt"
        sampler = TreeSampler(proc.pid, (profile_s, collapsed) if profile_s else None)
        sampler.start()
        try:
            code = proc.wait(timeout=limit_s)
        except subprocess.TimeoutExpired:  # --limit: a run that collapsed is stopped and recorded as such
            code = None
            stop_tree(proc)
            proc.wait()
    wall = time.monotonic() - started
    sampler.done.set()
    sampler.join()
    if sampler.spy is not None:
        sampler.spy.wait(timeout=60)
    with open(out_path, errors="replace", newline="") as f:  # a pty ends lines with \r\n; keep lone \r
        text = f.read().replace("\r\n", "\n")
    if tty and text.startswith("Script started"):
        text = text.split("\n", 1)[1].rsplit("\nScript done", 1)[0] + "\n"
    summary = re.search(r"(\d+)/(\d+) episodes in (\d+)s", text)
    engines = run_dir / "logs" / "engines.json"
    progress = [line for line in re.split(r"[\r\n]", text) if "requests" in line]
    return {
        "exit": code, "stopped_at_limit_s": limit_s if code is None else None,
        "last_progress": progress[-1].strip() if progress else None,
        "wall_s": round(wall, 1), "sweep_s": int(summary[3]) if summary else None,
        "episodes": f"{summary[1]}/{summary[2]}" if summary else None,
        "cpu_s": sampler.by_kind(), "terminal_lines": text.count("\n"), "carriage_returns": text.count("\r"),
        "load_average": {"start": load0[0], "end": os.getloadavg()[0],
                         "mean": round(sum(sampler.loads) / max(1, len(sampler.loads)), 2)},
        "engines": json.loads(engines.read_text()) if engines.is_file() else None,
        "terminal": str(out_path), "run_dir": str(run_dir),
        "engine_core_profile": top_frames(collapsed) if profile_s and collapsed.is_file() else None,
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=1)
    ap.add_argument("--emulate", choices=["avx2"])
    ap.add_argument("--no-tty", action="store_true")
    ap.add_argument("--worker-nice", type=int, help="Ray's worker niceness (RAY_worker_niceness; Ray's default 15 "
                    "lets any other work on the machine take the engine's CPU)")
    ap.add_argument("--work", help="where the runs and terminal captures go (default: a temporary directory)")
    ap.add_argument("--profile", type=float, metavar="SECONDS")
    ap.add_argument("--limit", type=float, metavar="SECONDS", help="stop a run after this long (recorded as stopped)")
    ap.add_argument("--out")
    ap.add_argument("overrides", nargs="*")
    args = ap.parse_args()
    env = dict(os.environ)
    if args.emulate:
        env["PYTHONPATH"] = os.pathsep.join([str(HERE / "emulate" / args.emulate), str(HERE.parent),
                                             env.get("PYTHONPATH", "")])
        os.environ["HANDOFF_EMULATE_CPU"] = args.emulate
    if args.worker_nice is not None:
        env["RAY_worker_niceness"] = str(args.worker_nice)
    work = Path(args.work or tempfile.mkdtemp(prefix="bench-sweep-"))
    work.mkdir(parents=True, exist_ok=True)
    runs = []
    for i in range(args.runs):
        runs.append(one_run(args.overrides, not args.no_tty, env, work, i, args.profile, args.limit))
        print(json.dumps(runs[-1]), file=sys.stderr, flush=True)
    from bench.common import report

    report("bench_sweep", {"overrides": args.overrides, "emulated": args.emulate, "tty": not args.no_tty,
                           "worker_nice": args.worker_nice, "runs": runs}, args.out)


if __name__ == "__main__":
    main()
