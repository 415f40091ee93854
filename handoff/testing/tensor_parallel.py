"""tiny-hermes for tensor parallelism: its 3 attention heads divide by no TP size > 1 (vLLM shards
the heads), and vLLM's Qwen2 derives head_dim from hidden_size / heads. `padded_heads(src, dst)`
writes the same network as a Llama checkpoint (Qwen2 is Llama with q/k/v biases; Llama takes an
explicit head_dim) with `heads` query heads: the added heads have zero query weights and zero
columns in o_proj, so they add exactly nothing, and the key/value head (one) is shared by all."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

QWEN2_ONLY = ("use_sliding_window", "sliding_window", "max_window_layers", "layer_types")


def padded_heads(src: str | Path, dst: Path, heads: int = 4) -> Path:
    import torch
    from safetensors.torch import load_file, save_file

    src = Path(src)
    config = json.loads((src / "config.json").read_text())
    head_dim, had = config["hidden_size"] // config["num_attention_heads"], config["num_attention_heads"]
    if heads < had:
        raise ValueError(f"{src} has {had} heads already")
    shutil.copytree(src, dst, ignore=shutil.ignore_patterns("model.safetensors", "config.json", "report.json"))
    extra = (heads - had) * head_dim
    weights = {}
    for name, w in load_file(str(src / "model.safetensors")).items():
        if name.endswith("self_attn.q_proj.weight"):
            w = torch.cat([w, w.new_zeros(extra, w.shape[1])])
        elif name.endswith("self_attn.q_proj.bias"):
            w = torch.cat([w, w.new_zeros(extra)])
        elif name.endswith("self_attn.o_proj.weight"):
            w = torch.cat([w, w.new_zeros(w.shape[0], extra)], dim=1)
            weights[name.replace(".weight", ".bias")] = w.new_zeros(w.shape[0])  # Llama's attention_bias covers o_proj
        weights[name] = w.contiguous()
    save_file(weights, str(dst / "model.safetensors"), metadata={"format": "pt"})
    config = {k: v for k, v in config.items() if k not in QWEN2_ONLY}
    config.update(architectures=["LlamaForCausalLM"], model_type="llama", num_attention_heads=heads,
                  head_dim=head_dim, attention_bias=True, mlp_bias=False)
    (dst / "config.json").write_text(json.dumps(config, indent=2))
    return dst
