"""The sweep's failure policy and outage clocks, without Ray (the driver feeds them what Ray says).

- `FailurePolicy`: what a failed episode costs (failures.classify and the worker deaths' verdicts),
  the attempts of each shard, and the poison rule: an episode whose worker died under it
  SUSPECT_DEATHS times on a healthy node runs on a worker of its own, where each death costs an attempt.
  An episode that ran over episode_timeout_s while one of its replicas was down, restarted or had
  been down within `engine.load_timeout_s` (its suspects' turns alone) is rerun once for free
  (`EpisodeTimeout`, `Inflight.met_outage`).
- `OutageClocks`: how long dispatch has been paused (the user simulator's engines, every agent engine
  set or every worker down) and how long some checkpoints have been stranded (queued episodes no
  engine alive can take while the other slots go on); each expires after engine.load_timeout_s of its own.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass
from enum import Enum

from handoff.sweep.failures import Fault, WorkerDeaths, classify


class Cost(str, Enum):
    """What one failed episode costs its shard."""

    ATTEMPT = "attempt"  # the episode's own doing
    NOTHING = "nothing"  # infrastructure: resubmitted for free
    HELD = "held"  # its worker died: held until its node's verdict (FailurePolicy.judge)


class EpisodeTimeout(TimeoutError):
    """The driver gave an episode up: it ran over episode_timeout_s."""


class FailurePolicy:
    SUSPECT_DEATHS = 2  # an episode whose worker died under it this often (on a healthy node) runs alone

    def __init__(self, max_attempts: int, restart_timeout_s: float = 900.0):
        self.max_attempts = max_attempts
        self.restart_timeout_s = restart_timeout_s  # a held death undecided this long is infrastructure
        self.deaths = WorkerDeaths(restart_timeout_s)  # worker deaths awaiting their node's verdict
        self.worker_deaths: Counter = Counter()  # (shard id, episode key): deaths under it on a healthy node
        self.alone: set[int] = set()  # workers running a suspect episode and nothing else
        self.failures = 0  # episode failures charged
        self.lost = 0  # episodes resubmitted for free
        self.timed_out_after_outage: set = set()  # (shard id, episode key) rerun for free after a timeout

    def reset(self) -> None:
        """A new dispatch: no worker is kept for a suspect and no death awaits a verdict (what an earlier
        one left, when it ended early with its shards failed, is not waited for)."""
        self.alone = set()
        self.deaths = WorkerDeaths(self.restart_timeout_s)

    def worker_for(self, key: tuple, workers: list[int], load: list[int]) -> int | None:
        """The least loaded of `workers` not kept for a suspect; for a suspect an idle one, kept for it
        alone from now on, or None while there is none. `key`: (shard id, episode key)."""
        free = [w for w in workers if w not in self.alone]
        if self.worker_deaths[key] < self.SUSPECT_DEATHS:
            return min(free, key=load.__getitem__) if free else None
        idle = next((w for w in free if load[w] == 0), None)
        if idle is not None:
            self.alone.add(idle)
        return idle

    def release(self, worker: int, alone: bool) -> None:
        """An episode dispatched to `worker` (alone: kept for it) ended."""
        if alone:
            self.alone.discard(worker)

    def cost(self, item, exc: BaseException, now: float) -> Cost:
        """What the failure of `item` (the driver's Inflight) with `exc` costs; a worker's death holds it."""
        fault = classify(exc)
        if fault.of_worker:
            self.deaths.died(item.worker, fault, item.place, item, now, exc)
            return Cost.HELD
        if fault is Fault.INFRASTRUCTURE or self._outage_timed_out(item, exc):
            self.lost += 1
            return Cost.NOTHING
        return Cost.ATTEMPT

    def _outage_timed_out(self, item, exc: BaseException) -> bool:
        """Whether `item` ran over episode_timeout_s while a replica of its engines was down, restarted or
        recovering (ReplicaWaits), the first time: its clock was credited the time the replica was seen
        down, not the requests the death lost nor its suspects' turns alone after it
        (engines.RayEngineClient), so the overrun may be the outage's. Once per episode: a hung episode
        is charged the next time."""
        key = self.key(item)
        if not (isinstance(exc, EpisodeTimeout) and item.met_outage) or key in self.timed_out_after_outage:
            return False
        self.timed_out_after_outage.add(key)
        return True

    def judge(self, places: dict, nodes_alive: set[str], now: float) -> list[tuple[object, Cost, BaseException]]:
        """The held episodes decided now, each with its cost and the death's error: a death on a
        healthy node counts against each episode it took down, and costs an attempt to one that ran
        alone; a death whose node is lost costs nothing."""
        out = []
        for death, own in self.deaths.verdicts(places, nodes_alive, now):
            for item in death.items:
                if own:
                    self.worker_deaths[self.key(item)] += 1
                cost = Cost.ATTEMPT if own and item.alone else Cost.NOTHING
                self.lost += cost is Cost.NOTHING
                out.append((item, cost, death.error))
        return out

    def charge(self, st, attempt: int) -> bool:
        """Charge shard state `st` (attempt, and whether it failed) for a failure of an episode
        dispatched under `attempt`: the first failure of an attempt ends it. Returns whether the
        shard's attempts are spent."""
        self.failures += 1
        if attempt == st.attempt:
            st.attempt += 1
        return st.attempt > self.max_attempts

    def deaths_under(self, item) -> int:
        return self.worker_deaths[self.key(item)]

    @staticmethod
    def key(item) -> tuple:
        return item.state.shard.id, item.episode.key


@dataclass
class Tick:
    """What the clocks say after a look at the cluster."""

    credit_s: float = 0.0  # a pause ended now: its length, credited back to the episodes in flight
    pause_expired: bool = False  # paused past the timeout: every remaining shard fails
    strand_expired: bool = False  # the stranded checkpoints' shards fail


class OutageClocks:
    """Two clocks: a pause (nothing dispatched; in-flight episodes' time is credited back at its end) and
    stranded checkpoints (the other slots go on, their episodes' time runs as usual). A pause keeps the
    stranded clock running (both are unavailable); each expires past `timeout_s` of its own."""

    def __init__(self, timeout_s: float):
        self.timeout_s = timeout_s
        self.pause: float | None = None  # when each began (None: none now)
        self.strand: float | None = None

    def tick(self, now: float, pausing: bool, stranded: bool) -> Tick:
        tick = Tick()
        if self.pause is None and pausing:
            self.pause = now
        elif self.pause is not None and not pausing:
            tick.credit_s, self.pause = now - self.pause, None
        if not pausing:
            self.strand = (now if self.strand is None else self.strand) if stranded else None
        if self.pause is not None and now - self.pause > self.timeout_s:
            tick.pause_expired, self.pause = True, None
        if not pausing and self.strand is not None and now - self.strand > self.timeout_s:
            tick.strand_expired, self.strand = True, None
        return tick

    def reset(self) -> None:
        """Every remaining shard failed: no outage is timed any more."""
        self.pause = self.strand = None

    @property
    def paused(self) -> bool:
        return self.pause is not None


class ReplicaWaits:
    """A partial outage: a replica down (its node lost, Ray restarting it) while others of its set serve
    pauses nothing, but an episode whose engines include it may wait for it (its requests wait for the
    replacement, up to `timeout_s`, then fail as EngineUnavailableError, for free). Such an episode's
    clock stops while the replica is down: from the look that first saw it down (and DETECTION_S
    before) to the look that saw it back (its time is credited back look by look, `started` moved
    on), at most `timeout_s` per outage."""

    # The GCS lists a dead node's actors ALIVE until the node's health checks fail (Ray's defaults: a
    # check every 3 s, dead after 5 failures): the look that first sees a replica down credits those
    # seconds back too (at most the episode's own time so far).
    DETECTION_S = 15.0

    def __init__(self, timeout_s: float):
        self.timeout_s = timeout_s
        self.last: float | None = None  # the previous look
        self.restarts: dict = {}  # replica -> its restarts at the previous look
        self.down_at: dict = {}  # replica -> the last look that saw it down (or restarted since the look before)

    def credit(self, items, down: set, now: float, paused: bool, restarts: dict | None = None) -> None:
        """Look at the in-flight `items` (each with `replicas`, `started`, `waited_s`, `waiting`) with
        the replicas `down` now; `paused`: the time since the last look was a pause's (credited by it);
        `restarts`: each replica's restart count (one that rose since the last look was down meanwhile,
        maybe never seen so: it counts as first seen waiting, for the time since the last look too)."""
        elapsed, self.last = (0.0 if self.last is None else now - self.last), now
        restarts = restarts or {}
        bounced = {r for r, n in restarts.items() if n > self.restarts.get(r, n)}
        self.restarts = restarts
        self.down_at |= dict.fromkeys(down | bounced, now)
        for item in items:
            waits = bool(down & item.replicas)
            if paused:
                pass
            elif item.waiting:
                self._give(item, elapsed)
            elif waits or bounced & item.replicas:  # first seen waiting: the node's death may have been seen late
                self._give(item, min(self.DETECTION_S + (elapsed if not waits else 0.0), now - item.started))
            item.met_outage = item.met_outage or self._recovering(item.replicas, now)
            if not waits:
                item.waited_s = 0.0  # the outage is over: the next one gets its own timeout_s
            item.waiting = waits

    def _recovering(self, replicas: set, now: float) -> bool:
        """Whether one of `replicas` was down within the last `timeout_s`: its death's cost may not be
        over (its suspects, resubmitted alone, take their turns one after the other once it is back)."""
        return any(now - self.down_at.get(r, -math.inf) <= self.timeout_s for r in replicas)

    def _give(self, item, seconds: float) -> None:
        credit = max(0.0, min(seconds, self.timeout_s - item.waited_s))
        item.started += credit
        item.waited_s += credit
