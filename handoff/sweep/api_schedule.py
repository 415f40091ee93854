"""Where an API model's episodes run: on the workers alone, no engine (handoff.agent.api_agent).

`ApiPlacement` feeds the driver's dispatch loop the API checkpoints' episodes, at most each one's
`concurrency` (model.<key>.concurrency) at once, beside an engine schedule's placement (`inner`:
schedule.Rolling, or none under `sequential`, where the API checkpoints run first): engine sets,
loads and strandings are the inner placement's alone, so no engine actor, GPU or outage clock is
ever counted for an API model.

`ApiOutages`: an API model's own outage clock, as the driver's OutageClocks for engines. An episode
that ends in ApiUnavailable (every retry of a request spent: 429s, 5xx, no connection) costs nothing
and starts the clock (or keeps it running); an episode of the model recorded stops it. While it runs,
the model gets one episode at a time, one each probe interval (PROBE_S, or a quarter of its outage_s
when shorter), not its concurrency; past `model.<key>.outage_s` its remaining shards fail as
infrastructure, with the model and the last error (a resume reruns them).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

from handoff.engine.base import ApiUnavailable
from handoff.sweep import clock
from handoff.sweep.config import Checkpoint
from handoff.sweep.worker import EngineRef

PROBE_S = 30.0


def api_unavailable(exc: BaseException) -> ApiUnavailable | None:
    """The ApiUnavailable an episode ended with, raised in it or carried by Ray's RayTaskError."""
    return next((e for e in (exc, getattr(exc, "cause", None)) if isinstance(e, ApiUnavailable)), None)


@dataclass
class Outage:
    since: float  # the first ApiUnavailable with no episode recorded after it
    error: str  # the last one
    probe_at: float  # the next episode goes no earlier


class ApiOutages:
    """Each API checkpoint's outage clock (module docstring)."""

    def __init__(self, ckpts: list[Checkpoint]):
        self.settings = {c.name: c.api for c in ckpts}
        self.down: dict[str, Outage] = {}

    def failed(self, name: str, exc: BaseException, now: float) -> None:
        """An episode of checkpoint `name` failed with `exc`: an API's outage when ApiUnavailable."""
        error = api_unavailable(exc)
        if name not in self.settings or error is None:
            return
        outage = self.down.setdefault(name, Outage(now, "", now))
        outage.error, outage.probe_at = str(error), now + min(PROBE_S, self.settings[name].outage_s / 4)

    def answered(self, name: str) -> None:
        """An episode of `name` was recorded: the API answers."""
        self.down.pop(name, None)

    def room(self, name: str, now: float) -> int | None:
        """Episodes of `name` that may start now while it is down (None: it is not)."""
        outage = self.down.get(name)
        if outage is None:
            return None
        return 1 if now >= outage.probe_at else 0

    def expired(self, now: float) -> list[tuple[str, str]]:
        """The checkpoints down past their outage_s, each with the message its shards fail with (their
        clocks stop: a resume starts afresh)."""
        out = []
        for name, outage in list(self.down.items()):
            api = self.settings[name]
            if now - outage.since > api.outage_s:
                del self.down[name]
                out.append((name, (f"API model {name} ({api.llm}) unavailable for more than outage_s={api.outage_s:g}s "
                                   f"(every request's {api.max_retries} retries spent, no episode recorded since): "
                                   f"resume the run once it answers. Last error: {outage.error}")))
        return out


@dataclass
class ApiSlot:
    """An API checkpoint's episodes in flight (at most its concurrency)."""

    checkpoint: Checkpoint
    inflight: int = 0

    @property
    def room(self) -> int:
        return self.checkpoint.api.concurrency - self.inflight


class ApiPlacement:
    def __init__(self, ckpts: list[Checkpoint], queues: dict[str, deque], inner=None,
                 outages: ApiOutages | None = None):
        self.slots = {c.name: ApiSlot(c) for c in ckpts if queues.get(c.name)}
        self.queues = {name: queues[name] for name in self.slots}
        self.inner = inner
        self.outages = outages or ApiOutages(ckpts)

    def has_work(self) -> bool:
        return any(not st.failed for q in self.queues.values() for st, _ in q) or bool(
            self.inner and self.inner.has_work())

    def engine_sets(self) -> list[EngineRef]:
        return self.inner.engine_sets() if self.inner else []

    def drop_dead(self, gone: set) -> None:
        if self.inner:
            self.inner.drop_dead(gone)

    def stranded(self, alive: set) -> list[EngineRef]:
        return self.inner.stranded(alive) if self.inner else []

    def take(self, n: int, alive: set) -> list[tuple]:
        """Up to `n` episodes: the API checkpoints' (each within its concurrency, in turn), then the inner's."""
        out, open_slots = [], list(self.slots.values())
        while len(out) < n and open_slots:
            slot = open_slots.pop(0)
            item = self._pop(slot) if self._room(slot) > 0 else None
            if item is not None:
                out.append(item)
                open_slots.append(slot)  # round robin over the API checkpoints
        if self.inner and len(out) < n:
            out += self.inner.take(n - len(out), alive)
        return out

    def _room(self, slot: ApiSlot) -> int:
        """Its concurrency's room; while its API is down, one probe episode at a time (ApiOutages)."""
        probe = self.outages.room(slot.checkpoint.name, clock.monotonic())
        return slot.room if probe is None else min(slot.room, probe - slot.inflight)

    def _pop(self, slot: ApiSlot):
        q = self.queues[slot.checkpoint.name]
        while q:
            st, ep = q.popleft()
            if not st.failed:
                slot.inflight += 1
                return st, ep, EngineRef(slot.checkpoint, [], "agent"), slot
        return None

    def requeue(self, st, ep) -> None:
        if ep.model in self.queues:
            self.queues[ep.model].appendleft((st, ep))
        else:
            self.inner.requeue(st, ep)

    def finished(self, slot, record) -> None:
        if isinstance(slot, ApiSlot):
            slot.inflight -= 1
        elif self.inner:
            self.inner.finished(slot, record)

    def loads(self) -> list:
        return self.inner.loads() if self.inner else []

    def loaded(self, ref) -> None:
        self.inner.loaded(ref)

    def check_load_timeouts(self) -> None:
        self.inner.check_load_timeouts()

    def stop(self) -> None:
        if self.inner:
            self.inner.stop()
