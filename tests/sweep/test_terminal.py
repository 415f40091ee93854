"""What a sweep's terminal shows: the progress (episodes and engine requests per checkpoint, with a rate
and the time left) as plain lines in a stream that is not a terminal (a Ray Job's or SLURM log), and an
actor's output routed to its log file while its failures, with their tracebacks, still reach the
terminal."""

from __future__ import annotations

import io
import json
import socket
import subprocess
import sys
import textwrap

import pytest

from handoff.sweep.progress import Counts, Progress, describe, estimate


class Clock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def served(agent: int, user: int, cached: int = 0) -> dict:
    def role(n):
        return {"requests": n, "prompt_tokens": 100 * n, "cached_prompt_tokens": cached, "generated_tokens": 10 * n,
                "request_s": 1.0 * n, "turns": {"1": {"requests": n, "prompt_tokens": 100 * n, "cached_prompt_tokens": 0}}}
    return {"ck": {"agent": role(agent), "user": role(user)}}


def test_progress_in_a_file_is_plain_lines_at_most_every_interval():
    out, clock = io.StringIO(), Clock()
    progress = Progress({"ck": (0, 8)}, max_steps=12, stream=out, every_s=30, clock=clock)
    assert not progress.tty
    progress.served("replica-1", served(3, 2))  # first requests seen at t=1000
    clock.now += 60
    progress.served("replica-1", served(12, 11))
    progress.show()
    clock.now += 10  # within the interval: nothing new is printed
    progress.episode_done("ck", requests=10)
    clock.now += 30
    progress.episode_done("ck", requests=14)
    progress.close()
    text = out.getvalue()
    assert "\r" not in text and "\x1b" not in text
    lines = text.splitlines()
    assert lines == [
        "[progress] ck: episodes 0/8, requests 23 (agent 12, user 11), 23.0/min, <=3 min left",
        "[progress] ck: episodes 2/8, requests 23 (agent 12, user 11), 13.8/min, ~5 min left",
        "[progress] ck: episodes 2/8, requests 23 (agent 12, user 11), 13.8/min, ~5 min left",
    ]


def test_progress_sums_replicas_and_counts_only_what_moves():
    out, clock = io.StringIO(), Clock()
    progress = Progress({"ck": (0, 2), "other": (0, 2)}, max_steps=12, stream=out, every_s=0, clock=clock)
    progress.served("replica-1", served(2, 1))
    progress.served("replica-2", served(1, 1))
    clock.now += 6
    progress.show()
    assert progress.counts["ck"].requests == {"agent": 3, "user": 2}
    assert out.getvalue().splitlines() == ["[progress] ck: episodes 0/2, requests 5 (agent 3, user 2), 50.0/min, "
                                           "<=23 s left"]  # `other` has no requests yet: no line


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_a_terminal_gets_a_bar_per_checkpoint_or_one_for_many():
    out = Terminal()
    progress = Progress({"ck": (0, 8)}, max_steps=12, stream=out)
    progress.served("replica-1", served(3, 2))
    progress.episode_done("ck", requests=5)
    progress.close()
    assert "\r" in out.getvalue() and "ck: " in out.getvalue() and "1/8 episodes, requests 5 (agent 3, user 2)" in out.getvalue()
    many = Terminal()
    progress = Progress({f"ck{i}": (0, 2) for i in range(9)}, max_steps=12, stream=many)
    progress.episode_done("ck3")
    progress.close()
    assert "9 checkpoints: " in many.getvalue() and "1/18 episodes" in many.getvalue() and "ck3" not in many.getvalue()


def test_estimate_is_a_bound_until_an_episode_finishes_then_the_mean():
    c = Counts(episodes_total=4, requests={"agent": 6, "user": 4}, first_request=0.0)
    per_min, left, bound = estimate(c, max_steps=12, now=60.0)
    assert (per_min, left, bound) == (10.0, (4 * 12 - 10) * 6.0, True)
    c.episodes_done, c.requests_done_episodes = 1, 8
    assert estimate(c, 12, 60.0) == (10.0, (4 * 8 - 10) * 6.0, False)
    c.episodes_done = 4
    assert estimate(c, 12, 60.0)[1] == 0 and "left" not in describe("ck", c, 12, 60.0)
    assert estimate(Counts(episodes_total=4), 12, 60.0) == (None, None, False)



def test_short_episodes_finishing_first_never_make_the_estimate_say_nothing_is_left():
    """`make sweep` said "~0 s left" from 2/8 episodes on: the 2 short episodes' mean (4 requests) was
    less than the 6 running ones had already made (30). Contradicted, the mean gives way to the bound."""
    c = Counts(episodes_total=8, episodes_done=2, requests_done_episodes=8, requests={"agent": 20, "user": 18},
               first_request=0.0)
    per_min, left, bound = estimate(c, max_steps=12, now=60.0)
    assert (per_min, bound) == (38.0, True) and left == pytest.approx((6 * 12 - 30) * 60 / 38)
    assert "<=66 s left" in describe("ck", c, 12, 60.0)
    c.requests = {"agent": 10, "user": 9}  # the running 6 made 11: the mean leaves 13 requests, 2+ each
    assert estimate(c, 12, 60.0) == (19.0, pytest.approx((6 * 4 - 11) * 60 / 19), False)
    c.requests = {"agent": 13, "user": 13}  # made 18: the mean leaves 6, one more each, the least they need
    assert estimate(c, 12, 60.0)[1:] == (pytest.approx(6 * 60 / 26), False)
    c.requests = {"agent": 14, "user": 13}  # made 19: the mean leaves 5, fewer than the 6 episodes need
    assert estimate(c, 12, 60.0)[1:] == (pytest.approx((6 * 12 - 19) * 60 / 27), True)

def test_engine_counters_are_saved_with_hit_rates_and_the_user_share(tmp_path):
    progress = Progress({"ck": (0, 8)}, max_steps=12, enabled=False)
    progress.served("replica-1", served(3, 1, cached=150))
    progress.save(tmp_path / "engines.json")
    saved = json.loads((tmp_path / "engines.json").read_text())
    assert saved["user_share_of_requests"] == {"ck": 0.25}
    assert saved["served"]["ck"]["agent"]["prefix_cache_hit_rate"] == 0.5
    assert saved["served"]["ck"]["user"]["turns"]["1"]["requests"] == 1


class Unanswered:
    """A replica whose counters never come (restarting, or on a lost node): its refs never get ready."""

    def __init__(self, actor_id: str):
        self._actor_id, self.asked = actor_id, 0
        self.served = self

    def remote(self):
        self.asked += 1
        return (self._actor_id, self.asked)


class Answering(Unanswered):
    def __init__(self, actor_id: str, counters):
        super().__init__(actor_id)
        self.counters = counters


class FakeRay:
    def __init__(self, replicas):
        self.by_id = {r._actor_id: r for r in replicas}

    def wait(self, refs, num_returns, timeout):
        return [ref for ref in refs if isinstance(self.by_id[ref[0]], Answering)], None

    def get(self, ref):
        return self.by_id[ref[0]].counters()


def test_a_replica_that_never_answers_holds_back_only_its_own_counts():
    """After a replica is lost, the counts of the others go on; the lost one is asked again only
    after UNANSWERED_S. (Before: one unanswered poll stopped every later poll.)"""
    from handoff.sweep.progress import POLL_EVERY_S

    clock, requests = [0.0], [1]
    lost, alive = Unanswered("lost"), Answering("alive", lambda: served(requests[0], 0))
    progress = Progress({"ck": (0, 8)}, max_steps=12, enabled=False, clock=lambda: clock[0])
    for step in range(1, 6):
        clock[0] = step * POLL_EVERY_S
        requests[0] = step
        progress.poll(FakeRay([lost, alive]), [lost, alive])
        assert progress.counts["ck"].requests["agent"] == step
    assert lost.asked == 1 and alive.asked == 5
    from handoff.sweep.progress import UNANSWERED_S

    clock[0] += UNANSWERED_S
    progress.poll(FakeRay([lost, alive]), [lost, alive])
    assert lost.asked == 2


ACTOR = textwrap.dedent("""
    import os, subprocess, sys, traceback
    from handoff.sweep.logs import ActorOutput
    out = ActorOutput(sys.argv[1] if len(sys.argv) > 1 else None, "engine-agent")
    print("library noise on stdout")
    os.write(2, b"C++ noise on fd 2\\n")
    subprocess.run([sys.executable, "-c", "import sys; print('child noise', file=sys.stderr)"])
    out.say("engine ready")
    try:
        raise RuntimeError("CPU Generator does not use offset")
    except RuntimeError:
        out.failure("engine ck (agent) failed request r1", traceback.format_exc())
        out.failure("engine ck (agent) failed request r2", traceback.format_exc())
""")


def run_actor(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", ACTOR, *args], capture_output=True, text=True, timeout=120)


def test_an_actors_output_goes_to_its_log_and_its_failure_to_the_terminal(tmp_path):
    proc = run_actor(str(tmp_path / "logs"))
    assert proc.returncode == 0, proc.stderr
    assert "noise" not in proc.stdout
    terminal = proc.stderr
    (path,) = (tmp_path / "logs").glob("engine-agent-*.log")
    assert path.name.startswith(f"engine-agent-{socket.gethostname()}-")  # one node's pid is not unique on a cluster
    log = path.read_text()
    for line in ("library noise on stdout", "C++ noise on fd 2", "child noise", "engine ready",
                 "RuntimeError: CPU Generator does not use offset"):
        assert line in log
    assert terminal.startswith("engine ready\n")
    # the failure: the end of the log (what the library said before it) and the traceback
    assert "engine ck (agent) failed request r1. The last" in terminal
    assert "  child noise" in terminal and "Traceback (most recent call last)" in terminal
    assert terminal.count("Traceback") == 1  # the repeat is one line
    assert terminal.rstrip().endswith("failed request r2: RuntimeError: CPU Generator does not use offset")


MOVING = textwrap.dedent("""
    import os, sys
    from handoff.sweep.logs import ActorOutput
    out = ActorOutput(None, "worker")  # an episode worker before its first sweep
    for directory in (*sys.argv[1:], None):
        out.to(directory)
        print(f"stdout in {directory}", flush=True)
        os.write(2, f"fd 2 in {directory}\\n".encode())
        out.say(f"said in {directory}")
""")


def test_a_worker_that_moves_to_another_sweep_logs_into_its_run(tmp_path):
    """An episode worker kept for the next sweep (handoff.sweep.workers) logs into each sweep's logs/
    in turn, and back on the terminal for a verbose one; what it says reaches the terminal throughout."""
    first, second = tmp_path / "first" / "logs", tmp_path / "second" / "logs"
    proc = subprocess.run([sys.executable, "-c", MOVING, str(first), str(second)], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    (log1,), (log2,) = first.glob("worker-*.log"), second.glob("worker-*.log")
    assert log1.name == log2.name  # the same process
    assert log1.read_text() == f"stdout in {first}\nfd 2 in {first}\nsaid in {first}\n"
    assert log2.read_text() == f"stdout in {second}\nfd 2 in {second}\nsaid in {second}\n"
    assert proc.stdout == "stdout in None\n"
    assert proc.stderr == f"said in {first}\nsaid in {second}\nfd 2 in None\nsaid in None\n"


def test_verbose_leaves_the_output_on_the_terminal(tmp_path):
    proc = run_actor()
    assert proc.returncode == 0, proc.stderr
    assert "library noise on stdout" in proc.stdout
    assert "C++ noise on fd 2" in proc.stderr and "child noise" in proc.stderr
    assert "Traceback (most recent call last)" in proc.stderr and not list(tmp_path.iterdir())


def ray_error(request: str) -> str:
    """An episode's error as the driver records it when the engine failed under the worker, in Ray's
    own format (copied from a failed/*.json, Ray 2.60): Ray heads each remote traceback with the
    actor's call, coloured, instead of "Traceback (most recent call last):"."""
    header = "ray.exceptions.RayTaskError(RuntimeError): \x1b[36mray::{}\x1b[39m (pid={}, ip=192.0.2.2, actor_id={}, repr={})\n"
    frames = "".join(f'  File "engine.py", line {i}, in f{i}\n    f{i + 1}()\n' for i in range(20))
    return (header.format("EpisodeWorker.run()", 19262, "1543c0b8235cead638868afd01000000", "<EpisodeWorker at 0x7f93>")
            + '  File "/x/handoff/sweep/worker.py", line 69, in run\n    result = run_episode(...)\n'
            + header.format("EngineHost.generate()", 19261, "0cc16a06ef33abc21835150501000000",
                            "EngineHost(user: ck)")
            + frames + f"RuntimeError: scripted failure for user/ck/retail/5/0/{request}")


def test_the_traceback_excerpt_is_the_innermost_traceback_plain_and_cut():
    from handoff.sweep.logs import TRACEBACK_LINES, error_key, plain, traceback_excerpt

    excerpt = traceback_excerpt(ray_error("30e82deb30ac"))
    lines = excerpt.splitlines()
    assert lines[0] == ("Traceback (most recent call last), in ray::EngineHost.generate() (pid=19261, "
                        "ip=192.0.2.2, actor_id=0cc16a06ef33abc21835150501000000, repr=EngineHost(user: ck)):")
    assert lines[1] == "  ..." and len(lines) == TRACEBACK_LINES + 2
    assert lines[-1] == "RuntimeError: scripted failure for user/ck/retail/5/0/30e82deb30ac"
    assert "worker.py" not in excerpt and "\x1b[" not in excerpt
    assert traceback_excerpt("TimeoutError: episode took over 600 s") is None  # nothing to show
    short = traceback_excerpt("Traceback (most recent call last):\n  File \"x\", line 1\nValueError: v")
    assert short.splitlines() == ["Traceback (most recent call last):", '  File "x", line 1', "ValueError: v"]
    assert plain("\x1b[36mray::X\x1b[39m") == "ray::X"
    assert error_key(ray_error("30e82deb30ac")) == error_key(ray_error("77aa01bc99de")) != error_key("ValueError: v")
    assert error_key("\x1b[36m\x1b[39m") == ""


def test_the_driver_shows_a_failed_shards_traceback_once_per_error(tmp_path):
    """The driver prints the traceback itself: what an actor writes reaches the terminal through Ray's
    log forwarding, which may come after the sweep has ended (a fresh-clone `make test` under load)."""
    from types import SimpleNamespace

    from handoff.sweep.config import checkpoints, validate
    from handoff.sweep.driver import Driver, ShardState
    from handoff.sweep.failures import ShardFailure
    from handoff.sweep.run import compose
    from handoff.sweep.rundir import SweepRun

    cfg = validate(compose([f"run_dir={tmp_path}/run", "engine=scripted"]))
    d = Driver(cfg, SweepRun(tmp_path / "run"), checkpoints(cfg), [], progress=False)
    d.bar.stream = stream = io.StringIO()
    for i, request in enumerate(["30e82deb30ac", "77aa01bc99de", "0123456789ab"]):  # each request its own id
        d._give_up(ShardState(SimpleNamespace(id=f"ck__retail__t0__000{i}"), {}), ray_error(request), ShardFailure.EPISODE)
    d._give_up(ShardState(SimpleNamespace(id="ck__retail__t0__0009"), {}), "TimeoutError: episode took too long", ShardFailure.EPISODE)
    d._give_up(ShardState(SimpleNamespace(id="ck__retail__t0__0010"), {}), "\x1b[36m\x1b[39m", ShardFailure.EPISODE)
    out = stream.getvalue()
    assert out.count("Traceback (most recent call last), in ray::EngineHost.generate()") == 1 and "\x1b[" not in out
    assert out.count("failed: RuntimeError: scripted failure for user/ck/retail/5/0/") == 3
    assert "shard ck__retail__t0__0009 failed: TimeoutError: episode took too long" in out
    assert "shard ck__retail__t0__0010 failed: unknown error" in out


SCRIPTED = ["engine=scripted", "domain=[airline,retail]", "tasks.per_kind=null", "tasks.limit=1", "shard_size=1",
            "workers.processes=1", "workers.threads=2", "logger.mode=disabled", "cluster.num_cpus=2", "max_attempts=1",
            "engine.script.fail_sessions='^user/[^/]+/retail/'"]  # every retail user turn fails on the engine


@pytest.mark.ray
def test_a_sweep_in_a_log_file_shows_plan_progress_and_the_engines_traceback(tmp_path):
    """A scripted sweep as a Ray Job or SLURM log sees it (a pipe): the plan, progress lines without
    carriage returns, the engine's failure with its traceback, the failed shard, where the results are;
    the actors' own output is in <run>/logs/."""
    run_dir = tmp_path / "run"
    proc = subprocess.run([sys.executable, "-m", "handoff.sweep", *SCRIPTED, f"run_dir={run_dir}"],
                          capture_output=True, text=True, timeout=600)
    terminal = proc.stdout + proc.stderr
    assert proc.returncode == 1, terminal[-5000:]  # the retail shard failed
    assert "\r" not in terminal
    assert "sweep default: 1 checkpoint(s) (smollm2-135m-instruct) x domains airline, retail: 2 episodes" in terminal
    assert f"logs: {run_dir / 'logs'}/ (verbose=true shows them here)" in terminal
    assert "[progress] smollm2-135m-instruct: episodes 1/2, requests" in terminal
    assert "RuntimeError: scripted failure for user/smollm2-135m-instruct/retail/" in terminal
    assert "Traceback (most recent call last)" in terminal and "\x1b[" not in terminal
    assert "shard smollm2-135m-instruct__retail__t0__0000 failed: " in terminal
    assert f"results: {run_dir / 'shards'}" in terminal
    engine_logs = "".join(p.read_text() for p in (run_dir / "logs").glob("engine-*.log"))
    assert "RuntimeError: scripted failure for user/" in engine_logs
    assert list((run_dir / "logs").glob("worker-*.log"))
    served = json.loads((run_dir / "logs" / "engines.json").read_text())["served"]["smollm2-135m-instruct"]
    assert served["agent"]["requests"] >= 1 and served["user"]["requests"] >= 1
    # 40 lines before issue 50, plus the headline table that now answers before the paths (44 here)
    assert len(terminal.splitlines()) <= 48, terminal


@pytest.mark.ray
def test_a_user_simulator_engine_that_does_not_start_fails_each_shard_with_the_reason(tmp_path):
    """The user simulator's engine fails to load: each shard is recorded failed with the reason (its
    traceback on the terminal), and the sweep ends with its summary and report, as when a
    checkpoint's own engine does not start. (Before: the driver crashed with a traceback, exit 1 as
    a bug, no shard recorded and no report.)"""
    run_dir = tmp_path / "run"
    args = [a for a in SCRIPTED if not a.startswith("engine.script.fail_sessions")]
    proc = subprocess.run([sys.executable, "-m", "handoff.sweep", *args, "engine.script.fail_load='^user/'",
                           f"run_dir={run_dir}"], capture_output=True, text=True, timeout=600)
    terminal = proc.stdout + proc.stderr
    assert proc.returncode == 1, terminal[-5000:]
    assert "sweep default: 0/2 episodes" in terminal and "2 failed shard(s)" in terminal, terminal[-5000:]
    assert "RuntimeError: scripted load failure of user/smollm2-135m-instruct" in terminal
    failed = sorted(p.name for p in (run_dir / "failed").glob("*.json"))
    assert failed == ["smollm2-135m-instruct__airline__t0__0000.json", "smollm2-135m-instruct__retail__t0__0000.json"]
    error = json.loads((run_dir / "failed" / failed[0]).read_text())["error"]
    assert error.startswith("engine for the user simulator (smollm2-135m-instruct) did not start: ")
    assert "scripted load failure of user/smollm2-135m-instruct" in error
