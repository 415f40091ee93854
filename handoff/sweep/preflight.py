"""What must hold before any engine starts: the installed vLLM build serves engine.device and every
checkpoint directory can be loaded.

- Before Ray starts: the config check (handoff.sweep.config.checkpoint_problems) refuses every
  checkpoint the driver sees that no engine could load, and `before_ray` the driver's vLLM build
  when the sweep starts its own local cluster (the driver's environment is the engines').
- `on_cluster`: after Ray starts, before any engine. One Ray task on a GPU node (any node for
  engine.device=cpu) checks that node's vLLM build and the checkpoints (an existing cluster, whose
  nodes may see paths the driver does not).

The scripted engine (a test double) is exempt: it loads no weights and no vLLM.
"""

from __future__ import annotations

from handoff.engine.checkpoint import CheckpointError, problems
from handoff.errors import ConfigError
from handoff.sweep.config import Checkpoint, SweepConfig


def _checked(sweep: SweepConfig, ckpts: list[Checkpoint]) -> list[tuple[str, str | None]]:
    """(path, tokenizer) of every checkpoint an engine will load: the agent's and the user's."""
    out = [(ck.path, ck.tokenizer) for ck in ckpts]
    if sweep.user.kind == "engine":
        out.append((sweep.user.model.path, sweep.user.model.tokenizer))
    return out


def before_ray(sweep: SweepConfig, local: bool) -> None:
    """Raise ConfigError, before Ray starts, when the sweep starts its own cluster (`local`) and
    this environment's vLLM build cannot serve engine.device."""
    from handoff.engine.vllm_engine import build_problem

    problem = build_problem(sweep.engine.device) if local and sweep.engine.kind != "scripted" else None
    if problem:
        raise ConfigError(f"engine build: {problem}")


def node_check(checks: list[tuple[str, str | None]], device: str) -> None:
    """Run on a cluster node: raise CheckpointError naming what its vLLM build and the checkpoint
    directories (path, tokenizer) lack."""
    from handoff.engine.vllm_engine import build_problem

    errors = [p for p in [build_problem(device)] if p]
    for path, tokenizer in checks:
        errors += problems(path, tokenizer)
    if errors:
        raise CheckpointError("\n  ".join(errors))


def on_cluster(sweep: SweepConfig, ckpts: list[Checkpoint], local: bool) -> list[Checkpoint]:
    """`ckpts` as the engines will load them, after the node check on an existing cluster; raise
    ConfigError naming what the node found (before any engine starts)."""
    import ray

    e = sweep.engine
    if e.kind == "scripted" or local:
        return ckpts  # the driver's own checks covered it all
    task = ray.remote(node_check).options(num_cpus=0, scheduling_strategy=_node_for(e.device), max_retries=0)
    try:
        ray.get(task.remote(_checked(sweep, ckpts), e.device), timeout=e.load_timeout_s)
    except ray.exceptions.RayTaskError as exc:
        if isinstance(exc.cause, CheckpointError):
            raise ConfigError(f"checkpoints and engine build (checked on the cluster):\n  {exc.cause}") from None
        raise
    return ckpts


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
