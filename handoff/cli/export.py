"""`handoff export RUN_DIR`: the run's episodes as tau2 Results JSON, one file per checkpoint and
domain, for tau2's own viewer and metrics (`tau2 view --dir RUN_DIR/export`)."""

from __future__ import annotations

import argparse


def register(subparsers) -> None:
    parser = subparsers.add_parser("export", help="episodes as tau2 Results JSON", description=__doc__)
    parser.add_argument("run_dir", help="run directory (runs/<name>)")
    parser.add_argument("--out", help="output directory (default RUN_DIR/export)")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from handoff.report.export import export_results

    paths = export_results(args.run_dir, args.out)
    for path in paths:
        print(path)
    return 0
