"""``docs/litellm.md``'s proxy recipe, run as written.

The page's blocks are read by their markers (``<!-- recipe:NAME -->`` before a fenced block,
``litellm_support.recipe_blocks``), so the page and this test cannot drift apart: the config
file is written unchanged, the start command run with the page's environment lines
(``conftest.litellm_proxy``), and the client blocks executed as they are, their printed line
compared with the output the page shows. What differs from a user's run: the port (a free one
instead of 4000), and ``OPENAI_API_BASE`` in the proxy's environment, pointing the config's
OpenAI models at the fake model server on loopback (plus ``LITELLM_LOCAL_MODEL_COST_MAP``, so
nothing is fetched). The install line cannot run here (it downloads); the test checks that
the extra it names is this package's, brings the proxy, and admits the LiteLLM installed.
"""

from __future__ import annotations

import contextlib
import io
import re
import shlex
from importlib import metadata
from typing import Any

import pytest

from fake_upstream import ChatScript, FakeUpstream, Served, tail, text_deltas
from litellm_support import DOC_PORT, RecipeProxy, recipe_blocks, repository

pytestmark = [pytest.mark.e2e, pytest.mark.xdist_group("litellm")]


@pytest.fixture(scope="module")
def blocks(request: pytest.FixtureRequest) -> dict[str, str]:
    return recipe_blocks(repository(request.config) / "docs" / "litellm.md")


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
    # The LiteLLM this run has installed is in the extra's range.
    installed = _version(metadata.version("litellm"))
    for bound in match[1].split(","):
        op, version = re.fullmatch(r"([<>=!~]+)(.+)", bound.strip()).groups()  # type: ignore[union-attr]
        want = _version(version)
        ok = {
            ">=": installed >= want,
            "<=": installed <= want,
            "==": installed == want,
            "<": installed < want,
            ">": installed > want,
        }[op]
        assert ok, f"litellm {installed} is outside {requirement}"


def _version(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in re.findall(r"\d+", text)[:3])


def run_block(code: str, namespace: dict[str, Any], port: str) -> str:
    """Execute a client block of the page (on the proxy's port); return what it printed."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = code.replace(f"127.0.0.1:{DOC_PORT}/", f"127.0.0.1:{port}/")
        exec(compile(code, "docs/litellm.md", "exec"), namespace)
    return out.getvalue()


def shown_output(code: str) -> str:
    """The output the page shows for a block: its last line, a comment."""
    last = code.splitlines()[-1]
    assert last.startswith("# "), last
    return last[2:] + "\n"


ANSWER = ["The answer", " is <answer>", "4</ans", "wer> and more", "\n\nUser: x"]


def test_the_page_streaming_then_not(
    blocks: dict[str, str],
    litellm_proxy: RecipeProxy,
    litellm_upstream: tuple[FakeUpstream, Served],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    fake, _ = litellm_upstream
    for name, value in litellm_proxy.env.items():
        monkeypatch.setenv(name, value)
    namespace: dict[str, Any] = {}

    fake.reset()
    fake.chat = ChatScript([text_deltas(*ANSWER, *tail())])
    code = blocks["client-stream"]
    assert f"127.0.0.1:{DOC_PORT}/" in code
    assert run_block(code, namespace, litellm_proxy.port) == shown_output(code)
    assert namespace["text"] == "The answer is <answer>4"
    assert namespace["finish_reason"] == "stop"
    assert namespace["stop_reason"] == "</answer>"
    # gpt-4o takes 4: the callback sent those, and enforced the other 2 itself.
    assert fake.last.body["model"] == "gpt-4o"
    assert fake.last.body["stop"] == namespace["stops"][:4]

    fake.reset()
    fake.chat = ChatScript([text_deltas("".join(ANSWER))])
    code = blocks["client-once"]
    assert run_block(code, namespace, litellm_proxy.port) == shown_output(code)
    choice = namespace["choice"]
    assert choice.message.content == "The answer is <answer>4"
    assert choice.finish_reason == "stop"
    assert choice.stop_reason == "</answer>"
    assert fake.last.body["stop"] == namespace["stops"][:4]
