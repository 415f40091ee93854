"""The episode pages of `handoff report` (transcripts and index), the flips of `handoff compare`
and the W&B episode table's transcripts, on a synthetic run of real tau2 messages: what the files
hold, that they are written incrementally, and what headless Chromium shows on screen."""

from __future__ import annotations

import json
import re
from urllib.parse import parse_qs, urlencode, urlsplit

import pytest

from handoff.cli import main
from handoff.records import read_shard
from handoff.report import reduce_run, write_report
from handoff.report.episodes import SUBSTANTIVE_RULES, episode_href, natural_key, write_transcripts
from handoff.report.flips import Flip, TrialOutcome, find_flips, rule_text
from handoff.report.wandb_log import episode_rows, with_transcript
from handoff.rundir import RunDir, RunPaths
from handoff.testing.synthetic import Behavior, add_shard, sample_tasks, write_records, write_run
from tests.support import browser

# "late" decides the hand-off right far more often than "early"; both break policy and the format often.
CHECKPOINTS = {"early": (100, Behavior(correct_handoff=0.3, violation=0.5, format_error=0.5)),
               "late": (200, Behavior(correct_handoff=0.95, violation=0.5, format_error=0.5))}


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    run = write_run(tmp_path_factory.mktemp("pages") / "run", CHECKPOINTS, sample_tasks(2), trials=2, shard_size=8)
    write_report(run, reduce_run(run))
    return run


def _pages(run) -> list:
    return sorted((RunPaths(run).report / "episodes" / "transcripts").rglob("*.html"))


def test_one_transcript_page_per_episode_holding_its_findings(run):
    reduction = reduce_run(run)
    assert len(_pages(run)) == reduction.n_episodes
    for shard, eps in reduction.by_shard.items():
        for ep in eps:
            text = (RunPaths(run).report / "episodes" / episode_href(shard, ep)).read_text()
            assert ep.score.outcome.value in text and f"rule <code>{ep.score.label.rule}</code>" in text
            for v in ep.score.violations:
                assert f"data-rule='{v.rule.value}'" in text
            for f in ep.score.format_errors:  # the synthetic unknown tool's detail is its name
                assert f"<code>{f.kind.value}</code>: lookup_everything" in text


def test_pages_are_written_incrementally(run, tmp_path):
    copy = write_run(tmp_path / "run", CHECKPOINTS, sample_tasks(1), shard_size=8)
    reduction = reduce_run(copy)
    assert write_transcripts(RunDir(copy), reduction) == reduction.n_episodes
    assert write_transcripts(RunDir(copy), reduction) == 0  # nothing new: nothing rendered
    paths = RunPaths(copy)
    records = [r.model_copy(update={"model": "resumed"}) for r in read_shard(paths.shards()[0])]
    add_shard(copy, "resumed-0", records)
    reduction = reduce_run(copy)
    assert write_transcripts(RunDir(copy), reduction) == len(records)  # only the new shard
    paths.shard_path("resumed-0").unlink()
    write_transcripts(RunDir(copy), reduce_run(copy))
    assert not (paths.report / "episodes" / "transcripts" / "resumed-0").exists()


def test_index_data_has_every_episode_once_per_slice(run):
    reduction = reduce_run(run)
    data = RunPaths(run).report / "episodes" / "data"
    rows = {}
    for path in data.glob("*.js"):
        name, body = re.fullmatch(r"handoffRows\((\".*?\"),(.*)\);\n", path.read_text(), re.S).groups()
        rows[json.loads(name)] = json.loads(body)
    assert sum(map(len, rows.values())) == reduction.n_episodes
    assert set(rows) == {f"{m}__{d}" for m in CHECKPOINTS for d in reduction.domains()}


def test_flips_are_exactly_the_tasks_whose_outcome_differs(run, tmp_path, capsys):
    page = tmp_path / "flips.html"
    assert main(["compare", str(run), "--a", "late", "--b", "early", "--json", "--html", str(page)]) == 0
    flips = json.loads(capsys.readouterr().out)["flips"]
    episodes = reduce_run(run).episodes
    outcome = {(e.model, e.score.domain, e.score.task_id, e.trial): e.score.outcome.correct for e in episodes}
    tasks = {(d, t) for _, d, t, _ in outcome}
    expected = {(d, t) for d, t in tasks
                if sum(outcome[("late", d, t, k)] for k in (0, 1)) != sum(outcome[("early", d, t, k)] for k in (0, 1))}
    assert {(f["domain"], f["task_id"]) for f in flips if f["kind"] == "handoff"} == expected and expected
    first = next(f for f in flips if f["kind"] == "handoff")
    assert [t["trial"] for t in first["a"]] == [0, 1] and len(first["b"]) == 2
    html = page.read_text()
    assert html.count("class='flip'") == len(flips)
    assert main(["compare", str(run), "--a", "late", "--b", "early"]) == 0
    out = capsys.readouterr().out
    better_a = sum(f["better"] == "A" for f in flips if f["kind"] == "handoff")
    assert f"Flips in hand-off correctness: {len(expected)} tasks ({better_a} better in A" in out
    assert f"{first['domain']} {first['task_id']} (task rule {first['rule']}: should " in out


def test_flips_pair_trials_by_the_records_trial(run, tmp_path, capsys):
    """A sweep's SimulationRuns carry no trial (the record does): both sides' trials still pair up."""
    shards = {}
    for shard in RunPaths(run).shards():
        records = read_shard(shard)
        for r in records:
            r.simulation["trial"] = None
        shards[shard.stem] = records
    bare = write_records(tmp_path / "bare", shards, "bare")
    page = tmp_path / "flips.html"
    assert main(["compare", str(bare), "--a", "late", "--b", "early", "--json", "--html", str(page)]) == 0
    flips = json.loads(capsys.readouterr().out)["flips"]
    assert flips and all([t["trial"] for t in f["a"]] == [0, 1] == [t["trial"] for t in f["b"]] for f in flips)
    assert "(no episode)" not in page.read_text()


def test_no_flips_between_identical_sides(run):
    scores = [e.score for e in reduce_run(run).episodes if e.model == "late"]
    assert find_flips(scores, scores) == []


def test_wandb_table_transcripts_are_bounded(run):
    reduction = reduce_run(run)
    eps = [e for e in reduction.episodes if (e.model, e.score.domain) == ("early", "airline")]
    assert with_transcript(eps, len(eps)) == {e.key for e in eps}
    wrong = [e.key for e in eps if not e.score.outcome.correct]
    assert with_transcript(eps, 2) == set(wrong[:2]) and len(wrong) > 2
    rows = episode_rows(reduction, "early", "airline", {eps[0].key: "<p>x</p>"}, html=lambda h: ("html", h))
    assert rows[0][-1] == ("html", "<p>x</p>") and all(r[-1] is None for r in rows[1:])
    assert rows[0][8] == eps[0].score.outcome.value and rows[0][9] == eps[0].score.handoff_turn


# --- on screen (headless Chromium) ---------------------------------------------------------------


def test_browser_shows_each_violation_marker_at_its_turn(run):
    reduction = reduce_run(run)
    shard, ep = next((s, e) for s, eps in reduction.by_shard.items() for e in eps if e.score.violations and e.score.format_errors)
    shown = browser.Elements(browser.dom(RunPaths(run).report / "episodes" / episode_href(shard, ep)))
    markers = shown.having(class_="violation")
    assert markers
    at = {(m["data-rule"], int(next(p for p in m["parents"] if "msg" in p.get("class", ""))["data-turn"])) for m in markers}
    assert at == {(v.rule.value, v.turn) for v in ep.score.violations}
    formats = {(m["data-rule"], int(m["parents"][-1]["data-turn"])) for m in shown.having(class_="format")}
    assert formats == {(f.kind.value, f.turn) for f in ep.score.format_errors}
    assert shown.having(id="outcome")[0]["text"] == ep.score.outcome.value.replace("_", " ")


def _index(run, fragment=""):
    shown = browser.Elements(browser.dom(RunPaths(run).report / "episodes" / "index.html", fragment))
    count = shown.having(id="count")[0]
    rows = [r for r in shown.having(tag="tr") if any(p["tag"] == "tbody" for p in r["parents"])]
    loaded = [s["src"] for s in shown.having(tag="script") if s.get("src")]
    return int(count["data-n"]), rows, loaded


def test_browser_filter_narrows_the_index_and_loads_only_what_it_needs(run):
    reduction = reduce_run(run)
    total, rows, loaded = _index(run)
    assert total == reduction.n_episodes == len(rows) and len(loaded) == 4
    missed = [e for e in reduction.episodes if e.score.outcome.value == "missed_handoff"]
    n, rows, _ = _index(run, "outcome=missed_handoff")
    assert 0 < n == len(missed) < total and all("missed_handoff" in r["text"] for r in rows)
    n, rows, loaded = _index(run, "checkpoint=late&domain=retail&violation=any")
    expected = [e for e in reduction.episodes if (e.model, e.score.domain) == ("late", "retail") and e.score.violations]
    assert n == len(expected) > 0 and loaded == ["data/late__retail.js"]
    n, rows, _ = _index(run, "checkpoint=late&" + urlencode({"violation": SUBSTANTIVE_RULES}))
    substantive = [e for e in reduction.episodes if e.model == "late" and any(
        v.rule.value in SUBSTANTIVE_RULES.split("|") for v in e.score.violations)]
    assert n == len(substantive) == len(rows) > 0


def test_browser_sorts_the_index_by_a_column(run):
    shown = browser.Elements(browser.dom(RunPaths(run).report / "episodes" / "index.html", "checkpoint=early&sort=-reward"))
    cells: dict[int, list[str]] = {}  # the cells of each table row
    for e in shown.found:
        if e["tag"] == "td":
            cells.setdefault(id(e["parents"][-1]), []).append(e["text"])
    rewards = [float(row[-1]) for row in cells.values()]  # the last column is the reward
    assert len(rewards) == sum(e.model == "early" for e in reduce_run(run).episodes)
    assert rewards == sorted(rewards, reverse=True) and rewards[0] > rewards[-1]


def test_browser_report_number_links_to_its_episodes(run):
    report = RunPaths(run).report_html
    links = browser.Elements(browser.dom(report)).having(tag="a")
    reduction = reduce_run(run)
    confusion = reduction.group("late", "retail").metrics.handoff.confusion
    recall = next(a for a in links if parse_qs(urlsplit(a["href"]).fragment).get("outcome") == ["correct_handoff|missed_handoff"]
                  and "checkpoint=late" in a["href"] and "domain=retail" in a["href"])
    assert recall["text"].startswith(f"{confusion.tp / (confusion.tp + confusion.fn):.2f} [")  # the headline: 2 digits
    path, fragment = recall["href"].split("#")
    n, rows, _ = _index(run, fragment)
    assert n == confusion.tp + confusion.fn == len(rows)
    assert {r["text"].count("correct_handoff") + r["text"].count("missed_handoff") for r in rows} == {1}


def test_browser_flips_page_shows_both_sides(run, tmp_path, capsys):
    page = tmp_path / "flips.html"
    assert main(["compare", str(run), "--a", "late", "--b", "early", "--html", str(page)]) == 0
    shown = browser.Elements(browser.dom(page))
    heads = shown.having(class_="flip")
    assert heads and len(shown.having(class_="sbs")) == len({h["text"].split(" (")[0] for h in heads})
    first = shown.having(class_="sbs")[0]
    cells = [e for e in shown.found if e["tag"] == "td" and first in e["parents"]]
    assert len(cells) % 2 == 0 and all(c["text"].strip() for c in cells)


def test_a_long_tool_result_is_folded_never_cut():
    from html import escape

    from handoff.records import EpisodeRecord
    from handoff.report.transcripts import FOLD_CHARS, transcript_html
    from handoff.scoring import Scorer
    from tests.support.episodes import authenticated_retail

    ep = authenticated_retail()
    ep.call("list_all_product_types")
    record = EpisodeRecord(model="m", domain="retail", task_id="88", seed=0,
                           simulation=ep.simulation().model_dump(mode="json"))
    html = transcript_html(record, Scorer().score(record))
    long, short = ep.last_result().content, ep.messages[3].content
    assert len(long) > FOLD_CHARS >= len(short)
    assert html.count("<details>") == 1 and escape(long) in html and escape(short) in html


def test_flips_page_has_contents_linking_every_flip(run, tmp_path, capsys):
    page = tmp_path / "flips.html"
    assert main(["compare", str(run), "--a", "late", "--b", "early", "--json", "--html", str(page)]) == 0
    flips = json.loads(capsys.readouterr().out)["flips"]
    html = page.read_text()
    ids = re.findall(r"<h2 class='flip' id='([^']+)'", html)
    links = re.findall(r"<a href='#([^']+)'>", html.split("</nav>")[0])
    assert len(ids) == len(set(ids)) == len(flips) and links == ids  # one entry per flip, in the page's order
    tasks = [(f["domain"], f["task_id"]) for f in flips if f["kind"] == "handoff"]
    assert tasks == sorted(tasks, key=lambda t: (t[0], natural_key(t[1])))


def _trial(rule: str) -> TrialOutcome:
    return TrialOutcome(trial=0, outcome="missed_handoff", episode_outcome="missed_handoff", episode_rule=rule,
                        handoff_turn=None, tau2_reward=0.0, tau2_success=False)


def test_an_episode_label_flip_names_the_episode_rule_not_the_tasks():
    flip = dict(domain="airline", task_id="3", rule="no_transfer", better="A", a=[_trial("user_request")],
                b=[_trial("no_transfer")])
    episode = rule_text(Flip(kind="handoff_episode", **flip))
    assert episode.startswith("episode rule no_transfer: should not transfer") and "user_request: should transfer" in episode
    assert rule_text(Flip(kind="handoff", **flip)) == "task rule no_transfer: should not transfer: the reference solution does not"


def test_index_rows_and_task_ids_sort_in_numeric_order(run):
    assert sorted(["10", "2", "explicit_request-12-x", "1", "explicit_request-3-x"], key=natural_key) == [
        "1", "2", "10", "explicit_request-3-x", "explicit_request-12-x"]
    data = (RunPaths(run).report / "episodes" / "data" / "late__retail.js").read_text()
    rows = json.loads(data[data.index(",") + 1:data.rindex(")")])
    tasks = [r[0] for r in rows]
    assert tasks == sorted(tasks, key=natural_key)
