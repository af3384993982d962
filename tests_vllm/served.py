"""A real vLLM OpenAI-compatible server with the plugin, for the served tests: ``vllm serve``
(through ``serve.py``) on loopback, loading the plugin from its entry point in each process."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

TEMPLATE = "{% for m in messages %}{{ m['content'] }}\n{% endfor %}"

# The served model's length: a request of MODEL_LEN - 100 tokens (the end-of-text token
# ignored) takes seconds on the tiny model, where a short request takes milliseconds.
MODEL_LEN = 4096


@dataclass
class Server:
    url: str
    log: Path
    pid: int

    def log_text(self) -> str:
        return self.log.read_text(errors="replace")

    def api_server_pids(self) -> list[int]:
        """The processes that serve HTTP and detokenize (one per ``--api-server-count``)."""
        import psutil

        root = psutil.Process(self.pid)
        procs = [root, *root.children(recursive=True)]
        named = [p.pid for p in procs if "apiserver" in _title(p).lower()]
        return named or [self.pid]


def _title(p: object) -> str:
    """A process's name and title (vLLM titles its processes, e.g. ``VLLM::APIServer_0``)."""
    try:
        return " ".join([p.name(), *p.cmdline()])  # type: ignore[attr-defined]
    except Exception:
        return ""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@contextmanager
def running_server(
    model_dir: Path, workdir: Path, *args: str, env: dict[str, str] | None = None
) -> Iterator[Server]:
    """Start the server with ``args`` beyond the common ones; wait for ``/health``; stop it."""
    port = free_port()
    template = workdir / "chat.jinja"
    template.write_text(TEMPLATE)
    log_path = workdir / "server.log"
    log = log_path.open("w")
    full_env = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_TARGET_DEVICE": "cpu"}
    full_env.pop("VLLM_ENABLE_V1_MULTIPROCESSING", None)  # the server's own processes
    full_env.update(env or {})
    proc = subprocess.Popen(
        [
            sys.executable,
            str(Path(__file__).with_name("serve.py")),
            str(model_dir),
            "--served-model-name",
            "tiny",
            "--load-format",
            "dummy",
            "--dtype",
            "float32",
            "--max-model-len",
            # Long enough that a request not stopped is still generating seconds later.
            str(MODEL_LEN),
            "--enforce-eager",
            "--seed",
            "0",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--chat-template",
            str(template),
            *args,
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
        env=full_env,
        start_new_session=True,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 300
        while True:
            assert proc.poll() is None, log_path.read_text()[-3000:]
            try:
                with urllib.request.urlopen(url + "/health", timeout=2):
                    break
            except OSError:
                assert time.monotonic() < deadline, "the server did not start"
                time.sleep(1)
        yield Server(url, log_path, proc.pid)
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        log.close()
