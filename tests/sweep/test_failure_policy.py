"""The failure policy and the outage clocks (handoff.sweep.policy), without Ray: Ray's exceptions built
here, the workers' places and the nodes alive given by the test."""

from __future__ import annotations

from types import SimpleNamespace

import ray.exceptions as rx

from handoff.sweep.engines import EngineUnavailableError
from handoff.sweep.failures import Place
from handoff.sweep.policy import Cost, EpisodeTimeout, FailurePolicy, OutageClocks, ReplicaWaits

HEALTHY, LOST = "node-healthy", "node-lost"


def item(trial: int, worker: int = 0, node: str = HEALTHY, alone: bool = False, attempt: int = 1,
         met_outage: bool = False):
    """What the driver's Inflight holds of an episode of shard "s"."""
    st = SimpleNamespace(shard=SimpleNamespace(id="s"), attempt=1)
    return SimpleNamespace(state=st, episode=SimpleNamespace(key=("m", "retail", "0", trial)), worker=worker,
                           place=Place("ALIVE", node, 0), alone=alone, attempt=attempt, met_outage=met_outage)


def restarted(node: str = HEALTHY) -> dict:
    return {0: Place("ALIVE", node, 1)}


def test_an_episodes_own_error_costs_an_attempt_and_infrastructure_nothing():
    policy = FailurePolicy(max_attempts=3)
    assert policy.cost(item(0), ValueError("bad tool call"), 0.0) is Cost.ATTEMPT
    assert policy.cost(item(0), EngineUnavailableError("every replica is dead"), 0.0) is Cost.NOTHING
    assert policy.lost == 1 and policy.deaths.held == set()


def test_a_node_loss_costs_nothing_however_often_it_is_reported():
    """The regression: the dead node's worker answers "Connection refused" until the GCS lists the node
    dead. Its episode is held (its worker takes nothing) and, once the node is listed dead, resubmitted
    for free: no attempt, no death counted against it, so it never runs alone either."""
    policy = FailurePolicy(max_attempts=3)
    refused = rx.ActorUnavailableError("Connection refused", None)
    assert policy.cost(item(0, node=LOST), refused, 0.0) is Cost.HELD and policy.deaths.held == {0}
    assert policy.judge({0: Place("ALIVE", LOST, 0)}, {LOST, HEALTHY}, 5.0) == []  # listed alive a while
    [(held, cost, error)] = policy.judge({0: Place("RESTARTING", LOST, 0)}, {HEALTHY}, 11.0)
    assert cost is Cost.NOTHING and error is refused and policy.deaths_under(held) == 0 and policy.lost == 1
    assert policy.worker_for(policy.key(held), [0, 1], [0, 0]) == 0 and policy.alone == set()


def test_a_poisoned_episode_is_charged_only_alone_and_its_neighbour_never():
    """Trial 0 kills its worker (on a healthy node) every time, trial 1 beside it: the first two deaths
    cost nothing; then each runs alone on an idle worker, and each death there costs an attempt (trial 1,
    alone, no longer dies)."""
    policy, died = FailurePolicy(max_attempts=2), rx.ActorDiedError()
    for _ in range(2):
        for trial in (0, 1):
            assert policy.cost(item(trial), died, 0.0) is Cost.HELD
        assert [cost for _, cost, _ in policy.judge(restarted(), {HEALTHY}, 3.0)] == [Cost.NOTHING] * 2
    suspect, innocent = policy.key(item(0)), policy.key(item(1))
    assert policy.worker_for(suspect, [0, 1], [1, 0]) == 1 and policy.alone == {1}  # the idle one, kept
    assert policy.worker_for(suspect, [0], [1]) is None  # no idle worker: it waits
    assert policy.worker_for(innocent, [0, 1], [0, 1]) == 0 and policy.alone == {0, 1}  # beside it: a suspect too
    assert policy.worker_for(policy.key(item(2)), [0, 1, 2], [0, 0, 5]) == 2  # others: never a kept worker
    alone = item(0, worker=1, alone=True)
    policy.release(1, alone=True)
    assert policy.cost(alone, died, 0.0) is Cost.HELD
    [(_, cost, _)] = policy.judge({1: Place("ALIVE", HEALTHY, 1)}, {HEALTHY}, 3.0)
    assert cost is Cost.ATTEMPT and policy.deaths_under(alone) == 3


def test_a_death_alone_on_a_lost_node_costs_nothing():
    policy = FailurePolicy(max_attempts=2)
    assert policy.cost(item(0, node=LOST, alone=True), rx.ActorDiedError(), 0.0) is Cost.HELD
    [(held, cost, _)] = policy.judge(restarted(HEALTHY), {HEALTHY}, 80.0)  # back on the replacement node
    assert cost is Cost.NOTHING and policy.deaths_under(held) == 0


def test_one_attempt_per_crash_and_a_shard_spent_after_max_attempts():
    policy = FailurePolicy(max_attempts=2)
    a, b = item(0), item(1)
    st = b.state = a.state
    assert policy.charge(st, a.attempt) is False and st.attempt == 2
    assert policy.charge(st, b.attempt) is False and st.attempt == 2  # the same attempt's second failure
    assert policy.charge(st, 2) is True and policy.failures == 3


def test_a_pause_is_credited_and_expires_on_its_own_clock():
    clocks = OutageClocks(timeout_s=100)
    assert clocks.tick(0, pausing=False, stranded=True).strand_expired is False  # stranded from t=0
    assert clocks.tick(90, pausing=True, stranded=True).pause_expired is False
    tick = clocks.tick(101, pausing=True, stranded=True)
    assert not tick.pause_expired and not tick.strand_expired and clocks.paused  # a pause 11 s old
    tick = clocks.tick(150, pausing=False, stranded=True)  # the stranded clock ran on under the pause
    assert tick.credit_s == 60 and tick.strand_expired and not clocks.paused
    assert clocks.tick(160, pausing=True, stranded=False).pause_expired is False
    assert clocks.tick(261, pausing=True, stranded=False).pause_expired is True


def test_a_stranded_outage_credits_nothing():
    clocks = OutageClocks(timeout_s=100)
    clocks.tick(0, pausing=False, stranded=True)
    assert clocks.tick(50, pausing=False, stranded=False).credit_s == 0 and clocks.strand is None
    clocks.tick(60, pausing=True, stranded=False)
    clocks.reset()
    assert not clocks.paused and clocks.tick(70, pausing=False, stranded=False).credit_s == 0


def test_a_new_dispatch_starts_with_no_held_episode_nor_kept_worker():
    policy = FailurePolicy(max_attempts=2)
    policy.cost(item(0), rx.ActorDiedError(), 0.0)
    policy.alone.add(1)
    policy.reset()
    assert policy.deaths.held == set() and policy.alone == set()


def test_a_worker_whose_restart_never_completes_releases_its_episodes_for_free():
    """Issue 46 defect 1: the worker died under two episodes and stays RESTARTING for good (its CPUs
    taken on a shared cluster) while its node lives. Before: held forever (no verdict, the sweep hangs).
    Now: past the deadline (the engine's load timeout by default) the death is infrastructure, its
    episodes resubmitted at no cost, and nothing counts against them."""
    policy, died = FailurePolicy(max_attempts=2), rx.ActorDiedError()
    for trial in (0, 1):
        assert policy.cost(item(trial), died, 0.0) is Cost.HELD
    restarting = {0: Place("RESTARTING", HEALTHY, 0)}
    assert policy.judge(restarting, {HEALTHY}, 60.0) == []  # a restart may take minutes (tau2's import)
    decided = policy.judge(restarting, {HEALTHY}, 10_000.0)
    assert [cost for _, cost, _ in decided] == [Cost.NOTHING] * 2 and policy.deaths.held == set()
    assert [policy.deaths_under(held) for held, _, _ in decided] == [0, 0] and policy.lost == 2


def test_a_partial_outage_credits_its_waiting_episodes_at_most_the_load_timeout():
    """A replica RESTARTING for good: the episode that may wait for it gets at most timeout_s back (its
    requests fail for free by then), so an episode hung on its own still times out; none during a pause
    (the pause credits it)."""
    waits = ReplicaWaits(timeout_s=100)
    episode = SimpleNamespace(replicas={"b"}, started=0.0, waited_s=0.0, waiting=False, met_outage=False)
    for now in range(0, 400, 2):
        waits.credit([episode], {"b"}, float(now), paused=now >= 300)
    assert episode.started == 100.0 and episode.waited_s == 100.0


def test_a_replica_that_restarted_between_two_looks_counts_as_seen_down():
    """Never seen down (RESTARTING for less than a look), but its restart count rose: its episodes get
    the time since the last look and the node-detection allowance back; the others nothing."""
    waits = ReplicaWaits(timeout_s=100)
    uses, other = (SimpleNamespace(replicas={r}, started=0.0, waited_s=0.0, waiting=False, met_outage=False)
                   for r in ("b", "c"))
    waits.credit([uses, other], set(), 40.0, paused=False, restarts={"b": 0, "c": 0})
    waits.credit([uses, other], set(), 42.0, paused=False, restarts={"b": 1, "c": 0})
    assert uses.started == 2.0 + ReplicaWaits.DETECTION_S and other.started == 0.0
    assert uses.met_outage and not other.met_outage


def test_a_timeout_after_an_outage_under_the_episode_is_rerun_once_for_free():
    """A replica's death loses the requests it served and its suspects then run alone one by one, none
    of which the outage credit covers: the first time an episode that met an outage of its replicas runs
    over episode_timeout_s, it is rerun for free; the next time it is charged (a hung episode ends).
    A timeout without an outage, or another error after one, costs an attempt."""
    policy = FailurePolicy(max_attempts=3)
    timeout = EpisodeTimeout("episode ran over 120.0s")
    assert policy.cost(item(0, met_outage=True), timeout, 0.0) is Cost.NOTHING
    assert policy.cost(item(0, met_outage=True), timeout, 0.0) is Cost.ATTEMPT
    assert policy.cost(item(1), timeout, 0.0) is Cost.ATTEMPT
    assert policy.cost(item(2, met_outage=True), ValueError("bad tool call"), 0.0) is Cost.ATTEMPT
    assert policy.lost == 1


def test_an_episode_dispatched_while_a_replica_recovers_has_met_its_outage():
    """A replica seen down at t=40 and back at t=42: an episode dispatched at t=90 on its engines never
    saw it down, but may wait behind its suspects' turns alone; within timeout_s of the outage it counts
    as having met it, later not, nor on other engines."""
    waits = ReplicaWaits(timeout_s=100)
    waits.credit([], {"b"}, 40.0, paused=False)
    waits.credit([], set(), 42.0, paused=False)
    late, other = (SimpleNamespace(replicas={r}, started=90.0, waited_s=0.0, waiting=False, met_outage=False)
                   for r in ("b", "c"))
    waits.credit([late, other], set(), 92.0, paused=False)
    assert late.met_outage and not other.met_outage and late.started == 90.0
    after = SimpleNamespace(replicas={"b"}, started=150.0, waited_s=0.0, waiting=False, met_outage=False)
    waits.credit([after], set(), 152.0, paused=False)
    assert not after.met_outage
