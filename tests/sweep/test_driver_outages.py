"""The driver's two outage clocks, without Ray (actor states and the clock are the test's): a pause
(dispatch stops: the user's engines, every agent engine set or the workers down; in-flight episodes'
time is credited back at its end) and stranded checkpoints (queued episodes no engine alive can take,
while the other slots go on). Each fails its own work after engine.load_timeout_s of its own."""

from __future__ import annotations

import pytest

import handoff  # noqa: F401
from handoff.sweep import clock as sweep_clock
from handoff.sweep import driver as driver_module
from handoff.sweep.config import checkpoints, validate
from handoff.sweep.driver import Driver, Inflight
from handoff.sweep.failures import Place
from handoff.sweep.run import compose
from handoff.sweep.rundir import SweepRun
from handoff.sweep.worker import EngineRef

TIMEOUT = 100


class Actor:
    def __init__(self, name: str):
        self._actor_id = name


class States:
    """The engine pool's placement: only the replicas' states, from the test's dict."""

    def __init__(self, states: dict):
        self.states = states

    def place(self, replica) -> Place:
        return Place(self.states[replica._actor_id])


class Placement:
    """Two agent engine sets (rolling slots) A and B; B's checkpoint is stranded while B is down."""

    def __init__(self, cfg):
        a, b = checkpoints(cfg)[:1] * 2
        self.a, self.b = EngineRef(a, [Actor("a")]), EngineRef(b, [Actor("b")])

    def engine_sets(self):
        return [self.a, self.b]

    def stranded(self, alive):
        return [self.b] if "b" not in alive else []


@pytest.fixture
def world(tmp_path, monkeypatch):
    cfg = validate(compose([f"run_dir={tmp_path}/run", "engine=scripted", f"engine.load_timeout_s={TIMEOUT}"]))
    states, clock = {"a": "ALIVE", "b": "ALIVE", "w": "ALIVE"}, [1000.0]
    d = Driver(cfg, SweepRun(tmp_path / "run"), checkpoints(cfg), [], progress=False, placement=States(states))
    d.workers = [Actor("w")]
    monkeypatch.setattr(driver_module, "actor_place", lambda handle: Place(states[handle._actor_id]))
    monkeypatch.setattr(sweep_clock, "monotonic", lambda: clock[0])

    def at(t: float, **now):
        clock[0] = 1000.0 + t
        states.update(now)
        return d._live(Placement(cfg), None, inflight)

    inflight = {"ref": Inflight(None, None, 0, 1, started=1000.0)}
    return d, at, inflight


def test_a_pause_that_starts_late_in_a_stranded_outage_gets_its_own_clock(world):
    """Checkpoint B stranded from t=0; the workers restart at t=90 (a pause): at t=101 the stranded
    checkpoint's shards fail, the pause does not (11 s old); it fails only past t=190."""
    _, at, _ = world
    assert at(0, b="RESTARTING").dead == []
    assert at(90, w="RESTARTING").fatal == ""
    live = at(101)
    assert live.fatal == "" and live.dead == [] and not live.ready, "a pause 11 s old failed the sweep"
    live = at(150, w="ALIVE")  # the pause ends; the stranded clock ran on under it
    assert live.fatal == "" and len(live.dead) == 1 and "load_timeout_s=100" in live.dead[0][1]
    assert at(160, w="RESTARTING").fatal == "" and at(250).fatal == ""
    assert "episode workers" in at(261).fatal


def test_a_stranded_outage_neither_suspends_nor_credits_the_other_slots_episode_time(world):
    """While only B's checkpoint is stranded, the others' episodes run (and time out) as usual: their
    time is credited back only after a pause."""
    d, at, inflight = world
    at(0, b="RESTARTING")
    assert not d.clocks.paused  # _dispatch checks episode timeouts while nothing pauses
    at(50, b="ALIVE")
    assert inflight["ref"].started == 1000.0
    at(60, w="RESTARTING")
    assert d.clocks.paused
    at(80, w="ALIVE")
    assert not d.clocks.paused and inflight["ref"].started == 1020.0


class OneSet:
    """One agent engine set of two replicas, a and b (the sequential schedule): b lost pauses nothing."""

    def __init__(self, cfg):
        self.ref = EngineRef(checkpoints(cfg)[0], [Actor("a"), Actor("b")])

    def engine_sets(self):
        return [self.ref]

    def stranded(self, alive):
        return []


def test_a_partial_outage_stops_the_clocks_of_the_episodes_that_may_wait_for_the_lost_replica(world, monkeypatch):
    """Issue 46 defect 3: replica b of two lost with its node (RESTARTING from t=10 to t=70): nothing
    pauses (a serves on), but an episode whose engines include b may wait for it, and its clock stops
    (before: it ran on, and the episode was cancelled and charged); one that uses only a runs on."""
    d, _, inflight = world
    inflight["waits"] = Inflight(None, None, 0, 1, started=1000.0)
    inflight["waits"].replicas = {"a", "b"}
    inflight["other"] = Inflight(None, None, 0, 1, started=1000.0)
    inflight["other"].replicas = {"a"}
    placement = OneSet(d.cfg)

    def at(t, **now):
        monkeypatch.setattr(sweep_clock, "monotonic", lambda: 1000.0 + t)
        d.pool.placement.states.update(now)
        return d._live(placement, None, inflight)

    for t, now in ((0, {}), (10, {"b": "RESTARTING"}), (12, {}), (40, {}), (70, {"b": "ALIVE"}), (80, {})):
        live = at(t, **now)
        assert live.ready and not d.clocks.paused
    assert inflight["other"].started == 1000.0
    # credited the outage, 60 s, and the 10 s it ran before it was seen (a node's death is seen late)
    assert inflight["waits"].started == 1000.0 + 70
