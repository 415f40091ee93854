"""`handoff follow [options] WATCH RUN_DIR [overrides]`: evaluate each checkpoint a training run saves,
once it is complete, into one run that grows with training (handoff.sweep.follow, docs/sweep.md)."""

from __future__ import annotations

import argparse
import sys


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "follow", help="evaluate each checkpoint a training run saves, as it is saved",
        description=__doc__)
    parser.add_argument("watch", help="verl's checkpoint directory (global_step_N/actor beside "
                                      "latest_checkpointed_iteration.txt; it may not exist yet) or a glob "
                                      "(a pattern) of checkpoint directories")
    parser.add_argument("run_dir", help="the run directory (created by the first checkpoint, extended by the next)")
    parser.add_argument("overrides", nargs="*", help="the sweep's Hydra overrides (handoff sweep --help)")
    parser.add_argument("--until-step", type=int, help="stop once a checkpoint of this step or later is handled")
    parser.add_argument("--stop-file", help="stop once this file exists and every seen checkpoint is handled")
    parser.add_argument("--idle-timeout", type=float, help="stop after this many seconds without a new checkpoint")
    parser.add_argument("--poll-s", type=float, default=2.0, help="seconds between looks (default 2)")
    parser.add_argument("--settle-s", type=float, default=10.0,
                        help="a glob's checkpoint is complete once its files stayed the same this long (default 10)")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from handoff.sweep.follow import Stop, follow, summary_lines
    from handoff.sweep.interrupt import INTERRUPTED_STATUS, interrupted_line

    if args.until_step is None and args.stop_file is None and args.idle_timeout is None:
        print("handoff follow: give --until-step, --stop-file or --idle-timeout (when to stop)", file=sys.stderr)
        return 2
    flags = [f"--{k.replace('_', '-')}={v}" for k, v in vars(args).items()
             if k in ("until_step", "stop_file", "idle_timeout", "poll_s", "settle_s") and v is not None]
    try:
        result = follow(args.watch, args.run_dir, args.overrides,
                        Stop(args.until_step, args.stop_file, args.idle_timeout),
                        poll_s=args.poll_s, settle_s=args.settle_s, flags=flags)
    except KeyboardInterrupt as exc:
        print(f"handoff follow: {interrupted_line(exc)}", file=sys.stderr, flush=True)
        return INTERRUPTED_STATUS
    print("\n".join(summary_lines(result)), flush=True)
    return 1 if result.failed_shards else 0
