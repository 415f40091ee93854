"""One scoring path: the episodes of a run, exported with `handoff export`, get from `handoff score`
exactly the reducer's scores, episode by episode. First a scripted sweep on Ray whose two
checkpoints' episodes hold every format kind (unparsed_tool_call, unknown_tool, invalid_arguments,
then truncated_generation with a small max_tokens, empty_message with a larger one); then the
parity cases of run_episode (a clean episode, bad and non-object arguments, an empty turn, a
truncation, a context overflow), also as records written before the events travelled inside the
SimulationRun (legacy). A results file from elsewhere, without handoff's events, is scored from its
messages and says so.

protocol_error is not reachable from handoff_agent (every agent_error it ends with is explained by
its empty_message / invalid_arguments event); it appears on the foreign file below.
"""

from __future__ import annotations

import json

import pytest
from omegaconf import open_dict

from handoff.cli import main
from handoff.report.reducer import reduce_run
from handoff.rules.events import FORMAT_EVENTS_INFO_KEY, TOKENS_INFO_KEY
from handoff.sweep.run import compose, run_sweep
from tests.support.agent import CASES, call, max_context, reducer_scores, run

KINDS = {"unparsed_tool_call", "unknown_tool", "invalid_arguments", "empty_message", "truncated_generation"}


def _legacy(record):
    """The record as shards held it before the events travelled in the SimulationRun."""
    sim = json.loads(json.dumps(record.simulation))
    for key in (FORMAT_EVENTS_INFO_KEY, TOKENS_INFO_KEY):
        sim["reward_info"]["info"].pop(key)
    return record.model_copy(update={"model": "legacy", "simulation": sim})


@pytest.fixture(scope="module")
def episodes():
    results = {name: run(agent, user, max_context_tokens=max_context(name)) for name, (agent, user) in CASES.items()}
    records = [r.to_record("scripted", trial=i) for i, r in enumerate(results.values())]
    return records + [_legacy(r) for r in records]


def _score(capsys, path) -> tuple[list[dict], str]:
    assert main(["score", str(path)]) == 0
    out, err = capsys.readouterr()
    return [json.loads(line) for line in out.splitlines()], err


def _export_and_score(run_dir, capsys) -> tuple[list[str], list[dict]]:
    """`handoff export` of the run, then `handoff score` of every exported file: names and rows."""
    assert main(["export", str(run_dir)]) == 0
    exported = sorted(capsys.readouterr().out.split())
    rows = []
    for path in exported:
        scored, err = _score(capsys, path)
        assert err == "" and all(row.pop("format_events_recorded") is True for row in scored)
        rows += scored
    return [p.rsplit("/", 1)[1] for p in exported], rows


def _assert_same(rows: list[dict], reduced) -> None:
    assert len(rows) == len(reduced)
    for row, episode in zip(rows, reduced):  # both in record-key order: (checkpoint, domain, task, trial)
        assert row == episode.score.model_dump(mode="json"), episode.key
    found = {e.kind.value for ep in reduced for e in ep.score.format_errors}
    assert found == KINDS  # every kind the agent records, and no protocol_error


SWEEP_AGENT = ['<tool_call>{"name": "get_user_', call("fly", {}), call("get_reservation_details", {"id": 1}),
               "Let me look into your reservation and check every detail of it for you. " * 8, ""]


@pytest.mark.ray
def test_a_scripted_sweep_scores_the_same_exported(ray_cluster, tmp_path, capsys):
    run_dir = tmp_path / "sweep"
    overrides = ["engine=scripted", "domain=[airline]", "tasks.per_kind=null", "tasks.limit=1", "workers.processes=1",
                 "workers.threads=1", "logger.mode=disabled", "episode.max_steps=30", f"run_dir={run_dir}"]
    cfg = compose(overrides)
    with open_dict(cfg):
        cfg.engine.script.agent = SWEEP_AGENT  # the long turn: truncated at 40 tokens, a message at 256
        cfg.engine.script.user = ["Hi, I need help with my reservation.", "Ok."]
        cfg.model.short = {**cfg.model.smollm2, "name": "short", "step": 1,
                           "sampling": {**cfg.model.smollm2.sampling, "max_tokens": 40}}
    _, summary = run_sweep(cfg, overrides, progress=False)
    assert summary.episodes_done == 2 and summary.episode_failures == 0
    reduced = reduce_run(run_dir).episodes
    names, rows = _export_and_score(run_dir, capsys)
    assert names == ["short__airline.json", "smollm2-135m-instruct__airline.json"]
    _assert_same(rows, reduced)
    assert [e.score.format_errors[-1].kind.value for e in reduced] == ["truncated_generation", "empty_message"]


def test_handoff_score_of_the_export_equals_the_reducer(episodes, tmp_path, capsys):
    reduced = reducer_scores(tmp_path, episodes)
    names, rows = _export_and_score(tmp_path / "reduced-run", capsys)
    assert names == ["legacy__airline.json", "scripted__airline.json"]
    assert len(rows) == 2 * len(CASES) == 12
    _assert_same(rows, reduced)


def test_a_results_file_from_elsewhere_is_scored_from_its_messages(episodes, tmp_path, capsys):
    (non_object,) = [r for r in episodes if r.model == "legacy" and r.trial == list(CASES).index("non-object arguments")]
    path = tmp_path / "sim.json"
    path.write_text(json.dumps(non_object.simulation))
    assert main(["score", str(path), "--domain", "airline"]) == 0
    out, err = capsys.readouterr()
    row = json.loads(out)
    assert row["format_events_recorded"] is False and "1 of 1 simulation(s) carry no handoff format events" in err
    assert [e["kind"] for e in row["format_errors"]] == ["protocol_error"]  # the event, not in the file, is unknown
    (reduced,) = reducer_scores(tmp_path, [non_object])
    assert [e.kind.value for e in reduced.score.format_errors] == ["invalid_arguments"]
