"""The sweep driver: feeds episodes to the worker pool, records each finished episode at once,
writes each finished shard atomically, and retries. Its engine pool (handoff.sweep.pool) starts the
engines checkpoint by checkpoint (plus the user simulator's, kept for the whole sweep and shared when
it is the same checkpoint), routes around a replica that does not start while others of its set do,
and stops them.

Ray restarts crashed actors and retries none of their episodes' requests: a killed engine replica is
restarted and the episodes' clients resubmit their requests there (engines.RayEngineClient: a
request that kills its replica each time it runs there alone fails its episode, never the replica);
a replica that cannot rebuild its engine after a restart takes itself out of service, and its
episodes go to the replicas that serve; a killed worker is restarted and the driver resubmits the
episodes it was running.

Lost infrastructure is not the episodes' fault. While an engine replica or a worker is unavailable
(its node died, Ray is restarting it) the driver dispatches nothing to it: episodes go to the
replicas and workers that are alive, and wait when none is. Episodes that the loss takes down are
resubmitted without costing their shard an attempt. An outage that outlasts engine.load_timeout_s
(no node came back with the resources needed) fails the remaining shards with a message that says
so; a replica whose restarts are spent is dropped, and its engine set fails when none is left. An API
model that keeps failing its requests (ApiUnavailable) has an outage clock of its own
(api_schedule.ApiOutages): free resubmissions, one probe episode at a time, and past its outage_s its
remaining shards fail as infrastructure, naming the model and the last error.

Whose fault a failure is, is handoff.sweep.failures' `classify`; what it costs, and the outage
clocks, are handoff.sweep.policy's (FailurePolicy, OutageClocks), tested without Ray. What is the episode's own doing
(an exception in it, a timeout) costs the shard an attempt: an attempt ends when one of its episodes
fails, the failed episodes are resubmitted under the next attempt, and all the episodes that one crash
takes down count as one attempt. A worker's death (or Ray's "unavailable") holds its episodes until its
node's verdict (failures.WorkerDeaths): a lost node costs nothing; a death on a healthy node counts
against the episodes it took down, and an episode whose worker died under it twice so (one that runs it
out of memory or crashes it every time) runs on a worker of its own, where each death costs an attempt
(the episodes beside it when it crashed lose nothing). A shard whose attempts are spent goes to
failed/<id>.json (a typed record with its kind) and the sweep goes on; its finished episodes stay in
partial/<id>.jsonl for the next resume.
"""

from __future__ import annotations

import math
import traceback
from collections import deque
from dataclasses import dataclass, field

from handoff.ctrl_c import raise_if_pressed
from handoff.records import EpisodeRecord
from handoff.sweep import clock
from handoff.sweep.api_schedule import ApiOutages, ApiPlacement
from handoff.sweep.config import Checkpoint, ConfigError, SweepConfig, user_checkpoint
from handoff.sweep.engines import Place, actor_place, nodes_alive
from handoff.sweep.failures import ShardFailure, classify
from handoff.sweep.logs import error_key, log_dir, plain, traceback_excerpt
from handoff.sweep.plan import Episode, Shard
from handoff.sweep.policy import Cost, EpisodeTimeout, FailurePolicy, OutageClocks, ReplicaWaits
from handoff.sweep.pool import EnginePool, Placement, RayPlacement
from handoff.sweep.progress import Progress, requests_of
from handoff.sweep.rundir import SweepRun
from handoff.sweep.schedule import Fixed, Rolling
from handoff.sweep.worker import EngineRef, EpisodeWorker, SweepContext
from handoff.sweep.workers import IDLE, kill


@dataclass
class ShardState:
    shard: Shard
    records: dict[tuple, EpisodeRecord | None]  # by episode key; once the shard is written, its keys only
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
    started: float = field(default_factory=lambda: clock.monotonic())
    alone: bool = False  # on a worker of its own: its worker's death is its doing
    place: Place = field(default_factory=lambda: Place("ALIVE"))  # its worker's node and restarts when dispatched
    replicas: set = field(default_factory=set)  # actor ids of the engine replicas it may use (policy.ReplicaWaits)
    waited_s: float = 0.0  # time credited for waiting on a replica down
    waiting: bool = False  # one of its replicas was down at the last look
    met_outage: bool = False  # one of its replicas was down, restarted or recovering while it ran (policy.EpisodeTimeout)


@dataclass
class Live:
    """What dispatch may use now: the alive workers (indices) and engine replicas (actor ids);
    `ready` unless some engine set or the workers have none alive."""

    checked: float
    workers: list[int]
    alive: set
    capacity: int
    ready: bool
    fatal: str = ""  # every remaining shard fails: an outage past its deadline, or the user's engines dead
    dead: list[tuple[EngineRef, str]] = field(default_factory=list)  # agent engine sets dead for good, and why
    gone: set = field(default_factory=set)  # replicas dead for good (actor ids)
    places: dict = field(default_factory=dict)  # worker index -> failures.Place

    def only_alive(self, ref: EngineRef) -> EngineRef:
        return EngineRef(ref.checkpoint, [r for r in ref.replicas if r._actor_id in self.alive], ref.role)


@dataclass
class Summary:
    episodes_total: int
    episodes_done: int
    shards_done: list[str]
    shards_failed: list[str]
    episode_failures: int
    wall_s: float
    ran: bool = False  # whether any shard was run (a resume of a finished run runs none)


def _actor_ids(*refs: EngineRef | None) -> set:
    return {r._actor_id for ref in refs if ref is not None for r in ref.replicas}


def _queue(states: list[ShardState]) -> deque:
    """The episodes of these shards not recorded yet, in plan order."""
    return deque((st, ep) for st in states for ep in st.shard.episodes if ep.key not in st.records)


def check_resources(cfg: SweepConfig, engine_sets: int, cpus: float, gpus: float,
                    node_gpus: float | None = None, node_cpus: float | None = None) -> None:
    """Engines of one checkpoint (and the user's) must fit the cluster, with room for the workers
    (workers.processes of them; unset: at least one), and a replica's GPUs and CPUs must fit on one
    node (`node_gpus`, `node_cpus`: the most any node has). Workers Ray cannot place would wait for
    CPUs that never come."""
    e = cfg.engine
    if not engine_sets:  # API models with an API user simulator: nothing to place but the workers
        node_gpus = node_cpus = None
    if node_gpus is not None and e.num_gpus > node_gpus:
        raise ConfigError(f"engine.tensor_parallel_size: a replica needs {e.num_gpus} GPUs on one node, and no node "
                          f"of the cluster has more than {node_gpus:g} (tensor parallelism does not span nodes here)")
    if node_cpus is not None and e.replica_cpus > node_cpus:
        raise ConfigError(f"engine.cpus: a replica needs {e.replica_cpus:g} CPUs on one node (engine.cpus x "
                          f"tensor_parallel_size), and no node of the cluster has more than {node_cpus:g}")
    need_gpus = engine_sets * e.replicas * e.num_gpus
    if need_gpus > gpus:
        raise ConfigError(f"engine.replicas: {engine_sets} engine set(s) x {e.replicas} replicas x "
                          f"{e.num_gpus} GPUs (engine.tensor_parallel_size) exceed the cluster's {gpus:g} GPUs")
    engine_cpus, w = engine_sets * e.replicas * e.replica_cpus, cfg.workers
    workers = w.processes or 1
    if engine_cpus + workers * w.cpus > cpus:
        key = "engine.cpus" if engine_cpus + w.cpus > cpus else "workers.processes"
        raise ConfigError(f"{key}: {engine_sets} engine set(s) x {e.replicas} replicas x {e.replica_cpus:g} "
                          f"CPUs (engine.cpus x tensor_parallel_size) + {workers} worker(s) (workers.processes) x "
                          f"workers.cpus {w.cpus:g} exceed the cluster's {cpus:g} CPUs: Ray could not place them")


class Driver:
    def __init__(self, cfg: SweepConfig, run: SweepRun, ckpts: list[Checkpoint], shards: list[Shard],
                 progress: bool = True, worker_cls: type = EpisodeWorker, placement: Placement | None = None):
        self.cfg, self.run = cfg, run
        self.log_dir = log_dir(run.root, cfg.verbose)  # actors' logs (None: on the terminal)
        # the engines: which replicas run, for which checkpoint and role (Ray actors unless a test's placement)
        # an API model's checkpoint runs on the workers alone (api_schedule): the pool never sees it
        self.api_ckpts = [c for c in ckpts if c.api is not None]
        self.api_outages = ApiOutages(self.api_ckpts)  # an API down past its outage_s fails its shards
        self.pool = EnginePool(cfg, [c for c in ckpts if c.api is None], user_checkpoint(cfg),
                               placement or RayPlacement(cfg, self.log_dir))
        self.worker_cls = worker_cls  # the episode worker actor's class (bench_schedule's synthetic episodes)
        self.states = {s.id: ShardState(s, {}) for s in shards}
        self.total = sum(len(s.episodes) for s in shards)
        # what a failed episode costs, and who runs alone; a worker not back within the engines' load timeout is lost
        self.policy = FailurePolicy(cfg.max_attempts, cfg.engine.load_timeout_s)
        self.tracebacks_shown: set[str] = set()  # errors whose traceback the terminal has had (once each)
        self.progress = progress
        self.bar = Progress({}, cfg.episode.max_steps, enabled=False)  # silent until execute() makes the sweep's bar
        self.workers: list = []
        self.load: list[int] = []
        self.clocks = OutageClocks(cfg.engine.load_timeout_s)  # a pause and stranded checkpoints
        self.replica_waits = ReplicaWaits(cfg.engine.load_timeout_s)  # a partial outage stops its episodes' clocks
        self.started = clock.monotonic()
        self.todo = self._unfinished()  # no Ray needed: a finished run resumes without starting it

    @property
    def pending(self) -> list[ShardState]:
        return [st for st in self.todo.values() if not st.complete]

    # -- engines (the pool's: its checkpoints, `pool.ckpts`, and the user simulator's, `pool.user`) --
    def engine_not_started(self, name: str, states, error) -> None:
        """A checkpoint whose engine did not start fails its shards `states` (both schedules)."""
        for st in states:
            self._give_up(st, f"engine for {name} did not start: {error}"[-4000:], ShardFailure.ENGINE_START)

    def _start_agent(self, ck: Checkpoint, user_ref: EngineRef | None) -> EngineRef:
        return EngineRef(ck, user_ref.replicas, "agent") if self.pool.shares_user_engine(ck) else \
            self.pool.start(ck, "agent")

    def _await_user(self, ref: EngineRef, pending: list[ShardState]) -> EngineRef | None:
        """The user simulator's engines that loaded (one that failed is routed around); when none
        did, every pending shard fails with the reason (as a checkpoint's own engines do), and the
        sweep goes on to its report."""
        try:
            return self.pool.await_ready(ref)
        except Exception as exc:  # noqa: BLE001 - each shard records it (await_ready stopped the replicas)
            self.engine_not_started(f"the user simulator ({ref.checkpoint.name})", pending, exc)
            return None
        finally:
            self._note_routed_around()

    def _note_routed_around(self) -> None:
        for line in self.pool.routed_around:
            self.bar.write(line.splitlines()[0][:300])
        self.pool.routed_around.clear()

    # -- workers --------------------------------------------------------------------------------
    def _worker_count(self, pending: int) -> int:
        w = self.cfg.workers
        if w.processes is not None:
            return w.processes
        free = self.ray.cluster_resources().get("CPU", 1) - self.pool.engine_cpus()
        return max(1, min(int(free // w.cpus), math.ceil(pending / w.threads)))

    def _worker_shape(self) -> tuple:
        """What a kept worker must match: its class, CPUs and threads, and the engines placed beside
        it. A kept worker holds its CPUs where it was placed; engines that need what the last sweep's
        needed fit again, others might not (a TP=2 bundle on the node where it sits)."""
        w, e = self.cfg.workers, self.cfg.engine
        engines = (self.pool.engine_sets(), e.replicas, e.replica_cpus, e.num_gpus, e.tensor_parallel_size)
        return self.worker_cls.__module__, self.worker_cls.__qualname__, w.cpus, w.threads, engines

    def reuse_workers(self, n: int) -> None:
        """Up to `n` idle workers an earlier sweep of this process left, if of this sweep's shape
        (handoff.sweep.workers); before the engines are placed: those of another shape free their CPUs."""
        self.workers = IDLE.take(self.ray, self._worker_shape(), n)

    def start_workers(self, n: int) -> None:
        """The `n` workers in all, those reuse_workers did not provide started."""
        w = self.cfg.workers
        # A killed worker is restarted by Ray; the driver resubmits its episodes (no retries by Ray,
        # which the driver could not count: an episode that kills its worker every time must end).
        actor = self.ray.remote(self.worker_cls).options(
            num_cpus=w.cpus, max_concurrency=w.threads, max_restarts=-1, max_task_retries=0)
        self.workers += [actor.remote() for _ in range(n - len(self.workers))]
        self.load = [0] * len(self.workers)

    def wait_workers(self) -> None:
        """Until every worker serves this sweep (a new one has imported tau2: minutes on a busy machine).
        As engine replicas that do not start: a worker not placed or not ready in time (a shared
        cluster whose CPUs others took) is killed and routed around while others serve; when none
        does, every pending shard fails, saying so (infrastructure: a resume reruns them)."""
        self.sweep_ref = self.ray.put(SweepContext(self.cfg.model_dump(mode="json"), self.log_dir))
        wait_s = max(600, self.cfg.engine.load_timeout_s)
        refs = [h.enter.remote(self.sweep_ref) for h in self.workers]
        done = set(self.ray.wait(refs, num_returns=len(refs), timeout=wait_s)[0]) if refs else set()
        started = [h for h, ref in zip(self.workers, refs) if ref in done and self._entered(ref)]
        kill(self.ray, [h for h in self.workers if h not in started])
        self.workers, self.load = started, [0] * len(started)
        if not started:
            self._abandon(f"episode workers did not start within {wait_s:g}s: each needs {self.cfg.workers.cpus:g} "
                          "CPU(s) (see `ray status`); resume the run once the cluster has them", self.bar, self.pending)

    def _entered(self, ref) -> bool:
        try:
            self.ray.get(ref, timeout=60)
            return True
        except Exception as exc:  # noqa: BLE001 - a worker that cannot serve is routed around
            self.bar.write(f"an episode worker did not start: {exc}"[:300])
            return False

    def release_workers(self, keep: bool) -> None:
        """The idle workers are kept for this process's next sweep (`keep`), the others killed."""
        if keep:
            IDLE.keep(self.ray, self._worker_shape(), self.workers)
            return
        kill(self.ray, self.workers)

    # -- the loop -------------------------------------------------------------------------------
    def execute(self, ray=None) -> Summary:
        """Run the pending shards (Ray must be initialized). `ray`: the ray module, or what stands in
        for it (issue 48's deterministic simulator, tests/support/sim.py)."""
        if ray is None:
            import ray

        self.ray, todo = ray, self.todo
        res = self.ray.cluster_resources()
        nodes = [n["Resources"] for n in self.ray.nodes() if n["Alive"]]
        check_resources(self.cfg, self.pool.engine_sets(), res.get("CPU", 0), res.get("GPU", 0),
                        *(max((n.get(k, 0) for n in nodes), default=0) for k in ("GPU", "CPU")))
        missing = sum(len(st.shard.episodes) - len(st.records) for st in todo.values())
        bar = self.bar = Progress(self._episodes_per_checkpoint(), self.cfg.episode.max_steps, self.progress)
        self._postfix(bar)
        pending = self.pending
        user_ck, user_ref = self.pool.user, None
        runs, finished = bool(pending), False  # (workers are taken only when something runs)
        try:
            if pending:  # engines are placed first (GPU nodes' CPUs), then workers take what is free
                n_workers = self._worker_count(missing)
                self.reuse_workers(n_workers)
                user_ref = self.pool.launch(user_ck, "user") if user_ck is not None else None
                self.start_workers(n_workers)
                self.wait_workers()  # they import tau2 while the engines load
                pending = [st for st in pending if not st.failed]
                if user_ref is not None and pending:
                    user_ref = self._await_user(user_ref, pending)
                pending = [st for st in pending if not st.failed]
            if pending and self.cfg.schedule == "rolling":
                self._run_rolling(pending, user_ref, bar)
            elif pending and self.api_ckpts:  # sequential: the API checkpoints first, then each engine's
                self._dispatch(ApiPlacement(self.api_ckpts, self._queues(pending, self.api_ckpts),
                                            outages=self.api_outages), user_ref, bar, pending)
            for ck in self.pool.ckpts if self.cfg.schedule == "sequential" else []:
                mine = [st for st in pending if st.shard.model == ck.name and not st.failed]
                if mine:
                    self._run_checkpoint(ck, mine, user_ref, bar)
            self._fail_unaccounted(pending)
            finished = True
        finally:
            self.pool.stop(user_ref)
            if runs:
                self.release_workers(keep=finished)
            bar.close()
            bar.save(self.run.root / "logs" / "engines.json")
        return self.summary()

    def _episodes_per_checkpoint(self) -> dict[str, tuple[int, int]]:
        """Checkpoint name -> (episodes recorded already, episodes in all)."""
        out = {ck.name: (0, 0) for ck in self.pool.ckpts + self.api_ckpts}
        for st in self.states.values():
            done, total = out.get(st.shard.model, (0, 0))
            recorded = len(st.shard.episodes) if st.shard.id not in self.todo else len(st.records)
            out[st.shard.model] = (done + recorded, total + len(st.shard.episodes))
        return out

    def summary(self) -> Summary:
        todo = self.todo
        return Summary(
            episodes_total=self.total,
            episodes_done=self.total - sum(len(st.shard.episodes) - len(st.records) for st in todo.values()),
            shards_done=sorted(sid for sid, st in self.states.items() if sid not in todo or st.complete),
            shards_failed=self.run.failed_ids(), episode_failures=self.policy.failures,
            wall_s=clock.monotonic() - self.started, ran=hasattr(self, "ray"))

    def _unfinished(self) -> dict[str, ShardState]:
        """Shards without a verified shard file, with the episodes their partial files hold; those
        that partial/ already completes are written at once."""
        todo = {sid: st for sid, st in self.states.items() if not self.run.is_done(st.shard)}
        for st in todo.values():
            st.records = self.run.read_partial(st.shard)
            if st.complete:
                self._finish(st)
        return todo

    def _run_checkpoint(self, ck: Checkpoint, states: list[ShardState], user_ref: EngineRef | None, bar) -> None:
        """All shards of one checkpoint (every domain) on its engines, loaded once."""
        shared = self.pool.shares_user_engine(ck)
        try:
            agent_ref = self._start_agent(ck, user_ref)
        except Exception as exc:  # noqa: BLE001 - a checkpoint that cannot load fails its shards only
            self.engine_not_started(ck.name, states, exc)
            return
        finally:
            self._note_routed_around()
        try:
            self._run_shards(states, agent_ref, user_ref, bar)
        finally:
            if not shared:
                self.pool.stop(agent_ref)

    def _run_rolling(self, pending: list[ShardState], user_ref: EngineRef | None, bar) -> None:
        """Every checkpoint at once on engine slots that move on as work runs out (schedule.Rolling)."""
        queues = self._queues(pending, self.pool.ckpts)
        pinned = {ck.name: EngineRef(ck, user_ref.replicas) for ck in self.pool.ckpts
                  if ck.name in queues and self.pool.shares_user_engine(ck)}
        cap = math.ceil(len(self.workers) * self.cfg.workers.threads / self.cfg.engine.replicas)
        engines = Rolling(self, self.pool.ckpts, queues, cap, pinned) if queues else None
        api = self._queues(pending, self.api_ckpts)
        placement = ApiPlacement(self.api_ckpts, api, engines, self.api_outages) if api else engines
        if placement is None:
            return
        try:
            self._dispatch(placement, user_ref, bar, pending)
        finally:
            placement.stop()

    @staticmethod
    def _queues(pending: list[ShardState], ckpts: list[Checkpoint]) -> dict[str, deque]:
        """Each of `ckpts`' queued episodes (those with none left out)."""
        queues = {ck.name: _queue([st for st in pending if st.shard.model == ck.name]) for ck in ckpts}
        return {name: q for name, q in queues.items() if q}

    def _run_shards(self, states: list[ShardState], agent: EngineRef, user: EngineRef | None, bar) -> None:
        self._dispatch(Fixed(_queue(states), agent), user, bar, states)

    def _dispatch(self, placement, user: EngineRef | None, bar, states: list[ShardState]) -> None:
        """Feed the placement's episodes (those of `states`) to the workers until none is queued or
        in flight."""
        inflight: dict = {}
        self.load = [0] * len(self.workers)  # what an earlier, abandoned checkpoint left in flight is not waited for
        self.policy.reset()
        live: Live | None = None
        while placement.has_work() or inflight or self.policy.deaths.pending:
            raise_if_pressed()  # a Ctrl-C Python dropped (handoff.ctrl_c)
            if live is None or clock.monotonic() >= live.checked + self.HEALTH_EVERY_S:
                live = self._live(placement, user, inflight)
                self._judge_deaths(live, placement, bar)
                if live.fatal:  # an outage past its deadline or a dead user engine: every shard fails
                    self._abandon(live.fatal, bar, list(self.todo.values()))
                    return
                for ref, error in live.dead:  # a checkpoint whose engines are all dead for good: its shards
                    self._abandon(error, bar, [st for st in states if st.shard.model == ref.checkpoint.name])
                placement.drop_dead(live.gone)
                for name, error in self.api_outages.expired(clock.monotonic()):  # an API down for good
                    self._abandon(error, bar, [st for st in states if st.shard.model == name])
            room = live.capacity - len(inflight) - len(self.policy.alone) * (self.cfg.workers.threads - 1)
            for st, ep, agent, slot in placement.take(room, live.alive) if live.ready else []:
                w = self.policy.worker_for((st.shard.id, ep.key), live.workers, self.load)
                if w is None:  # a suspect waits for an idle worker
                    placement.finished(slot, None)
                    placement.requeue(st, ep)
                    continue
                users = live.only_alive(user) if user else None
                ref = self.workers[w].run.remote(ep.model_dump(), agent, users, self.sweep_ref)
                inflight[ref] = Inflight(st, ep, w, st.attempt, slot, alone=w in self.policy.alone,
                                       place=live.places[w], replicas=_actor_ids(agent, users))
                self.load[w] += 1
            loads = placement.loads()
            waiting = list(inflight) + loads
            if not waiting:  # paused (an outage) with nothing in flight: until the next look
                clock.sleep(1.0)
            ready = self.ray.wait(waiting, num_returns=1, timeout=1.0)[0] if waiting else []
            for ref in ready:
                if ref not in inflight:
                    placement.loaded(ref)
                    continue
                item = inflight.pop(ref)
                self._release(item)
                try:
                    record = EpisodeRecord.model_validate(self.ray.get(ref, timeout=60))
                except Exception as exc:  # noqa: BLE001 - sorted out by _failed
                    placement.finished(item.slot, None)
                    if self._failed(item, exc, placement, bar):
                        live = None  # something was lost: look again before dispatching more
                    continue
                placement.finished(item.slot, record)
                self._record(item.state, record, bar)
            bar.poll(self.ray, self._replicas(placement, user, live))
            if loads:
                placement.check_load_timeouts()
            if not self.clocks.paused:  # a pause does not count against the episodes' time
                if self._overdue_unseen(inflight, live):
                    live = None  # look at the cluster first: a replica seen down now credits its episodes
                    continue
                for ref, item in list(inflight.items()):
                    if clock.monotonic() - item.started > self.cfg.episode_timeout_s:
                        self.ray.cancel(ref)  # its episode stops, and its engine requests (recursive)
                        inflight.pop(ref)
                        self._release(item)
                        placement.finished(item.slot, None)
                        self._failed(item, EpisodeTimeout(f"episode ran over {self.cfg.episode_timeout_s}s"),
                                     placement, bar)
        bar.poll(self.ray, self._replicas(placement, user, live), wait=True)

    def _overdue_unseen(self, inflight: dict, live: Live | None) -> bool:
        """Whether an episode ran over episode_timeout_s since the last look at the cluster (None: a
        look is due), which may find the replica it waits for down, and credit it."""
        checked = -math.inf if live is None else live.checked
        return any(checked < item.started + self.cfg.episode_timeout_s < clock.monotonic() for item in inflight.values())

    def _release(self, item: Inflight) -> None:
        self.load[item.worker] -= 1
        self.policy.release(item.worker, item.alone)

    @staticmethod
    def _replicas(placement, user: EngineRef | None, live: Live | None) -> list:
        """The alive engine replicas that serve these episodes (for their request counters)."""
        sets = placement.engine_sets() + ([user] if user is not None else [])
        alive = {r._actor_id: r for ref in sets for r in ref.replicas if live is None or r._actor_id in live.alive}
        return list(alive.values())

    HEALTH_EVERY_S = 2.0

    def _live(self, placement, user: EngineRef | None, inflight: dict) -> Live:
        """The workers and engine replicas that are alive now, and the engine sets whose every
        replica is dead for good. An outage is timed, and past engine.load_timeout_s fatal to every
        shard while it pauses dispatch (the user's engines, every agent engine set or the workers
        with none alive), else to the shards of the checkpoints whose queued episodes no engine
        alive can take (the placement's `stranded`: under rolling, a slot pinned to the user
        simulator's engines goes on with its own checkpoint only)."""
        now = clock.monotonic()
        agents = placement.engine_sets()
        places = {i: actor_place(w) for i, w in enumerate(self.workers)}
        workers = [i for i, p in places.items() if p.state == "ALIVE" and i not in self.policy.deaths.held]
        sets = agents + ([user] if user is not None else [])
        replicas = self.pool.places(sets)
        state = {a: p.state for a, p in replicas.items()}
        alive = {a for a, s in state.items() if s == "ALIVE"}
        gone = {a for a, s in state.items() if s == "DEAD"}
        dead = [ref for ref in sets if all(r._actor_id in gone for r in ref.replicas)]
        down = [ref for ref in sets if ref not in dead and not any(r._actor_id in alive for r in ref.replicas)]
        agents_down = all(ref in down or ref in dead for ref in agents)  # under rolling, other slots go on
        pausing = [self._unavailable(ref) for ref in down if ref is user or agents_down]
        if not workers:
            pausing.append(f"episode workers (none alive: each needs {self.cfg.workers.cpus:g} CPU(s))")
        stranded = [] if pausing else placement.stranded(alive)
        self.replica_waits.credit(inflight.values(), set(state) - alive - gone, now, self.clocks.paused,
                                  {a: p.restarts for a, p in replicas.items()})
        tick = self.clocks.tick(now, bool(pausing), bool(stranded))
        for item in inflight.values():
            item.started += tick.credit_s
        fatal = self.pool.dead_error(user) if user in dead else ""
        dead_sets = [(ref, self.pool.dead_error(ref)) for ref in dead if ref is not user]
        if tick.pause_expired:
            fatal = fatal or self._outage_error(pausing)
        if tick.strand_expired:
            dead_sets += [(ref, self._outage_error([self._unavailable(r) for r in stranded])) for ref in stranded]
        if fatal:
            self.clocks.reset()
        return Live(now, workers, alive, len(workers) * self.cfg.workers.threads, not pausing, fatal, dead_sets, gone,
                    places)

    def _outage_error(self, missing: list[str]) -> str:
        e = self.cfg.engine
        return (f"unavailable for more than engine.load_timeout_s={e.load_timeout_s:g}s: {'; '.join(missing)}. "
                "Its node died and no node with these resources joined in time; resume the run once the cluster "
                "has them")

    def _unavailable(self, ref: EngineRef) -> str:
        return f"{ref.name} (no replica alive: each needs {self.pool.replica_needs()})"

    def _abandon(self, error: str, bar, states: list[ShardState]) -> None:
        """Fail the unfinished shards of `states` with `error` (their finished episodes stay in
        partial/): the cluster lacks what they need."""
        for st in states:
            if not st.complete:
                self._give_up(st, error, ShardFailure.INFRASTRUCTURE)
        self._postfix(bar)

    def _record(self, st: ShardState, record: EpisodeRecord, bar) -> None:
        if record.key in st.records:  # a late duplicate (e.g. after a timeout): keep the first
            return
        st.records[record.key] = record
        self.api_outages.answered(st.shard.model)
        self.run.append_partial(st.shard.id, record)
        bar.episode_done(st.shard.model, requests_of(record), record.usage.cost)
        if st.complete:
            self._finish(st)

    def _finish(self, st: ShardState) -> None:
        self.run.write_done(st.shard, st.records)
        st.records = dict.fromkeys(st.records)  # the keys drop late duplicates; the records are in the shard file
        st.failed = False

    def _fail_unaccounted(self, states: list[ShardState]) -> None:
        """Fail the shards of `states` that dispatch left neither complete nor failed (a bug: each
        episode is recorded or requeued, or its shard given up), so that the run does not pass them over."""
        for st in states:
            if not st.complete and not st.failed:
                self._give_up(st, f"internal error: the sweep ended with this shard neither complete nor failed "
                                  f"({len(st.records)} of its {len(st.shard.episodes)} episodes recorded); "
                                  "resume the run to rerun the others", ShardFailure.INTERNAL)

    def _give_up(self, st: ShardState, error: str, kind: ShardFailure) -> None:
        if not st.failed:
            st.failed = True
            error = plain(error)  # Ray colours the actor names in its errors: no escape codes in failed/*.json
            self.run.write_failed(st.shard.id, error, min(st.attempt, self.cfg.max_attempts), kind)
            last = (error.strip() or "unknown error").splitlines()[-1]
            self.bar.write(f"shard {st.shard.id} failed: {last[:300]} ({self.run.failed_path(st.shard.id)})")
            excerpt, key = traceback_excerpt(error), error_key(error)
            if excerpt and key not in self.tracebacks_shown:  # the driver's own copy: an actor's forwarded
                self.tracebacks_shown.add(key)                # output may reach the terminal after the sweep ends
                self.bar.write(excerpt)

    def _failed(self, item: Inflight, exc: Exception, placement, bar) -> bool:
        """Resubmit the episode, at the cost the policy says; a worker's death holds it for its node's
        verdict (_judge_deaths). Returns True when something was lost."""
        self.api_outages.failed(item.episode.model, exc, clock.monotonic())
        cost = self.policy.cost(item, exc, clock.monotonic())
        if cost is Cost.NOTHING:
            self._requeue(item, placement)
        elif cost is Cost.ATTEMPT:
            self._charge(item, exc, placement, bar)
        return cost is not Cost.ATTEMPT

    def _judge_deaths(self, live: Live, placement, bar) -> None:
        """The held episodes whose workers' deaths are decided now, resubmitted at their cost."""
        if not self.policy.deaths.pending:
            return
        for item, cost, error in self.policy.judge(live.places, nodes_alive(self.ray), clock.monotonic()):
            if cost is Cost.ATTEMPT:
                self._charge(item, error, placement, bar)
            else:
                self._requeue(item, placement)

    def _requeue(self, item: Inflight, placement) -> None:
        if not item.state.failed:
            placement.requeue(item.state, item.episode)

    def _charge(self, item: Inflight, exc: BaseException, placement, bar) -> None:
        """The episode's own failure: the shard fails once its attempts are spent, else the episode is requeued."""
        st = item.state
        st.last_error = self._error_text(item, exc)
        if self.policy.charge(st, item.attempt):
            self._give_up(st, st.last_error, ShardFailure.EPISODE)
        else:
            placement.requeue(st, item.episode)
        self._postfix(bar)

    def _error_text(self, item: Inflight, exc: BaseException) -> str:
        text = "".join(traceback.format_exception_only(type(exc), exc)).strip()[-3000:]
        if classify(exc).of_worker:
            deaths = self.policy.deaths_under(item)
            text = (f"the worker process died {deaths} times while running episode {'/'.join(map(str, item.episode.key))} "
                    f"(out of memory, or a crash: see the worker's log): {text}")
        return text

    def _postfix(self, bar) -> None:
        bar.set_postfix(failures=self.policy.failures, failed_shards=sum(s.failed for s in self.states.values()))
