"""Ray's transport and actor table stubbed for the engine client (engines.RayEngineClient), on a
virtual clock (handoff.sweep.clock): `ray.wait` and `ray.get` advance the clock to when a reference is
ready (or by their timeout), so a client that waits minutes runs in milliseconds, deterministically.

A `Replica` is scripted by time: its first (shared) request dies with it at `died_at` (Ray restarts it at
once), or, without `died_at`, is let in at `admitted_at`; a suspect's `enter_alone` is admitted at
`admitted_at`; each admitted request is served in `serve_s`. `admitted_s` answers as EngineHost's does:
how long the request has been admitted, None while it waits."""

from __future__ import annotations

from dataclasses import dataclass, field

import ray
import ray.exceptions as rx

from handoff.sweep import clock as sweep_clock
from handoff.sweep import engines
from handoff.sweep.failures import Place

NODE = "node-1"


class VirtualClock:
    def __init__(self, now: float = 0.0):
        self.now = now

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


@dataclass(eq=False)
class Ref:
    """An ObjectRef: ready at `ready_at` with `value`, or raising `error`."""

    ready_at: float
    value: object = None
    error: BaseException | None = None


@dataclass
class World:
    clock: VirtualClock = field(default_factory=VirtualClock)
    cancelled: list = field(default_factory=list)

    def wait(self, refs, num_returns=1, timeout=None):
        pending = sorted(r.ready_at for r in refs)
        due = pending[num_returns - 1] if len(pending) >= num_returns else float("inf")
        until = due if timeout is None else min(due, self.clock.now + timeout)
        self.clock.now = max(self.clock.now, until)
        ready = [r for r in refs if r.ready_at <= self.clock.now]
        return ready, [r for r in refs if r not in ready]

    def get(self, ref, timeout=None):
        if ref.ready_at > self.clock.now + (float("inf") if timeout is None else timeout):
            self.clock.now += timeout
            raise rx.GetTimeoutError("Get timed out")
        self.clock.now = max(self.clock.now, ref.ready_at)
        if ref.error is not None:
            raise ref.error
        return ref.value

    def cancel(self, ref, **_):
        self.cancelled.append(ref)


class Method:
    def __init__(self, fn):
        self.fn = fn

    def remote(self, *args):
        return self.fn(*args)


class Replica:
    def __init__(self, world: World, admitted_at: float, serve_s: float, died_at: float | None = None):
        self.world, self._actor_id = world, "replica-0"
        self.admitted_at, self.serve_s, self.died_at = admitted_at, serve_s, died_at
        self.place = Place("ALIVE", NODE, 0)
        self.alone_calls = 0
        self.generate = Method(self._generate)
        self.enter_alone = Method(lambda request_id: Ref(self.admitted_at, 0))
        self.admitted_s = Method(self._admitted_s)

    def _generate(self, prompt, sampling, request_id, checkpoint, label, alone):
        now = self.world.clock.now
        if self.died_at is not None and not alone:
            self.place = Place("ALIVE", NODE, 1)  # Ray restarted it at once
            return Ref(self.died_at, error=rx.ActorDiedError())
        self.alone_calls += alone
        start = now if alone else max(now, self.admitted_at)
        return Ref(start + self.serve_s, {"token_ids": [1], "text": "ok", "finish_reason": "stop"})

    def _admitted_s(self, request_id):
        now = self.world.clock.now
        return Ref(now, None if now < self.admitted_at else now - self.admitted_at)


def transport(monkeypatch) -> World:
    world = World()
    for name in ("wait", "get", "cancel"):
        monkeypatch.setattr(ray, name, getattr(world, name))
    monkeypatch.setattr(engines, "actor_place", lambda handle: handle.place)
    monkeypatch.setattr(engines, "actor_state", lambda handle: handle.place.state)
    monkeypatch.setattr(engines, "nodes_alive", lambda ray: {NODE})
    monkeypatch.setattr(engines, "task_cancelled", lambda: False)
    monkeypatch.setattr(sweep_clock, "_clock", world.clock)
    return world
