"""The sweep driver: starts engine actors checkpoint by checkpoint (plus the user simulator's, kept
for the whole sweep and shared when it is the same checkpoint), feeds episodes to the worker
pool, records each finished episode at once, writes each finished shard atomically, and retries.

Ray absorbs actor crashes first: a killed worker is restarted and its episodes retried there
(max_task_retries), a killed engine replica is restarted and its requests retried. What still
fails (an exception in an episode, an engine that stays down, a timeout) costs the shard an
attempt: an attempt ends when one of its episodes fails, the failed episodes are resubmitted under
the next attempt, and all the episodes that one crash takes down count as one attempt. A shard
whose attempts are spent goes to failed/<id>.json and the sweep goes on; its finished episodes stay
in partial/<id>.jsonl for the next resume.
"""

from __future__ import annotations

import math
import time
import traceback
from collections import deque
from dataclasses import dataclass, field

from tqdm import tqdm

from handoff.records import EpisodeRecord
from handoff.sweep.config import Checkpoint, ConfigError, SweepConfig
from handoff.sweep.engines import EngineHost, actor_env
from handoff.sweep.plan import Episode, Shard
from handoff.sweep.rundir import SweepRun
from handoff.sweep.schedule import Fixed, Rolling
from handoff.sweep.worker import EngineRef, EpisodeWorker


@dataclass
class ShardState:
    shard: Shard
    records: dict[tuple, EpisodeRecord]
    attempt: int = 1
    failed: bool = False
    last_error: str = ""

    @property
    def complete(self) -> bool:
        return len(self.records) == len(self.shard.episodes)


@dataclass
class Inflight:
    state: ShardState
    episode: Episode
    worker: int
    attempt: int
    slot: object = None  # the rolling schedule's engine slot
    started: float = field(default_factory=time.monotonic)


@dataclass
class Summary:
    episodes_total: int
    episodes_done: int
    shards_done: list[str]
    shards_failed: list[str]
    episode_failures: int
    wall_s: float
    ran: bool = False  # whether any shard was run (a resume of a finished run runs none)


def _queue(states: list[ShardState]) -> deque:
    """The episodes of these shards not recorded yet, in plan order."""
    return deque((st, ep) for st in states for ep in st.shard.episodes if ep.key not in st.records)


def check_resources(cfg: SweepConfig, engine_sets: int, cpus: float, gpus: float) -> None:
    """Engines of one checkpoint (and the user's) must fit the cluster, with room for a worker."""
    e = cfg.engine
    need_gpus = engine_sets * e.replicas * e.num_gpus
    if need_gpus > gpus:
        raise ConfigError(f"engine.replicas: {engine_sets} engine set(s) x {e.replicas} replicas x "
                          f"{e.num_gpus} GPUs (engine.tensor_parallel_size) exceed the cluster's {gpus:g} GPUs")
    need_cpus = engine_sets * e.replicas * e.cpus + cfg.workers.cpus
    if need_cpus > cpus:
        raise ConfigError(f"engine.cpus: {engine_sets} engine set(s) x {e.replicas} replicas x {e.cpus} CPUs "
                          f"+ workers.cpus {cfg.workers.cpus} exceed the cluster's {cpus:g} CPUs")


class Driver:
    def __init__(self, cfg: SweepConfig, run: SweepRun, ckpts: list[Checkpoint], shards: list[Shard],
                 progress: bool = True, worker_cls: type = EpisodeWorker):
        self.cfg, self.run, self.ckpts = cfg, run, ckpts
        self.worker_cls = worker_cls  # the episode worker actor's class (bench_schedule's synthetic episodes)
        self.states = {s.id: ShardState(s, {}) for s in shards}
        self.total = sum(len(s.episodes) for s in shards)
        self.failures = 0
        self.progress = progress
        self.workers: list = []
        self.load: list[int] = []
        self.started = time.monotonic()
        self.todo = self._unfinished()  # no Ray needed: a finished run resumes without starting it

    @property
    def pending(self) -> list[ShardState]:
        return [st for st in self.todo.values() if not st.complete]

    # -- engines --------------------------------------------------------------------------------
    def _user_checkpoint(self) -> Checkpoint | None:
        u = self.cfg.user
        if u.kind != "engine":
            return None
        m = u.model
        return Checkpoint(name=m.name, path=m.path, step=m.step, tokenizer=m.tokenizer,
                          chat_template=m.chat_template, tool_parser=m.tool_parser,
                          max_model_len=m.max_model_len, sampling=m.sampling)

    def _shares_user_engine(self, ck: Checkpoint, user: Checkpoint | None) -> bool:
        return user is not None and self.cfg.engine.kind != "scripted" and ck.path == user.path

    def new_engine(self, ck: Checkpoint, role: str):
        """One engine replica's actor; it loads `ck` on its first call."""
        e = self.cfg.engine
        actor = self.ray.remote(EngineHost).options(
            num_cpus=e.cpus, num_gpus=e.num_gpus, max_restarts=e.max_restarts, max_task_retries=-1,
            max_concurrency=1000, runtime_env={"env_vars": actor_env(ck, e)},
        )
        return actor.remote(ck.model_dump(mode="json"), e.model_dump(mode="json"), role)

    def start_engines(self, ck: Checkpoint, role: str) -> EngineRef:
        replicas = [self.new_engine(ck, role) for _ in range(self.cfg.engine.replicas)]
        self.ray.get([r.ready.remote() for r in replicas], timeout=self.cfg.engine.load_timeout_s)
        return EngineRef(ck, replicas)

    def stop_engines(self, ref: EngineRef | None) -> None:
        for replica in ref.replicas if ref else []:
            self.ray.kill(replica)

    # -- workers --------------------------------------------------------------------------------
    def start_workers(self, pending: int) -> None:
        w = self.cfg.workers
        if w.processes is not None:
            n = w.processes
        else:
            free = self.ray.cluster_resources().get("CPU", 1) - self._engine_cpus()
            n = max(1, min(int(free // w.cpus), math.ceil(pending / w.threads)))
        # A killed worker is restarted by Ray and its episodes retried there (max_task_retries);
        # what still fails reaches the driver and costs the shard an attempt.
        actor = self.ray.remote(self.worker_cls).options(
            num_cpus=w.cpus, max_concurrency=w.threads, max_restarts=-1, max_task_retries=self.cfg.max_attempts)
        config = self.cfg.model_dump(mode="json")
        self.workers = [actor.remote(config) for _ in range(n)]
        self.load = [0] * n

    def wait_workers(self) -> None:
        self.ray.get([h.ping.remote() for h in self.workers], timeout=self.cfg.engine.load_timeout_s)

    def _engine_cpus(self) -> float:
        return self.engine_sets() * self.cfg.engine.replicas * self.cfg.engine.cpus

    def engine_sets(self) -> int:
        """Engine sets alive at once: the current checkpoint's, plus the user's unless shared."""
        user = self._user_checkpoint()
        return 1 if user is None or all(self._shares_user_engine(c, user) for c in self.ckpts) else 2

    # -- the loop -------------------------------------------------------------------------------
    def execute(self) -> Summary:
        """Run the pending shards (Ray must be initialized)."""
        import ray

        self.ray, todo = ray, self.todo
        res = self.ray.cluster_resources()
        check_resources(self.cfg, self.engine_sets(), res.get("CPU", 0), res.get("GPU", 0))
        missing = sum(len(st.shard.episodes) - len(st.records) for st in todo.values())
        bar = tqdm(total=self.total, initial=self.total - missing, unit="ep", desc=self.cfg.name,
                   disable=not self.progress, dynamic_ncols=True)
        self._postfix(bar)
        pending = self.pending
        user_ck, user_ref = self._user_checkpoint(), None
        try:
            if pending:
                self.start_workers(missing)
                user_ref = self.start_engines(user_ck, "user") if user_ck is not None else None
                self.wait_workers()  # they import tau2 while the engines load
            if pending and self.cfg.schedule == "rolling":
                self._run_rolling(pending, user_ck, user_ref, bar)
            for ck in self.ckpts if self.cfg.schedule == "sequential" else []:
                mine = [st for st in pending if st.shard.model == ck.name]
                if mine:
                    self._run_checkpoint(ck, mine, user_ck, user_ref, bar)
        finally:
            self.stop_engines(user_ref)
            for w in self.workers:
                self.ray.kill(w)
            bar.close()
        return self.summary()

    def summary(self) -> Summary:
        todo = self.todo
        return Summary(
            episodes_total=self.total,
            episodes_done=self.total - sum(len(st.shard.episodes) - len(st.records) for st in todo.values()),
            shards_done=sorted(sid for sid, st in self.states.items() if sid not in todo or st.complete),
            shards_failed=self.run.failed_ids(), episode_failures=self.failures,
            wall_s=time.monotonic() - self.started, ran=hasattr(self, "ray"))

    def _unfinished(self) -> dict[str, ShardState]:
        """Shards without a verified shard file, with the episodes their partial files hold; those
        that partial/ already completes are written at once."""
        todo = {sid: st for sid, st in self.states.items() if not self.run.is_done(st.shard)}
        for st in todo.values():
            st.records = self.run.read_partial(st.shard)
            if st.complete:
                self._finish(st)
        return todo

    def _run_checkpoint(self, ck: Checkpoint, states: list[ShardState], user_ck: Checkpoint | None,
                        user_ref: EngineRef | None, bar) -> None:
        """All shards of one checkpoint (every domain) on its engines, loaded once."""
        shared = self._shares_user_engine(ck, user_ck)
        try:
            agent_ref = EngineRef(ck, user_ref.replicas) if shared else self.start_engines(ck, "agent")
        except Exception as exc:  # noqa: BLE001 - a checkpoint that cannot load fails its shards only
            for st in states:
                self._give_up(st, f"engine for {ck.name} did not start: {exc!r}"[-4000:])
            return
        try:
            self._run_shards(states, agent_ref, user_ref, bar)
        finally:
            if not shared:
                self.stop_engines(agent_ref)

    def _run_rolling(self, pending: list[ShardState], user_ck: Checkpoint | None, user_ref: EngineRef | None,
                     bar) -> None:
        """Every checkpoint at once on engine slots that move on as work runs out (schedule.Rolling)."""
        queues = {ck.name: _queue([st for st in pending if st.shard.model == ck.name]) for ck in self.ckpts}
        queues = {name: q for name, q in queues.items() if q}
        pinned = {ck.name: EngineRef(ck, user_ref.replicas) for ck in self.ckpts
                  if ck.name in queues and self._shares_user_engine(ck, user_ck)}
        cap = math.ceil(len(self.workers) * self.cfg.workers.threads / self.cfg.engine.replicas)
        placement = Rolling(self, self.ckpts, queues, cap, pinned)
        try:
            self._dispatch(placement, user_ref, bar)
        finally:
            placement.stop()

    def _run_shards(self, states: list[ShardState], agent: EngineRef, user: EngineRef | None, bar) -> None:
        self._dispatch(Fixed(_queue(states), agent), user, bar)

    def _dispatch(self, placement, user: EngineRef | None, bar) -> None:
        """Feed the placement's episodes to the workers until none is queued or in flight."""
        inflight: dict = {}
        capacity = len(self.workers) * self.cfg.workers.threads
        while placement.has_work() or inflight:
            for st, ep, agent, slot in placement.take(capacity - len(inflight)):
                w = min(range(len(self.workers)), key=self.load.__getitem__)
                ref = self.workers[w].run.remote(ep.model_dump(), agent, user)
                inflight[ref] = Inflight(st, ep, w, st.attempt, slot)
                self.load[w] += 1
            loads = placement.loads()
            ready, _ = self.ray.wait(list(inflight) + loads, num_returns=1, timeout=1.0)
            for ref in ready:
                if ref not in inflight:
                    placement.loaded(ref)
                    continue
                item = inflight.pop(ref)
                self.load[item.worker] -= 1
                try:
                    record = EpisodeRecord.model_validate(self.ray.get(ref, timeout=60))
                except Exception as exc:  # noqa: BLE001 - every failure is an attempt of the shard
                    placement.finished(item.slot, None)
                    self._failed(item, exc, placement, bar)
                    continue
                placement.finished(item.slot, record)
                self._record(item.state, record, bar)
            if loads:
                placement.check_load_timeouts()
            for ref, item in list(inflight.items()):
                if time.monotonic() - item.started > self.cfg.episode_timeout_s:
                    inflight.pop(ref)
                    self.load[item.worker] -= 1
                    placement.finished(item.slot, None)
                    self._failed(item, TimeoutError(f"episode ran over {self.cfg.episode_timeout_s}s"), placement, bar)

    def _record(self, st: ShardState, record: EpisodeRecord, bar) -> None:
        if record.key in st.records:  # a late duplicate (e.g. after a timeout): keep the first
            return
        st.records[record.key] = record
        self.run.append_partial(st.shard.id, record)
        bar.update(1)
        if st.complete:
            self._finish(st)

    def _finish(self, st: ShardState) -> None:
        self.run.write_done(st.shard, st.records)
        st.failed = False

    def _give_up(self, st: ShardState, error: str) -> None:
        if not st.failed:
            st.failed = True
            self.run.write_failed(st.shard.id, error, min(st.attempt, self.cfg.max_attempts))

    def _failed(self, item: Inflight, exc: Exception, placement, bar) -> None:
        st = item.state
        self.failures += 1
        st.last_error = "".join(traceback.format_exception_only(type(exc), exc)).strip()[-4000:]
        if item.attempt == st.attempt:  # the first failure of this attempt ends it
            st.attempt += 1
        if st.attempt > self.cfg.max_attempts:
            self._give_up(st, st.last_error)
        else:
            placement.requeue(st, item.episode)
        self._postfix(bar)

    def _postfix(self, bar) -> None:
        bar.set_postfix(failures=self.failures, failed_shards=sum(s.failed for s in self.states.values()))
