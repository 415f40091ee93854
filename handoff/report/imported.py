"""The report's lines on what `handoff import` did beyond re-evaluating rewards: the simulations
whose task was recovered (with the evidence) or could not be attributed (left out)."""

from __future__ import annotations

from collections.abc import Callable

from handoff.rundir import ImportSection


def attribution_lines(section: ImportSection, table: Callable[[list[str], list[list]], list[str]]) -> list[str]:
    if not section.attributions:
        return []
    checkpoint = {f.path: f.checkpoint for f in section.files}
    return ["### Task ids recovered or left out", "",
            ("The file's task id was missing or contradicted by the simulation's recorded checks (and their "
             "action ids) and the identifiers its user gave (handoff.task_identity); re-evaluated against the "
             "recovered task. "
             "Without a task (ambiguous, unmatched) the simulation is left out of the metrics."), ""] + table(
        ["checkpoint", "simulation", "given id", "task", "status", "evidence"],
        [[checkpoint[a.file], a.index, a.given if a.given is not None else "-", a.task_id or "-", a.status,
          a.evidence.replace("|", "/")] for a in section.attributions])


SMALL_SHARE = 0.05
"""A file with more than this share of its simulations left out of the metrics is warned about."""
MARKED = 0.05
"""A kept subset whose mean reward differs from the file's own by more than this is warned about."""
LIKELY_CAUSE = {
    "no task": ("simulations no single pinned task explains (twin tasks the evidence cannot tell apart, or tasks "
                "the pinned tau2 lacks)"),
    "failed to replay": "dialogues the pinned tau2 does not replay (another tau2's tools or database)",
    "reward mismatch": "rewards the pinned tasks grade otherwise (ids naming other tasks, or tasks changed since)",
    "drifted": "tasks whose definition in the file differs from the pinned one (another tau2 version)",
}


def left_out_warnings(section: ImportSection | None) -> list[str]:
    """One line per file whose metrics leave out more than a small share of it, or whose kept
    episodes' mean reward is markedly not the file's own."""
    lines = []
    for f in section.files if section is not None else []:
        if f.kept is None:
            continue
        out = f.episodes - f.kept
        if out > SMALL_SHARE * f.episodes:
            reasons = ", ".join(f"{n} {why}" for why, n in sorted(f.left_out.items(), key=lambda kv: -kv[1]))
            cause = LIKELY_CAUSE.get(max(f.left_out, key=f.left_out.get), "") if f.left_out else ""
            lines.append(f"{f.checkpoint} ({f.domain}): {f.kept} of {f.episodes} simulations in the metrics, "
                         f"{out} left out ({reasons}); likely cause: {cause}")
        if f.recorded_mean is not None and f.kept_mean is not None and abs(f.recorded_mean - f.kept_mean) > MARKED:
            lines.append(f"{f.checkpoint} ({f.domain}): the file's own mean reward is {f.recorded_mean:.3f} over its "
                         f"{f.episodes} simulations, the {f.kept} kept re-evaluate to {f.kept_mean:.3f}: its metrics "
                         "do not describe the whole file")
    return lines


def episodes_note(section: ImportSection | None, checkpoint: str, domain: str) -> str:
    """`of N, k left out` beside a headline row's episodes when its files lost some."""
    files = [f for f in section.files if f.checkpoint == checkpoint and domain in ("all", f.domain)
             and f.kept is not None] if section is not None else []
    total, kept = sum(f.episodes for f in files), sum(f.kept for f in files)
    return f" of {total}, {total - kept} left out" if total > kept else ""


def drift_lines(section: ImportSection | None) -> list[str]:
    """One line per file that differs from the pinned tau2: its tasks (which parts), the user
    simulator's guidelines, the policy, and what became of its episodes."""
    lines = []
    for f in section.files if section is not None else []:
        drift = f.drift
        if drift is None:
            continue
        what = []
        if drift.domain_variant:
            what.append(f"its domain {drift.domain_variant!r} is a policy variant, imported as {f.domain}")
        if drift.tasks:
            fate = "kept, marked as drifted" if drift.kept else "left out of the metrics; --keep-drifted keeps them"
            what.append(f"{len(drift.tasks)} task(s) differ from the pinned ones ({fate}): "
                        + "; ".join(f"{i} ({', '.join(parts)})" for i, parts in drift.tasks.items()))
        if drift.user_guidelines_differ:
            what.append("the user simulator's global_simulation_guidelines differ from the pinned tau2's "
                        "(its users are not ours: comparable with nothing)")
        if drift.policy_differs:
            what.append("its domain policy differs from the pinned tau2's")
        if what:
            lines.append(f"{f.checkpoint} ({f.domain}, tau2 commit {drift.tau2_commit or 'not recorded'}): "
                         + "; ".join(what))
    return lines


def drift_note(section: ImportSection | None, checkpoint: str, domain: str, task_id: str) -> str | None:
    """Why an imported episode is not comparable with runs on the pinned tau2 (its episode page and
    the episode index say it): its task differs from the pinned one (kept by --keep-drifted), its
    file is a policy variant, or its file's user simulator guidelines or policy differ; None else."""
    entry = next((f for f in section.files if (f.checkpoint, f.domain) == (checkpoint, domain)), None) \
        if section is not None else None
    drift = entry.drift if entry is not None else None
    if drift is None:
        return None
    why = []
    if task_id in drift.tasks:
        why.append(f"task {task_id} differs from the pinned one ({', '.join(drift.tasks[task_id])}), kept by "
                   "--keep-drifted")
    if drift.domain_variant:
        why.append(f"a policy variant ({drift.domain_variant}) imported as {domain}")
    if drift.user_guidelines_differ:
        why.append("the file's user simulator guidelines differ from the pinned tau2's")
    if drift.policy_differs:
        why.append("the file's policy differs from the pinned tau2's")
    return "; ".join(why) or None


def replay_error_lines(section: ImportSection, table: Callable[[list[str], list[list]], list[str]]) -> list[str]:
    """The episodes tau2 could not replay: a row each (the error's first line, the message where the
    replay diverged), then each error whole."""
    if not section.replay_errors:
        return []
    checkpoint = {f.path: f.checkpoint for f in section.files}
    lines = ["### Replay errors", ""] + table(
        ["checkpoint", "task", "trial", "diverged at message", "error"],
        [[checkpoint[e.file], e.task_id, e.trial, "-" if e.message_index is None else e.message_index,
          f"`{(e.error.splitlines() or [''])[0].replace('`', '')}`"] for e in section.replay_errors])
    for e in section.replay_errors:
        lines += [f"{checkpoint[e.file]}, task {e.task_id} trial {e.trial}:", "", "```",
                  e.error.replace("```", "'''"), "```", ""]
    return lines
