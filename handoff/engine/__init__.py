"""Engines: token ids in, token ids out (base.Engine for episodes, base.AsyncEngine for a replica).

chat.ChatFormat renders chats with the model's tokenizer; vllm_engine holds the vLLM engines and
scripted the scripted one (a test double, and the sweep's dry runs); factory builds the configured
kind and declares what each kind needs; models builds the embedded CPU models (tiny trains
tiny-hermes). Those modules import their heavy dependencies lazily.
"""

from handoff.engine.base import AsyncEngine, ContextOverflowError, Engine, EngineStats, Generation, Sampling

__all__ = ["AsyncEngine", "ContextOverflowError", "Engine", "EngineStats", "Generation", "Sampling"]
