"""Submit a sweep to an existing Ray cluster as a Ray Job (the driver runs on the cluster).

    python jobs/submit.py --address http://HEAD:8265 -- model=[checkpoints] \
        model.checkpoints.glob='/shared/rl/global_step_*/actor' user=litellm engine=gpu engine.replicas=8 \
        run_dir=/shared/runs/rl-sweep

Everything after `--` is passed to `python -m handoff.sweep` (Hydra overrides); `cluster=existing`
is added. The job's working directory is this repository (Ray uploads it); the cluster's Python
environment must have handoff's dependencies (see jobs/README.md). Resume a job's run with the same
command and `resume=<run_dir>`: run_dir must be on storage the head node keeps (only the driver
writes there; workers send their episodes back to it).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shlex
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
EXCLUDES = [".venv", ".git", "runs", "outputs", "**/__pycache__", "*.egg-info", ".pytest_cache"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--address", required=True, help="Ray dashboard address, e.g. http://head:8265")
    parser.add_argument("--runtime-env", type=json.loads, default={},
                        help='extra runtime_env as JSON, e.g. \'{"pip": ["-e", "."]}\' or {"env_vars": {...}}')
    parser.add_argument("--no-wait", action="store_true", help="return after submitting")
    parser.add_argument("overrides", nargs="*", help="Hydra overrides for handoff.sweep (after --)")
    args = parser.parse_args(argv)

    from ray.job_submission import JobStatus, JobSubmissionClient

    client = JobSubmissionClient(args.address)
    runtime_env = {"working_dir": str(REPO), "excludes": EXCLUDES, **args.runtime_env}
    env_vars = {"RAY_USAGE_STATS_ENABLED": "0", **runtime_env.get("env_vars", {})}
    runtime_env["env_vars"] = env_vars
    entrypoint = " ".join(["python -m handoff.sweep cluster=existing", *(shlex.quote(o) for o in args.overrides)])
    job_id = client.submit_job(entrypoint=entrypoint, runtime_env=runtime_env)
    print(f"submitted {job_id}: {entrypoint}\n  logs: ray job logs --address {args.address} -f {job_id}")
    if args.no_wait:
        return 0
    asyncio.run(_follow(client, job_id))
    status = client.get_job_status(job_id)
    print(f"\njob {job_id}: {status}")
    return 0 if status == JobStatus.SUCCEEDED else 1


async def _follow(client, job_id: str) -> None:
    async for chunk in client.tail_job_logs(job_id):
        print(chunk, end="", flush=True)


if __name__ == "__main__":
    sys.exit(main())
