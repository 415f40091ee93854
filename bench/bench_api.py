"""Episodes per minute of the API agent (handoff.agent.api_agent through litellm) against a local
OpenAI-compatible server, beside tau2's own runner (`tau2.run.run_tasks` with its LLMAgent) against
the same server: the same tasks, the same user simulator (tau2's litellm one on the same server),
the same max_steps, in the same process, at concurrency 1, 4 and 16.

The server is vLLM's own (`python -m vllm.entrypoints.openai.api_server`, CPU build) serving
tiny-hermes with its Hermes tool parser (handoff.testing.openai_server), so the figures measure the
client paths on a tiny model: overhead, not a frontier model's latency.

    python -m bench.bench_api [--tasks 32] [--concurrency 1 4 16] [--max-steps 8] [--out results.json]
"""

from __future__ import annotations

import argparse
import time
from concurrent.futures import ThreadPoolExecutor

import handoff  # noqa: F401
from bench.common import report

LLM = "hosted_vllm/tiny-hermes"


def ours(url: str, tasks, concurrency: int, max_steps: int) -> int:
    from handoff.agent.episode import EpisodeSettings, run_episode
    from handoff.agent.user import UserSpec, make_user
    from handoff.engine.base import Sampling
    from handoff.settings import ApiModelSettings

    args = {"api_base": url}
    settings = EpisodeSettings(max_steps=max_steps, agent_sampling=Sampling(max_tokens=64),
                               api=ApiModelSettings(llm=LLM, llm_args=args))

    def one(task):
        user = make_user(UserSpec(kind="litellm", llm=LLM, llm_args={**args, "max_tokens": 32}), task)
        return run_episode("airline", task, None, None, user, settings, seed=300)

    with ThreadPoolExecutor(concurrency) as pool:
        return [len(r.simulation.messages) for r in pool.map(one, tasks)]


def tau2_runner(url: str, tasks, concurrency: int, max_steps: int) -> int:
    from tau2.run import run_tasks

    results = run_tasks("airline", tasks, agent="llm_agent", user="user_simulator", llm_agent=LLM,
                        llm_args_agent={"api_base": url, "temperature": 0.0, "max_tokens": 64}, llm_user=LLM,
                        llm_args_user={"api_base": url, "max_tokens": 32}, max_steps=max_steps,
                        max_concurrency=concurrency, console_display=False, log_level="ERROR")
    return [len(sim.messages) for sim in results.simulations]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=32)
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 4, 16])
    parser.add_argument("--max-steps", type=int, default=8)
    parser.add_argument("--out")
    args = parser.parse_args()

    from handoff.engine.models import TINY, ensure
    from handoff.tasks import get_task
    from handoff.testing.openai_server import vllm_server

    tasks = [get_task("airline", str(i)) for i in range(args.tasks)]
    rows = []
    with vllm_server(ensure(TINY), "tiny-hermes") as url:
        ours(url, tasks[:1], 1, args.max_steps)  # warm: imports, the server's first requests
        for c in args.concurrency:
            for name, run in (("handoff_api_agent", ours), ("tau2_llm_agent", tau2_runner)):
                started = time.perf_counter()
                lengths = run(url, tasks, c, args.max_steps)
                wall, n = time.perf_counter() - started, len(lengths)
                rows.append({"path": name, "concurrency": c, "episodes": n, "wall_s": round(wall, 2),
                             "episodes_per_min": round(60 * n / wall, 1),
                             "mean_messages": round(sum(lengths) / n, 2)})
                print(rows[-1], flush=True)
    ratio = {c: round(next(r["episodes_per_min"] for r in rows if r["path"] == "handoff_api_agent" and r["concurrency"] == c)
                      / next(r["episodes_per_min"] for r in rows if r["path"] == "tau2_llm_agent" and r["concurrency"] == c), 2)
             for c in args.concurrency}
    report("api", {"tasks": args.tasks, "max_steps": args.max_steps, "rows": rows, "ratio_ours_to_tau2": ratio}, args.out)


if __name__ == "__main__":
    main()
