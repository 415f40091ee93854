"""Episode workers: Ray actor processes that each run many tau2 episodes at once (a threaded actor,
`max_concurrency` = workers.threads); several processes use all cores despite the GIL. Episodes
call the engine actors through RayEngineClient; the worker keeps tokenizers and tasks cached.
"""

from __future__ import annotations

import threading
import uuid
from functools import lru_cache

from handoff.sweep.config import Checkpoint, SweepConfig
from handoff.sweep.engines import RayEngineClient
from handoff.sweep.plan import Episode


class EngineRef:
    """What a worker needs to reach a checkpoint's engines (picklable: actor handles)."""

    def __init__(self, checkpoint: Checkpoint, replicas: list, role: str = "agent"):
        self.checkpoint, self.replicas, self.role = checkpoint, list(replicas), role

    @property
    def name(self) -> str:
        return f"{self.role} engine {self.checkpoint.name}"


def _chat(tokenizer_path: str, chat_template: str | None):
    from handoff.engine.chat import ChatFormat

    return ChatFormat(tokenizer_path, chat_template)


class EpisodeWorker:
    """Runs episodes (use through ray.remote with max_concurrency = threads)."""

    def __init__(self, config: dict, log_dir: str | None = None):
        from handoff.sweep.logs import ActorOutput

        self.out = ActorOutput(log_dir, "worker")  # the process's output to <run>/logs/ unless verbose
        import handoff  # noqa: F401 - prepares the process for tau2 (litellm cost map, loguru)
        import handoff.agent.episode  # noqa: F401 - tau2 and litellm (~6 CPU s), imported while engines load
        import handoff.tasks  # noqa: F401

        self.cfg = SweepConfig.model_validate(config)
        self._lock = threading.Lock()
        # Tokenizers of the checkpoints in flight at once (one per agent slot, the user's, and one
        # whose slot is moving on); older ones are dropped: a long sweep keeps no tokenizer per checkpoint.
        self._chat = lru_cache(maxsize=self.cfg.engine.replicas + 2)(_chat)

    def ping(self) -> int:
        import os

        return os.getpid()

    def chat(self, ck: Checkpoint):
        with self._lock:  # tokenizer loading is not thread-safe
            return self._chat(ck.tokenizer or ck.path, ck.chat_template)

    def run(self, episode: dict, agent: EngineRef, user: EngineRef | None) -> dict:
        """Run one planned episode and return its EpisodeRecord (as a dict)."""
        from handoff.agent.episode import run_episode
        from handoff.tasks import get_task

        ep = Episode.model_validate(episode)
        task = get_task(ep.domain, ep.task_id)
        spec = self._user_spec(user)
        # one session per attempt, as the agent's: a retried episode's turns are counted (and routed) afresh
        session = f"user/{ep.model}/{ep.domain}/{ep.task_id}/{ep.trial}/{uuid.uuid4().hex[:8]}"
        user_sim = self._user(spec, task, user, session_id=session, model=ep.model)
        result = run_episode(ep.domain, task, self._client(agent, ep.model), self.chat(agent.checkpoint), user_sim,
                             self._settings(agent.checkpoint), ep.seed, **self._evaluation(ep.domain))
        return result.to_record(ep.model, step=ep.step, trial=ep.trial).model_dump(mode="json")

    def _client(self, ref: EngineRef, model: str) -> RayEngineClient:
        """A client of `ref`'s replicas for an episode of checkpoint `model` (what they count requests under)."""
        e = self.cfg.engine
        return RayEngineClient(ref.replicas, e.request_timeout_s, ref.checkpoint, e.load_timeout_s, ref.name,
                               label=[model, ref.role])

    def _user_spec(self, user: EngineRef | None):
        from handoff.agent.user import UserSpec

        sampling = {"sampling": user.checkpoint.sampling} if user is not None else {}
        return UserSpec(**self.cfg.user.model_dump(exclude={"model"}), **sampling)

    def _user(self, spec, task, user: EngineRef | None, session_id: str, model: str):
        from handoff.agent.user import make_user

        if user is None:  # an API user simulator (litellm)
            return make_user(spec, task)
        return make_user(spec, task, engine=self._client(user, model), chat=self.chat(user.checkpoint),
                         session_id=session_id)

    def _settings(self, ck: Checkpoint):
        from handoff.agent.episode import EpisodeSettings

        return EpisodeSettings(**self.cfg.episode.model_dump(), agent_sampling=ck.sampling,
                               max_context_tokens=ck.max_model_len, tool_parser=ck.tool_parser)

    def _evaluation(self, domain: str) -> dict:
        """handoff.fasteval's evaluator and environment (bit-identical rewards), unless disabled."""
        if not self.cfg.workers.fast_eval:
            return {}
        from handoff.fasteval import evaluate_simulation, make_environment

        return {"evaluate": evaluate_simulation, "environment": make_environment(domain)}
