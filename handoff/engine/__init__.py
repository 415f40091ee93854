"""Engines: token ids in, token ids out (see base.Engine).

chat.ChatFormat renders chats with the model's tokenizer; vllm_engine holds the vLLM engines;
models builds the embedded CPU models. Those modules import their heavy dependencies lazily.
"""

from handoff.engine.base import ContextOverflowError, Engine, Generation, Sampling

__all__ = ["ContextOverflowError", "Engine", "Generation", "Sampling"]
