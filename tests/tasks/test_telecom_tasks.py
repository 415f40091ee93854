"""Telecom, tau2's third domain: its task sets, labels, hand-check, manifest views and safe ids (issue 47)."""

from __future__ import annotations

import json
import re
from collections import Counter

import pytest

from handoff.rules.label import Label
from handoff.rundir import Manifest
from handoff.sweep.manifest import check_resumable
from handoff.tasks import get_task, load_tasks, manifest_hashes, paths, split_of
from handoff.tasks.authoring.labelling import read_overrides
from handoff.tasks.authoring.review import hand_check_sample
from handoff.tasks.golds import resolutions
from handoff.tasks.ids import kind_of, task_slug
from handoff.tasks.labels import load_labels
from handoff.tasks.upstream import has_gold_transfer, labelled_tasks, upstream_tasks

ROOT = paths.REPO_ROOT
LOCKED = "[service_issue]airplane_mode_on|lock_sim_card_pin[PERSONA:Easy]"

# The manifests' hashes before telecom was added (commit b7150e7): what every airline/retail run recorded
# then, and what its resume compares with now.
PRE_TELECOM = {
    "labels_sha256": "6250784bfa0412445505b779ec4784fca0f0bae3ed128c4234eb025223e480ed",
    "splits_sha256": "56f3d0a540ab2b4dfd126635af276a997a4a038ad3b27b3a2ff3fd38874eb339",
    "overrides_sha256": "e47a260ff27ddfed6bbc39d956cba472a0bcfdb314ac9d98c3f322b6d212b0e5",
    "tasks_sha256": "f80049d2c1fe790d216e634a2829003b5e24b517a9e0381be8775d02b794b36d",
    "tau2_version": "26.3",
    "tau2_commit": "0ed2fd8",
}


def test_telecom_task_sets_are_taus():
    base, small, full = (load_tasks("telecom", kinds=["upstream"], task_set=s) for s in ("base", "small", "full"))
    assert (len(base), len(small), len(full)) == (114, 20, 2285)
    assert {t.id for t in base} | {t.id for t in small} <= {t.id for t in full}
    assert not {t.id for t in base} & {t.id for t in small}
    assert Counter(split_of("telecom", t.id) for t in base) == {"train": 74, "test": 40}
    assert {split_of("telecom", t.id) for t in small} == {None}, "tau2 splits only the base set"
    assert [t.id for t in load_tasks("telecom", split="test", task_set="full")] == [
        t.id for t in load_tasks("telecom", split="test")]
    assert get_task("telecom", small[0].id) == small[0], "a task of another set is found by id too"
    assert get_task("telecom", LOCKED) in base
    with pytest.raises(ValueError, match="airline has no task set 'full'"):
        load_tasks("airline", task_set="full")


def _count(labels: dict, tasks, split: str | None) -> tuple[int, int]:
    chosen = [t for t in tasks if split_of("telecom", t.id) == split]
    return sum(labels[("telecom", t.id)].should_transfer for t in chosen), len(chosen)


def test_telecom_labels_follow_the_gold_transfer_rule_and_are_documented():
    labels = load_labels()
    full = labelled_tasks("telecom")
    assert {tid for d, tid in labels if d == "telecom" and kind_of(tid) == "upstream"} == {t.id for t in full}
    for task in full:
        label = labels[("telecom", task.id)]
        assert label.rule == ("gold_transfer_action" if has_gold_transfer(task) else "no_transfer")
        assert label.should_transfer == has_gold_transfer(task)
    base, small = upstream_tasks("telecom"), upstream_tasks("telecom", "small")
    counts = {"base": (_count(labels, base, "train"), _count(labels, base, "test")),
              "small": _count(labels, small, None), "full": _count(labels, full, None)}
    assert counts == {"base": ((8, 74), (12, 40)), "small": (2, 20), "full": (12, 2171)}
    doc = (ROOT / "docs/tasks.md").read_text()
    assert "| base | upstream | 8 / 74 | 12 / 40 | - | 20 / 114 |" in doc
    assert "| small | upstream | - | - | 2 / 20 | 2 / 20 |" in doc
    assert "| full | upstream | 8 / 74 | 12 / 40 | 12 / 2,171 | 32 / 2,285 |" in doc


@pytest.mark.parametrize("kind, positives", [("explicit_request", True), ("out_of_scope", True),
                                             ("hard_negative", False)])
def test_telecom_derived_labels_per_split_are_documented(kind, positives):
    labels = load_labels()
    tasks = load_tasks("telecom", kinds=[kind])
    assert {tid for d, tid in labels if d == "telecom" and kind_of(tid) == kind} == {t.id for t in tasks}
    assert all(labels[("telecom", t.id)] == Label(should_transfer=positives, rule=kind) for t in tasks)
    (train, n_train), (test, n_test) = (_count(labels, tasks, s) for s in ("train", "test"))
    assert (n_train, n_test) == (19, 11) and (train, test) == ((19, 11) if positives else (0, 0))
    row = f"| base | {kind} | {train} / {n_train} | {test} / {n_test} | - | {train + test} / {n_train + n_test} |"
    assert row in (ROOT / "docs/tasks.md").read_text()


def test_every_telecom_gold_transfer_is_hand_checked_against_the_workflow():
    golds = [t for t in upstream_tasks("telecom") if has_gold_transfer(t)]
    entries = resolutions()["telecom"]
    assert set(entries) == {t.id for t in golds} and len(golds) == 20
    for task in golds:
        entry = entries[task.id]
        assert (entry["gold"], entry["label"], entry["findings"]) == ("complies", "kept", [])
        assert [a.name for a in task.evaluation_criteria.actions] == ["transfer_to_human_agents"]
        faults = re.match(r"\[\w+\](.*)\[PERSONA", task.id).group(1).split("|")
        assert ("lock_sim_card_pin" in faults) == ("LOCKED with PIN/PUK" in entry["note"])
        assert ("contract_end_suspension" in faults) == ("contract end date is in the past" in entry["note"])
    others = [t for t in upstream_tasks("telecom") if not has_gold_transfer(t)]
    assert not any("lock_sim_card_pin" in t.id or "contract_end_suspension" in t.id for t in others)


def test_the_seeded_hand_check_sample_is_the_one_documented():
    sample = hand_check_sample("telecom")
    assert sample == hand_check_sample("telecom") and len(set(sample)) == 20
    assert not any(has_gold_transfer(get_task("telecom", tid)) for tid in sample)
    doc = (ROOT / "docs/tasks.md").read_text()
    section = doc.split("**A seeded sample of 20 others**")[1].split("###")[0]
    assert re.findall(r"^- `(.+)`$", section, re.M) == sample
    tasks = {d: {t.id for t in labelled_tasks(d)} for d in ("airline", "retail", "telecom")}
    assert not [k for k in read_overrides(ROOT / paths.OVERRIDES_FILE, tasks) if k[0] == "telecom"]


def test_an_airline_or_retail_run_records_the_hashes_from_before_telecom():
    for domains in (["airline"], ["retail"], ["airline", "retail"]):
        assert manifest_hashes(domains=domains) == PRE_TELECOM
    assert manifest_hashes(domains=["airline", "retail", "telecom"]) == manifest_hashes()
    assert manifest_hashes(domains=["telecom"])["labels_sha256"] == paths.sha256_file(ROOT / paths.LABELS_FILE)
    old = {"config": {"trials": 1}, "config_hash": "x", "tau2_version": "26.3", "tasks_hash": "T", "shards": []}
    check_resumable(Manifest(**old, hashes=PRE_TELECOM), Manifest(**old, hashes=manifest_hashes(domains=["airline"])))


def test_a_telecom_label_edit_changes_only_the_views_with_telecom(repo_copy):
    before = {d: manifest_hashes(repo_copy, [d]) for d in ("airline", "telecom")}
    labels_file = repo_copy / paths.LABELS_FILE
    doc = json.loads(labels_file.read_text())
    doc["labels"]["telecom"][LOCKED]["should_transfer"] = False
    labels_file.write_text(json.dumps(doc, indent=2, ensure_ascii=False) + "\n")
    assert manifest_hashes(repo_copy, ["airline"]) == before["airline"]
    assert manifest_hashes(repo_copy, ["telecom"])["labels_sha256"] != before["telecom"]["labels_sha256"]
    doc["labels"]["airline"]["0"]["should_transfer"] = True
    labels_file.write_text(json.dumps(doc, indent=2, ensure_ascii=False) + "\n")
    assert manifest_hashes(repo_copy, ["airline"])["labels_sha256"] != before["airline"]["labels_sha256"]


def test_task_slug_is_safe_and_keeps_telecom_ids_apart():
    ids = [t.id for t in labelled_tasks("telecom")]
    slugs = {task_slug(tid) for tid in ids}
    assert len(slugs) == len(ids)
    assert all(re.fullmatch(r"[A-Za-z0-9_.-]{1,73}", s) for s in slugs), "safe, and short enough for a file name"
    assert max(map(len, ids)) > 200
    assert task_slug(LOCKED).startswith("service_issue-airplane_mode_on-lock_sim_card_pin-PERSONA-Easy-")
    assert task_slug("a|b") != task_slug("a b") != task_slug("a-b")
    for kept in ("12", "explicit_request-12-insist", "out_of_scope-3-baggage_claim"):
        assert task_slug(kept) == kept, "airline, retail and derived ids are unchanged (old pages' URLs)"
