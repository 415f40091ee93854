"""Engine actors and their client.

`EngineHost` is the body of an async Ray actor: one replica of one checkpoint, hosting
handoff.engine's AsyncVLLMEngine (GPU or CPU build) or, for tests and dry runs, a stateless
scripted engine. The engine is built on the first request, so an actor that Ray restarts after a
crash reloads its checkpoint by itself and the retried requests find it ready.

`RayEngineClient` is what episodes see: a synchronous handoff.engine.base.Engine that routes every
request of a session (a conversation) to the same replica, so vLLM's prefix cache is reused turn
after turn.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import re
import uuid

from pydantic import BaseModel

from handoff.engine.base import ContextOverflowError, Generation, Sampling
from handoff.sweep.config import Checkpoint, EngineConfig


class ScriptConfig(BaseModel):
    """engine.script for kind=scripted: completions per role, chosen statelessly from the prompt
    (the number of assistant turns already in it), so that a restarted actor replays the same."""

    agent: list[str]
    user: list[str]
    delay_s: float = 0.0
    turn_marker: str = "<|im_start|>assistant"
    fail_sessions: str | None = None  # regex: requests of matching sessions raise (a broken episode)


class ScriptedReplay:
    """Completion i of the role's script, where i counts the role's own earlier turns in the prompt
    (the agent's prompt also holds tau2's greeting). The last completion repeats."""

    OFFSET = {"agent": 2, "user": 1}  # markers in the role's first prompt (generation prompt included)

    def __init__(self, checkpoint: Checkpoint, script: ScriptConfig, role: str):
        from transformers import AutoTokenizer

        self.tokenizer = AutoTokenizer.from_pretrained(checkpoint.tokenizer or checkpoint.path)
        self.script, self.role = script, role

    async def generate(self, prompt_ids: list[int], sampling: Sampling, request_id: str) -> Generation:
        from handoff.engine.scripted import ScriptedEngine

        completions = getattr(self.script, self.role)
        turns = self.tokenizer.decode(prompt_ids).count(self.script.turn_marker) - self.OFFSET[self.role]
        completion = completions[min(max(turns, 0), len(completions) - 1)]
        await asyncio.sleep(self.script.delay_s)
        if self.script.fail_sessions and re.search(self.script.fail_sessions, request_id):
            raise RuntimeError(f"scripted failure for {request_id}")
        return ScriptedEngine(self.tokenizer, [completion]).generate(prompt_ids, sampling)


def engine_settings(checkpoint: Checkpoint, engine: EngineConfig):
    """handoff.engine's EngineSettings for one replica of `checkpoint`."""
    from handoff.engine.vllm_engine import EngineSettings, VLLMOptions

    return EngineSettings(model=checkpoint.path, tokenizer=checkpoint.tokenizer or checkpoint.path,
                          max_model_len=checkpoint.max_model_len,
                          **engine.model_dump(include=set(VLLMOptions.model_fields)))


def actor_env(checkpoint: Checkpoint, engine: EngineConfig) -> dict[str, str]:
    """Environment variables of an engine actor's process (Ray runtime_env)."""
    if engine.kind == "scripted":
        return {}
    from handoff.engine.vllm_engine import engine_env

    return {k: str(v) for k, v in engine_env(engine_settings(checkpoint, engine)).items()}


class EngineHost:
    """One engine replica (use through ray.remote: an async actor)."""

    def __init__(self, checkpoint: dict, engine: dict, role: str):
        self.checkpoint = Checkpoint.model_validate(checkpoint)
        self.config = EngineConfig.model_validate(engine)
        self.role = role
        self._engine = None
        self._loading = asyncio.Lock()

    async def _ensure(self):
        async with self._loading:
            if self._engine is None:
                if self.config.kind == "scripted":
                    script = ScriptConfig.model_validate(self.config.script)
                    self._engine = ScriptedReplay(self.checkpoint, script, self.role)
                else:
                    from handoff.engine.vllm_engine import AsyncVLLMEngine

                    self._engine = AsyncVLLMEngine(engine_settings(self.checkpoint, self.config))
        return self._engine

    async def ready(self) -> int:
        """Load the checkpoint now; return this replica's pid."""
        await self._ensure()
        return os.getpid()

    async def generate(self, prompt_ids: list[int], sampling: dict, request_id: str) -> dict:
        engine = await self._ensure()
        generation = await engine.generate(prompt_ids, Sampling.model_validate(sampling), request_id)
        return generation.model_dump()


def route(session_id: str | None, n: int) -> int:
    """The replica of a session: stable across processes (sha256, not the salted hash())."""
    if session_id is None:
        return int.from_bytes(os.urandom(2), "big") % n
    return int.from_bytes(hashlib.sha256(session_id.encode()).digest()[:4], "big") % n


class RayEngineClient:
    """A synchronous Engine over the replicas of one checkpoint, with sticky session routing."""

    def __init__(self, replicas: list, timeout_s: float):
        self.replicas, self.timeout_s = list(replicas), timeout_s

    def generate(self, prompt_ids: list[int], sampling: Sampling, session_id: str | None = None) -> Generation:
        import ray

        replica = self.replicas[route(session_id, len(self.replicas))]
        request_id = f"{session_id or 'anon'}/{uuid.uuid4().hex[:12]}"
        ref = replica.generate.remote(list(prompt_ids), sampling.model_dump(), request_id)
        try:
            return Generation.model_validate(ray.get(ref, timeout=self.timeout_s))
        except ray.exceptions.RayTaskError as exc:
            if isinstance(exc.cause, ContextOverflowError):  # the agent records it as a format event
                raise exc.cause from None
            raise
