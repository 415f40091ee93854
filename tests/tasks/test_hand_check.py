"""The hand-check workflow: `handoff labels review` pages and `handoff labels override`."""

from __future__ import annotations

import json

import pytest

from handoff.cli import main as cli_main
from handoff.tasks import load_tasks, manifest_hashes, paths
from handoff.tasks.authoring.manifests import check
from handoff.tasks.labels import load_labels

ROOT = paths.REPO_ROOT


def test_review_writes_a_page_per_domain(tmp_path, capsys):
    out = tmp_path / "review"
    assert cli_main(["labels", "review", "--domain", "retail", "--kind", "out_of_scope", "--kind", "hard_negative",
                     "--out", str(out)]) == 0
    assert sorted(p.name for p in out.iterdir()) == ["retail.html", "retail.md"]
    page, html = (out / "retail.md").read_text(), (out / "retail.html").read_text()
    tasks = load_tasks("retail", kinds=["out_of_scope", "hard_negative"])
    for task in tasks:
        assert f"## `{task.id}`" in page and f"<code>{task.id}</code>" in html
    first = tasks[0]
    section = page.split(f"## `{first.id}`")[1].split("\n## ")[0]
    assert "should_transfer=true" in section and "rule `out_of_scope`" in section
    assert "`transfer_to_human_agents(" in section, "gold actions"
    assert first.description.relevant_policies in section, "the derivation's justification"
    assert first.user_scenario.instructions.task_instructions in section
    assert "upstream" not in {t.split(" (")[1].split(",")[0] for t in page.split("\n## `")[1:]}
    assert html.startswith("<!doctype html>") and "<table>" in html
    assert "wrote" in capsys.readouterr().out


def test_review_rejects_an_unknown_domain_or_kind(tmp_path, capsys):
    for args in (["--domain", "banking"], ["--kind", "bogus"]):
        with pytest.raises(SystemExit) as exc:
            cli_main(["labels", "review", "--out", str(tmp_path), *args])
        assert exc.value.code == 2
        assert "invalid choice" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


def test_override_rebuilds_labels_and_splits_and_check_passes(repo_copy, capsys):
    before = manifest_hashes(repo_copy)
    args = ["labels", "override", "airline", "0", "--should-transfer", "true", "--reason", "hand-checked: X",
            "--root", str(repo_copy)]
    assert cli_main(args) == 0
    assert "airline/0: should_transfer=true recorded" in capsys.readouterr().out
    overrides = json.loads((repo_copy / paths.OVERRIDES_FILE).read_text())["domains"]["airline"]
    assert overrides["0"] == {"should_transfer": True, "reason": "hand-checked: X"}
    label = load_labels(repo_copy)[("airline", "0")]
    assert (label.should_transfer, label.rule, label.reason) == (True, "override:no_transfer", "hand-checked: X")
    assert check(repo_copy, rerun=0) == []
    after = manifest_hashes(repo_copy)
    assert {k for k in before if before[k] != after[k]} == {"overrides_sha256", "labels_sha256", "splits_sha256"}
    splits = json.loads((repo_copy / paths.SPLITS_FILE).read_text())
    assert splits["labels_sha256"] == after["labels_sha256"]
    # agreeing with the base rule again removes the override
    assert cli_main(["labels", "override", "airline", "0", "--should-transfer", "false", "--reason", "undo",
                     "--root", str(repo_copy)]) == 0
    assert "0" not in json.loads((repo_copy / paths.OVERRIDES_FILE).read_text())["domains"]["airline"]
    assert manifest_hashes(repo_copy) == before and check(repo_copy, rerun=0) == []


@pytest.mark.parametrize("args, message", [
    (["airline", "0", "--should-transfer", "true", "--reason", "   "], "reason must not be blank"),
    (["banking", "0", "--should-transfer", "true", "--reason", "r"], "unknown domain 'banking'"),
    (["airline", "999", "--should-transfer", "true", "--reason", "r"], "unknown airline task '999'"),
    (["airline", "0", "--should-transfer", "false", "--reason", "r"], "already labelled should_transfer=False"),
])
def test_override_rejects_bad_input_and_changes_nothing(repo_copy, capsys, args, message):
    before = {p: p.read_bytes() for p in (repo_copy / "data").rglob("*") if p.is_file()}
    assert cli_main(["labels", "override", *args, "--root", str(repo_copy)]) == 2
    assert message in capsys.readouterr().err
    assert {p: p.read_bytes() for p in (repo_copy / "data").rglob("*") if p.is_file()} == before


def test_override_needs_a_reason_and_a_boolean(repo_copy, capsys):
    for args in (["airline", "0", "--should-transfer", "true"], ["airline", "0", "--should-transfer", "yes",
                                                                "--reason", "r"]):
        with pytest.raises(SystemExit) as exc:
            cli_main(["labels", "override", *args, "--root", str(repo_copy)])
        assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "the following arguments are required: --reason" in err and "expected true or false" in err


def test_tasks_sha256_covers_derived_and_upstream_tasks(repo_copy, tmp_path, monkeypatch):
    from handoff.tasks import hashes, tasks_sha256

    before = tasks_sha256(repo_copy)
    assert manifest_hashes(repo_copy)["tasks_sha256"] == before == tasks_sha256(ROOT)
    task_file = repo_copy / paths.task_file("airline", "out_of_scope")
    task_file.write_text(task_file.read_text().replace("airline", "airline ", 1))
    assert tasks_sha256(repo_copy) != before
    upstream = [(name, tmp_path / name.replace("/", "_")) for name, _ in hashes._upstream_task_files()]
    for (_, source), (_, copy) in zip(hashes._upstream_task_files(), upstream):
        copy.write_bytes(source.read_bytes())
    monkeypatch.setattr(hashes, "_upstream_task_files", lambda *_: upstream)
    edited = tasks_sha256(repo_copy)
    upstream[1][1].write_text(upstream[1][1].read_text().replace('"id"', '"id" ', 1))
    assert tasks_sha256(repo_copy) != edited
