"""The Makefile's install stamp follows pyproject.toml's content, not its mtime: a fresh clone (every
file newer than the .venv beside it) does not reinstall, a changed pyproject.toml does. Checked with
`make -n` in a copy of the Makefile and pyproject.toml: nothing is installed."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.skipif(shutil.which("make") is None or shutil.which("sha256sum") is None,
                                reason="GNU make and sha256sum are needed")
INSTALL = "pip install -q -e"


def dry_run(tree: Path) -> str:
    """What `make -n setup` would do (the model already converted), ENGINE=cpu."""
    cache = tree / "cache"
    (cache / "models" / "smollm2-135m-instruct").mkdir(parents=True, exist_ok=True)
    (cache / "models" / "smollm2-135m-instruct" / "config.json").touch()
    proc = subprocess.run(["make", "-n", "setup", "ENGINE=cpu", f"HANDOFF_CACHE={cache}"], cwd=tree,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def age(path: Path, seconds: int) -> None:
    """Set a file's mtime `seconds` in the past."""
    past = path.stat().st_mtime - seconds
    os.utime(path, (past, past))


@pytest.fixture
def tree(tmp_path) -> Path:
    for name in ("Makefile", "pyproject.toml"):
        shutil.copy(ROOT / name, tmp_path / name)
    return tmp_path


def test_a_fresh_venv_installs(tree):
    assert INSTALL in dry_run(tree)


def installed(tree: Path) -> Path:
    """A .venv that went through the install: the stamp and the content hash, both older than now."""
    venv = tree / ".venv"
    (venv / "bin").mkdir(parents=True)
    digest = subprocess.run(["sha256sum", "pyproject.toml"], cwd=tree, capture_output=True, text=True, check=True)
    (venv / ".pyproject.sha256").write_text(digest.stdout)
    (venv / ".installed-cpu").touch()
    age(venv / ".pyproject.sha256", 200)
    age(venv / ".installed-cpu", 100)
    return venv


def test_a_newer_pyproject_with_the_same_content_does_not_reinstall(tree):
    installed(tree)
    (tree / "pyproject.toml").touch()  # a fresh clone: newer than the stamp, same content
    assert INSTALL not in dry_run(tree)


def test_a_changed_pyproject_reinstalls(tree):
    installed(tree)
    with (tree / "pyproject.toml").open("a") as f:
        f.write("\n# a changed dependency\n")
    assert INSTALL in dry_run(tree)


def test_a_venv_from_before_the_hash_keeps_the_mtime_rule(tree):
    venv = installed(tree)
    (venv / ".pyproject.sha256").unlink()
    age(tree / "pyproject.toml", 1000)  # older than the stamp: up to date, as make decided before
    assert INSTALL not in dry_run(tree)
    (venv / ".pyproject.sha256").unlink()
    (tree / "pyproject.toml").touch()  # newer than the stamp: reinstall, as before
    assert INSTALL in dry_run(tree)
