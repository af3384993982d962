"""Starting the real LiteLLM proxy for the tests: a subprocess on loopback, waited for until its
liveliness endpoint answers, stopped at the end."""

from __future__ import annotations

import socket
import subprocess
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest

from fake_upstream import TIMEOUT

# Importing the proxy is slow (seconds of CPU), more so on a loaded machine.
PROXY_START_TIMEOUT = 180.0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@contextmanager
def running_proxy(
    command: Sequence[str], url: str, env: Mapping[str, str], directory: Path
) -> Iterator[str]:
    """Run ``command`` (a LiteLLM proxy listening at ``url``) in ``directory``; yield ``url``
    once it answers. Its output goes to ``directory / "proxy.log"``, shown if it exits."""
    log_path = directory / "proxy.log"
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            list(command), cwd=directory, env=dict(env), stdout=log, stderr=subprocess.STDOUT
        )
        try:
            deadline = time.monotonic() + PROXY_START_TIMEOUT
            while True:
                if process.poll() is not None:
                    log.flush()
                    output = log_path.read_text(errors="replace")[-3000:]
                    pytest.fail(f"the LiteLLM proxy exited with {process.returncode}:\n{output}")
                try:
                    if httpx.get(url + "/health/liveliness", timeout=1.0).status_code == 200:
                        break
                except httpx.HTTPError:
                    pass
                if time.monotonic() > deadline:
                    pytest.fail("the LiteLLM proxy did not start in time")
                time.sleep(0.25)
            yield url
        finally:
            process.terminate()
            try:
                process.wait(TIMEOUT)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(TIMEOUT)
