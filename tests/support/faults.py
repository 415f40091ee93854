"""Faults injected into the real processes of a local Ray cluster: a `worker_process_setup_hook`
(`inject`) that every Ray worker of the cluster runs at start-up, and a plan that the test writes
to a JSON file (FAULTS_ENV names it) and may change between sweeps: the hooked calls read it each time.

Plan keys (all optional):
- "poison": a regex over episode keys "<model>/<domain>/<task>/<trial>": an episode worker about to
  run a matching episode SIGKILLs its own process (an episode that OOMs or crashes its worker).
- "kill_on_load": a file path: the first engine replica to begin an in-place load (EngineHost.load)
  creates the file and SIGKILLs its own process, mid-reload.
- "fail_loads": a regex over checkpoint names: building an engine for a matching checkpoint raises
  (a checkpoint that cannot load); with "fail_once" (a file path) only the first such build, the one
  that creates the file, raises (one replica's failed load); with "fail_role" only a replica of that
  role ("agent", "user").
- "fail_rebuilds": a regex over checkpoint names: a replica that Ray restarted cannot build its
  engine again (as one whose GPU is left in a bad state by the crash).
- "kill_requests": a regex over request ids: a replica about to serve a matching request (inside its
  lane, where the engine's work is) SIGKILLs its own process, every time (a request that crashes its
  engine); logged as "kill_request <pid> <request id>".
- "kill_serving": a regex over checkpoint names, with "kill_serving_once" (a file path): the replica
  that gets the first request for a matching checkpoint creates the file and SIGKILLs its own process.
- "hang_restarts": seconds: an engine replica that Ray restarts hangs that long in its constructor
  before it is alive again (as one whose node is gone and never comes back).
- "slow": a regex over request ids: an engine replica holds a matching request "slow_s" seconds
  once admitted (in its lane: its own time) before serving it; with "slow_once" (a file path) only the first one. Logged as "slow <id>", then
  "cancelled <id>" if its asyncio task is cancelled meanwhile, else "slow_done <id>".

Each fault appends "<event> <pid> <what> <time.time()>" to the plan's "log" file (if given); so do
episodes, as "run <pid> <key>" when one starts and "ran <pid> <key> <outcome>" when it ends (with
"traced": true in the plan).
"""

from __future__ import annotations

import asyncio
import functools
import json
import os
import re
import signal
import time
from pathlib import Path

FAULTS_ENV = "HANDOFF_TEST_FAULTS"


def plan() -> dict:
    path = os.environ.get(FAULTS_ENV)
    return json.loads(Path(path).read_text()) if path and Path(path).is_file() else {}


def write_plan(path: Path, **faults) -> None:
    path.write_text(json.dumps(faults))


def _first(marker: str) -> bool:
    """Whether this call is the first to claim `marker` (O_EXCL: one winner across processes)."""
    try:
        os.close(os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
    except FileExistsError:
        return False
    return True


def _log(p: dict, event: str, what: str) -> None:
    if p.get("log"):
        with open(p["log"], "a") as f:
            f.write(f"{event} {os.getpid()} {what} {time.time():.3f}\n")


def _die(p: dict, event: str, what: str) -> None:
    _log(p, event, what)
    os.kill(os.getpid(), signal.SIGKILL)


def inject() -> None:
    """The setup hook: wrap the episode worker's and the engine replica's entry points."""
    from handoff.sweep.engines import EngineHost
    from handoff.sweep.worker import EpisodeWorker

    run, load, build, generate = EpisodeWorker.run, EngineHost.load, EngineHost._build, EngineHost.generate
    serve = EngineHost._generate
    init = EngineHost.__init__

    def hanging_init(self, checkpoint: dict, *args, **kwargs):
        import ray

        p = plan()
        if p.get("hang_restarts") and ray.get_runtime_context().was_current_actor_reconstructed:
            _log(p, "hang_restart", checkpoint["name"])
            time.sleep(p["hang_restarts"])
        init(self, checkpoint, *args, **kwargs)

    def poisoned_run(self, episode: dict, *args, **kwargs):
        p = plan()
        key = "/".join(str(episode[k]) for k in ("model", "domain", "task_id", "trial"))
        if p.get("poison") and re.search(p["poison"], key):
            _die(p, "poison", key)
        if not p.get("traced"):
            return run(self, episode, *args, **kwargs)
        _log(p, "run", key)
        try:
            result = run(self, episode, *args, **kwargs)
        except BaseException as exc:
            _log(p, "ran", f"{key} {type(exc).__name__}")
            raise
        _log(p, "ran", f"{key} ok")
        return result

    async def killed_load(self, checkpoint: dict):
        p = plan()
        if p.get("kill_on_load") and _first(p["kill_on_load"]):
            _die(p, "kill_on_load", checkpoint["name"])
        return await load(self, checkpoint)

    async def failing_build(self):
        p = plan()
        name = self.checkpoint.name
        if p.get("fail_loads") and re.search(p["fail_loads"], name) and p.get("fail_role", self.role) == self.role \
                and (not p.get("fail_once") or _first(p["fail_once"])):
            _log(p, "fail_load", f"{self.role}/{name}")
            raise RuntimeError(f"injected load failure of {name}")
        if p.get("fail_rebuilds") and re.search(p["fail_rebuilds"], name) and _reconstructed():
            _log(p, "fail_rebuild", f"{self.role}/{name}")
            raise RuntimeError(f"injected rebuild failure of {name}")
        return await build(self)

    async def killing_serve(self, prompt_ids, sampling, request_id, *args):
        p = plan()
        if p.get("kill_requests") and re.search(p["kill_requests"], request_id):
            _die(p, "kill_request", request_id)
        await _slow(p, request_id)  # admitted (in its lane): the request's own time
        return await serve(self, prompt_ids, sampling, request_id, *args)

    @functools.wraps(generate)  # keeps Ray's method options (max_task_retries=0): a caller reads them here
    async def killing_generate(self, prompt_ids, sampling, request_id, *args, **kwargs):
        p = plan()
        expected = (args[0] if args else kwargs.get("checkpoint")) or {}
        if p.get("kill_serving") and re.search(p["kill_serving"], expected.get("name", "")) \
                and _first(p["kill_serving_once"]):
            _die(p, "kill_serving", expected["name"])
        return await generate(self, prompt_ids, sampling, request_id, *args, **kwargs)

    EpisodeWorker.run, EngineHost.load, EngineHost._build = poisoned_run, killed_load, failing_build
    EngineHost.generate, EngineHost.__init__, EngineHost._generate = killing_generate, hanging_init, killing_serve


async def _slow(p: dict, request_id: str) -> None:
    if not (p.get("slow") and re.search(p["slow"], request_id) and (not p.get("slow_once") or _first(p["slow_once"]))):
        return
    _log(p, "slow", request_id)
    try:
        await asyncio.sleep(p["slow_s"])
    except asyncio.CancelledError:
        _log(p, "cancelled", request_id)
        raise
    _log(p, "slow_done", request_id)


def _reconstructed() -> bool:
    import ray

    return ray.get_runtime_context().was_current_actor_reconstructed


def inject_with_audit() -> None:
    """Both setup hooks (Ray runs one): tests/support/cluster.py's audit_writes, and `inject`."""
    from tests.support.cluster import audit_writes

    audit_writes()
    inject()
