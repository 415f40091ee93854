"""`evaluate_simulation`: tau2's own evaluator, run on environments built from a shared snapshot.

The whole of tau2's `evaluate_simulation` runs unchanged (termination checks, the environment,
action and communicate evaluators, how rewards combine); only the domain's environment constructor
differs, so the RewardInfo is the one tau2 computes. For domains other than airline and retail the
call goes straight to tau2.
"""

from __future__ import annotations

from tau2.data_model.simulation import RewardInfo, SimulationRun
from tau2.data_model.tasks import Task
from tau2.evaluator.evaluator import EvaluationType
from tau2.evaluator.evaluator import evaluate_simulation as tau2_evaluate_simulation

from handoff.fasteval.environments import fast_domain


def evaluate_simulation(
    simulation: SimulationRun,
    task: Task,
    domain: str,
    evaluation_type: EvaluationType = EvaluationType.ALL,
    solo_mode: bool = False,
) -> RewardInfo:
    """Drop-in for `tau2.evaluator.evaluator.evaluate_simulation` (same RewardInfo, less CPU)."""
    return tau2_evaluate_simulation(
        simulation=simulation,
        task=task,
        evaluation_type=evaluation_type,
        solo_mode=solo_mode,
        domain=fast_domain(domain),
    )
