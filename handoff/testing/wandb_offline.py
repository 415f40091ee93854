"""W&B's offline records read back (for the W&B tests and bench/bench_wandb.py): each offline run's
`run-<id>.wandb` transaction log, in the LevelDB log format wandb-core writes, of protobuf records of
W&B's own schema (wandb.proto.wandb_internal_pb2)."""

from __future__ import annotations

import json
import struct
from pathlib import Path

from wandb.proto import wandb_internal_pb2 as pb

BLOCK, HEADER = 32768, 7  # LevelDB log format, as wandb-core writes it after its 7-byte file header
VOLATILE = ("_runtime", "_timestamp", "episodes/")  # wall-clock values, and the table file's reference


def wandb_records(path: Path):
    """The records of a .wandb file."""
    data = path.read_bytes()
    if data[:4] != b":W&B":
        raise ValueError(f"{path}: not a W&B transaction log")
    pos, chunks = HEADER, b""
    while pos + HEADER <= len(data):
        if BLOCK - pos % BLOCK < HEADER:  # block trailer padding
            pos += BLOCK - pos % BLOCK
            continue
        _, length, kind = struct.unpack("<IHB", data[pos:pos + HEADER])
        chunks += data[pos + HEADER:pos + HEADER + length]
        pos += HEADER + length
        if kind in (1, 4):  # FULL or LAST
            record = pb.Record()
            record.ParseFromString(chunks)
            yield record
            chunks = b""


def _key(item) -> str:
    return item.key or "/".join(item.nested_key)


def read_offline_run(run_dir: Path) -> dict:
    """What one offline W&B run directory holds: run record, summary, history, metrics, tables, and
    the artifacts W&B staged (a logged table's full version, media included: name -> its files)."""
    (path,) = run_dir.glob("run-*.wandb")
    out = {"run": None, "summary": {}, "history": [], "metrics": [], "dir": run_dir, "artifacts": {}}
    for record in wandb_records(path):
        kind = record.WhichOneof("record_type")
        if kind == "run":
            out["run"] = record.run
        elif kind == "summary":
            out["summary"].update({_key(i): json.loads(i.value_json) for i in record.summary.update})
        elif kind == "history":
            out["history"].append({_key(i): json.loads(i.value_json) for i in record.history.item})
        elif kind == "metric":
            out["metrics"].append(record.metric)
        elif kind == "artifact":
            files = {c.path: Path(c.local_path) for c in record.artifact.manifest.contents}
            out["artifacts"].setdefault(record.artifact.name, []).append(files)
    return out


def offline_runs(wandb_dir: Path, rid: str) -> list[dict]:
    """Every offline run written for one run id, in the order `wandb sync` uploads them (start time).
    One whose process was killed before W&B wrote its run record (a file of its header only) holds
    nothing and is left out."""
    runs = [read_offline_run(p.parent) for p in wandb_dir.glob(f"offline-run-*/run-{rid}.wandb")]
    runs = [r for r in runs if r["run"] is not None]
    if not runs:
        raise FileNotFoundError(f"no offline run {rid} in {wandb_dir}")
    return sorted(runs, key=lambda r: r["run"].start_time.ToNanoseconds())


def history(runs) -> list[dict]:
    """The run's history once all its offline runs are synced: their rows, one after the other."""
    return [{k: v for k, v in row.items() if not k.startswith(VOLATILE)} for r in runs for row in r["history"]]
