"""The engine settings of a GPU sweep checked by vLLM itself, on the driver, before Ray starts.

For every checkpoint an engine will load (the agent's and the user simulator's; a verl actor by its
huggingface/ config, which its merge keeps), vLLM builds its own model configuration from exactly the
arguments the engine will get (handoff.engine.vllm_engine.engine_args) and checks it against the
tensor-parallel layout: a max_model_len beyond the model's, a tensor_parallel_size that does not
divide the attention heads, a dtype or tokenizer vLLM refuses. These parts of vLLM's configuration
need no device, so the check runs with either vLLM build (a CPU-only driver of a GPU cluster too);
what needs the GPU itself (memory, kernels) is left to the engine. A driver without vLLM, or
checkpoint paths it cannot see (an existing cluster), skip the check: the engines still refuse.
"""

from __future__ import annotations

import glob as globlib
from pathlib import Path

from handoff.engine.checkpoint import is_verl_actor
from handoff.sweep.config import Checkpoint, EngineConfig, SweepConfig


def targets(sweep: SweepConfig) -> list[tuple[str, Checkpoint]]:
    """(config key, checkpoint) of every checkpoint directory the driver sees that an engine loads."""
    out = []
    models = [(f"model.{key}", m) for key, m in sweep.model.items() if m.llm is None]  # an API model loads nothing
    if sweep.user.kind == "engine":
        models.append(("user.model", sweep.user.model))
    for key, m in models:
        paths = [m.path] if m.path is not None else m.paths or sorted(globlib.glob(m.glob))
        for path in paths:
            served = str(Path(path) / "huggingface") if is_verl_actor(path) else path
            if Path(served).is_dir():
                out.append((key, Checkpoint(name=key, path=served, step=0, **m.model_dump(
                    include={"tokenizer", "chat_template", "tool_parser", "max_model_len", "sampling"}))))
    return out


def problems(sweep: SweepConfig) -> list[str]:
    """`key: why` for every engine setting vLLM refuses (empty when it accepts them all, or cannot look)."""
    try:
        import vllm  # noqa: F401
    except ImportError:
        return []
    out: list[str] = []
    for key, ck in targets(sweep):
        out += _refusals(key, ck, sweep.engine)
    return list(dict.fromkeys(out))


def _refusals(key: str, ck: Checkpoint, engine: EngineConfig) -> list[str]:
    from vllm.config import ParallelConfig

    from handoff.engine.factory import engine_settings
    from handoff.engine.vllm_engine import engine_args

    settings = engine_settings(ck, engine)
    args = engine_args(settings)
    try:
        model = args.create_model_config()
    except Exception as exc:  # noqa: BLE001 - vLLM raises ValueError, pydantic's ValidationError, OSError
        return [f"{_model_key(key, str(exc))}: vLLM refuses {ck.path}: {_reason(exc)}"]
    try:
        model.verify_with_parallel_config(ParallelConfig(
            tensor_parallel_size=settings.tensor_parallel_size,
            distributed_executor_backend=settings.distributed_executor_backend or "uni"))
    except Exception as exc:  # noqa: BLE001 - as above
        return [f"engine.tensor_parallel_size: vLLM refuses {settings.tensor_parallel_size} for {ck.path}: "
                f"{_reason(exc)}"]
    return []


def _model_key(key: str, message: str) -> str:
    """The key that vLLM's message about a model's configuration names (the model's path when none)."""
    for field, where in (("max_model_len", f"{key}.max_model_len"), ("tokenizer", f"{key}.tokenizer"),
                         ("dtype", "engine.dtype")):
        if field in message:
            return where
    return f"{key}.path"


def _reason(exc: Exception) -> str:
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    text = " ".join(lines[1:] if len(lines) > 1 and "validation error" in lines[0] else lines)
    return text[:600]
