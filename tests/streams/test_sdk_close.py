"""Closing an adapter from another thread or task while it waits on a real SDK stream (§9.2).

A server on loopback streams two events and then stalls, as a model that has gone quiet does.
The real ``openai`` / ``anthropic`` client streams from it through an adapter; while a consumer
waits in the adapter's pull, another thread or task closes the adapter. The close must return at
once, the SDK stream's own ``close()`` must drop the connection (the server sees the client go),
and the waiting pull must end promptly, without an error.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from typing import Any

import anthropic
import openai
import pytest

from fake_upstream import Receive, Scope, Send, Served
from stopstream import anthropic as ss_anthropic
from stopstream import openai as ss_openai

# Real servers or subprocesses: `-m "not e2e"` leaves them out.
pytestmark = pytest.mark.e2e

PROMPT = 1.0  # a close must not wait for the stalled read, which waits for ever
ENDS = 5.0  # the stalled pull ends once the connection drops


class Stalling:
    """ASGI app: two events of the provider's shape, then silence until the client goes."""

    def __init__(self) -> None:
        self.sent = 0
        self.disconnected = threading.Event()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        while (await receive()).get("more_body"):
            pass
        chat = scope["path"].endswith("/chat/completions")
        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [(b"content-type", b"text/event-stream")],
            }
        )
        for event in self._events(chat):
            await send({"type": "http.response.body", "body": event, "more_body": True})
            self.sent += 1
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                self.disconnected.set()
                return

    @staticmethod
    def _events(chat: bool) -> list[bytes]:
        if chat:
            chunks = [
                {
                    "id": "c",
                    "object": "chat.completion.chunk",
                    "created": 1,
                    "model": "m",
                    "choices": [{"index": 0, "delta": {"content": t}, "finish_reason": None}],
                }
                for t in ("Hello", " there")
            ]
            return [b"data: " + json.dumps(c).encode() + b"\n\n" for c in chunks]
        events: list[dict[str, Any]] = [
            {
                "type": "message_start",
                "message": {
                    "id": "m",
                    "type": "message",
                    "role": "assistant",
                    "model": "claude",
                    "content": [],
                    "stop_reason": None,
                    "stop_sequence": None,
                    "usage": {"input_tokens": 1, "output_tokens": 1},
                },
            },
            {
                "type": "content_block_start",
                "index": 0,
                "content_block": {"type": "text", "text": ""},
            },
        ]
        return [f"event: {e['type']}\ndata: {json.dumps(e)}\n\n".encode() for e in events]


@pytest.fixture
def server() -> Any:
    app = Stalling()
    with Served(app) as served:
        yield app, served.url


def chat(client: Any) -> Any:
    return client.chat.completions.create(
        model="m", messages=[{"role": "user", "content": "hi"}], stream=True
    )


def messages(client: Any) -> Any:
    return client.messages.create(
        model="claude", max_tokens=5, messages=[{"role": "user", "content": "hi"}], stream=True
    )


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
def test_close_from_another_thread_drops_the_sdk_connection(
    server: tuple[Stalling, str], provider: str
) -> None:
    app, url = server
    if provider == "openai":
        client: Any = openai.OpenAI(api_key="k", base_url=url + "/v1", max_retries=0)
        stream: Any = ss_openai.wrap_chat(chat(client), ["X"])
    else:
        client = anthropic.Anthropic(api_key="k", base_url=url, max_retries=0)
        stream = ss_anthropic.wrap_messages(messages(client), ["X"])
    got: list[Any] = []
    errors: list[BaseException] = []
    first = threading.Event()

    def consume() -> None:
        try:
            for item in stream:
                got.append(item)
                first.set()
        except BaseException as exc:
            errors.append(exc)

    thread = threading.Thread(target=consume)
    thread.start()
    assert first.wait(ENDS)
    while app.sent < 2:
        time.sleep(0.01)
    time.sleep(0.1)  # the consumer is now waiting on the stalled read
    start = time.monotonic()
    stream.close()
    assert time.monotonic() - start < PROMPT
    thread.join(ENDS)
    assert not thread.is_alive(), "the pull went on waiting after the close"
    assert errors == []
    assert app.disconnected.wait(ENDS)
    assert not stream.complete


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
def test_aclose_from_another_task_drops_the_sdk_connection(
    server: tuple[Stalling, str], provider: str
) -> None:
    app, url = server

    async def main() -> None:
        if provider == "openai":
            client: Any = openai.AsyncOpenAI(api_key="k", base_url=url + "/v1", max_retries=0)
            stream: Any = ss_openai.awrap_chat(await chat(client), ["X"])
        else:
            client = anthropic.AsyncAnthropic(api_key="k", base_url=url, max_retries=0)
            stream = ss_anthropic.awrap_messages(await messages(client), ["X"])
        got: list[Any] = []

        async def consume() -> None:
            async for item in stream:
                got.append(item)

        task = asyncio.ensure_future(consume())
        while app.sent < 2 or not got:
            await asyncio.sleep(0.01)
        await asyncio.sleep(0.1)  # the consumer is now waiting on the stalled read
        start = time.monotonic()
        await stream.aclose()
        assert time.monotonic() - start < PROMPT
        await asyncio.wait_for(task, ENDS)  # ends without an error
        assert not stream.complete
        await client.close()

    asyncio.run(main())
    assert app.disconnected.wait(ENDS)
