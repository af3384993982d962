"""A dropped stream is not a finished one (contract §8), with the real SDK clients.

Bodies cut mid-event, and bodies that end without their terminal event, served to the real
``openai`` and ``anthropic`` clients over an in-memory ``httpx`` transport: through the SDK-object
adapters, and through the SSE adapters with the SDK parsing what they forward. In every case the
adapter invents no ending (no ``finish_reason``, no ``message_stop``), ``complete`` is ``False``
and the text held back stays in ``pending``.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import anthropic
import httpx
import openai
import pytest

from stopstream import anthropic as ss_anthropic
from stopstream import openai as ss_openai
from stopstream import sse as ss_sse

STOPS = ["</answer>"]


def chat_event(content: str | None, finish: str | None = None) -> bytes:
    delta = {} if content is None else {"content": content}
    chunk = {
        "id": "c1",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": "m",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }
    return b"data: " + json.dumps(chunk).encode() + b"\n\n"


def messages_event(event: dict[str, Any]) -> bytes:
    return f"event: {event['type']}\ndata: {json.dumps(event)}\n\n".encode()


def delta(text: str) -> dict[str, Any]:
    return {
        "type": "content_block_delta",
        "index": 0,
        "delta": {"type": "text_delta", "text": text},
    }


MESSAGE_START = {
    "type": "message_start",
    "message": {
        "id": "m1",
        "type": "message",
        "role": "assistant",
        "model": "claude",
        "content": [],
        "stop_reason": None,
        "stop_sequence": None,
        "usage": {"input_tokens": 3, "output_tokens": 1},
    },
}
BLOCK_START = {
    "type": "content_block_start",
    "index": 0,
    "content_block": {"type": "text", "text": ""},
}

CHAT_FULL = chat_event("Hello </an") + chat_event(" more", "stop") + b"data: [DONE]\n\n"
CHAT_BODIES = {
    # The second event is cut: its text (and finish_reason) never arrive.
    "cut mid-event": chat_event("Hello </an") + chat_event(" more", "stop")[:30],
    "no terminal event": chat_event("Hello </an"),
    "done without finish_reason": chat_event("Hello </an") + b"data: [DONE]\n\n",
}
MESSAGES_BODIES = {
    "cut mid-event": (
        messages_event(MESSAGE_START)
        + messages_event(BLOCK_START)
        + messages_event(delta("Hello </an"))
        + messages_event(delta(" more"))[:25]
    ),
    "no terminal event": (
        messages_event(MESSAGE_START)
        + messages_event(BLOCK_START)
        + messages_event(delta("Hello </an"))
    ),
}


def transport(http: Any, body: bytes) -> Any:
    """An in-memory transport of the HTTP package ``http`` serving ``body`` in 7-byte pieces."""

    def handler(request: Any) -> Any:
        def chunks() -> Iterator[bytes]:
            for i in range(0, len(body), 7):  # split anywhere
                yield body[i : i + 7]

        return http.Response(200, headers={"content-type": "text/event-stream"}, content=chunks())

    return http.MockTransport(handler)


def http_package(sdk: Any) -> Any:
    """The HTTP package an SDK is built on: ``httpx``, or ``httpx2`` in recent releases."""
    if any(base.__module__.startswith("httpx2") for base in sdk.DefaultHttpxClient.__mro__):
        import httpx2

        return httpx2
    return httpx


def openai_client(body: bytes) -> openai.OpenAI:
    http = http_package(openai)
    client = http.Client(transport=transport(http, body))
    return openai.OpenAI(api_key="k", base_url="http://upstream.test/v1", http_client=client)


def anthropic_client(body: bytes) -> anthropic.Anthropic:
    http = http_package(anthropic)
    client = http.Client(transport=transport(http, body))
    return anthropic.Anthropic(api_key="k", base_url="http://upstream.test", http_client=client)


def chat_stream(client: openai.OpenAI) -> Any:
    return client.chat.completions.create(
        model="m", messages=[{"role": "user", "content": "hi"}], stream=True
    )


def messages_stream(client: anthropic.Anthropic) -> Any:
    return client.messages.create(
        model="claude", max_tokens=10, messages=[{"role": "user", "content": "hi"}], stream=True
    )


@pytest.mark.parametrize("case", CHAT_BODIES)
def test_openai_sdk_stream_dropped(case: str) -> None:
    with ss_openai.wrap_chat(chat_stream(openai_client(CHAT_BODIES[case])), STOPS) as stream:
        out = list(stream)
    assert "".join(c.choices[0].delta.content or "" for c in out) == "Hello "
    assert all(c.choices[0].finish_reason is None for c in out)
    assert not stream.complete
    assert stream.pending == {0: "</an"}


def test_openai_sdk_stream_finished() -> None:
    with ss_openai.wrap_chat(chat_stream(openai_client(CHAT_FULL)), STOPS) as stream:
        out = list(stream)
    assert "".join(c.choices[0].delta.content or "" for c in out) == "Hello </an more"
    assert stream.complete and stream.pending == {}


@pytest.mark.parametrize("case", CHAT_BODIES)
def test_openai_sse_adapter_dropped_then_parsed_by_the_sdk(case: str) -> None:
    stream = ss_sse.wrap_openai(iter([CHAT_BODIES[case]]), STOPS)
    forwarded = b"".join(stream)
    assert not stream.complete
    assert stream.pending == {0: "</an"}
    # What the gateway forwarded parses in the real client, and looks unfinished there too.
    chunks = list(chat_stream(openai_client(forwarded)))
    assert "".join(c.choices[0].delta.content or "" for c in chunks) == "Hello "
    assert all(c.choices[0].finish_reason is None for c in chunks)


@pytest.mark.parametrize("case", MESSAGES_BODIES)
def test_anthropic_sdk_stream_dropped(case: str) -> None:
    client = anthropic_client(MESSAGES_BODIES[case])
    with ss_anthropic.wrap_messages(messages_stream(client), STOPS) as stream:
        out = list(stream)
    kinds = [e.type for e in out]
    assert "message_stop" not in kinds and "message_delta" not in kinds
    assert "".join(e.delta.text for e in out if e.type == "content_block_delta") == "Hello "
    assert not stream.complete
    assert stream.pending == "</an"


@pytest.mark.parametrize("case", MESSAGES_BODIES)
def test_anthropic_sse_adapter_dropped_then_parsed_by_the_sdk(case: str) -> None:
    stream = ss_sse.wrap_anthropic(iter([MESSAGES_BODIES[case]]), STOPS)
    forwarded = b"".join(stream)
    assert not stream.complete
    assert stream.pending == "</an"
    events = list(messages_stream(anthropic_client(forwarded)))
    assert [e.type for e in events] == [
        "message_start",
        "content_block_start",
        "content_block_delta",
    ]
