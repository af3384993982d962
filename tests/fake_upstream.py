"""A fake model server for the end-to-end tests, and a function that serves ASGI apps on loopback.

``FakeUpstream`` is a raw ASGI app answering ``POST .../chat/completions`` (OpenAI) and
``POST .../v1/messages`` (Anthropic) with streams in the providers' shapes (or the whole
response, for a request without ``stream``), paced so that a client closing early is noticed:
every request is recorded, with the number of events sent and whether the client disconnected
before the end (its stream cancelled early) or the stream ran to its end; ``open_streams``
counts the responses still being sent, and ``Served.open_connections`` the connections the
server holds. ``chat_by_model`` picks a script per request by its ``model``, for loads that mix
requests. Like the real APIs, it rejects more than 4 ``stop`` sequences (and any ``stop`` when
``reject_stop`` is set), and it applies the ``stop`` sequences it receives itself.
"""

from __future__ import annotations

import asyncio
import json
import socket
import threading
import time
from collections.abc import Awaitable, Callable, MutableMapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import uvicorn

if TYPE_CHECKING:
    import anthropic
    import openai

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

TIMEOUT = 10.0


@dataclass
class ChatScript:
    """What the fake streams for a chat completion: per choice, a list of deltas."""

    choices: list[list[dict[str, Any]]]
    finish_reasons: list[str] | None = None
    usage: dict[str, Any] = field(
        default_factory=lambda: {"prompt_tokens": 7, "completion_tokens": 30, "total_tokens": 37}
    )


@dataclass
class MessagesScript:
    """What the fake streams for a message: content blocks as (type, parts)."""

    blocks: list[tuple[str, list[str]]]
    stop_reason: str = "end_turn"
    usage: dict[str, Any] = field(default_factory=lambda: {"input_tokens": 11, "output_tokens": 1})
    final_output_tokens: int = 42


@dataclass
class Record:
    """One request the fake received, and how its response went."""

    path: str
    body: dict[str, Any]
    events_total: int = 0
    events_sent: int = 0
    headers_sent: bool = False
    disconnected: threading.Event = field(default_factory=threading.Event)
    completed: threading.Event = field(default_factory=threading.Event)
    finished: threading.Event = field(default_factory=threading.Event)


def text_deltas(*parts: str) -> list[dict[str, Any]]:
    return [{"content": part} for part in parts]


def openai_client(url: str) -> openai.OpenAI:
    """The openai SDK's client for a server on loopback (``url`` without ``/v1``)."""
    import openai

    return openai.OpenAI(base_url=url + "/v1", api_key="sk-test", max_retries=0, timeout=TIMEOUT)


def anthropic_client(url: str) -> anthropic.Anthropic:
    """The anthropic SDK's client for a server on loopback."""
    import anthropic

    return anthropic.Anthropic(base_url=url, api_key="sk-test", max_retries=0, timeout=TIMEOUT)


def assert_closed_early(record: Record) -> None:
    """The client of the fake upstream dropped the connection before the stream's end."""
    assert record.disconnected.wait(TIMEOUT), "the upstream connection was not closed"
    assert record.finished.wait(TIMEOUT)
    assert not record.completed.is_set()
    assert record.events_sent < record.events_total


def chat_text(chunks: list[Any]) -> str:
    """The text of the first choice over Chat chunks (SDK objects)."""
    return "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)


def tail(count: int = 100) -> list[str]:
    """Tokens after the point where the tests' stops fire: the fake is still sending them."""
    return [f" tail{i}" for i in range(count)]


class FakeUpstream:
    """The fake model server (a raw ASGI app)."""

    def __init__(self) -> None:
        self.records: list[Record] = []
        self.open_streams = 0  # requests being answered (only touched on the server's loop)
        self.reset()

    def reset(self) -> None:
        """Back to the default scripts and settings, with no records."""
        self.chat = ChatScript(choices=[text_deltas("Hello")])
        self.chat_by_model: dict[str, ChatScript] = {}
        self.messages = MessagesScript(blocks=[("text", ["Hello"])])
        self.delay = 0.005
        self.headers_delay = 0.0  # seconds before a stream's response headers
        self.eol = "\n"
        self.split_events = True
        self.reject_stop = False
        self.records = []

    @property
    def last(self) -> Record:
        return self.records[-1]

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        assert scope["type"] == "http"
        raw = b""
        while True:
            message = await receive()
            if message["type"] != "http.request":
                return
            raw += message.get("body", b"")
            if not message.get("more_body"):
                break
        body = json.loads(raw or b"{}")
        record = Record(scope["path"], body)
        self.records.append(record)
        self.open_streams += 1
        try:
            if scope["path"].endswith("/chat/completions"):
                await self._chat(body, record, receive, send)
            elif scope["path"].endswith("/messages"):
                await self._messages(body, record, receive, send)
            else:
                await _json(send, 404, {"error": {"message": "not found"}})
        finally:
            self.open_streams -= 1
            record.finished.set()

    # --- OpenAI -------------------------------------------------------------------------------

    async def _chat(
        self, body: dict[str, Any], record: Record, receive: Receive, send: Send
    ) -> None:
        stop = body.get("stop")
        stops = [stop] if isinstance(stop, str) else list(stop or [])
        if (self.reject_stop and stop is not None) or len(stops) > 4:
            error = (
                "Unsupported parameter: 'stop' is not supported with this model."
                if self.reject_stop
                else f"Invalid 'stop': expected an array of maximum length 4, got {len(stops)}."
            )
            await _json(send, 400, {"error": {"message": error, "type": "invalid_request_error"}})
            return
        script = self.chat_by_model.get(str(body.get("model")), self.chat)
        n = body.get("n") or 1
        per_choice = [script.choices[i % len(script.choices)] for i in range(n)]
        reasons = script.finish_reasons or ["stop"]
        finish = [reasons[i % len(reasons)] for i in range(n)]
        per_choice = [
            _apply_upstream_stops(deltas, stops, finish, i) for i, deltas in enumerate(per_choice)
        ]
        base = {
            "id": "chatcmpl-fake",
            "object": "chat.completion.chunk",
            "created": 1700000000,
            "model": body.get("model", "fake"),
            "system_fingerprint": "fp_fake",
        }
        include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
        if not body.get("stream"):
            choices = []
            for i, deltas in enumerate(per_choice):
                content = "".join(d.get("content") or "" for d in deltas)
                message = {"role": "assistant", "content": content, "refusal": None}
                choices.append({"index": i, "message": message, "finish_reason": finish[i]})
            await _json(
                send,
                200,
                {**base, "object": "chat.completion", "choices": choices, "usage": script.usage},
            )
            return
        extra = {"usage": None} if include_usage else {}
        chunks: list[dict[str, Any]] = []

        def chunk(index: int, delta: dict[str, Any], reason: str | None = None) -> None:
            choice = {"index": index, "delta": delta, "logprobs": None, "finish_reason": reason}
            chunks.append({**base, "choices": [choice], **extra})

        for i in range(n):
            chunk(i, {"role": "assistant", "content": "", "refusal": None})
        for step in range(max(len(d) for d in per_choice)):
            for i, deltas in enumerate(per_choice):
                if step < len(deltas):
                    chunk(i, deltas[step])
        for i in range(n):
            chunk(i, {}, finish[i])
        if include_usage:
            chunks.append({**base, "choices": [], "usage": script.usage})
        events = [f"data: {json.dumps(c)}" for c in chunks] + ["data: [DONE]"]
        await self._stream(events, record, receive, send)

    # --- Anthropic ----------------------------------------------------------------------------

    async def _messages(
        self, body: dict[str, Any], record: Record, receive: Receive, send: Send
    ) -> None:
        script = self.messages
        message = {
            "id": "msg_fake",
            "type": "message",
            "role": "assistant",
            "content": [],
            "model": body.get("model", "fake"),
            "stop_reason": None,
            "stop_sequence": None,
            "usage": script.usage,
        }
        if not body.get("stream"):
            await _json(send, 200, _whole_message(message, script))
            return
        events: list[tuple[str, dict[str, Any]]] = [
            ("message_start", {"type": "message_start", "message": message}),
            ("ping", {"type": "ping"}),
        ]
        for index, (kind, parts) in enumerate(script.blocks):
            if kind == "text":
                block: dict[str, Any] = {"type": "text", "text": ""}
                deltas = [{"type": "text_delta", "text": p} for p in parts]
            elif kind == "thinking":
                block = {"type": "thinking", "thinking": "", "signature": ""}
                deltas = [{"type": "thinking_delta", "thinking": p} for p in parts]
                deltas.append({"type": "signature_delta", "signature": "c2lnbmF0dXJl"})
            else:
                block = {"type": "tool_use", "id": "toolu_fake", "name": kind, "input": {}}
                deltas = [{"type": "input_json_delta", "partial_json": p} for p in parts]
            events.append(
                (
                    "content_block_start",
                    {"type": "content_block_start", "index": index, "content_block": block},
                )
            )
            for step, delta in enumerate(deltas):
                events.append(
                    (
                        "content_block_delta",
                        {"type": "content_block_delta", "index": index, "delta": delta},
                    )
                )
                if step % 10 == 9:
                    events.append(("ping", {"type": "ping"}))
            events.append(("content_block_stop", {"type": "content_block_stop", "index": index}))
        events.append(
            (
                "message_delta",
                {
                    "type": "message_delta",
                    "delta": {"stop_reason": script.stop_reason, "stop_sequence": None},
                    "usage": {"output_tokens": script.final_output_tokens},
                },
            )
        )
        events.append(("message_stop", {"type": "message_stop"}))
        lines = [f"event: {name}\ndata: {json.dumps(data)}" for name, data in events]
        await self._stream(lines, record, receive, send)

    # --- streaming ----------------------------------------------------------------------------

    async def _stream(
        self, events: list[str], record: Record, receive: Receive, send: Send
    ) -> None:
        record.events_total = len(events)
        disconnected = asyncio.Event()

        async def watch() -> None:
            message = await receive()
            if message["type"] == "http.disconnect":
                disconnected.set()

        watcher = asyncio.ensure_future(watch())
        try:
            if self.headers_delay:
                await asyncio.sleep(self.headers_delay)
                if disconnected.is_set():  # the client left before the response began
                    record.disconnected.set()
                    return
            record.headers_sent = True
            await send(
                {
                    "type": "http.response.start",
                    "status": 200,
                    "headers": [
                        (b"content-type", b"text/event-stream; charset=utf-8"),
                        (b"cache-control", b"no-cache"),
                    ],
                }
            )
            eol = self.eol
            for event in events:
                data = (event.replace("\n", eol) + eol + eol).encode("utf-8")
                pieces = [data[:7], data[7:]] if self.split_events else [data]
                for piece in pieces:
                    if disconnected.is_set():
                        record.disconnected.set()
                        return
                    await send({"type": "http.response.body", "body": piece, "more_body": True})
                    await asyncio.sleep(self.delay / len(pieces))
                record.events_sent += 1
            await send({"type": "http.response.body", "body": b"", "more_body": False})
            record.completed.set()
        finally:
            watcher.cancel()


def _whole_message(message: dict[str, Any], script: MessagesScript) -> dict[str, Any]:
    """The non-streamed message of a script: each block whole."""
    content: list[dict[str, Any]] = []
    for kind, parts in script.blocks:
        if kind == "text":
            content.append({"type": "text", "text": "".join(parts)})
        elif kind == "thinking":
            content.append({"type": "thinking", "thinking": "".join(parts), "signature": "c2ln"})
        else:
            arguments = json.loads("".join(parts) or "{}")
            content.append(
                {"type": "tool_use", "id": "toolu_fake", "name": kind, "input": arguments}
            )
    usage = {**script.usage, "output_tokens": script.final_output_tokens}
    return {**message, "content": content, "stop_reason": script.stop_reason, "usage": usage}


def _apply_upstream_stops(
    deltas: list[dict[str, Any]], stops: list[str], finish: list[str], index: int
) -> list[dict[str, Any]]:
    """Cut a choice's deltas at the first upstream stop, as the real API would."""
    if not stops:
        return deltas
    text = ""
    out: list[dict[str, Any]] = []
    for delta in deltas:
        content = delta.get("content")
        if not isinstance(content, str):
            out.append(delta)
            continue
        before = len(text)
        text += content
        hits = [text.find(s) for s in stops if s in text]
        if hits:
            cut = min(hits)
            if cut > before:
                out.append({**delta, "content": text[before:cut]})
            finish[index] = "stop"
            return out
        out.append(delta)
    return out


async def _json(send: Send, status: int, payload: dict[str, Any]) -> None:
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [(b"content-type", b"application/json")],
        }
    )
    await send({"type": "http.response.body", "body": json.dumps(payload).encode()})


class Served:
    """An ASGI app served by uvicorn on 127.0.0.1 (a free port) in a background thread."""

    def __init__(self, app: Any, *, lifespan: str = "off") -> None:
        self._socket = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._socket.bind(("127.0.0.1", 0))
        self.port: int = self._socket.getsockname()[1]
        config = uvicorn.Config(
            app,
            host="127.0.0.1",
            port=self.port,
            http="h11",
            loop="asyncio",
            lifespan=lifespan,  # type: ignore[arg-type]
            log_config=None,
            log_level="warning",
            access_log=False,
            timeout_graceful_shutdown=2,
        )
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(
            target=self._server.run, kwargs={"sockets": [self._socket]}, daemon=True
        )

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def open_connections(self) -> int:
        """The HTTP connections the server holds open right now (idle keep-alive ones too)."""
        return len(self._server.server_state.connections)

    def __enter__(self) -> Served:
        self._thread.start()
        deadline = time.monotonic() + TIMEOUT
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                self.__exit__()
                raise RuntimeError("the server did not start")
            time.sleep(0.01)
        return self

    def __exit__(self, *_exc: object) -> None:
        self._server.should_exit = True
        self._thread.join(TIMEOUT)
        self._socket.close()
        if self._thread.is_alive():
            raise RuntimeError("the server did not stop")
