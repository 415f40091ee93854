"""`handoff import`: tau2 files of each format become a run directory whose rewards are re-evaluated
by tau2's evaluator, with mismatches and unreplayable simulations listed, unknown tasks refused, and
re-imports idempotent. The episodes are real tau2 conversations (tests.support.episodes: every tool
result is what the pinned tau2 returns); the expected rewards come from tau2's own, unaccelerated
evaluator, not from the code under test."""

from __future__ import annotations

import gzip
import json
from functools import cache
from pathlib import Path

import pytest
from tau2.evaluator.evaluator import EvaluationType
from tau2.evaluator.evaluator import evaluate_simulation as tau2_evaluate

from handoff.cli import main
from handoff.importing import import_files
from handoff.records import read_shard
from handoff.rundir import RunDir
from handoff.testing.synthetic import Behavior, write_run
from tests.support.episodes import CANCEL, Episode, authenticated_retail, task, tau2_results

SHARED = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "real-trajectories"


@cache
def simulations() -> tuple:
    """Three retail episodes, each with the reward tau2's own evaluator gives it."""
    cancel = authenticated_retail("88")
    cancel.user("Yes, go ahead.")
    cancel.call("cancel_pending_order", **CANCEL)
    transfer = Episode("retail", "10")
    transfer.user("Human please.")
    transfer.call("transfer_to_human_agents", summary="wants a human", text="Transferring you.")
    lookup = authenticated_retail("5")
    lookup.say("Found you. Anything else?")
    sims = []
    for ep in (cancel, transfer, lookup):
        sim = ep.simulation(reward=0.0)
        sim.reward_info = tau2_evaluate(simulation=sim, task=task("retail", ep.task_id), domain="retail",
                                        evaluation_type=EvaluationType.ALL, solo_mode=False)
        sims.append(sim)
    return tuple(sims)


def sim_dicts() -> list[dict]:
    return [s.model_dump(mode="json") for s in simulations()]


def results_file(path: Path, sims: list[dict], agent: str | None = "agent-x", domain: bool = True) -> Path:
    data = tau2_results("retail", [s.task_id for s in simulations()], list(simulations())).model_dump(mode="json")
    data["simulations"] = sims
    data["info"]["agent_info"]["llm"] = agent
    if not domain:
        del data["info"]["environment_info"]["domain_name"]
    return write(path, data)


def write(path: Path, data) -> Path:
    text = json.dumps(data).encode()
    path.write_bytes(gzip.compress(text, mtime=0) if path.suffix == ".gz" else text)
    return path


def cli(capsys, *argv) -> tuple[int, str, str]:
    code = main([*map(str, argv)])
    out, err = capsys.readouterr()
    return code, out, err


def records(run_dir: Path) -> list:
    return [r for shard in RunDir(run_dir).shards() for r in read_shard(shard)]


def test_each_format_gives_the_same_episodes_and_rewards(tmp_path):
    sims = sim_dicts()
    results = results_file(tmp_path / "results.json.gz", sims)
    listed = write(tmp_path / "list.json", sims)
    single = write(tmp_path / "single.json", sims[0])
    section = import_files(tmp_path / "run", [results, listed, single], domain="retail")

    assert [(f.format, f.checkpoint, f.step, f.episodes) for f in section.files] == [
        ("results", "agent-x", 0, 3), ("list", "list", 1, 3), ("simulation", "single", 2, 1)]
    assert section.episodes == 7 and not section.reward_mismatches and not section.replay_errors
    by_model = {}
    for r in records(tmp_path / "run"):
        by_model.setdefault(r.model, []).append(r)
    expected = [(s.task_id, s.reward_info.reward) for s in simulations()]
    for model, recs in by_model.items():
        assert [(r.task_id, r.simulation["reward_info"]["reward"]) for r in recs] == expected[:len(recs)], model
        assert [r.recorded_reward for r in recs] == [reward for _, reward in expected[:len(recs)]]
        assert all(r.simulation["messages"] == s["messages"] for r, s in zip(recs, sims))  # the file's, unchanged
    assert {1.0, 0.0} <= {reward for _, reward in expected}  # both outcomes are re-evaluated
    assert RunDir(tmp_path / "run").manifest.checkpoints == [
        {"name": "agent-x", "step": 0}, {"name": "list", "step": 1}, {"name": "single", "step": 2}]


def test_checkpoint_names_come_from_the_agent_made_unique_or_from_the_options(tmp_path, capsys):
    a = results_file(tmp_path / "a.json", sim_dicts())
    b = results_file(tmp_path / "b.json", sim_dicts())
    named = import_files(tmp_path / "run", [a, b])
    assert [(f.checkpoint, f.agent) for f in named.files] == [("agent-x", "agent-x"), ("agent-x-2", "agent-x")]
    given = import_files(tmp_path / "run2", [a, b], checkpoints=["base", "rl"], steps=[0, 300])
    assert [(f.checkpoint, f.step) for f in given.files] == [("base", 0), ("rl", 300)]
    code, _, err = cli(capsys, "import", a, b, "--run-dir", tmp_path / "run3", "--checkpoint", "only-one")
    assert code == 2 and "1 --checkpoint value(s) for 2 file(s)" in err


def test_domain_is_used_where_the_file_lacks_it_and_refused_where_it_contradicts(tmp_path, capsys):
    bare = results_file(tmp_path / "bare.json", sim_dicts(), domain=False)
    code, _, err = cli(capsys, "import", bare, "--run-dir", tmp_path / "r0")
    assert code == 2 and "does not name its domain" in err and "--domain" in err
    assert import_files(tmp_path / "r1", [bare], domain="retail").files[0].domain == "retail"
    named = results_file(tmp_path / "named.json", sim_dicts())
    code, _, err = cli(capsys, "import", named, "--run-dir", tmp_path / "r2", "--domain", "airline")
    assert code == 2 and "results are for domain 'retail', not 'airline'" in err
    assert not (tmp_path / "r0").exists() and not (tmp_path / "r2").exists()  # nothing written
    code, _, err = cli(capsys, "import", tmp_path, "--run-dir", tmp_path / "r3", "--domain", "retail")
    assert code == 2 and "a directory" in err  # the pinned tau2 has no file-per-simulation format


def test_a_mismatched_reward_is_listed_and_left_out_unless_kept(tmp_path):
    sims = sim_dicts()
    wrong = next(i for i, s in enumerate(simulations()) if s.reward_info.reward == 0.0)
    sims[wrong]["reward_info"]["reward"] = 1.0  # recorded 1.0; tau2 re-evaluates 0.0
    path = results_file(tmp_path / "r.json", sims)
    section = import_files(tmp_path / "run", [path])
    (m,) = section.reward_mismatches
    assert (m.file, m.task_id, m.trial, m.recorded, m.reevaluated) == (str(path), sims[wrong]["task_id"], 0, 1.0, 0.0)
    assert [r.task_id for r in records(tmp_path / "run")] == [s["task_id"] for i, s in enumerate(sims) if i != wrong]
    kept = import_files(tmp_path / "kept", [path], keep_mismatched=True)
    assert kept.keep_mismatched and kept.reward_mismatches == section.reward_mismatches
    (record,) = [r for r in records(tmp_path / "kept") if r.task_id == m.task_id]
    assert (record.recorded_reward, record.simulation["reward_info"]["reward"]) == (1.0, 0.0)
    manifest = json.loads(RunDir(tmp_path / "run").manifest_path.read_text())
    assert manifest["import"]["reward_mismatches"][0]["reevaluated"] == 0.0  # the manifest's `import` section


def test_an_unreplayable_simulation_is_listed_with_its_error_and_left_out(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("WANDB_MODE", "disabled")
    sims = sim_dicts()
    tool = next(m for m in sims[0]["messages"] if m["role"] == "tool")
    tool["content"] = '{"user_id": "someone_else"}'  # a result the pinned tau2 does not reproduce
    path = results_file(tmp_path / "r.json", sims)
    code, out, _ = cli(capsys, "import", path, "--run-dir", tmp_path / "run")
    assert code == 0 and "3 simulations, 2 agreed, 0 mismatched (left out of the metrics), 1 failed to replay" in out
    (failure,) = RunDir(tmp_path / "run").manifest.imported.replay_errors
    assert failure.task_id == sims[0]["task_id"] and failure.error.startswith("ValueError: ")
    assert "\n" not in failure.error
    assert sorted(r.task_id for r in records(tmp_path / "run")) == sorted(s["task_id"] for s in sims[1:])
    report = (tmp_path / "run" / "report" / "report.md").read_text()
    assert "## Imported tau2 files" in report and "### Replay errors" in report and failure.error[:40] in report


def test_an_unknown_task_id_is_an_error_naming_it(tmp_path, capsys):
    sims = sim_dicts()
    sims[1]["task_id"] = "9999"
    code, _, err = cli(capsys, "import", results_file(tmp_path / "r.json", sims), "--run-dir", tmp_path / "run")
    assert code == 2 and "unknown retail task '9999'" in err and "pinned tasks" in err
    assert not (tmp_path / "run").exists()


def test_reimport_changes_nothing_and_a_changed_file_is_refused(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("WANDB_MODE", "disabled")
    path = results_file(tmp_path / "r.json", sim_dicts())
    run = tmp_path / "run"
    assert cli(capsys, "import", path, "--run-dir", run)[0] == 0

    def state() -> dict:  # every file's bytes; the manifest and shards' mtimes too (left untouched)
        return {p: (p.read_bytes(), p.stat().st_mtime_ns if p.suffix in (".jsonl", ".json") and "reduced" not in p.parts
                    else None) for p in sorted(run.rglob("*")) if p.is_file()}

    before = state()
    code, out, _ = cli(capsys, "import", path, "--run-dir", run)
    assert code == 0 and "3 agreed" in out and state() == before
    sims = sim_dicts()
    sims[2]["messages"][-1]["content"] = "Something else."
    results_file(path, sims)
    code, _, err = cli(capsys, "import", path, "--run-dir", run)
    assert code == 2 and "changed since it was imported" in err and state() == before
    other = results_file(tmp_path / "other.json", sim_dicts())
    code, _, err = cli(capsys, "import", other, "--run-dir", run)
    assert code == 2 and "holds another import" in err and state() == before
    sweep = write_run(tmp_path / "sweep", {"a": (0, Behavior())}, {"retail": ["5"]})
    code, _, err = cli(capsys, "import", other, "--run-dir", sweep)
    assert code == 2 and "not an import's" in err


def test_score_reads_lists_and_reevaluates(tmp_path, capsys):
    sims = sim_dicts()
    sims[0]["reward_info"]["reward"] = 1.0 - sims[0]["reward_info"]["reward"]
    code = main(["score", str(write(tmp_path / "l.json.gz", sims)), "--domain", "retail", "--reevaluate"])
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert code == 0 and [r["task_id"] for r in rows] == [s["task_id"] for s in sims]
    assert [(r["tau2_reward"], r["reevaluated_reward"]) for r in rows] == [
        (s["reward_info"]["reward"], t.reward_info.reward) for s, t in zip(sims, simulations())]
    assert rows[0]["tau2_reward"] != rows[0]["reevaluated_reward"]


@pytest.mark.skipif(not SHARED.is_dir(), reason=f"{SHARED} (the shared real trajectories) is absent")
def test_the_shared_real_files_import_report_log_and_compare(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.delenv("WANDB_DIR", raising=False)
    airline, retail = sorted(SHARED.glob("claude*.json.gz")) + sorted(SHARED.glob("toolorchestra*.json.gz"))
    run = tmp_path / "imported"
    code, out, _ = cli(capsys, "import", airline, retail, "--run-dir", run, "--checkpoint", "sonnet",
                       "--checkpoint", "toolorchestra")
    assert code == 0
    assert "sonnet (step 0, airline): 50 simulations, 50 agreed, 0 mismatched" in out
    assert "toolorchestra (step 1, retail): 114 simulations, 19 agreed, 95 mismatched" in out
    manifest = RunDir(run).manifest
    assert len(manifest.imported.reward_mismatches) == 95 and not manifest.imported.replay_errors
    metrics = json.loads((run / "reduced" / "metrics.json").read_text())
    assert metrics["n_episodes"] == 50 + 19
    assert (run / "report" / "episodes" / "index.html").is_file()
    report = (run / "report" / "report.md").read_text()
    assert "| toolorchestra | 1 | retail | 114 | 19 | 95 | 0 |" in report
    assert "| toolorchestra | 1.0 | 0.0 | 94 | 0, 1, 2, 3, 4, 5, 7," in report
    assert "| toolorchestra | 0.0 | 1.0 | 1 | 57 |" in report
    offline = sorted(p.name for p in (run / "wandb").glob("offline-run-*"))
    assert len(offline) == 2 and any("airline" in p for p in offline) and any("retail" in p for p in offline)
    logged = json.loads((run / "wandb" / "logged.json").read_text())  # each domain's history has its checkpoint
    assert sorted(tuple(row) for rows in logged.values() for row in rows) == [("sonnet", 0), ("toolorchestra", 1)]

    kept = {r.task_id for r in records(run) if r.domain == "retail"}
    other = write_run(tmp_path / "sweep", {"ckpt": (0, Behavior())},
                      {"airline": [str(i) for i in range(10)], "retail": sorted(kept)[:10]})
    for checkpoint, domain in (("sonnet", "airline"), ("toolorchestra", "retail")):
        code = main(["compare", str(run), str(other), "--a", checkpoint, "--b", "ckpt", "--domain", domain, "--json"])
        cmp = json.loads(capsys.readouterr().out)
        assert code == 0 and cmp["result"]["n_tasks"] == 10, (checkpoint, cmp["result"]["n_tasks"])


def test_a_checkpoint_planned_in_another_domain_only_holds_no_history_back(tmp_path):
    from handoff.report.reducer import reduce_run
    from handoff.report.wandb_log import final_rows

    run = RunDir(write_run(tmp_path / "run", {"a": (0, Behavior()), "b": (1, Behavior())},
                           {"airline": ["0"], "retail": ["5"]}))
    manifest = run.manifest
    elsewhere = [s for s in manifest.shards if (s["model"], s["domain"]) in {("a", "retail"), ("b", "airline")}]
    for shard in elsewhere:  # as an import writes it: a's file is airline, b's retail
        run.shard_path(shard["id"]).unlink()
    run.write_manifest(manifest.model_copy(update={"shards": [s for s in manifest.shards if s not in elsewhere]}))
    reduction = reduce_run(run.root)
    for domain, checkpoint in (("airline", "a"), ("retail", "b")):
        rows, held_back = final_rows(RunDir(run.root), reduction, domain)
        assert ([r.checkpoint for r in rows], held_back) == ([checkpoint], [])


def test_an_import_ends_with_the_headline_then_the_paths(tmp_path, capsys):
    code, out, _ = cli(capsys, "import", results_file(tmp_path / "a.json", sim_dicts()), "--run-dir", tmp_path / "run")
    assert code == 0
    lines = out.splitlines()
    header = next(i for i, line in enumerate(lines) if line.split()[:4] == ["checkpoint", "step", "domain", "episodes"])
    assert lines[header + 1].split()[:4] == ["agent-x", "0", "retail", "3"]
    assert "against the task label" in out and "substantive" in out
    assert header < next(i for i, line in enumerate(lines) if line.startswith("  report_txt: "))
    assert "](" not in out
