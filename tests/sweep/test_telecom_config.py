"""`domain=telecom` in the sweep config: domains, task sets, and telecom's task ids (brackets, pipes,
colons) in Hydra overrides, shard ids and a resume (issue 47)."""

from __future__ import annotations

import re

import pytest

import handoff  # noqa: F401
from handoff.sweep.config import ConfigError, validate
from handoff.sweep.plan import select_tasks
from handoff.sweep.run import compose, prepare

LOCKED = "[service_issue]airplane_mode_on|lock_sim_card_pin[PERSONA:Easy]"
SAFE = re.compile(r"[A-Za-z0-9_.-]+")


def test_telecom_alone_or_with_the_others_is_a_valid_sweep(tmp_path):
    alone = validate(compose([f"run_dir={tmp_path}/a", "domain=telecom", "tasks.per_kind=null"]))
    assert alone.domains() == ["telecom"] and alone.tasks.set == "base"
    assert len(select_tasks(alone, "telecom")) == 73  # the base set's test split: 40 upstream, 11 of each derived kind
    every = validate(compose([f"run_dir={tmp_path}/b", "domain=[airline,retail,telecom]"]))
    assert every.domains() == ["airline", "retail", "telecom"]
    full = validate(compose([f"run_dir={tmp_path}/c", "domain=telecom", "tasks.set=full", "tasks.split=null",
                             "tasks.per_kind=null"]))
    assert len(select_tasks(full, "telecom")) == 2285 + 90, "the full set holds base, so the derived tasks too"
    small = validate(compose([f"run_dir={tmp_path}/d", "domain=telecom", "tasks.set=small", "tasks.split=null",
                              "tasks.per_kind=null"]))
    assert len(select_tasks(small, "telecom")) == 20, "no derived task has a parent in the small set"


@pytest.mark.parametrize("overrides, message", [
    (["domain=telecom", "tasks.set=full"], "tau2 splits only the base set into train and test"),
    (["domain=[airline,telecom]", "tasks.set=small", "tasks.split=null"], "only telecom has task sets"),
    (["domain=telecom", "tasks.set=huge"], "tasks.set"),
])
def test_a_task_set_that_cannot_be_selected_is_refused(tmp_path, overrides, message):
    with pytest.raises(ConfigError, match=message):
        validate(compose([f"run_dir={tmp_path}/run", *overrides]))


def test_a_telecom_task_id_in_an_override_plans_safe_shards_and_resumes(tmp_path):
    """The id in quotes (Hydra's grammar) survives the override, the plan, the manifest and the resume,
    which composes the recorded overrides again."""
    run = tmp_path / "run"
    overrides = ["engine=scripted", "domain=telecom", f"run_dir={run}", f"tasks.ids=['{LOCKED}', '12']"]
    with pytest.raises(ConfigError, match=r"no selected domain \(telecom\) has task '12'"):
        prepare(compose(overrides), overrides)
    overrides[-1] = f"tasks.ids=['{LOCKED}']"
    first = prepare(compose(overrides), overrides)
    assert [e.task_id for s in first.shards for e in s.episodes] == [LOCKED]
    assert all(SAFE.fullmatch(s.id) for s in first.shards)
    first.run.unlock()
    again = prepare(compose([f"resume={run}"]), [f"resume={run}"])
    assert again.manifest.shards == first.manifest.shards and again.manifest.hashes == first.manifest.hashes
    again.run.unlock()
    per_domain = [f"+tasks.ids={{telecom: ['{LOCKED}']}}", "domain=telecom", f"run_dir={tmp_path}/b"]
    assert [t.id for t in select_tasks(validate(compose(per_domain)), "telecom")] == [LOCKED]
