"""Which pinned task each simulation of an imported tau2 file ran (`handoff import`).

The id a file gives is not trusted: a published file can have its simulations renumbered, or no
`task_id` at all. Each simulation carries two kinds of evidence of its task:

- what tau2 recorded when it graded it (`reward_info`): the reference actions it checked
  (`action_checks`), the information it looked for (`communicate_checks`) and the NL assertions.
  These are looked up in the pinned tasks themselves (an action_id's numeric prefix is not its
  task's id: in the pinned retail tasks 95-113 carry the next task's prefix);
- the scenario's identifiers the simulated user gives: user ids, names, zip codes, e-mail
  addresses, order and reservation ids.

The given id is confirmed when the recorded checks are its task's, their recorded action ids are
not another such task's, and its identifiers are not outdone by another task's. Otherwise the task
is recovered: the pinned tasks whose checks the simulation recorded, narrowed to the one whose own
action ids tau2 recorded with them (each reference action's `action_id` is unique among a domain's
pinned tasks: looked up there, never parsed), else to those whose identifiers the user gave most
of; then tasks every trial of which another simulation already holds are struck off. Anything else
is `ambiguous` or `unmatched`: reported and left out, never guessed.

Twin tasks have the same checks and the same identifiers; their scenarios differ only in how the
user behaves (retail 41/42, 71/72, 83/84, 96/97, airline 17/22, 48/49). Their action ids tell them
apart (retail 41's are 41_0..41_9, 42's 42_0..42_9; 96's 97_0, 97_1 and 97's 98_0, 98_1); without
action ids recorded they stay ambiguous. The scenarios' wording is not used: pairing twins by it
attributed airline 17/22 the wrong way round in a file whose ids are known.
"""

from __future__ import annotations

import json
import re
from collections import Counter, defaultdict
from dataclasses import dataclass, replace
from functools import cache

CONFIRMED, RECOVERED, AMBIGUOUS, UNMATCHED = "confirmed", "recovered", "ambiguous", "unmatched"

_IDENTIFIER_PATTERNS = (
    r"\b[a-z]+_[a-z]+_\d{4}\b",  # user ids (retail and airline)
    r"#?W\d{7}\b",  # retail order ids
    r"\b\d{5}\b",  # zip codes
    r"\b[\w.+-]+@[\w-]+\.[\w.]+\b",  # e-mail addresses
    r"\b(?=[A-Z0-9]*\d)(?=[A-Z0-9]*[A-Z])[A-Z0-9]{6}\b",  # airline reservation ids
)
_NAME = re.compile(r"\b([A-Z][a-z]+ [A-Z][a-z]+)\b")


@dataclass(frozen=True)
class Identity:
    """One simulation's task: `task_id` None when ambiguous or unmatched; `evidence` says why."""

    index: int
    given: str | None
    task_id: str | None
    status: str
    evidence: str
    candidates: tuple[str, ...] = ()


def identify(simulations: list[dict], domain: str, trials: int = 1, embedded: dict | None = None) -> list[Identity]:
    """The task of each simulation (see the module's doc). `embedded`: the file's own tasks by id
    (tau2 Task), against which a given id is checked too (a drifted task keeps its id)."""
    pool = _pool(domain)
    found = [_identify_one(i, sim, pool, embedded or {}) for i, sim in enumerate(simulations)]
    return _strike_full(found, trials)


@dataclass(frozen=True)
class _Pool:
    """The pinned tasks of a domain and what each offers as evidence."""

    domain: str
    tasks: dict  # id -> tau2 Task
    criteria: dict  # id -> {part: Counter}
    identifiers: dict  # id -> frozenset[str]
    action_owner: dict  # action_id -> the id of the one task whose reference action it is


@cache
def _pool(domain: str) -> _Pool:
    from handoff.tasks.upstream import upstream_tasks

    tasks = {t.id: t for t in upstream_tasks(domain)}
    return _Pool(domain, tasks, {i: task_criteria(t) for i, t in tasks.items()},
                 {i: task_identifiers(t) for i, t in tasks.items()}, _action_owners(tasks.values()))


def _action_owners(tasks) -> dict[str, str]:
    """Each reference action's id -> its task's id, for the ids exactly one task uses."""
    owners = defaultdict(set)
    for task in tasks:
        for action in (task.evaluation_criteria.actions if task.evaluation_criteria else None) or []:
            owners[action.action_id].add(task.id)
    return {action_id: next(iter(ids)) for action_id, ids in owners.items() if len(ids) == 1}


def recorded_action_ids(reward_info: dict | None) -> list[str]:
    """The action ids of the reference actions tau2 checked, as it recorded them."""
    checks = (reward_info or {}).get("action_checks")
    return [str(c["action"]["action_id"]) for c in checks if isinstance(c.get("action"), dict)
            and c["action"].get("action_id")] if isinstance(checks, list) else []


def _owner(action_ids: list[str], pool: _Pool) -> str | None:
    """The one pinned task whose reference actions all these ids name; None when none or several."""
    owners = {pool.action_owner.get(a) for a in action_ids}
    return next(iter(owners)) if len(owners) == 1 and None not in owners else None


def _canonical(value) -> str:
    return json.dumps(value, sort_keys=True, default=str)


def _loose(text) -> str:
    """A check's text without case, spaces and punctuation (tasks fixed typos in them since)."""
    return re.sub(r"[^a-z0-9]+", "", str(text).lower())


def task_criteria(task) -> dict[str, Counter]:
    """What tau2 checks when it grades a simulation of `task`, part by part."""
    crit = task.evaluation_criteria
    actions = (crit.actions if crit else None) or []
    return {"actions": Counter((a.name, _canonical(a.arguments or {})) for a in actions),
            "communicate": Counter(map(_loose, (crit.communicate_info if crit else None) or [])),
            "nl_assertions": Counter(map(_loose, (crit.nl_assertions if crit else None) or []))}


def recorded_criteria(reward_info: dict | None) -> dict[str, Counter]:
    """The same parts as tau2 recorded them in a simulation's reward_info (a part it did not record
    is absent: it says nothing)."""
    info = reward_info or {}
    parts = {}
    if isinstance(info.get("action_checks"), list):
        parts["actions"] = Counter((c["action"]["name"], _canonical(c["action"].get("arguments") or {}))
                                   for c in info["action_checks"])
    if isinstance(info.get("communicate_checks"), list):
        parts["communicate"] = Counter(_loose(c.get("info")) for c in info["communicate_checks"])
    if isinstance(info.get("nl_assertions"), list) and info["nl_assertions"]:
        parts["nl_assertions"] = Counter(_loose(c.get("nl_assertion")) for c in info["nl_assertions"])
    return parts


def _agrees(recorded: dict[str, Counter], criteria: dict[str, Counter]) -> bool:
    return all(criteria[part] == value for part, value in recorded.items())


def task_identifiers(task) -> frozenset[str]:
    """The identifiers a task's scenario gives its user (ids, names, zip codes, e-mails)."""
    scenario = task.user_scenario.instructions if task.user_scenario else None
    if scenario is None or isinstance(scenario, str):
        text, known = str(scenario or ""), ""
    else:
        known = scenario.known_info or ""
        text = " ".join(filter(None, (known, scenario.reason_for_call, scenario.task_instructions)))
    found = {m.group(0).lstrip("#") for pattern in _IDENTIFIER_PATTERNS for m in re.finditer(pattern, text)}
    return frozenset(found | {m.group(1) for m in _NAME.finditer(known)})


def user_text(sim: dict) -> str:
    return "\n".join(str(m.get("content") or "") for m in sim.get("messages") or [] if m.get("role") == "user")


def _given_in(identifiers: frozenset[str], text: str) -> list[str]:
    lowered = text.lower()
    return sorted(i for i in identifiers if i.lower() in lowered)


def _describe(recorded: dict[str, Counter]) -> str:
    if not recorded:
        return "no checks recorded"
    return ", ".join(f"{sum(value.values())} {part}" for part, value in recorded.items())


def _identify_one(index: int, sim: dict, pool: _Pool, embedded: dict) -> Identity:
    given = None if sim.get("task_id") is None else str(sim["task_id"])
    recorded = recorded_criteria(sim.get("reward_info"))
    action_ids = recorded_action_ids(sim.get("reward_info"))
    owner = _owner(action_ids, pool)
    text = user_text(sim)
    said = {i: _given_in(ids, text) for i, ids in pool.identifiers.items()}
    if given is not None and _given_holds(given, recorded, owner, text, said, pool, embedded):
        evidence = f"given id; recorded checks ({_describe(recorded)}) are its task's"
        if said.get(given):
            evidence += f"; the user gave {', '.join(said[given])}"
        return Identity(index, given, given, CONFIRMED, evidence)
    return _recover(index, given, recorded, action_ids, said, pool)


def _given_holds(given: str, recorded: dict, owner: str | None, text: str, said: dict, pool: _Pool,
                 embedded: dict) -> bool:
    """The given id's task (pinned, or the file's own under that id) recorded these checks, their
    action ids are not those of another task that recorded the same checks (its twin), and, unless
    they include reference actions, another task's identifiers are not given more than its own."""
    from handoff.tasks import get_task

    try:
        pinned = get_task(pool.domain, given)
    except (KeyError, ValueError):
        return False
    if not any(_agrees(recorded, task_criteria(t)) for t in (pinned, embedded.get(given)) if t is not None):
        return False
    if owner not in (None, given) and _agrees(recorded, pool.criteria[owner]):
        return False
    return bool(recorded.get("actions")) or len(_given_in(task_identifiers(pinned), text)) >= max(map(len, said.values()), default=0)


def _recover(index: int, given: str | None, recorded: dict, action_ids: list[str], said: dict, pool: _Pool) -> Identity:
    agreeing = [i for i, crit in pool.criteria.items() if _agrees(recorded, crit)]
    strong, owner = bool(recorded.get("actions")), _owner(action_ids, pool)
    twins = agreeing if strong and owner in agreeing and len(agreeing) > 1 else []
    agreeing = [owner] if twins else agreeing
    most = max((len(said[i]) for i in agreeing), default=0)
    narrowed = [i for i in agreeing if len(said[i]) == most] if most else (agreeing if strong else [])
    was = "no id" if given is None else f"given id {given!r} contradicted"
    if len(narrowed) == 1:
        (task,) = narrowed
        evidence = f"{was}; recorded checks ({_describe(recorded)}) are task {task}'s"
        if twins:
            evidence += (f" and task {', '.join(t for t in twins if t != task)}'s, but their recorded action ids "
                         f"({_span(action_ids)}) are task {task}'s alone")
        elif strong and len(agreeing) == 1:
            evidence += " alone"
        if said[task]:
            evidence += f"; the user gave {', '.join(said[task])}"
        return Identity(index, given, task, RECOVERED, evidence)
    if not narrowed:
        why = "no pinned task recorded these checks" if not agreeing else "the user gave no task's identifiers"
        return Identity(index, given, None, UNMATCHED, f"{was}; {why} ({_describe(recorded)})")
    return Identity(index, given, None, AMBIGUOUS,
                    f"{was}; tasks {', '.join(narrowed)} match equally ({_describe(recorded)}"
                    + (f"; the user gave {', '.join(said[narrowed[0]])})" if most else ")"), tuple(narrowed))


def _span(action_ids: list[str]) -> str:
    """Recorded action ids, as `41_0..41_9` (in the order tau2 recorded them)."""
    return action_ids[0] if len(action_ids) == 1 else f"{action_ids[0]}..{action_ids[-1]}"


def _strike_full(found: list[Identity], trials: int) -> list[Identity]:
    """An ambiguous simulation whose other candidates are all held, every trial, by simulations
    attributed already gets the one left, if no more simulations than its free trials want it."""
    holders = defaultdict(list)
    for f in found:
        if f.task_id is not None:
            holders[f.task_id].append(f.index)
    free = {f.index: [c for c in f.candidates if len(holders[c]) < trials] for f in found if f.status == AMBIGUOUS}
    wanting = Counter(left[0] for left in free.values() if len(left) == 1)
    out = []
    for f in found:
        left = free.get(f.index, [])
        if len(left) == 1 and wanting[left[0]] <= trials - len(holders[left[0]]):
            taken = ", ".join(f"{c} (simulation {', '.join(map(str, holders[c]))})" for c in f.candidates
                              if c != left[0])
            f = replace(f, task_id=left[0], status=RECOVERED,
                        evidence=f"{f.evidence}; the others are held already: {taken}", candidates=())
        out.append(f)
    return out
