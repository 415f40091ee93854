"""`handoff leaderboard RUN...`: one row per checkpoint across runs and imports, the headline metrics
with their 95% intervals and counts, the tasks each row rests on; rows whose task sets differ are
marked `*`, and --common restricts every row to the tasks all rows ran. --html PAGE writes a
sortable page."""

from __future__ import annotations

import argparse


def register(subparsers) -> None:
    parser = subparsers.add_parser("leaderboard", help="one row per checkpoint across runs and imports",
                                   description=__doc__)
    parser.add_argument("run_dirs", nargs="+", metavar="RUN", help="run directories (sweeps or imports)")
    parser.add_argument("--html", metavar="PAGE", help="write the sortable table to this HTML file")
    parser.add_argument("--common", action="store_true", help="every row over the tasks all rows ran only")
    parser.add_argument("--json", action="store_true", help="print the rows as JSON")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from handoff.report.leaderboard import leaderboard

    print(leaderboard(args.run_dirs, args.html, common=args.common, as_json=args.json))
    return 0
