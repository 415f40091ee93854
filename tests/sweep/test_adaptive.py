"""Adaptive sweeps (docs/sweep.md, "Adaptive sweeps") and their known-answer test double, the
scripted engine's engine.script.accuracy."""

from __future__ import annotations

import pytest

import handoff  # noqa: F401
from handoff.sweep.config import ConfigError, validate
from handoff.sweep.engines import handoff_decision, seed_draw
from handoff.sweep.plan import episode_seed
from handoff.sweep.run import compose
from handoff.tasks.labels import load_labels

SCRIPTED = ["engine=scripted", "model=[tiny_hermes]"]


def _request(domain: str, task_id: str, seed: int) -> str:
    from handoff.agent.episode import agent_session

    return f"{agent_session(domain, task_id, seed)}/0123456789ab"


def _task(domain: str, should_transfer: bool) -> str:
    return next(t for (d, t), label in load_labels().items() if d == domain and label.should_transfer == should_transfer)


@pytest.mark.parametrize("should_transfer", [True, False])
def test_the_known_answer_agent_is_right_with_its_accuracy_drawn_from_the_episode_seed(should_transfer):
    task = _task("retail", should_transfer)
    seeds = [episode_seed(0, "retail", task, trial) for trial in range(2000)]
    for accuracy in (0.0, 0.3, 0.85, 1.0):
        transfers = [handoff_decision(_request("retail", task, s), accuracy) for s in seeds]
        right = [t == should_transfer for t in transfers]
        assert right == [seed_draw(s) < accuracy for s in seeds]
        assert abs(sum(right) / len(seeds) - accuracy) < 0.04


def test_accuracy_of_an_unknown_checkpoint_is_refused(tmp_path):
    base = [*SCRIPTED, f"run_dir={tmp_path}/run"]
    validate(compose([*base, "+engine.script.accuracy={tiny-hermes: 0.5}"]), check_paths=False)
    for bad, key in (("{nope: 0.5}", "engine.script.accuracy.nope"),
                     ("{tiny-hermes: 1.5}", "engine.script.accuracy.tiny-hermes")):
        with pytest.raises(ConfigError, match=key):
            validate(compose([*base, f"+engine.script.accuracy={bad}"]), check_paths=False)
