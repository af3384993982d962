"""A fake OpenAI Responses API and Gemini API for the end-to-end tests (a raw ASGI app).

``POST .../v1/responses`` streams the events of ``responses`` (named SSE events, as the API
writes them); ``POST .../models/{model}:streamGenerateContent?alt=sse`` streams ``gemini``
chunks (``data:`` lines, ``\\r\\n`` line ends, as the API writes them). Streams are paced and
every request is recorded as in ``fake_upstream`` (events sent, client disconnected early).
A non-streaming ``/v1/responses`` request gets the final response object. Every other path is
served by a ``fake_upstream.FakeUpstream`` (``chat``: Chat Completions and Anthropic Messages).
"""

from __future__ import annotations

import json

from fake_upstream import FakeUpstream, Receive, Record, Scope, Send, _json
from provider_scripts import (
    Event,
    ResponseScript,
    gemini_sse,
    response_events,
    responses_sse,
)


class FakeProviders:
    def __init__(self) -> None:
        self.chat = FakeUpstream()
        self.records: list[Record] = []
        self.reset()

    def reset(self) -> None:
        self.responses: list[Event] = response_events(ResponseScript([]))
        self.gemini: list[Event] = []
        self.records = []
        self.chat.reset()

    @property
    def last(self) -> Record:
        return self.records[-1]

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        assert scope["type"] == "http"
        path: str = scope["path"]
        if not (path.endswith("/responses") or path.endswith(":streamGenerateContent")):
            await self.chat(scope, receive, send)
            return
        raw = b""
        while True:
            message = await receive()
            if message["type"] != "http.request":
                return
            raw += message.get("body", b"")
            if not message.get("more_body"):
                break
        record = Record(path, json.loads(raw or b"{}"))
        self.records.append(record)
        streamer = self.chat
        try:
            if path.endswith("/responses") and not record.body.get("stream"):
                final = self.responses[-1].get("response")
                await _json(send, 200, final if isinstance(final, dict) else {})
            elif path.endswith("/responses"):
                streamer.eol = "\n"
                await streamer._stream(responses_sse(self.responses), record, receive, send)
            else:
                streamer.eol = "\r\n"
                await streamer._stream(gemini_sse(self.gemini), record, receive, send)
        finally:
            record.finished.set()
