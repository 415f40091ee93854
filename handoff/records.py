"""The episode log: one record per finished episode, grouped in shards written atomically.

This is the single source every consumer reads: the reducer, the W&B logger, reports, comparisons
and the tau2 export. A shard is a JSON-lines file: a header line (shard id, record count, sha256 of
the body) followed by one EpisodeRecord per line. It appears under its final name only once it is
complete (write to a temporary file, fsync, rename), so a crash never leaves a half shard behind,
and a shard whose body does not match its checksum is reported as corrupt, never read.

The header's `schema_version` (SHARD_SCHEMA_VERSION) names the format; a header without one was
written before the field and is version 1. A shard of a newer version is refused, never guessed at
(docs/sweep.md, "Format versions").
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
import threading
from pathlib import Path
from typing import Iterable

from pydantic import BaseModel, Field, ValidationError

from handoff.errors import HandoffError
from handoff.rules.events import FormatEvent

SHARD_SCHEMA_VERSION = 2
"""1: a header line (shard_id, n, sha256) and one EpisodeRecord per line (headers from before the
field have no schema_version and are version 1 too). 2: `usage` records what the episode cost
(`Cost`: tokens of agent and user, API dollars or engine- and GPU-seconds, wall time by part); a
version-1 record reads with `usage.cost` None (n/a in every view). Tests: tests/golden/shard-v*.jsonl."""


class Cost(BaseModel):
    """What one episode cost (docs/metrics.md, "Cost"). Dollars are litellm's price from its local cost
    map, None with the reason in `*_cost_note` where it has none (never made up); a local engine's cost
    is its request time (engine-seconds) and that times the replica's GPUs (GPU-seconds)."""

    agent_cached_tokens: int = 0  # prompt tokens the prefix cache (or the provider's) served
    user_prompt_tokens: int = 0
    user_cached_tokens: int = 0
    agent_usd: float | None = None  # an API agent's price; None: a local engine (agent_usd_note says so) or unknown
    agent_usd_note: str | None = None
    user_usd: float | None = None  # an API user simulator's price
    user_usd_note: str | None = None
    agent_engine_s: float = 0.0  # time of the agent's requests on its engine (0: an API model)
    user_engine_s: float = 0.0
    gpu_s: float = 0.0  # (agent_engine_s + user_engine_s) x GPUs per replica
    agent_s: float = 0.0  # the episode's wall time, by who it waited for: the agent's turns,
    user_s: float = 0.0  # the user simulator's,
    tool_s: float = 0.0  # the tools' (the rest of wall_s: tau2's orchestration and the evaluation)

    @property
    def engine_s(self) -> float:
        """The agent's and the user's request time on the sweep's engines."""
        return self.agent_engine_s + self.user_engine_s

    @property
    def usd(self) -> float | None:
        """Agent and user dollars; None when either is unknown. A local engine's side costs no dollars:
        it is 0 when its note says `local engine`."""
        parts = [(self.agent_usd, self.agent_usd_note), (self.user_usd, self.user_usd_note)]
        if any(v is None and not (note or "").startswith(LOCAL_ENGINE) for v, note in parts):
            return None
        return sum(v or 0.0 for v, _ in parts)

    @property
    def no_price(self) -> str | None:
        """Why `usd` is None: the note of the side that has no price (None when it has one)."""
        for value, note in ((self.agent_usd, self.agent_usd_note), (self.user_usd, self.user_usd_note)):
            if value is None and not (note or "").startswith(LOCAL_ENGINE):
                return note or "unknown"
        return None


LOCAL_ENGINE = "local engine"
"""The note of a side that ran on the sweep's engines: no dollars, its engine- and GPU-seconds instead."""


def cost_units(usd: float | None, engine_s: float) -> list[str]:
    """The units a cost is shown in (the report, the sweep's estimate): dollars where a side ran on an
    API (`usd` None: no price, or above 0), engine- and GPU-seconds where a side ran on the sweep's
    engines (`engine_s` above 0); dollars alone when neither (they are 0)."""
    units = ["usd"] if usd is None or usd > 0 else []
    units += ["engine_s", "gpu_s"] if engine_s else []
    return units or ["usd"]


class Usage(BaseModel):
    prompt_tokens: int = 0
    completion_tokens: int = 0
    agent_turns: int = 0
    user_completion_tokens: int = 0
    user_truncated_turns: int = 0  # user simulator replies cut (at user.sampling.max_tokens or its context's room)
    cost: Cost | None = None  # None: a record from before shard version 2 (n/a)


class EpisodeRecord(BaseModel):
    """One episode as it ran: where it belongs in the sweep and the finalized tau2 SimulationRun."""

    model: str = Field(description="checkpoint name (conf/model)")
    step: int = Field(0, description="training step of the checkpoint, the x-axis of learning curves")
    domain: str
    task_id: str
    trial: int = 0
    seed: int
    simulation: dict = Field(description="tau2 SimulationRun (model_dump(mode='json')), finalized")
    format_events: list[FormatEvent] = Field(default_factory=list)
    user_format_events: list[FormatEvent] = Field(default_factory=list, exclude_if=lambda v: not v,
                                                  description="the user simulator's format events (telecom's user "
                                                              "calls tools): the user's, never charged to the agent")
    usage: Usage = Field(default_factory=Usage)
    wall_s: float = 0.0
    recorded_reward: float | None = Field(None, exclude_if=lambda v: v is None,
                                          description="an imported episode (handoff import): the reward its file "
                                                      "recorded; `simulation` holds the re-evaluated one")

    @property
    def key(self) -> tuple[str, str, str, int]:
        return (self.model, self.domain, self.task_id, self.trial)

    def simulation_run(self):
        from tau2.data_model.simulation import SimulationRun

        return SimulationRun.model_validate(self.simulation)


class CorruptShard(HandoffError):
    """A shard file that cannot be trusted (bad header, wrong count or checksum)."""


class NewerShard(HandoffError):
    """A shard written by a newer handoff (its schema_version is above SHARD_SCHEMA_VERSION). Not
    corrupt: nothing may move it aside or rerun it; the run needs the newer handoff."""


def _body(records: Iterable[EpisodeRecord]) -> bytes:
    return b"".join(r.model_dump_json().encode() + b"\n" for r in records)


_umask_lock = threading.Lock()


def _umask() -> int:
    """The process's umask (os.umask can only read it by setting it: set it back at once)."""
    with _umask_lock:
        mask = os.umask(0o077)
        os.umask(mask)
    return mask


def write_atomic(path: Path, data: bytes | str) -> None:
    """Write `data` so that `path` holds either its old or its complete new content, never a part:
    a temporary file beside it, fsync, rename. The file gets the mode open() would give it (0666
    less the umask), not mkstemp's 0600: results on a shared file system stay readable by the team."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        os.fchmod(fd, 0o666 & ~_umask())
        with os.fdopen(fd, "wb") as f:
            f.write(data.encode() if isinstance(data, str) else data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_shard(path: Path, shard_id: str, records: list[EpisodeRecord], run_uuid: str | None = None) -> None:
    """Write records atomically: the shard exists complete under `path` or not at all. `run_uuid`
    (the sweep's run, handoff.rundir.Manifest) goes in the header: a shard copied in from another
    run is then told apart from this run's own."""
    body = _body(records)
    header = {"schema_version": SHARD_SCHEMA_VERSION, "shard_id": shard_id, "n": len(records),
              "sha256": hashlib.sha256(body).hexdigest()}
    if run_uuid:
        header["run_uuid"] = run_uuid
    write_atomic(path, json.dumps(header).encode() + b"\n" + body)


def read_shard_header(path: Path) -> dict:
    with open(path, "rb") as f:
        return _parse_header(path, f.readline())


def _parse_header(path: Path, line: bytes) -> dict:
    try:
        header = json.loads(line)
        assert {"shard_id", "n", "sha256"} <= header.keys()
        version = header.get("schema_version", 1)
        assert isinstance(version, int) and version >= 1
    except Exception as exc:
        raise CorruptShard(f"{path}: unreadable shard header") from exc
    if version > SHARD_SCHEMA_VERSION:
        raise NewerShard(f"{path}: shard schema_version {version} is unknown to this handoff (it reads 1 to "
                         f"{SHARD_SCHEMA_VERSION}): a run written by a newer handoff needs that handoff")
    return header


def read_shard(path: Path) -> list[EpisodeRecord]:
    """Read and verify a shard; raise CorruptShard if it does not match its header or its lines are
    not episode records."""
    data = Path(path).read_bytes()
    first, _, body = data.partition(b"\n")
    header = _parse_header(path, first)
    if hashlib.sha256(body).hexdigest() != header["sha256"]:
        raise CorruptShard(f"{path}: checksum mismatch")
    lines = body.splitlines()
    if len(lines) != header["n"]:
        raise CorruptShard(f"{path}: {len(lines)} records, header says {header['n']}")
    try:
        return [EpisodeRecord.model_validate_json(line) for line in lines]
    except ValidationError as exc:  # a valid checksum over something else's lines (a stray file)
        raise CorruptShard(f"{path}: not a shard of episode records: {exc.errors()[0]['msg']}") from None
