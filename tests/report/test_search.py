"""Free-text search in the episode index (the `text` filter): over what the user and the agent said
and the agent's tool calls, together with the other filters, the count shown, offline from the run
directory (headless Chromium on the files; the search texts load only when a text is searched)."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from handoff.cli import main
from handoff.records import read_shard
from handoff.report import reduce_run, write_report
from handoff.rundir import RunDir, RunPaths
from handoff.testing.synthetic import Behavior, add_shard, write_run
from tests.support import browser

SHARED = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "real-trajectories"
ASKS = {"0", "2", "3"}  # the tasks whose user asks for a Supervisor in checkpoint "asker"


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    run = write_run(tmp_path_factory.mktemp("search") / "run", {"plain": (0, Behavior())},
                    {"retail": ["0", "1", "2", "3", "10"]}, shard_size=10)
    records = [r.model_copy(update={"model": "asker", "step": 1}, deep=True)
               for p in RunPaths(run).shards() for r in read_shard(p)]
    for r in records:
        if r.task_id in ASKS:
            user = next(m for m in r.simulation["messages"] if m["role"] == "user")
            user["content"] = "Get me your SUPERVISOR, now."
    add_shard(run, "asker-retail-00000", records)
    write_report(run, reduce_run(run))
    return run


def _count(run, fragment: str) -> tuple[int, str, list[str]]:
    shown = browser.Elements(browser.dom(RunDir(run).report / "episodes" / "index.html", fragment))
    count = shown.having(id="count")[0]
    loaded = [s["src"] for s in shown.having(tag="script") if s.get("src")]
    return int(count["data-n"]), count["text"], loaded


def test_text_finds_the_episodes_whose_user_says_it_with_the_count(run):
    n, text, loaded = _count(run, "text=supervisor")
    assert n == len(ASKS) and text == f"{len(ASKS)} of 10 episodes"
    assert any(src.endswith("/search.js") for src in loaded)
    assert _count(run, "text=Supervisor&checkpoint=plain")[0] == 0  # case-insensitive; plain never asks


def test_text_combines_with_outcome_and_initiator_filters(run):
    eps = [e for e in reduce_run(run).episodes if e.model == "asker" and e.score.task_id in ASKS]
    transferred = [e for e in eps if e.score.transferred]
    assert _count(run, "text=supervisor&outcome=correct_handoff|unneeded_handoff")[0] == len(transferred)
    by_user = [e for e in eps if e.score.handoff_initiator and e.score.handoff_initiator.value == "user"]
    assert _count(run, "text=supervisor&initiator=user")[0] == len(by_user)


def test_text_searches_tool_calls_too(run):
    transfers = [e for e in reduce_run(run).episodes if e.score.transferred]
    assert transfers and _count(run, "text=transfer_to_human_agents(")[0] == len(transfers)


def test_no_text_loads_no_search_file(run):
    n, _, loaded = _count(run, "checkpoint=asker")
    assert n == 5 and not any(src.endswith("search.js") for src in loaded)


@pytest.mark.skipif(not SHARED.is_dir(), reason=f"{SHARED} (the shared real trajectories) is absent")
def test_real_files_supervisor_count(tmp_path, capsys):
    path = next(iter(sorted(SHARED.glob("gpt-4.1_feature-gym__airline*.json.gz"))))
    imported = tmp_path / "imported"
    assert main(["import", str(path), "--run-dir", str(imported), "--keep-mismatched"]) == 0
    capsys.readouterr()
    sims = json.loads(gzip.decompress(path.read_bytes()))["simulations"]

    def says(sim) -> bool:  # the user or the agent writes it, or a tool call's arguments hold it
        return any("supervisor" in ((m.get("content") or "") + json.dumps(m.get("tool_calls") or [])).lower()
                   for m in sim["messages"] if m["role"] in ("user", "assistant"))

    expected = sum(map(says, sims))
    assert expected > 0
    assert _count(imported, "text=supervisor")[0] == expected
