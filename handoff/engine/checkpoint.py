"""Checkpoint directories as vLLM loads them, checked before any engine starts.

`problems(path, tokenizer)` lists what a checkpoint directory lacks (config.json, loadable weights
with a complete index, a tokenizer).
"""

from __future__ import annotations

import json
from pathlib import Path

from handoff.errors import HandoffError

INDEXES = ("model.safetensors.index.json", "pytorch_model.bin.index.json")
TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model", "vocab.json")


class CheckpointError(HandoffError, ValueError):
    """A checkpoint that no engine could load; the message names the path and what is missing."""


def problems(path: str | Path, tokenizer: str | None = None) -> list[str]:
    """What the checkpoint directory `path` lacks for vLLM (empty when it can be served)."""
    path = Path(path)
    if not path.is_dir():
        return [f"{path}: checkpoint directory does not exist"]
    out = [] if (path / "config.json").is_file() else [f"{path}: no config.json"]
    out += _weight_problems(path)
    out += _tokenizer_problems(path, tokenizer)
    return out


def _weight_problems(path: Path) -> list[str]:
    for name in INDEXES:
        if (path / name).is_file():
            try:
                files = set(json.loads((path / name).read_text())["weight_map"].values())
            except (ValueError, KeyError, AttributeError) as exc:
                return [f"{path / name}: unreadable weight index ({exc!r})"]
            missing = sorted(f for f in files if not (path / f).is_file())
            return [f"{path / name}: weight files missing: {', '.join(missing)}"] if missing else []
    safetensors = sorted(path.glob("*.safetensors"))
    if safetensors:
        return [p for p in map(_safetensors_problem, safetensors) if p]
    if list(path.glob("pytorch_model*.bin")):
        return []
    return [f"{path}: no weights (model.safetensors, pytorch_model.bin, or a sharded index)"]


def _safetensors_problem(file: Path) -> str | None:
    """Whether a safetensors file's header is readable (a truncated copy is not)."""
    from safetensors import safe_open

    try:
        with safe_open(str(file), framework="numpy") as f:
            f.keys()
    except Exception as exc:  # noqa: BLE001 - safetensors raises several types for a bad header
        return f"{file}: unreadable weights ({exc})"
    return None


def _tokenizer_problems(path: Path, tokenizer: str | None) -> list[str]:
    where = Path(tokenizer) if tokenizer else path
    if any((where / f).is_file() for f in TOKENIZER_FILES):
        return []
    given = f"the tokenizer {where} (model.tokenizer)" if tokenizer else f"{path}"
    return [f"{given}: no tokenizer ({', '.join(TOKENIZER_FILES)}); set model.tokenizer to a tokenizer directory"]
