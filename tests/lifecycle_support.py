"""The entry points of the lifecycle matrix, and instrumented upstreams.

Each ``Entry`` is one pull API (``wrap``, ``awrap``, every adapter over dicts, SDK objects and
SSE bytes) with the same story told in its own protocol: text arriving in pieces
(``"Hello "``, ``"wor"``, ``"ld </st"``, ``"op> tail"``, ``" more"``), a stop ``"</stop>"``
completing in the fourth item, and the protocol's terminal event after the text. An entry
knows how to make a stream over an upstream, read the text out of its output, check the final
events a stop must produce, and what a bad item is.

The upstreams are SDK-stream-like: an object whose ``__iter__`` / ``__aiter__`` returns a
generator over the items, with ``close()`` counting calls (and, like an SDK stream's, dropping
the connection: a read blocked in the generator ends with ``ConnectionError``). They can block
at an item, raise at an item, and fail to close.
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass
from typing import Any

import anthropic.types as anthropic_types
import openai.types.chat as openai_types
from anthropic import NOT_GIVEN as anthropic_not_given
from anthropic._models import construct_type
from anthropic.lib.streaming import AsyncMessageStream, MessageStream
from google.genai import types as genai_types
from openai import omit as openai_omit
from openai.lib.streaming.chat import AsyncChatCompletionStream, ChatCompletionStream
from openai.lib.streaming.responses import AsyncResponseStream, ResponseStream
from openai.types.responses import ResponseStreamEvent
from pydantic import TypeAdapter

import stopstream
from provider_scripts import Item, ResponseScript, gemini_chunk, response_events
from stopstream import anthropic as ss_anthropic
from stopstream import gemini as ss_gemini
from stopstream import openai as ss_openai
from stopstream import sse as ss_sse

STOPS = ["</stop>"]
PIECES = ["Hello ", "wor", "ld </st", "op> tail", " more"]
STOP_ITEM = 3  # the piece in which the stop completes
BEFORE_STOP = "Hello world "
HELD_AFTER_THIRD = "</st"  # what is held back after the third piece
# A stop that only the end of the text decides (``\b`` needs the character after "more"); the
# second pattern holds the space before it until the end proves it no stop, so the end both
# releases text and fires the stop.
END_STOPS = [stopstream.Regex(r"\bmore\b"), stopstream.Regex(r" mo\w*x")]
BEFORE_END_STOP = "Hello world </stop> tail "


class UpstreamError(Exception):
    pass


class Response:
    """What an SDK stream helper takes from its raw stream's ``response`` (closed on the
    helper's ``close()``; the upstream's own ``close()`` is what the matrix counts)."""

    def close(self) -> None:
        pass

    async def aclose(self) -> None:
        pass


class Upstream:
    """A sync SDK-like stream over ``items``."""

    def __init__(
        self,
        items: list[Any],
        *,
        raise_at: int | None = None,
        block_at: int | None = None,
        close_error: BaseException | None = None,
    ) -> None:
        self.items = items
        self.raise_at = raise_at
        self.block_at = block_at
        self.close_error = close_error
        self.closes = 0  # close() on this object
        self.log: list[str] = []  # "close" per close(), readable after the object is gone
        self.iterator_closes = 0  # the generator closed (GeneratorExit)
        self.pulled = 0
        self.blocked = threading.Event()
        self.unblock = threading.Event()
        self.dropped = False
        self.error: UpstreamError | None = None
        self.response = Response()

    def __iter__(self) -> Iterator[Any]:
        return self._gen()

    def _gen(self) -> Iterator[Any]:
        try:
            for position, item in enumerate(self.items):
                if position == self.block_at:
                    self.blocked.set()
                    self.unblock.wait(10)
                    if self.dropped:
                        raise ConnectionError("connection closed")
                if position == self.raise_at:
                    self.error = UpstreamError(f"upstream failed at {position}")
                    raise self.error
                self.pulled += 1
                yield item
        except GeneratorExit:
            self.iterator_closes += 1
            raise

    def close(self) -> None:
        self.closes += 1
        self.log.append("close")
        self.dropped = True
        self.unblock.set()
        if self.close_error is not None:
            raise self.close_error

    @property
    def total_closes(self) -> int:
        return self.closes


class AsyncUpstream:
    """The async twin: ``__aiter__`` returns an async generator; ``close()`` is a coroutine, as
    the SDKs' ``AsyncStream.close()`` is."""

    def __init__(
        self,
        items: list[Any],
        *,
        raise_at: int | None = None,
        block_at: int | None = None,
        close_error: BaseException | None = None,
        slow_close: bool = False,
    ) -> None:
        self.items = items
        self.raise_at = raise_at
        self.block_at = block_at
        self.close_error = close_error
        # A slow close: ``close()`` waits for ``close_gate`` (``closing`` is set meanwhile).
        self.slow_close = slow_close
        self.closing = asyncio.Event()
        self.close_gate = asyncio.Event()
        self.closed = asyncio.Event()  # a close() finished
        self.closes = 0
        self.iterator_closes = 0
        self.pulled = 0
        self.blocked = asyncio.Event()
        self.unblock = asyncio.Event()
        self.dropped = False
        self.error: UpstreamError | None = None
        self.response = Response()

    def __aiter__(self) -> AsyncIterator[Any]:
        return self._gen()

    async def _gen(self) -> AsyncIterator[Any]:
        try:
            for position, item in enumerate(self.items):
                if position == self.block_at:
                    self.blocked.set()
                    await asyncio.wait_for(self.unblock.wait(), 10)
                    if self.dropped:
                        raise ConnectionError("connection closed")
                if position == self.raise_at:
                    self.error = UpstreamError(f"upstream failed at {position}")
                    raise self.error
                self.pulled += 1
                yield item
        except GeneratorExit:
            self.iterator_closes += 1
            raise

    async def close(self) -> None:
        self.closes += 1
        self.dropped = True
        self.unblock.set()
        if self.slow_close:
            self.closing.set()
            await asyncio.wait_for(self.close_gate.wait(), 10)
        self.closed.set()
        if self.close_error is not None:
            raise self.close_error


# --- the protocols ------------------------------------------------------------------------------


def chat_chunk(content: str | None, finish: str | None = None) -> dict[str, Any]:
    delta: dict[str, Any] = {} if content is None else {"content": content}
    return {
        "id": "c1",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": "m",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }


def chat_items() -> list[dict[str, Any]]:
    return [chat_chunk(p) for p in PIECES] + [chat_chunk(None, "stop")]


def chat_text(out: list[Any]) -> str:
    text = ""
    for c in out:
        d = c if isinstance(c, dict) else c.model_dump()
        for choice in d["choices"]:
            text += (choice["delta"] or {}).get("content") or ""
    return text


def chat_final(out: list[Any], stop: str = "</stop>") -> bool:
    last = [c if isinstance(c, dict) else c.model_dump() for c in out if c_choices(c)][-1]
    choice = last["choices"][0]
    return bool(choice["finish_reason"] == "stop" and choice.get("stop_reason") == stop)


def c_choices(c: Any) -> list[Any]:
    return list(c["choices"] if isinstance(c, dict) else c.choices)


def sdk_chat(items: list[dict[str, Any]]) -> list[Any]:
    return [openai_types.ChatCompletionChunk.construct(**i) for i in items]


def messages_items() -> list[dict[str, Any]]:
    return [
        {
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
        },
        {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
        *[
            {
                "type": "content_block_delta",
                "index": 0,
                "delta": {"type": "text_delta", "text": p},
            }
            for p in PIECES
        ],
        {"type": "content_block_stop", "index": 0},
        {
            "type": "message_delta",
            "delta": {"stop_reason": "end_turn", "stop_sequence": None},
            "usage": {"output_tokens": 9},
        },
        {"type": "message_stop"},
    ]


MESSAGES_OFFSET = 2  # the text pieces start at this item


def messages_text(out: list[Any]) -> str:
    text = ""
    for e in out:
        d = e if isinstance(e, dict) else e.model_dump()
        if d["type"] == "content_block_delta" and d["delta"]["type"] == "text_delta":
            text += d["delta"]["text"]
    return text


def messages_final(out: list[Any], stop: str = "</stop>") -> bool:
    kinds = [(e if isinstance(e, dict) else e.model_dump())["type"] for e in out]
    if kinds[-3:] != ["content_block_stop", "message_delta", "message_stop"]:
        return False
    delta = out[-2] if isinstance(out[-2], dict) else out[-2].model_dump()
    return bool(delta["delta"]["stop_sequence"] == stop)


def sdk_messages(items: list[dict[str, Any]]) -> list[Any]:
    union = anthropic_types.RawMessageStreamEvent
    return [construct_type(value=e, type_=union) for e in items]


def sse_openai(items: list[dict[str, Any]]) -> list[bytes]:
    return [b"data: " + json.dumps(i).encode() + b"\n\n" for i in items] + [b"data: [DONE]\n\n"]


def sse_anthropic(items: list[dict[str, Any]]) -> list[bytes]:
    return [
        f"event: {i['type']}\ndata: {json.dumps(i)}\n\n".encode()
        for i in items  # one event per chunk, so item positions line up with the dict forms
    ]


def sse_events(out: list[bytes]) -> list[dict[str, Any]]:
    events = []
    for block in b"".join(out).split(b"\n\n"):
        for line in block.split(b"\n"):
            if line.startswith(b"data: ") and line != b"data: [DONE]":
                events.append(json.loads(line[6:]))
    return events


def sse_openai_final(out: list[bytes], stop: str = "</stop>") -> bool:
    return b"".join(out).endswith(b"data: [DONE]\n\n") and chat_final(sse_events(out), stop)


# --- the entries --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Entry:
    name: str
    is_async: bool
    items: Callable[[], list[Any]]
    make: Callable[..., Any]  # (upstream, stops=STOPS) -> the stream
    text: Callable[[list[Any]], str]
    final: Callable[..., bool]  # (output, the stop that fired) -> it ended the stream
    offset: int  # item position of the first text piece
    bad_item: object
    adapter: bool  # has ``complete``; its ``pending`` is per protocol

    def pending(self, stream: Any) -> str:
        p = stream.pending
        if isinstance(p, dict):
            return "".join(p.values())
        return str(p)

    def __repr__(self) -> str:
        return self.name


def _entries() -> list[Entry]:
    out: list[Entry] = []
    for is_async in (False, True):
        a = "a" if is_async else ""
        w = stopstream.awrap if is_async else stopstream.wrap
        out.append(
            Entry(
                f"{a}wrap",
                is_async,
                lambda: list(PIECES),
                lambda up, stops=STOPS, w=w: w(up, stops),
                lambda o: "".join(o),
                lambda o, stop="</stop>": True,
                0,
                5,
                False,
            )
        )
        chat = ss_openai.awrap_chat if is_async else ss_openai.wrap_chat
        msgs = ss_anthropic.awrap_messages if is_async else ss_anthropic.wrap_messages
        sse_o = ss_sse.awrap_openai if is_async else ss_sse.wrap_openai
        sse_a = ss_sse.awrap_anthropic if is_async else ss_sse.wrap_anthropic
        for kind, items in (("dicts", chat_items), ("sdk", lambda: sdk_chat(chat_items()))):
            out.append(
                Entry(
                    f"openai.{a}wrap_chat[{kind}]",
                    is_async,
                    items,
                    lambda up, stops=STOPS, f=chat: f(up, stops),
                    chat_text,
                    chat_final,
                    0,
                    5,
                    True,
                )
            )
        for kind, items in (
            ("dicts", messages_items),
            ("sdk", lambda: sdk_messages(messages_items())),
        ):
            out.append(
                Entry(
                    f"anthropic.{a}wrap_messages[{kind}]",
                    is_async,
                    items,
                    lambda up, stops=STOPS, f=msgs: f(up, stops),
                    messages_text,
                    messages_final,
                    MESSAGES_OFFSET,
                    5,
                    True,
                )
            )
        out.append(
            Entry(
                f"sse.{a}wrap_openai",
                is_async,
                lambda: sse_openai(chat_items()),
                lambda up, stops=STOPS, f=sse_o: f(up, stops),
                lambda o: chat_text(sse_events(o)),
                sse_openai_final,
                0,
                5,
                True,
            )
        )
        out.append(
            Entry(
                f"sse.{a}wrap_anthropic",
                is_async,
                lambda: sse_anthropic(messages_items()),
                lambda up, stops=STOPS, f=sse_a: f(up, stops),
                lambda o: messages_text(sse_events(o)),
                lambda o, stop="</stop>": messages_final(sse_events(o), stop),
                MESSAGES_OFFSET,
                5,
                True,
            )
        )
    return out


# --- the Responses API and Gemini ---------------------------------------------------------------


def responses_items() -> list[dict[str, Any]]:
    return response_events(ResponseScript([Item("message", [list(PIECES)])]))


RESPONSES_OFFSET = 4  # created, in_progress, output_item.added, content_part.added


def _dump(e: Any) -> dict[str, Any]:
    # The Responses helper's parsed output items make pydantic warn on dump: not our concern.
    return e if isinstance(e, dict) else e.model_dump(mode="json", by_alias=True, warnings=False)


def responses_text(out: list[Any]) -> str:
    events = [_dump(e) for e in out]
    return "".join(e["delta"] for e in events if e["type"] == "response.output_text.delta")


def responses_final(out: list[Any], stop: str = "</stop>") -> bool:
    events = [_dump(e) for e in out]
    kinds = [e["type"] for e in events]
    closing = [
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.completed",
    ]
    response = events[-1].get("response") or {}
    if kinds[-4:] != closing or response.get("stop_sequence") != stop:
        return False
    # Every closing event carries the text the deltas delivered, and nothing more.
    text = responses_text(out)
    done, part_done, item_done = events[-4:-1]
    item_text = item_done["item"]["content"][-1]["text"]
    output_text = response["output"][-1]["content"][-1]["text"]
    return bool(done["text"] == part_done["part"]["text"] == item_text == output_text == text)


def sdk_responses(items: list[dict[str, Any]]) -> list[Any]:
    adapter: TypeAdapter[Any] = TypeAdapter(ResponseStreamEvent)
    return [adapter.validate_python(e) for e in items]


def sse_responses(items: list[dict[str, Any]]) -> list[bytes]:
    return [f"event: {i['type']}\ndata: {json.dumps(i)}\n\n".encode() for i in items]


def gemini_items() -> list[dict[str, Any]]:
    return [gemini_chunk([{"text": p}]) for p in PIECES] + [
        gemini_chunk([{"text": ""}], finish="STOP")
    ]


def gemini_text(out: list[Any]) -> str:
    text = ""
    for c in out:
        for cand in _dump(c).get("candidates") or []:
            for part in (cand.get("content") or {}).get("parts") or []:
                if not part.get("thought"):
                    text += part.get("text") or ""
    return text


def gemini_final(out: list[Any], stop: str = "</stop>") -> bool:
    cand = _dump(out[-1])["candidates"][0]
    return bool(cand.get("finishReason") == "STOP" and cand.get("finishMessage") == stop)


def sdk_gemini(items: list[dict[str, Any]]) -> list[Any]:
    cls = genai_types.GenerateContentResponse
    return [cls.model_validate_json(json.dumps(i)) for i in items]


def sse_gemini(items: list[dict[str, Any]]) -> list[bytes]:
    return [b"data: " + json.dumps(i).encode() + b"\n\n" for i in items]


def _provider_entries() -> list[Entry]:
    out: list[Entry] = []
    for is_async in (False, True):
        a = "a" if is_async else ""
        resp = ss_openai.awrap_responses if is_async else ss_openai.wrap_responses
        gem = ss_gemini.awrap if is_async else ss_gemini.wrap
        sse_r = ss_sse.awrap_responses if is_async else ss_sse.wrap_responses
        sse_g = ss_sse.awrap_gemini if is_async else ss_sse.wrap_gemini
        for name, items, make, text, final, offset in (
            (
                f"openai.{a}wrap_responses[dicts]",
                responses_items,
                resp,
                responses_text,
                responses_final,
                RESPONSES_OFFSET,
            ),
            (
                f"openai.{a}wrap_responses[sdk]",
                lambda: sdk_responses(responses_items()),
                resp,
                responses_text,
                responses_final,
                RESPONSES_OFFSET,
            ),
            (
                f"sse.{a}wrap_responses",
                lambda: sse_responses(responses_items()),
                sse_r,
                lambda o: responses_text(sse_events(o)),
                lambda o, stop="</stop>": responses_final(sse_events(o), stop),
                RESPONSES_OFFSET,
            ),
            (f"gemini.{a}wrap[dicts]", gemini_items, gem, gemini_text, gemini_final, 0),
            (
                f"gemini.{a}wrap[sdk]",
                lambda: sdk_gemini(gemini_items()),
                gem,
                gemini_text,
                gemini_final,
                0,
            ),
            (
                f"sse.{a}wrap_gemini",
                lambda: sse_gemini(gemini_items()),
                sse_g,
                lambda o: gemini_text(sse_events(o)),
                lambda o, stop="</stop>": gemini_final(sse_events(o), stop),
                0,
            ),
        ):
            out.append(
                Entry(
                    name,
                    is_async,
                    items,
                    lambda up, stops=STOPS, f=make: f(up, stops),
                    text,
                    final,
                    offset,
                    5,
                    True,
                )
            )
    return out


# --- the SDKs' own stream helpers, built over the instrumented upstream -------------------------


def _chat_helper(up: Any, is_async: bool) -> Any:
    cls = AsyncChatCompletionStream if is_async else ChatCompletionStream
    return cls(raw_stream=up, response_format=openai_omit, input_tools=openai_omit)


def _responses_helper(up: Any, is_async: bool) -> Any:
    cls = AsyncResponseStream if is_async else ResponseStream
    return cls(raw_stream=up, text_format=openai_omit, input_tools=openai_omit, starting_after=None)


def _messages_helper(up: Any, is_async: bool) -> Any:
    cls = AsyncMessageStream if is_async else MessageStream
    return cls(up, output_format=anthropic_not_given)


def helper_chunks(out: list[Any]) -> list[Any]:
    """The chunks a Chat helper's events carry."""
    return [e.chunk for e in out if e.type == "chunk"]


def _helper_entries() -> list[Entry]:
    out: list[Entry] = []
    for is_async in (False, True):
        a = "a" if is_async else ""
        chat = ss_openai.awrap_chat if is_async else ss_openai.wrap_chat
        resp = ss_openai.awrap_responses if is_async else ss_openai.wrap_responses
        msgs = ss_anthropic.awrap_messages if is_async else ss_anthropic.wrap_messages
        for name, items, helper, wrap, text, final, offset in (
            (
                f"openai.{a}wrap_chat[helper]",
                lambda: sdk_chat(chat_items()),
                _chat_helper,
                chat,
                lambda o: chat_text(helper_chunks(o)),
                lambda o, stop="</stop>": chat_final(helper_chunks(o), stop),
                0,
            ),
            (
                f"openai.{a}wrap_responses[helper]",
                lambda: sdk_responses(responses_items()),
                _responses_helper,
                resp,
                responses_text,
                responses_final,
                RESPONSES_OFFSET,
            ),
            (
                f"anthropic.{a}wrap_messages[helper]",
                lambda: sdk_messages(messages_items()),
                _messages_helper,
                msgs,
                messages_text,
                messages_final,
                MESSAGES_OFFSET,
            ),
        ):
            out.append(
                Entry(
                    name,
                    is_async,
                    items,
                    lambda up, stops=STOPS, h=helper, w=wrap, x=is_async: w(h(up, x), stops),
                    text,
                    final,
                    offset,
                    5,
                    True,
                )
            )
    return out


ENTRIES = _entries() + _provider_entries() + _helper_entries()
SYNC_ENTRIES = [e for e in ENTRIES if not e.is_async]
ASYNC_ENTRIES = [e for e in ENTRIES if e.is_async]
