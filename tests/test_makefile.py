"""The Makefile's install stamp follows pyproject.toml's content, not its mtime: a fresh clone (every
file newer than the .venv beside it) does not reinstall, a changed pyproject.toml does. Checked with
`make -n` in a copy of the Makefile and pyproject.toml: nothing is installed.

The install goes through `uv pip` where pip can put uv into the venv, else through pip: checked by running
the install step with a stand-in venv whose `python` and `uv` only write down how they were called."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.skipif(shutil.which("make") is None or shutil.which("sha256sum") is None,
                                reason="GNU make and sha256sum are needed")
INSTALL = "install -q -e '.[cpu,train,dev]'"  # as `make -n` prints it
RAN_INSTALL = "install -q -e .[cpu,train,dev]"  # as the shell runs it


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


# A venv's python that records its arguments; `pip install uv==...` succeeds (writing a uv that records its
# arguments too) only where UV_ON_INDEX is set, as if PyPI had a uv wheel for this machine.
FAKE_PYTHON = """#!/usr/bin/env bash
echo "python $*" >> "$CALLS"
if [[ "$*" == "-m pip install -q uv=="* ]]; then
    [[ -n "$UV_ON_INDEX" ]] || exit 1
    printf '#!/usr/bin/env bash\\necho "uv $* (into $UV_PYTHON)" >> "$CALLS"\\n' > "$(dirname "$0")/uv"
    chmod +x "$(dirname "$0")/uv"
fi
"""


def install(tree: Path, uv_on_index: bool, *make_args: str) -> list[str]:
    """Run the install step (not a dry run) with the stand-in venv; the calls it made, in order."""
    venv = tree / ".venv"
    python = venv / "bin" / "python"
    if not python.exists():
        python.parent.mkdir(parents=True)
        python.write_text(FAKE_PYTHON)
        python.chmod(0o755)
    calls = tree / "calls.txt"
    calls.unlink(missing_ok=True)
    env = {**os.environ, "CALLS": str(calls), "UV_ON_INDEX": "1" if uv_on_index else ""}
    proc = subprocess.run(["make", ".venv/.installed-cpu", "ENGINE=cpu", f"HANDOFF_CACHE={tree / 'cache'}",
                           *make_args], cwd=tree, env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert (venv / ".installed-cpu").exists()
    return calls.read_text().splitlines()


def test_the_install_goes_through_uv_when_pip_can_install_it(tree):
    calls = install(tree, uv_on_index=True)
    assert any(c.startswith("python -m pip install -q uv==") for c in calls)
    assert f"uv pip {RAN_INSTALL} (into {tree / '.venv' / 'bin' / 'python'})" in calls
    assert not any(c.startswith("python -m pip install -q -e") for c in calls)
    assert "python -m pip install -q --upgrade pip" not in calls


def test_the_install_falls_back_to_pip_when_uv_cannot_be_had(tree):
    calls = install(tree, uv_on_index=False)
    assert "python -m pip install -q --upgrade pip" in calls
    assert f"python -m pip {RAN_INSTALL}" in calls
    assert not any(c.startswith("uv ") for c in calls)


def test_installer_pip_keeps_pip_even_with_uv_in_the_venv(tree):
    install(tree, uv_on_index=True)
    with (tree / "pyproject.toml").open("a") as f:
        f.write("\n# a changed dependency: install again\n")
    calls = install(tree, True, "INSTALLER=pip")
    assert (tree / ".venv" / "bin" / "uv").exists()
    assert f"python -m pip {RAN_INSTALL}" in calls
    assert not any(c.startswith("uv ") or "uv==" in c for c in calls)
