"""Shared support code for the ``wrap`` / ``awrap`` tests.

* ``expected_run`` plays a chunk list through a reference filter the way a stream wrapper must:
  it pulls items until a stop fires, skips empty outputs, and finishes at the end of input.
* ``Snapshot`` records a yielded piece together with the stream's attributes at that moment.
* Counting upstreams (sync and async) record how many items were pulled and how often
  ``close()`` / ``aclose()`` was called on the iterator and on the object it came from.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, Protocol, TypeVar

from stopstream.reference import ReferenceByteStopFilter, ReferenceStopFilter

T = TypeVar("T")


class StreamState(Protocol):
    """The attributes that filters and stream wrappers share."""

    @property
    def stopped(self) -> bool: ...
    @property
    def stop_sequence(self) -> str | None: ...
    @property
    def stop_index(self) -> int | None: ...
    @property
    def stop_reason(self) -> str | None: ...
    @property
    def pending(self) -> str | bytes: ...


@dataclass(frozen=True)
class State:
    """The attributes of a filter or stream at one moment."""

    pending: str | bytes
    stopped: bool
    stop_sequence: str | None
    stop_index: int | None
    stop_reason: str | None

    @classmethod
    def of(cls, obj: StreamState) -> State:
        return cls(obj.pending, obj.stopped, obj.stop_sequence, obj.stop_index, obj.stop_reason)


@dataclass(frozen=True)
class Snapshot:
    """One yielded piece (with its exact type) and the state right after it was produced."""

    piece: str | bytes
    kind: str
    state: State

    @classmethod
    def of(cls, piece: str | bytes, obj: StreamState) -> Snapshot:
        return cls(piece, type(piece).__name__, State.of(obj))


@dataclass
class Run:
    """What a wrapper yields over one upstream, and how it ends."""

    snapshots: list[Snapshot] = field(default_factory=list)
    error: type[BaseException] | None = None
    pulled: int = 0
    final: State | None = None
    # A stop fired by an item (the upstream must then be closed). A stop completed only at the
    # end of input (replace mode turning an incomplete tail into U+FFFD) finds it ended.
    stopped_by_item: bool = field(default=False, compare=False)


def expected_run(
    reference: ReferenceStopFilter | ReferenceByteStopFilter, chunks: Sequence[Any]
) -> Run:
    """The run a stream wrapper must produce, computed with a reference filter.

    A stop that invalid UTF-8 fired (it ended the text for the stops' look-around) leaves a
    decoding error owed, which the filter raises on its next call: the stream raises it after
    its last piece, so the run ends with that error."""
    run = Run()
    for chunk in chunks:
        run.pulled += 1
        try:
            out = reference.feed(chunk)
        except UnicodeDecodeError as error:
            run.error = type(error)
            run.final = State.of(reference)
            return run
        if out:
            run.snapshots.append(Snapshot.of(out, reference))
        if reference.stopped:
            run.final = State.of(reference)
            run.stopped_by_item = True
            run.error = owed_error(reference)
            return run
    try:
        out = reference.finish()
    except UnicodeDecodeError as error:
        run.error = type(error)
        run.final = State.of(reference)
        return run
    if out:
        run.snapshots.append(Snapshot.of(out, reference))
    run.final = State.of(reference)
    run.error = owed_error(reference)
    return run


def owed_error(
    reference: ReferenceStopFilter | ReferenceByteStopFilter,
) -> type[BaseException] | None:
    """The type of the error a stopped (or finished) reference filter still owes, if any."""
    try:
        reference.finish()
    except UnicodeDecodeError as error:
        return type(error)
    return None


class CountingIterator(Generic[T]):
    """An iterator over ``items`` that counts pulls and ``close()`` calls.

    It is its own iterator (``__iter__`` returns ``self``), like a generator or a file.
    """

    def __init__(self, items: Sequence[T]) -> None:
        self._items = list(items)
        self.pulled = 0
        self.closed = 0

    def __iter__(self) -> CountingIterator[T]:
        return self

    def __next__(self) -> T:
        if self.closed:
            raise AssertionError("pulled from a closed upstream")
        if self.pulled >= len(self._items):
            raise StopIteration
        item = self._items[self.pulled]
        self.pulled += 1
        return item

    def close(self) -> None:
        self.closed += 1


class CountingSource(Generic[T]):
    """An iterable with its own ``close()`` whose ``__iter__`` returns a separate iterator,
    like an HTTP response whose body is iterated."""

    def __init__(self, items: Sequence[T]) -> None:
        self.iterator = CountingIterator(items)
        self.closed = 0

    def __iter__(self) -> CountingIterator[T]:
        return self.iterator

    def close(self) -> None:
        self.closed += 1


class AsyncCountingIterator(Generic[T]):
    """An async iterator over ``items`` that counts pulls and ``aclose()`` calls."""

    def __init__(self, items: Sequence[T]) -> None:
        self._items = list(items)
        self.pulled = 0
        self.closed = 0

    def __aiter__(self) -> AsyncCountingIterator[T]:
        return self

    async def __anext__(self) -> T:
        if self.closed:
            raise AssertionError("pulled from a closed upstream")
        if self.pulled >= len(self._items):
            raise StopAsyncIteration
        item = self._items[self.pulled]
        self.pulled += 1
        return item

    async def aclose(self) -> None:
        self.closed += 1


class AsyncCountingSource(Generic[T]):
    """An async iterable with its own ``aclose()`` and a separate async iterator."""

    def __init__(self, items: Sequence[T]) -> None:
        self.iterator = AsyncCountingIterator(items)
        self.closed = 0

    def __aiter__(self) -> AsyncCountingIterator[T]:
        return self.iterator

    async def aclose(self) -> None:
        self.closed += 1


@dataclass
class GeneratorLog:
    """What a logging generator did: items produced, and whether its ``finally`` ran."""

    produced: list[Any] = field(default_factory=list)
    finalized: int = 0
    closed_by_exit: int = 0


def logging_generator(items: Sequence[T], log: GeneratorLog) -> Iterator[T]:
    """A generator over ``items`` that records what it produced and how it ended."""
    try:
        for item in items:
            log.produced.append(item)
            yield item
    except GeneratorExit:
        log.closed_by_exit += 1
        raise
    finally:
        log.finalized += 1


async def async_logging_generator(items: Sequence[T], log: GeneratorLog) -> AsyncIterator[T]:
    """An async generator over ``items`` that records what it produced and how it ended."""
    try:
        for item in items:
            log.produced.append(item)
            yield item
    except GeneratorExit:
        log.closed_by_exit += 1
        raise
    finally:
        log.finalized += 1
