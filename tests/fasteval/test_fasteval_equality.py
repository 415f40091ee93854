"""handoff.fasteval gives the very RewardInfo of tau2's evaluate_simulation, on real tasks.

Gold replays of EVERY airline and retail task are compared with tau2's slow path. Replays with a
wrong write (an altered argument, a repeated write, a dropped write) are compared on every
WRONG_WRITE_STRIDE-th task with a write action: tau2's slow path costs ~1.1 s (airline) / ~0.6 s
(retail) CPU per evaluation, so all variants of all tasks would cost ~6 CPU minutes; this file
costs ~3 (gold 125 s, wrong writes 60 s), spread over all cores (tau2's side runs in a process
pool).
"""

from __future__ import annotations

import copy
import json
import multiprocessing
import os
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor

import pytest
from tau2.data_model.message import ToolMessage
from tau2.data_model.simulation import TerminationReason
from tau2.evaluator.evaluator import EvaluationType
from tau2.evaluator.evaluator import evaluate_simulation as tau2_evaluate_simulation
from tau2.registry import registry
from tau2.utils.utils import get_dict_hash

import handoff  # noqa: F401  (prepares the process for tau2)
from handoff.fasteval import evaluate_simulation, make_environment
from handoff.fasteval.environments import _spec
from handoff.fasteval.replay import replay, tau2_reward_info, wrong_write_variants

DOMAINS = ["airline", "retail"]
WRONG_WRITE_STRIDE = 5


@pytest.fixture(scope="module", params=DOMAINS)
def domain_tasks(request):
    domain = request.param
    return domain, registry.get_tasks_loader(domain)(None)


@pytest.fixture(scope="module")
def tau2_pool():
    """Worker processes for tau2's slow reference evaluations."""
    with ProcessPoolExecutor(os.cpu_count() or 1, mp_context=multiprocessing.get_context("spawn")) as pool:
        yield pool


def _compare(pool, cases: list, domain: str) -> list:
    """(label, tau2 RewardInfo, fasteval RewardInfo) for (label, simulation, task) cases."""
    sims, tasks = [c[1] for c in cases], [c[2] for c in cases]
    slow = pool.map(tau2_reward_info, sims, tasks, [domain] * len(cases), chunksize=4)
    fast = [evaluate_simulation(s, t, domain) for s, t in zip(sims, tasks)]
    return list(zip([c[0] for c in cases], slow, fast))


def _both(simulation, task, domain):
    slow = tau2_evaluate_simulation(simulation, task, EvaluationType.ALL, False, domain)
    fast = evaluate_simulation(simulation, task, domain)
    return slow, fast


def _assert_same(slow, fast, label):
    assert fast.reward == slow.reward, label
    assert fast.model_dump(mode="json") == slow.model_dump(mode="json"), label


def test_gold_replays_equal_on_every_task(domain_tasks, tau2_pool):
    domain, tasks = domain_tasks
    assert len(tasks) >= 50
    cases = [(f"{domain} task {t.id} gold", replay(t, domain), t) for t in tasks]
    for label, slow, fast in _compare(tau2_pool, cases, domain):
        _assert_same(slow, fast, label)
        assert slow.reward == 1.0, f"{label}: the gold replay should pass"
        assert fast.db_check.db_match


def test_wrong_writes_equal(domain_tasks, tau2_pool):
    domain, tasks = domain_tasks
    with_writes = [t for t in tasks if list(wrong_write_variants(t, domain))][::WRONG_WRITE_STRIDE]
    cases = [(f"{domain} task {t.id} {name}", replay(t, domain, actions), t)
             for t in with_writes for name, actions in wrong_write_variants(t, domain)]
    results = _compare(tau2_pool, cases, domain)
    for label, slow, fast in results:
        _assert_same(slow, fast, label)
        if label.endswith("dropped_write"):
            assert fast.reward == 0.0, f"{label}: a dropped write must fail"
    missed = sum(fast.db_check.db_match is False for _, _, fast in results)
    assert missed >= len(with_writes), "most wrong writes must miss the DB"


def test_premature_stop_and_corrupt_tool_results_match_tau2():
    task = registry.get_tasks_loader("airline")(None)[1]
    stopped = replay(task, "airline", termination=TerminationReason.MAX_STEPS)
    _assert_same(*_both(stopped, task, "airline"), "max steps")
    corrupt = replay(task, "airline")
    index = next(i for i, m in enumerate(corrupt.messages) if isinstance(m, ToolMessage))
    corrupt.messages[index] = corrupt.messages[index].model_copy(update={"content": '"forged"'})
    with pytest.raises(ValueError, match="Tool call"):
        tau2_evaluate_simulation(corrupt, task, EvaluationType.ALL, False, "airline")
    with pytest.raises(ValueError, match="Tool call"):
        evaluate_simulation(corrupt, task, "airline")


@pytest.mark.parametrize("domain", DOMAINS)
def test_hash_is_tau2_hash_and_shared_records_stay_pristine(domain):
    tau2_env = registry.get_env_constructor(domain)()
    pristine = tau2_env.get_db_hash()
    env = make_environment(domain)
    assert env.get_db_hash() == pristine
    task = next(t for t in registry.get_tasks_loader(domain)(None) if list(wrong_write_variants(t, domain)))
    for action in task.evaluation_criteria.actions:
        env.make_tool_call(action.name, requestor=action.requestor, **action.arguments)
        tau2_env.make_tool_call(action.name, requestor=action.requestor, **action.arguments)
    assert env.get_db_hash() == tau2_env.get_db_hash() != pristine
    # every replay above and in the other tests ran on the shared records: none may have changed
    shared_db, _ = _spec(domain).snapshot().new_db()
    assert get_dict_hash(shared_db.model_dump()) == pristine


def test_cow_collections_never_expose_shared_records_for_writing():
    env = make_environment("airline")
    users = env.tools.db.users
    user_id = next(iter(users))
    for view in (dict(users), {**users}, users.copy(), dict(users.items())):
        view[user_id].name.first_name = "Mallory"
    users.values()[0].name.first_name = "Mallory"
    assert make_environment("airline").tools.db.users[user_id].name.first_name != "Mallory"
    assert env.get_db_hash() != make_environment("airline").get_db_hash()
    assert json.loads(json.dumps(env.tools.db.users[user_id].model_dump()))["name"]["first_name"] == "Mallory"
    users.pop(user_id)
    assert user_id not in users and user_id in make_environment("airline").tools.db.users
    with pytest.raises(NotImplementedError):
        users.clear()
    assert copy.deepcopy(users) == users.copy()


def test_concurrent_threads_match_sequential():
    tasks = [t for t in registry.get_tasks_loader("retail")(None) if list(wrong_write_variants(t, "retail"))][:12]
    sims = [
        replay(t, "retail", list(wrong_write_variants(t, "retail"))[0][1]) if i % 2 else replay(t, "retail")
        for i, t in enumerate(tasks)
    ]
    sequential = [evaluate_simulation(s, t, "retail").model_dump() for s, t in zip(sims, tasks)]
    with ThreadPoolExecutor(max_workers=6) as pool:
        threaded = list(pool.map(lambda st: evaluate_simulation(*st, "retail").model_dump(), zip(sims, tasks)))
    assert threaded == sequential
    assert {r["reward"] for r in sequential} == {0.0, 1.0}
