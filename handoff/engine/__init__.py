"""Engines: token ids in, token ids out (see base.Engine)."""

from handoff.engine.base import Engine, Generation, Sampling

__all__ = ["Engine", "Generation", "Sampling"]
