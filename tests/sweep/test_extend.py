"""Extending a run (handoff.sweep.extend): checkpoints and trials are added as new shards, what was
run is never rerun or changed, anything else that changed is refused with the reason, the extension
is recorded in the manifest (a hand-edited one is refused), and a plain resume's refusal names
`extend` when extending is what would help."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from bench.scripted import model_path
from handoff.report.text import run_headline
from handoff.rundir import RunDirError, RunPaths, sha256_json
from handoff.sweep.manifest import ResumeRefused
from handoff.sweep.run import compose, prepare, run_sweep
from tests.support.runs import finished_run


def extend_cfg(run_dir: Path):
    return OmegaConf.create({"resume": str(run_dir), "extend": str(run_dir)})


def prepare_extension(run_dir: Path, *extra: str):
    prepared = prepare(extend_cfg(run_dir), [f"extend={run_dir}", *extra])
    prepared.run.unlock()
    return prepared


def test_an_extension_adds_trials_after_the_recorded_shards_and_records_itself(tmp_path):
    run_dir = finished_run(tmp_path / "run")
    before = RunPaths(run_dir).read_manifest()
    prepared = prepare_extension(run_dir, "trials=2")
    after = RunPaths(run_dir).read_manifest()
    assert after.shards[:len(before.shards)] == before.shards and len(after.shards) == 2 * len(before.shards)
    assert {s["trial"] for s in after.shards[len(before.shards):]} == {1}
    assert after.run_uuid == before.run_uuid and after.config["trials"] == 2
    [ext] = after.extensions
    assert (ext.shards_before, ext.shards_added, ext.overrides) == (len(before.shards), len(before.shards), ["trials=2"])
    assert ext.base_plan_sha256 == before.plan_sha256 and ext.plan_sha256 == after.plan_sha256
    assert [s.id for s in prepared.shards] == [s["id"] for s in after.shards]
    # extending again with nothing new changes nothing; a plain resume now takes the recorded trials=2
    prepare_extension(run_dir, "trials=2")
    assert RunPaths(run_dir).read_manifest() == after
    resumed = prepare(OmegaConf.create({"resume": str(run_dir)}), [f"resume={run_dir}"])
    resumed.run.unlock()
    assert resumed.manifest.shards == after.shards


@pytest.mark.parametrize("override, reason", [
    ("seed=7", r"seed: 0 -> 7 \(only checkpoints and trials can be added"),
    ("tasks.limit=3", r"tasks.limit: 2 -> 3 \(only checkpoints and trials"),
    ("engine.script.user=[hi]", r"engine.script.user: .* \(only checkpoints and trials"),
    ("user.model.sampling.temperature=0.5", r"user.model.sampling.temperature: 0.0 -> 0.5 \(only"),
    ("reward.task=2.0", r"reward.task: .* \(only checkpoints and trials"),
    ("model.smollm2.sampling.temperature=0.7", r"model.smollm2.sampling.temperature: 0.0 -> 0.7"),
])
def test_an_extension_refuses_what_is_not_an_addition(tmp_path, override, reason):
    run_dir = finished_run(tmp_path / "run")
    manifest = RunPaths(run_dir).manifest_path.read_bytes()
    with pytest.raises(ResumeRefused, match=f"refusing to extend(.|\n)*{reason}"):
        prepare(extend_cfg(run_dir), [f"extend={run_dir}", "trials=2", override])
    assert RunPaths(run_dir).manifest_path.read_bytes() == manifest


def test_an_adaptive_run_is_not_extended(tmp_path):
    run_dir = finished_run(tmp_path / "run", "adaptive.enabled=true", "adaptive.max_trials=2")
    with pytest.raises(ResumeRefused, match="adaptive.enabled: an adaptive run is not extended"):
        prepare(extend_cfg(run_dir), [f"extend={run_dir}", "adaptive.max_trials=3"])
    prepare_extension(run_dir)  # nothing added: a resume, allowed


def test_fewer_trials_are_refused(tmp_path):
    run_dir = finished_run(tmp_path / "run", "trials=2")
    with pytest.raises(ResumeRefused, match=r"trials: 2 -> 1 \(fewer trials drop shards\)"):
        prepare(extend_cfg(run_dir), [f"extend={run_dir}", "trials=1"])


def test_a_plain_resume_refusal_names_extend_only_for_additions(tmp_path):
    run_dir = finished_run(tmp_path / "run")
    with pytest.raises(ResumeRefused, match=f"trials: 1 -> 2(.|\n)*extend the run instead, `handoff sweep extend={run_dir}`"):
        prepare(OmegaConf.create({"resume": str(run_dir)}), [f"resume={run_dir}", "trials=2"])
    with pytest.raises(ResumeRefused) as refused:
        prepare(OmegaConf.create({"resume": str(run_dir)}), [f"resume={run_dir}", "seed=3"])
    assert "extend" not in str(refused.value)


def test_an_edited_shard_before_an_extension_is_refused(tmp_path):
    """Editing a recorded shard and recomputing the top-level plan hash still leaves the extension's."""
    run_dir = finished_run(tmp_path / "run")
    prepare_extension(run_dir, "trials=2")
    run = RunPaths(run_dir)
    data = json.loads(run.manifest_path.read_text())
    data["shards"][0]["episodes"][0]["seed"] += 1
    data["plan_sha256"] = sha256_json(data["shards"])
    run.manifest_path.write_text(json.dumps(data))
    with pytest.raises(RunDirError, match="its extension 1 no longer match its hashes"):
        run.read_manifest()


def _scripted(run_dir: Path, ckpts: Path) -> list[str]:
    return ["engine=scripted", "domain=[retail]", "tasks.per_kind=null", "tasks.limit=2", "shard_size=2",
            "workers.processes=1", "workers.threads=2", "logger.mode=disabled", "model=[checkpoints]",
            f"model.checkpoints.glob={ckpts}/global_step_*/actor", f"model.checkpoints.tokenizer={model_path()}",
            "model.checkpoints.chat_template=hermes", f"run_dir={run_dir}"]


@pytest.mark.ray
def test_extend_adds_a_checkpoint_and_a_trial_to_a_finished_run_old_shards_byte_identical(ray_cluster, tmp_path):
    ckpts, run_dir = tmp_path / "ckpts", tmp_path / "run"
    (ckpts / "global_step_10" / "actor").mkdir(parents=True)
    overrides = _scripted(run_dir, ckpts)
    _, first = run_sweep(compose(overrides), overrides, progress=False)
    assert first.shards_failed == [] and first.episodes_done == 2
    old = {p.name: p.read_bytes() for p in RunPaths(run_dir).shards()}
    (ckpts / "global_step_20" / "actor").mkdir(parents=True)  # training saved another checkpoint
    with pytest.raises(ResumeRefused, match="shard plan changed(.|\n)*extend the run instead"):
        run_sweep(OmegaConf.create({"resume": str(run_dir)}), [f"resume={run_dir}"], progress=False)
    prepared, summary = run_sweep(extend_cfg(run_dir), [f"extend={run_dir}", "trials=2"], progress=False)
    assert summary.shards_failed == [] and summary.episodes_done == summary.episodes_total == 8
    shards = RunPaths(run_dir).shards()
    assert {p.name: p.read_bytes() for p in shards if p.name in old} == old
    assert sorted(p.name for p in shards) == sorted(
        f"policy-step{step}__retail__t{trial}__0000.jsonl" for step in (10, 20) for trial in (0, 1))
    assert prepared.manifest.extensions[0].checkpoints_added == ["policy-step20"]


def test_a_skipped_checkpoint_is_left_out_of_every_number_and_named_in_the_report(tmp_path):
    """handoff follow records a checkpoint deleted before its episodes finished as skipped: its
    finished episodes stay on disk but no metric, W&B row or report number presents them as whole."""
    from handoff.report import reduce_run
    from handoff.report.render import markdown
    from handoff.report.wandb_log import final_rows
    from handoff.rundir import RunDir

    run_dir = finished_run(tmp_path / "run")
    name = RunPaths(run_dir).read_manifest().checkpoints[0]["name"]
    assert {g.model for g in reduce_run(run_dir).groups} == {name}
    prepared = prepare(extend_cfg(run_dir), [f"extend={run_dir}"], skipped={name: "deleted before it finished"})
    prepared.run.unlock()
    manifest = RunPaths(run_dir).read_manifest()
    assert manifest.skipped() == {name: "deleted before it finished"} and manifest.extensions[-1].shards_added == 0
    reduction = reduce_run(run_dir)
    assert reduction.groups == [] and reduction.n_episodes == 2  # the episodes stay, no number from them
    assert final_rows(RunDir(run_dir), reduction, "airline") == ([], [])
    assert f"{name} skipped, left out of every number: deleted before it finished" in markdown(
        RunDir(run_dir), reduction, {})


def test_the_command_line_takes_extend_as_a_word_or_a_key(tmp_path, capsys):
    from handoff.sweep.__main__ import main as sweep_main

    run_dir = finished_run(tmp_path / "run")
    assert sweep_main(["extend", str(run_dir), "seed=3"], prog="handoff sweep") == 2
    assert "handoff sweep: refusing to extend" in capsys.readouterr().err
    assert sweep_main([f"extend={run_dir}", "seed=3"]) == 2
    assert "refusing to extend" in capsys.readouterr().err
    assert sweep_main(["extend", str(run_dir)], prog="handoff sweep") == 0  # nothing to add: as a resume
    out = capsys.readouterr().out
    assert "2/2 episodes" in out
    assert out.startswith(run_headline(run_dir) + "\n\nsweep ")  # the headline table, as a sweep ends
