"""Stop sequences for Gemini ``generateContent`` streams.

``wrap`` / ``awrap`` wrap a stream of ``google-genai`` ``GenerateContentResponse`` objects (what
``client.models.generate_content_stream`` returns) or of plain dicts of the wire shape
(camelCase, as the REST API sends them) or of the SDK's snake_case ``model_dump()``, and yield
the same kind::

    chunks = client.models.generate_content_stream(model=..., contents=...)
    with stopstream.gemini.wrap(chunks, ["</answer>", "\\n\\nUser:"]) as stream:
        for chunk in stream:
            print(chunk.text, end="")

``stopstream.sse.wrap_gemini`` / ``awrap_gemini`` take the raw ``alt=sse`` body instead, and
``truncate_response`` applies the same rules to a whole (non-streaming) response.

Rules:

- One filter per candidate (``index``; ``candidateCount > 1``). Only the text parts of a
  candidate's content are scanned: parts with ``thought: true`` (thought summaries), function
  calls and responses, code, inline data and every other field pass through untouched.
- A text part whose text is held back entirely stays in the chunk with ``text: ""`` (so a
  ``thoughtSignature`` on it survives and ``chunk.text`` stays a ``str``). Held text is released
  in the candidate's next text part, at the latest in the chunk carrying its ``finishReason``.
- When a stop fires: the candidate's text is cut there, parts after the cut are dropped, and the
  candidate gets ``finishReason: "STOP"`` and the stop's text as ``finishMessage`` (the SDK's
  models forbid extra fields, so the stop is named in a field the API has). Later chunks of
  that candidate are dropped; a chunk left with no candidates is dropped.
- When every candidate has stopped or finished (and a stop fired): ``on_stop="close"`` (default)
  closes the upstream at once; ``on_stop="drain"`` reads it to the end silently and then
  delivers a last chunk holding only the upstream's final ``usageMetadata``.
- **A dropped stream is not a finished one:** when the upstream ends before every candidate has
  a ``finishReason`` (or a stop), nothing is invented, held text stays in ``pending`` and
  ``complete`` is ``False``.
- ``candidate_count``: how many candidates were requested. Without it, "every candidate" means
  every candidate seen so far.

The SDK is not imported: objects are read with ``model_dump`` and changed chunks rebuilt with
the chunk's own class from JSON (``model_validate_json``: enums and ``bytes`` fields come out
as the SDK's own parsing makes them).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterable, Iterable, Mapping
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar

from stopstream._adapter import (
    CLOSING_PHASE,
    DRAINING_PHASE,
    ENDED_PHASE,
    AsyncAdapterStream,
    Emit,
    ModelDriver,
    OnStop,
    Shape,
    SyncAdapterStream,
    not_readable,
    scan,
)
from stopstream._core import StopFilter
from stopstream._indexed import IndexedMachine, IndexedView, TextStream
from stopstream._models import JSON, as_json
from stopstream._wrap import stop_set

if TYPE_CHECKING:
    from stopstream._types import Stops

__all__ = [
    "AsyncGeminiStopStream",
    "GeminiMachine",
    "GeminiStopStream",
    "awrap",
    "truncate_response",
    "wrap",
]


def __dir__() -> list[str]:
    # The API only: not this module's imports and helpers.
    return sorted(__all__)


_T = TypeVar("_T")

# Top-level fields copied from the latest upstream chunk into the drained usage chunk.
_CHUNK_FIELDS = (
    ("usageMetadata", "usage_metadata"),
    ("modelVersion", "model_version"),
    ("responseId", "response_id"),
    ("createTime", "create_time"),
)


def _get(obj: JSON, camel: str, snake: str) -> Any:
    value = obj.get(camel)
    return obj.get(snake) if value is None else value


def _is_snake(obj: JSON) -> bool:
    return any("_" in key for key in obj)


_TAKES = "stopstream.gemini.wrap takes generateContent stream chunks (the SDK's or their dicts)"
_TRUNCATE_TAKES = "stopstream.gemini.truncate_response takes a generateContent response"
# The fields of a chunk without candidates (either case), and those that mark another API's item.
_GEMINI = frozenset(
    (
        "promptFeedback",
        "prompt_feedback",
        "usageMetadata",
        "usage_metadata",
        "modelVersion",
        "model_version",
        "responseId",
        "response_id",
        "error",
    )
)
_OTHER_APIS = frozenset(("choices", "type", "object"))


class GeminiMachine(IndexedMachine):
    """The Gemini adapter over decoded ``GenerateContentResponse`` chunks (dicts)."""

    #: What it reads, as its errors say.
    takes: ClassVar[str] = _TAKES

    shape: ClassVar[Shape] = "gemini"
    items = "candidates"
    stop_finish = "STOP"

    def __init__(
        self,
        stops: Stops,
        include_stop: bool | None = None,
        on_stop: OnStop = "close",
        candidate_count: int | None = None,
    ) -> None:
        super().__init__(stops, include_stop, on_stop, candidate_count, "candidate_count")
        self._drained: JSON | None = None  # the latest chunk read while draining

    def feed(self, chunk: JSON) -> list[Emit]:
        phase = self._phase
        if phase is ENDED_PHASE or phase is CLOSING_PHASE:
            return []
        if phase is DRAINING_PHASE:
            self._drained = chunk
            return []
        candidates = chunk.get("candidates")
        if not isinstance(candidates, list):
            if _OTHER_APIS.isdisjoint(chunk) and not _GEMINI.isdisjoint(chunk):
                return [(chunk, chunk)]  # prompt feedback or usage only, or an error: no text
            raise not_readable(_TAKES, chunk)
        return self._feed_items(chunk, candidates, False)

    def _scan(self, candidate: JSON, index: int, stream: TextStream, chunk: JSON) -> JSON | None:
        snake = _is_snake(chunk) or _is_snake(candidate)  # the SDK's model_dump() without aliases
        f = stream.filter
        content = candidate.get("content")
        finish = _get(candidate, "finishReason", "finish_reason")
        new_parts = _scan_parts(f, content, finish is not None)
        if f.stopped:
            self._stopped(index, stream)
            out_candidate = {**candidate}
            if new_parts is not None:
                new_content = {**content} if isinstance(content, dict) else {"role": "model"}
                out_candidate["content"] = {**new_content, "parts": new_parts}
            _name_stop(out_candidate, snake, f.stop_sequence)
            return out_candidate
        if finish is not None:
            self._finished(index, stream, finish)
        if new_parts is None:
            return candidate
        new_content = {**content} if isinstance(content, dict) else {"role": "model"}
        new_content["parts"] = new_parts
        return {**candidate, "content": new_content}

    def end(self) -> list[Emit]:
        phase = self._phase
        self._phase = ENDED_PHASE
        if phase is DRAINING_PHASE and self._drained is not None:
            drained = self._drained
            usage: JSON = {}
            for camel, snake in _CHUNK_FIELDS:
                for key in (camel, snake):
                    if key in drained:
                        usage[key] = drained[key]
            if _get(drained, "usageMetadata", "usage_metadata") is not None:
                return [(usage, None)]
        # The upstream ended (or was closed after a stop): nothing is owed; a candidate still
        # open keeps its held text (no ending is invented).
        return []


def _name_stop(candidate: JSON, snake: bool, stop: str | None) -> None:
    """A candidate a stop ended: ``finishReason: "STOP"`` and the stop as ``finishMessage``
    (the SDK's models forbid extra fields), in the keys' case of the chunk."""
    candidate["finish_reason" if snake else "finishReason"] = GeminiMachine.stop_finish
    candidate["finish_message" if snake else "finishMessage"] = stop


def _scan_parts(f: StopFilter, content: object, ends: bool) -> list[Any] | None:
    """A candidate's parts with its text through ``f`` (``None`` when no part changed), and,
    where its text ends (``ends``: it carries its ``finishReason``), what ``f`` still holds
    appended to its last text part.

    Only text parts are fed (not ``thought: true`` ones); the parts after the one a stop fires
    in are dropped. One function for the stream and for ``truncate_response``, so a whole
    response is cut exactly as its stream would be.
    """
    parts = content.get("parts") if isinstance(content, dict) else None
    new_parts: list[Any] | None = None  # set once a part changed
    last_text = -1  # position in new_parts of the last text part
    if isinstance(parts, list):
        for position_in, part in enumerate(parts):
            text = part.get("text") if isinstance(part, dict) else None
            if not isinstance(text, str) or part.get("thought") is True:
                if new_parts is not None:
                    new_parts.append(part)
                continue
            out = f.feed(text)
            if out != text and new_parts is None:
                new_parts = list(parts[:position_in])
            if new_parts is not None:
                last_text = len(new_parts)
                new_parts.append(part if out == text else {**part, "text": out})
            else:
                last_text = position_in
            if f.stopped:
                if new_parts is None:
                    new_parts = list(parts[: position_in + 1])
                break
    if ends and not f.stopped:
        # The candidate's text ends here: what its filter holds goes out with its last text
        # part, and a stop decided by the end is reported like any other.
        tail = scan(f, None, True)
        if tail:
            base = new_parts if new_parts is not None else list(parts or [])
            if last_text >= 0:
                held = base[last_text]
                base[last_text] = {**held, "text": held["text"] + tail}
            else:
                base.insert(0, {"text": tail})
            new_parts = base
    return new_parts


def _rebuild(value: JSON, sample: object, view: JSON | None) -> object:
    """A changed chunk: the sample's class, validated from JSON as the SDK reads a body.

    Not ``model_copy``: that assigns values unvalidated, so ``finishReason: "STOP"`` would stay
    a ``str`` where the SDK has a ``FinishReason`` enum, and every ``model_dump()`` of the chunk
    would warn ("Expected `enum`"). Through JSON, base64 ``bytes`` fields (inline data, thought
    signatures) decode as the SDK itself decodes them. The chunk has no private state to keep.
    """
    validate_json = getattr(type(sample), "model_validate_json", None)
    if callable(validate_json):
        return validate_json(json.dumps(value))
    return value


if TYPE_CHECKING:
    # ``SyncAdapterStream`` / ``AsyncAdapterStream`` reporting an ``IndexedView`` (per
    # candidate ``index``; finish reasons are Gemini's ``finishReason`` values).

    class GeminiStopStream(SyncAdapterStream[_T], IndexedView):
        """Iterator over ``GenerateContentResponse`` chunks with stop sequences applied."""

    class AsyncGeminiStopStream(AsyncAdapterStream[_T], IndexedView):
        """Async iterator over ``GenerateContentResponse`` chunks with stop sequences applied."""

else:
    GeminiStopStream = SyncAdapterStream
    AsyncGeminiStopStream = AsyncAdapterStream


def wrap(
    stream: Iterable[_T],
    stops: Stops,
    *,
    include_stop: bool | None = None,
    on_stop: OnStop = "close",
    candidate_count: int | None = None,
) -> GeminiStopStream[_T]:
    """Apply ``stops`` to a stream of ``GenerateContentResponse`` objects or dicts.

    Yields the same kind; see the module docstring for the rules. ``stop_sequences`` on the
    result tells which stop ended each candidate, ``complete`` whether the response ended.
    """
    machine = GeminiMachine(stops, include_stop, on_stop, candidate_count)
    return GeminiStopStream(stream, ModelDriver(machine, _rebuild), machine.view())


def awrap(
    stream: AsyncIterable[_T],
    stops: Stops,
    *,
    include_stop: bool | None = None,
    on_stop: OnStop = "close",
    candidate_count: int | None = None,
) -> AsyncGeminiStopStream[_T]:
    """Async twin of ``wrap`` (``client.aio.models.generate_content_stream``, say)."""
    machine = GeminiMachine(stops, include_stop, on_stop, candidate_count)
    return AsyncGeminiStopStream(stream, ModelDriver(machine, _rebuild), machine.view())


def truncate_response(response: Any, stops: Stops, include_stop: bool | None = None) -> Any:
    """Apply ``stops`` to a non-streaming ``generateContent`` response and return it.

    ``response``: a ``dict`` of the wire shape (camelCase, or the SDK's snake_case
    ``model_dump()``), cut in place; or a ``google-genai`` ``GenerateContentResponse`` (or other
    mapping), returned rebuilt with its own class, as the stream adapter rebuilds a changed
    chunk. Each candidate is cut exactly as the stream adapter cuts a candidate whose text ends
    in one chunk: its text parts (not thought summaries) are scanned as one text, the parts up
    to the one its first stop ends in are kept (a part whose text was all stop keeps its other
    fields with ``text: ""``), the parts after it are dropped, and the candidate gets
    ``finishReason: "STOP"`` and the stop's text as ``finishMessage``. A candidate with no stop,
    and anything that is not a response, is left as it is.
    """
    if isinstance(response, dict):
        data: JSON = response
    elif isinstance(response, Mapping) or callable(getattr(response, "model_dump", None)):
        data = as_json(response)
    else:
        raise TypeError(f"{_TRUNCATE_TAKES}, not {type(response).__name__}")
    candidates = data.get("candidates")
    if not isinstance(candidates, list):
        if _OTHER_APIS.isdisjoint(data) and not _GEMINI.isdisjoint(data):
            return response  # prompt feedback only: no text
        raise not_readable(_TRUNCATE_TAKES, data)
    compiled = stop_set(stops, include_stop)
    changed = False
    for candidate in candidates:
        if not isinstance(candidate, dict):
            continue
        f = StopFilter(compiled)
        content = candidate.get("content")
        new_parts = _scan_parts(f, content, True)
        if not f.stopped:
            continue  # the text stands as it is (held text was only moved between parts)
        if new_parts is not None:
            new_content = content if isinstance(content, dict) else {"role": "model"}
            new_content["parts"] = new_parts
            candidate["content"] = new_content
        snake = _is_snake(data) or _is_snake(candidate)
        _name_stop(candidate, snake, f.stop_sequence)
        changed = True
    if response is data or not changed:
        return response
    return _rebuild(data, response, None)
