"""handoff: evaluate whether an LLM customer-service agent hands off to a human exactly when it
should, on tau2-bench airline and retail tasks."""

from __future__ import annotations

import argparse
import importlib
import keyword
import os
import sys

import handoff
from handoff.ctrl_c import latched_ctrl_c
from handoff.errors import HandoffError, exit_on_user_error

# Subcommands in workflow order; each module adds its own through `register` (a keyword's module
# has a trailing underscore: handoff.cli.import_).
COMMANDS = ("sweep", "follow", "import", "report", "compare", "leaderboard", "export", "score", "reduce", "labels")

EXAMPLES = """examples:
  handoff sweep                                  run the default sweep (conf/sweep.yaml)
  handoff sweep trials=3 model=[tiny_hermes]     Hydra overrides
  handoff sweep --help                           config groups and options
  handoff sweep -m seed=0,1 'run_dir=runs/s${seed}'   one sweep per seed (multirun)
  handoff sweep resume=runs/default-20260101-120000   finish a stopped or failed run
  handoff sweep extend=runs/x trials=2           add checkpoints or trials to a run as new shards
  handoff follow /ckpt/rl runs/rl --until-step 400   evaluate each checkpoint verl saves, one growing run
  handoff report runs/default-20260101-120000    report.md/html with plots, episode pages
  handoff compare runs/a runs/b                  paired differences with 95% intervals, flips
  handoff compare runs/a runs/b --html f.html    the flipped tasks' transcripts side by side
  handoff leaderboard runs/a runs/b --html lb.html   one row per checkpoint across runs, sortable
  handoff import results.json --run-dir runs/x   a tau2 results file as a run (rewards re-evaluated)
  handoff score results.json                     rules and reward of a tau2 results file

exit status: 0 success; 1 some sweep shards failed (or a check found problems); 2 bad input
(a config, an override, a run directory), printed without a traceback. Anything else is a bug."""


class UsageError(HandoffError):
    """Bad command-line input: printed as `handoff: <message>` with exit status 2."""


class _Formatter(argparse.RawDescriptionHelpFormatter):
    """argparse's, with the commands' help in a column past the longest command name (argparse
    does not count the subcommands' names and puts a long one's help on a line of its own)."""

    def __init__(self, prog: str):
        super().__init__(prog)
        self._action_max_length = 4 + max(map(len, COMMANDS))


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="handoff", description=__doc__, epilog=EXAMPLES,
                                     formatter_class=_Formatter)
    parser.add_argument("--version", action="version", version=f"%(prog)s {handoff.__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name in COMMANDS:
        importlib.import_module(f"{__name__}.{name}{'_' * keyword.iskeyword(name)}").register(sub)
    return parser


def _sweep_argv(argv: list[str]) -> list[str] | None:
    """The sweep's own arguments when this command line is the sweep's. Hydra's bash completion
    (`eval "$(handoff sweep -sc install=bash)"`) asks `handoff -sc query=bash` for its choices."""
    if argv[:1] == ["sweep"]:
        return argv[1:]
    if argv[:1] in (["-sc"], ["--shell-completion"]) and os.environ.get("COMP_LINE", "").split()[1:2] == ["sweep"]:
        return argv
    return None


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    hydra_argv = _sweep_argv(argv)
    if hydra_argv is not None:  # Hydra owns the sweep's command line: its arguments go there unchanged
        from handoff.sweep.__main__ import main as sweep_main

        return sweep_main(hydra_argv, prog="handoff sweep")
    args = build_parser().parse_args(argv)
    with latched_ctrl_c():
        return exit_on_user_error("handoff", args.func, args)


if __name__ == "__main__":
    sys.exit(main())
