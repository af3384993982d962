"""``docs/litellm.md``'s proxy recipe, run as written.

The page's blocks are read by their markers (``<!-- recipe:NAME -->`` before a fenced block), so
the page and this test cannot drift apart: the config file is written unchanged, the start
command run with its own environment lines, and the client blocks executed as they are, their
printed line compared with the output the page shows. Two things differ from a user's run, and
only these: the port (a free one instead of 4000), and the environment the upstream is found
by (``OPENAI_API_BASE``, the fake model server on loopback, since the config names none); plus
``LITELLM_LOCAL_MODEL_COST_MAP`` so nothing is fetched. The install line cannot run here (it
downloads); the test checks that the extra it names is this package's and brings the proxy.
"""

from __future__ import annotations

import contextlib
import io
import os
import re
import shlex
import shutil
import sys
from collections.abc import Iterator
from importlib import metadata
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("litellm.proxy.proxy_server", reason="litellm[proxy] is not installed")

from fake_upstream import ChatScript, FakeUpstream, Served, tail, text_deltas
from litellm_support import free_port, running_proxy

pytestmark = pytest.mark.e2e

DOC_PORT = "4000"


def repository(config: pytest.Config) -> Path:
    # The pyproject.toml in use is the repository's, also when the tests run from a copy
    # outside the tree (`.ci/run` passes `-c`).
    assert config.inipath is not None
    return config.inipath.parent


@pytest.fixture(scope="module")
def blocks(request: pytest.FixtureRequest) -> dict[str, str]:
    page = (repository(request.config) / "docs" / "litellm.md").read_text()
    found = re.findall(r"<!-- recipe:([\w-]+) -->\n```\w*\n(.*?)\n```", page, re.S)
    named = dict(found)
    assert len(named) == len(found), "a recipe marker is used twice"
    assert set(named) == {"install", "config", "start", "client-stream", "client-once"}
    return named


def test_install_line_names_the_extra_with_the_proxy(
    blocks: dict[str, str], request: pytest.FixtureRequest
) -> None:
    (line,) = blocks["install"].splitlines()
    assert shlex.split(line) == ["pip", "install", "stopstream[litellm]"]
    pyproject = (repository(request.config) / "pyproject.toml").read_text()
    assert re.search(r'^name = "stopstream"$', pyproject, re.M)
    (requirement,) = re.findall(r'^litellm = \["([^"]+)"\]$', pyproject, re.M)
    match = re.fullmatch(r"litellm\[proxy\]([<>=!~].*)", requirement)
    assert match, requirement
    # What this run has installed satisfies it: the proxy's version is in the extra's range.
    installed = metadata.version("litellm")
    for bound in match[1].split(","):
        op, version = re.fullmatch(r"([<>=!~]+)(.+)", bound.strip()).groups()  # type: ignore[union-attr]
        have, want = _version(installed), _version(version)
        assert {
            ">=": have >= want,
            "<=": have <= want,
            "==": have == want,
            "<": have < want,
            ">": have > want,
        }[op], f"litellm {installed} is outside {requirement}"


def _version(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in re.findall(r"\d+", text)[:3])


@pytest.fixture(scope="module")
def upstream() -> Iterator[tuple[FakeUpstream, Served]]:
    fake = FakeUpstream()
    with Served(fake) as served:
        yield fake, served


@pytest.fixture(scope="module")
def proxy(
    blocks: dict[str, str],
    upstream: tuple[FakeUpstream, Served],
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[dict[str, str]]:
    """The proxy started from the page's config and command; yields the page's environment."""
    directory = tmp_path_factory.mktemp("recipe")
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
    # The `litellm` script of the environment running the tests.
    bin_dir = str(Path(sys.executable).parent)
    executable = shutil.which("litellm", path=bin_dir)
    assert executable is not None, f"no litellm script in {bin_dir}"
    env = {
        **os.environ,
        **page_env,
        "PATH": bin_dir + os.pathsep + os.environ.get("PATH", ""),
        "OPENAI_API_BASE": upstream[1].url + "/v1",
        "LITELLM_LOCAL_MODEL_COST_MAP": "True",
    }
    with running_proxy([executable, *command[1:]], f"http://{host}:{port}", env, directory):
        yield {**page_env, "port": port}


def run_block(code: str, namespace: dict[str, Any], port: str) -> str:
    """Execute a client block of the page; return what it printed."""
    assert f"127.0.0.1:{DOC_PORT}" in code or "base_url" not in code
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(
            compile(code.replace(f":{DOC_PORT}/", f":{port}/"), "docs/litellm.md", "exec"),
            namespace,
        )
    return out.getvalue()


def shown_output(code: str) -> str:
    """The output the page shows for a block: its last line, a comment."""
    last = code.splitlines()[-1]
    assert last.startswith("# "), last
    return last[2:] + "\n"


ANSWER = ["The answer", " is <answer>", "4</ans", "wer> and more", "\n\nUser: x"]


def test_the_page_streaming_then_not(
    blocks: dict[str, str],
    proxy: dict[str, str],
    upstream: tuple[FakeUpstream, Served],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    fake, _ = upstream
    for name in ("OPENAI_API_KEY", "LITELLM_MASTER_KEY"):
        monkeypatch.setenv(name, proxy[name])
    namespace: dict[str, Any] = {}

    fake.reset()
    fake.chat = ChatScript([text_deltas(*ANSWER, *tail())])
    code = blocks["client-stream"]
    assert run_block(code, namespace, proxy["port"]) == shown_output(code)
    assert namespace["text"] == "The answer is <answer>4"
    assert namespace["finish_reason"] == "stop"
    assert namespace["stop_reason"] == "</answer>"
    record = fake.last
    # OpenAI takes 4: the callback sent those, and enforced the other 2 itself.
    assert record.body["stop"] == namespace["stops"][:4]
    assert record.body["model"] == "gpt-4o"

    fake.reset()
    fake.chat = ChatScript([text_deltas("".join(ANSWER))])
    code = blocks["client-once"]
    assert run_block(code, namespace, proxy["port"]) == shown_output(code)
    choice = namespace["choice"]
    assert choice.message.content == "The answer is <answer>4"
    assert choice.finish_reason == "stop"
    assert choice.stop_reason == "</answer>"
    assert fake.last.body["stop"] == namespace["stops"][:4]
