#!/usr/bin/env bash
# GRPO with Tau2AgentLoop on the hand-off tasks: builds the dataset, then runs verl's trainer with
# examples/verl/grpo_tau2.yaml (needs GPUs: trainer.n_gpus_per_node). Extra arguments are Hydra
# overrides of that config, e.g.  examples/verl/train_grpo.sh trainer.n_gpus_per_node=4 actor_rollout_ref.model.path=/ckpt
# Run from the repository root, with handoff installed (make setup ENGINE=gpu) so that verl's agent
# loop workers import handoff.agent.verl_loop.
set -euo pipefail
cd "$(dirname "$0")/../.."
PY=${PY:-.venv/bin/python}
test -f data/verl/train.parquet || "$PY" examples/verl/make_dataset.py --out data/verl
exec "$PY" -m verl.trainer.main_ppo --config-path="$PWD/examples/verl" --config-name=grpo_tau2 "$@"
