"""The one scoring path: episode record -> Trajectory -> EpisodeScore, with the task's label and
context. The reducer (and so `handoff compare`), `handoff score` and Tau2AgentLoop's reward all
score through a Scorer. It sits above handoff.tasks (labels, tasks) and below the agent.

A record's format events and token usage are also inside its SimulationRun (`reward_info.info`,
handoff.rules.events), so a SimulationRun exported by handoff scores the same from the file alone.
"""

from __future__ import annotations

import hashlib
import json
from functools import cached_property
from pathlib import Path

from pydantic import BaseModel

from handoff.records import EpisodeRecord
from handoff.rules import (
    EpisodeScore,
    Label,
    RewardWeights,
    TaskContext,
    Trajectory,
    score_episode,
)


class ScoredEpisode(BaseModel):
    """An episode's place in the sweep (checkpoint, step, trial, seed) and its score by the rules."""

    model: str
    step: int
    trial: int
    seed: int
    score: EpisodeScore

    @property
    def key(self) -> tuple[str, str, str, int]:
        return (self.model, self.score.domain, self.score.task_id, self.trial)


def trajectory_of(record: EpisodeRecord) -> Trajectory:
    return Trajectory.from_simulation(
        record.simulation, record.domain, record.format_events,
        prompt_tokens=record.usage.prompt_tokens, completion_tokens=record.usage.completion_tokens)


class Scorer:
    """Scores records against their task's label and context, with one set of reward weights.
    Labels and contexts are looked up once per task; `label_for(domain, task_id)` defaults to the
    committed labels."""

    def __init__(self, weights: RewardWeights | str = "default", label_for=None):
        self.weights = weights if isinstance(weights, RewardWeights) else RewardWeights.load(weights)
        self._label_for = label_for
        self._tasks: dict[tuple[str, str], tuple[Label, TaskContext]] = {}

    @classmethod
    def for_config(cls, config: dict) -> "Scorer":
        """With the reward weights of a run's resolved config (its `reward` group), else the defaults."""
        weights = config.get("reward")
        return cls(RewardWeights.model_validate(weights) if weights else "default")

    @cached_property
    def fingerprint(self) -> str:
        """Changes whenever cached scores would: other weights, labels, task content, rules source or
        handoff version."""
        from handoff import __version__
        from handoff.tasks import paths
        from handoff.tasks.manifests import tasks_sha256

        parts = {"weights": self.weights.model_dump(mode="json"), "handoff": __version__,
                 "labels": paths.sha256_file(paths.REPO_ROOT / paths.LABELS_FILE),
                 "tasks": tasks_sha256(), "rules": rules_sha256()}
        return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()

    def _task(self, domain: str, task_id: str) -> tuple[Label, TaskContext]:
        key = (domain, task_id)
        if key not in self._tasks:
            from handoff.tasks import get_task
            from handoff.tasks.labels import label_for

            context = TaskContext.for_task(domain, get_task(domain, task_id))
            self._tasks[key] = ((self._label_for or label_for)(domain, task_id), context)
        return self._tasks[key]

    def score_trajectory(self, traj: Trajectory) -> EpisodeScore:
        label, context = self._task(traj.domain, traj.task_id)
        return score_episode(traj, label, context, self.weights)

    def score(self, record: EpisodeRecord) -> ScoredEpisode:
        return ScoredEpisode(model=record.model, step=record.step, trial=record.trial, seed=record.seed,
                             score=self.score_trajectory(trajectory_of(record)))


def rules_sha256() -> str:
    """One sha256 over the rules package's source: an edited rule invalidates cached scores."""
    import handoff.rules

    digest = hashlib.sha256()
    for path in sorted(Path(handoff.rules.__file__).parent.glob("*.py")):
        digest.update(path.name.encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()
