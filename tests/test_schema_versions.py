"""Every shard and manifest format a handoff has written still reads, and a newer one is refused.

tests/golden/ keeps one small file per format version, frozen as that version wrote it: never
regenerate one. A change that an older handoff would misread bumps SHARD_SCHEMA_VERSION or
MANIFEST_VERSION and adds its golden file (docs/sweep.md, "Format versions")."""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path

import pytest

from handoff.cli import main
from handoff.errors import USER_ERROR_STATUS
from handoff.records import SHARD_SCHEMA_VERSION, CorruptShard, NewerShard, read_shard, read_shard_header, write_shard
from handoff.rundir import MANIFEST_VERSION, Manifest, RunDirError, RunPaths
from handoff.sweep.plan import Shard
from handoff.sweep.rundir import SweepRun

GOLDEN = Path(__file__).parent / "golden"
SHARDS = sorted(GOLDEN.glob("shard-v*.jsonl"))
MANIFESTS = sorted(GOLDEN.glob("manifest-v*.json"))


def _version(path: Path) -> int:
    return int(re.match(r"\w+-v(\d+)", path.name).group(1))


def test_there_is_a_golden_file_for_every_version():
    assert {_version(p) for p in SHARDS} == set(range(1, SHARD_SCHEMA_VERSION + 1))
    assert {_version(p) for p in MANIFESTS} == set(range(1, MANIFEST_VERSION + 1))


@pytest.mark.parametrize("path", SHARDS, ids=lambda p: p.name)
def test_every_golden_shard_reads(path):
    records = read_shard(path)
    assert [r.key for r in records] == [("ckpt-a", "retail", "0", 0), ("ckpt-a", "retail", "0", 1)]
    assert [r.simulation_run().termination_reason for r in records] == ["user_stop", "agent_stop"]
    assert [len(r.format_events) for r in records] == [0, 1] and [r.usage.agent_turns for r in records] == [2, 5]
    assert read_shard_header(path).get("schema_version", 1) == _version(path)


@pytest.mark.parametrize("path", SHARDS, ids=lambda p: p.name)
def test_cost_is_recorded_from_version_2_and_absent_before(path):
    costs = [r.usage.cost for r in read_shard(path)]
    if _version(path) < 2:  # no cost fields: n/a in every view, never a zero
        assert costs == [None, None]
        return
    local, api = costs
    assert (local.usd, local.gpu_s, local.agent_engine_s) == (0.0, 4.75, 3.5)  # a local engine: no dollars
    assert api.agent_usd == 0.0123 and api.usd is None and "no price" in api.user_usd_note  # unknown: not made up


@pytest.mark.parametrize("path", MANIFESTS, ids=lambda p: p.name)
def test_every_golden_manifest_reads(path, tmp_path):
    run = RunPaths(tmp_path)
    run.manifest_path.write_bytes(path.read_bytes())
    manifest = run.read_manifest()
    version = _version(path)
    assert manifest.schema_version == version and manifest.name == "golden" and manifest.n_episodes == 2
    assert [s["id"] for s in manifest.shards] == ["ckpt-a-retail-00000"]
    assert manifest.checkpoint_content == ({"ckpt-a": "5" * 64} if version >= 3 else {})
    # version 1 had no run_uuid: its W&B ids were derived from the file's sha256, so that is its uuid
    assert manifest.run_uuid == (hashlib.sha256(path.read_bytes()).hexdigest() if version == 1
                                 else "5f0c3c0a2d7e4b8a9c1e6f2a3b4c5d6e")


def test_what_is_written_today_carries_the_current_versions(tmp_path):
    records = read_shard(GOLDEN / f"shard-v{SHARD_SCHEMA_VERSION}.jsonl")
    write_shard(tmp_path / "s.jsonl", "s", records)
    assert read_shard_header(tmp_path / "s.jsonl")["schema_version"] == SHARD_SCHEMA_VERSION
    assert read_shard(tmp_path / "s.jsonl") == records
    RunPaths(tmp_path).write_manifest(Manifest(name="today"))
    assert json.loads(RunPaths(tmp_path).manifest_path.read_text())["schema_version"] == MANIFEST_VERSION


def _shard_with_header(tmp_path: Path, **changes) -> Path:
    header, _, body = (GOLDEN / "shard-v1.jsonl").read_bytes().partition(b"\n")
    path = tmp_path / "shards" / "ckpt-a-retail-00000.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(json.dumps({**json.loads(header), **changes}).encode() + b"\n" + body)
    return path


def test_a_newer_shard_is_refused_and_left_where_it_is(tmp_path, capsys):
    """Not corrupt: a resume must not move it aside and rerun it, a reducer must not skip it."""
    path = _shard_with_header(tmp_path, schema_version=SHARD_SCHEMA_VERSION + 1)
    for read in (read_shard, read_shard_header):
        with pytest.raises(NewerShard, match=f"schema_version {SHARD_SCHEMA_VERSION + 1} is unknown"):
            read(path)
    golden = GOLDEN / f"manifest-v{MANIFEST_VERSION}.json"
    shard = Shard.model_validate(Manifest.from_json(golden.read_bytes()).shards[0])
    with pytest.raises(NewerShard):
        SweepRun(tmp_path).is_done(shard)
    RunPaths(tmp_path).manifest_path.write_bytes(golden.read_bytes())
    assert main(["reduce", "--no-wandb", str(tmp_path)]) == USER_ERROR_STATUS
    assert f"schema_version {SHARD_SCHEMA_VERSION + 1} is unknown" in capsys.readouterr().err
    assert path.is_file() and not any(SweepRun(tmp_path).failed_dir.glob("*"))
    assert not RunPaths(tmp_path).metrics.exists()


@pytest.mark.parametrize("version", ["1", 0, None])
def test_a_shard_version_that_is_no_version_is_corrupt(tmp_path, version):
    with pytest.raises(CorruptShard, match="unreadable shard header"):
        read_shard(_shard_with_header(tmp_path, schema_version=version))


@pytest.mark.parametrize("key", ["schema_version", "version"])
def test_a_newer_manifest_is_refused(tmp_path, key):
    """Under its own key, or under the `version` key of versions 2 and 3."""
    data = json.loads((GOLDEN / "manifest-v3.json").read_text())
    del data["version"]
    run = RunPaths(tmp_path)
    run.manifest_path.write_text(json.dumps({**data, key: MANIFEST_VERSION + 1}))
    with pytest.raises(RunDirError, match=f"schema_version {MANIFEST_VERSION + 1} is unknown to this handoff"):
        run.read_manifest()
