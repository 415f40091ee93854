"""A run directory as the reporting layer sees it (layout: docs/architecture.md)."""

from __future__ import annotations

import json
from functools import cached_property
from pathlib import Path

from handoff.errors import HandoffError


class RunDirError(HandoffError, ValueError):
    """A path that is not a usable run directory, or a run that cannot be reported."""


class RunDir:
    def __init__(self, root: str | Path):
        self.root = Path(root)
        if not (self.root / "manifest.json").is_file():
            raise RunDirError(f"{self.root}: not a run directory (no manifest.json)")

    @cached_property
    def manifest(self) -> dict:
        try:
            return json.loads((self.root / "manifest.json").read_text())
        except json.JSONDecodeError as exc:
            raise RunDirError(f"{self.root / 'manifest.json'}: not valid JSON ({exc})") from exc

    @property
    def config(self) -> dict:
        """The resolved sweep config recorded in the manifest."""
        return self.manifest.get("config", {})

    @property
    def name(self) -> str:
        """The sweep name: W&B group and report title."""
        for source in (self.manifest, self.config, self.config.get("sweep", {})):
            if isinstance(source, dict) and isinstance(source.get("name"), str):
                return source["name"]
        return self.root.resolve().name

    def shards(self) -> list[Path]:
        return sorted((self.root / "shards").glob("*.jsonl"))

    def failed_shards(self) -> list[str]:
        return sorted(p.stem for p in (self.root / "failed").glob("*.json"))

    @property
    def reduced(self) -> Path:
        return self.root / "reduced"

    @property
    def wandb(self) -> Path:
        return self.root / "wandb"

    @property
    def report(self) -> Path:
        return self.root / "report"
