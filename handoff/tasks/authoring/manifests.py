"""`handoff labels build|check|override`: the derived task files, labels_v1.json, splits_v1.json, the
rendered out-of-scope catalog and the behaviour record, all generated from the pinned tau2 package,
data/scenarios and label_overrides_v1.json.

Hash chain: labels_v1.json records the sha256 of the overrides file and of each derived task file;
splits_v1.json records the sha256 of labels_v1.json; handoff.tasks.manifest_hashes() gives all of them
to the sweep.
behaviour_v1.json records tau2's rewards of scripted agents on every task, keyed by task content.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from handoff.tasks import load_tasks, paths, split_of
from handoff.tasks.authoring import behaviour, gold_policy, kinds
from handoff.tasks.authoring.catalog_doc import render_catalog
from handoff.tasks.authoring.kinds import derived_tasks
from handoff.tasks.authoring.labelling import Override, apply_override, base_label, read_overrides
from handoff.tasks.authoring.review import domain_markdown, write_review
from handoff.tasks.ids import DERIVED_KINDS, id_sort_key
from handoff.tasks.labels import ManifestError, load_labels
from handoff.tasks.upstream import (
    DOMAINS,
    SPLITS,
    TAU2_DIST,
    labelled_tasks,
    tau2_commit,
    tau2_data_sha256,
    tau2_version,
    upstream_tasks,
)

VERSION = 1


def dump_json(obj) -> bytes:
    return (json.dumps(obj, indent=2, ensure_ascii=False) + "\n").encode()


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def render(root: Path, derived: dict | None = None) -> dict[Path, bytes]:
    """Every generated file but the behaviour record (path relative to root -> bytes), from tau2, the
    scenario files and root's overrides file."""
    derived = derived or derived_tasks()
    files = {
        paths.task_file(d, k): dump_json([t.model_dump(mode="json", exclude_none=True) for t in tasks])
        for (d, k), tasks in derived.items()
    }
    tasks = {d: list(labelled_tasks(d)) + [t for k in DERIVED_KINDS for t in derived[(d, k)]] for d in DOMAINS}
    files[paths.LABELS_FILE] = _labels_json(root, tasks, {str(p): _sha(data) for p, data in sorted(files.items())})
    files[paths.SPLITS_FILE] = _splits_json(tasks, _sha(files[paths.LABELS_FILE]))
    files[paths.CATALOG_DOC] = render_catalog(derived).encode()
    return files


def _labels_json(root: Path, tasks: dict[str, list], tasks_sha256: dict[str, str]) -> bytes:
    overrides = read_overrides(root / paths.OVERRIDES_FILE, {d: {t.id for t in tasks[d]} for d in DOMAINS})
    labels = {
        d: {
            t.id: apply_override(f"{d}/{t.id}", base_label(t), overrides.get((d, t.id))).model_dump(exclude_none=True)
            for t in tasks[d]
        }
        for d in DOMAINS
    }
    return dump_json({
        "version": VERSION,
        "tau2": {"package": TAU2_DIST, "version": tau2_version(), "commit": tau2_commit(),
                 "data_sha256": tau2_data_sha256()},
        "inputs": {"overrides_sha256": paths.sha256_file(root / paths.OVERRIDES_FILE), "tasks_sha256": tasks_sha256},
        "labels": labels,
    })


def _splits_json(tasks: dict[str, list], labels_sha256: str) -> bytes:
    return dump_json({
        "version": VERSION,
        "labels_sha256": labels_sha256,
        "domains": {d: {s: [t.id for t in tasks[d] if split_of(d, t.id) == s] for s in SPLITS} for d in DOMAINS},
    })


def build(root: Path | None = None, workers: int | None = None) -> list[Path]:
    """Write the generated files that changed; returns them. Tasks whose content is not in the behaviour
    record yet are run with tau2's evaluator first (in `workers` processes); a task that does not behave
    as its kind requires stops the build before anything is written."""
    root = Path(root or paths.REPO_ROOT)
    derived = derived_tasks()
    unhandled = gold_problems(root, derived)
    if unhandled:
        raise ManifestError("golds that break the policy and are not handled (docs/tasks.md, \"Golds against the "
                            "policy\"):\n  " + "\n  ".join(unhandled))
    files = render(root, derived)
    files[paths.BEHAVIOUR_FILE] = _behaviour_json(root, derived, workers)
    written = []
    for rel, data in files.items():
        target = root / rel
        if not target.exists() or target.read_bytes() != data:
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(data)
            written.append(rel)
    return written


def check(root: Path | None = None, rerun: int = 1, workers: int | None = None) -> list[str]:
    """What differs between the committed files and a fresh build (empty when everything is current);
    the behaviour record must cover every task's current content with the required scores, and `rerun`
    tasks per domain and kind are run again with tau2's evaluator and must score as recorded."""
    root = Path(root or paths.REPO_ROOT)
    problems = _hash_chain_problems(root)
    derived = derived_tasks()
    problems += gold_problems(root, derived)
    for rel, data in render(root, derived).items():
        target = root / rel
        if not target.exists():
            problems.append(f"{rel}: missing")
        elif target.read_bytes() != data:
            problems.append(f"{rel}: stale, differs from a fresh build:\n    " + "\n    ".join(_describe(target, data)))
    return problems + behaviour_problems(root, derived, rerun, workers)


def gold_problems(root: Path, derived: dict) -> list[str]:
    """What the gold checker flags and nothing handles (handoff.tasks.authoring.gold_policy.problems), with root's
    overrides."""
    tasks = {d: {t.id for t in labelled_tasks(d)} | {t.id for (dd, _), ts in derived.items() if dd == d for t in ts}
             for d in DOMAINS}
    return gold_policy.problems(derived, read_overrides(root / paths.OVERRIDES_FILE, tasks))


# --- the behaviour record ---------------------------------------------------------------------------------


def _all_tasks(derived: dict) -> list[tuple[str, str, object]]:
    """(domain, kind, task) for every upstream and derived task."""
    return [(d, "upstream", t) for d in DOMAINS for t in upstream_tasks(d)] + [
        (d, k, t) for (d, k), tasks in derived.items() for t in tasks
    ]


def read_behaviour(root: Path) -> dict:
    """domain -> task id -> {"sha256", agent scores}; empty when there is no readable record."""
    doc = _read_json(root / paths.BEHAVIOUR_FILE)
    return doc.get("tasks", {}) if isinstance(doc, dict) else {}


def _behaviour_json(root: Path, derived: dict, workers: int | None) -> bytes:
    """The record: tau2's evaluate_simulation on handoff.fasteval's environments (tau2's Environment and
    tools over a copy-on-write database; seconds for every task), for tasks whose content is new;
    `check` re-runs a sample on tau2's own environments."""
    doc = _read_json(root / paths.BEHAVIOUR_FILE)
    same_agents = isinstance(doc, dict) and doc.get("agents") == behaviour.DESCRIPTIONS
    recorded = read_behaviour(root) if same_agents else {}
    entries, missing = {d: {} for d in DOMAINS}, []
    for domain, kind, task in _all_tasks(derived):
        sha = behaviour.task_sha256(task)
        old = recorded.get(domain, {}).get(task.id)
        if old and old.get("sha256") == sha:
            entries[domain][task.id] = old
        else:
            missing.append((domain, kind, task, sha))
    scores = behaviour.run_parallel([(d, t, kinds.kind(k).agents) for d, k, t, _ in missing], workers or 1,
                                    fast=True)
    for (domain, _, task, sha), score in zip(missing, scores):
        entries[domain][task.id] = {"sha256": sha, **score}
    failed = [f"{d}/{t.id}: {'; '.join(p)}" for d, k, t in _all_tasks(derived)
              if (p := behaviour.failures(kinds.kind(k).expected, entries[d][t.id]))]
    if failed:
        raise ManifestError("derived tasks do not behave as their kind requires under tau2's evaluator:\n  "
                            + "\n  ".join(failed))
    order = {d: [t.id for dd, _, t in _all_tasks(derived) if dd == d] for d in DOMAINS}
    return dump_json({
        "version": VERSION,
        "evaluator": "tau2.evaluator.evaluator.evaluate_simulation(EvaluationType.ALL) on handoff.fasteval environments",
        "tau2_version": tau2_version(),
        "agents": behaviour.DESCRIPTIONS,
        "tasks": {d: {tid: entries[d][tid] for tid in order[d]} for d in DOMAINS},
    })


def behaviour_problems(root: Path, derived: dict, rerun: int = 1, workers: int | None = None) -> list[str]:
    """Tasks the behaviour record misses or scores wrongly, and sampled re-runs that disagree with it."""
    recorded, problems = read_behaviour(root), []
    for domain, name, task in _all_tasks(derived):
        entry = recorded.get(domain, {}).get(task.id)
        if not entry or entry.get("sha256") != behaviour.task_sha256(task):
            problems.append(f"{paths.BEHAVIOUR_FILE}: {domain}/{task.id} is not recorded for its current content")
        else:
            problems += [f"{paths.BEHAVIOUR_FILE}: {domain}/{task.id}: {p}"
                         for p in behaviour.failures(kinds.kind(name).expected, entry)]
    if problems or not rerun:
        return problems
    sample = behaviour.sample(derived, rerun)
    fresh = behaviour.run_parallel([(d, t, behaviour.AGENTS) for d, t in sample], workers)
    for (domain, task), scores in zip(sample, fresh):
        entry = recorded[domain][task.id]
        if any(entry.get(agent) != score for agent, score in scores.items()):
            problems.append(f"{paths.BEHAVIOUR_FILE}: {domain}/{task.id}: recorded {entry}, re-run gives {scores}")
    return problems


# --- hand-check overrides -----------------------------------------------------------------------------------


def set_override(root: Path | None, domain: str, task_id: str, should_transfer: bool, reason: str) -> list[Path]:
    """Record a hand-checked label in the overrides file and rebuild labels and splits; an override that
    agrees with the task's base label removes the entry. The overrides file is restored if the build fails."""
    root = Path(root or paths.REPO_ROOT)
    if domain not in DOMAINS:
        raise ManifestError(f"unknown domain {domain!r}: expected one of {', '.join(DOMAINS)}")
    derived = derived_tasks()
    tasks = {t.id: t for d, _, t in _all_tasks(derived) if d == domain}
    if task_id not in tasks:
        raise ManifestError(f"unknown {domain} task {task_id!r} (see data/manifests/labels_v1.json for the ids)")
    try:
        override = Override(should_transfer=should_transfer, reason=reason)
    except ValueError as exc:
        raise ManifestError(f"override {domain}/{task_id}: reason must not be blank") from exc
    path = root / paths.OVERRIDES_FILE
    original = path.read_bytes()
    doc = json.loads(original)
    entries = doc["domains"].setdefault(domain, {})
    if base_label(tasks[task_id]).should_transfer == should_transfer:
        if task_id not in entries:
            raise ManifestError(f"{domain}/{task_id} is already labelled should_transfer={should_transfer} by its rule")
        del entries[task_id]
    else:
        entries[task_id] = override.model_dump()
    doc["domains"] = {d: dict(sorted(e.items(), key=lambda kv: id_sort_key(kv[0]))) for d, e in doc["domains"].items()
                      if e}
    path.write_bytes(dump_json(doc))
    try:
        return build(root)
    except BaseException:
        path.write_bytes(original)
        raise


def _hash_chain_problems(root: Path) -> list[str]:
    """Recorded hashes that do not match the files they name (labels -> splits, inputs -> labels)."""
    labels, splits = _read_json(root / paths.LABELS_FILE), _read_json(root / paths.SPLITS_FILE)
    if not isinstance(labels, dict) or not isinstance(splits, dict):
        return []  # missing or unreadable: reported as missing or stale by check()
    problems = []
    if splits.get("labels_sha256") != paths.sha256_file(root / paths.LABELS_FILE):
        problems.append(f"{paths.SPLITS_FILE}: labels_sha256 does not match {paths.LABELS_FILE}")
    inputs = labels.get("inputs", {})
    recorded = {str(paths.OVERRIDES_FILE): inputs.get("overrides_sha256"), **inputs.get("tasks_sha256", {})}
    for name, sha in sorted(recorded.items()):
        if not (root / name).exists() or paths.sha256_file(root / name) != sha:
            problems.append(f"{paths.LABELS_FILE}: recorded sha256 of {name} does not match the file")
    return problems


def _read_json(path: Path):
    try:
        return json.loads(path.read_text())
    except (OSError, json.JSONDecodeError):
        return None


def _describe(target: Path, fresh: bytes, limit: int = 8) -> list[str]:
    if target.suffix != ".json":
        return ["regenerate it"]
    old, new = _read_json(target), json.loads(fresh)
    if old is None:
        return ["the committed file is not valid JSON"]
    diffs = _json_diff(old, new, "") or ["same JSON content, different formatting"]
    return diffs[:limit] + ([f"... {len(diffs) - limit} more"] if len(diffs) > limit else [])


def _json_diff(old, new, where: str) -> list[str]:
    if isinstance(old, list) and isinstance(new, list) and all(isinstance(x, dict) and "id" in x for x in old + new):
        old, new = {x["id"]: x for x in old}, {x["id"]: x for x in new}
    if isinstance(old, dict) and isinstance(new, dict):
        out = []
        for key in list(old) + [k for k in new if k not in old]:
            path = f"{where}/{key}"
            if key not in new:
                out.append(f"{path}: only in the committed file")
            elif key not in old:
                out.append(f"{path}: missing from the committed file")
            else:
                out += _json_diff(old[key], new[key], path)
        return out
    if old != new:
        return [f"{where or '/'}: committed {_short(old)}, fresh build {_short(new)}"]
    return []


def _short(value) -> str:
    text = json.dumps(value, ensure_ascii=False)
    return text if len(text) <= 80 else text[:77] + "..."


def review(out: Path, domains: list[str] | None = None, kinds: list[str] | None = None,
           root: Path | None = None) -> list[Path]:
    """Write the hand-check pages (handoff.tasks.authoring.review) of the committed tasks and labels into `out`."""
    root = Path(root or paths.REPO_ROOT)
    labels, scores = load_labels(root), read_behaviour(root)
    pages = {}
    for domain in domains or DOMAINS:
        tasks = load_tasks(domain, kinds=kinds)
        splits = {t.id: split_of(domain, t.id) for t in tasks}
        pages[domain] = domain_markdown(domain, tasks, labels, splits, scores.get(domain, {}))
    return write_review(Path(out), pages)
