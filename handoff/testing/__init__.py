"""Fixtures that bench/ and tests/ share; the package (handoff/) never imports them.

- `synthetic`: run directories of synthetic episodes (real tau2 messages) for reducer, report and
  W&B tests and the reducer benchmark.
- `wandb_offline`: W&B's offline run files read back (history, summary, metrics, run record).
- `checkpoints`: a perturbed copy of a model (a second checkpoint of the same architecture).
- `tensor_parallel`: a tiny-hermes variant with more heads, for tensor-parallel tests.
"""
