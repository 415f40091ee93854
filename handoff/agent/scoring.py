"""An episode as the rules see it: the normalized Trajectory and its ADR-004 score."""

from __future__ import annotations

from tau2.data_model.tasks import Task

from handoff.agent.episode import EpisodeResult
from handoff.rules import (
    EpisodeScore,
    Label,
    RewardWeights,
    TaskContext,
    Trajectory,
    score_episode,
)


def trajectory_of(result: EpisodeResult) -> Trajectory:
    return Trajectory.from_simulation(
        result.simulation,
        result.domain,
        result.format_events,
        prompt_tokens=result.usage.prompt_tokens,
        completion_tokens=result.usage.completion_tokens,
    )


def score_result(result: EpisodeResult, task: Task, label: Label, weights: RewardWeights) -> EpisodeScore:
    return score_episode(trajectory_of(result), label, TaskContext.for_task(result.domain, task), weights)
