"""Resuming a finished sweep: `python -m handoff.sweep resume=<run>` vs tau2's run_tasks resume.

A finished run must be recognized as finished quickly (target: under 5 s, end to end, including
the Python start). Both are timed as fresh processes on the same machine, in the same run:

- handoff: a small finished sweep with the scripted engine (made first unless --run is given),
  then `python -m handoff.sweep resume=<run>`;
- tau2: a finished `tau2.run.run_tasks(..., save_to=<file>)` run of the same tasks with the
  scripted agent and user of bench/scripted.py, then the same call again, answering "y" to tau2's
  resume prompt.

    python -m bench.bench_resume [--run runs/<name>] [--tasks 2]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import handoff  # noqa: F401
from bench.common import report

ROOT = Path(__file__).resolve().parents[1]
SWEEP = [sys.executable, "-m", "handoff.sweep"]

TAU2_RUN = """
import handoff, os, rich.console
from tau2.registry import registry
from tau2.run import run_tasks
from tau2.utils.display import ConsoleDisplay
from bench import scripted
ConsoleDisplay.console = rich.console.Console(file=open(os.devnull, "w"))
scripted.register_in_tau2()
tasks = registry.get_tasks_loader("{domain}")(None)[:{n}]
run_tasks("{domain}", tasks, scripted.AGENT, scripted.USER, llm_args_agent={{}}, llm_args_user={{}},
          max_steps=12, max_errors=4, save_to=__import__("pathlib").Path("{path}"),
          console_display=False, log_level="ERROR", seed=300)
"""


def _timed(cmd: list[str], stdin: str | None = None) -> float:
    started = time.perf_counter()
    done = subprocess.run(cmd, cwd=ROOT, input=stdin, text=True, capture_output=True)
    wall = time.perf_counter() - started
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd[:4])} exited {done.returncode}:\n{done.stderr[-3000:]}")
    return wall


def sweep_overrides(run_dir: str, n_tasks: int) -> list[str]:
    return [f"run_dir={run_dir}", "engine=scripted", "engine.request_timeout_s=900", "domain=[airline]",
            "tasks.per_kind=null", f"tasks.limit={n_tasks}", "tasks.split=null"]


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--run", default=None, help="a finished sweep (default: make a small one)")
    parser.add_argument("--tasks", type=int, default=2)
    parser.add_argument("--out", default=None)
    args = parser.parse_args(argv)
    scratch = Path(tempfile.mkdtemp(prefix="bench-resume-"))
    result: dict = {"target": "< 5 s"}
    run = args.run
    if run is None:
        run = str(scratch / "sweep")
        result["handoff_first_run_s"] = _timed(SWEEP + sweep_overrides(run, args.tasks))
    result["handoff_resume_s"] = _timed(SWEEP + [f"resume={run}"])
    tau2_file = scratch / "tau2.json"
    script = TAU2_RUN.format(domain="airline", n=args.tasks, path=tau2_file)
    result["tau2_first_run_s"] = _timed([sys.executable, "-c", script])
    result["tau2_resume_s"] = _timed([sys.executable, "-c", script], stdin="y\ny\n")  # tau2 asks twice when its run info hash differs
    result["ratio_tau2_over_handoff"] = round(result["tau2_resume_s"] / result["handoff_resume_s"], 2)
    result["run"] = run
    report("bench_resume", result, args.out)
    return result


if __name__ == "__main__":
    main()
