"""Starting the real LiteLLM proxy for the tests: a subprocess on loopback, waited for until its
liveliness endpoint answers, stopped at the end; and the proxy recipe of ``docs/litellm.md``,
read from the page (``tests/conftest.py`` starts one such proxy for the whole run)."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from fake_upstream import TIMEOUT

# Importing the proxy is slow (seconds of CPU), more so on a loaded machine.
PROXY_START_TIMEOUT = 180.0


def repository(config: pytest.Config) -> Path:
    """The repository: where the pyproject.toml in use is, also when the tests run from a copy
    outside the tree (`.ci/run` passes `-c`)."""
    assert config.inipath is not None
    return config.inipath.parent


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def litellm_script() -> str:
    """The ``litellm`` script of the environment running the tests."""
    bin_dir = str(Path(sys.executable).parent)
    executable = shutil.which("litellm", path=bin_dir)
    assert executable is not None, f"no litellm script in {bin_dir}"
    return executable


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


# --- the recipe of docs/litellm.md -----------------------------------------------------------

#: The port the page's lines use; the tests run the proxy on a free one instead.
DOC_PORT = "4000"
RECIPE_BLOCKS = {"install", "config", "start", "client-stream", "client-once"}


def recipe_blocks(page: Path) -> dict[str, str]:
    """The page's blocks by their markers: ``<!-- recipe:NAME -->`` before a fenced block."""
    found = re.findall(r"<!-- recipe:([\w-]+) -->\n```\w*\n(.*?)\n```", page.read_text(), re.S)
    named = dict(found)
    assert len(named) == len(found), "a recipe marker is used twice"
    assert set(named) == RECIPE_BLOCKS, sorted(named)
    return named


@dataclass
class RecipeProxy:
    """The proxy started from the page: its URL, and the environment the page's lines set."""

    url: str
    port: str
    env: dict[str, str]


@contextmanager
def recipe_proxy(
    blocks: Mapping[str, str], upstream_url: str, directory: Path
) -> Iterator[RecipeProxy]:
    """Start the proxy with the page's ``config.yaml`` (written unchanged) and its start command
    (its ``export`` lines, then the command), with two changes only: a free port instead of
    ``DOC_PORT``, and ``OPENAI_API_BASE`` (plus no cost-map download) in the environment, so the
    config's OpenAI models reach the fake upstream at ``upstream_url``."""
    (directory / "config.yaml").write_text(blocks["config"] + "\n")
    *exports, command_line = blocks["start"].splitlines()
    page_env: dict[str, str] = {}
    for line in exports:
        words = shlex.split(line)
        assert words[0] == "export" and len(words) == 2, line
        name, _, value = words[1].partition("=")
        page_env[name] = value
    command = shlex.split(command_line)
    assert command[0] == "litellm"
    assert command[command.index("--port") + 1] == DOC_PORT
    port = str(free_port())
    command[command.index("--port") + 1] = port
    host = command[command.index("--host") + 1]
    bin_dir = str(Path(sys.executable).parent)
    env = {
        **os.environ,
        **page_env,
        "PATH": bin_dir + os.pathsep + os.environ.get("PATH", ""),
        "OPENAI_API_BASE": upstream_url,
        "LITELLM_LOCAL_MODEL_COST_MAP": "True",
    }
    url = f"http://{host}:{port}"
    with running_proxy([litellm_script(), *command[1:]], url, env, directory):
        yield RecipeProxy(url, port, page_env)
