"""A second checkpoint of the same architecture: a copy of a model directory with every weight
scaled by (1 + scale x N(0, 1)) (the in-place reload test and bench.bench_reload)."""

from __future__ import annotations

import shutil
from pathlib import Path


def perturbed_copy(src: str, dst: Path, scale: float = 0.05, seed: int = 0) -> str:
    import torch
    from safetensors.torch import load_file, save_file

    shutil.copytree(src, dst)
    weights = load_file(str(dst / "model.safetensors"))
    gen = torch.Generator().manual_seed(seed)
    weights = {k: (v.float() * (1 + scale * torch.randn(v.shape, generator=gen))).to(v.dtype).contiguous()
               for k, v in weights.items()}
    save_file(weights, str(dst / "model.safetensors"), metadata={"format": "pt"})
    return str(dst)
