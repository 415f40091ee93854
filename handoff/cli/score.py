"""`handoff score PATH [--domain D] [--reevaluate]`: score a tau2 file with the rules.

Prints one JSON object per simulation (task_id, transferred, label, violations, format_errors,
tau2_reward, reward, ..., format_events_recorded). PATH is a tau2 results JSON, a JSON list of
SimulationRuns or a single SimulationRun, gzip-compressed or not (handoff.rules.read_tau2_file);
--domain is needed where the file does not name its domain. --reevaluate replays each simulation
with tau2's evaluator against the pinned task its id names and adds `reevaluated_reward` beside the
recorded `tau2_reward` (null, with the whole `replay_error` and `replay_diverged_at`, the index of
the message where the replay diverged, when the replay raises). Scores come from
handoff.scoring, the reducer's own path: a file written by handoff (`handoff export`) carries the
agent's format events and the reward weights and labels version the run was scored with, and scores
exactly as the reducer scored it (other weights given with --reward, or labels changed since the
export, are said on stderr); a file from elsewhere is scored from its messages only
(format_events_recorded: false, and a note on stderr) with the default weights.
"""

from __future__ import annotations

import argparse
import json
import sys


def register(subparsers) -> None:
    parser = subparsers.add_parser("score", help="score a tau2 results or SimulationRun JSON with the rules",
                                   description=__doc__)
    parser.add_argument("path", help="tau2 results JSON, JSON list of SimulationRuns or SimulationRun JSON")
    parser.add_argument("--domain", help="tau2 domain (required where the file does not name it)")
    parser.add_argument("--reevaluate", action="store_true",
                        help="replay each simulation with tau2's evaluator: reevaluated_reward beside tau2_reward")
    parser.add_argument("--reward", help="reward weights: conf/reward/<name>.yaml or a YAML path (default: the "
                                         "weights the file was exported with, else conf/reward/default.yaml)")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from handoff.rules import DomainTools, Trajectory, read_tau2_file
    from handoff.scoring import Scorer

    # unreadable or invalid input, an unknown domain: HandoffErrors with a clear message
    given = Scorer(args.reward) if args.reward is not None else None
    from handoff.importing import domain_of

    found = read_tau2_file(args.path, args.domain, domain_of)
    trajectories = [Trajectory.from_simulation(sim, found.domain) for sim in found.simulations]
    scorer = _scorer(given, carried_scoring(found.simulations, args.path))
    DomainTools.for_domain(found.domain)
    rows = [{**_score(scorer, traj).model_dump(mode="json"), "format_events_recorded": traj.format_events_recorded}
            for traj in trajectories]
    if args.reevaluate:
        for row, sim in zip(rows, found.simulations):
            row.update(_reevaluated(sim, found.domain, args.path))
    for row in rows:  # nothing is printed unless every simulation scored
        print(json.dumps(row, separators=(",", ":")))
    absent = sum(not t.format_events_recorded for t in trajectories)
    if absent:
        print(f"handoff score: {absent} of {len(trajectories)} simulation(s) carry no handoff format events "
              "(not written by handoff): their format errors come from the messages alone", file=sys.stderr)
    return 0


def _reevaluated(sim: dict, domain: str, path: str) -> dict:
    """The reward tau2's evaluator gives the simulation on the pinned task (handoff.importing)."""
    from handoff.importing import divergence_index, pinned_task, reevaluate

    reward_info, error = reevaluate(sim, domain, pinned_task(domain, str(sim.get("task_id")), path), path)
    row = {"reevaluated_reward": None if reward_info is None else reward_info["reward"]}
    return {**row, "replay_error": error, "replay_diverged_at": divergence_index(sim, error)} if error else row


def carried_scoring(sims: list[dict], path: str) -> dict:
    """The Scorer.info a file exported by handoff carries (the same in every simulation); {} if none."""
    from handoff.cli import UsageError
    from handoff.scoring import SCORING_INFO_KEY

    found = {json.dumps(((s.get("reward_info") or {}).get("info") or {}).get(SCORING_INFO_KEY) or {}, sort_keys=True)
             for s in sims}
    if len(found) > 1:
        raise UsageError(f"{path}: its simulations were scored with different reward weights or labels")
    return json.loads(found.pop()) if found else {}


def _scorer(given, carried: dict):
    """The scorer of --reward (`given`), else one with the weights the file was exported with, else
    the defaults; what differs from the file's scoring (other weights, other labels) is said on stderr."""
    from handoff.scoring import Scorer

    scorer = given or Scorer(_weights(carried.get("reward_weights")) or "default")
    differs = scorer.differs(carried)
    if differs:
        print(f"handoff score: the file was scored with other {' and '.join(differs)} than these scores "
              "(rewards and labels may differ from the run's report)", file=sys.stderr)
    return scorer


def _weights(data: dict | None):
    from pydantic import ValidationError

    from handoff.cli import UsageError
    from handoff.rules import RewardWeights

    try:
        return RewardWeights.model_validate(data) if data else None
    except ValidationError as exc:
        raise UsageError(f"the reward weights the file carries are invalid: {exc.errors()[0]['msg']}") from None


def _score(scorer, traj):
    from handoff.cli import UsageError
    from handoff.tasks.labels import ManifestError

    try:
        return scorer.score_trajectory(traj)
    except LookupError as exc:
        raise UsageError(f"unknown task {traj.task_id!r} in domain {traj.domain!r}") from exc
    except (ValueError, OSError, ManifestError) as exc:  # missing or invalid task / label files
        raise UsageError(f"cannot label task {traj.task_id!r} in domain {traj.domain!r}: {exc}") from exc
