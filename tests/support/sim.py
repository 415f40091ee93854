"""A deterministic simulator of the sweep's runtime (issue 48): the REAL driver (`Driver.execute`, its
dispatch loop, failure policy, outage clocks, replica waits), engine pool and both schedules run on a
fake Ray and a virtual clock (handoff.sweep.clock), under a fault schedule drawn from one integer, and
(CLIENTS, the default) the episodes' requests go through the REAL engine client (RayEngineClient: its
suspects, poison-request count and waits) to the REAL EngineHost of each replica (its Lane, admission
and lease), run by tests/support/fibers.py: episodes in threads that take turns with the simulator,
hosts on an asyncio loop on the virtual clock. Nothing sleeps: a wait advances the clock to the next event.

The world (`Sim`, which is also the `ray` the driver is given, and the `ray.wait/get/cancel` the
client calls):
- nodes: a CPU node for the workers and GPU nodes for the engine replicas; a node dies (the GCS lists
  it dead `DETECT_S` later; meanwhile its actors are unreachable, their table state still ALIVE), and
  a replacement node joins later or never (its actors restart there, or stay RESTARTING);
- actors (episode workers and engine replicas) with the GCS states ALIVE / RESTARTING / DEAD, their
  node and restarts; a call to an unreachable worker fails as "unavailable", to a dead one as dead; a
  replica's death fails the calls in flight on it (ActorDiedError; a lost node's: unavailable), and a
  call sent while it restarts waits for its next process (a new EngineHost);
- episodes (scripted, CLIENTS): TURNS turns of a user request then an agent request through
  RayEngineClient, each served in `duration / (2 x TURNS)` seconds (SimEngine); a worker's death fails
  its episodes as Ray does (ActorDiedError, or ActorUnavailableError on a lost node) and ends them;
  REAL: the real episode (EpisodeWorker.run, tau2) on the configured engine, for `run_plan`; STAND_IN:
  the first simulator's episode that models its client (it stalls while a replica is down);
- engine loads that take `load_s` (past engine.load_timeout_s: TimeoutError) or fail.
- an API model's episodes (no replica), when the Sim is given `api_episode`: that callable runs the
  episode for real (e.g. the API agent against a fault double) and its record or error arrives API_S
  virtual seconds later, as Ray's would.

Faults (`Schedule`, drawn by `draw(seed)`): worker crashes on a healthy node (restart soon, late, or
never), worker-node loss (with or without a replacement), replica deaths (OOM-like, restart soon or
late; engine.max_restarts spent: dead), GPU-node loss (with or without a replacement), slow and failed
loads, poison episodes (they kill their worker every time), poison requests (they kill their agent
replica each time they run there; RayEngineClient tells them from their neighbours and ends their
episode with PoisonRequestError, recorded), hung episodes (never end), and a driver
kill at a given time followed by a resume (a fresh cluster, the same run directory).

Invariants (`check`): the sweep ends within a bound, and without an exception; every planned episode is in exactly one finished
shard or its shard in one failed record; no attempt is charged but to a poison or hung episode (or one
whose worker crashed while it ran alone on it); a shard failed for its episodes holds one of those;
a fault-free schedule finishes every shard with no failure.

Replay: `run(seed)` (or `python -m bench.bench_sim --seed N`) reruns schedule N exactly."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import hashlib
import heapq
import itertools
import os
import random
import shutil
import tempfile
import traceback
from dataclasses import dataclass, field
from pathlib import Path

import ray.exceptions as rx

from handoff.engine.base import EngineStats, Generation, PoisonRequestError, Sampling
from handoff.records import read_shard
from handoff.sweep import clock as sweep_clock
from handoff.sweep import driver as driver_module
from handoff.sweep import engines as engines_module
from handoff.sweep import schedule as schedule_module
from handoff.sweep.driver import Driver
from handoff.sweep.engines import REQUEST_DEATHS, EngineHost, EngineUnavailableError, EpisodeCancelled
from handoff.sweep.failures import Place, ShardFailure
from handoff.sweep.plan import Episode, Shard
from handoff.sweep.rundir import SweepRun
from handoff.sweep.worker import engine_client
from handoff.sweep.workers import IDLE
from tests.support.fibers import Fibers

# What an episode is and how it reaches its engines (Sim's `mode`): REAL, the real episode (EpisodeWorker:
# tau2, the configured engine on the real EngineHost, through RayEngineClient), for fault-free parity with
# a real sweep; CLIENTS, a scripted episode whose requests go through the real RayEngineClient to the real
# EngineHost (its Lane, admission and lease) over SimEngine; STAND_IN, a scripted episode that models its
# client's waits itself (the first simulator's, kept to compare).
REAL, CLIENTS, STAND_IN = "real", "clients", "stand-in"
TURNS = 2  # a scripted episode's turns (CLIENTS): a user request, then an agent request
RELOAD_S = 1.0  # a replica's load after a restart or in place (CLIENTS)
DETECT_S = 10.0  # how long a dead node is listed alive (Ray's health checks)
LOAD_TIMEOUT_S = 60.0
EPISODE_TIMEOUT_S = 120.0
# How long a suspect's lane waits for its request (engines.LEASE_S), scaled as the simulator's timeouts
# are from the defaults (episode_timeout_s=1800: 60 s there, 4 s here): a suspect whose episode died
# holds its replica's lane that long, and every other request there waits.
LEASE_S = 60.0 * EPISODE_TIMEOUT_S / 1800
NEVER = float("inf")
API_S = 5.0  # an API model's episode, in virtual seconds


class DriverKilled(BaseException):
    """The driver process killed (SIGKILL) at a scheduled time: nothing of it runs on."""


class Hang(BaseException):
    """The sweep ran past its bound: a hang."""


@dataclass(eq=False)
class Ref:
    done: bool = False
    value: object = None
    error: BaseException | None = None
    waiters: list = field(default_factory=list)  # called once it is ready (fibers waiting on it)

    def resolve(self, value=None, error: BaseException | None = None) -> None:
        if not self.done:
            self.done, self.value, self.error = True, value, error
            for waiter in self.waiters:
                waiter()
            self.waiters.clear()


class Method:
    def __init__(self, fn):
        self.fn = fn

    def remote(self, *args, **kwargs):
        return self.fn(*args, **kwargs)


class Actor:
    def __init__(self, sim: Sim, node: str, max_restarts: int):
        self.sim, self._actor_id = sim, next(sim.ids)
        self.state, self.node, self.restarts, self.max_restarts = "ALIVE", node, 0, max_restarts

    @property
    def place(self) -> Place:
        return Place(self.state, self.node, self.restarts)

    @property
    def usable(self) -> bool:
        return self.state == "ALIVE" and self.sim.machines[self.node].up

    def crash(self, restart_s: float) -> None:
        """Died (its process killed): Ray restarts it after `restart_s` on its node (NEVER: never), if
        it has restarts left."""
        if self.state == "DEAD":
            return
        if self.max_restarts >= 0 and self.restarts >= self.max_restarts:
            self.set_state("DEAD")
            return
        self.set_state("RESTARTING")
        if restart_s != NEVER:
            self.sim.after(restart_s, self.restarted)

    def restarted(self) -> None:
        if self.state == "RESTARTING" and self.sim.machines[self.node].up:
            self.restarts += 1
            self.set_state("ALIVE")

    def set_state(self, state: str) -> None:
        self.state = state
        self.sim.changed(self)


class Worker(Actor):
    def __init__(self, sim: Sim, node: str):
        super().__init__(sim, node, max_restarts=-1)
        self.runs: list[Run] = []
        self.host = None  # the real EpisodeWorker (Sim.real), made at its first episode
        self.run = Method(self._run)
        self.enter = Method(lambda ctx: Ref(True, None))
        self.idle = Method(lambda: Ref(True, not self.runs))
        self.ping = Method(lambda: Ref(True, 0))

    def _run(self, episode: dict, agent, user, ctx) -> Ref:
        ref = Ref()
        if self.state == "DEAD":
            ref.resolve(error=rx.ActorDiedError())
        elif not self.usable:
            ref.resolve(error=rx.ActorUnavailableError("Connection refused", None))
        elif agent.checkpoint.api is not None and self.sim.api_episode is not None:
            self.sim.api_call(ref, episode)
        else:
            self.sim.start(Run(self.sim, Episode.model_validate(episode), self, agent, user, ref, ctx))
        return ref

    def episode(self, episode: dict, agent, user, ctx) -> dict:
        """The real episode (EpisodeWorker.run: tau2, the agent and the user simulator on their engines
        through RayEngineClient), in this process: its output stays this process's (no log_dir)."""
        from handoff.sweep.worker import EpisodeWorker

        if self.host is None:
            self.host = EpisodeWorker()
        return self.host.run(episode, agent, user, dataclasses.replace(ctx, log_dir=None))

    def crash(self, restart_s: float) -> None:
        for run in list(self.runs):
            run.fail(rx.ActorDiedError())
        super().crash(restart_s)


class Replica(Actor):
    """An engine replica: the stand-in (its loads only), or, with `make_host`, an actor whose calls
    run on a host (the real EngineHost, or SimHost: EngineHost on a simulated engine) on the
    simulator's event loop, as Ray runs an async actor's: a call to a replica that restarts (or whose
    node is gone, unseen) waits for its next process, a death fails the calls in flight."""

    def __init__(self, sim: Sim, node: str, load_s: float, fails: bool, max_restarts: int, make_host=None):
        super().__init__(sim, node, max_restarts)
        self.load_s, self.fails, self.make_host = load_s, fails, make_host
        self.served = Method(lambda: Ref(True, {}))
        self.ready = Method(lambda: self._loading(self.load_s))
        self.load = Method(lambda checkpoint: self._loading(1.0))  # in place (the rolling schedule)
        self.host = make_host(self, True) if make_host else None
        self.calls: dict = {}  # asyncio task -> (its Ref, method, args)
        self.queued: list = []  # calls sent while it has no process: (method, args, Ref)
        if make_host is not None:
            for name in ("served", "generate", "enter_alone", "admitted_s", "load"):
                setattr(self, name, Method(lambda *args, name=name: self.call(name, *args)))

    def call(self, name: str, *args) -> Ref:
        ref = Ref()
        if self.state == "DEAD":
            ref.resolve(error=rx.ActorDiedError())
        elif self.host is None:
            self.queued.append((name, args, ref))
        else:
            self._submit(name, args, ref)
        return ref

    def _submit(self, name: str, args: tuple, ref: Ref) -> None:
        task = self.sim.fibers.loop.create_task(getattr(self.host, name)(*args))
        self.calls[task] = ref, name, args
        self.sim.tasks[ref] = task
        task.add_done_callback(lambda t: self._returned(t, name))
        self.sim.fibers.poke()

    def _returned(self, task, name: str) -> None:
        ref, _, _ = self.calls.pop(task, (None, None, None))
        if ref is None:
            return
        self.sim.tasks.pop(ref, None)
        if task.cancelled():
            ref.resolve(error=rx.TaskCancelledError())
        elif task.exception() is not None:
            exc = task.exception()
            ref.resolve(error=rx.RayTaskError(name, "".join(traceback.format_exception(exc)), exc))
        else:
            ref.resolve(task.result())

    def lost(self, error: BaseException) -> None:
        """Its process is gone: the calls in flight fail with `error`; new ones wait for the next."""
        if self.make_host is None:
            return
        calls, self.calls, self.host = self.calls, {}, None
        requests = sorted(args[2].rsplit("/", 1)[0] for _, name, args in calls.values() if name == "generate")
        if requests:  # the requests in flight it took down (each a suspect for its client)
            self.sim.log.append(("lost", self._actor_id, requests))
        for task, (ref, _, _) in calls.items():
            self.sim.tasks.pop(ref, None)
            ref.resolve(error=error)
            task.cancel()
        self.sim.fibers.poke()

    def set_state(self, state: str) -> None:
        was = self.state
        super().set_state(state)
        if self.make_host is None:
            return
        if state != "ALIVE":
            self.lost(rx.ActorDiedError())
        if state == "DEAD":
            for _, _, ref in self.queued:
                ref.resolve(error=rx.ActorDiedError())
            self.queued.clear()
        elif state == "ALIVE" and was != "ALIVE":  # a new process: a new host, and the calls that waited
            self.host = self.make_host(self, False)
            queued, self.queued = self.queued, []
            for name, args, ref in queued:
                if not ref.done:
                    self._submit(name, args, ref)

    def _loading(self, seconds: float) -> Ref:
        """A load that ends `seconds` from now (never when NEVER: the driver's load timeout ends it)."""
        ref = Ref()

        def loaded():
            if self.state != "ALIVE":
                ref.resolve(error=rx.ActorDiedError())
            elif self.fails:
                ref.resolve(error=rx.RayTaskError("ready", "injected load failure", RuntimeError("injected load failure")))
            else:
                ref.resolve(0)

        if seconds != NEVER:
            self.sim.after(seconds, loaded)
        return ref


@dataclass
class Node:
    up: bool = True
    listed: bool = True  # in ray.nodes() as alive


class Run:
    """One episode running on a worker: `duration` seconds while its replicas serve."""

    def __init__(self, sim: Sim, ep: Episode, worker: Worker, agent, user, ref: Ref, ctx=None):
        self.sim, self.ep, self.worker, self.ref = sim, ep, worker, ref
        self.agent, self.user, self.ctx = agent, user, ctx
        self.spec = sim.schedule.episodes[ep.key]
        self.replicas = [r for r in (_routed(ep, agent), _routed(ep, user)) if r is not None] if agent.replicas \
            else []
        self.left, self.token, self.since = 1e9 if self.spec.hang else self.spec.duration, 0, sim.now
        self.stalled: float | None = None
        self.request_deaths = 0  # replica deaths under its poison request
        self.fiber, self.cancelled = None, False

    def begin(self) -> None:
        self.worker.runs.append(self)
        if self.sim.fibers is not None:  # its engine calls through the real client, in a fiber
            if self.spec.poison:
                self.sim.after(min(self.spec.duration / 2, 1.0), self._poison)
            self.fiber = self.sim.fibers.spawn(self._body, self._ended, owner=self)
            return
        if not self.replicas or any(r.state == "DEAD" for r in self.replicas):
            self.fail(_unavailable("no replica alive"))
            return
        if self.spec.poison:
            self.sim.after(min(self.spec.duration / 2, 1.0), self._poison)
        self.resume()

    def _poison(self) -> None:
        if self in self.worker.runs:
            self.sim.log.append(("poison", self.ep.key))
            self.worker.crash(self.sim.schedule.restart_s)

    def resume(self) -> None:
        if any(not r.usable for r in self.replicas):
            self.stall()
            return
        self.stalled, self.token, self.since = None, self.token + 1, self.sim.now
        if self.spec.poison_request and self.request_deaths >= REQUEST_DEATHS + 1:
            self._finish(self.token)  # PoisonRequestError: the episode ends as an engine error, recorded
            return
        if self.spec.poison_request:
            self.sim.after(min(1.0, self.left / 2), lambda t=self.token: self._kill_replica(t))
        self.sim.after(self.left, lambda t=self.token: self._finish(t))

    def _kill_replica(self, token: int) -> None:
        """Its request kills the agent replica (once shared, then REQUEST_DEATHS times alone)."""
        if token == self.token:
            self.request_deaths += 1
            self.sim.log.append(("poison_request", self.ep.key))
            self.replicas[0].crash(self.sim.schedule.restart_s)

    def stall(self) -> None:
        if self.stalled is None:
            self.left -= self.sim.now - self.since
            self.token += 1
            self.stalled = self.sim.now
            self.sim.after(LOAD_TIMEOUT_S, lambda t=self.token: self._timeout(t))

    def _timeout(self, token: int) -> None:
        if token == self.token:
            self.fail(_unavailable(f"replica down past engine.load_timeout_s={LOAD_TIMEOUT_S:g}s"))

    def replica_changed(self, replica: Replica) -> None:
        if replica.state == "DEAD":
            self.fail(_unavailable("replica dead"))
        elif not replica.usable:
            self.stall()
        elif self.stalled is not None and all(r.usable for r in self.replicas):
            self.resume()

    def _finish(self, token: int) -> None:
        if token == self.token:
            self.end()
            self.ref.resolve(self._record())

    def _record(self) -> dict:
        e = self.ep
        return {"model": e.model, "domain": e.domain, "task_id": e.task_id, "trial": e.trial, "seed": e.seed,
                "step": e.step, "simulation": {"task_id": e.task_id}, "wall_s": self.spec.duration}

    # -- in a fiber (Sim.fibers): the episode calls its replicas through the real RayEngineClient
    def _body(self) -> dict:
        if self.sim.real:  # the real episode: tau2, the agent and the user simulator
            return self.worker.episode(self.ep.model_dump(), self.agent, self.user, self.ctx)
        if self.spec.hang:
            while True:
                sweep_clock.sleep(10.0)
                if self.cancelled:
                    raise EpisodeCancelled("cancelled: it ran over episode_timeout_s")
        return self._scripted()

    def _scripted(self) -> dict:
        """TURNS turns of a user request then an agent request, each through the real RayEngineClient
        to the real EngineHost of its replica, each served in duration / (2 x TURNS) of the engine's
        time (SimEngine). A request that kills its replica each time it runs there alone ends the
        episode recorded (PoisonRequestError: the agent ends it with agent_error)."""
        engine, session = self.sim.cfg.engine, self.sim.session(self)
        agent = engine_client(engine, self.agent, self.ep.model)
        user = engine_client(engine, self.user, self.ep.model) if self.user is not None else None
        try:
            for turn in range(TURNS):
                if user is not None:
                    user.generate([turn], Sampling(), f"user/{session}")
                agent.generate([turn], Sampling(), session)
        except PoisonRequestError:
            pass
        return self._record()

    def _ended(self, result, error: BaseException | None) -> None:
        self.end()
        if error is None:
            self.ref.resolve(result)
        else:  # as Ray raises an actor task's error
            self.ref.resolve(error=rx.RayTaskError("run", "".join(traceback.format_exception(error)), error))

    def fail(self, error: BaseException) -> None:
        """Its worker died under it (its fiber unwinds: nothing of it runs on)."""
        self.end()
        self.ref.resolve(error=error)
        if self.fiber is not None:
            self.sim.fibers.kill(self.fiber)

    def cancel(self) -> None:
        """ray.cancel: its episode sees it at its next look (RayEngineClient: EpisodeCancelled)."""
        self.cancelled = True
        self.end()
        self.ref.resolve(error=rx.TaskCancelledError())

    def end(self) -> None:
        self.token += 1
        if self in self.worker.runs:
            self.worker.runs.remove(self)
        self.sim.running.discard(self)


def _routed(ep: Episode, ref):
    if ref is None or not ref.replicas:
        return None
    digest = hashlib.sha256("/".join(map(str, ep.key)).encode()).digest()
    return ref.replicas[int.from_bytes(digest[:4], "big") % len(ref.replicas)]


def _unavailable(why: str) -> BaseException:
    return rx.RayTaskError("run", why, EngineUnavailableError(why))


class SimEngine:
    """The engine of a CLIENTS replica (an AsyncEngine): a request of an episode's session takes the
    episode's duration / (2 x TURNS) seconds of the virtual clock; a poison request kills its replica
    min(1 s, half that) after it starts, each time it runs."""

    def __init__(self, replica: Replica):
        self.replica, self.sim = replica, replica.sim

    async def generate(self, prompt_ids: list[int], sampling, request_id: str):
        session = request_id.rsplit("/", 1)[0]
        run = self.sim.sessions.get(session.removeprefix("user/"))
        seconds = run.spec.duration / (2 * TURNS) if run is not None else 1.0
        if run is not None and run.spec.poison_request and not session.startswith("user/"):
            await asyncio.sleep(min(1.0, seconds / 2))
            self.sim.log.append(("poison_request", run.ep.key))
            self.replica.crash(self.sim.schedule.restart_s)  # cancels this request with the others
            await asyncio.Event().wait()
        started = self.sim.now
        await asyncio.sleep(seconds)
        self.sim.served.append((self.replica._actor_id, session, started, self.sim.now))
        return Generation(token_ids=[1], text="ok", finish_reason="stop")

    async def stats(self):
        return EngineStats()

    async def reload(self, checkpoint) -> bool:
        return False

    async def shutdown(self) -> None:
        return None

    dead = False

    def describe(self) -> None:
        return None


class SimHost(EngineHost):
    """The real EngineHost (its Lane, admission, lease, checkpoint checks and counters) on SimEngine:
    a process's first load is the pool's (already awaited: none here) unless Ray restarted it, a later
    one takes RELOAD_S and fails where the schedule says its replica's loads fail."""

    def __init__(self, replica: Replica, fresh: bool, checkpoint: dict, engine: dict, role: str):
        super().__init__(checkpoint, engine, role, None)
        self.replica, self.load_s = replica, 0.0 if fresh else RELOAD_S

    async def _build(self) -> SimEngine:
        await asyncio.sleep(self.load_s)
        self.load_s = RELOAD_S
        if self.replica.fails:
            raise RuntimeError("injected load failure")
        return SimEngine(self.replica)

    def _out_of_service(self) -> None:
        self.replica.set_state("DEAD")

    async def enter_alone(self, request_id: str) -> int:
        self.replica.sim.log.append(("alone", request_id.rsplit("/", 1)[0]))
        return await super().enter_alone(request_id)


class ActorClass:
    def __init__(self, sim: Sim):
        self.sim = sim

    def options(self, **_):
        return self

    def remote(self, *_):
        return self.sim.new_worker()


class Context:
    def __init__(self, job: str):
        self.job = job

    def get_job_id(self) -> str:
        return self.job

    def get_node_id(self) -> str:
        return "head"


class Placement:
    """The engine pool's placement on the simulated GPU nodes."""

    def __init__(self, sim: Sim):
        self.sim = sim

    def start(self, ck, role: str) -> Replica:
        return self.sim.new_replica(ck, role)

    def await_ready(self, replicas: list, timeout_s: float) -> list:
        start = self.sim.now
        self.sim.advance(start + min(timeout_s, max((r.load_s for r in replicas), default=0)))
        out = []
        for r in replicas:
            if r.fails:
                out.append(RuntimeError("injected load failure"))
            elif r.load_s > timeout_s or r.state != "ALIVE":
                out.append(TimeoutError(f"not loaded within {timeout_s:g}s"))
            else:
                out.append(None)
        return out

    def place(self, replica: Replica) -> Place:
        return replica.place

    def stop(self, replica: Replica) -> None:
        replica.set_state("DEAD")


# -- the schedule ------------------------------------------------------------------------------------
@dataclass
class EpisodeSpec:
    duration: float
    poison: bool = False  # kills its worker every time it runs
    hang: bool = False  # never ends (its own fault: the episode timeout)
    poison_request: bool = False  # a request that kills its agent replica each time it runs there


@dataclass
class Fault:
    at: float
    kind: str  # worker_crash, worker_node, replica_crash, gpu_node
    target: int = 0  # which worker / replica / node (modulo how many there are)
    restart_s: float = 5.0  # NEVER: the restart never completes
    back_s: float = NEVER  # node loss: a replacement joins after this (NEVER: none)


@dataclass
class Schedule:
    seed: int
    workers: int
    threads: int
    replicas: int
    shards: list[Shard]
    episodes: dict[tuple, EpisodeSpec]
    faults: list[Fault] = field(default_factory=list)
    load_s: list[float] = field(default_factory=list)  # per replica started, in order (then 1 s)
    failed_loads: set[int] = field(default_factory=set)
    kill_at: float | None = None
    rolling: bool = False  # schedule=rolling (else sequential)
    unplaced: set[int] = field(default_factory=set)  # workers Ray never places (their `enter` never ends)
    restart_s: float = 3.0  # a poison episode's worker restart
    max_attempts: int = 2

    @property
    def fault_free(self) -> bool:
        return not (self.faults or self.failed_loads or self.kill_at is not None or self.unplaced
                    or any(s.poison or s.hang or s.poison_request for s in self.episodes.values())
                    or any(t > LOAD_TIMEOUT_S for t in self.load_s))

    def own(self) -> set[tuple]:
        """Episodes whose failures are their own (poison, hung)."""
        return {k for k, s in self.episodes.items() if s.poison or s.hang}


def draw(seed: int, faults: bool = True) -> Schedule:
    """Schedule `seed`: a cluster, a plan, episode durations and (with `faults`) random faults."""
    rng = random.Random(seed)
    workers, threads, replicas = rng.randint(1, 3), rng.randint(1, 2), rng.randint(1, 2)
    models = [model(i) for i in range(rng.randint(1, 3))]
    shards, episodes = [], {}
    for s in range(rng.randint(1, 4)):
        name = models[s % len(models)]
        eps = [Episode(model=name, step=0, domain="airline", task_id=str(s * 10 + i), trial=0, seed=1)
               for i in range(rng.randint(1, 4))]
        shards.append(Shard(id=f"s{s}", model=name, domain="airline", trial=0, episodes=eps))
        for ep in eps:
            episodes[ep.key] = EpisodeSpec(rng.uniform(60, 110) if rng.random() < 0.2 else rng.uniform(2, 30))
    sched = Schedule(seed, workers, threads, replicas, shards, episodes, restart_s=rng.uniform(1, 10),
                     rolling=rng.random() < 0.5)
    if not faults:
        return sched
    keys = sorted(episodes)
    if rng.random() < 0.15:
        episodes[rng.choice(keys)].poison = True
    if rng.random() < 0.1:
        episodes[rng.choice(keys)].hang = True
    if rng.random() < 0.1:
        episodes[rng.choice(keys)].poison_request = True
    sched.load_s = [rng.choice([1.0, 5.0, 90.0]) if rng.random() < 0.15 else 1.0 for _ in range(6)]
    sched.failed_loads = {i for i in range(6) if rng.random() < 0.05}
    horizon = sum(s.duration for s in episodes.values()) / max(1, workers * threads) + 20
    for _ in range(rng.choice([0, 1, 1, 2, 3])):
        kind = rng.choice(["worker_crash", "worker_node", "replica_crash", "gpu_node"])
        restart = rng.choice([2.0, 20.0, 200.0, NEVER])
        back = rng.choice([5.0, 40.0, 200.0, NEVER])
        sched.faults.append(Fault(rng.uniform(0, horizon), kind, rng.randrange(8), restart, back))
    if rng.random() < 0.2:
        sched.kill_at = rng.uniform(0, horizon)
    if rng.random() < 0.05:
        sched.unplaced = {rng.randrange(workers)}
    return sched


def model(step: int) -> str:
    return f"policy-step{step}"


MODEL = model(0)


# -- the world ---------------------------------------------------------------------------------------
class Sim:
    """The simulated cluster, and the `ray` the driver is given."""

    exceptions = rx

    def __init__(self, schedule: Schedule, job: str, faults: bool, bound_s: float, cfg=None, mode: str = CLIENTS,
                 api_episode=None):
        self.schedule, self.job, self.bound, self.cfg, self.mode = schedule, job, bound_s, cfg, mode
        self.api_episode = api_episode  # episode dict -> record dict, run for real (an API model's episodes)
        self.real = mode == REAL
        self.fibers = Fibers(self.at, lambda: self.now) if mode != STAND_IN else None
        self.tasks: dict = {}  # Ref of a call to a replica -> its asyncio task
        self.sessions: dict[str, Run] = {}  # an episode's engine session -> its run (SimEngine)
        self.served: list[tuple] = []  # requests served (SimEngine): (replica, session, start, end)
        self.now, self.seq, self.events = 0.0, itertools.count(), []
        self.ids = itertools.count(1)
        self.machines = {"cpu0": Node(), "gpu0": Node(), "gpu1": Node()}
        self.hung = False
        self.workers: list[Worker] = []
        self.replicas: list[Replica] = []
        self.running: set[Run] = set()
        self.log: list = []
        self.kill_at, self.faults = (schedule.kill_at if faults else None), faults
        self.crashed_alone: set[tuple] = set()  # episodes whose worker crashed while they ran alone on it
        if faults:
            for fault in schedule.faults:
                self.at(fault.at, lambda f=fault: self.inject(f))

    # events
    def at(self, t: float, fn) -> None:
        heapq.heappush(self.events, (t, next(self.seq), fn))

    def after(self, s: float, fn) -> None:
        self.at(self.now + s, fn)

    def advance(self, until: float, ready=lambda: False) -> None:
        while not ready():
            if self.kill_at is not None and self.kill_at <= until and (not self.events or self.events[0][0] >= self.kill_at):
                self.now, self.kill_at = max(self.now, self.kill_at), None
                raise DriverKilled(f"driver killed at {self.now:g}s")
            if not self.events or self.events[0][0] > until:
                self.now = max(self.now, until)
                break
            t, _, fn = heapq.heappop(self.events)
            self.now = max(self.now, t)
            fn()
        if self.now > self.bound and not self.hung:
            self.hung = True
            raise Hang(f"the sweep ran past its bound {self.bound:g}s (virtual)")

    # the cluster
    def _host_factory(self, ck, role: str):
        """What makes a replica's host for each of its processes: the real EngineHost of the sweep's
        engine (REAL), EngineHost on a simulated engine (CLIENTS), or none (STAND_IN)."""
        if self.mode == STAND_IN:
            return None
        checkpoint, engine = ck.model_dump(mode="json"), self.cfg.engine.model_dump(mode="json")
        if self.real:
            from handoff.sweep.engines import EngineHost

            return lambda replica, fresh: EngineHost(checkpoint, engine, role, None)
        return lambda replica, fresh: SimHost(replica, fresh, checkpoint, engine, role)

    def session(self, run: Run) -> str:
        """A fresh engine session of `run`'s episode (as the agent's: `<domain>/<task>-<seed>-<n>`)."""
        name = f"{run.ep.domain}/{run.ep.task_id}-{run.ep.seed}-{len(self.sessions):x}"
        self.sessions[name] = run
        return name

    def new_worker(self) -> Worker:
        w = Worker(self, "cpu0")
        if self.faults and len(self.workers) in self.schedule.unplaced:
            w.enter = Method(lambda ctx: Ref())
        self.workers.append(w)
        return w

    def new_replica(self, ck, role: str) -> Replica:
        i = len(self.replicas)
        loads = self.schedule.load_s
        up = [name for name, n in self.machines.items() if name.startswith("gpu") and n.up]
        load_s = (loads[i] if i < len(loads) else 1.0) if up else NEVER  # no GPU node: it waits for one
        r = Replica(self, up[i % len(up)] if up else "gpu0", load_s, i in self.schedule.failed_loads, max_restarts=3,
                    make_host=self._host_factory(ck, role))
        self.replicas.append(r)
        return r

    def api_call(self, ref: Ref, episode: dict) -> None:
        """An API model's episode: `api_episode` runs it now, for real; its record, or its error as Ray
        carries it (RayTaskError with the cause), arrives API_S virtual seconds later."""
        try:
            value, error = self.api_episode(episode), None
        except Exception as exc:  # noqa: BLE001 - the episode's error, for the driver to sort out
            value, error = None, rx.RayTaskError("run", repr(exc), exc)
        self.after(API_S, lambda: ref.resolve(value, error))

    def start(self, run: Run) -> None:
        self.running.add(run)
        run.begin()

    def changed(self, actor: Actor) -> None:
        if isinstance(actor, Replica) and self.fibers is None:  # the stand-in episodes' engine model
            for run in sorted(self.running, key=lambda r: r.ep.key):
                if actor in run.replicas:
                    run.replica_changed(actor)

    def inject(self, fault: Fault) -> None:
        self.log.append((round(self.now, 3), fault.kind, fault.target))
        if fault.kind == "worker_crash" and self.workers:
            w = self.workers[fault.target % len(self.workers)]
            if len(w.runs) == 1:
                self.crashed_alone.add(w.runs[0].ep.key)
            w.crash(fault.restart_s)
        elif fault.kind == "replica_crash" and self.replicas:
            live = [r for r in self.replicas if r.state != "DEAD"]
            if live:
                live[fault.target % len(live)].crash(fault.restart_s)
        elif fault.kind in ("worker_node", "gpu_node"):
            self.lose_node("cpu0" if fault.kind == "worker_node" else f"gpu{fault.target % 2}", fault.back_s)

    def lose_node(self, name: str, back_s: float) -> None:
        node = self.machines[name]
        if not node.up:
            return
        node.up = False
        on_it = [a for a in [*self.workers, *self.replicas] if a.node == name and a.state != "DEAD"]
        for w in [a for a in on_it if isinstance(a, Worker)]:
            for run in list(w.runs):
                run.fail(rx.ActorUnavailableError("Connection refused", None))
        for r in [a for a in on_it if isinstance(a, Replica)]:
            r.lost(rx.ActorUnavailableError("Connection refused", None))  # its calls in flight fail
            self.changed(r)  # its episodes stall

        def detected():
            node.listed = False
            for a in on_it:
                if a.state == "ALIVE":
                    a.set_state("RESTARTING")

        self.after(DETECT_S, detected)
        if back_s != NEVER:
            self.after(max(back_s, DETECT_S + 1), lambda: self.replace_node(name, on_it))

    def replace_node(self, name: str, actors: list) -> None:
        new = f"{name}'"
        self.machines[new] = Node()
        for a in actors:
            if a.state == "RESTARTING":
                a.node = new
                a.restarts += 1
                a.set_state("ALIVE")

    # the clock (handoff.sweep.clock)
    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        until = self.now + seconds
        if self.fibers is None or self.fibers.current() is None:
            self.advance(until)
            return
        while self.now < until:
            self.fibers.block(until, [])

    # ray's API, as the driver uses it
    def wait(self, refs, num_returns=1, timeout=None):
        refs = list(refs)
        need = min(num_returns, len(refs))
        until = self.now + (NEVER if timeout is None else timeout)
        if self.fibers is None or self.fibers.current() is None:
            self.advance(until, lambda: sum(r.done for r in refs) >= need)
        else:  # an episode's wait (RayEngineClient): its fiber blocks, the simulator goes on
            while sum(r.done for r in refs) < need and self.now < until:
                self.fibers.block(until, [r for r in refs if not r.done])
        ready = [r for r in refs if r.done]
        return ready, [r for r in refs if not r.done]

    def get(self, ref, timeout=None):
        if isinstance(ref, list):
            return [self.get(r, timeout) for r in ref]
        if not ref.done:
            self.wait([ref], timeout=timeout)
            if not ref.done:
                raise rx.GetTimeoutError("Get timed out")
        if ref.error is not None:
            raise ref.error
        return ref.value

    def cancel(self, ref, **_) -> None:
        for run in list(self.running):
            if run.ref is ref:
                run.cancel()
        task = self.tasks.pop(ref, None)  # a call to a replica (RayEngineClient's request, given up)
        if task is not None:
            task.cancel()
            self.fibers.poke()
        for replica in self.replicas:
            for call in [c for c in replica.queued if c[2] is ref]:
                replica.queued.remove(call)
                ref.resolve(error=rx.TaskCancelledError())

    def cancelled(self) -> bool:
        """Whether the episode this code runs in was cancelled (engines.task_cancelled)."""
        fiber = self.fibers.current() if self.fibers is not None else None
        return fiber is not None and fiber.owner.cancelled

    def put(self, value):
        return value

    def kill(self, handle) -> None:
        if isinstance(handle, Worker):
            for run in list(handle.runs):
                run.fail(rx.ActorDiedError())
        handle.set_state("DEAD")

    def remote(self, cls):
        return ActorClass(self)

    def nodes(self) -> list[dict]:
        return [{"NodeID": name, "Alive": n.listed, "Resources": {"CPU": 64, "GPU": 8}}
                for name, n in self.machines.items()]

    def cluster_resources(self) -> dict:
        return {"CPU": 64, "GPU": 8}

    def get_runtime_context(self) -> Context:
        return Context(self.job)


@contextlib.contextmanager
def seams(sim: Sim):
    """What the driver and the engine client read of Ray outside the `ray` the driver is given (the
    GCS's actor table, the nodes alive, the `ray` module's wait/get/cancel that RayEngineClient calls,
    whether its Ray task was cancelled), and their clock, pointed at `sim` for the block."""
    import ray

    def alive(_ray=None) -> set:
        return {name for name, n in sim.machines.items() if n.listed}

    patches = {(driver_module, "actor_place"): lambda handle: handle.place, (driver_module, "nodes_alive"): alive,
               (engines_module, "actor_place"): lambda handle: handle.place, (engines_module, "nodes_alive"): alive,
               (engines_module, "actor_state"): lambda handle: handle.state,
               (schedule_module, "actor_state"): lambda handle: handle.state,
               (engines_module, "task_cancelled"): sim.cancelled, (engines_module, "LEASE_S"): LEASE_S,
               (ray, "wait"): sim.wait, (ray, "get"): sim.get, (ray, "cancel"): sim.cancel}
    saved = [(module, name, getattr(module, name)) for module, name in patches]
    for (module, name), value in patches.items():
        setattr(module, name, value)
    kept = IDLE.shape, IDLE.handles  # a real sweep's idle workers in this process, untouched by the simulated ones
    try:
        with sweep_clock.use(sim):
            try:
                yield sim
            finally:
                if sim.fibers is not None:  # what still runs on the cluster ends with it
                    sim.fibers.close()
    finally:
        for module, name, value in saved:
            setattr(module, name, value)
        IDLE.shape, IDLE.handles = kept


# -- a run and its invariants ------------------------------------------------------------------------
@dataclass
class Outcome:
    seed: int
    violations: list[str]
    charged: list[tuple]
    failed: dict[str, str]
    done: list[str]
    virtual_s: float
    resumed: bool
    log: list
    served: list = field(default_factory=list)  # CLIENTS: each request served, (replica, session, start, end)


_BASE: list = []  # the sweep's config as composed (once: Hydra's compose costs ~0.4 s), as JSON
_CONFIGS: dict = {}  # validated, per cluster shape, schedule and attempts


def config(sched: Schedule, run_dir: Path):
    """The sweep's config for `sched` (its cluster shape, schedule and attempts) and `run_dir`."""
    from handoff.sweep.config import validate
    from handoff.sweep.run import compose

    if not _BASE:
        _BASE.append(validate(compose([
            "run_dir=/nonexistent", "engine=scripted", f"engine.load_timeout_s={LOAD_TIMEOUT_S}",
            f"episode_timeout_s={EPISODE_TIMEOUT_S}", "logger.mode=disabled"])).model_dump(mode="json"))
    key = (sched.workers, sched.threads, sched.replicas, sched.max_attempts, sched.rolling)
    if key not in _CONFIGS:
        base = _BASE[0]
        _CONFIGS[key] = validate(base | {
            "schedule": "rolling" if sched.rolling else "sequential", "max_attempts": sched.max_attempts,
            "workers": base["workers"] | {"processes": sched.workers, "threads": sched.threads},
            "engine": base["engine"] | {"replicas": sched.replicas}})
    return _CONFIGS[key].model_copy(update={"run_dir": str(run_dir)})


def _scratch() -> str | None:
    """Where a schedule's run directory goes: memory where there is /dev/shm (the shard files' fsyncs
    cost nothing there), else the temp dir."""
    return "/dev/shm" if os.access("/dev/shm", os.W_OK) else None


def _checkpoints(cfg, sched: Schedule) -> list:
    """The plan's checkpoints: the scripted engine's default, once per model name the shards use."""
    from handoff.sweep.config import checkpoints

    base = checkpoints(cfg)[0]
    steps = sorted({int(s.model.rsplit("step", 1)[1]) for s in sched.shards})
    return [base.model_copy(update={"name": model(step), "step": step}) for step in steps]


def bound_s(sched: Schedule) -> float:
    """No sweep of this schedule may take longer (virtual seconds): every episode run max_attempts + its
    free resubmissions after each fault, each fault's outage and every engine start."""
    work = sum(min(s.duration, EPISODE_TIMEOUT_S) for s in sched.episodes.values())
    per_fault = 2 * LOAD_TIMEOUT_S + EPISODE_TIMEOUT_S + 220
    return (work + EPISODE_TIMEOUT_S) * (sched.max_attempts + 3) + (len(sched.faults) + 2) * per_fault * 4 \
        + 10 * LOAD_TIMEOUT_S


def run(seed: int, faults: bool = True, sched: Schedule | None = None, root: Path | None = None,
        mode: str = CLIENTS) -> Outcome:
    """Run schedule `seed` (or `sched`) on the real driver; check the invariants."""
    sched = sched or draw(seed, faults)
    tmp = Path(tempfile.mkdtemp(prefix=f"sim-{seed}-", dir=_scratch())) if root is None else root
    try:
        cfg = config(sched, tmp / "run")
        return drive(sched, cfg, _checkpoints(cfg, sched), tmp / "run", faults, mode)
    finally:
        if root is None:
            shutil.rmtree(tmp, ignore_errors=True)


def run_plan(cfg, ckpts: list, shards: list[Shard], run_dir: Path, seed: int = 0) -> Outcome:
    """A real sweep's plan (its config, checkpoints and shards) on the simulator with no fault, each
    episode the real one: EpisodeWorker.run (tau2, the evaluator) with the agent and the user simulator
    on real EngineHosts of the configured engine through RayEngineClient. `seed` draws only the
    episodes' virtual durations (the order they finish in); the run directory is `run_dir`."""
    rng = random.Random(seed)
    w = cfg.workers
    sched = Schedule(seed, w.processes or 1, w.threads, cfg.engine.replicas, shards,
                     {e.key: EpisodeSpec(rng.uniform(2, 30)) for s in shards for e in s.episodes},
                     rolling=cfg.schedule == "rolling", max_attempts=cfg.max_attempts)
    return drive(sched, cfg.model_copy(update={"run_dir": str(run_dir)}), ckpts, run_dir, False, REAL)


def drive(sched: Schedule, cfg, ckpts: list, run_dir: Path, faults: bool, mode: str) -> Outcome:
    """The driver on the simulated cluster until the sweep ends (a second driver resumes it after a
    kill); the invariants checked on `run_dir`."""
    charged: list[tuple] = []
    violations: list[str] = []
    resumed, virtual = False, 0.0
    log: list = []
    served: list = []
    crashed_alone: set[tuple] = set()
    original_charge = Driver._charge

    def spy(self, item, exc, placement, bar):
        charged.append(item.episode.key)
        return original_charge(self, item, exc, placement, bar)

    for job, with_faults in (("job-1", faults), ("job-2", False)):
        if job == "job-2" and not resumed:
            break
        sim = Sim(sched, f"{sched.seed}-{job}", with_faults, bound_s(sched), cfg, mode)
        d = Driver(cfg, SweepRun(run_dir), ckpts, sched.shards, progress=False, placement=Placement(sim))
        Driver._charge = spy
        try:
            with seams(sim):
                d.execute(ray=sim)
        except DriverKilled:
            resumed = True
        except Hang as exc:
            violations.append(f"no hang: {exc}")
            break
        except Exception as exc:  # noqa: BLE001 - the sweep escaped with a traceback (exit 1)
            violations.append(f"no crash: the sweep raised {type(exc).__name__}: {exc}"[:300])
            break
        finally:
            Driver._charge = original_charge
            virtual += sim.now
            log += sim.log
            served += sim.served
            crashed_alone |= sim.crashed_alone
        if job == "job-1" and not resumed:
            break
    if not violations:
        violations += check(sched, SweepRun(run_dir), charged, crashed_alone, faults)
    run_ = SweepRun(run_dir)
    failed = {s.id: run_.read_failed(s.id).kind for s in sched.shards if run_.failed_path(s.id).exists()}
    done = [s.id for s in sched.shards if run_.shard_path(s.id).exists()]
    return Outcome(sched.seed, violations, charged, failed, done, virtual, resumed, log, served)


# What two sweeps of the same plan and seeds may differ in, and nothing else: what a clock measured (the
# episode's wall time, its split and its engine time) and tau2's id and timestamps of the run; in a shard
# file's header, its checksum (of those records) and the run's uuid (the manifest's: the simulator writes none).
WALL_CLOCK = ("wall_s", "usage.cost.agent_engine_s", "usage.cost.user_engine_s", "usage.cost.gpu_s",
              "usage.cost.agent_s", "usage.cost.user_s", "usage.cost.tool_s", "simulation.id",
              "simulation.timestamp", "simulation.start_time", "simulation.end_time", "simulation.duration",
              "simulation.messages.*.timestamp")
RUN_HEADER = ("sha256", "run_uuid")


def shard_contents(run_dir: Path) -> dict[str, tuple[dict, list[dict]]]:
    """Each shard file of `run_dir` by name: its header and its records in file order (as JSON),
    without the fields of RUN_HEADER and WALL_CLOCK."""
    from handoff.records import read_shard_header

    out = {}
    for path in SweepRun(run_dir).shards():
        header = {k: v for k, v in read_shard_header(path).items() if k not in RUN_HEADER}
        records = [r.model_dump(mode="json") for r in read_shard(path)]
        for record in records:
            for field_path in WALL_CLOCK:
                _drop(record, field_path.split("."))
        out[path.name] = header, records
    return out


def _drop(tree, keys: list[str]) -> None:
    """Remove the field at `keys` (a path; `*`: every item of a list) from `tree`."""
    head, rest = keys[0], keys[1:]
    children = (tree if head == "*" else [tree.get(head)]) if rest else []
    if not rest:
        tree.pop(head, None)
    for child in children:
        if isinstance(child, (dict, list)):
            _drop(child, rest)


def check(sched: Schedule, run: SweepRun, charged: list[tuple], crashed_alone: set, faults: bool) -> list[str]:
    out = []
    own = sched.own() | crashed_alone
    for shard in sched.shards:
        planned = [e.key for e in shard.episodes]
        done, failed = run.shard_path(shard.id).exists(), run.failed_path(shard.id).exists()
        if done == failed:
            out.append(f"accounting: shard {shard.id} is {'both done and failed' if done else 'neither done nor failed'}")
            continue
        if done:
            keys = [r.key for r in read_shard(run.shard_path(shard.id))]
            if sorted(keys) != sorted(planned):
                out.append(f"accounting: shard {shard.id} holds {keys}, planned {planned}")
            if any(sched.episodes[k].poison for k in planned):
                out.append(f"poison charged: shard {shard.id} finished with a poison episode recorded")
            continue
        kind = run.read_failed(shard.id).kind
        if kind is ShardFailure.INTERNAL:
            out.append(f"accounting: shard {shard.id} failed as internal (neither complete nor failed)")
        if kind is ShardFailure.EPISODE and not own & set(planned):
            out.append(f"own shard alone: shard {shard.id} failed for its episodes, none poison or hung")
        if not faults or sched.fault_free:
            out.append(f"fault-free: shard {shard.id} failed ({kind})")
    for key in charged:
        if key not in own:
            out.append(f"no charge for infrastructure: {'/'.join(map(str, key))} charged an attempt")
    return out
