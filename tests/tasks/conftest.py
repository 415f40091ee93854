"""Shared by the task-set tests."""

from __future__ import annotations

import shutil

import pytest

from handoff.tasks import paths


@pytest.fixture
def repo_copy(tmp_path):
    """The repository's data/ and the out-of-scope catalog doc, copied: a root to rebuild in."""
    for rel in ("data", paths.CATALOG_DOC):
        source, target = paths.REPO_ROOT / rel, tmp_path / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        (shutil.copytree if source.is_dir() else shutil.copy)(source, target)
    return tmp_path
