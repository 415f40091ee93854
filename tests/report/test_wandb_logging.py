"""W&B logging, checked by reading back the offline files W&B itself wrote (the run's .wandb
transaction log, protobuf records of wandb's own schema, and the table files)."""

from __future__ import annotations

import json
import struct

import pytest
from wandb.proto import wandb_internal_pb2 as pb

from handoff.records import write_shard
from handoff.report import finish_run, reduce_run
from handoff.report.wandb_log import STEP_METRIC, log_reduction, run_id, run_values
from handoff.testing.synthetic import Behavior, episode, write_run

CHECKPOINTS = {"ckpt-100": (100, Behavior(correct_handoff=0.9)), "ckpt-200": (200, Behavior(correct_handoff=0.5))}
BLOCK, HEADER = 32768, 7  # LevelDB log format, as wandb-core writes it after its 7-byte file header


def wandb_records(path):
    """The records of a .wandb file."""
    data = path.read_bytes()
    assert data[:4] == b":W&B"
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


def offline_run(wandb_dir, rid):
    """What the latest offline W&B run with this id holds: run record, summary, history, metrics."""
    dirs = sorted((wandb_dir / "wandb").glob(f"offline-run-*-{rid}"))
    assert dirs, f"no offline run {rid}"
    out = {"run": None, "summary": {}, "history": [], "metrics": [], "dirs": dirs}
    for record in wandb_records(dirs[-1] / f"run-{rid}.wandb"):
        kind = record.WhichOneof("record_type")
        if kind == "run":
            out["run"] = record.run
        elif kind == "summary":
            for item in record.summary.update:
                out["summary"][item.key or "/".join(item.nested_key)] = json.loads(item.value_json)
        elif kind == "history":
            out["history"].append({item.key or "/".join(item.nested_key): json.loads(item.value_json)
                                   for item in record.history.item})
        elif kind == "metric":
            out["metrics"].append(record.metric)
    return out


@pytest.fixture
def run(tmp_path, tasks, monkeypatch):
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    return write_run(tmp_path / "run", CHECKPOINTS, tasks, shard_size=6)


def test_logged_values_are_the_reducers(run, tasks):
    paths = finish_run(run, report=False)
    reduction = reduce_run(run)
    assert paths["wandb"] == run / "wandb" / "wandb" and "wandb_errors" not in paths
    for g in reduction.slices():
        logged = offline_run(run / "wandb", run_id(run, g.model, g.domain))
        expected = run_values(reduction, g.model, g.domain)
        assert {k: logged["summary"][k] for k in expected} == pytest.approx(expected)
        assert logged["summary"]["handoff/precision/value"] == pytest.approx(g.metrics.handoff.precision.value)
        assert logged["summary"]["rule/no_transfer/transfer_rate_by_rule/no_transfer/k"] == \
            reduction.group(g.model, g.domain, "no_transfer").metrics.transfer_rate_by_rule["no_transfer"].k
        history = logged["history"][-1]
        assert history[STEP_METRIC] == g.step
        assert history["tau2_reward/value"] == pytest.approx(g.metrics.tau2_reward.value)
        assert {(m.name, m.glob_name, m.step_metric) for m in logged["metrics"]} >= \
            {(STEP_METRIC, "", ""), ("", "*", STEP_METRIC)}
        r = logged["run"]
        assert (r.run_group, r.job_type, r.project) == ("synthetic", "eval", "handoff")
        assert {g.model, g.domain, "synthetic"} <= set(r.tags)
        config = {u.key: json.loads(u.value_json) for u in r.config.update}
        assert config["eval"] == {"checkpoint": g.model, "step": g.step, "domain": g.domain, "run_dir": str(run)}
        assert config["model"] == json.loads((run / "manifest.json").read_text())["config"]["model"]
        table = json.loads(next(logged["dirs"][-1].glob("files/media/table/episodes_*.table.json")).read_text())
        assert len(table["data"]) == g.n_episodes == len(tasks[g.domain])
        mine = {(row[0], row[1]): row for row in table["data"]}
        for ep in reduction.episodes:
            if (ep.model, ep.score.domain) == (g.model, g.domain):
                row = mine[(ep.score.task_id, ep.trial)]
                assert row[2:6] == [ep.score.label.rule, ep.score.label.should_transfer, ep.score.transferred,
                                    pytest.approx(ep.score.reward)]


def test_resumed_sweep_updates_the_same_runs(run, tasks):
    first = log_reduction(run, reduce_run(run))
    behavior = CHECKPOINTS["ckpt-100"][1]
    extra = [episode("ckpt-100", 100, "retail", t, 1, behavior) for t in tasks["retail"]]
    write_shard(run / "shards" / "resumed.jsonl", "resumed", extra)
    reduction = reduce_run(run)
    second = log_reduction(run, reduction)
    assert second.run_ids == first.run_ids and not second.errors
    rid = run_id(run, "ckpt-100", "retail")
    logged = offline_run(run / "wandb", rid)
    assert len(logged["dirs"]) == 2 and logged["run"].run_id == rid
    assert logged["summary"]["n_episodes"] == 2 * len(tasks["retail"])
    assert logged["summary"] == {**logged["summary"], **run_values(reduction, "ckpt-100", "retail")}


def test_unreachable_server_loses_nothing(run, monkeypatch, capsys):
    monkeypatch.setenv("WANDB_API_KEY", "x" * 40)
    monkeypatch.setenv("WANDB_BASE_URL", "http://127.0.0.1:9")  # nothing listens there
    paths = finish_run(run, {"logger": {"mode": "online", "init_timeout_s": 5}}, report=False)
    assert (run / "reduced" / "metrics.json").is_file()
    errors = paths["wandb_errors"].read_text().splitlines()
    assert len(errors) == 1 and "(online)" in errors[0]  # the rest went straight to offline files
    assert "W&B logging failed" in capsys.readouterr().err
    reduction = reduce_run(run)
    for g in reduction.slices():
        logged = offline_run(run / "wandb", run_id(run, g.model, g.domain))
        assert logged["summary"]["handoff/accuracy/value"] == pytest.approx(g.metrics.handoff.accuracy.value)


def test_run_ids_are_deterministic_and_distinct(tmp_path):
    a = run_id(tmp_path / "runs" / "sweep-1", "ckpt", "airline")
    assert a == run_id(tmp_path / "runs" / "sweep-1", "ckpt", "airline")
    assert len({a, run_id(tmp_path / "runs" / "sweep-2", "ckpt", "airline"),
                run_id(tmp_path / "runs" / "sweep-1", "ckpt", "retail")}) == 3
    assert len(a) <= 64 and all(c.isalnum() or c in "-_" for c in a)
