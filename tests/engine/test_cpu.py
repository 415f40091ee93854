"""The engine's dtype from the CPU's flags (handoff.engine.cpu): float32 where bfloat16 would be emulated
(no AVX512-BF16, no AMX), the checkpoint's own dtype where it is native; an explicit engine.dtype wins.
Its threads on the embedded cluster from the machine's cores."""

from __future__ import annotations

import pytest

from handoff.engine.cpu import FLAGS, choose_dtype, cpu_model, local_threads, proc_flags
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


@pytest.mark.parametrize(("cores", "engines", "threads"), [(2, 1, 2), (1, 1, 1), (2, 2, None), (4, 1, None)])
def test_one_engine_on_a_two_core_machine_computes_on_both_cores(cores, engines, threads):
    """vLLM's binding keeps a core for its scheduler: one thread on 2 cores. There a lone engine gets
    every core, unbound; with more cores, or more engines to share them, vLLM's binding stays."""
    assert local_threads(cores, engines) == threads


def test_the_embedded_clusters_engine_threads_come_from_this_machine(tmp_path, monkeypatch):
    from handoff.sweep.config import validate
    from handoff.sweep.run import _local_engine_threads, compose

    monkeypatch.setattr("os.sched_getaffinity", lambda pid: {0, 1})

    def threads(*overrides: str) -> int | None:
        engine = validate(compose([f"run_dir={tmp_path}/run", *overrides]), check_paths=False).engine
        _local_engine_threads(engine, engine_sets=1)
        return engine.threads

    assert threads() == 2  # the default sweep: engine=cpu, one engine set
    assert threads("engine.threads=1") == 1  # as given
    assert threads("engine.replicas=2") is None and threads("engine.tensor_parallel_size=2") is None
    assert threads("engine=scripted") is None
