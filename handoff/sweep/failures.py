"""Whose fault is a failed episode? The sweep's central decision, as types.

`classify` turns the exception an episode ended with into a `Fault`:
- `Fault.EPISODE`: the episode's own doing (an exception raised in it, its timeout): costs its shard
  an attempt;
- `Fault.INFRASTRUCTURE`: an engine or another process it used was lost (a node died, Ray is
  restarting it): costs nothing, the episode is resubmitted;
- `Fault.WORKER_DIED` / `Fault.WORKER_UNREACHABLE`: its own worker process died, or Ray cannot reach
  it. Either may be a node's loss (every worker of a killed node dies, and Ray answers "Connection
  refused" for its actors until the node's health checks fail) or the episode's crash (out of
  memory): `WorkerDeaths` holds such episodes until the verdict, which the worker's node gives.

As vLLM splits recoverable errors from dead engines and tau2 has INFRASTRUCTURE_ERROR. No Ray here but
`classify`'s lazy import of ray.exceptions: the rules are tested in milliseconds."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from enum import Enum

from pydantic import BaseModel, Field

from handoff.engine.base import ApiUnavailable
from handoff.sweep.engines import EngineUnavailableError, Place


class Fault(str, Enum):
    EPISODE = "episode"
    INFRASTRUCTURE = "infrastructure"
    WORKER_DIED = "worker_died"
    WORKER_UNREACHABLE = "worker_unreachable"

    @property
    def of_worker(self) -> bool:
        """Whether the verdict is the worker's node's (see WorkerDeaths)."""
        return self in (Fault.WORKER_DIED, Fault.WORKER_UNREACHABLE)


class ShardFailure(str, Enum):
    """Why a shard went to failed/<id>.json: its own episodes, or what the cluster lacked."""

    EPISODE = "episode"  # its episodes' own failures spent max_attempts
    INFRASTRUCTURE = "infrastructure"  # engines or workers unavailable past engine.load_timeout_s, or dead for good
    ENGINE_START = "engine_start"  # its checkpoint's engine (or the user simulator's) did not start
    CORRUPT = "corrupt"  # its shard file failed its check and was moved aside (rerun on resume)
    INTERNAL = "internal"  # the sweep ended with the shard neither complete nor failed (a bug)


class FailedShard(BaseModel):
    """failed/<id>.json. `kind` was added by issue 31; older records lack it."""

    shard_id: str
    kind: ShardFailure | None = None
    attempts: int
    error: str
    time: float = Field(default_factory=time.time)


def classify(exc: BaseException) -> Fault:
    """The fault an episode's exception says (from the driver's ray.get of the episode)."""
    import ray.exceptions as rx

    infrastructure = (EngineUnavailableError, ApiUnavailable)
    if isinstance(exc, infrastructure) or isinstance(getattr(exc, "cause", None), infrastructure):
        return Fault.INFRASTRUCTURE  # an engine dead for good or down past engine.load_timeout_s; an API's 429/5xx
    lost = (rx.WorkerCrashedError, rx.NodeDiedError, rx.ObjectLostError, rx.OwnerDiedError)
    died = isinstance(exc, lost) or (isinstance(exc, rx.RayActorError) and not exc.actor_init_failed)
    if isinstance(exc, rx.RayTaskError):  # raised inside the episode: by it, or by an engine actor lost under it
        return Fault.INFRASTRUCTURE if died else Fault.EPISODE
    if isinstance(exc, rx.ActorUnavailableError):  # Ray's "temporarily unavailable": not a death (yet)
        return Fault.WORKER_UNREACHABLE
    if isinstance(exc, (rx.RayActorError, rx.WorkerCrashedError)) and died:
        return Fault.WORKER_DIED
    return Fault.INFRASTRUCTURE if died else Fault.EPISODE


@dataclass
class Death:
    """A worker's death (or unreachability) that took episodes down, awaiting its verdict."""

    fault: Fault
    place: Place  # where the worker ran when its episodes were dispatched
    since: float
    items: list = field(default_factory=list)  # the driver's Inflight items it took down
    error: BaseException | None = None


class WorkerDeaths:
    """Worker deaths awaiting a verdict, by worker index; their workers take no episode meanwhile.

    A death is the episodes' own doing only when the worker is alive again on the node it died on and
    that node is alive: the node is healthy and its worker died anyway. A death whose node is lost (not
    listed alive), or whose worker came back on another node, is infrastructure. A worker Ray cannot
    reach that neither restarts nor loses its node within UNREACHABLE_S was never dead: infrastructure
    too (a network blip; the episode may be resubmitted). A death still undecided after `deadline_s`
    (the engine's load timeout: a worker RESTARTING for good while its node lives, its CPUs taken on a
    shared cluster) is infrastructure as well: its episodes go to the workers that live."""

    UNREACHABLE_S = 30.0

    def __init__(self, deadline_s: float = 900.0) -> None:
        self.pending: dict[int, Death] = {}
        self.deadline_s = deadline_s

    def died(self, worker: int, fault: Fault, place: Place, item, now: float, error: BaseException) -> None:
        death = self.pending.setdefault(worker, Death(fault, place, now))
        if fault is Fault.WORKER_DIED:
            death.fault = fault  # a death seen beside an unreachability is a death
        death.items.append(item)
        death.error = death.error or error

    @property
    def held(self) -> set[int]:
        return set(self.pending)

    def verdicts(self, places: dict[int, Place], nodes_alive: set[str], now: float) -> list[tuple[Death, bool]]:
        """The deaths decided now, each with whether it is the episodes' own doing (removed from pending)."""
        decided = []
        for worker, death in list(self.pending.items()):
            own = self.verdict(death, places.get(worker, Place("DEAD")), nodes_alive, now)
            if own is not None:
                decided.append((death, own))
                del self.pending[worker]
        return decided

    def verdict(self, death: Death, now_at: Place, nodes_alive: set[str], now: float) -> bool | None:
        """True: the episodes' doing; False: infrastructure; None: not known yet."""
        if death.place.node not in nodes_alive or now_at.state == "DEAD":
            return False  # its node is lost (or the worker is gone for good: not the episode's to pay)
        if now_at.restarts > death.place.restarts and now_at.state == "ALIVE":
            return now_at.node == death.place.node  # restarted: on its own healthy node, or elsewhere
        if death.fault is Fault.WORKER_UNREACHABLE and now - death.since > self.UNREACHABLE_S and now_at.state == "ALIVE":
            return False  # never died
        if now - death.since > self.deadline_s:
            return False  # not back within the deadline: a restart that may never complete
        return None
