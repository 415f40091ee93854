"""Engine kinds (`engine.kind`) and the factory of engines: the one place that tells the kinds apart.

`build_engine(checkpoint, engine, role)` builds an AsyncEngine of the configured kind. What the sweep
needs to know of a kind without building an engine, its config checks, preflight, plan line and
placement ask the kind's declared properties (`engine_kind(engine)`):

- `loads_weights`: it loads the checkpoint's weights with vLLM, so the checkpoint directory must hold
  what vLLM loads (verl actors are merged first), the node's vLLM build must serve `engine.device`,
  and the engine's process needs vLLM's environment (`env`);
- `reads_script`: it is configured by `engine.script` (`script_problems` checks it);
- `shares_user_engine(engine)`: whether an agent checkpoint may be served by the user simulator's
  engines (`one_engine` then says whether one engine serves both);

`checkpoint` is a base.ModelRef (the sweep's Checkpoint), `engine` the sweep's engine group
(handoff.sweep.config.EngineConfig: vllm_engine.VLLMOptions plus `kind` and `script`): handoff.engine
reads their attributes and imports nothing of the sweep.
"""

from __future__ import annotations

from typing import Any

from handoff.engine.base import AsyncEngine, ModelRef
from handoff.engine.scripted import ScriptConfig, ScriptedReplay, script_problems
from handoff.engine.vllm_engine import VLLMOptions


class EngineKind:
    """What an engine kind is, declared (see the module's docstring); one instance per kind in KINDS."""

    loads_weights: bool
    reads_script: bool

    async def build(self, checkpoint: ModelRef, engine: Any, role: str) -> AsyncEngine:
        raise NotImplementedError

    def one_engine(self, a: ModelRef, b: ModelRef, engine: Any) -> bool:
        """Whether one engine built for checkpoint `a` serves `b` too."""
        raise NotImplementedError

    def shares_user_engine(self, engine: Any) -> bool:
        """Whether the agent may be served by the user simulator's engines (where `one_engine`)."""
        raise NotImplementedError

    def env(self, checkpoint: ModelRef, engine: Any) -> dict[str, str]:
        """Environment variables the engine's process needs before it starts."""
        return {}

    def script_problems(self, script: Any, checkpoint_names: set[str]) -> list[str]:
        """Problems of `engine.script`, each naming its key (for a kind that reads_script)."""
        return []


class VLLMKind(EngineKind):
    """engine.kind=vllm: AsyncVLLMEngine, the GPU or CPU build of vLLM."""

    loads_weights = True
    reads_script = False

    async def build(self, checkpoint: ModelRef, engine: Any, role: str) -> AsyncEngine:
        from handoff.engine.vllm_engine import AsyncVLLMEngine

        return AsyncVLLMEngine(engine_settings(checkpoint, engine))

    def one_engine(self, a: ModelRef, b: ModelRef, engine: Any) -> bool:
        """A vLLM engine is what its settings make it: the agent and a user simulator with the same
        path, tokenizer and max_model_len share one."""
        return engine_settings(a, engine) == engine_settings(b, engine)

    def shares_user_engine(self, engine: Any) -> bool:
        return True

    def env(self, checkpoint: ModelRef, engine: Any) -> dict[str, str]:
        from handoff.engine.vllm_engine import engine_env

        return {k: str(v) for k, v in engine_env(engine_settings(checkpoint, engine)).items()}


class ScriptedKind(EngineKind):
    """engine.kind=scripted: ScriptedReplay, configured by engine.script (ScriptConfig)."""

    loads_weights = False
    reads_script = True

    async def build(self, checkpoint: ModelRef, engine: Any, role: str) -> AsyncEngine:
        return await ScriptedReplay.load(checkpoint, ScriptConfig.model_validate(engine.script), role,
                                         engine.max_num_seqs)

    def one_engine(self, a: ModelRef, b: ModelRef, engine: Any) -> bool:
        """A scripted replay answers in its checkpoint's name, or in any of its path with
        share_user_engine."""
        return (self.shares_user_engine(engine) and a.path == b.path) or a == b

    def shares_user_engine(self, engine: Any) -> bool:
        return ScriptConfig.model_validate(engine.script).share_user_engine

    def script_problems(self, script: Any, checkpoint_names: set[str]) -> list[str]:
        return script_problems(script, checkpoint_names)


KINDS: dict[str, EngineKind] = {"vllm": VLLMKind(), "scripted": ScriptedKind()}


def engine_kind(engine: Any) -> EngineKind:
    """The kind of the sweep's engine group (`engine.kind`)."""
    return KINDS[engine.kind]


async def build_engine(checkpoint: ModelRef, engine: Any, role: str) -> AsyncEngine:
    """An engine of `engine.kind` serving `checkpoint` for `role` (agent or user); call it inside the
    event loop the engine will serve from."""
    return await engine_kind(engine).build(checkpoint, engine, role)


def one_engine(a: ModelRef, b: ModelRef, engine: Any) -> bool:
    """Whether one engine serves both checkpoints (EngineKind.one_engine of the engine's kind)."""
    return engine_kind(engine).one_engine(a, b, engine)


def engine_settings(checkpoint: ModelRef, engine: VLLMOptions):
    """vllm_engine's EngineSettings for one replica of `checkpoint`."""
    from handoff.engine.vllm_engine import EngineSettings

    return EngineSettings(model=checkpoint.path, tokenizer=checkpoint.tokenizer or checkpoint.path,
                          max_model_len=checkpoint.max_model_len,
                          distributed_executor_backend=executor_backend(engine),
                          **engine.model_dump(include=set(VLLMOptions.model_fields)))


def executor_backend(engine: VLLMOptions) -> str | None:
    """vLLM's executor for a replica: for tensor parallelism "mp", the same on GPU and CPU: vLLM's
    tensor-parallel workers are child processes of the replica's actor, inside the resources its
    bundle holds (every GPU of the replica: Ray shows the actor, and so its children, exactly those).
    Not "ray": vLLM-CPU has no Ray executor ("current platform cpu does not support ray"), and on
    GPUs vLLM v1's engine core process loses the actor's placement group (vllm-project/vllm#30016).
    One process (vLLM's default) without tensor parallelism."""
    return "mp" if engine.tensor_parallel_size > 1 else None
