"""Telecom rewards: handoff.fasteval gives tau2's own RewardInfo (ENV_ASSERTION and ACTION, the user's
device included) on gold replays of all 114 base tasks and on replays that miss a user or an agent
action. fasteval calls tau2's evaluator for telecom (about 10 ms an episode: nothing to make cheaper)."""

from __future__ import annotations

import pytest
from tau2.data_model.tasks import Action
from tau2.evaluator.evaluator import EvaluationType
from tau2.evaluator.evaluator import evaluate_simulation as tau2_evaluate_simulation

import handoff  # noqa: F401  (prepares the process for tau2)
from handoff.fasteval import evaluate_simulation, make_environment
from handoff.fasteval.replay import initialized_environment, replay
from handoff.tasks.upstream import has_gold_transfer, upstream_tasks

TRANSFER = Action(action_id="t", name="transfer_to_human_agents", arguments={"summary": "Please help."})


def _both(simulation, task):
    slow = tau2_evaluate_simulation(simulation, task, EvaluationType.ALL, False, "telecom")
    fast = evaluate_simulation(simulation, task, "telecom")
    assert fast.model_dump(mode="json") == slow.model_dump(mode="json"), task.id
    return fast


def test_gold_replays_of_every_base_task_earn_1_under_both():
    tasks = upstream_tasks("telecom")
    assert len(tasks) == 114
    for task in tasks:
        info = _both(replay(task, "telecom"), task)
        assert info.reward == 1.0, task.id
        bases = {b.value for b in task.evaluation_criteria.reward_basis}
        assert bases == ({"ENV_ASSERTION", "ACTION"} if has_gold_transfer(task) else {"ENV_ASSERTION"})
        assert all(check.met for check in info.env_assertions), task.id


def _without_last(task, requestor: str) -> list[Action]:
    gold = list(task.evaluation_criteria.actions)
    last = max(i for i, a in enumerate(gold) if a.requestor == requestor)
    return gold[:last] + gold[last + 1:]


@pytest.mark.parametrize("requestor", ["user", "assistant"])
def test_a_missed_action_fails_the_device_or_line_assertion_under_both(requestor):
    """The user's own device state decides (a user action dropped), and so does the line (an agent's)."""
    tasks = [t for t in upstream_tasks("telecom") if not has_gold_transfer(t)
             and any(a.requestor == requestor for a in t.evaluation_criteria.actions)][::6]
    assert len(tasks) >= 5
    for task in tasks:
        info = _both(replay(task, "telecom", _without_last(task, requestor)), task)
        assert info.reward == 0.0 and not all(check.met for check in info.env_assertions), task.id


def test_a_transfer_alone_passes_only_the_gold_transfer_tasks_under_both():
    tasks = upstream_tasks("telecom")
    positive = next(t for t in tasks if has_gold_transfer(t))
    negative = next(t for t in tasks if not has_gold_transfer(t))
    assert _both(replay(positive, "telecom", [TRANSFER]), positive).reward == 1.0
    assert _both(replay(negative, "telecom", [TRANSFER]), negative).reward == 0.0
    assert _both(replay(positive, "telecom", []), positive).reward == 0.0, "the ACTION check wants the transfer"


def test_the_replay_starts_from_the_tasks_initial_state():
    task = next(t for t in upstream_tasks("telecom") if "airplane_mode_on" in t.id)
    fresh, initialized = make_environment("telecom"), initialized_environment(task, "telecom")
    fresh.user_tools.db.surroundings.phone_number = initialized.user_tools.db.surroundings.phone_number
    assert "Airplane Mode" in initialized.user_tools.check_status_bar()
    assert "Airplane Mode" not in fresh.user_tools.check_status_bar()
