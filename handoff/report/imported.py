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
            "The file's task id was missing or contradicted by the simulation's recorded checks and the "
            "identifiers its user gave (handoff.task_identity); re-evaluated against the recovered task. "
            "Without a task (ambiguous, unmatched) the simulation is left out of the metrics.", ""] + table(
        ["checkpoint", "simulation", "given id", "task", "status", "evidence"],
        [[checkpoint[a.file], a.index, a.given if a.given is not None else "-", a.task_id or "-", a.status,
          a.evidence.replace("|", "/")] for a in section.attributions])
