"""`handoff`: subcommands in workflow order with examples and --version; one error base for user
errors (exit 2, one line, no traceback); any other exception is a bug (traceback, exit 1)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

import handoff
from handoff.cli import COMMANDS, main
from handoff.errors import HandoffError


def handoff_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "handoff", *args], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "COLUMNS": "80"})  # argparse wraps help at the terminal's width


def test_help_lists_commands_in_workflow_order_with_examples():
    proc = handoff_cli("--help")
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    listed = [line.split()[0] for line in out.split("COMMAND\n", 1)[1].split("\noptions:")[0].splitlines()
              if line.startswith("    ") and not line.startswith("      ")]
    assert listed == list(COMMANDS) == ["sweep", "follow", "import", "report", "compare", "leaderboard", "export", "score",
                                              "reduce", "labels"]
    purposes = out.split("COMMAND\n", 1)[1].split("\noptions:")[0].splitlines()
    assert len(purposes) == len(listed), purposes  # one line each in 80 columns
    assert not [p for p in purposes if p.endswith(".")], purposes
    assert "handoff sweep resume=" in out and "--version" in out and "register" not in out
    assert handoff_cli("--version").stdout.strip() == f"handoff {handoff.__version__}"


def test_user_errors_share_one_base():
    from handoff.cli import UsageError
    from handoff.records import CorruptShard
    from handoff.rules.context import UnknownDomain
    from handoff.rules.trajectory import TrajectoryLoadError
    from handoff.rundir import RunDirError
    from handoff.sweep.config import ConfigError
    from handoff.sweep.manifest import ResumeRefused
    from handoff.sweep.rundir import RunLocked
    from handoff.tasks.labels import ManifestError

    for cls in (UsageError, CorruptShard, RunDirError, UnknownDomain, TrajectoryLoadError, ConfigError,
                ResumeRefused, RunLocked, ManifestError):
        assert issubclass(cls, HandoffError), cls


@pytest.mark.parametrize("args, message", [
    (["report", "/nonexistent/run"], "handoff: "),
    (["score", "/nonexistent/results.json"], "handoff: /nonexistent/results.json: cannot read JSON"),
    (["score", "README.md", "--reward", "/nonexistent/weights.yaml"], "handoff: cannot read reward weights"),
])
def test_user_error_is_one_line_and_exit_2(args, message, capsys):
    assert main(args) == 2
    err = capsys.readouterr().err
    assert err.startswith(message) and "Traceback" not in err, err


def test_bad_reward_weights_file_names_the_key(tmp_path, capsys):
    weights = tmp_path / "w.yaml"
    from handoff.rules.score import REWARD_CONF_DIR

    weights.write_text((REWARD_CONF_DIR / "default.yaml").read_text().replace("task: 1.0", "task: abc"))
    assert main(["score", "README.md", "--reward", str(weights)]) == 2
    assert f"invalid reward weights {weights}:\n  task: Input should be a valid number" in capsys.readouterr().err


def test_any_other_exception_is_a_bug_with_traceback():
    code = "from handoff.errors import exit_on_user_error; exit_on_user_error('handoff', lambda: 1 / 0)"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1 and "Traceback" in proc.stderr and "ZeroDivisionError" in proc.stderr
