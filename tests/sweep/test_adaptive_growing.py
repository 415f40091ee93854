"""Adaptive rounds over a set that grows (adaptive.growing; docs/sweep.md, "A set that grows"):
each checkpoint's own trials (handoff.report.adaptive.next_trials), alpha spent in arrival order,
the state in the manifest's rounds so that a restarted follow continues it; an extension of a
growing adaptive run accepted, of a fixed one refused; and, on Ray, `handoff follow` with
adaptive.enabled (a clearly better checkpoint arriving later becomes the best, a clearly worse one
stops early, a restart decides again what it decided) and `handoff sweep extend` of a growing
adaptive run (a clearly worse arrival stops early)."""

from __future__ import annotations

import itertools
import threading
from pathlib import Path

import pytest

from bench.scripted import model_path
from handoff.report.adaptive import Round, growing_finished, next_trials, recorded_rounds
from handoff.rules.sequential import Verdict


def _round(number: int, trials_by: dict[str, int], statuses: dict[str, str]) -> Round:
    verdicts = {n: Verdict(status=s, mean=0.5, round=number, episodes=trials_by[n]) for n, s in statuses.items()}
    return Round(round=number, trials=max(trials_by.values()), trials_by=trials_by, verdicts=verdicts)


def test_the_first_step_gives_every_checkpoint_a_round():
    assert next_trials([], ["a", "b"], 2, 8) == {"a": 2, "b": 2}
    assert not growing_finished([], ["a"], 1, 8) and growing_finished([], [], 1, 8)


def test_the_checkpoint_behind_in_a_pair_catches_up_and_equal_ones_advance_together():
    names = ["a", "b", "c", "new"]
    last = _round(3, {"a": 2, "b": 2, "c": 1}, {"a": "best", "b": "undecided", "c": "worse"})
    # b and the best a at 2: both to 3; the new one (0 trials) to 1; c (worse) never again
    assert next_trials([last], names, 1, 8) == {"a": 3, "b": 3, "c": 1, "new": 1}
    behind = _round(4, {"a": 1, "b": 4, "c": 1, "new": 0}, {"a": "best", "b": "undecided", "c": "tied"})
    assert next_trials([behind], names, 1, 8) == {"a": 2, "b": 4, "c": 1, "new": 1}  # the best catches up with b
    assert next_trials([behind], names, 3, 3) == {"a": 3, "b": 4, "c": 1, "new": 3}  # capped at max_trials


def test_the_best_gets_max_trials_once_no_pair_can_advance_and_a_later_one_arrived_or_the_run_stops():
    names = ["a", "b", "c"]
    decided = _round(2, {"a": 2, "b": 2, "c": 1}, {"a": "best", "b": "tied", "c": "worse"})
    assert next_trials([decided], names, 1, 8) == {"a": 8, "b": 2, "c": 1}
    assert not growing_finished([decided], names, 1, 8)
    topped = _round(3, {"a": 8, "b": 2, "c": 1}, {"a": "best", "b": "tied", "c": "worse"})
    assert growing_finished([topped], names, 1, 8)
    spent = _round(9, {"a": 8, "b": 8, "c": 1}, {"a": "best", "b": "undecided", "c": "worse"})
    assert growing_finished([spent], names, 1, 8)  # b undecided with the whole budget: nothing left to run
    assert not growing_finished([spent], [*names, "d"], 1, 8)  # until a checkpoint arrives
    assert next_trials([spent], [*names, "d"], 1, 8) == {"a": 8, "b": 8, "c": 1, "d": 1}
    latest = _round(4, {"a": 3, "b": 2, "c": 1}, {"a": "worse", "b": "tied", "c": "best"})
    assert next_trials([latest], names, 1, 8, settle=False) == {"a": 3, "b": 2, "c": 1}  # waits for the next
    assert growing_finished([latest], names, 1, 8, settle=False) and not growing_finished([latest], names, 1, 8)
    assert next_trials([latest], names, 1, 8) == {"a": 3, "b": 2, "c": 8}  # the run stops growing
    assert next_trials([latest], [*names, "d"], 1, 8, settle=False) == {"a": 3, "b": 2, "c": 1, "d": 1}
    no_best = _round(3, {"a": 8, "b": 8, "c": 1}, {"a": "best", "b": "undecided", "c": "worse"})
    assert not growing_finished([no_best], ["b", "c"], 1, 8)  # the best was skipped: decide again


def test_a_fixed_design_of_equal_checkpoints_advances_like_the_fixed_rounds():
    """All checkpoints from the start, none decided: round r gives every one r x round_trials trials."""
    names, rounds = ["a", "b", "c"], []
    for number in range(1, 4):
        trials = next_trials(rounds, names, 2, 8)
        assert trials == {n: 2 * number for n in names}
        rounds.append(_round(number, trials, {"a": "best", "b": "undecided", "c": "undecided"}))


def test_extending_a_growing_adaptive_run_is_accepted_and_a_fixed_one_refused(tmp_path):
    from omegaconf import OmegaConf

    from handoff.sweep.manifest import ResumeRefused
    from handoff.sweep.run import prepare
    from tests.support.runs import finished_run

    def extend(run_dir, *extra):
        prepared = prepare(OmegaConf.create({"resume": str(run_dir), "extend": str(run_dir)}),
                           [f"extend={run_dir}", *extra])
        prepared.run.unlock()
        return prepared

    fixed = finished_run(tmp_path / "fixed", "adaptive.enabled=true", "adaptive.max_trials=2")
    with pytest.raises(ResumeRefused, match="adaptive.growing=true"):
        extend(fixed, "model=[tiny_hermes,smollm2]")
    growing = finished_run(tmp_path / "growing", "adaptive.enabled=true", "adaptive.max_trials=2",
                           "adaptive.growing=true")
    prepared = extend(growing, "model=[tiny_hermes,smollm2]")
    [extension] = prepared.manifest.extensions
    assert extension.checkpoints_added and extension.shards_added > 0


def _scripted(accuracy: str) -> list[str]:
    return ["engine=scripted", "domain=[retail]", "tasks.per_kind=null", "tasks.limit=8", "shard_size=4",
            "workers.processes=1", "workers.threads=4", "logger.mode=offline", "cluster.num_cpus=2",
            f"model.checkpoints.tokenizer={model_path()}", "model.checkpoints.chat_template=hermes",
            f"+engine.script.accuracy={accuracy}", "adaptive.enabled=true", "adaptive.margin=0",
            "adaptive.max_trials=4"]


def _advance_marker(ckpts: Path, run_dir: Path, steps: list[int], halt: threading.Event) -> None:
    """The trainer: verl's marker moves to the next step once the run's rounds for the one before
    are finished (one follow batch per checkpoint, whatever the timing)."""
    from handoff.report.adaptive import growing_names
    from handoff.rundir import RunPaths
    from handoff.testing.trainer import MARKER

    for before, step in itertools.pairwise(steps):
        while not halt.is_set():
            try:
                manifest = RunPaths(run_dir).read_manifest()
                rounds, names = recorded_rounds(manifest), growing_names(manifest)
            except (OSError, ValueError):  # not written yet
                rounds, names = [], []
            if f"policy-step{before}" in names and growing_finished(rounds, names, 1, 4, settle=False):
                break
            halt.wait(0.3)
        (ckpts / f".{MARKER}.tmp").write_text(str(step))
        (ckpts / f".{MARKER}.tmp").rename(ckpts / MARKER)


def _follow(ckpts: Path, run_dir: Path, steps: list[int], accuracy: str):
    """follow until the last of `steps`, the trainer moving verl's marker along `steps`."""
    from handoff.sweep.follow import Stop, follow

    halt = threading.Event()
    trainer = threading.Thread(target=_advance_marker, args=(ckpts, run_dir, steps, halt), daemon=True)
    trainer.start()
    try:
        return follow(str(ckpts), run_dir, _scripted(accuracy), Stop(until_step=steps[-1]), poll_s=0.3)
    finally:
        halt.set()
        trainer.join(timeout=30)


@pytest.mark.ray
def test_follow_with_adaptive_rounds_finds_a_better_arrival_and_stops_a_worse_one_early(ray_cluster, tmp_path,
                                                                                       monkeypatch):
    """Three checkpoints arrive one by one (known answers: accuracy 0.5, then 1.0, then 0.0; 8
    tasks, up to 4 trials, margin 0): the first is the best alone (a round, waiting for the next);
    the second, far better, becomes the best, the first is decided worse against it after 3 trials;
    the third, far worse, is decided worse after 2 of its 4 trials, and the best then gets its 4.
    Follow stops after the second checkpoint (its stop gives the latest best its 4 trials) and the
    last decision and that step are taken out of the manifest (a follow killed after the decision's
    shards, before it was written): started again, follow decides it again from the shards on disk,
    the same decision at the same share, rerunning nothing. W&B holds a row per checkpoint at its
    step."""
    from handoff.report.adaptive import adaptive_result, scheduled_trials
    from handoff.report.wandb_log import STEP_METRIC, run_id
    from handoff.rundir import RunDir, RunPaths
    from handoff.testing.trainer import write_checkpoint
    from handoff.testing.wandb_offline import history, offline_runs

    for name in ("CONFIG", "CACHE", "DATA"):
        monkeypatch.setenv(f"WANDB_{name}_DIR", str(tmp_path / "wandb-home" / name.lower()))
    ckpts, run_dir = tmp_path / "ckpts", tmp_path / "run"
    for step in (30, 20, 10):  # on disk from the start; the marker says which are complete
        write_checkpoint(ckpts, step)
    accuracy = "{policy-step10: 0.5, policy-step20: 1.0, policy-step30: 0.0}"
    first = _follow(ckpts, run_dir, [10, 20], accuracy)
    assert first.evaluated == ["policy-step10", "policy-step20"] and first.batches == 2
    run = RunPaths(run_dir)
    manifest = run.read_manifest()
    decided = recorded_rounds(manifest)
    run.write_manifest(manifest.model_copy(update={"adaptive": manifest.adaptive[:-2]}))
    shards = {p.name: p.stat().st_mtime_ns for p in run.shards()}

    again = _follow(ckpts, run_dir, [20, 30], accuracy)
    assert again.evaluated == ["policy-step10", "policy-step20", "policy-step30"] and again.batches == 2
    manifest = run.read_manifest()
    assert manifest.config["adaptive"]["growing"] is True
    rounds = recorded_rounds(manifest)
    assert rounds[:len(decided) - 1] == decided[:-1]  # decided again, identically (the stop's step: at the end)
    assert {p.name: p.stat().st_mtime_ns for p in run.shards() if p.name in shards} == shards  # nothing rerun
    final = rounds[-1].verdicts
    assert {n: v.status for n, v in final.items()} == {
        "policy-step10": "worse", "policy-step20": "best", "policy-step30": "worse"}
    assert final["policy-step10"].against == final["policy-step30"].against == "policy-step20"
    assert decided[-1].trials_by == {"policy-step10": 3, "policy-step20": 4}  # the first stop's step
    assert rounds[-1].trials_by == {"policy-step10": 3, "policy-step20": 4, "policy-step30": 2}
    assert scheduled_trials(RunDir(run_dir))["policy-step30"] == 2
    assert sorted(p.name.split("__")[2] for p in run.shards() if p.name.startswith("policy-step30")) == [
        "t0", "t0", "t1", "t1"]  # 2 of its 4 trials
    result = adaptive_result(RunDir(run_dir))
    assert result.finished and result.growing and result.tie_set == ["policy-step20"]
    assert (result.episodes, result.fixed_episodes) == (72, 96)
    report = (run.report / "report.md").read_text()
    assert "**policy-step20**" in report and "The set grows (adaptive.growing)" in report
    rows = history(offline_runs(run.wandb, run_id(RunDir(run_dir), "retail")))
    assert [r[STEP_METRIC] for r in rows] == [10, 20, 30]


@pytest.mark.ray
def test_handoff_sweep_extend_of_a_growing_adaptive_run_stops_a_worse_arrival_early(ray_cluster, tmp_path):
    """`handoff sweep extend RUN model=[tiny_hermes,smollm2]` of a finished growing adaptive run (one
    checkpoint, topped up to its 4 trials). The scripted agent's hand-off accuracy on these 8 tasks
    is 0.875 with tiny-hermes and 0.125 with smollm2 (the default script, as measured here): the
    arrival is decided worse after 2 of its 4 trials, at the first other's share; the recorded
    shards stay byte for byte, none rerun."""
    from handoff.rundir import RunPaths
    from handoff.sweep.__main__ import main

    run_dir = tmp_path / "run"
    overrides = ["engine=scripted", "model=[tiny_hermes]", "domain=[retail]", "tasks.per_kind=null",
                 "tasks.limit=8", "shard_size=4", "workers.processes=1", "workers.threads=4", "logger.mode=disabled",
                 "adaptive.enabled=true", "adaptive.growing=true", "adaptive.max_trials=4", f"run_dir={run_dir}"]
    assert main(overrides) == 0
    run = RunPaths(run_dir)
    first = recorded_rounds(run.read_manifest())
    assert first[-1].trials_by == {"tiny-hermes": 4} and first[-1].verdicts["tiny-hermes"].status == "best"
    before = {p.name: p.read_bytes() for p in run.shards()}
    assert main(["extend", str(run_dir), "model=[tiny_hermes,smollm2]"]) == 0
    manifest = run.read_manifest()
    rounds = recorded_rounds(manifest)
    assert rounds[:len(first)] == first and manifest.extensions[-1].checkpoints_added == ["smollm2-135m-instruct"]
    verdict = rounds[-1].verdicts["smollm2-135m-instruct"]
    assert (verdict.status, verdict.against, verdict.mean) == ("worse", "tiny-hermes", 0.125)
    assert rounds[-1].trials_by == {"tiny-hermes": 4, "smollm2-135m-instruct": 2}
    assert {p.name: p.read_bytes() for p in run.shards() if p.name in before} == before
    assert sorted(p.name.split("__")[2] for p in run.shards() if p.name.startswith("smollm2")) == [
        "t0", "t0", "t1", "t1"]
