"""The OpenAI Responses API adapter (``stopstream.openai.wrap_responses``, ``stopstream.sse``).

The Responses API has no ``stop`` parameter at all, so every stop is enforced here. A
response's text arrives as ``response.output_text.delta`` events, one stream per output item
and content part (``output_index``, ``content_index``), each closed by its own
``response.output_text.done`` / ``response.content_part.done`` / ``response.output_item.done``;
the stream ends with ``response.completed``, ``response.incomplete`` or ``response.failed``
(there is no ``[DONE]``).

Rules:

- One filter per text part. Only ``response.output_text.delta`` is scanned; reasoning items and
  their summaries, refusals, function-call and custom-tool arguments, annotations and every
  other event pass through untouched.
- Text a part holds back (it may start a stop) is released in a ``response.output_text.delta``
  right before the part's ``response.output_text.done``, so the deltas of a part always add up
  to its ``done`` text. A delta whose text is held back entirely is not emitted; its
  ``logprobs`` travel with the next delta of the part that is.
- When a stop fires (the response has a single answer, so the first stop ends it): the
  truncated delta (if any text is left), then ``response.output_text.done`` (the truncated
  text), ``response.content_part.done``, ``response.output_item.done`` (the item
  ``completed``, holding its earlier parts and the truncated one) and ``response.completed``
  (``status: "completed"``, ``output``: every item finished before, then the truncated one),
  whose ``response`` names the stop as ``stop_sequence`` (an extra field of the SDK's
  ``Response`` model, which accepts extras). Nothing later.
- ``sequence_number`` stays strictly increasing: an event is renumbered (a copy with the next
  number) only when an event inserted before it took its number.
- ``on_stop="close"`` (default): the upstream is closed as soon as the stop is seen; the
  ``response.completed`` is built from the latest ``response`` the upstream sent (its
  ``usage`` is unknown then). ``on_stop="drain"``: the upstream is read to its end silently and
  its own terminal ``response`` (with the real ``usage``) is the base of ``response.completed``.
- **A dropped stream is not a finished one:** when the upstream ends without a terminal event,
  nothing is invented and the held text stays in ``pending``; ``complete`` is ``False``.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar

from stopstream._adapter import (
    CLOSING_PHASE,
    DRAINING_PHASE,
    ENDED_PHASE,
    AsyncAdapterStream,
    Emit,
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
from stopstream._core import StopFilter, truncate
from stopstream._models import JSON, rebuild_from_sample, rebuild_model
from stopstream._wrap import stop_set

if TYPE_CHECKING:
    from stopstream._types import Stops

__all__ = [
    "AsyncResponsesStopStream",
    "ResponsesMachine",
    "ResponsesStopStream",
    "ResponsesView",
    "rebuild",
    "truncate_response",
]

_T = TypeVar("_T")

#: A text part: (``output_index``, ``content_index``).
PartKey = tuple[Any, Any]

TEXT_DELTA = "response.output_text.delta"
TEXT_DONE = "response.output_text.done"
PART_ADDED = "response.content_part.added"
PART_DONE = "response.content_part.done"
ITEM_ADDED = "response.output_item.added"
ITEM_DONE = "response.output_item.done"
COMPLETED = "response.completed"
TERMINAL = frozenset({COMPLETED, "response.incomplete", "response.failed"})
# Events whose ``response`` is the latest snapshot of the response as a whole.
_SNAPSHOTS = frozenset({"response.created", "response.in_progress", "response.queued"})


class _Part:
    """One text part being scanned."""

    __slots__ = ("filter", "item_id", "logprobs", "pending_logprobs", "text")

    def __init__(self, f: StopFilter, item_id: Any) -> None:
        self.filter = f
        self.item_id = item_id
        self.text: list[str] = []  # what was emitted
        self.logprobs: list[Any] = []  # the logprobs of what was emitted
        self.pending_logprobs: list[Any] = []  # of deltas held back entirely


_TAKES = "wrap_responses takes Responses stream events (the SDK's or their dicts)"


class ResponsesMachine(Phases):
    """The Responses adapter over decoded events (dicts); see the module docstring."""

    #: What it reads, as its errors say.
    takes: ClassVar[str] = _TAKES

    shape: ClassVar[Shape] = "responses"

    def __init__(
        self, stops: Stops, include_stop: bool | None = None, on_stop: OnStop = "close"
    ) -> None:
        super().__init__(stops, include_stop, on_stop)
        self._parts: dict[PartKey, _Part] = {}  # open text parts
        self._items: dict[Any, JSON] = {}  # output_index -> item as added
        self._item_parts: dict[Any, dict[Any, JSON]] = {}  # output_index -> finished parts
        self._part_templates: dict[PartKey, JSON] = {}  # as added
        self._done_items: dict[Any, JSON] = {}  # output_index -> item as done
        self._response: JSON = {}  # the latest response snapshot
        self._seq = -1  # the last sequence number emitted
        self._numbered = False  # the upstream numbers its events
        self._stopped_at: tuple[PartKey, JSON] | None = None  # the stop's part and its item
        self.stop_sequences: dict[PartKey, str | None] = {}
        self.stopped = False
        self.stop_sequence: str | None = None
        self.stop_index: int | None = None
        self.complete = False
        self.status: str | None = None  # the final response's status, once known

    @property
    def pending(self) -> dict[PartKey, str]:
        """Per open text part: the text held back right now."""
        return {key: part.filter.pending for key, part in self._parts.items()}

    # --- the native SSE stage (``stopstream.sse``) ----------------------------------------

    def text_filters(self) -> list[OpenText]:
        """The open parts the native stage may feed, keyed ``(output_index, content_index)``,
        with their emitted texts: the parts with int keys and no logprobs waiting for a delta. The
        stage appends the text each delta emits to the part's list, as ``_delta`` does."""
        return [
            OpenText(key, part.filter, part.text)
            for key, part in self._parts.items()
            if type(key[0]) is int and type(key[1]) is int and not part.pending_logprobs
        ]

    @property
    def sequence(self) -> int:
        """The last sequence number emitted (-1 before any): an event numbered above it passes
        unrenumbered."""
        return self._seq

    def note_seen(self, seen: object) -> None:
        """The native stage saw numbered events and forwarded those up to ``seen`` unchanged."""
        if isinstance(seen, int):
            self._numbered = True
            self._seq = max(self._seq, seen)

    def view(self) -> View:
        return ResponsesView(self)

    # --- feeding --------------------------------------------------------------------------

    def feed(self, event: JSON) -> list[Emit]:
        phase = self._phase
        if phase is ENDED_PHASE or phase is CLOSING_PHASE:
            return []
        kind = event.get("type")
        if not isinstance(kind, str) or not (kind.startswith("response.") or kind == "error"):
            raise not_readable(_TAKES, event)
        if isinstance(event.get("sequence_number"), int):
            self._numbered = True
        if phase is DRAINING_PHASE:
            if kind in TERMINAL:
                response = event.get("response")
                if isinstance(response, dict):
                    self._response = response
                self._phase = ENDED_PHASE
                return [self._number(self._completed(), None)]
            return []
        if kind == TEXT_DELTA:
            return self._delta(event)
        if kind == TEXT_DONE:
            return self._text_done(event)
        if kind in _SNAPSHOTS:
            response = event.get("response")
            if isinstance(response, dict):
                self._response = response
        elif kind == ITEM_ADDED:
            item = event.get("item")
            if isinstance(item, dict):
                self._items[event.get("output_index")] = item
        elif kind == PART_ADDED:
            part = event.get("part")
            if isinstance(part, dict):
                self._part_templates[_key(event)] = part
        elif kind == PART_DONE:
            part = event.get("part")
            if isinstance(part, dict):
                index = event.get("output_index")
                self._item_parts.setdefault(index, {})[event.get("content_index")] = part
        elif kind == ITEM_DONE:
            item = event.get("item")
            if isinstance(item, dict):
                self._done_items[event.get("output_index")] = item
        elif kind in TERMINAL:
            response = event.get("response")
            if isinstance(response, dict):
                self._response = response  # the base of a ``response.completed`` of a stop
            emits = self._flush()  # a part left open: its text ends here
            if self.stopped:
                return emits  # the stop's ``response.completed`` is ``end()``'s
            self.complete = True
            status = (event.get("response") or {}).get("status")
            self.status = status if isinstance(status, str) else kind.rpartition(".")[2]
            self._phase = ENDED_PHASE
            emits.append(self._number(event, event))
            return emits
        return [self._number(event, event)]

    def _part(self, key: PartKey, event: JSON) -> _Part:
        part = self._parts.get(key)
        if part is None:
            part = self._parts[key] = _Part(StopFilter(self._set), event.get("item_id"))
            self.stop_sequences[key] = None
        return part

    def _delta(self, event: JSON) -> list[Emit]:
        text = event.get("delta")
        if not isinstance(text, str):
            return [self._number(event, event)]
        key = _key(event)
        part = self._part(key, event)
        f = part.filter
        out = f.feed(text)
        emits: list[Emit] = []
        logprobs = event.get("logprobs")
        if out:
            emitted = event
            if out != text or part.pending_logprobs:
                emitted = {**event, "delta": out}
                if part.pending_logprobs:
                    own = logprobs if isinstance(logprobs, list) else []
                    emitted["logprobs"] = part.pending_logprobs + own
                    part.pending_logprobs = []
            part.text.append(out)
            if isinstance(emitted.get("logprobs"), list):
                part.logprobs.extend(emitted["logprobs"])
            emits.append(self._number(emitted, event))
        elif isinstance(logprobs, list) and logprobs:
            part.pending_logprobs.extend(logprobs)
        if f.stopped:
            emits.extend(self._stop(key, part, event))
        return emits

    def _release(self, key: PartKey, part: _Part, template: JSON) -> list[Emit]:
        """The part's text ends: what it holds as a delta of its own (nothing if none is held),
        then, if the end decided a stop, the stop's closing events like any other stop's."""
        f = part.filter
        tail = scan(f, None, True) or ""
        emits: list[Emit] = []
        if tail or part.pending_logprobs:
            emits.append(self._tail(key, part, template, tail))
        if f.stopped:
            emits.extend(self._stop(key, part, template))
        return emits

    def _tail(self, key: PartKey, part: _Part, template: JSON, tail: str) -> Emit:
        """A delta of the part's released text (and the logprobs waiting for one)."""
        delta: JSON = {
            "type": TEXT_DELTA,
            "item_id": template.get("item_id", part.item_id),
            "output_index": key[0],
            "content_index": key[1],
            "delta": tail,
            "logprobs": part.pending_logprobs,
        }
        part.text.append(tail)
        part.logprobs.extend(part.pending_logprobs)
        part.pending_logprobs = []
        return self._number(delta, None)

    def _text_done(self, event: JSON) -> list[Emit]:
        key = _key(event)
        part = self._parts.pop(key, None)
        emits = self._release(key, part, event) if part is not None else []
        if not self.stopped:  # else the stop's own done events replace the upstream's
            emits.append(self._number(event, event))
        return emits

    def _flush(self) -> list[Emit]:
        """The response ends with parts still open: each one's text ends, up to the first
        that a stop ends."""
        emits: list[Emit] = []
        for key, part in list(self._parts.items()):
            del self._parts[key]
            emits.extend(self._release(key, part, {}))
            if self.stopped:
                break
        self._parts.clear()
        return emits

    # --- a stop ---------------------------------------------------------------------------

    def _stop(self, key: PartKey, part: _Part, event: JSON) -> list[Emit]:
        f = part.filter
        self._parts.clear()  # nothing after the stop is scanned or sent
        self.stopped = self.complete = True
        self.status = "completed"
        self.stop_sequence = f.stop_sequence
        self.stop_index = f.stop_index
        self.stop_sequences[key] = f.stop_sequence
        self._phase = CLOSING_PHASE if self._on_stop == "close" else DRAINING_PHASE
        output_index, content_index = key
        item_id = event.get("item_id", part.item_id)
        text = "".join(part.text)
        done: JSON = {
            "type": TEXT_DONE,
            "item_id": item_id,
            "output_index": output_index,
            "content_index": content_index,
            "text": text,
            "logprobs": part.logprobs,
        }
        template = self._part_templates.get(key) or {"type": "output_text", "annotations": []}
        part_json: JSON = {**template, "text": text}
        if "logprobs" in template:
            part_json["logprobs"] = part.logprobs
        part_done: JSON = {
            "type": PART_DONE,
            "item_id": item_id,
            "output_index": output_index,
            "content_index": content_index,
            "part": part_json,
        }
        earlier = self._item_parts.get(output_index, {})
        content = [p for index, p in earlier.items() if index != content_index]
        content.append(part_json)
        added = self._items.get(output_index) or {
            "id": item_id,
            "type": "message",
            "role": "assistant",
        }
        item: JSON = {**added, "status": "completed", "content": content}
        item_done: JSON = {"type": ITEM_DONE, "output_index": output_index, "item": item}
        self._stopped_at = (key, item)
        return [self._number(e, None) for e in (done, part_done, item_done)]

    def _completed(self) -> JSON:
        assert self._stopped_at is not None
        (output_index, _), item = self._stopped_at
        output = [v for k, v in self._done_items.items() if k != output_index]
        output.append(item)
        response: JSON = {
            **self._response,
            "status": "completed",
            "output": output,
            "stop_sequence": self.stop_sequence,
        }
        for key in ("incomplete_details", "error"):
            if response.get(key) is not None:
                response[key] = None
        return {"type": COMPLETED, "response": response}

    def _number(self, value: JSON, origin: JSON | None) -> Emit:
        """``value`` with a sequence number above every one emitted before (a copy if needed)."""
        if not self._numbered:
            return (value, origin)
        seq = value.get("sequence_number")
        if isinstance(seq, int) and not isinstance(seq, bool) and seq > self._seq:
            self._seq = seq
            return (value, origin)
        self._seq += 1
        if value is origin:
            value = dict(value)
        value["sequence_number"] = self._seq
        return (value, origin)

    def end(self) -> list[Emit]:
        phase = self._phase
        self._phase = ENDED_PHASE
        if phase is CLOSING_PHASE or phase is DRAINING_PHASE:
            return [self._number(self._completed(), None)]
        # The upstream ended without a terminal event: invent no ending, keep what is held.
        return []


def _key(event: JSON) -> PartKey:
    output_index = event.get("output_index")
    if output_index is None:
        output_index = event.get("item_id")
    return (output_index, event.get("content_index", 0))


_EVENT_CLASSES = {
    TEXT_DELTA: "ResponseTextDeltaEvent",
    TEXT_DONE: "ResponseTextDoneEvent",
    PART_DONE: "ResponseContentPartDoneEvent",
    ITEM_DONE: "ResponseOutputItemDoneEvent",
    COMPLETED: "ResponseCompletedEvent",
}


def rebuild(value: JSON, sample: object, view: JSON | None) -> object:
    """An SDK event object for ``value``: the upstream event's own ``model_copy`` when it was
    derived from one, else a new object of the SDK class for its type."""
    kind = value.get("type")
    if view is not None and kind == getattr(sample, "type", None):
        return rebuild_from_sample(value, sample, view)
    cls: type[Any] | None = None
    if kind == getattr(sample, "type", None):
        cls = type(sample)
    elif isinstance(kind, str) and kind in _EVENT_CLASSES:
        try:
            cls = getattr(importlib.import_module("openai.types.responses"), _EVENT_CLASSES[kind])
        except (ImportError, AttributeError):
            cls = None
    if cls is None:
        return value  # no SDK class for it: a dict of the event's wire shape
    return rebuild_model(cls, value)


class ResponsesView(SingleView):
    """What a Responses stream reports, read from its machine."""

    _machine: ResponsesMachine

    @property
    def stop_sequences(self) -> dict[PartKey, str | None]:
        """Per text part seen, ``(output_index, content_index)``: the stop that ended it."""
        return dict(self._machine.stop_sequences)

    @property
    def status(self) -> str | None:
        """The final response's ``status`` (``"completed"`` after a stop), once known."""
        return self._machine.status

    @property
    def pending(self) -> dict[PartKey, str]:
        """Per open text part: the text held back right now (kept if the upstream drops)."""
        return self._machine.pending


if TYPE_CHECKING:
    # ``SyncAdapterStream`` / ``AsyncAdapterStream`` reporting a ``ResponsesView``.

    class ResponsesStopStream(SyncAdapterStream[_T], ResponsesView):
        """Iterator over Responses stream events with stop sequences applied."""

    class AsyncResponsesStopStream(AsyncAdapterStream[_T], ResponsesView):
        """Async iterator over Responses stream events with stop sequences applied."""

else:
    ResponsesStopStream = SyncAdapterStream
    AsyncResponsesStopStream = AsyncAdapterStream


def truncate_response(response: Any, stops: Stops, include_stop: bool | None = None) -> Any:
    """Apply ``stops`` to a non-streaming Responses API response (a ``dict`` of the wire
    shape), in place, and return it.

    Each output text is cut on its own, as the stream adapter scans each text part: the first
    one with a stop is cut there and ends the response (later parts and items are dropped, the
    item and the response become ``"completed"``, and the response names the stop as
    ``stop_sequence``).
    """
    output = response.get("output") if isinstance(response, dict) else None
    if not isinstance(output, list):
        takes = "truncate_response takes a whole Responses response (a dict of the wire shape)"
        if isinstance(response, dict):
            raise not_readable(takes, response)
        raise TypeError(f"{takes}, not {type(response).__name__}")
    compiled = stop_set(stops, include_stop)
    for position, item in enumerate(output):
        if not isinstance(item, dict) or item.get("type") != "message":
            continue
        content = item.get("content")
        if not isinstance(content, list):
            continue
        for index, part in enumerate(content):
            if not (isinstance(part, dict) and part.get("type") == "output_text"):
                continue
            text, stop = truncate(part.get("text") or "", compiled)
            if stop is not None:
                part["text"] = text
                del content[index + 1 :]
                del output[position + 1 :]
                item["status"] = "completed"
                response.update(status="completed", incomplete_details=None, stop_sequence=stop)
                return response
    return response
