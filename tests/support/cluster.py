"""A real multi-node Ray cluster on this machine: a head and nodes started with `ray start --block`
(each node is the process tree of its `ray start`), every port picked free at run time, nodes
lost by SIGKILL of their raylet's process tree and everything cleaned up by pid (never `ray stop`).

    with LocalCluster() as cluster:
        cluster.start_head(num_cpus=2)                    # and connects this process (ray.init)
        gpu = cluster.add_node(num_cpus=1, num_gpus=2)   # declared GPUs on a CPU machine
        ...
        cluster.kill_node(gpu)
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import psutil

RAY = str(Path(sys.executable).with_name("ray"))
REPO = Path(__file__).resolve().parents[2]
AUDIT_ENV = "HANDOFF_TEST_AUDIT"  # "<watched dir>:<log dir>" for audit_writes


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def cluster_env(extra_path: str | None = None) -> dict[str, str]:
    """The environment of the cluster's processes: this interpreter's bin first on PATH (Ray Jobs run
    their entrypoint with the `python` found there), this checkout first on PYTHONPATH (its handoff
    and tests.support in every Ray worker), no usage stats, no auth."""
    env = dict(os.environ, RAY_USAGE_STATS_ENABLED="0", RAY_AUTH_MODE="disabled",
               RAY_raylet_start_wait_time_s="600",  # a loaded machine registers a node slowly
               # The GCS checks each node every second after the last check ends; 10 failures in a row
               # lose it: a killed node fails fast (~10 s), a busy one only after 10 checks of up to
               # 10 s each ran out (~110 s unanswered).
               RAY_health_check_period_ms="1000", RAY_health_check_timeout_ms="10000",
               RAY_health_check_failure_threshold="10")
    env["PATH"] = os.pathsep.join([extra_path or str(Path(sys.executable).parent), env.get("PATH", "")])
    env["PYTHONPATH"] = os.pathsep.join(p for p in [str(REPO), env.get("PYTHONPATH", "")] if p)
    return env


def audit_writes() -> None:
    """A Ray `worker_process_setup_hook`: every write this process makes under the watched directory
    (open for writing, rename, mkdir, remove) is logged to <log dir>/<pid>.log (see AUDIT_ENV)."""
    watched, _, log_dir = os.environ[AUDIT_ENV].partition(":")
    log = Path(log_dir) / f"{os.getpid()}.log"
    events = {"os.rename": 0, "os.replace": 0, "os.mkdir": 0, "os.remove": 0, "os.truncate": 0}

    def hook(event: str, args: tuple) -> None:
        if event == "open" and isinstance(args[0], (str, os.PathLike)):
            mode, flags = args[1] or "", args[2] or 0
            writes = any(c in str(mode) for c in "wax+") or flags & (os.O_WRONLY | os.O_RDWR | os.O_CREAT)
            paths = [args[0]] if writes else []
        else:
            paths = [a for a in args[:2] if isinstance(a, (str, os.PathLike))] if event in events else []
        for path in paths:
            if os.fspath(path).startswith(watched) and not os.fspath(path).startswith(log_dir):
                with open(log, "a") as f:  # not under `watched`: no recursion
                    f.write(f"{event} {os.fspath(path)}\n")

    sys.addaudithook(hook)


def audited_writes(log_dir: Path) -> list[str]:
    return [line for p in sorted(log_dir.glob("*.log")) for line in p.read_text().splitlines()]


@dataclass
class Node:
    name: str
    proc: subprocess.Popen
    num_cpus: float
    num_gpus: float
    log: Path
    marker: str  # a custom resource only this node has (resources={marker: 0.001} pins to it)
    node_id: str | None = None
    pids: set[int] = field(default_factory=set)

    def tree(self) -> list[psutil.Process]:
        """The node's live processes: its `ray start --block` and every descendant (raylet, workers)."""
        try:
            root = psutil.Process(self.proc.pid)
            procs = [root, *root.children(recursive=True)]
        except psutil.NoSuchProcess:
            procs = []
        known = {p.pid for p in procs}
        for pid in self.pids - known:  # workers re-parented after their raylet died
            try:
                procs.append(psutil.Process(pid))
            except psutil.NoSuchProcess:
                pass
        self.pids |= known
        return procs


class LocalCluster:
    """Head + nodes; `address` is the GCS address, `dashboard` the Ray Jobs URL."""

    def __init__(self, object_store_mb: int = 80, env: dict | None = None):
        self.tmp = Path(tempfile.mkdtemp(prefix="rc-", dir="/tmp"))  # AF_UNIX paths must stay short
        self.object_store = object_store_mb << 20
        self.env = env or cluster_env()
        self.nodes: list[Node] = []
        self.address = self.dashboard = ""

    def __enter__(self) -> LocalCluster:
        return self

    def __exit__(self, *exc) -> None:
        self.shutdown()

    def _start(self, name: str, args: list[str], num_cpus: float, num_gpus: float) -> Node:
        ports = {f"--{p}": free_port() for p in (
            "node-manager-port", "object-manager-port", "dashboard-agent-listen-port", "dashboard-agent-grpc-port",
            "runtime-env-agent-port", "metrics-export-port")}
        marker = f"node_{name}_{os.getpid()}"
        cmd = [RAY, "start", "--block", f"--resources={json.dumps({marker: 1})}",
               "--node-ip-address=127.0.0.1", f"--num-cpus={num_cpus:g}",
               f"--num-gpus={num_gpus:g}", f"--object-store-memory={self.object_store}", "--disable-usage-stats",
               "--min-worker-port=0", "--max-worker-port=0", *(f"{k}={v}" for k, v in ports.items()), *args]
        log = self.tmp / f"{name}.log"
        proc = subprocess.Popen(cmd, stdout=log.open("wb"), stderr=subprocess.STDOUT, env=self.env,
                                start_new_session=True)
        node = Node(name, proc, num_cpus, num_gpus, log, marker)
        self.nodes.append(node)
        return node

    def start_head(self, num_cpus: float = 2, num_gpus: float = 0, dashboard: bool = False,
                   timeout: float = 300, **init) -> Node:
        """Start the head and connect this process to it as a driver (`init`: more ray.init arguments)."""
        import ray

        self._check_auth()
        port, dash = free_port(), free_port()
        args = ["--head", f"--port={port}", f"--temp-dir={self.tmp}", f"--ray-client-server-port={free_port()}",
                f"--include-dashboard={'true' if dashboard else 'false'}", f"--dashboard-port={dash}",
                "--dashboard-host=127.0.0.1"]
        self.address, self.dashboard = f"127.0.0.1:{port}", f"http://127.0.0.1:{dash}"
        head = self._start("head", args, num_cpus, num_gpus)
        self._until(lambda: b"Ray runtime started" in head.log.read_bytes(), timeout, f"{head.name} to start", head)
        ray.init(address=self.address, log_to_driver=False, **init)
        self._wait_registered(head, timeout)
        return head

    def _check_auth(self) -> None:
        """This process (the driver) must use the cluster's Ray auth mode. A driver in token mode
        rejects the GCS's unauthenticated calls, among them the poll of each actor's owner, and the
        GCS then destroys every actor the driver creates before it starts (`all references to the
        actor were removed`). An earlier local ray.init() with RAY_AUTH_MODE unset switches a process
        to token mode for good (tests/conftest.py prevents it)."""
        from ray._raylet import AuthenticationMode, get_authentication_mode

        mine, wanted = get_authentication_mode(), self.env.get("RAY_AUTH_MODE", "disabled")
        if mine != getattr(AuthenticationMode, wanted.upper()):
            raise RuntimeError(f"this process uses Ray auth mode {mine} (RAY_AUTH_MODE="
                               f"{os.environ.get('RAY_AUTH_MODE')}), the cluster RAY_AUTH_MODE={wanted}: the actors "
                               "this driver creates would be destroyed before they start. Set RAY_AUTH_MODE before "
                               "the process's first ray.init()")

    def add_node(self, num_cpus: float = 1, num_gpus: float = 0, timeout: float = 300) -> Node:
        """Start a node and wait until this driver sees it alive with its resources."""
        node = self._start(f"node{len(self.nodes)}", [f"--address={self.address}"], num_cpus, num_gpus)
        self._wait_registered(node, timeout)
        return node

    def alive(self, node: Node) -> bool:
        """Whether the GCS lists the node alive (it may list a killed node alive until its health
        checks fail)."""
        import ray

        return node.proc.poll() is None and any(n["NodeID"] == node.node_id and n["Alive"] for n in ray.nodes())

    def _wait_registered(self, node: Node, timeout: float) -> None:
        """Until the GCS lists the node alive with all its resources, in both of the views a sweep
        reads (ray.nodes() and ray.cluster_resources()); records its id. A node registers in its
        node table entry first and reaches the resource view later, seconds apart on a busy machine."""
        import ray

        def registered() -> bool:
            entry = [n for n in ray.nodes() if n["Alive"] and node.marker in n["Resources"]]
            if not entry:
                return False
            node.node_id, res = entry[0]["NodeID"], entry[0]["Resources"]
            return (res.get("CPU", 0) == node.num_cpus and res.get("GPU", 0) == node.num_gpus
                    and node.marker in ray.cluster_resources())

        self._until(registered, timeout, f"{node.name} to register", node)
        node.tree()

    @staticmethod
    def _until(ready, timeout: float, what: str, node: Node) -> None:
        deadline = time.monotonic() + timeout
        while not ready():
            if node.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"waited {timeout}s for {what} (exit {node.proc.poll()}): "
                                   f"{node.log.read_text(errors='replace')[-3000:]}")
            time.sleep(0.5)

    def kill_node(self, node: Node) -> list[int]:
        """Lose a node as a machine would: SIGKILL its raylet's whole process tree (workers,
        actors, agents) and its `ray start`; returns the pids killed."""
        procs = node.tree()
        for p in procs:
            try:
                p.send_signal(signal.SIGKILL)
            except psutil.NoSuchProcess:
                pass
        psutil.wait_procs(procs, timeout=30)
        try:
            node.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            pass
        return [p.pid for p in procs]

    def shutdown(self) -> None:
        import ray

        ray.shutdown()
        for node in reversed(self.nodes):  # nodes before the head
            self.kill_node(node)
        self.nodes.clear()
        shutil.rmtree(self.tmp, ignore_errors=True)
