"""`handoff report RUN_DIR`: Markdown and HTML report with plots in RUN_DIR/report, and report.txt, the
same in plain text (no links); `--print` writes the report and prints report.txt instead of the paths."""

from __future__ import annotations

import argparse


def register(subparsers) -> None:
    parser = subparsers.add_parser("report", help="Markdown and HTML report with plots in RUN_DIR/report",
                                   description=__doc__)
    parser.add_argument("run_dir", help="run directory (runs/<name>)")
    parser.add_argument("--print", action="store_true", dest="print_text",
                        help="print the plain-text report (report.txt) on the terminal")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from handoff.report import RunDir, write_report
    from handoff.report.reducer import reduce_locked

    run = RunDir(args.run_dir)
    with run.reducing():  # one reducer or report writer of a run at a time
        paths = write_report(run.root, reduce_locked(run))
    if args.print_text:
        print(run.report_txt.read_text(), end="")
        return 0
    for name, path in paths.items():
        print(f"{name}: {path}")
    return 0
