"""How often the default model's first agent turn hits the per-turn token limit, per sampling setting.

Drives the real agent (HandoffAgent on the vLLM-CPU engine) through its first turn of each task:
tau2's greeting, the user simulator's first message (generated once per task, shared by every
setting), then one agent turn per setting. Prints (JSON, bench/ convention) per setting the
fraction of turns cut at max_tokens, how many turns called a tool, and the CPU/wall time
(docs/benchmarks.md, "Sampling of the default model"). Progress goes to stderr.

    python -m bench.bench_truncation --per-kind 2 --settings greedy-256 greedy-rep1.2-256
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from concurrent.futures import ThreadPoolExecutor

SETTINGS = {  # name: handoff.engine.base.Sampling fields of the agent
    "greedy-256": {"temperature": 0.0, "max_tokens": 256},
    "greedy-rep1.1-256": {"temperature": 0.0, "repetition_penalty": 1.1, "max_tokens": 256},
    "greedy-rep1.2-256": {"temperature": 0.0, "repetition_penalty": 1.2, "max_tokens": 256},
    "greedy-rep1.3-256": {"temperature": 0.0, "repetition_penalty": 1.3, "max_tokens": 256},
    "greedy-rep1.2-512": {"temperature": 0.0, "repetition_penalty": 1.2, "max_tokens": 512},
    "greedy-512": {"temperature": 0.0, "max_tokens": 512},
    "t0.7-p0.9-rep1.1-256": {"temperature": 0.7, "top_p": 0.9, "repetition_penalty": 1.1, "max_tokens": 256},
    "t0.7-p0.9-256": {"temperature": 0.7, "top_p": 0.9, "max_tokens": 256},
}


def first_user_messages(tasks, engine, chat, seed: int) -> dict:
    from tau2.orchestrator.orchestrator import DEFAULT_FIRST_AGENT_MESSAGE

    from handoff.agent.user import UserSpec, make_user

    def one(item):
        domain, task = item
        user = make_user(UserSpec(), task, engine=engine, chat=chat, session_id=f"user/{domain}/{task.id}")
        user.set_seed(seed)
        message, _ = user.generate_next_message(DEFAULT_FIRST_AGENT_MESSAGE, user.get_init_state())
        return (domain, task.id), message

    with ThreadPoolExecutor(len(tasks)) as pool:
        return dict(pool.map(one, tasks))


def first_agent_turn(domain, task, user_message, engine, chat, sampling, seed: int) -> dict:
    from tau2.orchestrator.orchestrator import DEFAULT_FIRST_AGENT_MESSAGE
    from tau2.registry import registry

    from handoff.agent.episode import EpisodeSettings, make_agent

    settings = EpisodeSettings(agent_sampling=sampling, max_context_tokens=engine.max_model_len)
    agent = make_agent(registry.get_env_constructor(domain)(), engine, chat, settings, f"{domain}/{task.id}/{seed}")
    agent.set_seed(seed)
    reply, _ = agent.generate_next_message(user_message, agent.get_init_state([DEFAULT_FIRST_AGENT_MESSAGE]))
    stop = agent.log.stop
    return {"domain": domain, "task": task.id, "prompt_tokens": agent.log.prompt_tokens,
            "completion_tokens": agent.log.completion_tokens,
            "truncated": bool(stop and stop.kind and stop.kind.value == "truncated_generation"),
            "stop": stop.kind.value if stop and stop.kind else None,
            "tool_calls": [c.name for c in reply.tool_calls or []],
            "text": chat.decode(agent.context.ids[-agent.log.completion_tokens:])[:400]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--per-kind", type=int, default=2, help="test tasks per kind and domain")
    parser.add_argument("--settings", nargs="*", default=list(SETTINGS), choices=list(SETTINGS))
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--details", action="store_true", help="every turn's stop, tool calls and text")
    parser.add_argument("--out")
    args = parser.parse_args()

    import handoff  # noqa: F401
    from bench.common import report
    from handoff.engine.base import Sampling
    from handoff.engine.chat import ChatFormat
    from handoff.engine.models import SMOLLM2, ensure
    from handoff.engine.vllm_engine import EngineSettings, VLLMEngine
    from handoff.tasks import KINDS, load_tasks

    tasks = [(d, t) for d in ("airline", "retail") for k in KINDS
             for t in load_tasks(d, split="test", kinds=[k])[:args.per_kind]]
    path = str(ensure(SMOLLM2))
    chat = ChatFormat(path, "hermes")
    results = {"tasks": [f"{d}/{t.id}" for d, t in tasks], "settings": {}}
    with VLLMEngine(EngineSettings(model=path, max_model_len=8192)) as engine:
        started = time.perf_counter()
        users = first_user_messages(tasks, engine, chat, args.seed)
        results["user_wall_s"] = round(time.perf_counter() - started, 1)
        for name in args.settings:
            sampling = Sampling(**SETTINGS[name])
            started, cpu = time.perf_counter(), time.process_time()
            with ThreadPoolExecutor(len(tasks)) as pool:
                turns = list(pool.map(lambda dt: first_agent_turn(dt[0], dt[1], users[(dt[0], dt[1].id)], engine,
                                                                  chat, sampling, args.seed), tasks))
            cut = sum(t["truncated"] for t in turns)
            results["settings"][name] = {
                "sampling": SETTINGS[name], "truncated": cut, "turns": len(turns),
                "fraction": round(cut / len(turns), 3),
                "with_tool_call": sum(bool(t["tool_calls"]) for t in turns),
                "wall_s": round(time.perf_counter() - started, 1), "cpu_s": round(time.process_time() - cpu, 1),
                "turn_details": turns}
            if not args.details:
                del results["settings"][name]["turn_details"]
            print(json.dumps({"name": name, **results["settings"][name]}), file=sys.stderr, flush=True)
    report("truncation", results, args.out)


if __name__ == "__main__":
    main()
