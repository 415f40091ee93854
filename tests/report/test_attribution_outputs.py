"""Who asked for the human reaches the user: `handoff score` rows, the transcript page's marks and the
episode index's initiator, on the shared real tau2 leaderboard dialogues (skipped when absent)."""

from __future__ import annotations

import gzip
import json

import pytest

from handoff.cli import main
from handoff.records import EpisodeRecord
from handoff.report.episodes import NO_HANDOFF, index_row
from handoff.report.transcripts import transcript_html
from handoff.scoring import Scorer
from tests.rules.test_attribution import AIRLINE_FILE, REAL

FIELDS = {"user_request_turn", "agent_offer_turn", "handoff_initiator", "user_request_offscript",
          "episode_should_transfer", "user_ended_for_transfer", "handoff_delay", "summary_complete"}


@pytest.fixture(scope="module")
def airline(tmp_path_factory):
    path = REAL / AIRLINE_FILE
    if not path.is_file():
        pytest.skip(f"the shared real trajectories are absent ({path})")
    out = tmp_path_factory.mktemp("real") / "airline.json"
    out.write_bytes(gzip.decompress(path.read_bytes()))
    return out


def test_handoff_score_rows_carry_who_asked_and_the_episode_label(airline, capsys):
    assert main(["score", str(airline)]) == 0
    rows = {r["task_id"]: r for r in map(json.loads, capsys.readouterr().out.splitlines())}
    assert len(rows) == 50 and all(FIELDS <= set(r) for r in rows.values())
    asked = rows["46"]  # "Is there any way to escalate this or speak to a supervisor?", a task labelled 0
    assert (asked["handoff_initiator"], asked["user_request_turn"], asked["user_request_offscript"]) == ("user", 2, True)
    assert asked["episode_should_transfer"] and not asked["label"]["should_transfer"]
    assert rows["3"]["user_ended_for_transfer"] and rows["3"]["handoff_initiator"] is None
    assert sum(r["handoff_initiator"] == "agent_offer" for r in rows.values()) == 8


def test_the_transcript_marks_the_request_and_the_offer_and_the_index_has_the_initiator(airline):
    sims = {s["task_id"]: s for s in json.loads(airline.read_text())["simulations"]}
    record = EpisodeRecord(model="real", domain="airline", task_id="0", seed=0, simulation=sims["0"])
    ep = Scorer().score(record)
    html = transcript_html(record, ep)
    # task 0: the agent offers a supervisor (message 13), the user accepts (message 14)
    assert "<div class='msg assistant' id='m13'" in html and "<div class='msg user by-user' id='m14'" in html
    offer_at, request_at = html.index("data-kind='offer'"), html.index("data-kind='request'")
    assert html.index("id='m13'") < offer_at < html.index("id='m14'") < request_at < html.index("id='m15'")
    assert "initiator <code>agent_offer</code>" in html
    assert index_row("shard", ep)[11] == "agent_offer"
    kept_record = EpisodeRecord(model="real", domain="airline", task_id="7", seed=0, simulation=sims["7"])
    kept = Scorer().score(kept_record)  # task 7: offers, no request, no hand-off
    kept_html = transcript_html(kept_record, kept)
    assert index_row("shard", kept)[11] == NO_HANDOFF and "data-kind='request'" not in kept_html
    assert "data-kind='offer'" in kept_html and "initiator <code>none (no hand-off)</code>" in kept_html
