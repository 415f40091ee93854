"""Engine actors and their client.

`EngineHost` is the body of an async Ray actor: one replica of one checkpoint, hosting an
AsyncEngine (handoff.engine.base) of engine.kind, built by handoff.engine.factory: AsyncVLLMEngine
(GPU or CPU build) or, for tests and dry runs, the stateless scripted engine. The engine is built on
the first request, so an actor that Ray restarts after a crash reloads its checkpoint by itself. A
restarted replica whose engine does not build again takes itself out of service (it ends its actor
for good, which Ray does not restart): its requests fail as "actor died" and their episodes go to
the replicas that serve, instead of failing on it one by one.

`RayEngineClient` is what episodes see: a synchronous handoff.engine.base.Engine that routes every
request of a session (a conversation) to the same replica, so vLLM's prefix cache is reused turn
after turn. Ray does not retry a request whose replica died (`max_task_retries=0` on `generate`; the
actor's loads are retried): the client resubmits it once the replica is back, as a suspect that runs
there alone (`enter_alone`: the replica's `Lane` lets nothing else run meanwhile). Only a death while
a request ran alone, on a node that lives on, is its doing; after REQUEST_DEATHS of those it fails with PoisonRequestError, the
episode's own failure (the agent ends the episode with agent_error, the user simulator with
user_error), and the replica, its restarts not spent, serves the others. While its replica is
unavailable (its node died, Ray is restarting it) a request waits, up to `engine.load_timeout_s`,
for the replacement; only then, or when the replica is dead for good, it raises
EngineUnavailableError, which the driver does not count as a failure of the episode.

Placement: a replica holds `cpus` CPUs per tensor-parallel rank and, on GPU, its GPUs: one actor
with `num_gpus=1` for tensor_parallel_size=1, else an actor in a placement group of its own whose one
bundle holds every GPU and CPU of the replica (on one node), where vLLM's multiprocessing executor
starts its tensor-parallel workers as the actor's child processes (`executor_backend`); the sweep's
engine pool starts them (handoff.sweep.pool). A replica whose vLLM engine died (its engine core or
one of its workers was killed) ends its actor's process, so that Ray restarts it there; its requests
in flight are resubmitted by their clients.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import os
import sys
import time
import traceback
import uuid
from collections import OrderedDict
from dataclasses import dataclass

from handoff.engine.base import AsyncEngine, ContextOverflowError, Generation, PoisonRequestError, Sampling
from handoff.engine.factory import build_engine, engine_kind, one_engine
from handoff.sweep import clock
from handoff.sweep.config import Checkpoint, EngineConfig


class EpisodeCancelled(RuntimeError):
    """The driver gave the episode up (it ran over episode_timeout_s) and cancelled its Ray task."""


def task_cancelled() -> bool:
    """Whether ray.cancel() was called on the Ray task this thread runs (an episode in a threaded
    worker actor); False outside such a task."""
    import ray

    try:
        return ray.get_runtime_context().is_canceled()
    except RuntimeError:  # the driver, an async actor
        return False


class EngineUnavailableError(RuntimeError):
    """An engine replica that is dead for good or stayed unavailable past engine.load_timeout_s:
    not the episode's fault (the driver does not count it as an attempt)."""


UNREGISTERED = "UNREGISTERED"


@dataclass(frozen=True)
class Place:
    """Where the GCS has an actor (a worker or an engine replica): its state, its node (hex id) and how
    often Ray restarted it."""

    state: str
    node: str = ""
    restarts: int = 0


def actor_place(handle) -> Place:
    """The actor's state in the GCS actor table (ALIVE, RESTARTING, PENDING_CREATION,
    DEPENDENCIES_UNREADY or DEAD), its node and restarts; UNREGISTERED while the table has no entry for
    it yet (the actor's owner registers it asynchronously: milliseconds after `.remote()`, seconds on a
    busy machine), which is not alive yet and not dead either. (ray.util.state would need the dashboard,
    which an embedded cluster does not start.)"""
    from ray._private import state

    info = state.actors(actor_id=handle._actor_id.hex())
    if not info:
        return Place(UNREGISTERED)
    return Place(info["State"], info["Address"]["NodeID"], info["NumRestarts"])


def actor_state(handle) -> str:
    return actor_place(handle).state


def nodes_alive(ray) -> set[str]:
    """The hex ids of the nodes the GCS lists alive."""
    return {n["NodeID"] for n in ray.nodes() if n["Alive"]}


def replica_options(engine: EngineConfig) -> dict:
    """Ray resources of one replica's actor: engine.replica_cpus CPUs and its GPUs. For TP>1 in a
    placement group of its own of one bundle that holds them all, on one node and kept reserved
    while Ray restarts the actor; vLLM's workers run in it as the actor's child processes."""
    resources = {"num_cpus": engine.replica_cpus, "num_gpus": engine.num_gpus}
    if engine.tensor_parallel_size == 1:
        return resources
    from ray.util.placement_group import placement_group
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

    bundle = {"CPU": engine.replica_cpus, **({"GPU": engine.num_gpus} if engine.num_gpus else {})}
    group = placement_group([bundle], strategy="STRICT_PACK")
    return {**resources, "scheduling_strategy": PlacementGroupSchedulingStrategy(group, placement_group_bundle_index=0)}


def actor_env(checkpoint: Checkpoint, engine: EngineConfig) -> dict[str, str]:
    """Environment variables of an engine actor's process (Ray runtime_env)."""
    return engine_kind(engine).env(checkpoint, engine)


class StaleCheckpoint(RuntimeError):
    """A request for a checkpoint other than the one the replica holds now (a late request of an
    episode the driver already gave up, after the replica moved on to another checkpoint)."""


SESSIONS_KEPT = 4096  # sessions whose turns a replica counts (the most recent): far more than run at once
REQUEST_DEATHS = 2  # deaths of its replica while a request ran there alone that fail it (PoisonRequestError)
LEASE_S = 60.0  # how long a suspect's lane (EngineHost.enter_alone) waits for its request


class Lane:
    """Who runs on a replica: requests share it, and a suspect (a request that was in flight when the
    replica died) runs alone: `take` waits until nothing else runs, and holds new requests back (in
    `enter`) until it is given back. So a death while a suspect holds the lane is that request's doing."""

    def __init__(self) -> None:
        self._cond = asyncio.Condition()
        self.running = 0  # requests sharing the replica now
        self.waiting = 0  # suspects waiting for the lane (they go before new requests)
        self.holder: str | None = None  # the request id of the suspect that holds it

    async def enter(self) -> None:
        async with self._cond:
            await self._cond.wait_for(lambda: self.holder is None and not self.waiting)
            self.running += 1

    async def leave(self) -> None:
        async with self._cond:
            self.running -= 1
            self._cond.notify_all()

    async def take(self, request_id: str) -> None:
        async with self._cond:
            self.waiting += 1
            try:
                await self._cond.wait_for(lambda: self.holder is None and self.running == 0)
                self.holder = request_id
            finally:
                self.waiting -= 1
                self._cond.notify_all()

    async def give(self, request_id: str) -> None:
        async with self._cond:
            if self.holder == request_id:
                self.holder = None
                self._cond.notify_all()


class EngineHost:
    """One engine replica (use through ray.remote: an async actor). `load` switches it to another
    checkpoint in place (the rolling schedule); each request names the checkpoint it expects, and a
    replica that Ray restarted (constructed with its first checkpoint) loads the requested one."""

    def __init__(self, checkpoint: dict, engine: dict, role: str, log_dir: str | None = None):
        from handoff.sweep.logs import ActorOutput

        self.out = ActorOutput(log_dir, f"engine-{role}")  # the process's output to <run>/logs/ unless verbose
        self.checkpoint = Checkpoint.model_validate(checkpoint)
        self.config = EngineConfig.model_validate(engine)
        self.role = role
        self._engine: AsyncEngine | None = None
        self._loading = asyncio.Lock()
        self._served: dict = {}  # served(): counters per checkpoint and role
        self._lane = Lane()  # suspects run alone (RayEngineClient)
        self._broken = False  # its engine failed to build for a request: out of service
        self._lease = None  # the asyncio timer that gives a suspect's unclaimed lane back
        self._turns: OrderedDict[str, int] = OrderedDict()  # requests so far per recent session (SESSIONS_KEPT)
        self._admitted: dict[str, float] = {}  # requests let in (lane entered, engine loaded): since when

    def __repr__(self) -> str:  # Ray's log prefix and the GCS's actor table show it
        return f"EngineHost({self.role}: {self.checkpoint.name})"

    def _serves(self, ck: Checkpoint) -> bool:
        """Whether the engine built for the held checkpoint serves `ck` (one_engine)."""
        return one_engine(ck, self.checkpoint, self.config)

    async def _ensure(self, expected: Checkpoint | None = None):
        async with self._loading:
            if self._broken:  # the requests that waited for a build that failed: not built again
                raise RuntimeError(f"engine {self.checkpoint.name} ({self.role}) is out of service")
            if expected is not None and not self._serves(expected):
                if self._engine is not None:
                    raise StaleCheckpoint(f"replica holds {self.checkpoint.name}, request is for {expected.name}")
                self.checkpoint = expected
            if self._engine is None:
                self._engine = await self._build()
        return self._engine

    async def _build(self) -> AsyncEngine:
        try:
            engine = await build_engine(self.checkpoint, self.config, self.role)
        except Exception:
            self.out.failure(f"engine {self.checkpoint.name} ({self.role}) failed to load", traceback.format_exc())
            raise
        described = engine.describe()
        if described is not None:
            self.out.say(f"engine {self.checkpoint.name} ({self.role}) loaded: {described}; "
                         f"its log: {self.out.path or 'this terminal (verbose)'}")
        return engine

    async def ready(self) -> int:
        """Load the checkpoint now; return this replica's pid."""
        await self._ensure()
        return os.getpid()

    async def load(self, checkpoint: dict) -> int:
        """Hold `checkpoint` from now on, in this process: the engine takes it in place where it can
        (AsyncEngine.reload: a vLLM engine, the weights of a checkpoint of the same architecture);
        otherwise the current engine stops and a new one loads."""
        ck = Checkpoint.model_validate(checkpoint)
        async with self._loading:
            if ck != self.checkpoint or self._engine is None:
                held, self._engine = self._engine, None
                if not await self._reloaded(held, ck):
                    if held is not None:
                        await held.shutdown()
                    self.checkpoint = ck
                    held = await self._build()
                self._engine, self.checkpoint = held, ck
        return os.getpid()

    async def _reloaded(self, held: AsyncEngine | None, ck: Checkpoint) -> bool:
        """Whether the held engine now serves `ck`, reloaded in place."""
        if held is None:
            return False
        try:
            return await held.reload(ck)
        except Exception as exc:  # noqa: BLE001 - a new engine is the fallback
            print(f"in-place reload of {ck.name} failed, loading a new engine: {exc!r}", file=sys.stderr)
            return False

    async def enter_alone(self, request_id: str) -> int:
        """Take the lane for the suspect `request_id` (nothing else runs on the replica until its
        `generate(..., alone=True)` ends, or LEASE_S if that never comes); return this replica's pid."""
        await self._lane.take(request_id)
        loop = asyncio.get_running_loop()
        self._lease = loop.call_later(LEASE_S, lambda: loop.create_task(self._lane.give(request_id)))
        return os.getpid()

    async def generate(self, prompt_ids: list[int], sampling: dict, request_id: str,
                       checkpoint: dict | None = None, label: list[str] | None = None, alone: bool = False) -> dict:
        """Complete `prompt_ids`; `label` ([checkpoint, role] of the episode) is what served() counts it
        under. `alone`: a suspect's request, served alone (in the lane enter_alone took for it)."""
        if alone:
            if self._lane.holder != request_id:  # its lease ran out: take the lane again
                await self._lane.take(request_id)
            elif self._lease is not None:
                self._lease.cancel()
        else:
            await self._lane.enter()
        self._admitted[request_id] = clock.monotonic()  # let in: its time counts (again once a load is done)
        try:
            return await self._generate(prompt_ids, sampling, request_id, checkpoint, label)
        finally:
            self._admitted.pop(request_id, None)
            await (self._lane.give(request_id) if alone else self._lane.leave())

    async def admitted_s(self, request_id: str) -> float | None:
        """How long `request_id` has been admitted (its lane entered, and since the engine it waited
        for loaded): what its engine.request_timeout_s counts; None while it waits for its lane (a
        suspect running alone, or its own turn alone)."""
        since = self._admitted.get(request_id)
        return None if since is None else clock.monotonic() - since

    async def _generate(self, prompt_ids: list[int], sampling: dict, request_id: str, checkpoint: dict | None,
                        label: list[str] | None) -> dict:
        expected = Checkpoint.model_validate(checkpoint) if checkpoint is not None else None
        started = time.monotonic()
        try:
            engine = await self._ensure(expected)
            self._admitted[request_id] = clock.monotonic()  # a restarted replica's load was not its time
        except StaleCheckpoint:
            raise
        except Exception:
            if not (self._broken or _restarted_by_ray()):
                self.out.failure(f"engine {self.checkpoint.name} ({self.role}) failed request {request_id}",
                                 traceback.format_exc())
                raise
            if not self._broken:  # a replica Ray restarted whose engine does not build again
                self.out.failure(f"engine {self.checkpoint.name} ({self.role}) failed to load again after a "
                                 f"restart (request {request_id}): out of service", traceback.format_exc())
            self._broken = True
            self._out_of_service()
            raise
        try:
            generation = await engine.generate(prompt_ids, Sampling.model_validate(sampling), request_id)
        except ContextOverflowError:
            raise
        except Exception:  # on the terminal, as Ray forwards it to the driver's (and a job's) log
            self.out.failure(f"engine {self.checkpoint.name} ({self.role}) failed request {request_id}",
                             traceback.format_exc())
            self._exit_if_dead()
            raise
        self._count(label, request_id, len(prompt_ids), generation.cached_prompt_tokens, len(generation.token_ids),
                    time.monotonic() - started)
        return generation.model_dump()

    # Ray does not retry a request whose replica died (the actor's max_task_retries=-1 is for its loads):
    # RayEngineClient resubmits it, counting the deaths of the replica while it ran there alone. (What
    # @ray.method(max_task_retries=0) sets; engines.py imports no Ray.)
    enter_alone.__ray_max_task_retries__ = 0
    generate.__ray_max_task_retries__ = 0

    def _out_of_service(self) -> None:
        """End this actor for good (Ray does not restart an actor that exits itself): its requests fail
        with "actor died", and their episodes go to the replicas that serve."""
        import ray

        print(f"engine {self.checkpoint.name} ({self.role}) cannot build its engine: out of service", file=sys.stderr,
              flush=True)
        ray.actor.exit_actor()

    def _count(self, label: list[str] | None, request_id: str, prompt: int, cached: int, generated: int,
               seconds: float) -> None:
        name, role = label or (self.checkpoint.name, self.role)
        session = request_id.rsplit("/", 1)[0]
        turn = self._turns[session] = self._turns.get(session, 0) + 1
        self._turns.move_to_end(session)
        if len(self._turns) > SESSIONS_KEPT:  # a long sweep's finished sessions are forgotten
            self._turns.popitem(last=False)
        c = self._served.setdefault(name, {}).setdefault(role, {"requests": 0, "prompt_tokens": 0,
                                                                "cached_prompt_tokens": 0, "generated_tokens": 0,
                                                                "request_s": 0.0, "turns": {}})
        for counters in (c, c["turns"].setdefault(str(turn), {"requests": 0, "prompt_tokens": 0,
                                                               "cached_prompt_tokens": 0})):
            counters["requests"] += 1
            counters["prompt_tokens"] += prompt
            counters["cached_prompt_tokens"] += cached
        c["generated_tokens"] += generated
        c["request_s"] += seconds

    async def served(self) -> dict:
        """What this replica served since it started, per checkpoint and role (the episode's, from the
        request's label): requests, prompt, cached and generated tokens, request seconds, and
        requests, prompt and cached tokens per turn of a session (1 = its first request)."""
        return self._served

    def _exit_if_dead(self) -> None:
        """A vLLM engine whose core or one of whose tensor-parallel workers died serves nothing more:
        end this process (not raise), so that Ray restarts the replica, which reloads its checkpoint,
        and its clients resubmit their requests there, as after a crash of the actor itself."""
        if self._engine is not None and self._engine.dead:
            import psutil

            print(f"engine {self.checkpoint.name} ({self.role}) is dead: restarting its replica", file=sys.stderr,
                  flush=True)
            for child in psutil.Process().children(recursive=True):  # what is left of vLLM's processes
                with contextlib.suppress(psutil.NoSuchProcess):
                    child.kill()
            os._exit(1)


def _restarted_by_ray() -> bool:
    """Whether this process is an actor that Ray restarted (after a crash), not its first start."""
    import ray

    return ray.is_initialized() and ray.get_runtime_context().was_current_actor_reconstructed


def route(session_id: str | None, n: int) -> int:
    """The replica of a session: stable across processes (sha256, not the salted hash())."""
    if session_id is None:
        return int.from_bytes(os.urandom(2), "big") % n
    return int.from_bytes(hashlib.sha256(session_id.encode()).digest()[:4], "big") % n


class RayEngineClient:
    """A synchronous Engine over the replicas of one checkpoint, with sticky session routing.

    A request whose replica dies under it (Ray restarts the replica and retries none of its requests)
    is a suspect: once the replica is back, the client resubmits it alone (EngineHost.enter_alone: it
    waits until nothing else runs there and holds new requests back). Only a death while it ran there
    alone, on a node that lives on (a node lost is the infrastructure's fault), is its doing: after REQUEST_DEATHS such deaths it fails with PoisonRequestError, the episode's
    own failure, while the requests that merely shared the replica with it go on (each alone once)."""

    POLL_S = 5.0  # how often a pending request checks that its replica is alive
    TICK_S = 0.5  # how often it checks that its episode was not cancelled
    SETTLE_S = 10.0  # how long an "actor died" error may leave the replica alive, unrestarted, before it counts as none

    def __init__(self, replicas: list, timeout_s: float, checkpoint: Checkpoint | None = None,
                 load_timeout_s: float = 900, name: str = "engine", label: list[str] | None = None):
        self.replicas, self.timeout_s, self.load_timeout_s = list(replicas), timeout_s, load_timeout_s
        self.checkpoint = checkpoint.model_dump(mode="json") if checkpoint is not None else None
        self.name = name
        self.label = label  # [checkpoint, role] of the episode: what the replica counts the request under

    def generate(self, prompt_ids: list[int], sampling: Sampling, session_id: str | None = None) -> Generation:
        import ray

        index = route(session_id, len(self.replicas))
        replica = self.replicas[index]
        request_id = f"{session_id or 'anon'}/{uuid.uuid4().hex[:12]}"
        deaths, alone, admitted = 0, False, Place("ALIVE")  # deaths while alone; whether it is a suspect; where it was let in
        while True:
            self._stop_if_cancelled()
            if alone:
                admitted = self._enter_alone(replica, index, request_id)
            ref = replica.generate.remote(list(prompt_ids), sampling.model_dump(), request_id, self.checkpoint,
                                          self.label, alone)
            try:
                return Generation.model_validate(ray.get(self._wait(ref, replica, index, request_id)))
            except ray.exceptions.RayTaskError as exc:
                if isinstance(exc.cause, ContextOverflowError):  # the agent records it as a format event
                    raise exc.cause from None
                raise
            except ray.exceptions.RayActorError as exc:  # the replica died under it, or is dead for good
                if actor_state(replica) == "DEAD":
                    raise EngineUnavailableError(f"{self.name} replica {index} is dead: {exc}"[:2000]) from None
                if alone and self._restarted(replica, index, admitted.restarts) and self._node_lived(admitted):
                    deaths += 1
                    if deaths >= REQUEST_DEATHS:
                        raise PoisonRequestError(
                            f"{self.name} request {request_id} killed replica {index} each time it ran there alone "
                            f"({deaths} times): {exc}"[:2000]) from None
                alone = True

    def _restarted(self, replica, index: int, restarts: int) -> bool:
        """Whether the replica died under a request admitted when it had `restarts` restarts: Ray restarts
        it (True), it is gone for good (EngineUnavailableError), or it stays alive as it was (False: Ray
        could not reach it, it did not die)."""
        since = clock.monotonic()
        while True:
            state, now_restarts = (place := actor_place(replica)).state, place.restarts
            if state == "DEAD":
                raise EngineUnavailableError(f"{self.name} replica {index} is dead")
            if now_restarts > restarts:
                return True
            if clock.monotonic() - since > (self.SETTLE_S if state == "ALIVE" else self.load_timeout_s):
                if state == "ALIVE":
                    return False
                raise EngineUnavailableError(
                    f"{self.name} replica {index} unavailable for more than engine.load_timeout_s="
                    f"{self.load_timeout_s:g}s ({state})")
            self._stop_if_cancelled()
            clock.sleep(self.TICK_S)

    @staticmethod
    def _node_lived(admitted: Place) -> bool:
        """Whether the node the replica ran on when the request was let in is still alive: a replica lost
        with its node (a preempted machine) is the infrastructure's fault, never the request's."""
        import ray

        return admitted.node in nodes_alive(ray)

    def _enter_alone(self, replica, index: int, request_id: str) -> Place:
        """Once the replica is back, take its lane for `request_id` (nothing else runs there until its
        request ends); return where the replica is then (its node, its restarts)."""
        import ray

        since = clock.monotonic()
        while True:
            self._stop_if_cancelled()
            state = actor_state(replica)
            if state == "DEAD":
                raise EngineUnavailableError(f"{self.name} replica {index} is dead")
            if state == "ALIVE":
                try:
                    ray.get(self._wait(replica.enter_alone.remote(request_id), replica, index))
                    return actor_place(replica)  # admitted: it holds the lane, so no other death comes between
                except ray.exceptions.RayActorError:
                    pass  # died again before it was admitted: not its doing
            if clock.monotonic() - since > self.load_timeout_s:
                raise EngineUnavailableError(
                    f"{self.name} replica {index} unavailable for more than engine.load_timeout_s="
                    f"{self.load_timeout_s:g}s ({state})")
            clock.sleep(self.TICK_S)

    def _wait(self, ref, replica, index: int, request_id: str | None = None):
        """`ref` once it is ready. The request `request_id` may take engine.request_timeout_s from its
        admission (the replica's lane entered, its engine loaded: EngineHost.admitted_s), so that a
        wait for another request's suspect, or for a restarted replica's load, is never its own; it
        waits up to engine.load_timeout_s to be admitted, and so does an `enter_alone` (no
        `request_id`). While the replica is down it waits up to engine.load_timeout_s (a death fails
        the request at once: generate resubmits it). A cancelled episode cancels the request (the
        engine actor's asyncio task: vLLM aborts it) and stops."""
        import ray

        deadline, down_since = clock.monotonic() + self.timeout_s, None
        checked = called = clock.monotonic()
        while not ray.wait([ref], timeout=self.TICK_S)[0]:
            self._stop_if_cancelled(ref)
            now = clock.monotonic()
            if now - checked < self.POLL_S:
                continue
            checked, state = now, actor_state(replica)
            if state == "DEAD":
                break  # ray.get raises the actor's error
            if state != "ALIVE":
                down_since = down_since or now
                if now - down_since > self.load_timeout_s:
                    ray.cancel(ref)  # abandoned: the replacement must not generate it on
                    raise EngineUnavailableError(
                        f"{self.name} replica {index} unavailable for more than engine.load_timeout_s="
                        f"{self.load_timeout_s:g}s ({state}): its node is gone and no node with the "
                        f"resources it needs came back")
            elif down_since is not None:  # back: the request starts over
                deadline, called, down_since = now + self.timeout_s, now, None
            elif now > deadline:
                deadline = self._deadline(ref, replica, index, request_id, now, called)
        return ref

    def _deadline(self, ref, replica, index: int, request_id: str | None, now: float, called: float) -> float:
        """Past the request's deadline: a later one while it waits to be admitted (up to
        engine.load_timeout_s: then EngineUnavailableError) or has run less than request_timeout_s
        since its admission; else TimeoutError (also when the replica does not answer)."""
        import ray

        admitted = self._admitted_s(replica, request_id) if request_id is not None else None
        if request_id is None or admitted is None:
            if now - called <= self.load_timeout_s:
                return now + self.POLL_S
            ray.cancel(ref)  # it never got its turn: not its doing
            raise EngineUnavailableError(
                f"{self.name} replica {index}: request not admitted within engine.load_timeout_s="
                f"{self.load_timeout_s:g}s (behind the suspects of a replica death, or a load)")
        if admitted is not False and admitted <= self.timeout_s:
            return now + self.timeout_s - admitted
        ray.cancel(ref)  # abandoned: vLLM aborts it instead of generating on
        raise TimeoutError(f"{self.name} request ran over engine.request_timeout_s={self.timeout_s:g}s")

    def _admitted_s(self, replica, request_id: str) -> float | bool | None:
        """EngineHost.admitted_s of `request_id`; False when the replica does not answer in POLL_S."""
        import ray

        ask = replica.admitted_s.remote(request_id)
        if not ray.wait([ask], timeout=self.POLL_S)[0]:
            ray.cancel(ask)
            return False
        try:
            return ray.get(ask)
        except ray.exceptions.RayError:
            return False

    def _stop_if_cancelled(self, ref=None) -> None:
        import ray

        if task_cancelled():
            if ref is not None:
                ray.cancel(ref)
            raise EpisodeCancelled(f"{self.name}: the episode was cancelled (it ran over episode_timeout_s)")
