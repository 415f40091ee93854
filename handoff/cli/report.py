"""`handoff report RUN_DIR`: Markdown and HTML report with plots in RUN_DIR/report."""

from __future__ import annotations

import argparse


def register(subparsers) -> None:
    parser = subparsers.add_parser("report", help="Markdown and HTML report with plots in RUN_DIR/report",
                                   description=__doc__)
    parser.add_argument("run_dir", help="run directory (runs/<name>)")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from handoff.report import reduce_run, write_report

    paths = write_report(args.run_dir, reduce_run(args.run_dir))
    for name, path in paths.items():
        print(f"{name}: {path}")
    return 0
