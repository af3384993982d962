"""The OpenAI-compatible server with the plugin (a real multi-process vLLM with two API-server
processes, loading the plugin from its entry point in each process), driven by the real `openai`
and `anthropic` clients: streamed chat and completions with 1, 4 and 6 stops (the sixth and later
through `extra_body`), the Responses and Messages endpoints, `finish_reason`, `stop_reason`, and
bad options as 400s naming them."""

from __future__ import annotations

import json
import time
import urllib.request
from typing import Any

import pytest
from served import MODEL_LEN, Server

import stopstream


@pytest.fixture(scope="module")
def server(served: Server) -> str:
    return served.url


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


def test_responses_and_messages_reach_the_plugin(server: str) -> None:
    """vLLM's Responses and (Anthropic) Messages endpoints build the same sampling parameters:
    six stops, two of them through ``vllm_xargs``, cut the greedy output as the filter does, and
    Messages names the stop that fired."""
    import anthropic
    import openai

    client = openai.OpenAI(base_url=server + "/v1", api_key="none", max_retries=0)
    messages = anthropic.Anthropic(base_url=server, api_key="none", max_retries=0)
    prompt = "Other endpoints:"

    def respond(stops: list[str] | None, extra: list[str] | None) -> str:
        body: dict[str, Any] = {"ignore_eos": True}
        if stops is not None:
            body["stop"] = stops
        if extra is not None:
            body["vllm_xargs"] = {"stopstream": json.dumps({"stop": extra})}
        r = client.responses.create(
            model="tiny", input=prompt, max_output_tokens=60, temperature=0.0, extra_body=body
        )
        return str(r.output_text)

    def message(stops: list[str] | None, extra: list[str] | None) -> Any:
        # Greedy (the installed SDK's create() takes no temperature: it goes in the body).
        body: dict[str, Any] = {"ignore_eos": True, "temperature": 0.0}
        if extra is not None:
            body["vllm_xargs"] = {"stopstream": json.dumps({"stop": extra})}
        kw: dict[str, Any] = {"stop_sequences": stops} if stops is not None else {}
        return messages.messages.create(
            model="tiny",
            max_tokens=60,
            messages=[{"role": "user", "content": prompt}],
            extra_body=body,
            **kw,
        )

    wait_until_idle(server)
    text = respond(None, None)
    stops = stops_from(text, 6)
    want, stop = stopstream.truncate(text, stops)
    assert stop is not None
    assert respond(stops[:4], stops[4:]) == want

    full = message(None, None)
    text = "".join(b.text for b in full.content if b.type == "text")
    stops = stops_from(text, 6)
    want, stop = stopstream.truncate(text, stops)
    assert stop is not None
    got = message(stops[:4], stops[4:])
    assert "".join(b.text for b in got.content if b.type == "text") == want
    assert (got.stop_reason, got.stop_sequence) == ("stop_sequence", stop)


def test_skip_reasoning_without_a_parser_is_a_400(client: Any) -> None:
    import openai

    with pytest.raises(openai.BadRequestError) as info:
        client.completions.create(
            model="tiny",
            prompt="x",
            max_tokens=4,
            stop=["a"],
            extra_body={"vllm_xargs": {"stopstream": json.dumps({"skip_reasoning": True})}},
        )
    assert "no reasoning parser" in str(info.value)
