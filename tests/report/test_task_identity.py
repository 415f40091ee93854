"""handoff.task_identity on tau2's own gold replays of pinned tasks: a task is recovered by looking its
recorded checks up in the tasks themselves (not by action_id prefix), twins stay ambiguous, and a
given id that the checks contradict is not confirmed."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from handoff.fasteval import evaluate_simulation
from handoff.fasteval.replay import replay
from handoff.task_identity import AMBIGUOUS, CONFIRMED, RECOVERED, identify
from handoff.tasks import get_task

SHARED = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "real-trajectories"


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


def test_twin_tasks_are_told_apart_by_their_recorded_action_ids():
    # 96 and 97: the same checks (names and arguments), the same user; 96's action ids are 97_*, 97's 98_*
    twins = [graded("97"), graded("96")]
    for sim in twins:
        del sim["task_id"]
    found = identify(twins, "retail")
    assert [(f.task_id, f.status) for f in found] == [("97", RECOVERED), ("96", RECOVERED)]
    assert "but their recorded action ids (98_0..98_1) are task 97's alone" in found[0].evidence


def test_a_given_id_naming_the_twin_of_the_recorded_action_ids_task_is_contradicted():
    (found,) = identify([{**graded("84"), "task_id": "83"}], "retail")
    assert (found.given, found.task_id, found.status) == ("83", "84", RECOVERED)
    assert "given id '83' contradicted" in found.evidence


def without_action_ids(sim: dict) -> dict:
    for check in sim["reward_info"]["action_checks"]:
        check["action"]["action_id"] = ""
    del sim["task_id"]
    return sim


def test_twin_tasks_without_ids_stay_ambiguous_unless_the_other_is_held():
    twins = [without_action_ids(graded("96")), without_action_ids(graded("97"))]
    assert [(f.task_id, f.status, f.candidates) for f in identify(twins, "retail")] == [
        (None, AMBIGUOUS, ("96", "97"))] * 2
    held = [twins[0], {**twins[1], "task_id": "97"}]  # one keeps its id: the other can only be 96
    first, second = identify(held, "retail")
    assert (first.task_id, first.status, second.status) == ("96", RECOVERED, CONFIRMED)
    assert "the others are held already: 97 (simulation 1)" in first.evidence


@pytest.mark.skipif(not SHARED.is_dir(), reason=f"{SHARED} (the shared real trajectories) is absent")
@pytest.mark.parametrize("name", sorted(p.name for p in SHARED.glob("*.json.gz")) if SHARED.is_dir() else [])
def test_a_shared_file_without_its_task_ids_recovers_none_wrong(name):
    """Leave the ids out: every task recovered is the one the file's own (confirmed) ids, or its
    ids-given import (the retail file, renumbered), name; the retail twins are the tasks whose dialogues
    they are (task 41's user names the jigsaw before the address, 42's the address first; 83's asks to
    return the dearer tablet, 84's the cheaper one and changes its mind; 72's user and 97's name the
    change of items first, 71's and 96's the address)."""
    data = json.loads(gzip.decompress((SHARED / name).read_bytes()))
    domain, trials = data["info"]["environment_info"]["domain_name"], data["info"]["num_trials"]
    given = identify(data["simulations"], domain, trials)
    stripped = identify([{k: v for k, v in s.items() if k != "task_id"} for s in data["simulations"]], domain, trials)
    recovered = [(g.task_id, s.task_id) for g, s in zip(given, stripped) if s.task_id is not None]
    assert recovered and all(g == s for g, s in recovered)
    assert len(recovered) >= len(given) - 2
    if domain == "airline":
        assert all(g.status == CONFIRMED for g in given)
    else:
        assert len(recovered) == 114
        assert {i: stripped[i].task_id for i in (28, 49, 36, 112, 35, 79, 11, 34)} == {
            28: "41", 49: "42", 36: "84", 112: "83", 35: "72", 79: "71", 11: "97", 34: "96"}
