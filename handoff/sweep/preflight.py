"""What must hold before any engine starts: the installed vLLM build serves engine.device, every
checkpoint directory can be loaded, and verl actor checkpoints are merged into HF checkpoints.

- Before Ray starts: the config check (handoff.sweep.config.checkpoint_problems) refuses every
  checkpoint the driver sees that no engine could load, and `before_ray` the driver's vLLM build
  when the sweep starts its own local cluster (the driver's environment is the engines') and, for
  engine=gpu, every engine setting vLLM's own configuration refuses (handoff.sweep.vllm_check).
- `on_cluster`: after Ray starts, before any engine. One Ray task on a GPU node (any node for
  engine.device=cpu) checks that node's vLLM build and the checkpoints (an existing cluster, whose
  nodes may see paths the driver does not), and merges verl actor checkpoints with verl's model
  merger (handoff.engine.checkpoint), once: the engines then serve the merged checkpoints.

The scripted engine (a test double) is exempt: it loads no weights and no vLLM.
"""

from __future__ import annotations

from pathlib import Path

from handoff.engine.checkpoint import CheckpointError, is_verl_actor, merge_verl_actor, problems
from handoff.engine.factory import engine_kind
from handoff.errors import ConfigError
from handoff.sweep import vllm_check
from handoff.sweep.config import Checkpoint, SweepConfig


def before_ray(sweep: SweepConfig, local: bool) -> None:
    """Raise ConfigError, before Ray starts, when the sweep starts its own cluster (`local`) and
    this environment's vLLM build cannot serve engine.device, or (engine=gpu) when vLLM refuses the
    engine settings of a checkpoint (handoff.sweep.vllm_check)."""
    from handoff.engine.vllm_engine import build_problem

    loads = engine_kind(sweep.engine).loads_weights
    problem = build_problem(sweep.engine.device) if local and loads else None
    if problem:
        raise ConfigError(f"engine build: {problem}")
    refused = vllm_check.problems(sweep) if loads and sweep.engine.device == "gpu" else []
    if refused:
        raise ConfigError.of("engine settings (vLLM's own check)", refused)


def node_check(checks: list[tuple[str, str | None]], device: str | None, merged_dir: str | None,
               merge_timeout_s: float) -> dict[str, str]:
    """Run on a cluster node: its vLLM build (when `device` is given), every (path, tokenizer),
    and the merge of verl actors. Returns {actor path: merged checkpoint path}."""
    from handoff.engine.vllm_engine import build_problem

    errors = [p for p in [build_problem(device) if device else None] if p]
    merged: dict[str, str] = {}
    for path, tokenizer in checks:
        bad = problems(path, tokenizer)
        if not bad and is_verl_actor(path):
            try:
                merged[path] = str(merge_verl_actor(path, merged_dir, merge_timeout_s))
            except CheckpointError as exc:
                bad = [str(exc)]
            else:
                bad = problems(merged[path], tokenizer)
        errors += bad
    if errors:
        raise CheckpointError("\n  ".join(errors))
    return merged


def on_cluster(sweep: SweepConfig, ckpts: list[Checkpoint], local: bool) -> dict[str, str]:
    """{verl actor path: its merged checkpoint} for `ckpts` (every checkpoint an engine will load: the
    agent's and the user simulator's), after the node check; raise ConfigError naming what the node
    found, or that it did not finish in time (before any engine starts)."""
    import ray

    e = sweep.engine
    checks = [(ck.path, ck.tokenizer) for ck in ckpts]
    if not checks or not engine_kind(e).loads_weights or (local and not any(is_verl_actor(p) for p, _ in checks)):
        return {}  # the driver's own checks covered it all
    task = ray.remote(node_check).options(num_cpus=0, scheduling_strategy=_node_for(e.device), max_retries=0)
    ref = task.remote(checks, None if local else e.device, sweep.cluster.merged_dir, e.load_timeout_s)
    wait_s = check_wait_s(checks, e.load_timeout_s)
    try:
        return ray.get(ref, timeout=wait_s)
    except ray.exceptions.RayTaskError as exc:
        if isinstance(exc.cause, CheckpointError):
            raise ConfigError(f"checkpoints and engine build (checked on the cluster):\n  {exc.cause}") from None
        raise
    except ray.exceptions.GetTimeoutError:
        ray.cancel(ref, force=True)
        raise ConfigError(f"checkpoints: the check and merge on the cluster did not finish within {wait_s:g}s "
                          "(engine.load_timeout_s for the check and for each verl actor to merge)") from None


def check_wait_s(checks: list[tuple[str, str | None]], load_timeout_s: float) -> float:
    """How long the driver waits for the node check: engine.load_timeout_s for the check and for each
    merge, counting as a merge every path the driver cannot see (the node may see a verl actor there)."""
    merges = sum(1 for path, _ in checks if is_verl_actor(path) or not Path(path).is_dir())
    return load_timeout_s * (1 + merges)


def served(ck: Checkpoint, merged: dict[str, str]) -> Checkpoint:
    """`ck` as the engines load it: a verl actor replaced by its merged checkpoint."""
    return ck.model_copy(update={"path": merged[ck.path]}) if ck.path in merged else ck


def _node_for(device: str):
    """A GPU node for engine.device=gpu (where the engines will run), else Ray's default placement."""
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    if device != "gpu":
        return "DEFAULT"
    nodes = [n for n in ray.nodes() if n["Alive"] and n["Resources"].get("GPU", 0) > 0]
    if not nodes:
        raise ConfigError("engine.device=gpu: no node of the Ray cluster has GPUs")
    return NodeAffinitySchedulingStrategy(nodes[0]["NodeID"], soft=False)
