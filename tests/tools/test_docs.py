"""Every fenced code block of README.md and docs/*.md is run, and what the text shows is checked.

The conventions (described for writers in docs/design.md, "Documentation"):

- ``python``: the blocks of one page run in order in one namespace, in a scratch directory. A
  top-level expression statement ending in ``# -> VALUE`` (optionally ``# -> VALUE  # note``)
  must evaluate to ``VALUE``; a line ``# -> VALUE`` right after a statement checks that one.
  A ``text`` block marked ``<!-- output -->`` right after a python block is what that block
  prints (its stdout, exactly).
- ``console``: each ``$ command`` line runs in bash from the repository root, with
  ``stopstream`` being the package under test; the lines up to the next ``$`` are its output
  (stdout, then stderr) and must be exactly that.
- a block preceded by ``<!-- run: gateway -->`` (``sh``) starts ``examples/gateway.py`` with the
  block's arguments, in front of the test suite's fake model server instead of the real upstream
  (the arguments are checked by the gateway's own parser); the ``python`` blocks after it on the
  page that name ``http://127.0.0.1:8080`` talk to it.
- a block preceded by ``<!-- not run: REASON -->`` is skipped; the reason is required.
- a block preceded by ``<!-- recipe:NAME -->`` (the LiteLLM page's) is run, as written, by
  ``tests/adapters/test_litellm_recipe.py`` (``litellm_support.RECIPE_BLOCKS`` names them).
- a block that is none of these (a synopsis in a bare fence is checked against ``--help``)
  fails the test: nothing is skipped silently.
"""

from __future__ import annotations

import ast
import contextlib
import importlib.util
import io
import os
import re
import shlex
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from fake_upstream import TIMEOUT, ChatScript, FakeUpstream, Served, text_deltas

ROOT = Path(__file__).resolve().parents[2]
PAGES = (
    [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))] if (ROOT / "docs").is_dir() else []
)

if not (ROOT / "README.md").exists() or not (ROOT / "examples").is_dir():
    pytest.skip("run from outside the source tree", allow_module_level=True)

FENCE = re.compile(r"^```([\w-]*)[^\n]*\n(.*?)^```[ \t]*$", re.S | re.M)
MARK = re.compile(r"<!--\s*(not run|run|output|recipe)\s*(?::\s*(.*?))?\s*-->\s*\Z", re.S)
EXPECT = "# -> "
GATEWAY_URL = "http://127.0.0.1:8080"


@dataclass
class Block:
    page: Path
    line: int
    lang: str
    code: str
    mark: str | None  # "not run", "run", "output", "recipe" or None
    arg: str

    @property
    def where(self) -> str:
        page = self.page.relative_to(ROOT) if self.page.is_relative_to(ROOT) else self.page
        return f"{page}:{self.line}"


def blocks_of(page: Path) -> list[Block]:
    text = page.read_text()
    found = []
    for match in FENCE.finditer(text):
        before = text[: match.start()].rstrip()
        # The mark is an HTML comment right before the fence (blank lines allowed).
        mark = MARK.search(before[-300:])
        found.append(
            Block(
                page,
                text.count("\n", 0, match.start()) + 1,
                match.group(1),
                match.group(2),
                mark.group(1) if mark else None,
                (mark.group(2) or "") if mark else "",
            )
        )
    return found


def test_every_page_is_found() -> None:
    names = {str(page.relative_to(ROOT)) for page in PAGES}
    assert {"README.md", "docs/index.md", "docs/streams.md", "docs/contract.md"} <= names


# ---------------------------------------------------------------------------------------------
# python


def split_expectations(code: str) -> list[tuple[str, str | None, int]]:
    """Top-level statements as (source, expected value or None, line), in order."""
    tree = ast.parse(code)
    lines = code.splitlines()
    result = []
    statements = tree.body
    for n, node in enumerate(statements):
        end = node.end_lineno or node.lineno
        # A decorated definition starts at its first decorator (`lineno` is its `def` line).
        start = min([node.lineno, *(d.lineno for d in getattr(node, "decorator_list", []))])
        source = "\n".join(lines[start - 1 : end])
        expected = None
        last = lines[end - 1]
        if EXPECT in last:
            expected = last.split(EXPECT, 1)[1]
        else:
            # `# -> VALUE` alone on the following line(s), before the next statement.
            stop = statements[n + 1].lineno - 1 if n + 1 < len(statements) else len(lines)
            for line in lines[end:stop]:
                if line.strip().startswith(EXPECT):
                    expected = line.strip()[len(EXPECT) :]
                    break
        if expected is not None:
            expected = expected.split("  #", 1)[0].strip()
        result.append((source, expected, node.lineno))
    return result


def run_python(block: Block, namespace: dict[str, Any]) -> str:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        for source, expected, line in split_expectations(block.code):
            where = f"{block.where} (+{line})"
            if expected is None:
                exec(compile(source, where, "exec"), namespace)
                continue
            try:
                value = eval(compile(source, where, "eval"), namespace)
            except SyntaxError:
                message = f"{where}: `# ->` after a statement, not an expression"
                raise AssertionError(message) from None
            want = eval(compile(expected, where, "eval"), namespace)
            assert value == want, f"{where}: {source!r} is {value!r}, the doc says {want!r}"
    return out.getvalue()


# ---------------------------------------------------------------------------------------------
# console


@pytest.fixture(scope="module")
def bin_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A `stopstream` command that runs the package under test."""
    path = tmp_path_factory.mktemp("bin")
    script = path / "stopstream"
    script.write_text(f'#!/bin/sh\nexec {shlex.quote(sys.executable)} -m stopstream "$@"\n')
    script.chmod(0o755)
    return path


def run_console(block: Block, bin_dir: Path) -> None:
    commands: list[tuple[str, list[str]]] = []
    for line in block.code.splitlines(keepends=True):
        if line.startswith("$ "):
            commands.append((line[2:].rstrip("\n"), []))
        else:
            assert commands, f"{block.where}: output before the first `$` line"
            commands[-1][1].append(line)
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"}
    for command, shown in commands:
        result = subprocess.run(
            ["bash", "-c", command], capture_output=True, cwd=ROOT, env=env, timeout=60
        )
        got = result.stdout.decode() + result.stderr.decode()
        assert got == "".join(shown), f"{block.where}: `{command}` printed {got!r}"


# ---------------------------------------------------------------------------------------------
# synopsis (a bare fence): every option it names is one `--help` lists


def check_synopsis(block: Block) -> None:
    first = block.code.split()[0]
    assert first == "stopstream", f"{block.where}: a bare block that is not the CLI's synopsis"
    result = subprocess.run(
        [sys.executable, "-m", "stopstream", "--help"], capture_output=True, text=True, timeout=60
    )
    usage = result.stdout.split("\n\n", 1)[0]
    named = set(re.findall(r"(?<![\w-])(--?[a-z][\w-]*)", block.code)) - {"-h", "--help"}
    listed = set(re.findall(r"(?<![\w-])(--?[a-z][\w-]*)", usage)) - {"-h", "--help"}
    assert named == listed, f"{block.where}: synopsis {sorted(named)}, --help {sorted(listed)}"


# ---------------------------------------------------------------------------------------------
# the example gateway, in front of the fake model server


def load_gateway() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "docs_example_gateway", ROOT / "examples" / "gateway.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@contextlib.contextmanager
def gateway_for(block: Block) -> Iterator[str]:
    lines = [line for line in block.code.splitlines() if "examples/gateway.py" in line]
    assert len(lines) == 1, f"{block.where}: one `python examples/gateway.py` line expected"
    argv = shlex.split(lines[0].split("examples/gateway.py", 1)[1])
    gateway = load_gateway()
    args = gateway.parse_args(argv)
    fake = FakeUpstream()
    # The model's text runs into a stop the gateway does not send upstream (the sixth).
    deltas = text_deltas("The answer", " is 42.", "Observ", "ation: search(", "more")
    fake.chat = ChatScript(choices=[deltas])
    with Served(fake) as upstream:
        app = gateway.create_app(
            upstream.url + "/v1",
            anthropic_upstream=upstream.url,
            stop_limit=args.stop_limit,
            on_stop=args.on_stop,
            timeout=TIMEOUT,
        )
        with Served(app, lifespan="on") as served:
            yield served.url


# ---------------------------------------------------------------------------------------------


def run_blocks(blocks: list[Block], bin_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    namespace: dict[str, Any] = {"__name__": "__docs__"}
    with contextlib.ExitStack() as stack:
        gateway_url = None
        last_output: str | None = None
        for block in blocks:
            if block.mark == "not run":
                assert block.arg, f"{block.where}: `not run` needs a reason"
                last_output = None
                continue
            if block.mark == "recipe":
                from litellm_support import RECIPE_BLOCKS

                assert block.arg in RECIPE_BLOCKS, (
                    f"{block.where}: recipe block {block.arg!r} that "
                    "tests/adapters/test_litellm_recipe.py does not run"
                )
                last_output = None
                continue
            if block.mark == "output":
                assert block.lang == "text", f"{block.where}: an output block is `text`"
                assert last_output is not None, f"{block.where}: no python block before it"
                assert last_output == block.code, (
                    f"{block.where}: the block above printed {last_output!r}"
                )
                last_output = None
                continue
            if block.mark == "run":
                assert block.arg == "gateway", f"{block.where}: unknown `run: {block.arg}`"
                gateway_url = stack.enter_context(gateway_for(block))
                continue
            last_output = None
            if block.lang == "python":
                if GATEWAY_URL in block.code:
                    assert gateway_url, f"{block.where}: names the gateway, none started before"
                    code = block.code.replace(GATEWAY_URL, gateway_url)
                    block = Block(block.page, block.line, block.lang, code, None, "")
                last_output = run_python(block, namespace)
            elif block.lang == "console":
                with monkeypatch.context() as m:
                    m.chdir(ROOT)
                    run_console(block, bin_dir)
            elif block.lang == "":
                check_synopsis(block)
            else:
                pytest.fail(f"{block.where}: a `{block.lang}` block that no rule runs")


@pytest.mark.parametrize("page", PAGES, ids=[str(p.relative_to(ROOT)) for p in PAGES])
def test_page_code_blocks(
    page: Path, bin_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    run_blocks(blocks_of(page), bin_dir, monkeypatch)


def test_an_unrunnable_block_fails(
    tmp_path: Path, bin_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The rules refuse what they cannot run, and a wrong expected value fails."""
    page = tmp_path / "page.md"
    page.write_text("Text.\n\n```sh\nrm -rf /nowhere\n```\n")
    with pytest.raises(pytest.fail.Exception, match="a `sh` block that no rule runs"):
        run_blocks(blocks_of(page), bin_dir, monkeypatch)
    page.write_text("<!-- not run:  -->\n```sh\nx\n```\n")
    with pytest.raises(AssertionError, match="needs a reason"):
        run_blocks(blocks_of(page), bin_dir, monkeypatch)
    page.write_text("```python\nx = 1\nx + 1  # -> 3\n```\n")
    with pytest.raises(AssertionError, match="the doc says 3"):
        run_blocks(blocks_of(page), bin_dir, monkeypatch)
    page.write_text("```python\nprint('a')\n```\n\n<!-- output -->\n```text\nb\n```\n")
    with pytest.raises(AssertionError, match="printed 'a\\\\n'"):
        run_blocks(blocks_of(page), bin_dir, monkeypatch)
    page.write_text("```console\n$ stopstream -s x\nwrong\n```\n")
    with pytest.raises(AssertionError, match="printed"):
        run_blocks(blocks_of(page), bin_dir, monkeypatch)
