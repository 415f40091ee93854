"""`handoff reduce RUN_DIR`: score new shards, compute the metrics, log them to W&B."""

from __future__ import annotations

import argparse


def register(subparsers) -> None:
    parser = subparsers.add_parser("reduce", help="score new shards, compute the metrics, log them to W&B",
                                   description=__doc__)
    parser.add_argument("run_dir", help="run directory (runs/<name>)")
    parser.add_argument("--no-wandb", action="store_true", help="do not log to W&B")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from handoff.report import finish_run, reduce_run
    from handoff.rundir import RunPaths

    if args.no_wandb:
        reduction = reduce_run(args.run_dir)
        print(f"{reduction.n_episodes} episodes reduced: {RunPaths(args.run_dir).metrics}")
        return 0
    paths = finish_run(args.run_dir, report=False)
    for name, path in paths.items():
        print(f"{name}: {path}")
    return 0
