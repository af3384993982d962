"""The OpenAI-compatible server with the plugin (a real multi-process vLLM, loading the plugin
from its entry point in each process), driven by the real `openai` client: streamed chat and
completions with 1, 4 and 6 stops (the sixth and later through `extra_body`), `finish_reason`,
`stop_reason`, and bad options as 400s naming them."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import stopstream

TEMPLATE = "{% for m in messages %}{{ m['content'] }}\n{% endfor %}"


# The served model's length: a request of MODEL_LEN - 100 tokens (the end-of-text token
# ignored) takes seconds on the tiny model, where a short request takes milliseconds.
MODEL_LEN = 4096


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@pytest.fixture(scope="module")
def server(model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    port = free_port()
    template = tmp_path_factory.mktemp("template") / "chat.jinja"
    template.write_text(TEMPLATE)
    log = (tmp_path_factory.mktemp("server") / "server.log").open("w")
    env = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": "1"}
    env.pop("VLLM_ENABLE_V1_MULTIPROCESSING", None)  # the server's own processes
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "vllm.entrypoints.openai.api_server",
            "--model",
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
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
        env=env,
        start_new_session=True,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 240
        while True:
            assert proc.poll() is None, Path(log.name).read_text()[-3000:]
            try:
                with urllib.request.urlopen(url + "/health", timeout=2):
                    break
            except OSError:
                assert time.monotonic() < deadline, "the server did not start"
                time.sleep(1)
        text = Path(log.name).read_text()
        assert "stopstream: vLLM plugin active" in text, text[-3000:]
        yield url
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        log.close()


@pytest.fixture(scope="module")
def client(server: str) -> Any:
    import openai

    return openai.OpenAI(base_url=server + "/v1", api_key="none", max_retries=0)


def stops_from(text: str, count: int) -> list[str]:
    """``count`` stops for ``text``, the one that fires listed last: with 4, a shorter stop
    ending at the same place is listed first (vLLM's own rule would pick it); with 6, the stop
    that fires is one of the two sent through ``extra_body``."""
    x = text[len(text) // 3 : len(text) // 3 + 3]
    never = [f"never{k}\u00e9" for k in range(count)]
    if count == 1:
        return [x]
    if count == 4:
        return [x[1:], never[0], never[1], x]
    return [*never[: count - 1], x]


def read_stream(stream: Any, endpoint: str) -> tuple[str, Any, Any]:
    """A streamed response's text, ``finish_reason`` and ``stop_reason``."""
    pieces, finish, stop_reason = [], None, None
    for chunk in stream:
        for choice in chunk.choices:
            piece = choice.delta.content if endpoint == "chat" else choice.text
            pieces.append(piece or "")
            if choice.finish_reason is not None:
                finish = choice.finish_reason
                stop_reason = getattr(choice, "stop_reason", None)
    return "".join(pieces), finish, stop_reason


@pytest.mark.parametrize("count", [1, 4, 6])
@pytest.mark.parametrize("endpoint", ["completions", "chat"])
def test_streamed_stops(client: Any, endpoint: str, count: int) -> None:
    prompt = "The answer is"

    def create(stream: bool, stops: list[str] | None, extra: dict[str, Any] | None = None) -> Any:
        kw: dict[str, Any] = dict(
            model="tiny", max_tokens=60, temperature=1.0, seed=42, stream=stream
        )
        if stops is not None:
            kw["stop"] = stops
        if extra is not None:
            kw["extra_body"] = extra
        if endpoint == "chat":
            return client.chat.completions.create(
                messages=[{"role": "user", "content": prompt}], **kw
            )
        return client.completions.create(prompt=prompt, **kw)

    full = create(False, None).choices[0]
    text = full.message.content if endpoint == "chat" else full.text
    stops = stops_from(text, count)
    own, extra_stops = stops[:4], stops[4:]
    extra = (
        {"vllm_xargs": {"stopstream": json.dumps({"stop": extra_stops})}} if extra_stops else None
    )
    streamed, finish, stop_reason = read_stream(create(True, own, extra), endpoint)
    want, stop = stopstream.truncate(text, stops)
    assert stop is not None
    assert streamed == want
    assert (finish, stop_reason) == ("stop", stop)


def _metric(server: str, name: str) -> float:
    """The sum over labels of one of the server's Prometheus metrics."""
    with urllib.request.urlopen(server + "/metrics", timeout=10) as r:
        metrics = r.read().decode()
    values = [
        float(line.rsplit(" ", 1)[1])
        for line in metrics.splitlines()
        if line.startswith(name + "{") or line.startswith(name + " ")
    ]
    assert values, (name, metrics[:2000])
    return sum(values)


def running_requests(server: str) -> float:
    """The engine's count of running requests at its last step (its scheduler's figure, which
    the server publishes as the ``vllm:num_requests_running`` gauge)."""
    return _metric(server, "vllm:num_requests_running")


def wait_until_idle(server: str) -> None:
    """Wait until the engine has no request running (one closed by its client is aborted at the
    engine's next step), polling with a one-token request that updates the count."""
    import openai

    client = openai.OpenAI(base_url=server + "/v1", api_key="none", max_retries=0)
    deadline = time.monotonic() + 60
    while True:
        client.completions.create(model="tiny", prompt="x", max_tokens=1)
        if running_requests(server) == 0:
            return
        assert time.monotonic() < deadline, "the engine did not become idle"
        time.sleep(0.5)


@pytest.mark.parametrize("endpoint", ["completions", "chat"])
def test_regex_and_skip_through_extra_body(client: Any, server: str, endpoint: str) -> None:
    """A regex stop and a skip region sent through ``extra_body``, streamed: the text, the
    ``finish_reason`` and the ``stop_reason`` (the matched text) are the filter's on the
    unstopped output; and the engine stops generating when the stop fires: a short request
    sent right after finds no other request running (the stopped one asked for thousands of
    tokens, seconds of work, which the count would show)."""
    import re

    prompt = "Regex stops:"
    long = MODEL_LEN - 100

    def create(stream: bool, extra: dict[str, Any] | None, max_tokens: int) -> Any:
        kw: dict[str, Any] = dict(
            model="tiny", temperature=1.0, seed=7, stream=stream, max_tokens=max_tokens
        )
        kw["extra_body"] = {"ignore_eos": True}
        if extra is not None:
            kw["extra_body"]["vllm_xargs"] = {"stopstream": json.dumps(extra)}
        if endpoint == "chat":
            return client.chat.completions.create(
                messages=[{"role": "user", "content": prompt}], **kw
            )
        return client.completions.create(prompt=prompt, **kw)

    # Seeded sampling gives the same tokens only in the same batch: no other request running.
    wait_until_idle(server)
    full = create(False, None, max_tokens=40).choices[0]
    text = full.message.content if endpoint == "chat" else full.text
    a = len(text) // 2
    # The region opens early and closes before the stop's first occurrence after it.
    opener, closer = text[1:3], text[a - 4 : a - 2]
    pattern = re.escape(text[a : a + 2]) + "."
    options = {"stop": [{"regex": pattern}], "skip": [[opener, closer]]}
    f = stopstream.StopFilter([stopstream.Regex(pattern)], skip=[(opener, closer)])
    want = f.feed(text) + f.finish()
    assert f.stopped, (text, options)
    wait_until_idle(server)
    streamed, finish, stop_reason = read_stream(create(True, options, long), endpoint)
    assert streamed == want
    assert (finish, stop_reason) == ("stop", f.stop_sequence)
    # Engine side: the stopped request is no longer scheduled (the scheduler's count at the
    # one-token request's last step).
    create(False, None, max_tokens=1)
    assert running_requests(server) == 0
    wait_until_idle(server)


def test_more_than_four_stops_in_stop_is_vllms_400(client: Any) -> None:
    import openai

    with pytest.raises(openai.BadRequestError):
        client.completions.create(
            model="tiny", prompt="x", max_tokens=4, stop=["a", "b", "c", "d", "e"]
        )


@pytest.mark.parametrize(
    "options, words",
    [
        ({"stop": [{"regex": "("}]}, '["stop"][0]'),
        ({"stop": [""]}, '["stop"][0]'),
        ({"skip": [["<think>"]]}, '["skip"][0]'),
        ({"nope": 1}, "unknown option 'nope'"),
    ],
)
def test_bad_options_are_400s_naming_them(client: Any, options: Any, words: str) -> None:
    import openai

    with pytest.raises(openai.BadRequestError) as info:
        client.completions.create(
            model="tiny",
            prompt="x",
            max_tokens=4,
            extra_body={"vllm_xargs": {"stopstream": json.dumps(options)}},
        )
    assert words in str(info.value)
    # The server still serves.
    ok = client.completions.create(model="tiny", prompt="x", max_tokens=3, seed=1)
    assert ok.choices[0].finish_reason == "length"
