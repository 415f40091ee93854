"""The sweep's side of a run directory (paths and manifest: handoff.rundir): which shards are
done / failed / corrupt / missing, partial shards, failed-shard records, and the run lock.

Partial shards (partial/<id>.jsonl, one EpisodeRecord per line, appended and fsynced as each
episode finishes) make sure a finished episode is never lost: a retried or resumed shard runs only
the episodes it does not have yet, and the complete shard is then written atomically
(handoff.records.write_shard) and its partial file removed.
"""

from __future__ import annotations

import fcntl
import os
import time
from functools import cached_property
from pathlib import Path

from pydantic import ValidationError

from handoff.errors import HandoffError
from handoff.records import (
    CorruptShard,
    EpisodeRecord,
    read_shard,
    read_shard_header,
    write_atomic,
    write_shard,
)
from handoff.rundir import RunPaths
from handoff.sweep.failures import FailedShard, ShardFailure
from handoff.sweep.plan import Shard


class RunLocked(HandoffError, RuntimeError):
    """Another driver is running a sweep in this run directory."""


class SweepRun(RunPaths):
    def __init__(self, root: str | Path):
        super().__init__(root)
        self._lock = None

    def lock(self) -> None:
        """Hold an exclusive lock on the run for this process's lifetime (released if it dies)."""
        self.root.mkdir(parents=True, exist_ok=True)
        handle = open(self.lock_path, "w")
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.close()
            raise RunLocked(f"{self.root}: another sweep driver is running in this directory") from None
        self._lock = handle

    def unlock(self) -> None:
        if self._lock is not None:
            self._lock.close()
            self._lock = None

    # -- shard state ------------------------------------------------------------------------------
    @cached_property
    def run_uuid(self) -> str | None:
        """The run's identity (manifest.json's run_uuid), written into each shard it finishes; None
        before the manifest is written."""
        return self.read_manifest().run_uuid if self.exists() else None

    def is_done(self, shard: Shard) -> bool:
        """A complete, verified shard of this run with exactly the planned episodes and seeds. A
        shard that fails the check (another run's, copied in) is moved aside (never deleted) so that
        it is rerun."""
        path = self.shard_path(shard.id)
        if not path.is_file():
            return False
        try:
            owner = read_shard_header(path).get("run_uuid")
            if owner not in (None, self.run_uuid):  # None: written before shards carried it
                reason = f"written by another run (run_uuid {owner})"
            elif sorted((r.key, r.seed) for r in read_shard(path)) == sorted((e.key, e.seed) for e in shard.episodes):
                return True
            else:
                reason = "episodes or their seeds differ from the plan"
        except (CorruptShard, ValidationError, ValueError) as exc:
            reason = str(exc)
        path.rename(path.with_name(f"{path.name}.corrupt-{int(time.time())}"))
        self.write_failed(shard.id, f"corrupt shard moved aside: {reason}", 0, ShardFailure.CORRUPT)
        return False

    def write_done(self, shard: Shard, records: dict[tuple, EpisodeRecord]) -> None:
        ordered = [records[e.key] for e in shard.episodes]
        self.failed_path(shard.id).unlink(missing_ok=True)  # first: a crash after it reruns the shard
        write_shard(self.shard_path(shard.id), shard.id, ordered, self.run_uuid)
        self.partial_path(shard.id).unlink(missing_ok=True)

    def read_partial(self, shard: Shard) -> dict[tuple, EpisodeRecord]:
        """The finished episodes of an unfinished shard; a torn last line (killed writer) is skipped."""
        path = self.partial_path(shard.id)
        planned = {e.key: e.seed for e in shard.episodes}
        records: dict[tuple, EpisodeRecord] = {}
        if path.is_file():
            for line in path.read_bytes().splitlines():
                try:
                    record = EpisodeRecord.model_validate_json(line)
                except ValidationError:
                    continue
                if planned.get(record.key) == record.seed:  # another seed: not this plan's episode
                    records.setdefault(record.key, record)
        return records

    def append_partial(self, shard_id: str, record: EpisodeRecord) -> None:
        self.partial_dir.mkdir(parents=True, exist_ok=True)
        with open(self.partial_path(shard_id), "ab") as f:
            f.write(b"\n" + record.model_dump_json().encode() + b"\n")
            f.flush()
            os.fsync(f.fileno())

    def write_failed(self, shard_id: str, error: str, attempts: int, kind: ShardFailure) -> None:
        record = FailedShard(shard_id=shard_id, kind=kind, attempts=attempts, error=error)
        write_atomic(self.failed_path(shard_id), record.model_dump_json(indent=1) + "\n")

    def read_failed(self, shard_id: str) -> FailedShard:
        return FailedShard.model_validate_json(self.failed_path(shard_id).read_text())
