"""The sweep's engine pool: which engine replicas run, for which checkpoint and role, and which of
them serve. The driver dispatches episodes; starting, awaiting and stopping engines is the pool's.

`Placement` is the declared interface to where replicas run: start one replica of a checkpoint for a
role, wait for replicas to load, say which are alive, stop one. `RayPlacement` is the sweep's (Ray
actors, a placement group of their own for TP>1); a test gives a fake one, and the pool's decisions are
tested in milliseconds without Ray:

- a set of replicas serves with those that loaded: a replica whose start failed or ran past
  engine.load_timeout_s is stopped and routed around while one replica of the set loaded (the user
  simulator's as an agent checkpoint's); only when none did does the start fail, with the reason;
- an agent checkpoint that is the user simulator's engine (`shares_user_engine`) gets no engines of
  its own, and the engine sets alive at once (`engine_sets`) are what check_resources reserves.
"""

from __future__ import annotations

from typing import Any, Protocol

from handoff.engine.factory import engine_kind, one_engine
from handoff.sweep.config import Checkpoint, SweepConfig
from handoff.sweep.failures import Place
from handoff.sweep.worker import EngineRef


class Placement(Protocol):
    """Where engine replicas run (RayPlacement: Ray actors)."""

    def start(self, ck: Checkpoint, role: str) -> Any:
        """One replica of `ck` for `role`, placed at once; it loads `ck` on its first call. Its handle
        has an `_actor_id` (what Live and the schedules key replicas by)."""

    def await_ready(self, replicas: list, timeout_s: float) -> list[BaseException | None]:
        """Wait up to `timeout_s` for each replica to load: per replica None (loaded), the error its
        load raised, or TimeoutError (still loading)."""

    def place(self, replica) -> Place:
        """Its state (ALIVE, RESTARTING, DEAD, ...), node and restarts (engines.actor_place)."""

    def stop(self, replica) -> None:
        """Stop the replica and free what it holds."""


class EngineStartError(RuntimeError):
    """No replica of an engine set loaded (each one's reason in the message)."""


class EnginePool:
    def __init__(self, cfg: SweepConfig, ckpts: list[Checkpoint], user: Checkpoint | None,
                 placement: Placement):
        self.cfg, self.ckpts, self.user, self.placement = cfg, ckpts, user, placement
        self.routed_around: list[str] = []  # replicas stopped at start while others of their set loaded, and why

    # -- what runs ------------------------------------------------------------------------------
    def shares_user_engine(self, ck: Checkpoint) -> bool:
        """Whether `ck` is served by the user simulator's engines: the same engine settings (path,
        tokenizer, max_model_len), since an engine serves only what it was built for (a scripted
        engine only with engine.script.share_user_engine: EngineKind.shares_user_engine)."""
        e = self.cfg.engine
        return self.user is not None and engine_kind(e).shares_user_engine(e) and one_engine(ck, self.user, e)

    def engine_sets(self) -> int:
        """Engine sets alive at once: the current checkpoint's, plus the user's unless shared (`ckpts`
        holds the checkpoints with engines: an API model's has none, and a sweep of them alone none)."""
        own = any(not self.shares_user_engine(c) for c in self.ckpts)
        return int(own) + int(self.user is not None)

    def engine_cpus(self) -> float:
        return self.engine_sets() * self.cfg.engine.replicas * self.cfg.engine.replica_cpus

    def replica_needs(self) -> str:
        e = self.cfg.engine
        return f"{e.num_gpus} GPU(s) and {e.replica_cpus:g} CPU(s) on one node"

    def load_timeout_error(self, name: str) -> str:
        return (f"{name} did not start within engine.load_timeout_s={self.cfg.engine.load_timeout_s:g}s: "
                f"each replica needs {self.replica_needs()} (see `ray status`)")

    def dead_error(self, ref: EngineRef) -> str:
        return f"{ref.name}: every replica is dead (engine.max_restarts={self.cfg.engine.max_restarts} restarts spent)"

    # -- starting and stopping ------------------------------------------------------------------
    def launch(self, ck: Checkpoint, role: str) -> EngineRef:
        """engine.replicas replicas of `ck` for `role`, placed now, loading on their first call."""
        return EngineRef(ck, [self.placement.start(ck, role) for _ in range(self.cfg.engine.replicas)], role)

    def await_ready(self, ref: EngineRef) -> EngineRef:
        """The replicas of `ref` that loaded within engine.load_timeout_s; the others are stopped
        (routed around). Raises EngineStartError (TimeoutError when every one ran late) when none did,
        every replica stopped (their placement groups freed for the next checkpoint)."""
        try:
            results = self.placement.await_ready(ref.replicas, self.cfg.engine.load_timeout_s)
        except BaseException:
            self.stop(ref)
            raise
        loaded = [r for r, error in zip(ref.replicas, results) if error is None]
        failed = [(r, error) for r, error in zip(ref.replicas, results) if error is not None]
        for replica, error in failed:
            self.placement.stop(replica)
        errors = [e for _, e in failed]
        if not loaded:
            own = [e for e in errors if not isinstance(e, TimeoutError)]
            if not own:
                raise TimeoutError(self.load_timeout_error(ref.name))
            raise EngineStartError(f"{own[0]}") from own[0]
        for error in errors:
            why = self.load_timeout_error(ref.name) if isinstance(error, TimeoutError) else f"{error}"
            self.routed_around.append(f"{ref.name}: a replica did not start, {len(loaded)} serve: {why}"[:2000])
        return EngineRef(ref.checkpoint, loaded, ref.role)

    def start(self, ck: Checkpoint, role: str) -> EngineRef:
        """Launch the replicas and wait until they are loaded (await_ready)."""
        return self.await_ready(self.launch(ck, role))

    def stop(self, ref: EngineRef | None) -> None:
        for replica in ref.replicas if ref else []:
            self.placement.stop(replica)

    def places(self, refs: list[EngineRef]) -> dict:
        """Actor id -> Place (state, node, restarts) of every replica of `refs`."""
        return {r._actor_id: self.placement.place(r) for ref in refs for r in ref.replicas}


class RayPlacement:
    """Engine replicas as Ray actors (EngineHost): on a GPU node, or in a placement group of their
    own (TP>1). Ray restarts a crashed replica (engine.max_restarts) and retries its loads; its
    requests are not retried by Ray (RayEngineClient resubmits them, counting deaths per request)."""

    def __init__(self, cfg: SweepConfig, log_dir: str | None):
        self.cfg, self.log_dir = cfg, log_dir
        self.groups: dict = {}  # placement groups of the replicas (TP>1)

    def start(self, ck: Checkpoint, role: str):
        import ray

        from handoff.sweep.engines import EngineHost, actor_env, replica_options

        e = self.cfg.engine
        options = replica_options(e)
        actor = ray.remote(EngineHost).options(
            **options, max_restarts=e.max_restarts, max_task_retries=-1, max_concurrency=1000,
            runtime_env={"env_vars": actor_env(ck, e)})
        handle = actor.remote(ck.model_dump(mode="json"), e.model_dump(mode="json"), role, self.log_dir)
        if "scheduling_strategy" in options:
            self.groups[handle._actor_id] = options["scheduling_strategy"].placement_group
        return handle

    def await_ready(self, replicas: list, timeout_s: float) -> list[BaseException | None]:
        import ray

        refs = [r.ready.remote() for r in replicas]
        done = set(ray.wait(refs, num_returns=len(refs), timeout=timeout_s)[0]) if refs else set()
        out: list[BaseException | None] = []
        for ref in refs:
            if ref not in done:
                out.append(TimeoutError(f"not loaded within {timeout_s:g}s"))
                continue
            try:
                ray.get(ref, timeout=60)
                out.append(None)
            except Exception as exc:  # noqa: BLE001 - the replica's reason, for the pool
                out.append(exc)
        return out

    def place(self, replica) -> Place:
        from handoff.sweep.engines import actor_place

        return actor_place(replica)

    def stop(self, replica) -> None:
        import ray
        from ray.util.placement_group import remove_placement_group

        ray.kill(replica)
        group = self.groups.pop(replica._actor_id, None)
        if group is not None:
            remove_placement_group(group)
