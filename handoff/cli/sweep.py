"""`handoff sweep [key=value ...]`: the sweep, exactly as `python -m handoff.sweep` (Hydra
overrides; `resume=<run dir>` resumes). `make sweep` and `make resume RUN=<dir>` call the same."""

from __future__ import annotations

import argparse
import os
import sys


def register(subparsers) -> None:
    parser = subparsers.add_parser("sweep", help="run or resume a sweep (Hydra overrides)", description=__doc__)
    parser.add_argument("overrides", nargs=argparse.REMAINDER, help="Hydra overrides, e.g. trials=3 resume=runs/x")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    # Hydra owns the command line of the sweep: hand the process over to its entry point.
    os.execv(sys.executable, [sys.executable, "-m", "handoff.sweep", *args.overrides])
