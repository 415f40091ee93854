"""A test's W&B environment: no W&B variable of the machine leaks in, and W&B's own settings files stay
in the test's directory."""

from __future__ import annotations

from pathlib import Path

MACHINE_VARIABLES = ("WANDB_API_KEY", "WANDB_MODE", "WANDB_PROJECT", "WANDB_ENTITY", "WANDB_DIR")


def isolate_wandb(monkeypatch, home: Path) -> None:
    """Unset the machine's W&B variables; W&B's config, cache and data directories under `home`."""
    for name in MACHINE_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    for name in ("CONFIG", "CACHE", "DATA"):
        monkeypatch.setenv(f"WANDB_{name}_DIR", str(home / name.lower()))
