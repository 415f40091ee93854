"""The run's episode pages (docs/reports.md, "Episodes"): a transcript page per episode and an
index of all episodes, filterable and sortable, under report/episodes/:

    index.html                     the index (vanilla JS; filters live in the URL's #fragment)
    data/<checkpoint>__<domain>.js the index rows of one (checkpoint, domain), loaded when needed
    transcripts/<shard>/<episode>.html   one page per episode, a directory per shard

Pages are written incrementally, like the reducer: a shard's directory is rewritten only when its
content, the scorer or this renderer changed (its .stamp says which), so a resumed run renders only
its new shards. The index rows come from the reducer's scores; the transcripts read the shards.
`link(...)` gives the index URL of a filter; the report's numbers link there.
"""

from __future__ import annotations

import hashlib
import json
import re
import shutil
from collections import defaultdict
from html import escape
from pathlib import Path
from urllib.parse import urlencode

from handoff.records import read_shard, write_atomic
from handoff.report.imported import drift_note
from handoff.report.reducer import Reduction, cache_key
from handoff.report.search import SEARCH_FILE, search_text
from handoff.report.transcripts import page, transcript_html
from handoff.rules import FormatKind, Outcome, RuleId
from handoff.rules.outcome import OutcomeDetail
from handoff.rules.violations import SUBSTANTIVE_RULES as SUBSTANTIVE_RULES_IDS
from handoff.rundir import RunDir
from handoff.scoring import ScoredEpisode, trajectory_of
from handoff.tasks.ids import task_slug

INDEX = "episodes/index.html"  # relative to report/
FILTERS = ("checkpoint", "domain", "rule", "outcome", "violation", "format", "termination", "initiator", "detail",
           "episode_detail")
NO_HANDOFF = "none"  # the initiator filter's value for an episode without a hand-off
TRANSFERRED = "|".join(o.value for o in Outcome if o.transferred)
SHOULD_TRANSFER = "|".join(o.value for o in Outcome if o.should_transfer)
NOT_CORRECT_NO_TRANSFER = "|".join(o.value for o in Outcome if o is not Outcome.CORRECT_NO_TRANSFER)
SUBSTANTIVE_RULES = "|".join(r.value for r in SUBSTANTIVE_RULES_IDS)  # the violation filter of "substantive"


def natural_key(task_id: str) -> tuple:
    """Task ids in numeric order (1, 2, 10, then explicit_request-12-insist): digit runs compare as numbers."""
    return tuple((0, int(part), "") if part.isdigit() else (1, 0, part) for part in re.split(r"(\d+)", task_id) if part)


def slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", text)


def link(**filters) -> str:
    """The index URL (relative to report/) showing the episodes behind a number: `filters` of
    FILTERS (a value of several, joined by |) plus `sort`; None and "all" mean no filter."""
    kept = {k: v for k, v in filters.items() if v not in (None, "", "all")}
    return INDEX + ("#" + urlencode(kept) if kept else "")


def episode_href(shard: str, ep: ScoredEpisode) -> str:
    """A transcript page, relative to report/episodes/."""
    return f"transcripts/{slug(shard)}/{slug(ep.model)}__{ep.score.domain}__{task_slug(ep.score.task_id)}__{ep.trial}.html"


def _renderer_hash() -> str:
    """Changes when the transcript renderer does: pages made by another one are rewritten."""
    here = Path(__file__).parent
    digest = hashlib.sha256()
    for name in ("transcripts.py", "episodes.py"):
        digest.update((here / name).read_bytes())
    return digest.hexdigest()[:16]


def _stamp(run: RunDir, shard: str, renderer: str) -> str:
    """What a shard's pages were made from: the score cache's key (shard checksum, scorer) + renderer."""
    return json.dumps({**cache_key(run, shard), "renderer": renderer})


def write_transcripts(run: RunDir, reduction: Reduction) -> int:
    """Write the transcript pages of every shard whose pages are missing or stale; remove those
    of shards that are gone. Returns the number of pages written."""
    root, renderer, written = run.report / "episodes" / "transcripts", _renderer_hash(), 0
    for shard, scored in reduction.by_shard.items():
        folder, stamp = root / slug(shard), _stamp(run, shard, renderer)
        stamp_path = folder / ".stamp"
        if stamp_path.is_file() and stamp_path.read_text() == stamp:
            continue
        shutil.rmtree(folder, ignore_errors=True)
        folder.mkdir(parents=True)
        by_key, texts = {ep.key: ep for ep in scored}, []
        for record in read_shard(run.shard_path(shard)):
            ep = by_key[record.key]
            back = "../../" + link(checkpoint=ep.model, domain=ep.score.domain).removeprefix("episodes/")
            nav = (f"<p><a href='{back}'>&larr; episodes of {escape(ep.model)} / {escape(ep.score.domain)}</a></p>"
                   + drift_banner(drift_note(run.manifest.imported, ep.model, ep.score.domain, ep.score.task_id)))
            traj = trajectory_of(record)
            (root.parent / episode_href(shard, ep)).write_text(
                page(f"{ep.model} {ep.score.domain} {ep.score.task_id} trial {ep.trial}",
                     nav + transcript_html(record, ep, traj)))
            texts.append([episode_href(shard, ep), search_text(traj)])
            written += 1
        write_atomic(folder / SEARCH_FILE, "handoffText(" + json.dumps(texts, separators=(",", ":")) + ");\n")
        write_atomic(stamp_path, stamp)  # last: an interrupted shard is redone next time
    live = {slug(s) for s in reduction.by_shard}
    for stale in (p for p in root.glob("*") if p.name not in live) if root.is_dir() else ():
        shutil.rmtree(stale)
    return written


def drift_banner(note: str | None) -> str:
    """The mark an imported episode's page carries when it is not comparable with the pinned tau2's."""
    return "" if note is None else (f"<p class='drifted' id='drift' style='color:#8a5a00'><b>Drifted from the pinned tau2</b>: "
                                    f"{escape(note)}. Not comparable with runs on the pinned tasks.</p>")


def index_row(shard: str, ep: ScoredEpisode, drift: str | None = None) -> list:
    """One row of the index data (its checkpoint, step and domain are the data file's); `drift`:
    why an imported episode is not comparable with the pinned tau2's (handoff.report.imported)."""
    s = ep.score
    return [s.task_id, ep.trial, s.label.rule, s.outcome.value, s.handoff_turn,
            " ".join(sorted({v.rule.value for v in s.violations})),
            " ".join(sorted({f.kind.value for f in s.format_errors})), s.termination_reason,
            s.tau2_reward, round(s.reward, 4), episode_href(shard, ep),
            s.handoff_initiator.value if s.handoff_initiator else NO_HANDOFF,
            s.outcome_detail().value, s.outcome_detail(episode=True).value, drift]


def write_index(run: RunDir, reduction: Reduction) -> Path:
    """index.html and one data file per (checkpoint, domain)."""
    folder = run.report / "episodes"
    rows: dict[tuple[str, int, str], list] = defaultdict(list)
    shards: dict[tuple[str, int, str], set[str]] = defaultdict(set)  # whose search texts a slice needs
    for shard, scored in reduction.by_shard.items():
        for ep in scored:
            drift = drift_note(run.manifest.imported, ep.model, ep.score.domain, ep.score.task_id)
            rows[(ep.model, ep.step, ep.score.domain)].append((ep.key, index_row(shard, ep, drift)))
            shards[(ep.model, ep.step, ep.score.domain)].add(shard)
    slices, data_dir = [], folder / "data"
    data_dir.mkdir(parents=True, exist_ok=True)
    for (model, step, domain), keyed in sorted(rows.items(), key=lambda kv: (kv[0][1], kv[0][0], kv[0][2])):
        name = f"{slug(model)}__{domain}"
        body = json.dumps([row for _, row in sorted(keyed, key=lambda kr: (natural_key(kr[1][0]), kr[0]))],
                          separators=(",", ":"))
        write_atomic(data_dir / f"{name}.js", f"handoffRows({json.dumps(name)},{body});\n")
        slices.append({"id": name, "checkpoint": model, "step": step, "domain": domain,
                       "file": f"{name}.js", "n": len(keyed),
                       "search": [f"transcripts/{slug(s)}/{SEARCH_FILE}" for s in sorted(shards[(model, step, domain)])]})
    for stale in set(data_dir.glob("*.js")) - {data_dir / s["file"] for s in slices}:
        stale.unlink()
    meta = {"run": reduction.run, "total": reduction.n_episodes, "slices": slices, "options": _options(reduction),
            "labels": {SUBSTANTIVE_RULES: "substantive (any rule but the style rule)"}}
    path = folder / "index.html"
    fill = {"TITLE": escape(f"Episodes: {reduction.run}"), "META": json.dumps(meta).replace("<", "\\u003c")}
    write_atomic(path, re.sub("__(TITLE|META)__", lambda m: fill[m[1]], INDEX_PAGE))  # one pass: no name fills a slot
    return path


def _options(reduction: Reduction) -> dict[str, list[str]]:
    eps = reduction.episodes
    return {
        "checkpoint": [m for m, _ in reduction.checkpoints()],
        "domain": reduction.domains(),
        "rule": sorted({e.score.label.rule for e in eps}),
        "outcome": [o.value for o in Outcome],
        "violation": ["any", "none", SUBSTANTIVE_RULES, *(r.value for r in RuleId)],
        "format": ["any", "none", *(k.value for k in FormatKind)],
        "termination": sorted({e.score.termination_reason for e in eps}),
        "initiator": ["user", "agent_offer", "agent", NO_HANDOFF],
        "detail": [d.value for d in OutcomeDetail],
        "episode_detail": [d.value for d in OutcomeDetail],
    }


def write_episode_pages(run_dir: str | Path, reduction: Reduction) -> dict[str, Path]:
    """The transcripts that are new or stale, then the index; their paths."""
    run = RunDir(run_dir)
    write_transcripts(run, reduction)
    return {"episodes_index": write_index(run, reduction), "transcripts": run.report / "episodes" / "transcripts"}


INDEX_PAGE = r"""<!doctype html>
<html><head><meta charset="utf-8"><title>__TITLE__</title>
<style>
body{font-family:system-ui,sans-serif;font-size:14px;margin:1em 2em}
#filters label{margin-right:10px;white-space:nowrap}#filters input{width:5em}#filters input.text{width:16em}#filters{margin:8px 0;line-height:2}
table{border-collapse:collapse;font-size:13px}td,th{border:1px solid #ccc;padding:2px 6px}
th{cursor:pointer;background:#f0f0f0}th.sorted{background:#dde8f5}
.correct_handoff,.correct_no_transfer{color:#1d7a36}.missed_handoff,.unneeded_handoff{color:#b22a1d;font-weight:600}
#pager{margin:8px 0}.drifted{color:#8a5a00;font-weight:600}
</style></head><body>
<h1>__TITLE__</h1>
<p><a href="../report.html">&larr; report</a> &middot; <b><span id="count" data-n="">loading</span></b>
&middot; <a href="#">clear filters</a></p>
<form id="filters" onsubmit="return false"></form>
<table id="episodes"><thead><tr></tr></thead><tbody></tbody></table>
<div id="pager"><button id="prev">&larr; previous</button> <span id="page"></span> <button id="next">next &rarr;</button></div>
<script>const META = __META__;</script>
<script>
"use strict";
const FILTERS = ["checkpoint", "domain", "rule", "outcome", "violation", "format", "termination", "initiator", "detail",
  "episode_detail"];
const COLS = [["checkpoint", "checkpoint"], ["step", "step"], ["domain", "domain"], ["task", "task"],
  ["trial", "trial"], ["rule", "label rule"], ["outcome", "outcome"], ["turn", "hand-off turn"], ["initiator", "initiator"],
  ["violations", "violations"], ["formats", "format errors"], ["termination", "termination"],
  ["tau2", "tau2 reward"], ["reward", "reward"]];
const PAGE = 100;
const rows = [], loaded = {}, requested = {}, TEXT = {};
function handoffRows(id, data) {
  const at = META.slices.findIndex(x => x.id === id), s = META.slices[at];
  data.forEach((r, i) => rows.push({order: at * 1e7 + i, checkpoint: s.checkpoint, step: s.step, domain: s.domain, task: r[0],
    trial: r[1], rule: r[2], outcome: r[3], turn: r[4], violations: r[5], formats: r[6], termination: r[7],
    tau2: r[8], reward: r[9], href: r[10], initiator: r[11], detail: r[12], episode_detail: r[13], drift: r[14]}));
  loaded[id] = true;
}
function handoffText(list) { for (const [href, text] of list) TEXT[href] = text; }
const params = () => new URLSearchParams(location.hash.slice(1));
const oneOf = (value, wanted) => !wanted || wanted.split("|").includes(String(value));
function hasFinding(list, wanted) {
  if (!wanted) return true;
  if (wanted === "any") return list !== "";
  if (wanted === "none") return list === "";
  return wanted.split("|").some(w => list.split(" ").includes(w));
}
function matches(r, p) {
  for (const f of ["checkpoint", "domain", "rule", "outcome", "termination", "initiator", "detail", "episode_detail"])
    if (!oneOf(r[f], p.get(f))) return false;
  if (!hasFinding(r.violations, p.get("violation")) || !hasFinding(r.formats, p.get("format"))) return false;
  const q = (p.get("text") || "").trim().toLowerCase();  // free text: user, agent and tool calls
  if (q && !(TEXT[r.href] || "").includes(q)) return false;
  const t = p.get("tau2_min"), w = p.get("reward_min");
  if (t && !(r.tau2 !== null && r.tau2 >= +t)) return false;
  return !(w && r.reward < +w);
}
function load(src, id) {
  if (requested[id]) return;
  requested[id] = true;
  const el = document.createElement("script");
  el.src = src;
  el.onload = () => { loaded[id] = true; render(); };
  document.head.appendChild(el);
}
function ensureLoaded(p) {
  const wanted = META.slices.filter(s => oneOf(s.checkpoint, p.get("checkpoint")) && oneOf(s.domain, p.get("domain")));
  const files = wanted.filter(s => !loaded[s.id]).map(s => ["data/" + s.file, s.id]);
  if (p.get("text")) for (const s of wanted) for (const f of s.search) if (!loaded[f]) files.push([f, f]);
  for (const [src, id] of files) load(src, id);
  return files.length === 0;
}
function buildForm() {
  const form = document.getElementById("filters");
  for (const f of FILTERS) {
    const opts = ['<option value="">any</option>'].concat(META.options[f].map(v => `<option value="${esc(v)}">${esc(META.labels[v] || v)}</option>`));
    form.insertAdjacentHTML("beforeend", `<label>${f} <select name="${f}">${opts.join("")}</select></label>`);
  }
  form.insertAdjacentHTML("beforeend", '<label>text <input name="text" type="search" class="text" ' +
    'placeholder="in user, agent, tool calls"></label>' +
    '<label>tau2 reward &ge; <input name="tau2_min" type="number" step="0.1" size="4"></label>' +
    '<label>reward &ge; <input name="reward_min" type="number" step="0.1" size="4"></label>');
  form.addEventListener("change", () => {
    const p = params(), q = new URLSearchParams();
    for (const el of form.elements) if (el.value) q.set(el.name, el.value);
    if (p.get("sort")) q.set("sort", p.get("sort"));
    location.hash = q.toString();
  });
  document.querySelector("#episodes thead tr").innerHTML = COLS.map(([k, t]) => `<th data-key="${k}">${t}</th>`).join("");
  document.querySelector("#episodes thead").addEventListener("click", e => {
    const key = e.target.dataset.key;
    if (!key) return;
    const p = params();
    p.set("sort", p.get("sort") === key ? "-" + key : key);
    p.delete("page");
    location.hash = p.toString();
  });
  document.getElementById("prev").onclick = () => turnPage(-1);
  document.getElementById("next").onclick = () => turnPage(1);
}
function turnPage(by) {
  const p = params();
  p.set("page", Math.max(1, (+p.get("page") || 1) + by));
  location.hash = p.toString();
}
function syncForm(p) {
  for (const el of document.getElementById("filters").elements) {
    const v = p.get(el.name) || "";
    if (el.tagName === "SELECT" && v && ![...el.options].some(o => o.value === v)) el.add(new Option(v.split("|").join(" or "), v));
    el.value = v;
  }
}
function compare(key) {
  const desc = key.startsWith("-"), k = desc ? key.slice(1) : key;
  return (a, b) => {
    const x = a[k], y = b[k];
    const c = x === y ? 0 : x === null ? 1 : y === null ? -1 : typeof x === "string" && typeof y === "string"
      ? x.localeCompare(y, "en", {numeric: true}) : x < y ? -1 : 1;  // task 2 before task 10
    return desc ? -c : c;
  };
}
const esc = v => v === null ? "" : String(v).replace(/[&<>"]/g, c => ({"&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;"}[c]));
function render() {
  const p = params();
  syncForm(p);
  const count = document.getElementById("count");
  if (!ensureLoaded(p)) { count.textContent = "loading"; return; }
  let sel = rows.filter(r => matches(r, p));
  sel.sort(compare("order"));  // the run's order (slices load in any order); a sort is stable on it
  if (p.get("sort")) sel.sort(compare(p.get("sort")));
  const pages = Math.max(1, Math.ceil(sel.length / PAGE)), page = Math.min(pages, +p.get("page") || 1);
  const shown = sel.slice((page - 1) * PAGE, page * PAGE);
  document.querySelector("#episodes tbody").innerHTML = shown.map(r => "<tr>" + COLS.map(([k]) =>
    k === "task" ? `<td><a href="${esc(r.href)}">${esc(r.task)}</a>${r.drift ? ` <span class="drifted" title="${esc(r.drift)}">drifted</span>` : ""}</td>` : `<td class="${k === "outcome" ? r.outcome : ""}">${esc(r[k])}</td>`).join("") + "</tr>").join("");
  for (const th of document.querySelectorAll("th")) th.className = (p.get("sort") || "").replace("-", "") === th.dataset.key ? "sorted" : "";
  count.dataset.n = sel.length;
  count.textContent = `${sel.length} of ${META.total} episodes`;
  document.getElementById("page").textContent = `page ${page} of ${pages}`;
}
buildForm();
window.addEventListener("hashchange", render);
render();
</script></body></html>
"""
