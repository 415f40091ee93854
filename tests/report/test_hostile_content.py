"""Report HTML with hostile content: a model's output, a checkpoint name, a task id and the run's name
holding markup stay text on every page `handoff report` and `handoff compare --html` write (no
browser: each page is parsed with html.parser)."""

from __future__ import annotations

import json
from html.parser import HTMLParser

from handoff.cli import main
from handoff.report import reduce_run, write_report
from handoff.rundir import RunPaths
from handoff.scoring import Scorer
from handoff.testing.synthetic import Behavior, episode, sample_tasks, write_records

HOSTILE = '<script>alert(1)</script>"><img src=x onerror=alert(1)>'


class Page(HTMLParser):
    """The elements and the visible text (entities decoded) of a page; script bodies apart."""

    def __init__(self, text: str):
        super().__init__()
        self.tags, self.text, self.scripts, self._in = [], [], [], None
        self.feed(text)

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))
        self._in = tag

    def handle_endtag(self, tag):
        self._in = None

    def handle_data(self, data):
        (self.scripts if self._in == "script" else self.text).append(data)


def test_hostile_strings_stay_text_on_every_page(tmp_path, monkeypatch, capsys):
    real = sample_tasks(1, ("airline",))["airline"]
    bad = real[0] + HOSTILE
    scoring = Scorer._task  # the hostile task id is scored as the real task it was made from
    monkeypatch.setattr(Scorer, "_task", lambda self, d, t: scoring(self, d, real[0] if t == bad else t))
    hostile_model, shards = "early" + HOSTILE, {}
    for model, step, correct in (("late", 200, 1.0), (hostile_model, 100, 0.0)):
        records = []
        for task_id in real:
            for trial in (0, 1):
                r = episode(model, step, "airline", task_id, trial, Behavior(correct_handoff=correct))
                r.simulation["messages"][0]["content"] = HOSTILE
                if task_id == real[0]:
                    r = r.model_copy(update={"task_id": bad, "simulation": {**r.simulation, "task_id": bad}})
                records.append(r)
        shards[f"s{step}"] = records
    run = write_records(tmp_path / "run", shards, "run" + HOSTILE)
    write_report(run, reduce_run(run))
    flips = tmp_path / "flips.html"
    assert main(["compare", str(run), "--a", "late", "--b", hostile_model, "--html", str(flips)]) == 0
    capsys.readouterr()

    report = RunPaths(run).report
    files = [*report.rglob("*.html"), flips]
    assert len(files) > 4
    for path in files:
        page = Page(path.read_text())
        assert "alert(1)" not in page.scripts, path  # no <script> made of a hostile string
        assert not [a for tag, a in page.tags if tag == "img" and ("onerror" in a or a.get("src") == "x")], path
    visible = {p.name: "".join(Page(p.read_text()).text) for p in files}
    assert f"Hand-off report: run{HOSTILE}" in visible["report.html"] and hostile_model in visible["report.html"]
    assert f"Episodes: run{HOSTILE}" in visible["index.html"]
    assert f"A = run:late, B = run:{hostile_model}" in visible["flips.html"]
    assert f"airline task {bad}" in visible["flips.html"] and HOSTILE in visible["flips.html"]
    transcripts = [t for name, t in visible.items() if name.startswith("early")]
    assert transcripts and all(f"episodes of {hostile_model} / airline" in t and HOSTILE in t for t in transcripts)
    # The index's select options are built in JS from META: its JSON never closes the script and the
    # options go through esc() (no browser here to see them).
    index = (report / "episodes" / "index.html").read_text()
    meta = json.loads(Page(index).scripts[0].removeprefix("const META = ").removesuffix(";"))
    assert hostile_model in meta["options"]["checkpoint"] and "<" not in Page(index).scripts[0]
    assert "<option value=\"${esc(v)}\">${esc(META.labels[v] || v)}</option>" in index
