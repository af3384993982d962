"""End to end, with real components: the ``openai`` and ``anthropic`` SDK clients talk over HTTP
to ``examples/gateway.py`` (Starlette, served by uvicorn), which forwards to a fake model server
streaming SSE in the providers' shapes. Everything runs on 127.0.0.1; nothing else is contacted.

The adapters are also run directly on the SDKs' own stream objects (no gateway). Whenever a stop
fires, the fake upstream must see the connection dropped before it has sent everything.
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
from collections.abc import Iterator
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
    tail,
    text_deltas,
)
from stopstream.anthropic import awrap_messages, wrap_messages
from stopstream.openai import awrap_chat, wrap_chat

GATEWAY = Path(__file__).resolve().parent.parent / "examples" / "gateway.py"
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
    app = load_gateway().create_app(
        upstream.url + "/v1", anthropic_upstream=upstream.url, timeout=TIMEOUT, **options
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


def openai_client(url: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=url + "/v1", api_key="sk-test", max_retries=0, timeout=TIMEOUT)


def anthropic_client(url: str) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=url, api_key="sk-test", max_retries=0, timeout=TIMEOUT)


def assert_closed_early(record: Record) -> None:
    """The client of the fake upstream dropped the connection before the stream's end."""
    assert record.disconnected.wait(TIMEOUT), "the upstream connection was not closed"
    assert record.finished.wait(TIMEOUT)
    assert not record.completed.is_set()
    assert record.events_sent < record.events_total


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
    assert "stop_sequences" not in fake.last.body  # all enforced in the gateway
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
