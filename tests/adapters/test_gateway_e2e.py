"""End to end, with real components: the ``openai`` and ``anthropic`` SDK clients talk over HTTP
to ``examples/gateway.py`` (Starlette, served by uvicorn), which forwards to a fake model server
streaming SSE in the providers' shapes. Everything runs on 127.0.0.1; nothing else is contacted.

The adapters are also run directly on the SDKs' own stream objects (no gateway). Whenever a stop
fires, the fake upstream must see the connection dropped before it has sent everything.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import json
import re
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import anthropic
import httpx
import openai
import pytest

from fake_upstream import (
    TIMEOUT,
    ChatScript,
    FakeUpstream,
    MessagesScript,
    Record,
    Served,
    anthropic_client,
    assert_closed_early,
    openai_client,
    tail,
    text_deltas,
)
from stopstream.anthropic import awrap_messages, wrap_messages
from stopstream.openai import awrap_chat, wrap_chat

# Real servers or subprocesses: `-m "not e2e"` leaves them out.
pytestmark = pytest.mark.e2e

GATEWAY = Path(__file__).resolve().parents[2] / "examples" / "gateway.py"
MESSAGES: Any = [{"role": "user", "content": "Hi"}]
STOPS = ["###", "END", "<|im_end|>", "Observation:", "</answer>", "\n\nUser:"]


def load_gateway() -> ModuleType:
    spec = importlib.util.spec_from_file_location("stopstream_example_gateway", GATEWAY)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def upstream_server() -> Iterator[tuple[FakeUpstream, Served]]:
    fake = FakeUpstream()
    with Served(fake) as served:
        yield fake, served


@pytest.fixture
def fake(upstream_server: tuple[FakeUpstream, Served]) -> FakeUpstream:
    fake, _ = upstream_server
    fake.reset()
    return fake


@pytest.fixture
def upstream_url(upstream_server: tuple[FakeUpstream, Served]) -> str:
    return upstream_server[1].url


def serve_gateway(upstream: Served, **options: Any) -> Served:
    options.setdefault("timeout", TIMEOUT)
    app = load_gateway().create_app(
        upstream.url + "/v1", anthropic_upstream=upstream.url, **options
    )
    return Served(app, lifespan="on")


@pytest.fixture(scope="module")
def gateway(upstream_server: tuple[FakeUpstream, Served]) -> Iterator[str]:
    """The gateway with its defaults: 4 stops sent to OpenAI, on_stop="close"."""
    with serve_gateway(upstream_server[1]) as served:
        yield served.url


@pytest.fixture(scope="module")
def drain_gateway(upstream_server: tuple[FakeUpstream, Served]) -> Iterator[str]:
    with serve_gateway(upstream_server[1], on_stop="drain") as served:
        yield served.url


@pytest.fixture(scope="module")
def no_stop_gateway(upstream_server: tuple[FakeUpstream, Served]) -> Iterator[str]:
    """For models that reject ``stop``: nothing is sent upstream, everything enforced here."""
    with serve_gateway(upstream_server[1], stop_limit="none") as served:
        yield served.url


def assert_completed(record: Record) -> None:
    assert record.finished.wait(TIMEOUT)
    assert record.completed.is_set() and not record.disconnected.is_set()


def content_of(chunks: list[Any], index: int = 0) -> str:
    return "".join(
        choice.delta.content or ""
        for chunk in chunks
        for choice in chunk.choices
        if choice.index == index
    )


def stop_reason(choice: Any) -> Any:
    """The vLLM-style ``stop_reason`` field: an extra field of the SDK's ``Choice`` model."""
    return (choice.model_extra or {}).get("stop_reason")


def final_choice(chunks: list[Any], index: int = 0) -> Any:
    return [c for chunk in chunks for c in chunk.choices if c.index == index][-1]


# --- OpenAI through the gateway ------------------------------------------------------------


def test_openai_stop_fires_in_the_gateway(fake: FakeUpstream, gateway: str) -> None:
    fake.chat = ChatScript([text_deltas("The answer", " is 4.", "</ans", "wer>", *tail())])
    with openai_client(gateway) as client:
        stream = client.chat.completions.create(
            model="gpt-test", messages=MESSAGES, stream=True, stop=STOPS
        )
        chunks = list(stream)
    assert content_of(chunks) == "The answer is 4."
    last = chunks[-1].choices[0]
    assert last.finish_reason == "stop"
    assert stop_reason(last) == "</answer>"
    # Hybrid: the first 4 stops went upstream (the fake, like OpenAI, rejects more).
    assert fake.last.body["stop"] == STOPS[:4]
    assert_closed_early(fake.last)


def test_openai_n_choices_stop_separately(fake: FakeUpstream, gateway: str) -> None:
    fake.chat = ChatScript(
        [
            text_deltas("first", "</ans", "wer>", *tail()),
            text_deltas("second", " one", "\n", "\nUser:", *tail()),
        ]
    )
    with openai_client(gateway) as client:
        chunks = list(
            client.chat.completions.create(
                model="gpt-test", messages=MESSAGES, stream=True, stop=STOPS, n=2
            )
        )
    assert content_of(chunks, 0) == "first"
    assert content_of(chunks, 1) == "second one"
    for index, stop in [(0, "</answer>"), (1, "\n\nUser:")]:
        choice = final_choice(chunks, index)
        assert choice.finish_reason == "stop"
        assert stop_reason(choice) == stop
    assert_closed_early(fake.last)


def test_openai_tool_calls_pass_through(fake: FakeUpstream, gateway: str) -> None:
    call = {"index": 0, "id": "call_1", "type": "function"}
    fake.chat = ChatScript(
        [
            [
                {"content": "Looking up </ans"},
                {"tool_calls": [{**call, "function": {"name": "lookup", "arguments": ""}}]},
                {"tool_calls": [{"index": 0, "function": {"arguments": '{"q": "</ans'}}]},
                {"tool_calls": [{"index": 0, "function": {"arguments": 'wer>"}'}}]},
            ]
        ],
        finish_reasons=["tool_calls"],
    )
    with openai_client(gateway) as client:
        chunks = list(
            client.chat.completions.create(
                model="gpt-test", messages=MESSAGES, stream=True, stop=["</answer>"]
            )
        )
    arguments = "".join(
        call.function.arguments or ""
        for chunk in chunks
        for choice in chunk.choices
        for call in choice.delta.tool_calls or []
        if call.function is not None
    )
    assert arguments == '{"q": "</answer>"}'
    assert content_of(chunks) == "Looking up </ans"  # released when the choice finished
    assert final_choice(chunks).finish_reason == "tool_calls"
    assert_completed(fake.last)


def test_openai_no_stop_fires(fake: FakeUpstream, gateway: str) -> None:
    fake.chat = ChatScript([text_deltas("Plain", " text </an")], finish_reasons=["length"])
    with openai_client(gateway) as client:
        chunks = list(
            client.chat.completions.create(
                model="gpt-test", messages=MESSAGES, stream=True, stop=STOPS
            )
        )
    assert content_of(chunks) == "Plain text </an"
    assert final_choice(chunks).finish_reason == "length"
    assert_completed(fake.last)


def test_openai_usage_with_close(fake: FakeUpstream, gateway: str) -> None:
    fake.chat = ChatScript([text_deltas("a", "</answer>", *tail())])
    with openai_client(gateway) as client:
        chunks = list(
            client.chat.completions.create(
                model="gpt-test",
                messages=MESSAGES,
                stream=True,
                stop=STOPS,
                stream_options={"include_usage": True},
            )
        )
    assert content_of(chunks) == "a"
    # Closed at once: no usage was known yet, so none is reported.
    assert chunks[-1].choices and all(c.usage is None for c in chunks)
    assert_closed_early(fake.last)


def test_openai_usage_with_drain(fake: FakeUpstream, drain_gateway: str) -> None:
    fake.chat = ChatScript([text_deltas("a", "</answer>", *tail(10))])
    with openai_client(drain_gateway) as client:
        chunks = list(
            client.chat.completions.create(
                model="gpt-test",
                messages=MESSAGES,
                stream=True,
                stop=["</answer>"],
                stream_options={"include_usage": True},
            )
        )
    assert content_of(chunks) == "a"
    assert final_choice(chunks).finish_reason == "stop"
    assert chunks[-1].choices == []
    assert chunks[-1].usage is not None
    assert chunks[-1].usage.model_dump(exclude_unset=True) == fake.chat.usage
    assert_completed(fake.last)


def test_openai_model_that_rejects_stop(
    fake: FakeUpstream, no_stop_gateway: str, upstream_url: str
) -> None:
    fake.reject_stop = True
    with openai_client(upstream_url) as client, pytest.raises(openai.BadRequestError):
        client.chat.completions.create(
            model="o-test", messages=MESSAGES, stream=True, stop=["</answer>"]
        )
    fake.chat = ChatScript([text_deltas("Reasoned.", "END", *tail())])
    with openai_client(no_stop_gateway) as client:
        chunks = list(
            client.chat.completions.create(
                model="o-test", messages=MESSAGES, stream=True, stop=STOPS
            )
        )
    assert content_of(chunks) == "Reasoned."
    assert stop_reason(final_choice(chunks)) == "END"
    assert "stop" not in fake.last.body
    assert_closed_early(fake.last)


def test_openai_stop_applied_upstream(fake: FakeUpstream, gateway: str) -> None:
    # "###" is among the 4 stops sent upstream: the fake cuts there and finishes the choice.
    fake.chat = ChatScript([text_deltas("one ", "two ###", " three", *tail(5))])
    with openai_client(gateway) as client:
        chunks = list(
            client.chat.completions.create(
                model="gpt-test", messages=MESSAGES, stream=True, stop=STOPS
            )
        )
    assert content_of(chunks) == "one two "
    assert final_choice(chunks).finish_reason == "stop"
    assert_completed(fake.last)


def test_openai_async_client(fake: FakeUpstream, gateway: str) -> None:
    fake.chat = ChatScript([text_deltas("Async", " works", "</answer>", *tail())])

    async def main() -> list[Any]:
        async with openai.AsyncOpenAI(
            base_url=gateway + "/v1", api_key="sk-test", max_retries=0, timeout=TIMEOUT
        ) as client:
            stream = await client.chat.completions.create(
                model="gpt-test", messages=MESSAGES, stream=True, stop=STOPS
            )
            return [chunk async for chunk in stream]

    chunks = asyncio.run(main())
    assert content_of(chunks) == "Async works"
    assert stop_reason(final_choice(chunks)) == "</answer>"
    assert_closed_early(fake.last)


def test_openai_non_streaming(fake: FakeUpstream, gateway: str) -> None:
    fake.chat = ChatScript([text_deltas("Result", " here.", "\n\nUser:", " more")])
    with openai_client(gateway) as client:
        completion = client.chat.completions.create(model="gpt-test", messages=MESSAGES, stop=STOPS)
    choice = completion.choices[0]
    assert choice.message.content == "Result here."
    assert choice.finish_reason == "stop"
    assert stop_reason(choice) == "\n\nUser:"


def test_openai_invalid_stop_is_a_400(gateway: str) -> None:
    with openai_client(gateway) as client, pytest.raises(openai.BadRequestError, match="stop"):
        client.chat.completions.create(model="gpt-test", messages=MESSAGES, stop=["a", ""])


def test_client_disconnect_closes_the_upstream(fake: FakeUpstream, gateway: str) -> None:
    fake.chat = ChatScript([text_deltas(*tail(150))])
    payload = {"model": "gpt-test", "messages": MESSAGES, "stream": True, "stop": STOPS}
    url = gateway + "/v1/chat/completions"
    with (
        httpx.Client(timeout=TIMEOUT) as client,
        client.stream("POST", url, json=payload) as response,
    ):
        for line in response.iter_lines():
            if "tail3" in line:
                break  # the client goes away mid-stream
    assert_closed_early(fake.last)


# --- Anthropic through the gateway ---------------------------------------------------------


def test_anthropic_stop_fires_in_the_gateway(fake: FakeUpstream, gateway: str) -> None:
    fake.messages = MessagesScript([("text", ["Sure: ", "42", "</ans", "wer>", *tail()])])
    with anthropic_client(gateway) as client:
        events = list(
            client.messages.create(
                model="claude-test",
                max_tokens=100,
                messages=MESSAGES,
                stream=True,
                stop_sequences=STOPS,
            )
        )
    kinds = [e.type for e in events]
    assert kinds[:2] == ["message_start", "content_block_start"]
    assert kinds[-3:] == ["content_block_stop", "message_delta", "message_stop"]
    text = "".join(
        e.delta.text
        for e in events
        if e.type == "content_block_delta" and e.delta.type == "text_delta"
    )
    assert text == "Sure: 42"
    final = events[-2]
    assert isinstance(final, anthropic.types.RawMessageDeltaEvent)
    assert final.delta.stop_reason == "stop_sequence"
    assert final.delta.stop_sequence == "</answer>"
    assert final.usage.input_tokens == 11
    # Anthropic takes every stop here (none is whitespace-only); all are enforced in the gateway.
    assert fake.last.body["stop_sequences"] == STOPS
    assert_closed_early(fake.last)


def test_anthropic_sdk_final_message(fake: FakeUpstream, gateway: str) -> None:
    fake.messages = MessagesScript([("text", ["Hello", "\n", "\nUser:", " hi", *tail()])])
    with (
        anthropic_client(gateway) as client,
        client.messages.stream(
            model="claude-test", max_tokens=100, messages=MESSAGES, stop_sequences=STOPS
        ) as stream,
    ):
        message = stream.get_final_message()
    assert message.stop_reason == "stop_sequence"
    assert message.stop_sequence == "\n\nUser:"
    assert [block.type for block in message.content] == ["text"]
    assert message.content[0].type == "text" and message.content[0].text == "Hello"
    assert_closed_early(fake.last)


def test_anthropic_thinking_and_tool_use_pass_through(fake: FakeUpstream, gateway: str) -> None:
    fake.messages = MessagesScript(
        [
            ("thinking", ["Mind the ", "</answer>", " tag"]),
            ("text", ["Checking."]),
            ("get_weather", ['{"city": "</ans', 'wer>"}']),
        ],
        stop_reason="tool_use",
    )
    with (
        anthropic_client(gateway) as client,
        client.messages.stream(
            model="claude-test", max_tokens=100, messages=MESSAGES, stop_sequences=STOPS
        ) as stream,
    ):
        message = stream.get_final_message()
    thinking, text, tool = message.content
    assert thinking.type == "thinking" and thinking.thinking == "Mind the </answer> tag"
    assert text.type == "text" and text.text == "Checking."
    assert tool.type == "tool_use" and tool.input == {"city": "</answer>"}
    assert message.stop_reason == "tool_use" and message.stop_sequence is None
    assert_completed(fake.last)


def test_anthropic_drain_reports_the_final_usage(fake: FakeUpstream, drain_gateway: str) -> None:
    fake.messages = MessagesScript([("text", ["x", "###", *tail(10)])], final_output_tokens=77)
    with (
        anthropic_client(drain_gateway) as client,
        client.messages.stream(
            model="claude-test", max_tokens=100, messages=MESSAGES, stop_sequences=STOPS
        ) as stream,
    ):
        message = stream.get_final_message()
    assert message.content[0].type == "text" and message.content[0].text == "x"
    assert message.stop_reason == "stop_sequence" and message.stop_sequence == "###"
    assert message.usage.output_tokens == 77
    assert_completed(fake.last)


# --- The adapters on the SDKs' own streams (no gateway) ------------------------------------


def test_wrap_chat_on_an_sdk_stream(fake: FakeUpstream, upstream_url: str) -> None:
    fake.chat = ChatScript([text_deltas("Direct", " call", "</answer>", *tail())])
    with openai_client(upstream_url) as client:
        upstream = client.chat.completions.create(model="gpt-test", messages=MESSAGES, stream=True)
        with wrap_chat(upstream, ["</answer>"]) as stream:
            chunks = list(stream)
        assert stream.stop_sequences == {0: "</answer>"}
    assert all(type(c).__name__ == "ChatCompletionChunk" for c in chunks)
    assert content_of(chunks) == "Direct call"
    assert stop_reason(final_choice(chunks)) == "</answer>"
    assert_closed_early(fake.last)


def test_awrap_chat_on_an_sdk_stream(fake: FakeUpstream, upstream_url: str) -> None:
    fake.chat = ChatScript(
        [text_deltas("A", "END", *tail()), text_deltas("B", "B", "END", *tail())]
    )

    async def main() -> tuple[list[Any], dict[int, str | None]]:
        async with openai.AsyncOpenAI(
            base_url=upstream_url + "/v1", api_key="sk-test", max_retries=0, timeout=TIMEOUT
        ) as client:
            upstream = await client.chat.completions.create(
                model="gpt-test", messages=MESSAGES, stream=True, n=2
            )
            async with awrap_chat(upstream, STOPS, n=2) as stream:
                return [c async for c in stream], stream.stop_sequences

    chunks, stops = asyncio.run(main())
    assert (content_of(chunks, 0), content_of(chunks, 1)) == ("A", "BB")
    assert stops == {0: "END", 1: "END"}
    assert_closed_early(fake.last)


def test_wrap_messages_on_an_sdk_stream(fake: FakeUpstream, upstream_url: str) -> None:
    fake.messages = MessagesScript([("text", ["One", " two", "Observation:", *tail()])])
    with anthropic_client(upstream_url) as client:
        upstream = client.messages.create(
            model="claude-test", max_tokens=100, messages=MESSAGES, stream=True
        )
        with wrap_messages(upstream, STOPS) as stream:
            events = list(stream)
        assert (stream.stop_reason, stream.stop_sequence) == ("stop_sequence", "Observation:")
    final = events[-2]
    assert isinstance(final, anthropic.types.RawMessageDeltaEvent)
    assert final.delta.stop_sequence == "Observation:"
    assert_closed_early(fake.last)


def test_awrap_messages_on_an_sdk_stream(fake: FakeUpstream, upstream_url: str) -> None:
    fake.messages = MessagesScript([("text", ["Async ", "one", "###", *tail()])])

    async def main() -> list[Any]:
        async with anthropic.AsyncAnthropic(
            base_url=upstream_url, api_key="sk-test", max_retries=0, timeout=TIMEOUT
        ) as client:
            upstream = await client.messages.create(
                model="claude-test", max_tokens=100, messages=MESSAGES, stream=True
            )
            async with awrap_messages(upstream, STOPS) as stream:
                return [e async for e in stream]

    events = asyncio.run(main())
    text = "".join(e.delta.text for e in events if e.type == "content_block_delta")
    assert text == "Async one"
    assert json.loads(events[-2].model_dump_json())["delta"]["stop_sequence"] == "###"
    assert_closed_early(fake.last)


# --- Under load ----------------------------------------------------------------------------

LOAD_REQUESTS = 200


def parse_chat_sse(body: str) -> tuple[str, str | None, str | None]:
    """Choice 0's text, its last ``finish_reason`` and ``stop_reason`` in a chat SSE body."""
    text, finish, stop = "", None, None
    for line in body.splitlines():
        if not line.startswith("data: {"):
            continue
        for choice in json.loads(line[6:])["choices"]:
            text += choice["delta"].get("content") or ""
            finish = choice.get("finish_reason") or finish
            stop = choice.get("stop_reason") or stop
    return text, finish, stop


@pytest.mark.slow
def test_load_stops_and_disconnects_all_close_the_upstream(
    fake: FakeUpstream, upstream_server: tuple[FakeUpstream, Served]
) -> None:
    """200 concurrent streams through a real gateway: half fire a stop (one the upstream was
    not sent), a quarter are dropped by the client mid-stream, a quarter run to their end.
    Every response is checked, and the fake upstream must see every stopped or dropped stream
    closed before its end, and no stream or connection left open."""
    kinds = ["stop", "stop", "disconnect", "plain"]
    local_stops = ["</answer>", "\n\nUser:"]  # beyond the 4 sent upstream
    # Long tails: under load the gateway may take a while to act on a stop or a client gone,
    # and the upstream must still be mid-stream when it does (an ended stream costs no more).
    for i in range(LOAD_REQUESTS):
        kind = kinds[i % len(kinds)]
        if kind == "stop":
            stop = local_stops[i % 3 % 2]
            deltas = text_deltas(f"Answer {i}", " is", stop[:3], stop[3:], *tail(1000))
        elif kind == "disconnect":
            deltas = text_deltas(f"Long {i}", *tail(1000))
        else:
            deltas = text_deltas(f"Plain {i}", " text ", "</an", "swer")
        fake.chat_by_model[f"{kind}-{i}"] = ChatScript([deltas])

    async def one(client: httpx.AsyncClient, url: str, i: int) -> tuple[str, str]:
        model = f"{kinds[i % len(kinds)]}-{i}"
        payload = {"model": model, "messages": MESSAGES, "stream": True, "stop": STOPS}
        async with client.stream("POST", url, json=payload) as response:
            assert response.status_code == 200, await response.aread()
            body = ""
            async for line in response.aiter_lines():
                body += line + "\n"
                if model.startswith("disconnect") and "tail5" in line:
                    break  # the client goes away mid-stream
        return model, body

    async def run(url: str) -> list[tuple[str, str]]:
        limits = httpx.Limits(max_connections=LOAD_REQUESTS, max_keepalive_connections=0)
        # 200 streams at once on two shared cores: a read may wait longer than one stream's
        # timeout while the others are served.
        async with httpx.AsyncClient(timeout=3 * TIMEOUT, limits=limits) as client:
            jobs = (one(client, url, i) for i in range(LOAD_REQUESTS))
            return await asyncio.wait_for(asyncio.gather(*jobs), 45)

    # The gateway's reads from the upstream wait as long as the client's (see `run`): with 200
    # streams at once, the test suite's other worker and a build sharing two cores, one read
    # took longer than a single stream's timeout.
    with serve_gateway(upstream_server[1], max_connections=1000, timeout=3 * TIMEOUT) as gateway:
        results = asyncio.run(run(gateway.url + "/v1/chat/completions"))
        records = {r.body["model"]: r for r in fake.records}
        assert sorted(records) == sorted(model for model, _ in results)
        counts = {"stop": 0, "disconnect": 0, "plain": 0}
        for model, body in results:
            kind, number = model.split("-")
            got = parse_chat_sse(body)
            record = records[model]
            if kind == "stop":
                fired = local_stops[int(number) % 3 % 2]
                assert got == (f"Answer {number} is", "stop", fired), model
                assert_closed_early(record)
            elif kind == "disconnect":
                assert got[0].startswith(f"Long {number} tail0"), model
                assert "tail6" not in got[0], model
                assert_closed_early(record)
            else:
                assert got == (f"Plain {number} text </answer", "stop", None), model
                assert_completed(record)
            text = got[0]
            assert "</ans" not in text or kind == "plain"
            counts[kind] += 1
        assert counts == {"stop": 100, "disconnect": 50, "plain": 50}
        assert wait_until(lambda: fake.open_streams == 0), f"{fake.open_streams} streams open"
    served = upstream_server[1]
    assert wait_until(lambda: served.open_connections == 0), (
        f"{served.open_connections} upstream connections still open"
    )


def wait_until(condition: Callable[[], bool], timeout: float = TIMEOUT) -> bool:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


# --- Disconnects before the response starts, the connection pool ---------------------------


async def stream_then_leave(url: str, leave: Callable[[], bool], model: str = "m") -> None:
    """A streaming call whose client goes away (cancels its task) once ``leave()`` is true."""
    payload = {"model": model, "messages": MESSAGES, "stream": True, "stop": STOPS}

    async def call(client: httpx.AsyncClient) -> None:
        async with client.stream("POST", url + "/v1/chat/completions", json=payload) as r:
            async for _ in r.aiter_raw():
                pass

    async with httpx.AsyncClient(timeout=TIMEOUT) as client:
        task = asyncio.ensure_future(call(client))
        try:
            await wait_for(lambda: leave() or task.done())
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task


async def wait_for(condition: Callable[[], bool]) -> None:
    for _ in range(int(TIMEOUT / 0.01)):
        if condition():
            return
        await asyncio.sleep(0.01)
    raise AssertionError("timed out")


def started(fake: FakeUpstream, events: int) -> Callable[[], bool]:
    """True once the first call has received more than ``events`` events."""
    return lambda: bool(fake.records) and fake.records[0].events_sent > events


def test_client_leaving_before_the_upstream_answers_cancels_the_call(
    fake: FakeUpstream, gateway: str
) -> None:
    fake.chat = ChatScript([text_deltas(*tail())])
    fake.headers_delay = 3.0
    asyncio.run(stream_then_leave(gateway, lambda: bool(fake.records)))
    record = fake.last
    assert record.disconnected.wait(TIMEOUT) and record.finished.wait(TIMEOUT)
    # The gateway dropped the upstream call while it waited for the headers.
    assert not record.headers_sent and record.events_sent == 0


def test_client_leaving_while_waiting_for_a_connection_never_reaches_the_upstream(
    fake: FakeUpstream, upstream_server: tuple[FakeUpstream, Served]
) -> None:
    fake.chat_by_model["long"] = ChatScript([text_deltas(*tail(300))])

    async def main(url: str) -> None:
        holder = asyncio.ensure_future(stream_then_leave(url, started(fake, 200), "long"))
        await wait_for(started(fake, 0))
        # The only connection is in use: this call waits for it, and its client leaves.
        since = time.monotonic()
        await stream_then_leave(url, lambda: time.monotonic() - since > 0.3, "queued")
        await holder

    with serve_gateway(upstream_server[1], max_connections=1) as gateway:
        asyncio.run(main(gateway.url))
        assert_closed_early(fake.records[0])
        # One more call goes through: the pool did not lose its connection.
        fake.chat = ChatScript([text_deltas("after")])
        with openai_client(gateway.url) as client:
            chunks = list(client.chat.completions.create(model="m", messages=MESSAGES, stream=True))
        assert content_of(chunks) == "after"
    assert [r.body["model"] for r in fake.records] == ["long", "m"]


def test_pool_full_for_longer_than_the_pool_timeout_is_a_503(
    fake: FakeUpstream, upstream_server: tuple[FakeUpstream, Served]
) -> None:
    fake.chat_by_model["long"] = ChatScript([text_deltas(*tail(300))])

    async def main(url: str) -> None:
        holder = asyncio.ensure_future(stream_then_leave(url, started(fake, 100), "long"))
        await wait_for(started(fake, 0))
        async with openai.AsyncOpenAI(
            base_url=url + "/v1", api_key="sk-test", max_retries=0, timeout=TIMEOUT
        ) as client:
            with pytest.raises(openai.InternalServerError, match="connection limit") as info:
                await client.chat.completions.create(model="m", messages=MESSAGES, stream=True)
        assert info.value.status_code == 503
        await holder

    with serve_gateway(upstream_server[1], max_connections=1, pool_timeout=0.2) as gateway:
        asyncio.run(main(gateway.url))
    assert [r.body["model"] for r in fake.records] == ["long"]


# --- Options are checked at startup --------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--stop-limit", "4.5"], "argument --stop-limit: unknown provider '4.5'"),
        (["--stop-limit", "-1"], "argument --stop-limit: limit must be >= 0"),
        (["--stop-limit", "opena1"], "unknown provider 'opena1' (known: 'openai'"),
        (["--anthropic-stop-limit", "x"], "argument --anthropic-stop-limit: unknown provider"),
        (["--port", "70000"], "argument --port: not a port number"),
        (["--upstream", "api.openai.com/v1"], "argument --upstream: not an http(s) URL"),
        (["--anthropic-upstream", "ftp://host"], "argument --anthropic-upstream: not an http"),
        (["--max-connections", "0"], "argument --max-connections: must be > 0"),
        (["--max-connections", "many"], "argument --max-connections: not a number"),
        (["--timeout", "0"], "argument --timeout: must be > 0"),
        (["--pool-timeout", "-3"], "argument --pool-timeout: must be > 0"),
        (["--on-stop", "later"], "argument --on-stop: invalid choice"),
    ],
)
def test_bad_option_is_a_startup_error(args: list[str], message: str) -> None:
    result = subprocess.run(
        [sys.executable, str(GATEWAY), *args],
        capture_output=True,
        timeout=60,
        check=False,
    )
    stderr = result.stderr.decode()
    assert result.returncode == 2, stderr
    assert "usage:" in stderr and message in stderr, stderr
    assert "Traceback" not in stderr


def test_options_parsed() -> None:
    gateway = load_gateway()
    args = gateway.parse_args(["--stop-limit", "3", "--upstream", "http://127.0.0.1:9/v1/"])
    assert (args.stop_limit, args.upstream, args.max_connections) == (
        3,
        "http://127.0.0.1:9/v1",
        1000,
    )
    assert gateway.parse_args(["--stop-limit", "none"]).stop_limit == "none"
    assert gateway.parse_args([]).anthropic_stop_limit == "anthropic"


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"stop_limit": "4.5"}, "stop_limit: unknown provider"),
        ({"anthropic_stop_limit": -2}, "anthropic_stop_limit: limit must be >= 0"),
        ({"stop_limit": 2.5}, "stop_limit: limit must be an int"),
        ({"on_stop": "later"}, "on_stop"),
        ({"timeout": 0}, "timeout must be"),
        ({"max_connections": 0}, "max_connections must be >= 1"),
        ({"upstream": "localhost:8000"}, "upstream: not an http(s) URL"),
    ],
)
def test_create_app_checks_its_options(options: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        load_gateway().create_app(**options)
