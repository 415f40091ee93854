"""The engine's dtype from the CPU's flags (handoff.engine.cpu): float32 where bfloat16 would be emulated
(no AVX512-BF16, no AMX), the checkpoint's own dtype where it is native; an explicit engine.dtype wins."""

from __future__ import annotations

import pytest

from handoff.engine.cpu import FLAGS, choose_dtype, cpu_model, proc_flags
from handoff.engine.vllm_engine import EngineSettings

# /proc/cpuinfo excerpts: an AVX2-only AMD EPYC (Zen 2/3), an AMD EPYC with AVX512-BF16 (Zen 4), a Sapphire Rapids Xeon.
ZEN3 = "model name\t: AMD EPYC 7763 64-Core Processor\nflags\t\t: fpu sse sse2 avx fma avx2 bmi2 sha_ni\n"
ZEN4 = "model name\t: AMD EPYC\nflags\t\t: fpu avx avx2 avx512f avx512dq avx512_bf16 avx512_vnni\n"
SPR = "model name\t: Intel(R) Xeon(R) Platinum 8480+\nflags\t\t: avx avx2 avx512f avx512_bf16 amx_bf16 amx_tile amx_int8\n"


@pytest.mark.parametrize("cpuinfo, dtype", [(ZEN3, "float32"), (ZEN4, "auto"), (SPR, "auto")])
def test_auto_is_float32_only_without_native_bfloat16(cpuinfo, dtype):
    assert choose_dtype("auto", proc_flags(cpuinfo))[0] == dtype


def test_amx_alone_counts_as_native_bfloat16():
    flags = dict.fromkeys(FLAGS, False) | {"avx2": True, "avx512f": True, "amx_bf16": True}
    assert choose_dtype("auto", flags) == ("auto", choose_dtype("auto", proc_flags(SPR))[1])


@pytest.mark.parametrize("cpuinfo", [ZEN3, ZEN4])
@pytest.mark.parametrize("requested", ["bfloat16", "float32", "float16"])
def test_an_explicit_dtype_is_kept_on_any_cpu(cpuinfo, requested):
    assert choose_dtype(requested, proc_flags(cpuinfo)) == (requested, f"engine.dtype={requested}")


def test_the_reason_names_the_missing_flags():
    assert "lacks AVX512-BF16 and AMX" in choose_dtype("auto", proc_flags(ZEN3))[1]


def test_flags_and_model_from_cpuinfo():
    assert proc_flags(ZEN3) == {"avx2": True, "avx512f": False, "avx512_bf16": False, "amx_bf16": False}
    assert proc_flags(SPR) == dict.fromkeys(FLAGS, True)
    assert proc_flags("") == dict.fromkeys(FLAGS, False)
    assert cpu_model(ZEN3) == "AMD EPYC 7763 64-Core Processor" and cpu_model("") == "unknown"


def test_a_gpu_engine_keeps_its_dtype_whatever_the_cpu():
    settings = EngineSettings(model="/m", device="gpu")
    assert settings.resolved_dtype() == ("auto", "engine.dtype=auto")
