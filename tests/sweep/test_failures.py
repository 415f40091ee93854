"""Whose fault is a failed episode (handoff.sweep.failures), without Ray: Ray's exceptions built here,
the worker's place and the nodes alive given by the test."""

from __future__ import annotations

import pytest
import ray.exceptions as rx

from handoff.sweep.engines import EngineUnavailableError
from handoff.sweep.failures import FailedShard, Fault, Place, ShardFailure, WorkerDeaths, classify


def raised_in_episode(cause: Exception) -> Exception:
    """What the driver's ray.get raises for an exception raised inside the worker's episode."""
    return rx.RayTaskError("run", "Traceback ...", cause, proctitle="ray::EpisodeWorker.run", pid=1,
                           ip="127.0.0.1").as_instanceof_cause()


@pytest.mark.parametrize("exc, fault", [
    (ValueError("the agent's tool call did not parse"), Fault.EPISODE),
    (TimeoutError("episode ran over 600s"), Fault.EPISODE),
    (raised_in_episode(KeyError("reservation")), Fault.EPISODE),
    (rx.RayActorError(actor_init_failed=True), Fault.EPISODE),  # the worker cannot even start
    (EngineUnavailableError("agent engine: every replica is dead"), Fault.INFRASTRUCTURE),
    (raised_in_episode(EngineUnavailableError("user engine down past load_timeout_s")), Fault.INFRASTRUCTURE),
    (raised_in_episode(rx.ActorDiedError()), Fault.INFRASTRUCTURE),  # an engine replica died under it
    (rx.NodeDiedError("node 1 died"), Fault.INFRASTRUCTURE),
    (rx.OwnerDiedError("00" * 28, None, ""), Fault.INFRASTRUCTURE),
    (rx.ActorDiedError(), Fault.WORKER_DIED),
    (rx.WorkerCrashedError(), Fault.WORKER_DIED),
    (rx.ActorUnavailableError("Connection refused", None), Fault.WORKER_UNREACHABLE),
])
def test_classify(exc, fault):
    assert classify(exc) is fault


def test_only_a_workers_loss_waits_for_its_nodes_verdict():
    assert Fault.WORKER_DIED.of_worker and Fault.WORKER_UNREACHABLE.of_worker
    assert not Fault.EPISODE.of_worker and not Fault.INFRASTRUCTURE.of_worker


N1, N2 = "node1", "node2"
AT_N1 = Place("ALIVE", N1, restarts=0)


def judged(fault: Fault, now_at: Place, alive: set[str], after_s: float = 1.0) -> bool | None:
    """The verdict on a death of the worker that ran at AT_N1, `after_s` after it (None: not yet)."""
    deaths = WorkerDeaths()
    deaths.died(0, fault, AT_N1, "episode", 100.0, RuntimeError())
    decided = deaths.verdicts({0: now_at}, alive, 100.0 + after_s)
    assert deaths.held == (set() if decided else {0})  # a worker awaiting its verdict takes nothing
    return decided[0][1] if decided else None


@pytest.mark.parametrize("fault", [Fault.WORKER_DIED, Fault.WORKER_UNREACHABLE])
def test_a_death_on_a_healthy_node_is_the_episodes(fault):
    """Ray restarted the worker on its own node, alive: the node is healthy, its worker died anyway."""
    assert judged(fault, Place("ALIVE", N1, restarts=1), {N1, N2}) is True


@pytest.mark.parametrize("fault", [Fault.WORKER_DIED, Fault.WORKER_UNREACHABLE])
def test_a_death_on_a_lost_node_is_infrastructure(fault):
    """The node is not listed alive: whatever the worker's entry says (the GCS lists it ALIVE on the
    dead node for a while, or RESTARTING until a node has room), nothing is charged."""
    for now_at in (AT_N1, Place("RESTARTING", N1), Place("ALIVE", N2, restarts=1), Place("DEAD", N1)):
        assert judged(fault, now_at, {N2}) is False


def test_a_worker_back_on_another_node_is_infrastructure():
    assert judged(Fault.WORKER_DIED, Place("ALIVE", N2, restarts=1), {N1, N2}) is False


def test_the_node_loss_regression_waits_for_the_node():
    """The issue's case: "Connection refused" from a killed node's worker, which the GCS still lists
    ALIVE on a node it still lists alive (until its health checks fail): no verdict, and the worker
    takes no episode meanwhile; once the node is listed dead, infrastructure."""
    deaths = WorkerDeaths()
    deaths.died(0, Fault.WORKER_UNREACHABLE, AT_N1, "a", 100.0, rx.ActorUnavailableError("Connection refused", None))
    assert deaths.verdicts({0: AT_N1}, {N1, N2}, 105.0) == [] and deaths.held == {0}
    [(death, own)] = deaths.verdicts({0: Place("RESTARTING", N1)}, {N2}, 111.0)
    assert own is False and death.items == ["a"] and deaths.held == set()


def test_an_unreachable_worker_that_never_died_is_released():
    """Neither restarted nor its node lost past UNREACHABLE_S: a blip, infrastructure. A death is
    waited for longer: Ray restarts the worker (importing tau2 takes a while on a busy machine)."""
    late = WorkerDeaths.UNREACHABLE_S + 1
    assert judged(Fault.WORKER_UNREACHABLE, AT_N1, {N1}, after_s=5) is None
    assert judged(Fault.WORKER_UNREACHABLE, AT_N1, {N1}, after_s=late) is False
    assert judged(Fault.WORKER_DIED, Place("RESTARTING", N1), {N1}, after_s=late) is None


def test_the_episodes_one_death_took_down_share_its_verdict():
    deaths = WorkerDeaths()
    deaths.died(0, Fault.WORKER_UNREACHABLE, AT_N1, "a", 100.0, RuntimeError("first"))
    deaths.died(0, Fault.WORKER_DIED, AT_N1, "b", 100.5, RuntimeError("second"))
    [(death, own)] = deaths.verdicts({0: Place("ALIVE", N1, restarts=1)}, {N1}, 110.0)
    assert own is True and death.items == ["a", "b"] and death.fault is Fault.WORKER_DIED


def test_a_failed_record_from_before_its_kind_still_reads():
    old = FailedShard.model_validate_json('{"shard_id": "s", "attempts": 3, "error": "x", "time": 1.0}')
    assert old.kind is None and old.attempts == 3
    new = FailedShard(shard_id="s", kind=ShardFailure.INFRASTRUCTURE, attempts=0, error="unavailable")
    assert FailedShard.model_validate_json(new.model_dump_json()).kind is ShardFailure.INFRASTRUCTURE
