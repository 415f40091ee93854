"""A real verl FSDP actor checkpoint, written by torch.distributed on CPU (gloo, FSDP2).

`write_verl_actor(model_dir, actor_dir, world_size)` spawns `world_size` ranks that shard the HF
model with `fully_shard` on a ("fsdp",) device mesh and save what verl's FSDPCheckpointManager
saves: each rank's sharded state dict (DTensors) as model_world_size_{W}_rank_{r}.pt, the
fsdp_config.json, and huggingface/ with the config and tokenizer only (no hf_model).
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import sys
from pathlib import Path

import torch.multiprocessing as mp


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _rank(rank: int, world_size: int, port: int, model_dir: str, actor_dir: str) -> None:
    import torch
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard
    from transformers import AutoModelForCausalLM

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world_size)
    try:
        mesh = init_device_mesh("cpu", (world_size,), mesh_dim_names=("fsdp",))
        model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
        for layer in model.model.layers:
            fully_shard(layer, mesh=mesh)
        fully_shard(model, mesh=mesh)
        torch.save(model.state_dict(), Path(actor_dir) / f"model_world_size_{world_size}_rank_{rank}.pt")
        dist.barrier()
    finally:
        dist.destroy_process_group()


def write_verl_actor(model_dir: Path, actor_dir: Path, world_size: int = 2) -> Path:
    actor_dir.mkdir(parents=True, exist_ok=True)
    mp.start_processes(_rank, args=(world_size, _free_port(), str(model_dir), str(actor_dir)),
                       nprocs=world_size, start_method="spawn")
    (actor_dir / "fsdp_config.json").write_text(json.dumps({"FSDP_version": 2, "world_size": world_size}))
    hf = actor_dir / "huggingface"
    hf.mkdir(exist_ok=True)
    for f in Path(model_dir).iterdir():
        if f.suffix in (".json", ".jinja") and f.name != "report.json":
            shutil.copy(f, hf / f.name)
    return actor_dir


if __name__ == "__main__":
    write_verl_actor(Path(sys.argv[1]), Path(sys.argv[2]))
