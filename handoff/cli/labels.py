"""`handoff labels build|check`: regenerate or verify the derived task sets, labels and split manifests."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser(
        "labels",
        help="build or check data/tasks and data/manifests",
        description="build: regenerate the derived task files, labels_v1.json, splits_v1.json and "
        "docs/out_of_scope.md from the pinned tau2 package and label_overrides_v1.json. "
        "check: exit 1 and say what differs if a committed file is stale or a recorded hash does not match.",
    )
    parser.add_argument("action", choices=["build", "check"])
    parser.add_argument("--root", type=Path, default=None, help="repository root (default: this checkout)")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from handoff.cli import UsageError
    from handoff.tasks.labels import ManifestError
    from handoff.tasks.manifests import build, check

    try:
        if args.action == "build":
            written = build(args.root)
            print("\n".join(f"wrote {p}" for p in written) or "everything is up to date")
            return 0
        problems = check(args.root)
    except ManifestError as exc:
        raise UsageError(str(exc)) from exc
    for problem in problems:
        print(problem, file=sys.stderr)
    if problems:
        print("run `handoff labels build` (or `make labels`) and commit the result", file=sys.stderr)
        return 1
    print("task sets, labels and splits are up to date")
    return 0
