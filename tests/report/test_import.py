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
from handoff.rundir import RunDir, RunPaths
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


def results_data(sims: list[dict], agent: str | None = "agent-x") -> dict:
    """A tau2 results file's JSON holding `sims`, the pinned tasks embedded as `tau2 run` does."""
    data = tau2_results("retail", [s.task_id for s in simulations()], list(simulations())).model_dump(mode="json")
    data["simulations"] = sims
    data["info"]["agent_info"]["llm"] = agent
    return data


def results_file(path: Path, sims: list[dict], agent: str | None = "agent-x", domain: bool = True) -> Path:
    data = results_data(sims, agent)
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
        ("results", "results", 0, 3), ("list", "list", 0, 3), ("simulation", "single", 0, 1)]
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
        {"name": "results", "step": 0}, {"name": "list", "step": 0}, {"name": "single", "step": 0}]


def test_checkpoint_names_tell_submissions_apart_and_no_step_is_made_up(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("WANDB_MODE", "disabled")
    (tmp_path / "other").mkdir()
    a = results_file(tmp_path / "a.json", sim_dicts())  # two submissions of one agent model (agent-x)
    b = results_file(tmp_path / "b.json.gz", sim_dicts())
    again = results_file(tmp_path / "other" / "a.json", sim_dicts())
    dotted = results_file(tmp_path / "gpt-4.1-sft_airline.json.gz", sim_dicts())
    code, _, _ = cli(capsys, "import", a, b, again, dotted, "--run-dir", tmp_path / "run")
    named = RunDir(tmp_path / "run").manifest.imported
    assert code == 0 and [(f.checkpoint, f.agent, f.step) for f in named.files] == [
        ("a", "agent-x", 0), ("b", "agent-x", 0), ("a-2", "agent-x", 0), ("gpt-4.1-sft_airline", "agent-x", 0)]
    assert not named.curve  # a set of files: no learning curve drawn
    report = (tmp_path / "run" / "report" / "report.md").read_text()
    assert "not steps of one training run" in report and "precision_recall.png" not in report
    given = import_files(tmp_path / "run2", [a, b], checkpoints=["base", "rl"], steps=[0, 300])
    assert [(f.checkpoint, f.step) for f in given.files] == [("base", 0), ("rl", 300)] and given.curve
    code, _, err = cli(capsys, "import", a, b, "--run-dir", tmp_path / "run3", "--checkpoint", "only-one")
    assert code == 2 and "1 --checkpoint value(s) for 2 file(s)" in err


def test_imported_files_without_steps_are_a_set_in_wandb_and_with_steps_a_curve(tmp_path, capsys, monkeypatch):
    from handoff.report import reduce_run
    from handoff.report.wandb_log import STEP_METRIC, metric_values, run_id
    from handoff.testing.wandb_offline import history, offline_runs

    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.delenv("WANDB_DIR", raising=False)
    for name in ("CONFIG", "CACHE", "DATA"):
        monkeypatch.setenv(f"WANDB_{name}_DIR", str(tmp_path / "wandb-home" / name.lower()))
    a, b = results_file(tmp_path / "a.json", sim_dicts()), results_file(tmp_path / "b.json", sim_dicts()[:2])
    for run, steps in (("set", ()), ("curve", ("--step", 0, "--step", 300))):
        assert cli(capsys, "import", a, b, "--run-dir", tmp_path / run, *steps)[0] == 0
    logged = {}
    for run in ("set", "curve"):
        (logged[run],) = offline_runs(RunPaths(tmp_path / run).wandb, run_id(RunDir(tmp_path / run), "retail"))
    reduction = reduce_run(tmp_path / "set")
    values = {c: metric_values(reduction.group(c, "retail").metrics) for c in ("a", "b")}
    assert values["a"] != values["b"]  # 3 and 2 episodes

    # a set: no series over a step, each checkpoint's episodes, and the set as a table and a summary
    rows = logged["set"]["history"]
    assert [r["checkpoint"] for r in rows] == ["a", "b"] and all(r["episodes/_type"] == "table-file" for r in rows)
    assert not any(STEP_METRIC in r or "tau2_reward" in r for r in rows)
    assert not any(m.step_metric for m in logged["set"]["metrics"])
    (path,) = logged["set"]["dir"].glob("files/media/table/checkpoints_*.table.json")
    table = json.loads(path.read_text())
    assert table["columns"][:3] == ["checkpoint", "step", "domain"] and STEP_METRIC not in table["columns"]
    assert [row[:3] for row in table["data"]] == [["a", 0, "retail"], ["b", 0, "retail"]]
    for row in table["data"]:
        by_column, summary = dict(zip(table["columns"], row)), logged["set"]["summary"][f"by_checkpoint/{row[0]}"]
        assert {k: by_column[k] for k in values[row[0]]} == pytest.approx(values[row[0]])
        assert {k: summary[k] for k in values[row[0]]} == pytest.approx(values[row[0]])
    # --step: one learning curve, as a sweep's
    rows = history([logged["curve"]])
    assert [(r["checkpoint/step"], r["tau2_reward"]) for r in rows] == [
        (0, values["a"]["tau2_reward"]), (300, values["b"]["tau2_reward"])]
    assert {m.step_metric for m in logged["curve"]["metrics"]} == {"", STEP_METRIC}
    assert not list(logged["curve"]["dir"].glob("files/media/table/checkpoints_*"))
    assert not any(k.startswith("by_checkpoint") for k in logged["curve"]["summary"])
    # `handoff compare` says where each side is in W&B: a row of the set, or a step of the curve
    for run, where in (("set", "at row 'b' of its `checkpoints` table and `by_checkpoint/b` (a set, no step)"),
                       ("curve", "at checkpoint/step = 300 (b)")):
        code, out, _ = cli(capsys, "compare", tmp_path / run, tmp_path / run, "--a", "a", "--b", "b")
        assert code == 0 and f"runs/{run_id(RunDir(tmp_path / run), 'retail')} {where}" in out, out


def test_domain_is_used_where_the_file_lacks_it_and_refused_where_it_contradicts(tmp_path, capsys):
    bare = results_file(tmp_path / "bare.json", sim_dicts(), domain=False)
    assert import_files(tmp_path / "r1", [bare], domain="retail").files[0].domain == "retail"
    # a bare list: its tools (find_user_id_by_email, cancel_pending_order...) and task ids are retail's alone
    listed = write(tmp_path / "list.json", sim_dicts())
    assert import_files(tmp_path / "r4", [listed]).files[0].domain == "retail"
    code, _, err = cli(capsys, "import", listed, "--run-dir", tmp_path / "r0", "--domain", "airline")
    assert code == 2 and "its tasks and tools are the retail domain's, not 'airline'" in err
    # one that calls only a tool both domains have tells nothing: --domain is asked for
    transfer_only = [s for s in sim_dicts() if {c["name"] for m in s["messages"] for c in m.get("tool_calls") or []}
                     == {"transfer_to_human_agents"}]
    assert len(transfer_only) == 1
    for s in transfer_only:
        s["reward_info"]["action_checks"] = None
    code, _, err = cli(capsys, "import", write(tmp_path / "t.json", transfer_only), "--run-dir", tmp_path / "r5")
    assert code == 2 and "do not tell one; pass --domain" in err and not (tmp_path / "r5").exists()
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
    at, tool = next((i, m) for i, m in enumerate(sims[0]["messages"]) if m["role"] == "tool")
    tool["content"] = '{"user_id": "someone_else"}'  # a result the pinned tau2 does not reproduce
    path = results_file(tmp_path / "r.json", sims)
    code, out, _ = cli(capsys, "import", path, "--run-dir", tmp_path / "run")
    assert code == 0 and "3 simulations, 2 agreed, 0 mismatched (left out of the metrics), 1 failed to replay" in out
    (failure,) = RunDir(tmp_path / "run").manifest.imported.replay_errors
    assert failure.task_id == sims[0]["task_id"] and failure.error.startswith("ValueError: Tool call:")
    # the whole error: the call, what the pinned tau2 returned and what the file holds; where it diverged
    assert "Returned:" in failure.error and "Expected:" in failure.error and "someone_else" in failure.error
    assert failure.message_index == at
    assert sorted(r.task_id for r in records(tmp_path / "run")) == sorted(s["task_id"] for s in sims[1:])
    report = (tmp_path / "run" / "report" / "report.md").read_text()
    assert "## Imported tau2 files" in report and "### Replay errors" in report
    assert failure.error in report and f"| {at} | `ValueError: Tool call:" in report
    code = main(["score", str(path), "--reevaluate"])
    row = json.loads(capsys.readouterr().out.splitlines()[0])
    assert (row["replay_error"], row["replay_diverged_at"]) == (failure.error, at)


def test_an_unknown_task_id_is_recovered_from_the_checks_and_the_user_with_its_evidence(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("WANDB_MODE", "disabled")
    sims = sim_dicts()
    true_id = sims[0]["task_id"]
    sims[0]["task_id"] = "9999"
    code, out, _ = cli(capsys, "import", results_file(tmp_path / "r.json", sims), "--run-dir", tmp_path / "run")
    assert code == 0 and "1 task ids recovered, 0 without a task" in out
    (attribution,) = RunDir(tmp_path / "run").manifest.imported.attributions
    assert (attribution.index, attribution.given, attribution.task_id, attribution.status) == (0, "9999", true_id,
                                                                                               "recovered")
    assert f"are task {true_id}'s" in attribution.evidence and "the user gave" in attribution.evidence
    assert sorted(r.task_id for r in records(tmp_path / "run")) == sorted(s.task_id for s in simulations())
    assert "### Task ids recovered or left out" in (tmp_path / "run" / "report" / "report.md").read_text()


def test_task_ids_removed_import_to_the_same_tasks_and_rewards(tmp_path):
    with_ids = results_file(tmp_path / "ids.json", sim_dicts())
    without = results_file(tmp_path / "none.json", [{k: v for k, v in s.items() if k != "task_id"} for s in sim_dicts()])
    given = import_files(tmp_path / "a", [with_ids])
    recovered = import_files(tmp_path / "b", [without])
    assert not given.attributions and [a.status for a in recovered.attributions] == ["recovered"] * 3
    assert all(a.evidence.startswith("no id; recorded checks") for a in recovered.attributions)

    def tasks(run: str) -> list:
        return [(r.task_id, r.trial, r.simulation["reward_info"]["reward"]) for r in records(tmp_path / run)]

    assert tasks("a") == tasks("b") == [(s.task_id, 0, s.reward_info.reward) for s in simulations()]


def test_a_simulation_no_task_explains_is_left_out_and_listed_not_guessed(tmp_path):
    sims = sim_dicts()
    sims[1]["task_id"] = None
    sims[1]["reward_info"]["action_checks"] = [{"action": {"action_id": "x", "name": "cancel_pending_order",
                                                            "arguments": {"order_id": "#W0000000"}},
                                                 "action_match": False, "action_reward": 0.0}]
    section = import_files(tmp_path / "run", [results_file(tmp_path / "r.json", sims)])
    (left_out,) = section.attributions
    assert (left_out.index, left_out.task_id, left_out.status) == (1, None, "unmatched")
    assert "no pinned task recorded these checks" in left_out.evidence
    assert [r.task_id for r in records(tmp_path / "run")] == [sims[0]["task_id"], sims[2]["task_id"]]


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
    code, out, err = cli(capsys, "import", airline, retail, "--run-dir", run, "--checkpoint", "sonnet",
                       "--checkpoint", "toolorchestra")
    assert code == 0
    assert "sonnet (step 0, airline): 50 simulations, 50 agreed, 0 mismatched" in out
    # the retail file's ids were renumbered: recovered from the checks, their action ids and the user;
    # the four pairs of twin tasks (same checks, same identifiers) by the action ids tau2 recorded
    assert ("toolorchestra (step 0, retail): 114 simulations, 114 agreed, 0 mismatched (left out of the metrics), "
            "0 failed to replay (left out), 113 task ids recovered, 0 without a task (left out)") in out
    manifest = RunDir(run).manifest
    assert not manifest.imported.reward_mismatches and not manifest.imported.replay_errors
    attributed = {a.index: a for a in manifest.imported.attributions}
    assert all(a.evidence and a.task_id for a in attributed.values())
    assert {i: attributed[i].task_id for i in (11, 28, 34, 35, 36, 49, 79, 112)} == {
        11: "97", 28: "41", 34: "96", 35: "72", 36: "84", 49: "42", 79: "71", 112: "83"}
    assert "but their recorded action ids (83_0) are task 83's alone" in attributed[112].evidence
    assert attributed[0].task_id == "89"  # filed as "0"
    metrics = json.loads((run / "reduced" / "metrics.json").read_text())
    assert metrics["n_episodes"] == 50 + 114
    assert (run / "report" / "episodes" / "index.html").is_file()
    report = (run / "report" / "report.md").read_text()
    assert "| toolorchestra | gpt-4.1-mini-2025-04-14 | 0 | retail | 114 | 114 | 0 | 0 | 0 |" in report
    assert "**Warning: toolorchestra" not in report and "WARNING: toolorchestra" not in err
    offline = sorted(p.name for p in (run / "wandb").glob("offline-run-*"))
    assert len(offline) == 2 and any("airline" in p for p in offline) and any("retail" in p for p in offline)
    logged = json.loads((run / "wandb" / "logged.json").read_text())  # each domain's history has its checkpoint
    assert sorted(tuple(row) for rows in logged.values() for row in rows) == [("sonnet", 0), ("toolorchestra", 0)]

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


def test_checkpoint_names_whose_shard_ids_collide_are_refused_naming_both(tmp_path, capsys):
    """`sft/step-100` and `sft:step-100` both map to the shard id `sft-step-100__retail`: written into
    one shard, one file's episodes would vanish. Refused before anything is written."""
    a = results_file(tmp_path / "a.json", sim_dicts())
    b = results_file(tmp_path / "b.json", sim_dicts())
    code, _, err = cli(capsys, "import", a, b, "--run-dir", tmp_path / "run",
                       "--checkpoint", "sft/step-100", "--checkpoint", "sft:step-100")
    assert code == 2 and "'sft/step-100'" in err and "'sft:step-100'" in err and "--checkpoint" in err
    assert not (tmp_path / "run").exists()
    distinct = import_files(tmp_path / "ok", [a, b], checkpoints=["sft/step-100", "sft-step-200"])
    assert len(distinct.files) == 2 and len(records(tmp_path / "ok")) == 6  # both files' episodes kept


def test_a_file_losing_more_than_a_small_share_is_warned_about_loudly_and_in_the_report(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("WANDB_MODE", "disabled")
    clean = results_file(tmp_path / "clean.json", sim_dicts())
    code, _, err = cli(capsys, "import", clean, "--run-dir", tmp_path / "clean")
    assert code == 0 and "WARNING" not in err  # nothing left out: no warning, no note
    clean_report = (tmp_path / "clean" / "report" / "report.md").read_text()
    assert " of 3, " not in clean_report.split("## Headline metrics")[1].split("\n## ")[0]
    sims = sim_dicts()
    wrong = next(i for i, s in enumerate(simulations()) if s.reward_info.reward == 0.0)
    sims[wrong]["reward_info"]["reward"] = 1.0  # recorded 1.0, re-evaluated 0.0: left out
    code, _, err = cli(capsys, "import", results_file(tmp_path / "r.json", sims), "--run-dir", tmp_path / "run")
    assert code == 0
    assert ("WARNING: r (retail): 2 of 3 simulations in the metrics, 1 left out (1 reward mismatch); "
            "likely cause: rewards the pinned tasks grade otherwise") in err
    (entry,) = RunDir(tmp_path / "run").manifest.imported.files
    assert (entry.kept, entry.left_out, entry.recorded_mean, entry.kept_mean) == (2, {"reward mismatch": 1}, 1.0, 1.0)
    assert "mean reward" not in err  # the kept ones' mean is the file's own: nothing to say
    report = (tmp_path / "run" / "report" / "report.md").read_text()
    assert "**Warning: r (retail): 2 of 3 simulations in the metrics" in report
    headline = report.split("## Headline metrics")[1].split("\n## ")[0]
    assert headline.count(" of 3, 1 left out") == 1  # the retail row (a one-domain run has no `all` row)

    sims = sim_dicts()
    right = next(i for i, s in enumerate(simulations()) if s.reward_info.reward == 1.0)
    sims[right]["reward_info"]["reward"] = 0.0  # a success recorded as a failure: left out, the kept mean rises
    code, _, err = cli(capsys, "import", results_file(tmp_path / "s.json", sims), "--run-dir", tmp_path / "skew")
    (entry,) = RunDir(tmp_path / "skew").manifest.imported.files
    assert (entry.recorded_mean, entry.kept_mean) == (pytest.approx(1 / 3, abs=1e-6), 0.5)
    assert ("the file's own mean reward is 0.333 over its 3 simulations, the 2 kept re-evaluate to 0.500: its "
            "metrics do not describe the whole file") in err


def test_a_task_whose_embedded_scenario_was_edited_is_named_drifted_and_left_out(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("WANDB_MODE", "disabled")
    data = results_data(sim_dicts())
    edited = data["tasks"][1]
    edited["user_scenario"]["instructions"]["reason_for_call"] += " You also want a refund."
    path = write(tmp_path / "r.json", data)
    code, out, err = cli(capsys, "import", path, "--run-dir", tmp_path / "run")
    assert code == 0 and "1 of drifted tasks (left out)" in out
    assert (f"1 task(s) differ from the pinned ones (left out of the metrics; --keep-drifted keeps them): "
            f"{edited['id']} (scenario)") in err
    (entry,) = RunDir(tmp_path / "run").manifest.imported.files
    assert (entry.drift.tasks, entry.drift.kept, entry.left_out) == ({edited["id"]: ["scenario"]}, False,
                                                                    {"drifted": 1})
    assert edited["id"] not in {r.task_id for r in records(tmp_path / "run")}
    assert "(scenario)" in (tmp_path / "run" / "report" / "report.md").read_text()
    kept = import_files(tmp_path / "kept", [path], keep_drifted=True)
    assert kept.files[0].drift.kept and not kept.files[0].left_out
    assert edited["id"] in {r.task_id for r in records(tmp_path / "kept")}
    # the pinned tasks as they are: no drift named, nothing left out
    clean = import_files(tmp_path / "clean", [write(tmp_path / "c.json", results_data(sim_dicts()))])
    assert not clean.files[0].drift.tasks and not clean.files[0].left_out


def test_drifted_episodes_kept_are_marked_on_their_pages_and_in_the_episode_index(tmp_path, capsys, monkeypatch):
    from tests.support import browser

    monkeypatch.setenv("WANDB_MODE", "disabled")
    data = results_data(sim_dicts())
    edited = data["tasks"][1]
    edited["user_scenario"]["instructions"]["reason_for_call"] += " You also want a refund."
    code, _, _ = cli(capsys, "import", write(tmp_path / "r.json", data), "--run-dir", tmp_path / "run", "--keep-drifted")
    assert code == 0
    index = tmp_path / "run" / "report" / "episodes" / "index.html"
    shown = browser.Elements(browser.dom(index))
    tasks = [e["text"] for e in shown.found if e["tag"] == "td" and any(a["tag"] == "a" for a in shown.found
                                                                         if a.get("parents") and a["parents"][-1] is e)]
    assert sorted(tasks) == sorted(f"{s['task_id']} drifted" if s["task_id"] == edited["id"] else s["task_id"]
                                   for s in sim_dicts())
    (mark,) = shown.having(tag="span", class_="drifted")
    assert mark["title"] == f"task {edited['id']} differs from the pinned one (scenario), kept by --keep-drifted"
    pages = {a["text"]: index.parent / a["href"] for a in shown.having(tag="a") if a["href"].startswith("transcripts/")}
    for task_id, path in pages.items():
        banner = browser.Elements(browser.dom(path)).having(id="drift")
        expected = f"Drifted from the pinned tau2: {mark['title']}. Not comparable with runs on the pinned tasks."
        assert [b["text"] for b in banner] == ([expected] if task_id == edited["id"] else [])


def test_other_user_simulator_guidelines_are_flagged(tmp_path, capsys, monkeypatch):
    from tau2.user.user_simulator import get_global_user_sim_guidelines

    monkeypatch.setenv("WANDB_MODE", "disabled")
    data = results_data(sim_dicts())
    data["info"]["user_info"]["global_simulation_guidelines"] = get_global_user_sim_guidelines() + "\nBe terse."
    code, _, err = cli(capsys, "import", write(tmp_path / "r.json", data), "--run-dir", tmp_path / "run")
    assert code == 0 and "global_simulation_guidelines differ from the pinned tau2's" in err
    assert RunDir(tmp_path / "run").manifest.imported.files[0].drift.user_guidelines_differ
    data["info"]["user_info"]["global_simulation_guidelines"] = get_global_user_sim_guidelines()
    same = import_files(tmp_path / "same", [write(tmp_path / "s.json", data)])
    assert not same.files[0].drift.user_guidelines_differ


def test_a_policy_variant_is_refused_with_its_reason_and_kept_when_asked(tmp_path, capsys):
    data = results_data(sim_dicts())
    data["info"]["environment_info"]["domain_name"] = "retail_tighter_policy"
    data["info"]["environment_info"]["policy"] = "A tighter policy."
    path = write(tmp_path / "r.json", data)
    code, _, err = cli(capsys, "import", path, "--run-dir", tmp_path / "run")
    assert code == 2 and "'retail_tighter_policy' is retail with an edited policy" in err and "--keep-drifted" in err
    assert "unknown domain" not in err and not (tmp_path / "run").exists()
    kept = import_files(tmp_path / "kept", [path], keep_drifted=True)
    drift = kept.files[0].drift
    assert (kept.files[0].domain, drift.domain_variant, drift.policy_differs, drift.kept) == (
        "retail", "retail_tighter_policy", True, True)
    data["info"]["environment_info"]["domain_name"] = "banking"
    code, _, err = cli(capsys, "import", write(tmp_path / "b.json", data), "--run-dir", tmp_path / "run2")
    assert code == 2 and "'banking' is none of the pinned tau2's (airline, retail, telecom)" in err


@pytest.mark.parametrize("case", ["checkpoint twice", "simulation twice", "domain contradicted"])
def test_a_refusal_names_its_reason_and_the_way_past_it_and_writes_nothing(tmp_path, capsys, case):
    sims = sim_dicts()
    path = results_file(tmp_path / "r.json", sims)
    argv, reason, way = {
        "checkpoint twice": ([results_file(tmp_path / "s.json", sims), "--checkpoint", "x", "--checkpoint", "x"],
                             "--checkpoint names a checkpoint twice: x, x", "give each file its own name"),
        "simulation twice": ([], f"task {sims[0]['task_id']!r} trial 0 appears twice, in simulations 0 and 3",
                             "remove the duplicate"),
        "domain contradicted": (["--domain", "airline"], "results are for domain 'retail', not 'airline'",
                                "drop --domain"),
    }[case]
    if case == "simulation twice":
        results_file(path, [*sims, sims[0]])
    code, _, err = cli(capsys, "import", path, *argv, "--run-dir", tmp_path / "run")
    assert code == 2 and reason in err and way in err and "Traceback" not in err
    assert not (tmp_path / "run").exists()


def test_an_import_ends_with_the_headline_then_the_paths(tmp_path, capsys):
    code, out, _ = cli(capsys, "import", results_file(tmp_path / "a.json", sim_dicts()), "--run-dir", tmp_path / "run")
    assert code == 0
    lines = out.splitlines()
    header = next(i for i, line in enumerate(lines) if line.split()[:4] == ["checkpoint", "step", "domain", "episodes"])
    assert lines[header + 1].split()[:4] == ["a", "0", "retail", "3"]  # named by its file
    assert "against the task label" in out and "substantive" in out
    assert header < next(i for i, line in enumerate(lines) if line.startswith("  report_txt: "))
    assert "](" not in out
