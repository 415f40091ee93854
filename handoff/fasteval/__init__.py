"""tau2's evaluator made cheap, with identical results.

- `evaluate_simulation(simulation, task, domain, evaluation_type=ALL, solo_mode=False)`: drop-in for
  `tau2.evaluator.evaluator.evaluate_simulation`.
- `make_environment(domain)`: a tau2 airline/retail Environment without re-reading db.json, for
  episode runners.
- `replay.replay(task, domain)`: a task's gold actions played as a SimulationRun with real tool results
  (`handoff labels build`'s behaviour baselines, fasteval's equality tests, benchmarks);
  `replay.wrong_write_variants(task)`: the same with one write changed.
"""

from handoff.fasteval.environments import SUPPORTED_DOMAINS, fast_domain, make_environment
from handoff.fasteval.evaluate import evaluate_simulation

__all__ = ["SUPPORTED_DOMAINS", "evaluate_simulation", "fast_domain", "make_environment"]
