"""Fixtures that bench/ and tests/ share, two of them also build steps. A sweep never imports them;
`handoff labels build` does (`replay`, for the behaviour baselines: handoff.tasks.build.behaviour), and so
does the tiny model's build (`tiny`: handoff.engine.models).

- `synthetic`: run directories of synthetic episodes (real tau2 messages) for reducer, report and
  W&B tests and the reducer benchmark.
- `replay`: gold-action replays of tau2 tasks and wrong-write variants (fasteval equality, bench).
- `wandb_offline`: W&B's offline run files read back (history, summary, metrics, run record).
- `checkpoints`: a perturbed copy of a model (a second checkpoint of the same architecture).
- `tiny`: the tiny-hermes model's training data and trainer (`python -m handoff.engine.models tiny`).
"""
