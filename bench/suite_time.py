"""Where `make test`'s time goes: `make test` run once (its pytest command, two pytest-xdist workers
unless `--workers`; `-v` added, to read each test's worker and group), measuring

- `wall_s`, and `cpu_s`: the CPU seconds the whole machine spent meanwhile (/proc/stat: user, nice,
  system, irq, softirq). On N cores no schedule of these tests ends before `cpu_s / N`
  (`floor_s`); `busy_fraction` is how much of the N cores' time the run used;
- `cpu_s_by_kind`: the same time by process kind (vLLM engine cores, engine and worker actors, Ray's
  daemons, the pytest processes, browsers, ...), sampled every `--interval` seconds from pytest's
  process tree and from every process on the machine started since the run began, whoever started
  it (not all of a Ray node's daemons stay pytest's descendants; nothing else should run meanwhile).
  A process counts with its last sample; one that lived less than an interval is missed:
  `unattributed_cpu_s` is the rest. `processes_by_kind`: how many processes of each kind started;
- `groups`: each xdist group's time on its worker (from one finished test of the group to the next
  on the same worker: setup and teardown included), longest first, with the test counts;
- `slowest`: pytest's own `--durations=15` (the call phase);
- the load average and the machine (CPU model and flags).

Not part of `make bench`: it runs the whole suite (half an hour on 2 cores).

    python -m bench.suite_time [--workers 2] [--out FILE] [-- PYTEST_ARGS...]
"""

from __future__ import annotations

import argparse
import os
import re
import shlex
import subprocess
import sys
import time
from pathlib import Path

from bench.bench_sweep import TreeSampler
from bench.common import report

HERE = Path(__file__).resolve().parent
KINDS = (("engine core", "VLLM::EngineCor"), ("vLLM tensor-parallel worker", "VLLM::Worker"),
         ("engine actor", "EngineHost"), ("episode workers", "EpisodeWor"),
         ("spawned pools (tau2 reference, behaviour baselines, FSDP ranks)", "spawn_main"),
         ("subprocess sweeps and CLIs", "-m handoff"), ("pytest", "pytest"), ("browser", "chromium"),
         ("wandb", "wandb"), ("verl merger", "model_merger"), ("ray daemons and idle workers", "ray"),
         ("other", ""))
RESULT = re.compile(r"\[(gw\d+)\] \[\s*\d+%\] (PASSED|FAILED|ERROR|SKIPPED|XFAIL|XPASS) (\S+)")
DURATION = re.compile(r"^([\d.]+)s (call|setup|teardown)\s+(\S+)")


def busy_cpu_s() -> float:
    """CPU seconds the machine has spent busy since boot (/proc/stat's first line)."""
    fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    user, nice, system, _idle, _iowait, irq, softirq = fields[:7]
    return (user + nice + system + irq + softirq) / os.sysconf("SC_CLK_TCK")


def group_times(lines: list[tuple[float, str]], started: float) -> list[dict]:
    """Each xdist group's time on its worker: a test's share is the time since the worker's last result."""
    last: dict[str, float] = {}
    groups: dict[str, dict] = {}
    for at, line in lines:
        m = RESULT.search(line)
        if not m:
            continue
        worker, outcome, node = m.groups()
        group = node.partition("@")[2] or node.split("::")[0]
        g = groups.setdefault(group, {"group": group, "worker": worker, "s": 0.0, "tests": 0, "not_passed": 0})
        g["s"] += at - last.get(worker, started)
        g["tests"] += 1
        g["not_passed"] += outcome not in ("PASSED", "SKIPPED")
        last[worker] = at
    return sorted(({**g, "s": round(g["s"])} for g in groups.values()), key=lambda g: -g["s"])


def slowest(lines: list[tuple[float, str]]) -> list[dict]:
    return [{"s": float(m[1]), "phase": m[2], "test": m[3]}
            for _, line in lines if (m := DURATION.match(line))]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--workers", default=os.environ.get("TEST_WORKERS", "2"), help="pytest-xdist workers (-n)")
    ap.add_argument("--interval", type=float, default=2.0, help="seconds between samples of the process tree")
    ap.add_argument("--log", help="also write pytest's output here, each line prefixed with its epoch second")
    ap.add_argument("--out")
    ap.add_argument("pytest_args", nargs="*")
    args = ap.parse_args()
    cmd = ["make", "test", f"TEST_WORKERS={args.workers}",  # the Makefile's own command, not a copy of it
           "PYTEST_ARGS=" + shlex.join(["-v", "-p", "no:cacheprovider", *args.pytest_args])]
    cpu0, started = busy_cpu_s(), time.time()
    proc = subprocess.Popen(cmd, cwd=HERE.parent, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    sampler = TreeSampler(proc.pid, kinds=KINDS, interval_s=args.interval, since=started)
    sampler.start()
    lines = []
    log = open(args.log, "w") if args.log else None  # noqa: SIM115 - closed below
    for line in proc.stdout:
        lines.append((time.time(), line.rstrip("\n")))
        if log:
            log.write(f"{lines[-1][0]:.0f} {line}")
            log.flush()
    code = proc.wait()
    wall, cpu = time.time() - started, busy_cpu_s() - cpu0
    sampler.done.set()
    sampler.join()
    if log:
        log.close()
    by_kind = dict(sorted(sampler.by_kind().items(), key=lambda kv: -kv[1]))
    cores = os.cpu_count() or 1
    summary = next((line for _, line in reversed(lines) if re.search(r"\d+ (passed|failed)", line)), "")
    report("suite_time", {
        "command": shlex.join(cmd), "exit": code, "summary": summary.strip("= "),
        "wall_s": round(wall), "cpu_s": round(cpu), "floor_s": round(cpu / cores), "cores": cores,
        "busy_fraction": round(cpu / (wall * cores), 3),
        "cpu_s_by_kind": by_kind, "unattributed_cpu_s": round(cpu - sum(by_kind.values())),
        "processes_by_kind": sampler.processes_by_kind(),
        "load_average": {"mean": round(sum(sampler.loads) / max(1, len(sampler.loads)), 2),
                         "max": max(sampler.loads, default=None)},
        "groups": group_times(lines, started)[:20], "slowest": slowest(lines),
    }, args.out)
    sys.exit(code)


if __name__ == "__main__":
    main()
