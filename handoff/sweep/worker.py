"""Episode workers: Ray actor processes that each run many tau2 episodes at once (a threaded actor,
`max_concurrency` = workers.threads); several processes use all cores despite the GIL. Episodes
call the engine actors through RayEngineClient; the worker keeps tokenizers and tasks cached.

A worker serves one sweep at a time, and may serve several in turn (handoff.sweep.workers keeps idle
ones for the driver's next sweep): what it needs of a sweep (`SweepContext`: the config, where its
output goes) comes with each call, so a worker that Ray restarts, whose constructor gets nothing of
the sweep, takes it up with its next episode.
"""

from __future__ import annotations

import os
import threading
import uuid
from dataclasses import dataclass, field
from functools import lru_cache

from handoff.sweep.config import Checkpoint, EngineConfig, SweepConfig
from handoff.sweep.engines import RayEngineClient
from handoff.sweep.plan import Episode


class EngineRef:
    """What a worker needs to reach a checkpoint's engines (picklable: actor handles)."""

    def __init__(self, checkpoint: Checkpoint, replicas: list, role: str = "agent"):
        self.checkpoint, self.replicas, self.role = checkpoint, list(replicas), role

    @property
    def name(self) -> str:
        return f"{self.role} engine {self.checkpoint.name}"


def engine_client(engine: EngineConfig, ref: EngineRef, model: str) -> RayEngineClient:
    """A client of `ref`'s replicas for an episode of checkpoint `model` (what they count requests under)."""
    return RayEngineClient(ref.replicas, engine.request_timeout_s, ref.checkpoint, engine.load_timeout_s, ref.name,
                           label=[model, ref.role])


def _chat(tokenizer_path: str, chat_template: str | None):
    from handoff.engine.chat import ChatFormat

    return ChatFormat(tokenizer_path, chat_template)


@dataclass(frozen=True)
class SweepContext:
    """What a worker needs of the sweep it serves; `id` tells one sweep from the next."""

    config: dict  # SweepConfig, as JSON
    log_dir: str | None  # the run's logs/ (None: the terminal)
    id: str = field(default_factory=lambda: uuid.uuid4().hex)


class EpisodeWorker:
    """Runs episodes (use through ray.remote with max_concurrency = threads)."""

    def __init__(self):
        from handoff.sweep.logs import ActorOutput

        self.out = ActorOutput(None, "worker")  # to the run's logs/ once it serves a sweep (enter)
        self._lock = threading.Lock()
        self._sweep: str | None = None
        self.running = 0  # episodes in this process now (idle: 0)

    def enter(self, sweep: SweepContext) -> None:
        """Serve `sweep` from now on (a no-op when it already does); the first time, import tau2 and
        the agent's parser (~13 CPU s)."""
        with self._lock:
            if sweep.id != self._sweep:
                self.out.to(sweep.log_dir)  # the process's output to <run>/logs/ unless verbose
                import handoff  # noqa: F401 - prepares the process for tau2 (litellm cost map, loguru)
                import handoff.agent.episode  # noqa: F401 - tau2 and litellm (~6 CPU s), imported while engines load
                import handoff.tasks  # noqa: F401

                self.cfg = SweepConfig.model_validate(sweep.config)
                # Tokenizers of the checkpoints in flight at once (one per agent slot, the user's, and one
                # whose slot is moving on); older ones are dropped: a long sweep keeps no tokenizer per checkpoint.
                self._chat = lru_cache(maxsize=self.cfg.engine.replicas + 2)(_chat)
                self._sweep = sweep.id

    def ping(self) -> int:
        return os.getpid()

    def idle(self) -> bool:
        """Whether no episode runs here (one that a driver abandoned or cancelled may still)."""
        return self.running == 0

    def chat(self, ck: Checkpoint):
        with self._lock:  # tokenizer loading is not thread-safe
            return self._chat(ck.tokenizer or ck.path, ck.chat_template)

    def run(self, episode: dict, agent: EngineRef, user: EngineRef | None, sweep: SweepContext) -> dict:
        """Run one planned episode of `sweep` and return its EpisodeRecord (as a dict)."""
        self.enter(sweep)
        with self._lock:
            self.running += 1
        try:
            return self._run(episode, agent, user)
        finally:
            with self._lock:
                self.running -= 1

    def _run(self, episode: dict, agent: EngineRef, user: EngineRef | None) -> dict:
        from handoff.agent.episode import run_episode
        from handoff.tasks import get_task

        ep = Episode.model_validate(episode)
        task = get_task(ep.domain, ep.task_id)
        spec = self._user_spec(user)
        # one session per attempt, as the agent's: a retried episode's turns are counted (and routed) afresh
        session = f"user/{ep.model}/{ep.domain}/{ep.task_id}/{ep.trial}/{uuid.uuid4().hex[:8]}"
        user_sim = self._user(spec, task, user, session_id=session, model=ep.model, domain=ep.domain)
        api = agent.checkpoint.api is not None  # an API model: no engine, no tokenizer
        engine, chat = (None, None) if api else (self._client(agent, ep.model), self.chat(agent.checkpoint))
        result = run_episode(ep.domain, task, engine, chat, user_sim, self._settings(agent.checkpoint), ep.seed,
                             **self._evaluation(ep.domain))
        return result.to_record(ep.model, step=ep.step, trial=ep.trial).model_dump(mode="json")

    def _client(self, ref: EngineRef, model: str) -> RayEngineClient:
        return engine_client(self.cfg.engine, ref, model)

    def _user_spec(self, user: EngineRef | None):
        from handoff.agent.user import UserSpec

        sampling = {"sampling": user.checkpoint.sampling} if user is not None else {}
        return UserSpec(**self.cfg.user.model_dump(exclude={"model"}), **sampling)

    def _user(self, spec, task, user: EngineRef | None, session_id: str, model: str, domain: str):
        from handoff.agent.user import make_user

        if user is None:  # an API user simulator (litellm)
            return make_user(spec, task, domain=domain)
        return make_user(spec, task, engine=self._client(user, model), chat=self.chat(user.checkpoint),
                         session_id=session_id, domain=domain)

    def _settings(self, ck: Checkpoint):
        from handoff.agent.episode import EpisodeSettings

        return EpisodeSettings(**self.cfg.episode.model_dump(), agent_sampling=ck.sampling,
                               max_context_tokens=ck.max_model_len, tool_parser=ck.tool_parser, api=ck.api,
                               replica_gpus=self.cfg.engine.num_gpus)

    def _evaluation(self, domain: str) -> dict:
        """handoff.fasteval's evaluator and environment (bit-identical rewards), unless disabled."""
        if not self.cfg.workers.fast_eval:
            return {}
        from handoff.fasteval import evaluate_simulation, make_environment

        return {"evaluate": evaluate_simulation, "environment": make_environment(domain)}
