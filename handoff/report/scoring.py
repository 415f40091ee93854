"""Score episode records with the rules package: the one place where the reporting layer meets
the rules, the labels and the tasks."""

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
from handoff.tasks import get_task
from handoff.tasks.labels import label_for


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


class Scorer:
    """Scores records against their task's label and context, with one set of reward weights.
    Labels and contexts are looked up once per task."""

    def __init__(self, weights: RewardWeights | str = "default"):
        self.weights = weights if isinstance(weights, RewardWeights) else RewardWeights.load(weights)
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
            context = TaskContext.for_task(domain, get_task(domain, task_id))
            self._tasks[key] = (label_for(domain, task_id), context)
        return self._tasks[key]

    def score(self, record: EpisodeRecord) -> ScoredEpisode:
        traj = Trajectory.from_simulation(
            record.simulation, record.domain, record.format_events,
            prompt_tokens=record.usage.prompt_tokens, completion_tokens=record.usage.completion_tokens)
        label, context = self._task(record.domain, record.task_id)
        return ScoredEpisode(model=record.model, step=record.step, trial=record.trial, seed=record.seed,
                             score=score_episode(traj, label, context, self.weights))


def rules_sha256() -> str:
    """One sha256 over the rules package's source: an edited rule invalidates cached scores."""
    import handoff.rules

    digest = hashlib.sha256()
    for path in sorted(Path(handoff.rules.__file__).parent.glob("*.py")):
        digest.update(path.name.encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()
