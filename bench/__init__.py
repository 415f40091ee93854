"""Benchmarks: each compares handoff with tau2's own code in the same run and prints the ratio.

Run one with `python -m bench.<name>`; `python -m bench.run_all` runs them all. Results and the
machine they were measured on go in docs/benchmarks.md.
"""

import os

# vLLM logs to stdout by default (and its engine-core subprocess inherits that): the benchmarks'
# stdout carries only their JSON.
os.environ.setdefault("VLLM_LOGGING_STREAM", "ext://sys.stderr")
