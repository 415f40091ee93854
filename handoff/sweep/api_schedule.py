"""Where an API model's episodes run: on the workers alone, no engine (handoff.agent.api_agent).

`ApiPlacement` feeds the driver's dispatch loop the API checkpoints' episodes, at most each one's
`concurrency` (model.<key>.concurrency) at once, beside an engine schedule's placement (`inner`:
schedule.Rolling, or none under `sequential`, where the API checkpoints run first): engine sets,
loads and strandings are the inner placement's alone, so no engine actor, GPU or outage clock is
ever counted for an API model.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

from handoff.sweep.config import Checkpoint
from handoff.sweep.worker import EngineRef


@dataclass
class ApiSlot:
    """An API checkpoint's episodes in flight (at most its concurrency)."""

    checkpoint: Checkpoint
    inflight: int = 0

    @property
    def room(self) -> int:
        return self.checkpoint.api.concurrency - self.inflight


class ApiPlacement:
    def __init__(self, ckpts: list[Checkpoint], queues: dict[str, deque], inner=None):
        self.slots = {c.name: ApiSlot(c) for c in ckpts if queues.get(c.name)}
        self.queues = {name: queues[name] for name in self.slots}
        self.inner = inner

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
            item = self._pop(slot) if slot.room > 0 else None
            if item is not None:
                out.append(item)
                open_slots.append(slot)  # round robin over the API checkpoints
        if self.inner and len(out) < n:
            out += self.inner.take(n - len(out), alive)
        return out

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
