"""`handoff compare RUN_A [RUN_B]`: paired differences (A - B) with 95% intervals (paired t over the
tasks both sides ran; "too few tasks" under 8) and the tasks and episodes each rests on; four primary
metrics significant after Holm's correction, the rest exploratory; then the tasks whose hand-off
correctness or tau2 success flipped, with a sign test (--html PAGE: their transcripts side by side).
With one run, name two of its checkpoints with --a and --b."""

from __future__ import annotations

import argparse


def register(subparsers) -> None:
    parser = subparsers.add_parser("compare", help="paired comparison of two runs or checkpoints",
                                   description=__doc__)
    parser.add_argument("run_a", help="run directory of side A")
    parser.add_argument("run_b", nargs="?", help="run directory of side B (default: RUN_A)")
    parser.add_argument("--a", dest="checkpoint_a", help="checkpoint of side A (needed if RUN_A has several)")
    parser.add_argument("--b", dest="checkpoint_b", help="checkpoint of side B (needed if RUN_B has several)")
    parser.add_argument("--domain", help="compare one domain only (default: all)")
    parser.add_argument("--json", action="store_true", help="print the comparison as JSON (with its flips)")
    parser.add_argument("--html", metavar="PAGE", help="write A's and B's transcripts of every flipped task "
                                                      "side by side to this HTML file")
    parser.add_argument("--mixed-scoring", action="store_true",
                        help="compare sides scored with different reward weights (refused otherwise)")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from handoff.cli import UsageError
    from handoff.report.compare import compare, format_table, side_scores
    from handoff.report.flips import write_flips_page

    run_b = args.run_b or args.run_a
    if run_b == args.run_a and (args.checkpoint_a is None or args.checkpoint_a == args.checkpoint_b):
        raise UsageError("comparing a run with itself: name two different checkpoints with --a and --b")
    cmp = compare(side_scores(args.run_a, args.checkpoint_a, args.domain),
                  side_scores(run_b, args.checkpoint_b, args.domain), mixed_scoring=args.mixed_scoring)
    page = write_flips_page(args.html, cmp.side_a, cmp.side_b, cmp.flips) if args.html else None
    print(cmp.model_dump_json(indent=1) if args.json else format_table(cmp, page))
    return 0
