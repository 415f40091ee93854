"""`handoff score PATH [--domain D]`: score a tau2 SimulationRun JSON or results JSON with the rules.

Prints one JSON object per simulation (task_id, transferred, label, violations, format_errors,
tau2_reward, reward, ..., format_events_recorded). PATH may be a tau2 results file (its domain is
read from the file) or a single SimulationRun (then --domain is required). Scores come from
handoff.scoring, the reducer's own path: a file written by handoff (`handoff export`) carries the
agent's format events and scores exactly as the reducer scored it; a file from elsewhere is scored
from its messages only (format_events_recorded: false, and a note on stderr).
"""

from __future__ import annotations

import argparse
import json
import sys


def register(subparsers) -> None:
    parser = subparsers.add_parser("score", help="score a tau2 SimulationRun JSON or results JSON with the rules",
                                   description=__doc__)
    parser.add_argument("path", help="tau2 results JSON or SimulationRun JSON")
    parser.add_argument("--domain", help="tau2 domain (required for a single SimulationRun)")
    parser.add_argument("--reward", default="default", help="reward weights: conf/reward/<name>.yaml or a YAML path")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from handoff.rules import DomainTools, load_trajectories
    from handoff.scoring import Scorer

    # unreadable or invalid input, an unknown domain: HandoffErrors with a clear message
    scorer = Scorer(args.reward)
    trajectories = load_trajectories(args.path, args.domain)
    for domain in {t.domain for t in trajectories}:
        DomainTools.for_domain(domain)
    rows = [{**_score(scorer, traj).model_dump(mode="json"), "format_events_recorded": traj.format_events_recorded}
            for traj in trajectories]
    for row in rows:  # nothing is printed unless every simulation scored
        print(json.dumps(row, separators=(",", ":")))
    absent = sum(not t.format_events_recorded for t in trajectories)
    if absent:
        print(f"handoff score: {absent} of {len(trajectories)} simulation(s) carry no handoff format events "
              "(not written by handoff): their format errors come from the messages alone", file=sys.stderr)
    return 0


def _score(scorer, traj):
    from handoff.cli import UsageError
    from handoff.tasks.labels import ManifestError

    try:
        return scorer.score_trajectory(traj)
    except LookupError as exc:
        raise UsageError(f"unknown task {traj.task_id!r} in domain {traj.domain!r}") from exc
    except (ValueError, OSError, ManifestError) as exc:  # missing or invalid task / label files
        raise UsageError(f"cannot label task {traj.task_id!r} in domain {traj.domain!r}: {exc}") from exc
