"""Stop sequences for Anthropic Messages streams.

``wrap_messages`` / ``awrap_messages`` wrap a stream of the ``anthropic`` SDK's raw stream
events (what ``client.messages.create(..., stream=True)`` returns) or of plain dicts of the same
shape, and yield the same kind::

    stream = client.messages.create(model=..., messages=..., max_tokens=..., stream=True)
    with stopstream.anthropic.wrap_messages(stream, ["</answer>"]) as events:
        for event in events:
            ...

Rules:

- Only the ``text_delta`` events of text blocks are scanned, with one filter per text block
  (text is never moved from one block to another: what a block holds back is released in a
  ``text_delta`` right before its ``content_block_stop``). Thinking, signatures, tool input
  JSON, citations and server tool blocks pass through untouched, and so do ``ping`` and
  ``error`` events. A ``text_delta`` whose text is held back entirely is not emitted.
- When a stop fires: the truncated ``text_delta`` (if any text is left), ``content_block_stop``,
  ``message_delta`` with ``stop_reason: "stop_sequence"`` and ``stop_sequence`` set, and
  ``message_stop``; nothing later.
- ``on_stop="close"`` (default): the upstream is closed as soon as the stop is seen, and the
  ``message_delta`` carries the latest usage the upstream reported (from ``message_start``:
  exact input tokens, an output count that stops short of the real one). ``on_stop="drain"``:
  the upstream is read to its end silently (``ping`` events still pass, as keep-alives) and the
  ``message_delta`` carries the upstream's own final usage.
- A dropped stream is not a finished one: when the upstream ends (or raises) before
  ``message_stop``, no ending is invented, ``complete`` is ``False`` and the text an open
  block held back stays in ``pending``.

The SDK is not imported until an SDK event has to be synthesized (``anthropic.types``).
"""

from __future__ import annotations

import importlib
from collections.abc import AsyncIterable, Iterable
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar, overload

from stopstream import _sdk_helpers
from stopstream._adapter import (
    CLOSING_PHASE,
    DRAINING_PHASE,
    ENDED_PHASE,
    OPEN_PHASE,
    AsyncAdapterStream,
    Emit,
    ModelDriver,
    OnStop,
    OpenText,
    Phases,
    Shape,
    SingleView,
    SyncAdapterStream,
    View,
    not_readable,
    scan,
)
from stopstream._core import StopFilter, _SDKStage, truncate
from stopstream._models import JSON, rebuild_from_sample, rebuild_model
from stopstream._wrap import stop_set

if TYPE_CHECKING:
    from anthropic.lib.streaming import (
        AsyncMessageStream,
        AsyncMessageStreamManager,
        MessageStream,
        MessageStreamManager,
    )

    from stopstream._sdk_helpers import (
        AsyncHelperStopStream,
        HelperStopStream,
        HelperStopStreamManager,
    )
    from stopstream._types import Stops

__all__ = [
    "AsyncMessagesStopStream",
    "MessagesStopStream",
    "awrap_messages",
    "truncate_message",
    "wrap_messages",
]


def __dir__() -> list[str]:
    # The API only: not this module's imports and helpers.
    return sorted(__all__)


_T = TypeVar("_T")

# The fields of a ``message_delta`` event's usage.
_DELTA_USAGE_FIELDS = (
    "input_tokens",
    "cache_creation_input_tokens",
    "cache_read_input_tokens",
    "output_tokens",
    "output_tokens_details",
    "server_tool_use",
)
_MESSAGE_STOP: JSON = {"type": "message_stop"}


class _Block:
    """One content block of the message: its type and, while its text is scanned, its filter."""

    __slots__ = ("filter", "kind")

    def __init__(self, kind: Any) -> None:
        self.kind = kind  # the content block's type ("text" until a start names another)
        self.filter: StopFilter | None = None


_TAKES = "wrap_messages takes Messages stream events (the SDK's or their dicts)"


class MessagesMachine(Phases):
    """The Messages adapter over decoded events (dicts); see the module docstring."""

    #: What it reads, as its errors say.
    takes: ClassVar[str] = _TAKES

    shape: ClassVar[Shape] = "messages"

    def __init__(
        self, stops: Stops, include_stop: bool | None = None, on_stop: OnStop = "close"
    ) -> None:
        super().__init__(stops, include_stop, on_stop)
        # Block index -> its record, in the order the open text blocks' filters were made.
        self._blocks: dict[Any, _Block] = {}
        self._usage: JSON = {}  # the latest usage reported, merged
        self.stopped = False
        self.stop_reason: str | None = None
        self.stop_sequence: str | None = None
        self.stop_index: int | None = None
        self._terminal = False  # message_stop seen
        self._final: JSON | None = None  # the upstream's message_delta, once seen
        self.stop_sequences: dict[Any, str | None] = {}  # per text block: the stop that ended it

    @property
    def complete(self) -> bool:
        """``message_stop`` was seen, or a stop fired here."""
        return self._terminal or self.stopped

    @property
    def pending(self) -> str:
        """The text held back in the open text blocks (in block order)."""
        return "".join(f.pending for _, f in self._open())

    def text_filters(self) -> list[OpenText]:
        """The open text blocks' indices and filters (those whose deltas are scanned)."""
        return [
            OpenText(i, b.filter)
            for i, b in self._blocks.items()
            if b.filter is not None and type(i) is int and b.kind == "text"
        ]

    def _open(self) -> list[tuple[Any, StopFilter]]:
        """The blocks whose text is scanned and not ended, in the order their filters were
        made."""
        return [(i, b.filter) for i, b in self._blocks.items() if b.filter is not None]

    def view(self) -> View:
        return MessagesView(self)

    def feed(self, event: JSON) -> list[Emit]:
        phase = self._phase
        if phase is ENDED_PHASE or phase is CLOSING_PHASE:
            return []
        kind = event.get("type")
        if not isinstance(kind, str) or kind == "message" or kind.startswith("response."):
            raise not_readable(_TAKES, event)
        if phase is DRAINING_PHASE:
            if kind == "ping":
                return [(event, event)]
            if kind == "message_delta":
                self._track_usage(event.get("usage"))
                self._phase = ENDED_PHASE
                return [(self._final_delta(event), event), (dict(_MESSAGE_STOP), None)]
            return []
        if kind == "content_block_delta":
            return self._delta(event)
        if kind == "content_block_start":
            return self._block_start(event)
        if kind == "content_block_stop":
            index = event.get("index")
            block = self._blocks.get(index)
            f = block.filter if block is not None else None
            emits = self._end_block(index, f) if f is not None else []
            emits.append((event, event))
            return emits
        if kind == "message_start":
            message = event.get("message")
            if isinstance(message, dict):
                self._track_usage(message.get("usage"))
            return [(event, event)]
        if kind == "message_delta":
            self._track_usage(event.get("usage"))
            self._final = event
            emits = self._flush()  # a text block left open: its text ends here
            if self.stopped:
                return emits  # its stop's final events are ``end()``'s, from this event
            delta = event.get("delta")
            if isinstance(delta, dict):
                reason, sequence = delta.get("stop_reason"), delta.get("stop_sequence")
                if isinstance(reason, str):
                    self.stop_reason = reason
                if isinstance(sequence, str):  # a stop applied upstream
                    self.stop_sequence = sequence
                    if sequence in self._stops:
                        self.stop_index = self._stops.index(sequence)
            emits.append((event, event))
            return emits
        if kind == "message_stop":
            self._terminal = True
        return [(event, event)]  # message_stop, ping, error, and anything new

    def _filter(self, index: Any) -> StopFilter:
        blocks = self._blocks
        block = blocks.get(index)
        if block is None:
            block = blocks[index] = _Block("text")
        elif block.filter is not None:
            return block.filter
        else:
            blocks[index] = blocks.pop(index)  # the open blocks go in the order of their filters
        f = block.filter = StopFilter(self._set)
        self.stop_sequences.setdefault(index, None)
        return f

    def _block_start(self, event: JSON) -> list[Emit]:
        index, block = event.get("index"), event.get("content_block")
        kind = block.get("type") if isinstance(block, dict) else None
        record = self._blocks.get(index)
        if record is None:
            self._blocks[index] = _Block(kind)
        else:
            record.kind = kind
        if kind != "text" or not isinstance(block, dict):
            return [(event, event)]
        f = self._filter(index)
        text = block.get("text")
        if not isinstance(text, str) or not text:
            return [(event, event)]
        out = f.feed(text)
        emitted = event if out == text else {**event, "content_block": {**block, "text": out}}
        if f.stopped:
            return [(emitted, event), *self._stop(index, f)]
        return [(emitted, event)]

    def _delta(self, event: JSON) -> list[Emit]:
        index, delta = event.get("index"), event.get("delta")
        if (
            not isinstance(delta, dict)
            or delta.get("type") != "text_delta"
            or (index in self._blocks and self._blocks[index].kind != "text")
        ):
            return [(event, event)]
        text = delta.get("text")
        if not isinstance(text, str):
            return [(event, event)]
        f = self._filter(index)
        out = f.feed(text)
        emits: list[Emit] = []
        if out:
            emitted = event if out == text else {**event, "delta": {**delta, "text": out}}
            emits.append((emitted, event))
        if f.stopped:
            emits.extend(self._stop(index, f))
        return emits

    def _stop(self, index: Any, f: StopFilter) -> list[Emit]:
        """A stop fired in block ``index``: the events that close the block (the message's
        ``message_delta`` and ``message_stop`` are ``end()``'s)."""
        self._blocks[index].filter = None
        self._stopped(index, f)
        return [({"type": "content_block_stop", "index": index}, None)]

    def _stopped(self, index: Any, f: StopFilter) -> None:
        self.stop_sequences[index] = f.stop_sequence
        self.stopped = True
        self.stop_reason = "stop_sequence"
        self.stop_sequence = f.stop_sequence
        self.stop_index = f.stop_index
        self._phase = CLOSING_PHASE if self._on_stop == "close" else DRAINING_PHASE

    def _end_block(self, index: Any, f: StopFilter) -> list[Emit]:
        """Block ``index``'s text ends: what its filter still holds, as a ``text_delta``. A stop
        that the end decides is a stop like any other."""
        self._blocks[index].filter = None
        tail = scan(f, None, True)
        emits: list[Emit] = [(self._text_delta(index, tail), None)] if tail else []
        if f.stopped:
            self._stopped(index, f)
        return emits

    @staticmethod
    def _text_delta(index: Any, text: str) -> JSON:
        return {
            "type": "content_block_delta",
            "index": index,
            "delta": {"type": "text_delta", "text": text},
        }

    def _flush(self) -> list[Emit]:
        """The message ends with blocks still open: each one's text ends, in block order, up
        to the first that a stop ends (which then also gets its ``content_block_stop``)."""
        emits: list[Emit] = []
        for index, f in self._open():
            emits.extend(self._end_block(index, f))
            if self.stopped:
                emits.append(({"type": "content_block_stop", "index": index}, None))
                break
        return emits

    def _track_usage(self, usage: object) -> None:
        if isinstance(usage, dict):
            self._usage.update((k, v) for k, v in usage.items() if v is not None)

    def _final_delta(self, upstream: JSON | None) -> JSON:
        if upstream is not None:  # the upstream's own message_delta: keep its usage and fields
            delta = upstream.get("delta")
            delta = dict(delta) if isinstance(delta, dict) else {}
            if delta.get("stop_details") is not None:
                delta["stop_details"] = None
            delta["stop_reason"] = "stop_sequence"
            delta["stop_sequence"] = self.stop_sequence
            return {**upstream, "delta": delta}
        usage = {k: self._usage[k] for k in _DELTA_USAGE_FIELDS if k in self._usage}
        usage.setdefault("output_tokens", 0)
        return {
            "type": "message_delta",
            "delta": {"stop_reason": "stop_sequence", "stop_sequence": self.stop_sequence},
            "usage": usage,
        }

    def end(self) -> list[Emit]:
        phase = self._phase
        self._phase = ENDED_PHASE
        if phase is CLOSING_PHASE or phase is DRAINING_PHASE:
            # ``_final``: the upstream's own ``message_delta``, when the stop was decided
            # there (its usage is final).
            return [(self._final_delta(self._final), None), (dict(_MESSAGE_STOP), None)]
        # The upstream ended by itself. Without its ``message_stop`` it was dropped, not
        # finished: invent no ending, and keep what the open blocks hold back (``pending``).
        return []


_EVENT_CLASSES = {
    "message_start": "RawMessageStartEvent",
    "message_delta": "RawMessageDeltaEvent",
    "message_stop": "RawMessageStopEvent",
    "content_block_start": "RawContentBlockStartEvent",
    "content_block_delta": "RawContentBlockDeltaEvent",
    "content_block_stop": "RawContentBlockStopEvent",
}


def _rebuild(value: JSON, sample: object, view: JSON | None) -> object:
    kind = value.get("type")
    cls: type[Any] | None = None
    if view is not None and kind == getattr(sample, "type", None):
        return rebuild_from_sample(value, sample, view)
    if kind == getattr(sample, "type", None):
        cls = type(sample)
    elif isinstance(kind, str) and kind in _EVENT_CLASSES:
        try:
            cls = getattr(importlib.import_module("anthropic.types"), _EVENT_CLASSES[kind])
        except (ImportError, AttributeError):
            cls = None
    if cls is None:
        return value  # no SDK class for it: a dict of the event's wire shape
    return rebuild_model(cls, value)


class _MessagesDriver(ModelDriver):
    """``ModelDriver`` keeping the table the native stage reads: the open text blocks' filters
    while the message is open, by block index, refreshed after every call into the machine."""

    __slots__ = ("_messages", "open_text")

    def __init__(self, machine: MessagesMachine) -> None:
        super().__init__(machine, _rebuild)
        self._messages = machine
        self.open_text: dict[Any, StopFilter] = {}

    def push(self, item: Any) -> list[Any]:
        try:
            return super().push(item)
        finally:
            self._refresh()

    def end(self) -> list[Any]:
        try:
            return super().end()
        finally:
            self._refresh()

    def _refresh(self) -> None:
        table = self.open_text
        table.clear()
        if self._messages._phase is OPEN_PHASE:
            table.update(t[:2] for t in self._messages.text_filters())


def _messages_stage(machine: MessagesMachine) -> _SDKStage:
    """The stage of a Messages stream: the machine's driver behind the native stage, which
    handles the common SDK event itself (a ``text_delta`` of an open text block that fires no
    stop) and hands every other event to the driver."""
    driver = _MessagesDriver(machine)
    return _SDKStage(driver, driver.open_text, _with_text, "messages")


def _with_text(event: Any, text: str) -> Any:
    """The SDK ``content_block_delta`` event with its delta's text replaced: the event's own
    ``model_copy``, as ``update_model`` makes it."""
    delta = event.delta.model_copy(update={"text": text})
    return event.model_copy(update={"delta": delta})


class MessagesView(SingleView):
    """What a Messages stream reports, read from its machine."""

    _machine: MessagesMachine

    @property
    def stop_reason(self) -> str | None:
        """The message's ``stop_reason`` as sent to the client (``None`` until known)."""
        return self._machine.stop_reason

    @property
    def stop_sequences(self) -> dict[Any, str | None]:
        """Per text block ``index`` seen: the stop that ended it here, or ``None`` (the stop
        an upstream applied is the message's, in ``stop_sequence``)."""
        return dict(self._machine.stop_sequences)

    @property
    def pending(self) -> str:
        """Text held back in the open text blocks, kept (not released) by a dropped stream."""
        return self._machine.pending


if TYPE_CHECKING:
    # ``SyncAdapterStream`` / ``AsyncAdapterStream`` reporting a ``MessagesView``.

    class MessagesStopStream(SyncAdapterStream[_T], MessagesView):
        """Iterator over Messages stream events with stop sequences applied."""

    class AsyncMessagesStopStream(AsyncAdapterStream[_T], MessagesView):
        """Async iterator over Messages stream events with stop sequences applied."""

else:
    MessagesStopStream = SyncAdapterStream
    AsyncMessagesStopStream = AsyncAdapterStream


@overload
def wrap_messages(
    stream: MessageStreamManager[Any],
    stops: Stops,
    *,
    include_stop: bool | None = None,
    on_stop: OnStop = "close",
) -> HelperStopStreamManager: ...


@overload
def wrap_messages(  # type: ignore[overload-overlap]
    stream: MessageStream[Any],
    stops: Stops,
    *,
    include_stop: bool | None = None,
    on_stop: OnStop = "close",
) -> HelperStopStream: ...


@overload
def wrap_messages(
    stream: Iterable[_T],
    stops: Stops,
    *,
    include_stop: bool | None = None,
    on_stop: OnStop = "close",
) -> MessagesStopStream[_T]: ...


def wrap_messages(
    stream: Any,
    stops: Stops,
    *,
    include_stop: bool | None = None,
    on_stop: OnStop = "close",
) -> Any:
    """Apply ``stops`` to a stream of Messages raw stream events (SDK objects or dicts).

    Yields the same kind; see the module docstring for the rules. ``on_stop``: ``"close"``
    (close the upstream as soon as the stop fires) or ``"drain"`` (read it to the end silently,
    to report the real final usage).

    ``stream`` may also be the SDK's own helper, ``client.messages.stream(...)`` (the manager,
    or the stream it gives): the result is then that helper, cut (its events with their
    snapshots, ``text_stream``, ``get_final_message()`` naming the stop, ``get_final_text()``),
    with the attributes above.
    """
    found = _sdk_helpers.kind(stream)
    if found is not None:
        return _sdk_helpers.wrap_helper(
            stream,
            found,
            lambda raw: wrap_messages(raw, stops, include_stop=include_stop, on_stop=on_stop),
            lambda raw: awrap_messages(raw, stops, include_stop=include_stop, on_stop=on_stop),
        )
    machine = MessagesMachine(stops, include_stop, on_stop)
    return MessagesStopStream(stream, _messages_stage(machine), machine.view())


@overload
def awrap_messages(
    stream: AsyncMessageStreamManager[Any],
    stops: Stops,
    *,
    include_stop: bool | None = None,
    on_stop: OnStop = "close",
) -> HelperStopStreamManager: ...


@overload
def awrap_messages(  # type: ignore[overload-overlap]
    stream: AsyncMessageStream[Any],
    stops: Stops,
    *,
    include_stop: bool | None = None,
    on_stop: OnStop = "close",
) -> AsyncHelperStopStream: ...


@overload
def awrap_messages(
    stream: AsyncIterable[_T],
    stops: Stops,
    *,
    include_stop: bool | None = None,
    on_stop: OnStop = "close",
) -> AsyncMessagesStopStream[_T]: ...


def awrap_messages(
    stream: Any,
    stops: Stops,
    *,
    include_stop: bool | None = None,
    on_stop: OnStop = "close",
) -> Any:
    """Async twin of ``wrap_messages`` (an ``AsyncStream`` from ``AsyncAnthropic``, say, or the
    async helper of ``client.messages.stream(...)``)."""
    found = _sdk_helpers.kind(stream)
    if found is not None:
        return wrap_messages(stream, stops, include_stop=include_stop, on_stop=on_stop)
    machine = MessagesMachine(stops, include_stop, on_stop)
    return AsyncMessagesStopStream(stream, _messages_stage(machine), machine.view())


def truncate_message(message: Any, stops: Stops, include_stop: bool | None = None) -> Any:
    """Apply ``stops`` to a non-streaming Messages API message (a ``dict`` of the wire shape),
    in place, and return it.

    Each text block is cut on its own, as the stream adapter scans each block: the first one
    with a stop is cut there and ends the message (later blocks are dropped; ``stop_reason``
    becomes ``"stop_sequence"`` and ``stop_sequence`` names the stop).
    """
    content = message.get("content") if isinstance(message, dict) else None
    if not isinstance(content, list) or message.get("type", "message") != "message":
        takes = "truncate_message takes a whole message (a dict of the wire shape)"
        if isinstance(message, dict):
            raise not_readable(takes, message)
        raise TypeError(f"{takes}, not {type(message).__name__}")
    compiled = stop_set(stops, include_stop)
    for position, block in enumerate(content):
        if not (isinstance(block, dict) and block.get("type") == "text"):
            continue
        text, stop = truncate(block.get("text") or "", compiled)
        if stop is not None:
            block["text"] = text
            del content[position + 1 :]
            message["stop_reason"] = "stop_sequence"
            message["stop_sequence"] = stop
            break
    return message
