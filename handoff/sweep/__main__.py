"""`python -m handoff.sweep [HYDRA ARGS]` (also `handoff sweep`, `make sweep`, `make resume RUN=<dir>`):
the Hydra entry point. Its arguments reach Hydra unchanged: overrides, --help, --cfg job, --info,
-m/--multirun and shell completion all work. A multirun's jobs run on one Ray (and one set of
episode workers) while they ask for the same cluster (handoff.sweep.session).

Exit status: 0 when every shard finished, 1 when some failed (they are in <run>/failed/) or reducing
or reporting failed, 2 for a bad config, a bad override or a refused resume (the message, no
traceback), 130 for Ctrl-C (one line: what was kept and the command that continues the run). A multirun runs every job and exits with the highest status of its jobs.

A resume (`resume=<dir>` among plain overrides) or an extension (`extend=<dir>`, or `extend <dir>`
first: more checkpoints or trials as new shards, handoff.sweep.extend) is composed from the overrides
recorded in the run's manifest plus the new ones (which may name keys of the recorded config groups), so it does not go
through @hydra.main's composition of the default config.
"""

from __future__ import annotations

import itertools
import os
import re
import sys
import traceback

import hydra
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig, OmegaConf

import handoff  # noqa: F401 - environment for tau2/Ray (litellm cost map, usage stats off)
from handoff.ctrl_c import latched_ctrl_c
from handoff.errors import USER_ERROR_STATUS, HandoffError
from handoff.sweep.interrupt import INTERRUPTED_STATUS, interrupted_line
from handoff.sweep.run import CONF_DIR, compose, resume_dir, run_and_finish
from handoff.sweep.suggest import check_overrides, print_conf_note
from handoff.sweep.session import one_ray

_job_statuses: list[int] = []  # one per Hydra job of this process (a multirun has several)
_multirun_jobs: list[str] = []  # a multirun's jobs, each as its swept overrides (multirun_jobs)


class _MultirunInterrupted(KeyboardInterrupt):
    """Raised after an interrupted job's line is printed: the multirun's other jobs do not start."""


def sweep(cfg: DictConfig, overrides: list[str], prog: str = "handoff sweep", not_started: list[str] = ()) -> int:
    """One sweep as an exit status. A user error is one line on stderr (2); any other exception is a
    bug: its traceback is printed (1), and a multirun goes on with its next job. `not_started`: the
    jobs of a multirun after this one, named in the line of a Ctrl-C (they will not run)."""
    try:
        _, summary, reported = run_and_finish(cfg, overrides)
    except KeyboardInterrupt as exc:  # Ctrl-C: one line, what was kept and how to go on
        rest = f"; the multirun's jobs not started: {', '.join(not_started)}" if not_started else ""
        print(f"{prog}: {interrupted_line(exc)}{rest}", file=sys.stderr, flush=True)
        return INTERRUPTED_STATUS
    except HandoffError as exc:
        print(f"{prog}: {exc}", file=sys.stderr)
        return USER_ERROR_STATUS
    except Exception:  # noqa: BLE001 - a bug: keep its traceback, end this job only
        traceback.print_exc()
        return 1
    return 1 if summary.shards_failed or "report error" in reported else 0


@hydra.main(config_path=str(CONF_DIR), config_name="sweep", version_base=None)
def _hydra_job(cfg: DictConfig) -> None:
    # No sys.exit here: that would end a multirun after its first job.
    hydra_cfg = HydraConfig.get()
    later = _multirun_jobs[int(hydra_cfg.job.num) + 1:] if hydra_cfg.mode.name == "MULTIRUN" else []
    _job_statuses.append(sweep(cfg, list(hydra_cfg.overrides.task), not_started=later))
    if _job_statuses[-1] == INTERRUPTED_STATUS:  # Ctrl-C ends a multirun too, not just its job
        raise _MultirunInterrupted


def _refused_overrides(argv: list[str], prog: str) -> int:
    """USER_ERROR_STATUS, with the reason, when an override names an unknown key or group option
    (handoff.sweep.suggest: with a suggestion); 0 otherwise, or when argv has flags besides -m."""
    if not set(a for a in argv if a.startswith("-")) <= {"-m", "--multirun"}:
        return 0
    try:
        check_overrides([a for a in argv if not a.startswith("-")], CONF_DIR, compose)
    except HandoffError as exc:
        print(f"{prog}: {exc}", file=sys.stderr)
        return USER_ERROR_STATUS
    return 0


def multirun_jobs(argv: list[str]) -> list[str]:
    """A multirun's jobs in the order Hydra's basic sweeper runs them (the product of the swept
    values, keys in the order first given), each as its swept overrides: `seed=1 trials=2`."""
    from handoff.sweep.run import parse_overrides

    values: dict[str, list[str]] = {}
    for override in parse_overrides([a for a in argv if not a.startswith("-")]):
        key = override.get_key_element()
        values[key] = ([f"{key}={v}" for v in override.sweep_string_iterator()] if override.is_sweep_override()
                       else [])
    return [" ".join(job) for job in itertools.product(*[v for v in values.values() if v])]


def main(argv: list[str] | None = None, prog: str = "python -m handoff.sweep") -> int:
    """Run Hydra on `argv` (default: sys.argv[1:]) and return the combined exit status."""
    with latched_ctrl_c():
        return _main(sys.argv[1:] if argv is None else list(argv), prog)


def _main(argv: list[str], prog: str) -> int:
    if argv[:1] == ["extend"] and len(argv) > 1:  # `handoff sweep extend RUN [overrides]`
        argv = [f"extend={argv[1]}", *argv[2:]]
    extend = resume_dir(argv, "extend")
    if extend is not None:
        return sweep(OmegaConf.create({"resume": extend, "extend": extend}), argv, prog)
    run_dir = resume_dir(argv)
    if run_dir is not None:
        return sweep(OmegaConf.create({"resume": run_dir}), argv, prog)
    refused = _refused_overrides(argv, prog)
    if refused:
        return refused
    print_conf_note(CONF_DIR)
    _job_statuses.clear()
    _multirun_jobs[:] = multirun_jobs(argv) if {"-m", "--multirun"} & set(argv) else []
    if prog == "handoff sweep" and "COMP_LINE" in os.environ:  # completion sees the sweep's own words
        os.environ["COMP_LINE"] = re.sub(r"^(\s*\S+)\s+sweep\b", r"\1", os.environ["COMP_LINE"])
    saved, sys.argv = sys.argv, [prog.split()[0], *argv]  # Hydra reads sys.argv; completion uses argv[0]
    try:
        with one_ray():  # a multirun's jobs share Ray and their episode workers
            _hydra_job()
    except SystemExit as exc:  # Hydra refused the command line or the config, and printed why
        if exc.code not in (0, None):
            return max([USER_ERROR_STATUS, *_job_statuses])
    except KeyboardInterrupt as exc:  # Ctrl-C outside a job (composing, or between a multirun's jobs)
        if not isinstance(exc, _MultirunInterrupted):
            print(f"{prog}: {interrupted_line(exc)}", file=sys.stderr, flush=True)
        return INTERRUPTED_STATUS
    finally:
        sys.argv = saved
    return max(_job_statuses, default=0)


if __name__ == "__main__":
    sys.exit(main())
