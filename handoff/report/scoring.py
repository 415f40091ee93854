"""Score episode records with the rules package: the one place where the reporting layer meets
the rules, the labels and the tasks."""

from __future__ import annotations

import hashlib
import json
from functools import cached_property

from pydantic import BaseModel

from handoff.records import EpisodeRecord, Usage
from handoff.rules import RewardWeights, TaskContext, Trajectory, score_episode
from handoff.rules.score import EpisodeScore
from handoff.tasks import get_task
from handoff.tasks.labels import label_for


class ScoredEpisode(BaseModel):
    """An episode's place in the sweep (checkpoint, step, trial) and its score by the rules."""

    model: str
    step: int
    trial: int
    seed: int
    usage: Usage
    score: EpisodeScore

    @property
    def key(self) -> tuple[str, str, str, int]:
        return (self.model, self.score.domain, self.score.task_id, self.trial)


class Scorer:
    """Scores records against their task's label and context, with one set of reward weights."""

    def __init__(self, weights: RewardWeights | None = None):
        self.weights = weights if weights is not None else RewardWeights.load()
        self._contexts: dict[tuple[str, str], TaskContext] = {}

    @cached_property
    def fingerprint(self) -> str:
        """Changes whenever cached scores would: other weights, labels or handoff version."""
        from handoff import __version__
        from handoff.tasks.labels import labels_hash

        parts = {"weights": self.weights.model_dump(mode="json"), "labels": labels_hash(),
                 "handoff": __version__}
        return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()

    def _context(self, domain: str, task_id: str) -> TaskContext:
        key = (domain, task_id)
        if key not in self._contexts:
            self._contexts[key] = TaskContext.for_task(domain, get_task(domain, task_id))
        return self._contexts[key]

    def score(self, record: EpisodeRecord) -> ScoredEpisode:
        traj = Trajectory.from_simulation(
            record.simulation, record.domain, record.format_events,
            prompt_tokens=record.usage.prompt_tokens, completion_tokens=record.usage.completion_tokens)
        label = label_for(record.domain, record.task_id)
        score = score_episode(traj, label, self._context(record.domain, record.task_id), self.weights)
        return ScoredEpisode(model=record.model, step=record.step, trial=record.trial,
                             seed=record.seed, usage=record.usage, score=score)
