"""Cost in the reduction (handoff.report.cost): per checkpoint and domain, mean cost per episode and
cost per tau2 success / per correct hand-off decision with intervals; dollars null with the reason
where a price is unknown; a run from before shard schema 2 reduces with every cost n/a."""

from __future__ import annotations

import pytest

import handoff  # noqa: F401
from handoff.records import LOCAL_ENGINE, Cost
from handoff.report.cost import NO_COST, mean_interval, ratio_interval
from handoff.report.reducer import reduce_run
from handoff.rundir import RunDir
from handoff.testing.synthetic import Behavior, episode, write_records

TASKS = [("airline", "0"), ("airline", "1"), ("airline", "2"), ("airline", "3")]


def records(model: str, cost: Cost | None, success: float = 1.0):
    out = []
    for i, (domain, task) in enumerate(TASKS):
        r = episode(model, 0, domain, task, 0, Behavior(success=success, violation=0.0, format_error=0.0))
        c = cost and cost.model_copy(update={"agent_usd": None if cost.agent_usd is None else cost.agent_usd * (i + 1)})
        out.append(r.model_copy(update={"usage": r.usage.model_copy(update={"cost": c})}))
    return out


API = Cost(agent_usd=0.01, user_usd=0.0, agent_s=2.0, user_s=1.0, tool_s=0.1)
LOCAL = Cost(agent_usd_note=LOCAL_ENGINE, user_usd_note=LOCAL_ENGINE, agent_engine_s=3.0, gpu_s=6.0, agent_s=3.0)
UNPRICED = Cost(agent_usd=None, agent_usd_note="litellm has no price for tiny-hermes", user_usd=0.0)


def test_cost_per_episode_and_per_success_per_checkpoint(tmp_path):
    run = write_records(tmp_path / "run", {"a-0": records("api", API), "b-0": records("local", LOCAL),
                                           "c-0": records("unpriced", UNPRICED), "d-0": records("old", None)}, "c")
    reduction = reduce_run(run)
    api = reduction.group("api", "airline").cost
    assert api.usd.total == pytest.approx(0.10) and api.usd.per_episode.value == pytest.approx(0.025)
    assert api.usd.per_episode.lo < 0.025 < api.usd.per_episode.hi  # an interval, not a point
    k = api.usd.per_tau2_success.k
    assert k == reduction.group("api", "airline").metrics.tau2_success.k and k > 0
    assert api.usd.per_tau2_success.value == pytest.approx(0.10 / k)  # total cost over the successes
    assert api.mean_wall_s == {"agent": 2.0, "user": 1.0, "tool": 0.1} and api.engine_s.total == 0
    local = reduction.group("local").cost  # all domains
    assert local.usd.total == 0 and local.gpu_s.per_episode.value == 6.0 and local.engine_s.total == 12.0
    unpriced = reduction.group("unpriced", "airline").cost.usd
    assert unpriced.total is None and unpriced.per_episode.value is None and "no price" in unpriced.note
    old = reduction.group("old", "airline").cost
    assert old.n_costed == 0 and old.usd.note == NO_COST and old.gpu_s.per_tau2_success.value is None


def test_no_success_leaves_cost_per_success_undefined():
    assert ratio_interval([1.0, 2.0], [False, False]).value is None
    assert ratio_interval([1.0, 3.0], [True, False]).value == 4.0


def test_a_constant_cost_has_a_zero_width_interval():
    interval = mean_interval([2.0, 2.0, 2.0])
    assert (interval.value, interval.lo, interval.hi) == (2.0, 2.0, 2.0)


def test_compare_json_carries_each_sides_cost_api_model_against_checkpoint(tmp_path, capsys):
    import json

    from handoff.cli import main

    run = write_records(tmp_path / "run", {"a-0": records("api", API), "b-0": records("local", LOCAL)}, "c")
    assert main(["compare", str(run), "--a", "api", "--b", "local", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["result"]["n_tasks"] == len(TASKS)  # paired on the tasks both ran
    a, b = out["side_a"]["cost"], out["side_b"]["cost"]
    assert a["usd"]["total"] == pytest.approx(0.10) and a["usd"]["per_tau2_success"]["lo"] is not None
    assert b["usd"]["total"] == 0 and b["gpu_s"]["per_episode"]["value"] == 6.0


def test_the_summary_states_each_checkpoints_total(tmp_path):
    from handoff.report.cost_view import total_line

    run = write_records(tmp_path / "run", {"a-0": records("api", API), "b-0": records("local", LOCAL),
                                           "d-0": records("old", None)}, "c")
    line = total_line(reduce_run(run))
    assert "api $0.1000;" in line and "local 12.0 engine-s, 24.0 GPU-s;" in line  # the report's units
    assert "old n/a" in line


def test_wandb_rows_carry_cost_with_intervals_and_leave_out_what_is_na(tmp_path):
    from handoff.report.wandb_log import cost_values

    run = write_records(tmp_path / "run", {"a-0": records("api", API), "c-0": records("unpriced", UNPRICED),
                                           "d-0": records("old", None)}, "c")
    reduction = reduce_run(run)
    api = cost_values(reduction.group("api", "airline"))
    assert api["cost/usd/total"] == pytest.approx(0.10) and api["cost/usd/per_episode"] == pytest.approx(0.025)
    assert "ci95/cost/usd/per_tau2_success/lo" in api and "cost/gpu_s/per_episode" in api
    unpriced = cost_values(reduction.group("unpriced", "airline"))
    assert "cost/usd/total" not in unpriced and unpriced["cost/engine_s/total"] == 0  # n/a is left out, not 0
    assert cost_values(reduction.group("old", "airline")) == {}


# -- the report's views: report.md (and report.html, rendered from it) and report.txt ----------------

@pytest.fixture(scope="module")
def reported(tmp_path_factory):
    """A run of an API model, a local engine, an unpriced API model and a run from before schema 2,
    reported (report.md, report.html, report.txt)."""
    from handoff.report import write_report

    run = write_records(tmp_path_factory.mktemp("cost") / "run",
                        {"a-0": records("api", API), "b-0": records("local", LOCAL),
                         "c-0": records("unpriced", UNPRICED), "d-0": records("old", None)}, "c")
    reduction = reduce_run(run)
    write_report(run, reduction)
    return RunDir(run), reduction


def section(text: str) -> str:
    return text.split("## Cost\n")[1].split("\n## ")[0]


def rows_of(text: str, checkpoint: str) -> list[list[str]]:
    """The cost rows of a checkpoint, Markdown's (| a | b |) or the plain grid's (two spaces apart)."""
    import re

    lines = [line.strip("| ") for line in section(text).splitlines()]
    return [re.split(r" \| |  +", line) for line in lines if line.split(" ", 1)[0] == checkpoint]


def test_report_md_and_txt_show_cost_per_episode_and_per_success_with_intervals(reported):
    run, reduction = reported
    api = reduction.group("api", "airline").cost.usd
    correct = api.per_correct_handoff
    for text in (run.report_md.read_text(), run.report_txt.read_text()):
        [row] = rows_of(text, "api")
        assert row[:4] == ["api", "0", "airline", "dollars"] and row[5] == "0.1000"
        assert row[6] == f"0.0250 [{api.per_episode.lo:.4f}, {api.per_episode.hi:.4f}]"
        assert row[7] == f"0.0250 [{api.per_tau2_success.lo:.4f}, {api.per_tau2_success.hi:.4f}] over 4"
        assert row[8] == f"{correct.value:.4f} [{correct.lo:.4f}, {correct.hi:.4f}] over {correct.k}"
        local = rows_of(text, "local")  # engine- and GPU-seconds, no dollars: a local engine costs none
        assert [r[3] for r in local] == ["engine-s", "GPU-s"] and local[1][5] == "24.0" and local[1][6] == "6.0 [6.0, 6.0]"
    assert "[4](episodes/index.html#checkpoint=api&domain=airline)" in section(run.report_md.read_text())


def test_an_unpriced_model_and_a_run_without_cost_fields_say_n_a_with_the_reason(reported):
    run, _ = reported
    for text in (run.report_md.read_text(), run.report_txt.read_text()):
        [unpriced], [old] = rows_of(text, "unpriced"), rows_of(text, "old")
        assert unpriced[3] == "dollars" and unpriced[5:] == ["n/a"] * 4  # never 0
        assert old[4] in ("0 of 4", "[0 of 4](episodes/index.html#checkpoint=old&domain=airline)") and old[5:] == ["n/a"] * 4
        notes = section(text)
        assert "- unpriced: dollars: litellm has no price for tiny-hermes" in notes
        assert "- old: recorded before shard schema version 2 (no cost fields)" in notes
        assert "- api:" not in notes and "- local:" not in notes  # nothing of theirs is n/a


def test_a_reduction_from_before_the_cost_field_still_renders(reported):
    """metrics.json written before `cost` was a group field: the groups load with cost None."""
    from handoff.report.cost_view import cost_section
    from handoff.report.text import grid

    _, reduction = reported
    g = reduction.group("api", "airline").model_copy(update={"cost": None})
    lines = cost_section([g], grid)
    assert any(line.split()[:4] == ["api", "0", "airline", "-"] and line.endswith("n/a") for line in lines)
    assert "- api: recorded before shard schema version 2 (no cost fields)" in lines


def test_no_success_is_said_so_in_the_cost_per_success_cell():
    from handoff.report.cost_view import per_success

    assert per_success(ratio_interval([1.0, 2.0], [False, False]), 1) == "n/a (no success)"
    assert per_success(ratio_interval([1.0, 3.0], [True, False]), 1).startswith("4.0 [0.0, ")
    assert per_success(ratio_interval([1.0, 3.0], [True, False]), 1).endswith("] over 1")  # the successes it rests on


def test_browser_report_page_shows_the_cost_table(reported):
    from tests.support import browser

    run, reduction = reported
    shown = browser.Elements(browser.dom(run.report_html))
    tables = [t for t in shown.having(tag="table") if "per correct hand-off decision" in t["text"]]
    assert len(tables) == 1
    cells = [c["text"] for c in shown.having(tag="td") if tables[0] in c["parents"]]
    api = reduction.group("api", "airline").cost.usd
    assert f"0.0250 [{api.per_tau2_success.lo:.4f}, {api.per_tau2_success.hi:.4f}] over 4" in cells
    assert any("litellm has no price for tiny-hermes" in li["text"] for li in shown.having(tag="li"))


def test_each_episode_page_states_its_cost_or_why_it_has_none(reported):
    run, _ = reported
    pages = {p.name.split("__")[0]: p.read_text() for p in run.report.glob("episodes/transcripts/*/*__0__0.html")}
    assert "<td><b>cost</b></td><td>$0.0100; wall time: agent 2.0 s, user 1.0 s, tools 0.1 s;" in pages["api"]
    assert "<td>3.0 engine-s (agent 3.0, user 0.0); 6.0 GPU-s; wall time: agent 3.0 s" in pages["local"]
    assert "<td>$ n/a (litellm has no price for tiny-hermes); wall time" in pages["unpriced"]
    assert "<td>n/a: recorded before shard schema version 2 (no cost fields)</td>" in pages["old"]


def test_compare_text_states_each_sides_cost_with_intervals_and_n_a_with_the_reason(tmp_path, capsys):
    from handoff.cli import main

    run = write_records(tmp_path / "run", {"a-0": records("api", API), "b-0": records("local", LOCAL),
                                           "c-0": records("unpriced", UNPRICED), "d-0": records("old", None)}, "c")
    api = reduce_run(run).group("api", "airline").cost.usd
    assert main(["compare", str(run), "--a", "api", "--b", "local"]) == 0
    lines = {line[:6]: line for line in capsys.readouterr().out.splitlines() if line.startswith("cost ")}
    assert lines["cost A"].startswith(
        f"cost A: dollars 0.1000 in all, 0.0250 [{api.per_episode.lo:.4f}, {api.per_episode.hi:.4f}] per episode, "
        f"0.0250 [{api.per_tau2_success.lo:.4f}, {api.per_tau2_success.hi:.4f}] over 4 per tau2 success, ")
    assert lines["cost B"].startswith("cost B: engine-s 12.0 in all, 3.0 [3.0, 3.0] per episode")
    assert "; GPU-s 24.0 in all, 6.0 [6.0, 6.0] per episode" in lines["cost B"]
    assert main(["compare", str(run), "--a", "unpriced", "--b", "old"]) == 0
    out = capsys.readouterr().out
    assert "cost A: dollars n/a in all (litellm has no price for tiny-hermes), n/a per episode" in out
    assert "cost B: n/a: recorded before shard schema version 2 (no cost fields)" in out
