"""Defects found by issue 31's line-by-line review, each reproduced (no Ray): a shard of another run
is this run's for neither resume nor the reducer (1); secrets as oc.env defaults, header names and
camelCase keys are redacted or refused (2); a hand-edited manifest is refused with exit 2 (4); a
score cache with the wrong count is rescored (5); a shard of invalid records is skipped with a note
(6); workers Ray cannot place are refused before Ray (7). Defect 3 is in tests/agent/test_parity.py,
8 in tests/rules/test_rules.py."""

from __future__ import annotations

import shutil

import pytest

from handoff.errors import ConfigError
from handoff.records import read_shard, read_shard_header, write_shard
from handoff.report import reduce_run
from handoff.sweep.plan import Shard
from handoff.sweep.rundir import SweepRun
from tests.support.runs import finished_run


def _plan(run: SweepRun) -> list[Shard]:
    return [Shard.model_validate(s) for s in run.read_manifest().shards]


# -- 1: a shard copied in from another run --------------------------------------------------------------
def test_a_shard_of_another_run_is_neither_resumed_nor_reduced(tmp_path):
    ours, reseeded, twin = (SweepRun(finished_run(tmp_path / name, *extra))
                            for name, extra in (("ours", ()), ("reseeded", ("seed=1",)), ("twin", ())))
    first, second = _plan(ours)
    ours.write_done(first, {r.key: r for r in read_shard(ours.shard_path(first.id))})
    assert ours.is_done(first) and read_shard_header(ours.shard_path(first.id))["run_uuid"] == ours.run_uuid

    # resume: the same episode keys under another seed, or the same seeds written by another run
    shutil.copy(reseeded.shard_path(first.id), ours.shard_path(first.id))
    assert not ours.is_done(first) and "seeds differ from the plan" in ours.failed_path(first.id).read_text()
    twin.write_done(first, {r.key: r for r in read_shard(twin.shard_path(first.id))})
    shutil.copy(twin.shard_path(first.id), ours.shard_path(first.id))
    assert not ours.is_done(first)
    assert f"another run (run_uuid {twin.run_uuid})" in ours.failed_path(first.id).read_text()
    for record in read_shard(reseeded.shard_path(second.id)):  # a partial episode of another seed
        ours.append_partial(second.id, record)
    assert ours.read_partial(second) == {}

    # the reducer: a planned shard written by another run, and another run's checkpoint under a new id
    ours.write_done(first, {r.key: r for r in read_shard(reseeded.shard_path(first.id))})
    shutil.copy(twin.shard_path(first.id), ours.shard_path(first.id))
    other = [r.model_copy(update={"model": "elsewhere"}) for r in read_shard(reseeded.shard_path(second.id))]
    write_shard(ours.shard_path("elsewhere__airline__t0__0000"), "elsewhere__airline__t0__0000", other)
    reduction = reduce_run(ours.root)
    assert reduction.foreign_shards == sorted([first.id, "elsewhere__airline__t0__0000"])
    assert reduction.shards == [second.id] and reduction.n_episodes == len(second.episodes)
    assert [model for model, _ in reduction.checkpoints()] == [second.model]


# -- 2: secrets of other shapes ---------------------------------------------------------------------------
def test_env_defaults_header_names_and_camel_case_keys_are_redacted_or_refused(monkeypatch):
    from omegaconf import OmegaConf

    from handoff.sweep.config import REDACTED, literal_secrets, recorded_config
    from handoff.sweep.run import parse_overrides

    for var in ("HANDOFF_T31_KEY", "HANDOFF_T31_TOKEN", "HANDOFF_T31_URL"):
        monkeypatch.delenv(var, raising=False)
    headers = {"Ocp-Apim-Subscription-Key": "k-subscription", "accessToken": "t-access",
               "clientSecret": "s-client", "maxTokens": 5, "keyColumn": "task_id"}
    cfg = OmegaConf.create({"llm_args": {
        "api_key": "${oc.env:HANDOFF_T31_KEY,sk-literal-default}",  # a secret's key: its default is a secret
        "proxy": "${oc.env:HANDOFF_T31_TOKEN,tok-literal-default}",  # a secret's variable, under any key
        "base_url": "${oc.env:HANDOFF_T31_URL,http://localhost:8000/v1}",  # neither: recorded as resolved
        "extra_headers": headers},
        "copies": ["${llm_args.api_key}", "tok-literal-default"]})
    recorded = recorded_config(cfg)["llm_args"]
    assert recorded["api_key"] == f"${{oc.env:HANDOFF_T31_KEY,{REDACTED}}}"
    assert recorded["proxy"] == f"${{oc.env:HANDOFF_T31_TOKEN,{REDACTED}}}"
    assert recorded["base_url"] == "http://localhost:8000/v1"
    assert recorded["extra_headers"] == {**{k: REDACTED for k in list(headers)[:3]}, "maxTokens": 5, "keyColumn": "task_id"}
    assert recorded_config(cfg)["copies"] == [REDACTED, REDACTED]

    refused = literal_secrets(parse_overrides([
        "+a.api_key=${oc.env:HANDOFF_T31_KEY,sk-literal-default}", "+a.proxy=${oc.env:HANDOFF_T31_TOKEN,tok-x}",
        "+a.h.Ocp-Apim-Subscription-Key=k", "+a.accessToken=t", "+a.clientSecret=s",
        "+a.api_key2=${oc.env:HANDOFF_T31_KEY}", "+a.base_url=${oc.env:HANDOFF_T31_URL,http://x}", "+a.maxTokens=5"]))
    assert [r.split(":")[0] for r in refused] == ["a.api_key", "a.proxy", "a.h.Ocp-Apim-Subscription-Key",
                                                  "a.accessToken", "a.clientSecret"]


# -- 4: a manifest edited by hand ----------------------------------------------------------------------
def test_a_hand_edited_manifest_is_refused_by_resume_and_the_reducer(tmp_path, capsys):
    import json

    from omegaconf import OmegaConf

    from handoff.cli import main
    from handoff.rundir import RunPaths
    from handoff.sweep.__main__ import sweep

    run_dir = finished_run(tmp_path / "run", "trials=2")
    path, original = RunPaths(run_dir).manifest_path, RunPaths(run_dir).manifest_path.read_text()
    assert main(["reduce", str(run_dir), "--no-wandb"]) == 0
    for edit, what in ((lambda m: m["config"].update(trials=1), "config no longer matches its config_sha256"),
                       (lambda m: m["shards"].pop(), "shard plan no longer matches its plan_sha256")):
        manifest = json.loads(original)
        edit(manifest)
        path.write_text(json.dumps(manifest))
        capsys.readouterr()
        assert sweep(OmegaConf.create({"resume": str(run_dir)}), [f"resume={run_dir}"]) == 2
        assert main(["reduce", str(run_dir), "--no-wandb"]) == 2
        err = capsys.readouterr().err
        assert err.count(what) == 2 and "Traceback" not in err


# -- 5: a truncated score cache ------------------------------------------------------------------------
def test_a_score_cache_with_the_wrong_count_of_episodes_is_rescored(tmp_path):
    from handoff.rundir import RunPaths

    run_dir = finished_run(tmp_path / "run", "shard_size=2")
    full = reduce_run(run_dir)
    cache = next(RunPaths(run_dir).scores_dir.glob("*.jsonl"))
    lines = cache.read_text().splitlines(keepends=True)
    cache.write_text("".join(lines[:-1]))  # the header and one of its two episodes
    assert reduce_run(run_dir).n_episodes == full.n_episodes == 2
    assert cache.read_text() == "".join(lines)


# -- 6: a shard whose checksum is valid but whose records are not -------------------------------------
def test_a_shard_of_invalid_records_is_skipped_with_a_note(tmp_path, capsys):
    import hashlib
    import json

    from handoff.cli import main
    from handoff.rundir import RunPaths

    run_dir = finished_run(tmp_path / "run")
    bad = RunPaths(run_dir).shards()[0]
    body = b'{"model": "m", "note": "not an episode"}\n'
    header = {"shard_id": bad.stem, "n": 1, "sha256": hashlib.sha256(body).hexdigest()}
    bad.write_bytes(json.dumps(header).encode() + b"\n" + body)
    assert main(["reduce", str(run_dir), "--no-wandb"]) == 0
    assert main(["report", str(run_dir)]) == 0
    assert "Traceback" not in capsys.readouterr().err
    assert json.loads(RunPaths(run_dir).metrics.read_text())["corrupt_shards"] == [bad.stem]
    assert f"corrupt shards: {bad.stem}" in RunPaths(run_dir).report_md.read_text()


# -- 7: workers Ray cannot place -------------------------------------------------------------------------
def test_workers_that_do_not_fit_the_cluster_are_refused_before_ray(tmp_path, capsys):
    from handoff.sweep.__main__ import sweep
    from handoff.sweep.config import validate
    from handoff.sweep.driver import check_resources
    from handoff.sweep.run import compose
    from tests.support.runs import TINY

    def cfg(*extra):
        return validate(compose([*TINY, f"run_dir={tmp_path}/r", *extra]))

    check_resources(cfg("workers.processes=3"), engine_sets=1, cpus=2, gpus=0)  # 0.25 + 3 x 0.5 CPUs
    with pytest.raises(ConfigError, match=r"workers.processes: .* \+ 4 worker\(s\) .* x workers.cpus 0.5 exceed"):
        check_resources(cfg("workers.processes=4"), engine_sets=1, cpus=2, gpus=0)
    check_resources(cfg("workers.processes=null"), engine_sets=1, cpus=1, gpus=0)  # the driver starts what fits

    run_dir = tmp_path / "run"
    overrides = [*TINY, f"run_dir={run_dir}", "workers.processes=8", "cluster.num_cpus=2"]
    assert sweep(compose(overrides), overrides) == 2  # on ed7d795: Ray waits 10 min for workers, then a traceback
    err = capsys.readouterr().err
    assert "workers.processes: " in err and "Traceback" not in err
