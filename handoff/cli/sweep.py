"""`handoff sweep [HYDRA ARGS]`: the sweep, exactly as `python -m handoff.sweep`. Its arguments go
to Hydra unchanged (handoff.cli.main hands them over before argparse sees them)."""

from __future__ import annotations


def register(subparsers) -> None:
    # Listed for `handoff --help` only: `handoff sweep ...` never reaches argparse.
    subparsers.add_parser("sweep", help="run or resume a sweep: checkpoints x tasks (Hydra overrides)",
                            add_help=False)
