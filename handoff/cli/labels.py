"""`handoff labels build|check|review|override`: regenerate, verify and hand-check the derived task sets,
labels and split manifests (docs/tasks.md)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from handoff.tasks import paths

DEFAULT_REVIEW_DIR = Path("build/labels-review")


def _bool(text: str) -> bool:
    if text.lower() not in ("true", "false"):
        raise argparse.ArgumentTypeError(f"expected true or false, got {text!r}")
    return text.lower() == "true"


def register(sub: argparse._SubParsersAction) -> None:
    from handoff.tasks.ids import KINDS
    from handoff.tasks.upstream import DOMAINS

    parser = sub.add_parser(
        "labels",
        help="build, check or hand-check data/tasks and data/manifests",
        description="Regenerate, verify and hand-check the derived task sets, labels and splits (docs/tasks.md).",
    )
    actions = parser.add_subparsers(dest="action", required=True)
    root = argparse.ArgumentParser(add_help=False)
    root.add_argument("--root", type=Path, default=None, help="repository root (default: this checkout)")
    actions.add_parser(
        "build", parents=[root],
        help="regenerate the derived task files, labels_v1.json, splits_v1.json, behaviour_v1.json and "
        "docs/out_of_scope.md from the pinned tau2 package, data/scenarios and label_overrides_v1.json",
    )
    check = actions.add_parser(
        "check", parents=[root],
        help="exit 1 and say what differs if a committed file is stale, a recorded hash does not match, or the "
        "behaviour record is missing, wrong or disagrees with a re-run, or a gold that breaks the policy is not "
        "handled",
    )
    check.add_argument("--rerun", type=int, default=1, metavar="N",
                       help="re-run N tasks per domain and kind with tau2's evaluator (0: none; default 1)")
    actions.add_parser(
        "golds", parents=[root],
        help="list every upstream gold that breaks a policy clause (data/policy/clauses.yaml) or transfers, with its "
        "hand-check (data/policy/gold_resolutions.yaml); exit 1 if anything is not handled",
    )
    review = actions.add_parser("review", parents=[root], help="write the hand-check pages (Markdown and HTML)")
    review.add_argument("--domain", choices=DOMAINS, action="append", help="a domain (repeatable; default: all)")
    review.add_argument("--kind", choices=KINDS, action="append",
                        help="a task kind (repeatable; default: all)")
    review.add_argument("--out", type=Path, default=DEFAULT_REVIEW_DIR, help=f"default: {DEFAULT_REVIEW_DIR}")
    override = actions.add_parser(
        "override", parents=[root],
        help="record a hand-checked label in label_overrides_v1.json and rebuild labels and splits",
    )
    override.add_argument("domain")
    override.add_argument("task_id")
    override.add_argument("--should-transfer", type=_bool, required=True, metavar="true|false")
    override.add_argument("--reason", required=True, help="why the label is corrected (not blank)")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from handoff.cli import UsageError
    from handoff.tasks.authoring.manifests import build, check, review, set_override
    from handoff.tasks.labels import ManifestError

    try:
        if args.action == "build":
            return _report_written(build(args.root))
        if args.action == "override":
            _report_written(set_override(args.root, args.domain, args.task_id, args.should_transfer, args.reason))
            print(f"{args.domain}/{args.task_id}: should_transfer={str(args.should_transfer).lower()} recorded")
            return 0
        if args.action == "golds":
            return _golds(args.root)
        if args.action == "review":
            written = review(args.out, args.domain, args.kind, args.root)
            print("\n".join(f"wrote {p}" for p in written))
            return 0
        problems = check(args.root, rerun=args.rerun)
    except (ManifestError, ValueError) as exc:
        raise UsageError(str(exc)) from exc
    for problem in problems:
        print(problem, file=sys.stderr)
    if problems:
        print("run `handoff labels build` (or `make labels`) and commit the result", file=sys.stderr)
        return 1
    print("task sets, labels, splits and the behaviour record are up to date")
    return 0


def _golds(root: Path | None) -> int:
    from handoff.tasks.authoring import gold_policy, manifests
    from handoff.tasks.upstream import DOMAINS, has_gold_transfer, upstream_tasks

    for domain in DOMAINS:
        for task in upstream_tasks(domain):
            found = gold_policy.upstream_violations(domain, task.id)
            if not found and not has_gold_transfer(task):
                continue
            entry = gold_policy.resolutions().get(domain, {}).get(task.id, {})
            print(f"{domain}/{task.id}: gold {entry.get('gold', '?')}, label {entry.get('label', '?')}"
                  + (" (gold transfer)" if has_gold_transfer(task) else "")
                  + ("" if entry.get("reachable", True) else ", tau2 reward unreachable"))
            for v in found:
                print(f"  {v.clause} ({gold_policy.clause(domain, v.clause).cite()}): action {v.step}, {v.message}")
    problems = manifests.gold_problems(Path(root or paths.REPO_ROOT), manifests.derived_tasks())
    for problem in problems:
        print(problem, file=sys.stderr)
    return 1 if problems else 0


def _report_written(written: list) -> int:
    print("\n".join(f"wrote {p}" for p in written) or "everything is up to date")
    return 0
