"""handoff.task_identity on tau2's own gold replays of pinned tasks: a task is recovered by looking its
recorded checks up in the tasks themselves (not by action_id prefix), twins stay ambiguous, and a
given id that the checks contradict is not confirmed."""

from __future__ import annotations

import pytest

from handoff.fasteval import evaluate_simulation
from handoff.fasteval.replay import replay
from handoff.task_identity import AMBIGUOUS, CONFIRMED, RECOVERED, identify
from handoff.tasks import get_task


def graded(task_id: str, domain: str = "retail") -> dict:
    """tau2's gold replay of a pinned task, graded by tau2's evaluator, as a results file holds it."""
    task = get_task(domain, task_id)
    sim = replay(task, domain)
    sim.reward_info = evaluate_simulation(sim, task, domain)
    return sim.model_dump(mode="json")


def test_a_task_whose_action_ids_carry_the_next_tasks_prefix_is_recovered_as_itself():
    sim = graded("95")
    assert {c["action"]["action_id"].split("_")[0] for c in sim["reward_info"]["action_checks"]} == {"96"}
    del sim["task_id"]
    (found,) = identify([sim], "retail")
    assert (found.task_id, found.status) == ("95", RECOVERED)
    assert "are task 95's alone" in found.evidence


@pytest.mark.parametrize("given, status, task_id", [("94", CONFIRMED, "94"), ("3", RECOVERED, "94")])
def test_a_given_id_is_confirmed_by_its_checks_and_replaced_when_they_contradict_it(given, status, task_id):
    sim = {**graded("94"), "task_id": given}
    (found,) = identify([sim], "retail")
    assert (found.given, found.task_id, found.status) == (given, task_id, status)


def test_twin_tasks_without_an_id_stay_ambiguous_unless_the_other_is_held():
    twins = [graded("96"), graded("97")]
    for sim in twins:
        del sim["task_id"]
    assert [(f.task_id, f.status, f.candidates) for f in identify(twins, "retail")] == [
        (None, AMBIGUOUS, ("96", "97"))] * 2
    held = [twins[0], {**twins[1], "task_id": "97"}]  # one keeps its id: the other can only be 96
    first, second = identify(held, "retail")
    assert (first.task_id, first.status, second.status) == ("96", RECOVERED, CONFIRMED)
    assert "the others are held already: 97 (simulation 1)" in first.evidence
