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
    Shape,
    SyncAdapterStream,
    not_readable,
    scan,
)
from stopstream._core import _SDKStage, truncate
from stopstream._indexed import IndexedMachine, IndexedView, TextStream
from stopstream._models import JSON, as_json
from stopstream._responses import (
    AsyncResponsesStopStream,
    ResponsesMachine,
    ResponsesStopStream,
    truncate_response,
)
from stopstream._responses import rebuild as rebuild_responses
from stopstream._wrap import stop_set

if TYPE_CHECKING:
    from openai.lib.streaming.chat import (
        AsyncChatCompletionStream,
        AsyncChatCompletionStreamManager,
        ChatCompletionStream,
        ChatCompletionStreamManager,
    )
    from openai.lib.streaming.responses import (
        AsyncResponseStream,
        AsyncResponseStreamManager,
        ResponseStream,
        ResponseStreamManager,
    )

    from stopstream._sdk_helpers import (
        AsyncHelperStopStream,
        HelperStopStream,
        HelperStopStreamManager,
    )
    from stopstream._types import Stops

__all__ = [
    "AsyncChatStopStream",
    "AsyncResponsesStopStream",
    "ChatStopStream",
    "ResponsesStopStream",
    "awrap_chat",
    "awrap_responses",
    "truncate_chat",
    "truncate_response",
    "wrap_chat",
    "wrap_responses",
]


def __dir__() -> list[str]:
    # The API only: not this module's imports and helpers.
    return sorted(__all__)


_T = TypeVar("_T")

_CHAT_TAKES = "wrap_chat takes Chat Completions chunks (ChatCompletionChunk or its dict)"

# Top-level fields copied from the latest upstream chunk into a synthesized one.
_CHUNK_FIELDS = ("id", "object", "created", "model", "system_fingerprint", "service_tier")


class ChatMachine(IndexedMachine):
    """The Chat Completions adapter over decoded chunks (dicts); see the module docstring."""

    #: What it reads, as its errors say.
    takes: ClassVar[str] = _CHAT_TAKES

    shape: ClassVar[Shape] = "chat"
    items = "choices"
    stop_finish = "stop"

    def __init__(
        self,
        stops: Stops,
        include_stop: bool | None = None,
        on_stop: OnStop = "close",
        n: int | None = None,
    ) -> None:
        super().__init__(stops, include_stop, on_stop, n, "n")
        self._usage: Any = None  # the latest non-null usage seen
        # The latest chunk with choices: a dict, or (from a fast path, decoded when needed) an
        # SDK object or the chunk's JSON bytes.
        self._template: object = None
        self._drained: JSON | None = None  # the latest usage chunk read while draining

    def note_seen(self, seen: object) -> None:
        """A chunk with choices that a fast path handled (SDK object or JSON bytes)."""
        self._template = seen

    def feed(self, chunk: JSON) -> list[Emit]:
        phase = self._phase
        if phase is ENDED_PHASE or phase is CLOSING_PHASE:
            return []
        usage = chunk.get("usage")
        if usage is not None:
            self._usage = usage
        if phase is DRAINING_PHASE:
            if usage is not None:
                self._drained = chunk
            return []
        choices = chunk.get("choices")
        if not isinstance(choices, list):
            if "error" in chunk and "type" not in chunk and choices is None:
                return [(chunk, chunk)]  # an error object in the stream: no text, passed on
            raise not_readable(_CHAT_TAKES, chunk)
        self._template = chunk
        return self._feed_items(chunk, choices, usage is not None)

    def _scan(self, choice: JSON, index: int, stream: TextStream, chunk: JSON) -> JSON | None:
        f = stream.filter
        delta = choice.get("delta")
        if isinstance(delta, dict):
            content = delta.get("content")
        else:
            content = None
            if "message" in choice:  # a whole response's choice (checked here, off the hot path)
                raise not_readable(_CHAT_TAKES, chunk)
        finish = choice.get("finish_reason")
        # The choice's text ends with its ``finish_reason``: a stop decided there is reported
        # below like any other (``finish_reason: "stop"``, ``stop_reason``).
        out = scan(f, content, finish is not None)
        if f.stopped:
            self._stopped(index, stream)
            stopped: JSON = {**choice, "finish_reason": "stop", "stop_reason": f.stop_sequence}
            if out is not None:
                stopped["delta"] = {**(delta if isinstance(delta, dict) else {}), "content": out}
            return stopped
        if finish is not None:
            self._finished(index, stream, finish)
            upstream_stop = choice.get("stop_reason")
            if isinstance(upstream_stop, str):  # a stop applied upstream (vLLM reports it)
                stream.stop_sequence = upstream_stop
                if upstream_stop in self._stops:
                    stream.stop_index = self._stops.index(upstream_stop)
        if out is None or out == content:
            return choice
        return {**choice, "delta": {**(delta if isinstance(delta, dict) else {}), "content": out}}

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
        if phase is ENDED_PHASE:
            return []
        self._phase = ENDED_PHASE
        if phase is OPEN_PHASE:
            # The upstream ended by itself: its chunks released everything a finished choice
            # held. A choice without its ``finish_reason`` was dropped, not finished: invent
            # no ending, and keep its held text (``pending``).
            return []
        if phase is DRAINING_PHASE and self._drained is not None:
            drained = self._drained
            if drained.get("choices"):
                drained = {**drained, "choices": []}
            return [(drained, None)]
        if self._usage is not None:
            return [(self._synthesized([], self._usage), None)]
        return []


def _chat_stage(machine: ChatMachine) -> _SDKStage:
    """The stage of a Chat stream: the machine's ``ModelDriver`` behind the native stage, which
    handles the common SDK chunk itself (one choice, open, whose ``delta.content`` fires no
    stop, no ``finish_reason``, no ``usage``) and hands every other chunk to the driver."""
    return _SDKStage(ModelDriver(machine), machine.open_filters, _with_content, "chat")


def _with_content(chunk: Any, content: str) -> Any:
    """The SDK chunk of one choice with its ``delta.content`` replaced: the chunk's own
    ``model_copy``, as ``update_model`` makes it."""
    choice = chunk.choices[0]
    delta = choice.delta.model_copy(update={"content": content})
    return chunk.model_copy(update={"choices": [choice.model_copy(update={"delta": delta})]})


if TYPE_CHECKING:
    # The stream classes are ``SyncAdapterStream`` / ``AsyncAdapterStream`` reporting their
    # machine's ``IndexedView``; these names type them as such.

    class ChatStopStream(SyncAdapterStream[_T], IndexedView):
        """Iterator over chat completion chunks with stop sequences applied."""

    class AsyncChatStopStream(AsyncAdapterStream[_T], IndexedView):
        """Async iterator over chat completion chunks with stop sequences applied."""

else:
    ChatStopStream = SyncAdapterStream
    AsyncChatStopStream = AsyncAdapterStream


@overload
def wrap_chat(
    stream: ChatCompletionStreamManager[Any],
    stops: Stops,
    *,
    include_stop: bool | None = None,
    on_stop: OnStop = "close",
    n: int | None = None,
) -> HelperStopStreamManager: ...


@overload
def wrap_chat(  # type: ignore[overload-overlap]
    stream: ChatCompletionStream[Any],
    stops: Stops,
    *,
    include_stop: bool | None = None,
    on_stop: OnStop = "close",
    n: int | None = None,
) -> HelperStopStream: ...


@overload
def wrap_chat(
    stream: Iterable[_T],
    stops: Stops,
    *,
    include_stop: bool | None = None,
    on_stop: OnStop = "close",
    n: int | None = None,
) -> ChatStopStream[_T]: ...


def wrap_chat(
    stream: Any,
    stops: Stops,
    *,
    include_stop: bool | None = None,
    on_stop: OnStop = "close",
    n: int | None = None,
) -> Any:
    """Apply ``stops`` to a stream of ``ChatCompletionChunk`` objects or dicts.

    Yields the same kind. See the module docstring for the rules; ``stop_sequences`` on the
    result tells which stop ended each choice. ``on_stop``: ``"close"`` (close the upstream as
    soon as every choice has stopped) or ``"drain"`` (read it to the end silently, to deliver
    the final usage chunk). ``n``: the number of choices requested, if more than one.

    ``stream`` may also be the SDK's own helper, ``client.chat.completions.stream(...)`` (the
    manager, or the stream it gives): the result is then that helper, cut (its events,
    snapshots and ``get_final_completion()``; a stopped choice has ``stop_reason``), with the
    attributes above.
    """
    found = _sdk_helpers.kind(stream)
    if found is not None:
        return _sdk_helpers.wrap_helper(
            stream,
            found,
            lambda raw: wrap_chat(raw, stops, include_stop=include_stop, on_stop=on_stop, n=n),
            lambda raw: awrap_chat(raw, stops, include_stop=include_stop, on_stop=on_stop, n=n),
        )
    machine = ChatMachine(stops, include_stop, on_stop, n)
    return ChatStopStream(stream, _chat_stage(machine), machine.view())


@overload
def awrap_chat(
    stream: AsyncChatCompletionStreamManager[Any],
    stops: Stops,
    *,
    include_stop: bool | None = None,
    on_stop: OnStop = "close",
    n: int | None = None,
) -> HelperStopStreamManager: ...


@overload
def awrap_chat(  # type: ignore[overload-overlap]
    stream: AsyncChatCompletionStream[Any],
    stops: Stops,
    *,
    include_stop: bool | None = None,
    on_stop: OnStop = "close",
    n: int | None = None,
) -> AsyncHelperStopStream: ...


@overload
def awrap_chat(
    stream: AsyncIterable[_T],
    stops: Stops,
    *,
    include_stop: bool | None = None,
    on_stop: OnStop = "close",
    n: int | None = None,
) -> AsyncChatStopStream[_T]: ...


def awrap_chat(
    stream: Any,
    stops: Stops,
    *,
    include_stop: bool | None = None,
    on_stop: OnStop = "close",
    n: int | None = None,
) -> Any:
    """Async twin of ``wrap_chat`` (an ``AsyncStream`` from ``AsyncOpenAI``, say, or the async
    helper of ``client.chat.completions.stream(...)``)."""
    found = _sdk_helpers.kind(stream)
    if found is not None:
        return wrap_chat(stream, stops, include_stop=include_stop, on_stop=on_stop, n=n)
    machine = ChatMachine(stops, include_stop, on_stop, n)
    return AsyncChatStopStream(stream, _chat_stage(machine), machine.view())


@overload
def wrap_responses(
    stream: ResponseStreamManager[Any],
    stops: Stops,
    *,
    include_stop: bool | None = None,
    on_stop: OnStop = "close",
) -> HelperStopStreamManager: ...


@overload
def wrap_responses(  # type: ignore[overload-overlap]
    stream: ResponseStream[Any],
    stops: Stops,
    *,
    include_stop: bool | None = None,
    on_stop: OnStop = "close",
) -> HelperStopStream: ...


@overload
def wrap_responses(
    stream: Iterable[_T],
    stops: Stops,
    *,
    include_stop: bool | None = None,
    on_stop: OnStop = "close",
) -> ResponsesStopStream[_T]: ...


def wrap_responses(
    stream: Any,
    stops: Stops,
    *,
    include_stop: bool | None = None,
    on_stop: OnStop = "close",
) -> Any:
    """Apply ``stops`` to a stream of Responses API events (SDK objects or dicts).

    Yields the same kind. One filter per output text part; on a stop, the truncated delta and
    the closing events (``response.output_text.done``, ``response.content_part.done``,
    ``response.output_item.done``, ``response.completed`` naming the stop as
    ``response.stop_sequence``). ``complete`` tells whether the response ended (a terminal event
    or a stop) rather than being dropped. ``on_stop``: ``"close"`` (close the upstream as soon
    as the stop fires) or ``"drain"`` (read it to the end silently, for the real usage).

    ``stream`` may also be the SDK's own helper, ``client.responses.stream(...)`` (the manager,
    or the stream it gives): the result is then that helper, cut (its events, snapshots and
    ``get_final_response()``), with the attributes above.
    """
    found = _sdk_helpers.kind(stream)
    if found is not None:
        return _sdk_helpers.wrap_helper(
            stream,
            found,
            lambda raw: wrap_responses(raw, stops, include_stop=include_stop, on_stop=on_stop),
            lambda raw: awrap_responses(raw, stops, include_stop=include_stop, on_stop=on_stop),
        )
    machine = ResponsesMachine(stops, include_stop, on_stop)
    return ResponsesStopStream(stream, ModelDriver(machine, rebuild_responses), machine.view())


@overload
def awrap_responses(
    stream: AsyncResponseStreamManager[Any],
    stops: Stops,
    *,
    include_stop: bool | None = None,
    on_stop: OnStop = "close",
) -> HelperStopStreamManager: ...


@overload
def awrap_responses(  # type: ignore[overload-overlap]
    stream: AsyncResponseStream[Any],
    stops: Stops,
    *,
    include_stop: bool | None = None,
    on_stop: OnStop = "close",
) -> AsyncHelperStopStream: ...


@overload
def awrap_responses(
    stream: AsyncIterable[_T],
    stops: Stops,
    *,
    include_stop: bool | None = None,
    on_stop: OnStop = "close",
) -> AsyncResponsesStopStream[_T]: ...


def awrap_responses(
    stream: Any,
    stops: Stops,
    *,
    include_stop: bool | None = None,
    on_stop: OnStop = "close",
) -> Any:
    """Async twin of ``wrap_responses`` (an ``AsyncStream`` from ``AsyncOpenAI``, say, or the
    async helper of ``client.responses.stream(...)``)."""
    found = _sdk_helpers.kind(stream)
    if found is not None:
        return wrap_responses(stream, stops, include_stop=include_stop, on_stop=on_stop)
    machine = ResponsesMachine(stops, include_stop, on_stop)
    return AsyncResponsesStopStream(stream, ModelDriver(machine, rebuild_responses), machine.view())


def truncate_chat(completion: Any, stops: Stops, include_stop: bool | None = None) -> Any:
    """Apply ``stops`` to a non-streaming chat completion, in place, and return it.

    ``completion``: a ``dict`` of the wire shape or an SDK object with the same fields
    (``ChatCompletion``, LiteLLM's ``ModelResponse``). Each choice's ``message.content`` is cut
    at its first stop, as the stream adapter cuts a choice; a choice cut here gets
    ``finish_reason: "stop"`` and ``stop_reason`` naming the stop (as vLLM reports it).
    """
    choices = _field(completion, "choices")
    if not isinstance(choices, list) or _field(completion, "object") == "chat.completion.chunk":
        raise _not_a_completion(completion)
    compiled = stop_set(stops, include_stop)
    for choice in choices:
        message = _field(choice, "message")
        content = _field(message, "content")
        if message is None or not isinstance(content, str):
            continue
        text, stop = truncate(content, compiled)
        if stop is not None:
            _set(message, "content", text)
            _set(choice, "finish_reason", "stop")
            _set(choice, "stop_reason", stop)
    return completion


def _not_a_completion(obj: Any) -> TypeError:
    takes = "truncate_chat takes a whole chat completion (ChatCompletion or its dict)"
    if isinstance(obj, dict) or hasattr(obj, "model_dump"):
        return not_readable(takes, as_json(obj))
    return TypeError(f"{takes}, not {type(obj).__name__}")


def _field(obj: Any, name: str) -> Any:
    return obj.get(name) if isinstance(obj, dict) else getattr(obj, name, None)


def _set(obj: Any, name: str, value: object) -> None:
    if isinstance(obj, dict):
        obj[name] = value
    else:
        setattr(obj, name, value)
