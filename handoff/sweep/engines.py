"""Engine actors and their client.

`EngineHost` is the body of an async Ray actor: one replica of one checkpoint, hosting an
AsyncEngine (handoff.engine.base) of engine.kind, built by handoff.engine.factory: AsyncVLLMEngine
(GPU or CPU build) or, for tests and dry runs, the stateless scripted engine. The engine is built on
the first request, so an actor that Ray restarts after a crash reloads its checkpoint by itself and
the retried requests find it ready.

`RayEngineClient` is what episodes see: a synchronous handoff.engine.base.Engine that routes every
request of a session (a conversation) to the same replica, so vLLM's prefix cache is reused turn
after turn. While its replica is unavailable (its node died, Ray is restarting it) a request waits,
up to `engine.load_timeout_s`, for the replacement (Ray retries it there); only then, or when the
replica is dead for good, it raises EngineUnavailableError, which the driver does not count as a
failure of the episode.

Placement: a replica holds `cpus` CPUs per tensor-parallel rank and, on GPU, its GPUs: one actor
with `num_gpus=1` for tensor_parallel_size=1, else an actor in a placement group of its own whose one
bundle holds every GPU and CPU of the replica (on one node), where vLLM's multiprocessing executor
starts its tensor-parallel workers as the actor's child processes (`executor_backend`). A replica
whose vLLM engine died (its engine core or one of its workers was killed) ends its actor's process,
so that Ray restarts it there and retries its requests.
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

from handoff.engine.base import AsyncEngine, ContextOverflowError, Generation, Sampling
from handoff.engine.factory import build_engine, engine_kind, one_engine
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


def actor_state(handle) -> str:
    """The actor's state in the GCS actor table: ALIVE, RESTARTING, PENDING_CREATION,
    DEPENDENCIES_UNREADY or DEAD; UNREGISTERED while the table has no entry for it yet (the actor's
    owner registers it asynchronously: milliseconds after `.remote()`, seconds on a busy machine), which
    is not alive yet and not dead either. (ray.util.state would need the dashboard, which an embedded
    cluster does not start.)"""
    from ray._private import state

    info = state.actors(actor_id=handle._actor_id.hex())
    return info.get("State", UNREGISTERED) if info else UNREGISTERED


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
        self._turns: OrderedDict[str, int] = OrderedDict()  # requests so far per recent session (SESSIONS_KEPT)

    def __repr__(self) -> str:  # Ray's log prefix and the GCS's actor table show it
        return f"EngineHost({self.role}: {self.checkpoint.name})"

    def _serves(self, ck: Checkpoint) -> bool:
        """Whether the engine built for the held checkpoint serves `ck` (one_engine)."""
        return one_engine(ck, self.checkpoint, self.config)

    async def _ensure(self, expected: Checkpoint | None = None):
        async with self._loading:
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

    async def generate(self, prompt_ids: list[int], sampling: dict, request_id: str,
                       checkpoint: dict | None = None, label: list[str] | None = None) -> dict:
        """Complete `prompt_ids`; `label` ([checkpoint, role] of the episode) is what served() counts it under."""
        expected = Checkpoint.model_validate(checkpoint) if checkpoint is not None else None
        started = time.monotonic()
        try:
            engine = await self._ensure(expected)
            generation = await engine.generate(prompt_ids, Sampling.model_validate(sampling), request_id)
        except (ContextOverflowError, StaleCheckpoint):
            raise
        except Exception:  # on the terminal, as Ray forwards it to the driver's (and a job's) log
            self.out.failure(f"engine {self.checkpoint.name} ({self.role}) failed request {request_id}",
                             traceback.format_exc())
            self._exit_if_dead()
            raise
        self._count(label, request_id, len(prompt_ids), generation.cached_prompt_tokens, len(generation.token_ids),
                    time.monotonic() - started)
        return generation.model_dump()

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
        """A dead engine (a vLLM engine whose core or one of whose tensor-parallel workers died) serves
        nothing more: end this process (not raise), so that Ray restarts the replica, which reloads its
        checkpoint, and retries its requests there, as after a crash of the actor itself."""
        if self._engine is not None and self._engine.dead:
            import psutil

            print(f"engine {self.checkpoint.name} ({self.role}) is dead: restarting its replica", file=sys.stderr,
                  flush=True)
            for child in psutil.Process().children(recursive=True):  # what is left of vLLM's processes
                with contextlib.suppress(psutil.NoSuchProcess):
                    child.kill()
            os._exit(1)


def route(session_id: str | None, n: int) -> int:
    """The replica of a session: stable across processes (sha256, not the salted hash())."""
    if session_id is None:
        return int.from_bytes(os.urandom(2), "big") % n
    return int.from_bytes(hashlib.sha256(session_id.encode()).digest()[:4], "big") % n


class RayEngineClient:
    """A synchronous Engine over the replicas of one checkpoint, with sticky session routing."""

    POLL_S = 5.0  # how often a pending request checks that its replica is alive
    TICK_S = 0.5  # how often it checks that its episode was not cancelled

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
        self._stop_if_cancelled()
        ref = replica.generate.remote(list(prompt_ids), sampling.model_dump(), request_id, self.checkpoint, self.label)
        try:
            return Generation.model_validate(ray.get(self._wait(ref, replica, index)))
        except ray.exceptions.RayTaskError as exc:
            if isinstance(exc.cause, ContextOverflowError):  # the agent records it as a format event
                raise exc.cause from None
            raise
        except ray.exceptions.RayActorError as exc:  # dead for good (engine.max_restarts spent)
            raise EngineUnavailableError(f"{self.name} replica {index} is dead: {exc}"[:2000]) from None

    def _wait(self, ref, replica, index: int):
        """`ref` once it is ready. The request may take engine.request_timeout_s while its replica
        is alive; while the replica is down (Ray retries the request on its replacement) it waits
        up to engine.load_timeout_s for the replacement. A cancelled episode cancels the request
        (the engine actor's asyncio task: vLLM aborts it) and stops."""
        import ray

        deadline, down_since = time.monotonic() + self.timeout_s, None
        checked = time.monotonic()
        while not ray.wait([ref], timeout=self.TICK_S)[0]:
            self._stop_if_cancelled(ref)
            now = time.monotonic()
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
            elif down_since is not None:  # back: the retried request starts over
                deadline, down_since = now + self.timeout_s, None
            elif now > deadline:
                ray.cancel(ref)  # abandoned: vLLM aborts it instead of generating on
                raise TimeoutError(f"{self.name} request ran over engine.request_timeout_s={self.timeout_s:g}s")
        return ref

    def _stop_if_cancelled(self, ref=None) -> None:
        import ray

        if task_cancelled():
            if ref is not None:
                ray.cancel(ref)
            raise EpisodeCancelled(f"{self.name}: the episode was cancelled (it ran over episode_timeout_s)")
