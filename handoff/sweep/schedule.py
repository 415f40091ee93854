"""Where each episode runs and when engines load: the sweep's two schedules (`schedule=`).

- `sequential`: one checkpoint at a time: load all its replicas, run its episodes, wait for the
  slowest, stop the engines, load the next (`Fixed`: one checkpoint's queue on its engines).
- `rolling` (`Rolling`): each agent replica is a slot that holds one checkpoint at a time (the
  user simulator's engines are pinned slots for the checkpoints that share them). Episodes
  go to the least busy slot holding their checkpoint, each pinned to that one replica (sticky: the
  prefix cache serves all its turns). A slot whose checkpoint has nothing left to dispatch and
  nothing in flight on it moves on at once, loading the earliest checkpoint that still has more
  queued work than its slots have room for (in place: `EngineHost.load`, no new process; a vLLM
  engine takes a checkpoint of the same architecture by reloading its weights), while the
  other slots finish their episodes. Each checkpoint's episodes are dispatched longest first, by
  what the same task and trial took on earlier checkpoints, so that the last ones are short.

Engines that die behave the same under both: a checkpoint whose every replica (every slot holding
it) is dead for good fails its unfinished shards (the driver's `_live`); under `rolling` a slot
whose actor is dead for good, or whose load failed or ran past engine.load_timeout_s, is then
retired and a fresh slot (a new actor) takes its place for the next checkpoint that needs one,
as `sequential` starts new engines for the next checkpoint. A checkpoint whose load failed on one
slot is loaded on no further slot; the slots that hold it already go on serving it, and its queued
shards fail only once no slot holds it. A pinned slot serves on those of the user simulator's
replicas that are alive, with its room shared out over them.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from handoff.sweep import clock
from handoff.sweep.config import Checkpoint
from handoff.sweep.engines import actor_state
from handoff.sweep.worker import EngineRef


class Fixed:
    """The sequential schedule's placement: one checkpoint's episodes on its loaded engines."""

    def __init__(self, queue: deque, engines: EngineRef):
        self.queue, self.ref = queue, engines

    def has_work(self) -> bool:
        return any(not st.failed for st, _ in self.queue)

    def engine_sets(self) -> list[EngineRef]:
        """The agent engines that dispatch needs (it pauses while none is alive)."""
        return [self.ref]

    def drop_dead(self, gone: set) -> None:
        pass  # dead replicas take no episodes (`take`); the next checkpoint gets new engines

    def stranded(self, alive: set) -> list[EngineRef]:
        return []  # its one engine set down pauses dispatch, and the driver times that

    def take(self, n: int, alive: set) -> list[tuple]:
        """Up to `n` episodes on the replicas that are `alive` (actor ids); none while none is."""
        engines = EngineRef(self.ref.checkpoint, [r for r in self.ref.replicas if r._actor_id in alive], self.ref.role)
        out = []
        while self.queue and len(out) < n and engines.replicas:
            st, ep = self.queue.popleft()
            if not st.failed:
                out.append((st, ep, engines, None))
        return out

    def requeue(self, st, ep) -> None:
        self.queue.appendleft((st, ep))

    def finished(self, slot, record) -> None:
        pass

    def loads(self) -> list:
        return []


@dataclass
class Slot:
    cap: int
    actor: Any = None  # its engine replica; None until it has a checkpoint to load
    engines: EngineRef | None = None  # the checkpoint it holds, ready
    loading: Any = None  # ObjectRef of a load in progress
    target: Checkpoint | None = None
    load_started: float = 0.0
    inflight: int = 0
    pinned: bool = False  # the user simulator's engines serving a checkpoint they share

    @property
    def checkpoint(self) -> Checkpoint | None:
        """The checkpoint it holds or is loading."""
        return self.target if self.loading is not None else (self.engines.checkpoint if self.engines else None)

    @property
    def holds(self) -> str | None:
        return self.checkpoint.name if self.checkpoint else None

    @property
    def replicas(self) -> list:
        return self.engines.replicas if self.pinned else [self.actor]

    def serving(self, alive: set | None) -> bool:
        """Loading, or a replica of it `alive` (actor ids; None: assume so)."""
        return alive is None or self.loading is not None or bool(self.live(alive))

    def live(self, alive: set) -> list:
        """Its replicas that are `alive`: a pinned slot serves on the user simulator's replicas that are
        (one dead for good, or restarting, leaves the others serving)."""
        return [r for r in self.replicas if r._actor_id in alive]

    def room(self, alive: set) -> int:
        """Episodes it may run at once now: its cap, shared out over its replicas alive."""
        return math.ceil(self.cap * len(self.live(alive)) / len(self.replicas))


@dataclass
class Work:
    """Each checkpoint's queued episodes; `took` learns episode times by (domain, task, trial)."""

    queues: dict[str, deque]
    took: dict[tuple, float] = field(default_factory=dict)

    def pop(self, name: str):
        q = self.queues[name]
        while q:
            st, ep = q.popleft()
            if not st.failed:
                return st, ep
        return None

    def queued(self, name: str) -> int:
        return sum(1 for st, _ in self.queues[name] if not st.failed)

    def longest_first(self, name: str) -> None:
        """Episodes never seen first (plan order), then by the time they took before, longest first."""
        key = lambda item: -self.took.get((item[1].domain, item[1].task_id, item[1].trial), math.inf)  # noqa: E731
        self.queues[name] = deque(sorted(self.queues[name], key=key))


class Rolling:
    """The rolling schedule's placement over `replicas` agent slots (see the module docstring)."""

    def __init__(self, driver, ckpts: list[Checkpoint], queues: dict[str, deque], cap: int,
                 pinned: dict[str, EngineRef]):
        self.driver, self.ckpts = driver, [c for c in ckpts if c.name in queues]
        self.work = Work(queues)
        self.unloadable: dict[str, str] = {}  # checkpoints whose load failed on a slot, and why
        self.slots = [Slot(cap * len(ref.replicas), engines=ref, pinned=True) for ref in pinned.values()]
        self.slots += [Slot(cap) for _ in range(self._agent_replicas())]
        self._move_free_slots(None)

    def _agent_replicas(self) -> int:
        """Agent slots of their own: the engine sets that check_resources reserved, less the user
        simulator's (the pinned slots). None when every checkpoint shares the user's engines: a
        slot more would wait for resources forever, and take those of a restarting user engine."""
        d = self.driver
        return d.cfg.engine.replicas * (d.pool.engine_sets() - (d.pool.user is not None))

    # -- what the driver's loop calls -------------------------------------------------------------
    def has_work(self) -> bool:
        return any(self.work.queued(c.name) for c in self.ckpts)

    def engine_sets(self) -> list[EngineRef]:
        """Each checkpoint's slots (loading ones too) as its engine set: dispatch pauses while no set
        has a replica alive, and a checkpoint whose every slot is dead for good fails its shards."""
        sets: dict[str, EngineRef] = {}
        for s in self.slots:
            if s.checkpoint is not None:
                sets.setdefault(s.holds, EngineRef(s.checkpoint, [])).replicas.extend(s.replicas)
        return list(sets.values())

    def drop_dead(self, gone: set) -> None:
        """Retire the slots whose actor is dead for good (actor ids in `gone`)."""
        for slot in [s for s in self.slots if not s.pinned and s.actor is not None and s.actor._actor_id in gone]:
            self._retire(slot)

    def stranded(self, alive: set) -> list[EngineRef]:
        """The engine sets of the checkpoints with queued episodes that no slot can take: none of
        the slots holding it serves (`alive`: actor ids), and no slot of its own (not pinned) serves
        or is still to start, so none will move to it; or none will move to it at all, as its load
        failed on a slot (`unloadable`). A pinned slot serves its checkpoint only."""
        movable = any(not s.pinned and (s.actor is None or s.serving(alive)) for s in self.slots)
        holders = {c.name: [s for s in self.slots if s.holds == c.name] for c in self.ckpts if self.work.queued(c.name)}
        return [EngineRef(self._checkpoint(name), [r for s in slots for r in s.replicas])
                for name, slots in holders.items()
                if not any(s.serving(alive) for s in slots) and (name in self.unloadable or not movable)]

    def _checkpoint(self, name: str) -> Checkpoint:
        return next(c for c in self.ckpts if c.name == name)

    def take(self, n: int, alive: set) -> list[tuple]:
        """Up to `n` episodes on slots whose replicas are `alive` (actor ids)."""
        self._fail_unservable()
        self._move_free_slots(alive)
        out = []
        while len(out) < n:
            open_slots = [s for s in self.slots if s.engines and s.loading is None and s.inflight < s.room(alive)
                          and self.work.queued(s.engines.checkpoint.name)]
            if not open_slots:
                break
            slot = min(open_slots, key=lambda s: s.inflight / s.cap)
            st, ep = self.work.pop(slot.engines.checkpoint.name)
            slot.inflight += 1
            out.append((st, ep, EngineRef(slot.engines.checkpoint, slot.live(alive)), slot))
        return out

    def requeue(self, st, ep) -> None:
        self.work.queues[ep.model].appendleft((st, ep))

    def finished(self, slot: Slot, record) -> None:
        slot.inflight -= 1
        if record is not None:
            self.work.took[(record.domain, record.task_id, record.trial)] = record.wall_s

    def loads(self) -> list:
        return [s.loading for s in self.slots if s.loading is not None]

    def loaded(self, ref) -> None:
        slot = next((s for s in self.slots if s.loading == ref), None)
        if slot is None:  # retired meanwhile (its actor died)
            return
        try:
            self.driver.ray.get(ref, timeout=60)
        except Exception as exc:  # noqa: BLE001 - a checkpoint that cannot load fails its shards only
            self._load_failed(slot, repr(exc))
            return
        slot.engines, slot.loading = EngineRef(slot.target, [slot.actor]), None
        self.work.longest_first(slot.target.name)

    def check_load_timeouts(self) -> None:
        limit = self.driver.cfg.engine.load_timeout_s
        for slot in [s for s in self.slots if s.loading is not None and clock.monotonic() - s.load_started > limit]:
            self._load_failed(slot, self.driver.pool.load_timeout_error(EngineRef(slot.target, []).name))

    def stop(self) -> None:
        for slot in self.slots:
            if not slot.pinned and slot.actor is not None:
                self.driver.pool.placement.stop(slot.actor)

    # -- slots ------------------------------------------------------------------------------------
    def _target(self, alive: set | None) -> Checkpoint | None:
        """The earliest checkpoint with more queued episodes than its serving slots have room for (a
        slot whose replica is down leaves its checkpoint to the others)."""
        for ck in [c for c in self.ckpts if c.name not in self.unloadable]:
            room = sum(s.room(alive) if s.pinned and alive is not None else s.cap for s in self.slots
                       if s.holds == ck.name and s.serving(alive))  # a pinned slot's room shrinks with its replicas
            if self.work.queued(ck.name) > room:
                return ck
        return None

    def _move_free_slots(self, alive: set | None) -> None:
        """Start the slots that have no actor yet, and move those with nothing left to do on their
        checkpoint, when some checkpoint needs them."""
        for slot in list(self.slots):
            if slot.pinned or slot.loading is not None or slot.inflight:
                continue
            if slot.engines is not None and self.work.queued(slot.engines.checkpoint.name):
                continue
            held, slot.engines = slot.engines, None  # its room does not count for _target
            target = self._target(alive)
            if target is None:
                slot.engines = held
            elif slot.actor is None:
                slot.actor = self.driver.pool.placement.start(target, "agent")
                self._begin_load(slot, target, slot.actor.ready.remote())
            elif (state := actor_state(slot.actor)) == "ALIVE":
                self._begin_load(slot, target, slot.actor.load.remote(target.model_dump(mode="json")))
            else:  # a load would fail the target for its actor's death: retire it, or wait for its restart
                slot.engines = held
                if state == "DEAD":
                    self._retire(slot)

    def _begin_load(self, slot: Slot, target: Checkpoint, ref) -> None:
        slot.target, slot.loading, slot.load_started = target, ref, clock.monotonic()

    def _retire(self, slot: Slot) -> None:
        """Stop the slot's engine; a fresh slot (no actor yet) takes its place."""
        self.driver.pool.placement.stop(slot.actor)
        self.slots[self.slots.index(slot)] = Slot(slot.cap)

    def _load_failed(self, slot: Slot, error: str) -> None:
        """Retire the slot; its checkpoint is loaded on no other slot (`_fail_unservable`)."""
        self.unloadable[slot.target.name] = error
        self._retire(slot)

    def _fail_unservable(self) -> None:
        """Fail the queued shards of each checkpoint that failed to load and that no slot holds (the
        others that held it were retired, or moved on before an episode was requeued)."""
        for name, error in self.unloadable.items():
            if self.work.queued(name) and not any(s.holds == name for s in self.slots):
                self.driver.engine_not_started(name, {id(st): st for st, _ in self.work.queues[name]}.values(), error)
                self.work.queues[name].clear()
