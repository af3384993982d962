"""Stop sequences for raw Server-Sent Events bodies of the OpenAI, Anthropic and Gemini APIs.

For a gateway that forwards the upstream's HTTP body: bytes in (split anywhere), bytes out::

    async def body():
        async with stopstream.sse.awrap_openai(upstream.aiter_bytes(), stops) as stream:
            async for piece in stream:
                yield piece

``wrap_openai`` / ``awrap_openai`` apply ``stopstream.openai``'s rules to a Chat Completions
body, ``wrap_responses`` / ``awrap_responses`` the Responses API's rules (see
``stopstream.openai.wrap_responses``), ``wrap_anthropic`` / ``awrap_anthropic``
``stopstream.anthropic``'s rules to a Messages body, and ``wrap_gemini`` / ``awrap_gemini``
``stopstream.gemini``'s rules to a ``streamGenerateContent?alt=sse`` body.

Parsing follows the SSE standard: events end at a blank line and may be split anywhere across
chunks; lines end in ``\\r\\n``, ``\\n`` or ``\\r``; comment lines (``: ...``) and
``id:`` / ``retry:`` / unknown fields are kept; several ``data:`` lines are one value joined
with ``\\n``; a leading byte order mark is ignored; a last block the body did not finish (no
blank line after it) is not dispatched, and not forwarded: a body cut mid-event is a dropped
stream (``complete`` is ``False``), never a finished one.

What comes out:

- An event the adapter passes through unchanged is forwarded byte for byte. So are comment-only
  blocks (keep-alives), ``data: [DONE]``, and events whose data is JSON but not an object.
- What is forwarded was scanned: an event whose data is not UTF-8 or not JSON (trailing bytes,
  raw control characters in a string) is a bad item, a ``ValueError`` that ends the stream and
  closes the upstream (the chunk holding it is not forwarded); an event in which an object
  repeats a key is scanned as ``json.loads`` reads it (the last value) and forwarded
  re-serialized, never with the unscanned copy.
- A text delta whose text alone changes (held back, or released, no stop firing) is spliced:
  only its text string is replaced, re-escaped as JSON (``json.dumps(..., ensure_ascii=False)``
  escapes), and every other byte is kept. This runs natively for single-line ``data:`` events.
- Any other event the adapter changes is re-serialized in place: its ``event:``, ``id:``,
  comment and other lines stay as they were, its ``data:`` lines become one ``data:`` line
  holding compact JSON (UTF-8, non-ASCII kept as is), with the body's own line ending. (For the
  compact JSON the providers send, a splice and a re-serialization give the same bytes.)
- Events the adapter adds (Anthropic's ``content_block_stop`` / ``message_delta`` /
  ``message_stop`` after a stop, the Responses API's closing events, OpenAI's and Gemini's final
  chunks) are written as ``event: TYPE`` + ``data:`` (Anthropic, Responses) or ``data:`` alone
  (Chat Completions, Gemini).
- When every stream has stopped with ``on_stop="close"``, the upstream is closed, the events
  still owed are written (for OpenAI followed by ``data: [DONE]``), and the body ends. With
  ``on_stop="drain"``, the rest of the upstream body is read and dropped, except comment blocks
  (keep-alives) and Anthropic ``ping`` events; the upstream's ``data: [DONE]`` is kept.

The body is parsed natively (``stopstream._core._SSEStage``), which also handles the common
event, a text delta of an open text stream that fires no stop, without decoding it into Python
objects; every other event goes, decoded, to the adapter machine of ``stopstream.openai`` /
``stopstream.anthropic`` / ``stopstream.gemini`` (``SSEDriver``), the one place the rules
live. The common events, per body: a Chat chunk whose choices each carry a ``delta.content``
(no ``finish_reason``, no ``usage``); a Messages ``text_delta``; a Responses
``response.output_text.delta`` without ``logprobs`` whose ``sequence_number`` needs no
renumbering; a Gemini chunk each of whose candidates (no ``finishReason``) holds at least one
text part that is not a ``thought``; its other parts (thoughts, function calls) pass as they
are. ``SSEParser`` and
``SSEDriver`` also run a body entirely in Python: the reference the native path is tested
against.
"""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterable, Iterable
from typing import TYPE_CHECKING, Any

from stopstream._adapter import (
    AsyncAdapterStream,
    Emit,
    Machine,
    OnStop,
    SyncAdapterStream,
)
from stopstream._core import _SSEStage
from stopstream._indexed import IndexedView
from stopstream._models import JSON
from stopstream._responses import ResponsesMachine, ResponsesView
from stopstream._streaming_apis import BY_SHAPE
from stopstream.anthropic import MessagesMachine, MessagesView
from stopstream.gemini import GeminiMachine
from stopstream.openai import ChatMachine

if TYPE_CHECKING:
    from stopstream._streaming_apis import StreamingApi
    from stopstream._types import BytesLike, Stops

__all__ = [
    "AnthropicSSEStream",
    "AsyncAnthropicSSEStream",
    "AsyncGeminiSSEStream",
    "AsyncOpenAISSEStream",
    "AsyncResponsesSSEStream",
    "GeminiSSEStream",
    "OpenAISSEStream",
    "ResponsesSSEStream",
    "awrap_anthropic",
    "awrap_gemini",
    "awrap_openai",
    "awrap_responses",
    "wrap_anthropic",
    "wrap_gemini",
    "wrap_openai",
    "wrap_responses",
]


def __dir__() -> list[str]:
    # The API only: not this module's imports and helpers.
    return sorted(__all__)


_EOL = re.compile(rb"\r\n|\r|\n")
_BOM = b"\xef\xbb\xbf"


class Event:
    """One SSE block as received: its raw lines and where its ``data:`` lines are."""

    __slots__ = ("data_at", "lines", "values")

    def __init__(self, lines: list[bytes], data_at: list[int], values: list[bytes]) -> None:
        self.lines = lines  # each with its line ending; the last one is the blank line
        self.data_at = data_at  # positions of the data lines in ``lines``
        self.values = values  # the data lines' values

    @property
    def raw(self) -> bytes:
        return b"".join(self.lines)

    @property
    def data(self) -> bytes | None:
        """The event's data (``None`` without a ``data`` field): lines joined with ``\\n``."""
        return b"\n".join(self.values) if self.data_at else None

    def with_data(self, data: bytes) -> bytes:
        """The event with its data lines replaced by one ``data:`` line."""
        first = self.data_at[0]
        skip = set(self.data_at[1:])
        out = bytearray()
        for position, line in enumerate(self.lines):
            if position == first:
                out += b"data: " + data + _line_ending(line)
            elif position not in skip:
                out += line
        return bytes(out)


def _line_ending(line: bytes) -> bytes:
    if line.endswith(b"\r\n"):
        return b"\r\n"
    return line[-1:]


class SSEParser:
    """Incremental SSE block parser over bytes split anywhere."""

    __slots__ = ("_buffer", "_data_at", "_lines", "_scan", "_started", "_values", "eol")

    def __init__(self) -> None:
        self._buffer = bytearray()
        self._scan = 0  # where to look for the next line ending
        self._lines: list[bytes] = []
        self._data_at: list[int] = []
        self._values: list[bytes] = []
        self._started = False
        self.eol: bytes = b""  # the body's line ending, once one was seen

    def feed(self, data: BytesLike) -> list[Event]:
        buffer = self._buffer
        buffer += data
        events: list[Event] = []
        start = 0
        for m in _EOL.finditer(buffer, self._scan):
            if m.end() == len(buffer) and buffer[m.start()] == 0x0D and m.end() - m.start() == 1:
                break  # a trailing "\r" may be the first half of "\r\n"
            self._line(bytes(buffer[start : m.end()]), m.end() - m.start(), events)
            start = m.end()
        del buffer[:start]
        self._scan = max(len(buffer) - 1, 0)
        return events

    def finish(self) -> list[Event]:
        """End of the body. A last block that the body did not finish with its blank line is
        discarded, not dispatched (WHATWG: "If the file ends in the middle of an event, before
        the final empty line, the incomplete event is not dispatched"): a body cut mid-event
        must not look finished."""
        events: list[Event] = []
        buffer = bytes(self._buffer)
        self._buffer.clear()
        self._scan = 0
        if buffer.endswith(b"\r"):
            # A "\r" held back as the possible first half of "\r\n" ends its line after all.
            self._line(buffer, 1, events)
        self._lines, self._data_at, self._values = [], [], []
        return events

    @property
    def partial(self) -> bool:
        """Some of an unfinished block has been received."""
        return bool(self._buffer) or bool(self._lines)

    def _line(self, raw: bytes, ending: int, events: list[Event]) -> None:
        content = raw[: len(raw) - ending]
        if not self.eol:
            self.eol = raw[len(raw) - ending :]
        if not self._started:
            self._started = True
            if content.startswith(_BOM):
                content = content[len(_BOM) :]
        if not content:
            self._lines.append(raw)
            events.append(Event(self._lines, self._data_at, self._values))
            self._lines, self._data_at, self._values = [], [], []
            return
        if content[:1] != b":":
            name, colon, value = content.partition(b":")
            if name == b"data":
                if colon and value[:1] == b" ":
                    value = value[1:]
                self._data_at.append(len(self._lines))
                self._values.append(value)
        self._lines.append(raw)


def _parse(data: bytes) -> tuple[object, bool]:
    """An event's data as JSON, and whether some object in it repeats a key.

    Data that is not UTF-8 or not JSON (trailing bytes, raw control characters in a string) is
    a bad item: a ``ValueError``, never forwarded unscanned.
    """
    repeated = False

    def pairs(items: list[tuple[str, Any]]) -> JSON:
        nonlocal repeated
        obj = dict(items)
        if len(obj) != len(items):
            repeated = True
        return obj

    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ValueError(
            f"an SSE event's data is not valid UTF-8 ({exc.reason} at byte {exc.start}): "
            f"{_excerpt(data)}"
        ) from exc
    try:
        return json.loads(text, object_pairs_hook=pairs), repeated
    except ValueError as exc:
        raise ValueError(
            f"an SSE event's data is not valid JSON ({exc}): {_excerpt(data)}"
        ) from exc


def _excerpt(data: bytes) -> str:
    return repr(data[:80]) + (" ..." if len(data) > 80 else "")


def _dumps(value: object) -> bytes:
    text = json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:  # lone surrogates: keep them as JSON escapes
        return json.dumps(value, separators=(",", ":")).encode("ascii")


class SSEDriver:
    """The adapter rules over SSE events, in Python.

    Two uses: as a lifecycle stage by itself (``push`` / ``end`` parse with ``SSEParser``: the
    reference the native path is tested against), and as the slow path of the native stage
    (``stopstream._core._SSEStage``, built with ``_slow``, ``_state`` and ``_end``), which parses
    the body and handles the common event (a text delta that fires no stop) itself, handing
    every other event to ``_slow`` and the end of the body to ``_end``, and reading ``_state``
    after each: whether the machine is open, its open text streams' filters (the very filters
    the machine feeds) and, for the Responses API, the last sequence number emitted. With
    ``_slow`` and ``_end`` comes ``seen``: what the machine would have recorded of the events
    handled natively (Chat: the latest chunk's JSON; Responses: the latest sequence number), or
    ``None``.
    """

    __slots__ = ("_done", "_ended", "_machine", "_named", "_openai", "_parser")

    def __init__(self, machine: Machine) -> None:
        self._machine = machine
        api = BY_SHAPE[machine.shape]
        self._openai, self._named = api.done, api.named
        self._parser = SSEParser()
        self._ended = False  # nothing more is written
        self._done = False  # "data: [DONE]" written

    @property
    def closing(self) -> bool:
        return self._machine.closing

    def push(self, item: Any) -> list[bytes]:
        if isinstance(item, str):
            item = item.encode("utf-8")
        elif not isinstance(item, (bytes, bytearray, memoryview)):
            raise TypeError(f"SSE body chunks must be bytes, not {type(item).__name__}")
        out = bytearray()
        for event in self._parser.feed(item):
            self._event(event, out, self._parser.eol or b"\n")
        return [bytes(out)] if out else []

    def end(self) -> list[bytes]:
        out = bytearray()
        # The blocks the end of the body completes (a final "\r"); an unfinished one is dropped.
        for event in self._parser.finish():
            self._event(event, out, self._parser.eol or b"\n")
        out += self._end(self._parser.eol, None)
        return [bytes(out)] if out else []

    # --- the native stage's slow path ---------------------------------------------------------

    def _slow(self, event: Event, eol: bytes, seen: bytes | int | None) -> bytes:
        """One event the native stage does not handle itself."""
        if seen is not None:
            self._machine.note_seen(seen)
        out = bytearray()
        self._event(event, out, eol or b"\n")
        return bytes(out)

    def _state(self) -> tuple[bool, bool, list[tuple[Any, ...]], int | None]:
        """(the common case may be handled natively, closing, the open text streams as
        ``(id, filter)`` or, with a list of emitted texts (the Responses API), ``(id, filter,
        emitted texts)``, the last sequence number emitted or ``None``)."""
        machine = self._machine
        fast = not self._ended and machine.open
        streams = (
            [t if t.emitted is not None else t[:2] for t in machine.text_filters()] if fast else []
        )
        return fast, machine.closing, streams, machine.sequence

    def _end(self, eol: bytes, seen: bytes | int | None) -> bytes:
        """The end of the body: the events the machine still owes."""
        if seen is not None:
            self._machine.note_seen(seen)
        out = bytearray()
        if not self._ended:
            eol = eol or b"\n"
            self._ended = True
            self._write(self._machine.end(), None, None, out, eol)
            if self._openai and self._machine.stopped and not self._done:
                out += b"data: [DONE]" + eol * 2
        return bytes(out)

    # --- the rules ----------------------------------------------------------------------------

    def _event(self, event: Event, out: bytearray, eol: bytes) -> None:
        machine = self._machine
        if self._ended or machine.closing or machine.finished:
            return
        data = event.data
        if data is None or not data.strip():
            # Comments (keep-alives), id / retry only, stray blank lines, and empty data, which
            # the standard does not dispatch as an event.
            out += event.raw
            return
        if data.strip() == b"[DONE]":  # transport, not an event
            if self._openai:
                self._ended = self._done = True
                self._write(machine.end(), None, None, out, eol)
                out += event.raw
            elif not machine.stopped:
                out += event.raw
            return
        obj, repeated = _parse(data)
        if not isinstance(obj, dict):
            if not machine.stopped:
                out += event.raw  # JSON, not an event object: no text of the stream in it
            return
        self._write(machine.feed(obj), obj, event, out, eol, repeated)

    def _write(
        self,
        emits: list[Emit],
        obj: JSON | None,
        event: Event | None,
        out: bytearray,
        eol: bytes,
        repeated: bool = False,
    ) -> None:
        for value, origin in emits:
            if event is not None and origin is obj:
                # An event with a repeated key goes out as the object that was scanned (the
                # last value of each key, as ``json.loads`` reads it), never as its raw bytes,
                # which hold a copy that was not scanned.
                raw = value is obj and not repeated
                out += event.raw if raw else event.with_data(_dumps(value))
            elif not self._named:
                out += b"data: " + _dumps(value) + eol + eol
            else:
                kind = value.get("type")
                if isinstance(kind, str):
                    out += b"event: " + kind.encode("utf-8") + eol
                out += b"data: " + _dumps(value) + eol + eol


def native_stage(machine: Machine) -> _SSEStage | SSEDriver:
    """The stage the SSE streams run: native parsing, ``SSEDriver`` for all but the common
    event; ``SSEDriver`` alone for an API the core has no rules for (its row's ``native``)."""
    driver = SSEDriver(machine)
    if not BY_SHAPE[machine.shape].native:
        return driver
    return _SSEStage(driver._slow, driver._state, driver._end, machine.shape, Event)


if TYPE_CHECKING:
    # The SSE streams are ``SyncAdapterStream`` / ``AsyncAdapterStream`` over the native
    # stage, reporting their machine's view; these names type them as such.

    class OpenAISSEStream(SyncAdapterStream[bytes], IndexedView):
        """Iterator over a Chat Completions SSE body with stop sequences applied."""

    class AsyncOpenAISSEStream(AsyncAdapterStream[bytes], IndexedView):
        """Async iterator over a Chat Completions SSE body with stop sequences applied."""

    class AnthropicSSEStream(SyncAdapterStream[bytes], MessagesView):
        """Iterator over a Messages SSE body with stop sequences applied."""

    class AsyncAnthropicSSEStream(AsyncAdapterStream[bytes], MessagesView):
        """Async iterator over a Messages SSE body with stop sequences applied."""

    class ResponsesSSEStream(SyncAdapterStream[bytes], ResponsesView):
        """Iterator over a Responses API SSE body with stop sequences applied."""

    class AsyncResponsesSSEStream(AsyncAdapterStream[bytes], ResponsesView):
        """Async iterator over a Responses API SSE body with stop sequences applied."""

    class GeminiSSEStream(SyncAdapterStream[bytes], IndexedView):
        """Iterator over a Gemini ``alt=sse`` body with stop sequences applied."""

    class AsyncGeminiSSEStream(AsyncAdapterStream[bytes], IndexedView):
        """Async iterator over a Gemini ``alt=sse`` body with stop sequences applied."""

else:
    OpenAISSEStream = AnthropicSSEStream = SyncAdapterStream
    ResponsesSSEStream = GeminiSSEStream = SyncAdapterStream
    AsyncOpenAISSEStream = AsyncAnthropicSSEStream = AsyncAdapterStream
    AsyncResponsesSSEStream = AsyncGeminiSSEStream = AsyncAdapterStream


def wrap_openai(
    body: Iterable[BytesLike],
    stops: Stops,
    *,
    include_stop: bool | None = None,
    on_stop: OnStop = "close",
    n: int | None = None,
) -> OpenAISSEStream:
    """Apply ``stops`` to a Chat Completions SSE body (an iterable of bytes); yields bytes.

    The result reports ``stop_sequences`` per choice like ``stopstream.openai.wrap_chat``.
    """
    machine = ChatMachine(stops, include_stop, on_stop, n)
    return OpenAISSEStream(body, native_stage(machine), machine.view())


def awrap_openai(
    body: AsyncIterable[BytesLike],
    stops: Stops,
    *,
    include_stop: bool | None = None,
    on_stop: OnStop = "close",
    n: int | None = None,
) -> AsyncOpenAISSEStream:
    """Async twin of ``wrap_openai`` (``httpx.Response.aiter_bytes()``, say)."""
    machine = ChatMachine(stops, include_stop, on_stop, n)
    return AsyncOpenAISSEStream(body, native_stage(machine), machine.view())


def wrap_anthropic(
    body: Iterable[BytesLike],
    stops: Stops,
    *,
    include_stop: bool | None = None,
    on_stop: OnStop = "close",
) -> AnthropicSSEStream:
    """Apply ``stops`` to a Messages SSE body (an iterable of bytes); yields bytes.

    The result reports ``stop_sequence`` like ``stopstream.anthropic.wrap_messages``.
    """
    machine = MessagesMachine(stops, include_stop, on_stop)
    return AnthropicSSEStream(body, native_stage(machine), machine.view())


def awrap_anthropic(
    body: AsyncIterable[BytesLike],
    stops: Stops,
    *,
    include_stop: bool | None = None,
    on_stop: OnStop = "close",
) -> AsyncAnthropicSSEStream:
    """Async twin of ``wrap_anthropic``."""
    machine = MessagesMachine(stops, include_stop, on_stop)
    return AsyncAnthropicSSEStream(body, native_stage(machine), machine.view())


def wrap_responses(
    body: Iterable[BytesLike],
    stops: Stops,
    *,
    include_stop: bool | None = None,
    on_stop: OnStop = "close",
) -> ResponsesSSEStream:
    """Apply ``stops`` to a Responses API SSE body (an iterable of bytes); yields bytes.

    The result reports ``stop_sequence`` and ``complete`` like
    ``stopstream.openai.wrap_responses``.
    """
    machine = ResponsesMachine(stops, include_stop, on_stop)
    return ResponsesSSEStream(body, native_stage(machine), machine.view())


def awrap_responses(
    body: AsyncIterable[BytesLike],
    stops: Stops,
    *,
    include_stop: bool | None = None,
    on_stop: OnStop = "close",
) -> AsyncResponsesSSEStream:
    """Async twin of ``wrap_responses``."""
    machine = ResponsesMachine(stops, include_stop, on_stop)
    return AsyncResponsesSSEStream(body, native_stage(machine), machine.view())


def wrap_gemini(
    body: Iterable[BytesLike],
    stops: Stops,
    *,
    include_stop: bool | None = None,
    on_stop: OnStop = "close",
    candidate_count: int | None = None,
) -> GeminiSSEStream:
    """Apply ``stops`` to a Gemini ``streamGenerateContent?alt=sse`` body; yields bytes.

    The result reports ``stop_sequences`` per candidate and ``complete`` like
    ``stopstream.gemini.wrap``.
    """
    machine = GeminiMachine(stops, include_stop, on_stop, candidate_count)
    return GeminiSSEStream(body, native_stage(machine), machine.view())


def awrap_gemini(
    body: AsyncIterable[BytesLike],
    stops: Stops,
    *,
    include_stop: bool | None = None,
    on_stop: OnStop = "close",
    candidate_count: int | None = None,
) -> AsyncGeminiSSEStream:
    """Async twin of ``wrap_gemini``."""
    machine = GeminiMachine(stops, include_stop, on_stop, candidate_count)
    return AsyncGeminiSSEStream(body, native_stage(machine), machine.view())


def _wrap(
    api: StreamingApi,
    body: Iterable[BytesLike],
    stops: Stops,
    *,
    include_stop: bool | None = None,
    on_stop: OnStop = "close",
    count: int | None = None,
) -> SyncAdapterStream[bytes]:
    """``wrap_openai`` and its siblings for the API ``api`` names (``count``: ``n`` or
    ``candidate_count``, for the APIs that have it)."""
    machine = api.machine(stops, include_stop, on_stop, count)
    return SyncAdapterStream(body, native_stage(machine), machine.view())


def _awrap(
    api: StreamingApi,
    body: AsyncIterable[BytesLike],
    stops: Stops,
    *,
    include_stop: bool | None = None,
    on_stop: OnStop = "close",
    count: int | None = None,
) -> AsyncAdapterStream[bytes]:
    """Async twin of ``_wrap``."""
    machine = api.machine(stops, include_stop, on_stop, count)
    return AsyncAdapterStream(body, native_stage(machine), machine.view())
