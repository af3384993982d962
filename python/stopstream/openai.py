"""Stop sequences for OpenAI Chat Completions and Responses streams.

``wrap_chat`` / ``awrap_chat`` wrap a stream of ``ChatCompletionChunk`` objects from the
``openai`` SDK (or of plain dicts of the same shape) and yield the same kind, with the stop
sequences applied to each choice's ``delta.content``::

    stream = client.chat.completions.create(model=..., messages=..., stream=True)
    with stopstream.openai.wrap_chat(stream, ["</answer>", "\\n\\nUser:"]) as chunks:
        for chunk in chunks:
            ...

Rules:

- One filter per choice ``index`` (``n > 1``). Only ``delta.content`` is scanned; ``tool_calls``,
  ``refusal``, reasoning fields, ``logprobs`` and everything else pass through untouched.
- The chunk in which a stop fires carries the content before the stop (through it with
  ``include_stop=True``), ``finish_reason: "stop"`` and, as vLLM does, ``stop_reason`` on the
  choice holding the stop sequence. Later deltas of that choice are dropped; a chunk left with
  no choices is dropped unless it carries ``usage``.
- Text held back because it may start a stop is released in the choice's next chunk, at the
  latest in the chunk carrying the upstream's ``finish_reason``. A chunk whose content was held
  back entirely is still emitted, with ``content: ""``.
- A dropped stream is not a finished one: when the upstream ends (or raises) before a choice
  has its ``finish_reason``, no ending is invented, ``complete`` is ``False`` and the choice's
  held text stays in ``pending``.
- When every choice has stopped or finished (and at least one stop fired): with
  ``on_stop="close"`` the upstream is closed at once (``close()`` on the SDK stream, which
  releases the connection and cancels generation) and the stream ends, with a final usage chunk
  (``choices: []``) only if the upstream already sent a ``usage``: the latest one. With
  ``on_stop="drain"`` the upstream is read to its end silently and its last ``usage`` is
  delivered in a final chunk, so token accounting stays exact.
- ``n``: how many choices were requested. Without it, "every choice" means every choice seen so
  far, which is right as soon as each choice has sent its first chunk (OpenAI and vLLM send a
  role chunk per choice first).

``wrap_responses`` / ``awrap_responses`` do the same for the Responses API's stream events
(``client.responses.create(..., stream=True)``), which has no ``stop`` parameter at all; the
rules are in ``stopstream._responses``.

The SDK is not imported: SDK chunks are read with ``model_dump``, and a changed chunk is the
upstream chunk's own ``model_copy`` with only the changed fields replaced (so class, private
state and helpers survive, LiteLLM's ``ModelResponseStream`` included); ``choice.stop_reason``
is an extra field of the model.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterable, Iterable
from typing import TYPE_CHECKING, Any, TypeVar

from stopstream._adapter import (
    JSON,
    AsyncAdapterStream,
    Emit,
    IndexedResult,
    ModelDriver,
    OnStop,
    Phases,
    SyncAdapterStream,
    as_json,
    scan,
)
from stopstream._core import StopFilter, _feed_unless_stop
from stopstream._responses import AsyncResponsesStopStream, ResponsesMachine, ResponsesStopStream

if TYPE_CHECKING:
    from stopstream._types import Stops

__all__ = [
    "AsyncChatStopStream",
    "AsyncResponsesStopStream",
    "ChatStopStream",
    "ResponsesStopStream",
    "awrap_chat",
    "awrap_responses",
    "wrap_chat",
    "wrap_responses",
]


def __dir__() -> list[str]:
    # The API only: not this module's imports and helpers.
    return sorted(__all__)


_T = TypeVar("_T")

_OPEN, _STOPPED, _FINISHED = 0, 1, 2
# Top-level fields copied from the latest upstream chunk into a synthesized one.
_CHUNK_FIELDS = ("id", "object", "created", "model", "system_fingerprint", "service_tier")


class ChatMachine(Phases):
    """The Chat Completions adapter over decoded chunks (dicts); see the module docstring."""

    def __init__(
        self,
        stops: Stops,
        include_stop: bool | None = None,
        on_stop: OnStop = "close",
        n: int | None = None,
    ) -> None:
        super().__init__(stops, include_stop, on_stop)
        if n is not None and (isinstance(n, bool) or not isinstance(n, int) or n < 1):
            raise ValueError(f"n must be a positive int or None, not {n!r}")
        self._n = n
        self._filters: dict[int, StopFilter] = {}
        # The open choices' filters: what the fast paths (``_ChatDriver``, the native SSE
        # stage) feed, so that a choice has one filter whoever feeds it.
        self._open: dict[int, StopFilter] = {}
        self._status: dict[int, int] = {}
        self.stop_sequences: dict[int, str | None] = {}
        self.stop_indices: dict[int, int | None] = {}
        self.finish_reasons: dict[int, str | None] = {}
        self._usage: Any = None  # the latest non-null usage seen
        # The latest chunk with choices: a dict, or (from a fast path, decoded when needed) an
        # SDK object or the chunk's JSON bytes.
        self._template: object = None
        self._drained: JSON | None = None  # the latest usage chunk read while draining
        self.stopped = False  # every choice stopped or finished, and a stop fired

    @property
    def complete(self) -> bool:
        """Every choice has its ``finish_reason`` (``n`` of them when ``n`` is given), or the
        stream stopped here. ``[DONE]`` is transport and completes nothing."""
        if self.stopped:
            return True
        status = self._status.values()
        if not status or _OPEN in status:
            return False
        return self._n is None or len(self._status) >= self._n

    @property
    def pending(self) -> dict[int, str]:
        """Per open choice: the text held back."""
        return {i: self._filters[i].pending for i, s in self._status.items() if s == _OPEN}

    def text_filters(self) -> list[tuple[Any, StopFilter]]:
        """The open choices' indices and filters."""
        return [(i, f) for i, f in self._open.items() if type(i) is int]

    def note_template(self, template: object) -> None:
        """A chunk with choices that a fast path handled (SDK object or JSON bytes)."""
        self._template = template

    def feed(self, chunk: JSON) -> list[Emit]:
        phase = self._phase
        if phase == "ended" or phase == "closing":
            return []
        usage = chunk.get("usage")
        if usage is not None:
            self._usage = usage
        if phase == "draining":
            if usage is not None:
                self._drained = chunk
            return []
        choices = chunk.get("choices")
        if not isinstance(choices, list):
            return [(chunk, chunk)]  # not a chunk (an error object, say): pass it on
        self._template = chunk
        kept: list[Any] = []
        changed = False
        for position, choice in enumerate(choices):
            out = self._choice(choice, position) if isinstance(choice, dict) else choice
            if out is not choice:
                changed = True
            if out is not None:
                kept.append(out)
        emitted: JSON | None = chunk
        if changed:
            # A chunk whose choices were all dropped goes too, unless it carries usage.
            dropped = bool(choices) and not kept and usage is None
            emitted = None if dropped else {**chunk, "choices": kept}
        if self._every_choice_done():
            self.stopped = True
            self._phase = "closing" if self._on_stop == "close" else "draining"
        return [] if emitted is None else [(emitted, chunk)]

    def _choice(self, choice: JSON, position: int) -> JSON | None:
        index = choice.get("index")
        if not isinstance(index, int):
            index = position
        status = self._status.get(index)
        if status is None:
            status = self._status[index] = _OPEN
            self._filters[index] = self._open[index] = StopFilter(self._set)
            self.stop_sequences[index] = None
            self.stop_indices[index] = None
            self.finish_reasons[index] = None
        if status == _STOPPED:
            return None
        if status == _FINISHED:
            return choice
        f = self._filters[index]
        delta = choice.get("delta")
        content = delta.get("content") if isinstance(delta, dict) else None
        finish = choice.get("finish_reason")
        # The choice's text ends with its ``finish_reason``: a stop decided there is reported
        # below like any other (``finish_reason: "stop"``, ``stop_reason``).
        out = scan(f, content, finish is not None)
        if f.stopped:
            self._status[index] = _STOPPED
            self._open.pop(index, None)
            self.stop_sequences[index] = f.stop_sequence
            self.stop_indices[index] = f.stop_index
            self.finish_reasons[index] = "stop"
            stopped: JSON = {**choice, "finish_reason": "stop", "stop_reason": f.stop_sequence}
            if out is not None:
                stopped["delta"] = {**(delta if isinstance(delta, dict) else {}), "content": out}
            return stopped
        if finish is not None:
            self._status[index] = _FINISHED
            self._open.pop(index, None)
            self.finish_reasons[index] = finish if isinstance(finish, str) else str(finish)
            upstream_stop = choice.get("stop_reason")
            if isinstance(upstream_stop, str):  # a stop applied upstream (vLLM reports it)
                self.stop_sequences[index] = upstream_stop
                if upstream_stop in self._stops:
                    self.stop_indices[index] = self._stops.index(upstream_stop)
        if out is None or out == content:
            return choice
        return {**choice, "delta": {**(delta if isinstance(delta, dict) else {}), "content": out}}

    def _every_choice_done(self) -> bool:
        status = self._status.values()
        if _STOPPED not in status or _OPEN in status:
            return False
        return self._n is None or len(self._status) >= self._n

    def _synthesized(self, choices: list[JSON], usage: Any) -> JSON:
        template = self._template
        if isinstance(template, bytes):
            template = json.loads(template)
        elif template is not None and not isinstance(template, dict):
            template = as_json(template)
        template = template or {}
        chunk: JSON = {key: template[key] for key in _CHUNK_FIELDS if key in template}
        chunk["choices"] = choices
        if usage is not None or "usage" in template:
            chunk["usage"] = usage
        return chunk

    def end(self) -> list[Emit]:
        phase = self._phase
        if phase == "ended":
            return []
        self._phase = "ended"
        if phase == "open":
            # The upstream ended by itself: its chunks released everything a finished choice
            # held. A choice without its ``finish_reason`` was dropped, not finished: invent
            # no ending, and keep its held text (``pending``).
            return []
        if phase == "draining" and self._drained is not None:
            drained = self._drained
            if drained.get("choices"):
                drained = {**drained, "choices": []}
            return [(drained, None)]
        if self._usage is not None:
            return [(self._synthesized([], self._usage), None)]
        return []


class _ChatDriver(ModelDriver):
    """``ModelDriver`` with a fast path for the common SDK chunk: one choice, open, whose
    ``delta.content`` fires no stop, no ``finish_reason``, no ``usage``. A few attribute reads
    and one native call; a changed chunk is the chunk's own ``model_copy`` with only the content
    replaced (what ``update_model`` makes of it). Anything else goes to the machine."""

    __slots__ = ("_chat", "_known", "_open")

    def __init__(self, machine: ChatMachine) -> None:
        super().__init__(machine)
        self._chat = machine
        self._open = machine._open
        self._known: dict[type[Any], bool] = {}

    def push(self, item: Any) -> list[Any]:
        cls = type(item)
        plain = self._known.get(cls)
        if plain is None:
            plain = self.plain(cls, self._known)
        if plain and self._chat._phase == "open":
            try:
                choices = item.choices
                f = content = None
                delta: Any = None
                if type(choices) is list and len(choices) == 1 and item.usage is None:
                    choice = choices[0]
                    if choice.finish_reason is None:
                        index = choice.index
                        delta = choice.delta
                        content = delta.content
                        if type(index) is int and type(content) is str:
                            f = self._open.get(index)
            except AttributeError:
                f = None
            if f is not None:
                out = _feed_unless_stop(f, content)  # type: ignore[arg-type]
                if out is not None:
                    self._last = item
                    self._chat._template = item
                    if out == content:
                        return [item]
                    delta = delta.model_copy(update={"content": out})
                    choice = choice.model_copy(update={"delta": delta})
                    return [item.model_copy(update={"choices": [choice]})]
        return super().push(item)


class _ChatResult(IndexedResult):
    """What the chat stream classes report, per choice ``index``, read from their machine."""

    __slots__ = ()


class ChatStopStream(SyncAdapterStream[_T], _ChatResult):
    """Iterator over chat completion chunks with stop sequences applied (see ``wrap_chat``)."""

    __slots__ = ("_machine",)

    def __init__(self, stream: Iterable[_T], machine: ChatMachine) -> None:
        self._machine = machine
        super().__init__(stream, _ChatDriver(machine))


class AsyncChatStopStream(AsyncAdapterStream[_T], _ChatResult):
    """Async iterator over chat completion chunks with stop sequences applied."""

    __slots__ = ("_machine",)

    def __init__(self, stream: AsyncIterable[_T], machine: ChatMachine) -> None:
        self._machine = machine
        super().__init__(stream, _ChatDriver(machine))


def wrap_chat(
    stream: Iterable[_T],
    stops: Stops,
    *,
    include_stop: bool | None = None,
    on_stop: OnStop = "close",
    n: int | None = None,
) -> ChatStopStream[_T]:
    """Apply ``stops`` to a stream of ``ChatCompletionChunk`` objects or dicts.

    Yields the same kind. See the module docstring for the rules; ``stop_sequences`` on the
    result tells which stop ended each choice. ``on_stop``: ``"close"`` (close the upstream as
    soon as every choice has stopped) or ``"drain"`` (read it to the end silently, to deliver
    the final usage chunk). ``n``: the number of choices requested, if more than one.
    """
    return ChatStopStream(stream, ChatMachine(stops, include_stop, on_stop, n))


def awrap_chat(
    stream: AsyncIterable[_T],
    stops: Stops,
    *,
    include_stop: bool | None = None,
    on_stop: OnStop = "close",
    n: int | None = None,
) -> AsyncChatStopStream[_T]:
    """Async twin of ``wrap_chat`` (an ``AsyncStream`` from ``AsyncOpenAI``, say)."""
    return AsyncChatStopStream(stream, ChatMachine(stops, include_stop, on_stop, n))


def wrap_responses(
    stream: Iterable[_T],
    stops: Stops,
    *,
    include_stop: bool | None = None,
    on_stop: OnStop = "close",
) -> ResponsesStopStream[_T]:
    """Apply ``stops`` to a stream of Responses API events (SDK objects or dicts).

    Yields the same kind. One filter per output text part; on a stop, the truncated delta and
    the closing events (``response.output_text.done``, ``response.content_part.done``,
    ``response.output_item.done``, ``response.completed`` naming the stop as
    ``response.stop_sequence``). ``complete`` tells whether the response ended (a terminal event
    or a stop) rather than being dropped. ``on_stop``: ``"close"`` (close the upstream as soon
    as the stop fires) or ``"drain"`` (read it to the end silently, for the real usage).
    """
    return ResponsesStopStream(stream, ResponsesMachine(stops, include_stop, on_stop))


def awrap_responses(
    stream: AsyncIterable[_T],
    stops: Stops,
    *,
    include_stop: bool | None = None,
    on_stop: OnStop = "close",
) -> AsyncResponsesStopStream[_T]:
    """Async twin of ``wrap_responses`` (an ``AsyncStream`` from ``AsyncOpenAI``, say)."""
    return AsyncResponsesStopStream(stream, ResponsesMachine(stops, include_stop, on_stop))
