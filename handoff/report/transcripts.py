"""An episode as a person reads it: the task, every message in order, the rules' findings at the
turn where they happen and the outcome, as one self-contained HTML fragment (docs/reports.md,
"Transcripts"). The transcript page, the flips page of `handoff compare --html` and the W&B
episodes table all show this fragment; nothing here judges an episode: the findings are the
EpisodeScore's (handoff.scoring), the turns are the rules' (handoff.rules).
"""

from __future__ import annotations

import json
from html import escape

from handoff.records import EpisodeRecord, read_shard
from handoff.report.cost_view import episode_cost
from handoff.rules import Trajectory
from handoff.rules.attribution import offer_message, request_message
from handoff.rules.basis import RULE_BASIS
from handoff.rules.events import TERMINATION_DETAIL_INFO_KEY, TERMINATION_INFO_KEY
from handoff.rules.outcome import transfer_message
from handoff.rundir import RunDir
from handoff.scoring import ScoredEpisode, trajectory_of

FOLD_CHARS = 600
"""A tool result longer than this is folded (<details>): its first line shows, all of it opens."""

CSS = """
.ep{font-family:system-ui,sans-serif;font-size:14px;max-width:1100px}
.ep h2{font-size:18px;margin:.3em 0}.ep h3{font-size:15px;margin:.8em 0 .3em}
.ep table.kv td{padding:1px 8px;vertical-align:top;border:none}
.ep .msg{border-left:4px solid #ccc;margin:6px 0;padding:4px 8px;background:#fafafa}
.ep .msg.user{border-color:#2b7bb9;background:#eef5fb}.ep .msg.assistant{border-color:#3a9d4f}
.ep .msg.tool{border-color:#999;background:#f4f4f4}.ep .msg.dropped{border-color:#c00;border-style:dashed}
.ep .who{font-size:12px;color:#555}.ep pre{white-space:pre-wrap;margin:2px 0;font-size:12.5px}
.ep .call{font-family:monospace;font-size:12.5px;background:#fff;border:1px solid #ddd;padding:2px 4px;margin:2px 0}
.ep .finding{font-size:13px;font-weight:600;padding:2px 6px;margin:3px 0;border-radius:3px}
.ep .violation{background:#fde2e1;color:#8a1010}.ep .format{background:#fff0c2;color:#6b4e00}
.ep .transfer{background:#dceeff;color:#0b4a85}.ep .request,.ep .offer{background:#eadcff;color:#4b1d8a}.ep .basis{font-weight:400;font-style:italic}
.ep .badge{display:inline-block;padding:1px 8px;border-radius:10px;color:#fff;font-size:13px}
.ep .correct_handoff,.ep .correct_no_transfer{background:#2f8f46}
.ep .missed_handoff,.ep .unneeded_handoff{background:#c0392b}
"""


def _pre(text: str | None) -> str:
    return f"<pre>{escape(text or '')}</pre>"


def _folded(text: str) -> str:
    """A tool result: whole when short, else folded behind its first line (never cut)."""
    if len(text) <= FOLD_CHARS:
        return _pre(text)
    first = text.splitlines()[0][:160] if text.strip() else ""
    return (f"<details><summary>{escape(first)}&hellip; ({len(text):,} characters, click to open)</summary>"
            f"{_pre(text)}</details>")


def _task_section(ep: ScoredEpisode) -> str:
    label = ep.score.label
    rows = [("label", f"should_transfer = {label.should_transfer}, rule <code>{escape(label.rule)}</code>")]
    if label.reason:
        rows.append(("override reason", escape(label.reason)))
    try:
        from handoff.tasks import get_task

        instructions = get_task(ep.score.domain, ep.score.task_id).user_scenario.instructions
        for name in ("reason_for_call", "known_info", "unknown_info"):
            value = getattr(instructions, name, None)
            if value:
                rows.insert(len(rows) - 1, (name.replace("_", " "), escape(str(value))))
    except KeyError as exc:
        rows.append(("task", escape(str(exc))))
    cells = "".join(f"<tr><td><b>{k}</b></td><td>{v}</td></tr>" for k, v in rows)
    return f"<h3>Task</h3><table class='kv'>{cells}</table>"


def _findings(ep: ScoredEpisode, traj: Trajectory, format_details: dict) -> dict[int, list[str]]:
    """The findings' HTML per message index: the transfer, violations with their basis, format errors."""
    at: dict[int, list[str]] = {}
    transfer = transfer_message(traj)
    if transfer is not None:
        at.setdefault(transfer, []).append(
            f"<div class='finding transfer' data-kind='transfer'>&#8644; hand-off: transfer_to_human_agents at agent "
            f"turn {ep.score.handoff_turn}</div>")
    for where, html in _asked(ep, traj):
        at.setdefault(where, []).append(html)
    for v in ep.score.violations:
        basis = "; ".join(f"{c.source}: &ldquo;{escape(c.quote)}&rdquo;" for c in RULE_BASIS.get(v.rule, ())
                          if c.source.startswith(f"{ep.score.domain}/"))
        at.setdefault(v.turn, []).append(
            f"<div class='finding violation' data-kind='violation' data-rule='{v.rule.value}'>&#9888; policy "
            f"violation <code>{v.rule.value}</code> <span class='basis'>{basis}</span></div>")
    for f in ep.score.format_errors:
        detail = format_details.get((f.kind, f.turn), "")
        at.setdefault(f.turn, []).append(
            f"<div class='finding format' data-kind='format' data-rule='{f.kind.value}'>&#9888; format error "
            f"<code>{f.kind.value}</code>{': ' + escape(detail) if detail else ''}</div>")
    return at


def _asked(ep: ScoredEpisode, traj: Trajectory) -> list[tuple[int, str]]:
    """The first user request and agent offer before the hand-off (handoff.rules.attribution)."""
    s, out = ep.score, []
    request, offer = request_message(traj), offer_message(traj)
    if request is not None:
        drift = "; off script: the task's scenario never mentions a human" if s.user_request_offscript else ""
        out.append((request, (f"<div class='finding request' data-kind='request'>&#9995; user request for a human "
                              f"(answered at agent turn {s.user_request_turn}){drift}</div>")))
    if offer is not None:
        out.append((offer, (f"<div class='finding offer' data-kind='offer'>&#9758; agent offer of a transfer "
                            f"(agent turn {s.agent_offer_turn})</div>")))
    return out


def _message(index: int, msg, findings: list[str]) -> str:
    users = msg.role == "user" or (msg.role == "tool" and msg.requestor == "user")  # telecom: the user's own tools
    who = {"assistant": "agent", "user": "user", "tool": "tool result to the user" if users else "tool result",
           "system": "system"}[msg.role]
    parts = [f"<div class='who'>#{index} {who}{' (error)' if msg.error else ''}</div>"]
    if msg.role == "tool":
        parts.append(_folded(msg.content or ""))
    elif msg.has_text:
        parts.append(_pre(msg.content))
    for call in msg.tool_calls:
        args = json.dumps(call.arguments, ensure_ascii=False, indent=None)
        mark = "the user's tool call: " if msg.role == "user" else ""
        parts.append(f"<div class='call'>&rarr; {mark}{escape(call.name)}({escape(args)})</div>")
    side = " by-user" if users else ""
    return f"<div class='msg {msg.role}{side}' id='m{index}' data-turn='{index}'>{''.join(parts + findings)}</div>"


def _messages_section(ep: ScoredEpisode, traj: Trajectory, record: EpisodeRecord) -> str:
    details = {(e.kind, e.turn): e.detail for e in record.format_events}
    findings = _findings(ep, traj, details)
    for event in record.user_format_events:  # the user simulator's slips: shown, never the agent's
        findings.setdefault(event.turn, []).append(
            f"<div class='finding user-format' data-kind='user-format'>the user's format error "
            f"{escape(event.kind.value)}: {escape(event.detail)} (not charged to the agent)</div>")
    out = [_message(i, m, findings.get(i, [])) for i, m in enumerate(traj.messages)]
    dropped = [html for turn, items in findings.items() if turn >= len(traj.messages) for html in items]
    if dropped:  # a turn the agent never produced (docs/rules.md, "Turns")
        out.append(f"<div class='msg dropped' id='m{len(traj.messages)}' data-turn='{len(traj.messages)}'>"
                   f"<div class='who'>#{len(traj.messages)} agent turn that never became a message</div>"
                   f"{''.join(dropped)}</div>")
    return f"<h3>Messages ({len(traj.messages)})</h3>" + "".join(out)


def _outcome_section(ep: ScoredEpisode, record: EpisodeRecord, traj: Trajectory) -> str:
    s, sim = ep.score, record.simulation
    info = (sim.get("reward_info") or {}).get("info") or {}
    rows = [("termination", f"<code>{escape(s.termination_reason)}</code> (tau2 recorded "
                            f"<code>{escape(str(sim.get('termination_reason')))}</code>)")]
    if info.get(TERMINATION_INFO_KEY) or info.get(TERMINATION_DETAIL_INFO_KEY):
        rows.append(("internal stop", f"<code>{escape(str(info.get(TERMINATION_INFO_KEY, '')))}</code> "
                                      f"{escape(str(info.get(TERMINATION_DETAIL_INFO_KEY, '')))}"))
    initiator = s.handoff_initiator.value if s.handoff_initiator else "none (no hand-off)"
    ended = "; the user ended with ###TRANSFER### before any transfer call" if s.user_ended_for_transfer else ""
    rows.append(("hand-off", (f"initiator <code>{initiator}</code>; episode label should_transfer = "
                              f"{s.episode_should_transfer} (<code>{escape(s.episode_rule)}</code>), outcome "
                              f"<code>{s.outcome_detail().value}</code> by the task label, "
                              f"<code>{s.outcome_detail(episode=True).value}</code> by the episode label{ended}")))
    rows.append(("tau2 reward", "not evaluated" if s.tau2_reward is None else f"{s.tau2_reward:g}"))
    breakdown = (sim.get("reward_info") or {}).get("reward_breakdown") or {}
    if breakdown:
        rows.append(("tau2 breakdown", escape(", ".join(f"{k} = {v:g}" for k, v in breakdown.items()))))
    t = s.reward_terms
    rows.append(("reward (ADR-004)", f"<b>{s.reward:.3f}</b> = task {t.task:g} + hand-off {t.handoff:g} "
                                     f"&minus; penalty {t.penalty:g} (violations {t.violations:g}, "
                                     f"format errors {t.format_errors:g})"))
    rows.append(("tokens", f"prompt {s.prompt_tokens:,}, completion {s.completion_tokens:,}; "
                           f"{s.n_assistant_turns} agent turns"))
    rows.append(("cost", escape(episode_cost(record.usage.cost))))
    cells = "".join(f"<tr><td><b>{k}</b></td><td>{v}</td></tr>" for k, v in rows)
    return f"<h3>Outcome</h3><table class='kv'>{cells}</table>"


def transcript_html(record: EpisodeRecord, ep: ScoredEpisode, traj: Trajectory | None = None) -> str:
    """The episode as one HTML fragment (a <div class="ep">; the CSS is `CSS`)."""
    traj = traj or trajectory_of(record)
    s = ep.score
    outcome = s.outcome.value
    turn = f", hand-off at agent turn {s.handoff_turn}" if s.handoff_turn is not None else ""
    head = (f"<h2>{escape(ep.model)} (step {ep.step}) &middot; {escape(s.domain)} task {escape(s.task_id)} "
            f"&middot; trial {ep.trial}</h2><div><span class='badge {outcome}' id='outcome'>"
            f"{outcome.replace('_', ' ')}</span> {len(s.violations)} violations, {len(s.format_errors)} format "
            f"errors{turn}; seed {ep.seed}</div>")
    return (f"<div class='ep' data-outcome='{outcome}'>{head}{_task_section(ep)}"
            f"{_messages_section(ep, traj, record)}{_outcome_section(ep, record, traj)}</div>")


def page(title: str, body: str, head: str = "") -> str:
    """A standalone HTML page with the transcript CSS."""
    return (f"<!doctype html><html><head><meta charset='utf-8'><title>{escape(title)}</title>"
            f"<style>body{{margin:1em 2em;font-family:system-ui,sans-serif}}{CSS}</style>{head}</head><body>{body}</body></html>\n")


def transcripts_of(run: RunDir, wanted: dict[str, list[ScoredEpisode]]) -> dict[tuple, str]:
    """The fragments of the wanted episodes (by shard), by episode key; only their shards are read."""
    out = {}
    for shard, eps in wanted.items():
        by_key = {ep.key: ep for ep in eps}
        if by_key:
            out.update((r.key, transcript_html(r, by_key[r.key])) for r in read_shard(run.shard_path(shard))
                       if r.key in by_key)
    return out
