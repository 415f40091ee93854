"""Checkpoint directories as vLLM loads them, checked before any engine starts, and verl actor
checkpoints turned into HF checkpoints by verl's own model merger.

`problems(path, tokenizer)` lists what a checkpoint directory lacks (config.json, loadable weights
with a complete index, a tokenizer). A verl FSDP actor directory (`global_step_N/actor`: the shards
`model_world_size_W_rank_R.pt`, fsdp_config.json and huggingface/ with config and tokenizer) is
merged once by `python -m verl.model_merger merge --backend fsdp` into `merged_dir(...)`, a
directory keyed by the shards; later runs reuse it.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import uuid
from pathlib import Path

from handoff.errors import HandoffError

SHARD = re.compile(r"model_world_size_(\d+)_rank_(\d+)\.pt")
INDEXES = ("model.safetensors.index.json", "pytorch_model.bin.index.json")
TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model", "vocab.json")
# verl's merger runs with verl's transformers pin from this directory (`make setup` installs it).
VERL_ENV_VAR = "HANDOFF_VERL_ENV"


class CheckpointError(HandoffError, ValueError):
    """A checkpoint that no engine could load; the message names the path and what is missing."""


def verl_shards(path: Path) -> list[Path]:
    return sorted(p for p in path.glob("model_world_size_*_rank_*.pt") if SHARD.fullmatch(p.name))


def is_verl_actor(path: str | Path) -> bool:
    return bool(verl_shards(Path(path)))


TOKENIZER_KEY = "model.<name>.tokenizer"  # the config key a hint names when the caller knows no better


def problems(path: str | Path, tokenizer: str | None = None, tokenizer_key: str = TOKENIZER_KEY) -> list[str]:
    """What the checkpoint directory `path` lacks for vLLM (empty when it can be served);
    `tokenizer_key` is the config key of its tokenizer, which a missing tokenizer's hint names."""
    path = Path(path)
    if not path.is_dir():
        return [f"{path}: checkpoint directory does not exist"]
    if is_verl_actor(path):
        return _verl_problems(path, tokenizer, tokenizer_key)
    out = [] if (path / "config.json").is_file() else [f"{path}: no config.json"]
    out += _weight_problems(path)
    out += _tokenizer_problems(path, tokenizer, tokenizer_key)
    return out


def tokenizer_problems(path: str | Path, tokenizer: str | None = None, tokenizer_key: str = TOKENIZER_KEY) -> list[str]:
    """What an engine that only tokenizes (the scripted one) misses: the tokenizer files of
    `tokenizer`, else of the checkpoint (a verl actor's are in its huggingface/)."""
    path = Path(path)
    return _tokenizer_problems(path / "huggingface" if is_verl_actor(path) else path, tokenizer, tokenizer_key)


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
    hint = (" (verl's actor/huggingface holds only config and tokenizer unless the trainer saved hf_model: "
            "give the actor directory, global_step_N/actor, and it is merged)") if path.name == "huggingface" else ""
    return [f"{path}: no weights (model.safetensors, pytorch_model.bin, or a sharded index){hint}"]


def _safetensors_problem(file: Path) -> str | None:
    """Whether a safetensors file's header is readable (a truncated copy is not)."""
    from safetensors import safe_open

    try:
        with safe_open(str(file), framework="numpy") as f:
            f.keys()
    except Exception as exc:  # noqa: BLE001 - safetensors raises several types for a bad header
        return f"{file}: unreadable weights ({exc})"
    return None


def _tokenizer_problems(path: Path, tokenizer: str | None, key: str = TOKENIZER_KEY) -> list[str]:
    where = Path(tokenizer) if tokenizer else path
    if any((where / f).is_file() for f in TOKENIZER_FILES):
        return []
    given = f"the tokenizer {where} ({key})" if tokenizer else f"{path}"
    return [f"{given}: no tokenizer ({', '.join(TOKENIZER_FILES)}); set {key} to a tokenizer directory"]


def _verl_problems(path: Path, tokenizer: str | None, tokenizer_key: str = TOKENIZER_KEY) -> list[str]:
    shards = verl_shards(path)
    sizes = {int(SHARD.fullmatch(p.name).group(1)) for p in shards}
    ranks = {int(SHARD.fullmatch(p.name).group(2)) for p in shards}
    out = []
    if len(sizes) != 1 or ranks != set(range(max(sizes))):
        out.append(f"{path}: incomplete verl FSDP shards: world sizes {sorted(sizes)}, ranks {sorted(ranks)}")
    if not (path / "fsdp_config.json").is_file():
        out.append(f"{path}: verl actor checkpoint without fsdp_config.json")
    hf = path / "huggingface"
    if not (hf / "config.json").is_file():
        out.append(f"{hf}: no config.json (verl saves the model config there)")
    return out + _tokenizer_problems(hf, tokenizer, tokenizer_key)


def content_key(path: str | Path) -> str:
    """A key of a checkpoint directory's content: every file's relative path, size and modification
    time (the weights are never read), so a re-saved checkpoint gets another key. Hidden files and the
    merged_hf-* directories handoff writes into a verl actor directory are left out."""
    path, h = Path(path), hashlib.sha256()
    for p in sorted(path.rglob("*")):
        rel = p.relative_to(path)
        if p.is_file() and not any(part.startswith((".", "merged_hf-")) for part in rel.parts):
            st = p.stat()
            h.update(f"{rel}:{st.st_size}:{st.st_mtime_ns}\n".encode())
    return h.hexdigest()


def shard_key(path: Path) -> str:
    """A key of the actor directory's absolute path and content (content_key: the shards,
    fsdp_config.json and huggingface/ with the config, generation config, tokenizer and chat
    template the merged checkpoint copies)."""
    return hashlib.sha256(f"{path.resolve()}\0{content_key(path)}".encode()).hexdigest()[:16]


def merged_dir(path: str | Path, shared_dir: str | None) -> Path:
    """Where the merged HF checkpoint of a verl actor lives: beside the shards when that directory
    is writable, else in `shared_dir` (cluster.merged_dir: storage every GPU node reads)."""
    path = Path(path)
    key = shard_key(path)
    if os.access(path, os.W_OK):
        return path / f"merged_hf-{key}"
    if shared_dir is None:
        raise CheckpointError(f"{path}: verl checkpoint in a read-only directory; set cluster.merged_dir to a "
                              "shared writable directory for its merged HF checkpoint")
    return Path(shared_dir) / f"{path.parent.name}-{path.name}-{key}"


def verl_env() -> Path:
    """The directory with verl's transformers pin (HANDOFF_VERL_ENV, default <venv>/verl-merger)."""
    env = Path(os.environ.get(VERL_ENV_VAR) or Path(sys.prefix) / "verl-merger")
    if not (env / "transformers").is_dir():
        raise CheckpointError(f"verl's merger environment {env} is missing: run `make setup` (it installs "
                              f"verl's transformers pin there) or set {VERL_ENV_VAR}")
    return env


def merge_verl_actor(path: str | Path, shared_dir: str | None = None, timeout_s: float = 3600) -> Path:
    """The merged HF checkpoint of a verl actor directory, merged by verl's model merger if not yet
    done. The merge writes a temporary directory of its own (named by host, process and a random
    part: nodes on shared storage may share a pid) renamed into place: a directory that exists is
    complete. A merger that fails or runs past `timeout_s` leaves nothing behind (CheckpointError)."""
    path = Path(path)
    bad = _verl_problems(path, None)
    if bad:
        raise CheckpointError("\n".join(bad))
    target = merged_dir(path, shared_dir)
    if target.is_dir():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f".{target.name}.tmp-{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:8]}")
    try:
        _run_merger(path, tmp, timeout_s)
        tmp.rename(target)
    except OSError:  # another merge of the same shards finished first
        if not target.is_dir():
            raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return target


def _run_merger(path: Path, tmp: Path, timeout_s: float) -> None:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(verl_env()), os.environ.get("PYTHONPATH")]))}
    cmd = [sys.executable, "-m", "verl.model_merger", "merge", "--backend", "fsdp",
           "--local_dir", str(path), "--target_dir", str(tmp)]
    try:
        done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        raise CheckpointError(f"{path}: verl's model merger ran past {timeout_s:g}s (engine.load_timeout_s) and "
                              "was stopped; nothing was kept") from None
    if done.returncode != 0:
        raise CheckpointError(f"{path}: verl's model merger failed (exit {done.returncode}):\n{done.stderr[-3000:]}")
