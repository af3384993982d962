"""Indexed text streams: the base of the adapters whose events carry a list of them (OpenAI
Chat choices, Gemini candidates), each with its ``index``.

One record per text stream (``TextStream``: its filter, status, stop and finish reason), as the
Responses adapter keeps one per text part; the machine keeps them by index, with the open ones'
filters in a table of their own that the fast paths read (one dict lookup per chunk).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar

from stopstream._adapter import (
    CLOSING_PHASE,
    DRAINING_PHASE,
    Emit,
    OnStop,
    OpenText,
    Phases,
    View,
)
from stopstream._core import StopFilter
from stopstream._models import JSON

if TYPE_CHECKING:
    from stopstream._types import Stops

OPEN, STOPPED, FINISHED = 0, 1, 2


class TextStream:
    """One indexed text stream being scanned."""

    __slots__ = ("filter", "finish_reason", "status", "stop_index", "stop_sequence")

    def __init__(self, f: StopFilter) -> None:
        self.filter = f
        self.status = OPEN
        self.stop_sequence: str | None = None  # fired here, or applied upstream and named
        self.stop_index: int | None = None
        self.finish_reason: str | None = None  # as sent to the client


class IndexedMachine(Phases):
    """A machine over chunks holding a list (``items``) of indexed text streams.

    Subclasses scan one open stream's item (``_scan``); this base finds its record, drops the
    items of a stopped stream, passes a finished one's through, rebuilds the chunk when an item
    changed, and decides when every stream is done.
    """

    items: ClassVar[str]  # the chunk's list: "choices", "candidates"
    stop_finish: ClassVar[str]  # the finish reason of a stream a stop ended

    def __init__(
        self,
        stops: Stops,
        include_stop: bool | None,
        on_stop: OnStop,
        count: int | None,
        count_name: str,
    ) -> None:
        super().__init__(stops, include_stop, on_stop)
        if count is not None and (
            isinstance(count, bool) or not isinstance(count, int) or count < 1
        ):
            raise ValueError(f"{count_name} must be a positive int or None, not {count!r}")
        self._count = count
        self._streams: dict[int, TextStream] = {}
        # The open streams' filters: what the fast paths (an SDK driver, the native SSE stage)
        # feed, so that a stream has one filter whoever feeds it.
        self.open_filters: dict[int, StopFilter] = {}
        self.stopped = False  # every stream stopped or finished, and a stop fired

    def view(self) -> View:
        return IndexedView(self)

    # --- what is reported -------------------------------------------------------------------

    @property
    def stop_sequences(self) -> dict[int, str | None]:
        return {i: s.stop_sequence for i, s in self._streams.items()}

    @property
    def stop_indices(self) -> dict[int, int | None]:
        return {i: s.stop_index for i, s in self._streams.items()}

    @property
    def finish_reasons(self) -> dict[int, str | None]:
        return {i: s.finish_reason for i, s in self._streams.items()}

    @property
    def pending(self) -> dict[int, str]:
        """Per open stream: the text held back."""
        return {i: f.pending for i, f in self.open_filters.items()}

    @property
    def complete(self) -> bool:
        """Every stream has its finish reason (``count`` of them when given), or the stream
        stopped here."""
        return self.stopped or self._all_done()

    def text_filters(self) -> list[OpenText]:
        """The open streams' indices and filters."""
        return [OpenText(i, f) for i, f in self.open_filters.items() if type(i) is int]

    def _all_done(self) -> bool:
        if self.open_filters or not self._streams:
            return False
        return self._count is None or len(self._streams) >= self._count

    # --- feeding ----------------------------------------------------------------------------

    def _feed_items(self, chunk: JSON, items: list[Any], keep: bool) -> list[Emit]:
        """The chunk with each item scanned. A chunk whose items were all dropped goes too,
        unless ``keep`` (it carries usage)."""
        kept: list[Any] = []
        changed = False
        for position, item in enumerate(items):
            out = self._item(item, position, chunk) if isinstance(item, dict) else item
            if out is not item:
                changed = True
            if out is not None:
                kept.append(out)
        emitted: JSON | None = chunk
        if changed:
            emitted = None if not kept and not keep else {**chunk, self.items: kept}
        if self._all_done() and any(s.status == STOPPED for s in self._streams.values()):
            self.stopped = True
            self._phase = CLOSING_PHASE if self._on_stop == "close" else DRAINING_PHASE
        return [] if emitted is None else [(emitted, chunk)]

    def _item(self, item: JSON, position: int, chunk: JSON) -> JSON | None:
        index = item.get("index")
        if not isinstance(index, int):
            index = position
        stream = self._streams.get(index)
        if stream is None:
            stream = self._streams[index] = TextStream(StopFilter(self._set))
            self.open_filters[index] = stream.filter
        if stream.status == STOPPED:
            return None
        if stream.status == FINISHED:
            return item
        return self._scan(item, index, stream, chunk)

    def _scan(self, item: JSON, index: int, stream: TextStream, chunk: JSON) -> JSON | None:
        """One item of an open stream: the item to emit (the same object when unchanged)."""
        raise NotImplementedError

    def _stopped(self, index: int, stream: TextStream) -> None:
        f = stream.filter
        stream.status = STOPPED
        self.open_filters.pop(index, None)
        stream.stop_sequence = f.stop_sequence
        stream.stop_index = f.stop_index
        stream.finish_reason = self.stop_finish

    def _finished(self, index: int, stream: TextStream, finish: object) -> None:
        stream.status = FINISHED
        self.open_filters.pop(index, None)
        stream.finish_reason = finish if isinstance(finish, str) else str(finish)


class IndexedView(View):
    """What a stream of indexed text streams reports (OpenAI choices, Gemini candidates, by
    ``index``), read from its machine."""

    _machine: IndexedMachine

    @property
    def stop_sequences(self) -> dict[int, str | None]:
        """Per index seen: the stop that ended it, or ``None``.

        A stop fired here, or one the upstream applied and named (an OpenAI choice's
        ``stop_reason``, as vLLM sends it). ``None`` for a stream still open or finished
        otherwise.
        """
        return self._machine.stop_sequences

    @property
    def stop_indices(self) -> dict[int, int | None]:
        """Per index seen: the position of its stop in ``stops``, or ``None``."""
        return self._machine.stop_indices

    @property
    def finish_reasons(self) -> dict[int, str | None]:
        """Per index seen: the finish reason sent to the client so far."""
        return self._machine.finish_reasons

    @property
    def stop_sequence(self) -> str | None:
        """``stop_sequences`` of index 0 (the only one unless several were requested)."""
        stream = self._machine._streams.get(0)
        return None if stream is None else stream.stop_sequence

    @property
    def stopped(self) -> bool:
        """Every index has stopped or finished, and at least one stop fired here."""
        return self._machine.stopped

    @property
    def complete(self) -> bool:
        """Every index has its finish reason or stopped here: ``False`` while the stream runs
        and when the upstream ended or failed before that (a dropped stream)."""
        return self._machine.complete

    @property
    def pending(self) -> dict[int, str]:
        """Per open index: the text held back, kept (not released) by a dropped stream."""
        return self._machine.pending
