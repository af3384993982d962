"""The compiled core of stopstream: the API reference of its classes and functions.

Every filter follows the rules of the contract (``docs/contract.md``): the earliest-ending stop
wins (the longest among those ending there, then the first listed), output is cut before the stop
(or after it with ``include_stop=True``), and only the longest suffix that could still begin a
stop is held back.
"""

from collections.abc import Awaitable, Callable, Iterable, Sequence
from types import TracebackType
from typing import Any, Generic, Literal, SupportsIndex, TypeVar, final

from typing_extensions import Self, disjoint_base

from stopstream._types import BytesLike as _BytesLike
from stopstream._types import SkipRegions as _SkipRegions
from stopstream._types import StopItem as _StopItem
from stopstream._types import StopReason as _StopReason
from stopstream._types import Stops as _Stops
from stopstream._types import TokenStopReason as _TokenStopReason

__all__ = [
    "ByteStopFilter",
    "Regex",
    "Stop",
    "StopFilter",
    "StopSet",
    "StopStream",
    "TokenPiece",
    "TokenStopFilter",
    "Vocab",
    "__version__",
    "feed_batch",
    "truncate",
]

__version__: str
"""The package version (from ``rust/Cargo.toml``)."""

_Chunk = TypeVar("_Chunk", str, bytes)
_T = TypeVar("_T")

@final
class Stop:
    """A literal stop with its own include flag (contract §6.1, §6.2).

    Immutable, hashable, equal by value; mixes with ``str`` in any stop list.
    """

    def __new__(cls, text: str, *, include: bool | None = None) -> Self:
        """A literal stop.

        Args:
            text: the stop (empty is a ``ValueError`` when the list is compiled).
            include: keep this stop in the output when it fires; ``None``: the filter's
                ``include_stop``.
        """
    @property
    def text(self) -> str:
        """The stop text."""
    @property
    def include(self) -> bool | None:
        """This stop's include flag; ``None``: the filter's ``include_stop``."""
    def __eq__(self, value: object, /) -> bool:
        """Equal to a ``Stop`` with the same text and flag."""
    def __hash__(self) -> int:
        """A hash consistent with ``==``."""

@final
class Regex:
    """A pattern stop in the syntax of Rust's ``regex`` crate (contract §6.3).

    Unicode on; ``^``/``\\A`` are the start of the stream, ``$``/``\\z`` its end (or line ends
    under ``(?m)``); ``\\b``/``\\B`` see the characters around the match. The earliest-ending
    match fires (then the longest, then the first listed); ``stop_sequence`` is the matched
    text. Immutable, hashable, equal by value.
    """

    def __new__(
        cls, pattern: str, *, include: bool | None = None, size_limit: int | None = None
    ) -> Self:
        """A pattern stop; the pattern is checked when a stop list is compiled, where an
        invalid or empty-matching pattern, or one over its size limit, is a ``ValueError``
        naming its position.

        Args:
            pattern: the pattern.
            include: keep the match in the output when it fires; ``None``: the filter's
                ``include_stop``.
            size_limit: the most heap the compiled pattern may take, in bytes (``None``: the
                engine's default, 10 MiB). Compiling stops as soon as it is passed, so a small
                limit bounds the time an untrusted pattern can cost; a pattern whose fast
                automaton would pass it runs on its smaller, slower one instead.

        Raises:
            ValueError: ``size_limit`` is 0.
            OverflowError: ``size_limit`` is negative.
        """
    @property
    def pattern(self) -> str:
        """The pattern."""
    @property
    def include(self) -> bool | None:
        """This stop's include flag; ``None``: the filter's ``include_stop``."""
    @property
    def size_limit(self) -> int | None:
        """The most heap the compiled pattern may take, in bytes; ``None``: the default."""
    @property
    def max_len(self) -> int | None:
        """The longest match in code points; ``None`` if unbounded (then held text is too).

        Raises:
            ValueError: the pattern is invalid or matches the empty string.
        """
    def __eq__(self, value: object, /) -> bool:
        """Equal to a ``Regex`` with the same pattern, flag and size limit."""
    def __hash__(self) -> int:
        """A hash consistent with ``==``."""

@final
class StopSet:
    """A stop list compiled once, accepted wherever ``stops`` is.

    A gateway builds one per distinct list and hands it to every filter it creates; building a
    filter from a ``StopSet`` skips parsing and compiling. A filter given a ``StopSet`` takes
    the set's options: an option passed again with the same value is accepted, one that differs
    is a ``ValueError``. Immutable, hashable, equal by value (stops and options), picklable.
    """

    def __new__(
        cls,
        stops: _Stops,
        include_stop: bool = False,
        skip: _SkipRegions = None,
        skip_until: str | None = None,
    ) -> Self:
        """Compile ``stops``.

        Args:
            stops: ``None`` (no stops), one ``str``, ``Stop`` or ``Regex``, an iterable of them,
                or a ``StopSet`` (its options then apply, see the class docstring).
            include_stop: keep the stop in the output; not given: ``False``, or the given set's own.
            skip: ``(open, close)`` literal pairs: regions the stops do not see (contract §6.4).
            skip_until: stops are inactive until this literal marker has occurred.

        Raises:
            TypeError: ``stops`` is not ``None``, a ``str``, an iterable of ``str`` or a
                ``StopSet``.
            ValueError: a stop is empty, or ``include_stop`` differs from a given set's.
            MemoryError: the compiled list would exceed the size limit.
        """
    @property
    def stops(self) -> tuple[_StopItem, ...]:
        """The stops as given, in order (``stop_index`` indexes this tuple)."""
    @property
    def include_stop(self) -> bool:
        """Whether filters built from this set keep the stop in their output."""
    @property
    def skip(self) -> tuple[tuple[str, str], ...] | None:
        """The skip pairs, or ``None``."""
    @property
    def skip_until(self) -> str | None:
        """The ``skip_until`` marker, or ``None``."""
    def __len__(self) -> int:
        """The number of stops, duplicates included."""
    def __eq__(self, value: object, /) -> bool:
        """Equal to another ``StopSet`` with equal stops and options."""
    def __hash__(self) -> int:
        """A hash of the stops and options, consistent with ``==``."""
    def __reduce__(
        self,
    ) -> tuple[
        type[StopSet],
        tuple[tuple[_StopItem, ...], bool, tuple[tuple[str, str], ...] | None, str | None],
    ]:
        """Pickled as its arguments; unpickling compiles the list again."""

@final
class StopFilter:
    """Incremental stop-sequence filter over ``str`` chunks."""

    def __new__(
        cls,
        stops: _Stops,
        include_stop: bool = False,
        *,
        skip: _SkipRegions = None,
        skip_until: str | None = None,
    ) -> Self:
        """Create a filter.

        Args:
            stops: ``None``, one ``str``, ``Stop`` or ``Regex``, an iterable of them, or a
                ``StopSet``.
            include_stop: keep the stop in the output; not given: ``False``, or the set's own.
            skip: ``(open, close)`` literal pairs: regions the stops do not see (contract §6.4).
            skip_until: stops are inactive until this literal marker has occurred.

        Raises:
            TypeError: ``stops`` has the wrong type.
            ValueError: a stop is empty, or ``include_stop`` differs from the set's.
        """
    def feed(self, text: str) -> str:
        """Feed a chunk; returns the text now safe to emit (possibly ``""``).

        After a stop fired every later chunk returns ``""``.

        Raises:
            TypeError: ``text`` is not a ``str``.
            RuntimeError: the filter is re-entered while in use.
        """
    def finish(self) -> str:
        """End the stream: returns the held-back text (``""`` after a stop)."""
    def reset(self) -> None:
        """Start over with the same stops and options."""
    def _quiet(self, on: bool, /) -> None:
        """Private (the vLLM plugin's ``min_tokens``): while quiet no stop fires, and afterwards
        none that completed meanwhile does; the holdback stays minimal. ``reset()`` ends it.

        Raises:
            ValueError: the list is not a composed list of literal stops (``Stop`` items or
                skip regions, no ``Regex``).
        """
    @property
    def stops(self) -> tuple[_StopItem, ...]:
        """The stops as given, in order."""
    @property
    def include_stop(self) -> bool:
        """Whether the stop is kept in the output."""
    @property
    def stopped(self) -> bool:
        """Whether a stop fired."""
    @property
    def stop_sequence(self) -> str | None:
        """The text the stop that fired matched (a literal stop itself), else ``None``."""
    @property
    def stop_index(self) -> int | None:
        """The position in ``stops`` of the stop that fired, else ``None``."""
    @property
    def stop_reason(self) -> _StopReason | None:
        """``"stop_sequence"`` after a stop, ``"end"`` after ``finish()``, else ``None``."""
    @property
    def pending(self) -> str:
        """The text held back because it could begin a stop."""

@final
class ByteStopFilter:
    """Incremental stop-sequence filter over UTF-8 byte chunks split anywhere."""

    def __new__(
        cls,
        stops: _Stops,
        include_stop: bool = False,
        errors: str = "strict",
        *,
        skip: _SkipRegions = None,
        skip_until: str | None = None,
    ) -> Self:
        """Create a filter.

        Args:
            stops: ``None``, one ``str``, ``Stop`` or ``Regex``, an iterable of them, or a
                ``StopSet``.
            include_stop: keep the stop in the output; not given: ``False``, or the set's own.
            errors: ``"strict"`` (invalid UTF-8 raises) or ``"replace"`` (becomes U+FFFD).
            skip: ``(open, close)`` literal pairs: regions the stops do not see (contract §6.4).
            skip_until: stops are inactive until this literal marker has occurred.

        Raises:
            TypeError: ``stops`` has the wrong type.
            ValueError: a stop is empty, ``errors`` is unknown, or ``include_stop`` differs
                from the set's.
        """
    def feed(self, data: _BytesLike) -> bytes:
        """Feed a chunk; returns the bytes now safe to emit (possibly ``b""``).

        With ``errors="strict"`` an invalid sequence ends the text for the stops' look-around
        as ``finish()`` would (contract §9.9): when that fires a stop (``\\bend\\b`` after
        ``b"the end"``), this call returns the output up to the cut with the stop reported,
        and the ``UnicodeDecodeError`` is raised by the next ``feed()`` or ``finish()``, once.
        Otherwise the call that meets the invalid sequence raises and consumes nothing.

        Raises:
            TypeError: ``data`` is not bytes-like.
            UnicodeDecodeError: invalid UTF-8 with ``errors="strict"`` and no stop before it
                (or the one owed after a stop that the invalid sequence ended the text for).
            RuntimeError: the filter is re-entered while in use.
        """
    def finish(self) -> bytes:
        """End the stream: returns the held-back bytes.

        With ``errors="strict"`` an incomplete character at the end ends the text before it
        as ``feed()`` does for an invalid sequence: a stop that the end fires there is
        returned and reported, and the error is raised by the next call, once.

        Raises:
            UnicodeDecodeError: the stream ends inside a character with ``errors="strict"``
                and no stop fires before it (or the one owed, as for ``feed()``).
        """
    def reset(self) -> None:
        """Start over with the same stops and options."""
    @property
    def stops(self) -> tuple[_StopItem, ...]:
        """The stops as given, in order."""
    @property
    def include_stop(self) -> bool:
        """Whether the stop is kept in the output."""
    @property
    def errors(self) -> str:
        """``"strict"`` or ``"replace"``."""
    @property
    def stopped(self) -> bool:
        """Whether a stop fired."""
    @property
    def stop_sequence(self) -> str | None:
        """The text the stop that fired matched (a literal stop itself), else ``None``."""
    @property
    def stop_index(self) -> int | None:
        """The position in ``stops`` of the stop that fired, else ``None``."""
    @property
    def stop_reason(self) -> _StopReason | None:
        """``"stop_sequence"`` after a stop, ``"end"`` after ``finish()``, else ``None``."""
    @property
    def pending(self) -> bytes:
        """The bytes held back: text that could begin a stop, then an incomplete character."""

@final
class StopStream(Generic[_Chunk]):
    """Iterator applying stop sequences to an upstream iterable of chunks (see ``wrap``)."""

    def __new__(
        cls,
        chunks: Iterable[str] | Iterable[_BytesLike] | Iterable[Any],
        stops: _Stops = None,
        include_stop: bool = False,
        errors: str = "strict",
    ) -> Self:
        """Wrap ``chunks``; ``stopstream.wrap`` is the entry point.

        Args:
            chunks: an iterable of ``str`` or of bytes-like chunks (the first item decides).
            stops: ``None``, one ``str``, an iterable of ``str``, or a ``StopSet``.
            include_stop: keep the stop in the output; not given: ``False``, or the set's own.
            errors: ``"strict"`` or ``"replace"``, for bytes chunks.
        Raises:
            TypeError: ``chunks`` is not iterable, or ``stops`` has the wrong type.
            ValueError: a stop is empty, ``errors`` is unknown, or ``include_stop`` differs
                from the set's.
        """
    def __iter__(self) -> Self:
        """The stream itself."""
    def __next__(self) -> _Chunk:
        """The next non-empty piece.

        Raises:
            StopIteration: after the piece in which a stop fired, or at the upstream's end.
            TypeError: an item is neither ``str`` nor bytes-like, or changes kind.
            UnicodeDecodeError: invalid UTF-8 in bytes chunks with ``errors="strict"``; when
                the text that ends there fires a stop (contract §9.9), the last piece is
                yielded and the upstream closed first, and the error comes on the next pull.
            RuntimeError: the stream is already being iterated.
        """
    def close(self) -> None:
        """Stop the stream and close the upstream (once; later calls do nothing).

        From another thread (or from the upstream's own code) during a pull it returns at once
        and never raises: ``chunks``, when it is not its own iterator, is closed right away (an
        SDK stream's ``close()`` drops the connection, ending the pending read); the iterator
        is closed by the pull as it returns, and the stream then ends.
        """
    def __enter__(self) -> Self:
        """The stream itself."""
    def __exit__(
        self,
        *_args: type[BaseException] | BaseException | TracebackType | None,
    ) -> bool:
        """Close the stream; exceptions propagate."""
    @property
    def stops(self) -> tuple[_StopItem, ...]:
        """The stops as given, in order."""
    @property
    def include_stop(self) -> bool:
        """Whether the stop is kept in the output."""
    @property
    def stopped(self) -> bool:
        """Whether a stop fired."""
    @property
    def stop_sequence(self) -> str | None:
        """The text the stop that fired matched (a literal stop itself), else ``None``."""
    @property
    def stop_index(self) -> int | None:
        """The position in ``stops`` of the stop that fired, else ``None``."""
    @property
    def stop_reason(self) -> _StopReason | None:
        """``"stop_sequence"`` after a stop, ``"end"`` at the upstream's end, else ``None``."""
    @property
    def pending(self) -> _Chunk:
        """The text (or bytes) held back."""

def truncate(
    text: str,
    stops: _Stops,
    include_stop: bool = False,
    *,
    skip: _SkipRegions = None,
    skip_until: str | None = None,
) -> tuple[str, str | None]:
    """Cut a whole text at the first stop.

    Args:
        text: the text.
        stops: ``None``, one ``str``, ``Stop`` or ``Regex``, an iterable of them, or a
            ``StopSet``.
        include_stop: keep the stop; not given: ``False``, or the set's own.
        skip: ``(open, close)`` literal pairs: regions the stops do not see (contract §6.4).
        skip_until: stops are inactive until this literal marker has occurred.

    Returns:
        ``(text cut, stop that fired or None)``; the text is returned as is when no stop fires.

    Raises:
        TypeError: ``text`` is not a ``str``, or ``stops`` has the wrong type.
        ValueError: a stop is empty, or ``include_stop`` differs from the set's.
    """

@disjoint_base
class Vocab:
    """A tokenizer's vocabulary: token id to bytes, in one contiguous buffer (``stopstream.Vocab``
    adds the constructors that read a tokenizer object).

    ``tokens[i]`` is id ``i``'s bytes (``None`` leaves the id unassigned: feeding it is an
    error); ``special`` ids contribute no text, as when decoding with special tokens skipped.
    ``strip_leading_space`` drops one space at the very start of a stream's text, as
    SentencePiece-style decoders do.
    """

    def __new__(
        cls,
        tokens: Iterable[bytes | None],
        *,
        special: Iterable[int] | None = None,
        strip_leading_space: bool = False,
    ) -> Self: ...
    def __len__(self) -> int:
        """The number of ids, assigned or not: valid ids are ``range(len(vocab))``."""
    def token_bytes(self, id: int) -> bytes | None:
        """The bytes of ``id`` (``b""`` for a special token); ``None`` if it is not in the
        vocabulary."""
    def is_special(self, id: int) -> bool:
        """Whether ``id`` is a special token."""
    @property
    def strip_leading_space(self) -> bool:
        """Whether a stream's first space is dropped (SentencePiece-style decoders)."""

@final
class TokenPiece:
    """What one ``feed``, ``finish`` or batch entry released. Immutable; equal pieces may be
    one shared object (the usual step, one id in and its text out, returns the same piece for
    the same token every time)."""

    def __new__(cls, text: str, tokens: int) -> Self: ...
    @property
    def text(self) -> str:
        """The text that is now safe to emit (may be empty)."""
    @property
    def tokens(self) -> int:
        """How many more input tokens this text accounts for: forward that many ids and
        logprobs with it."""
    def __eq__(self, value: object, /) -> bool:
        """Equal ``text`` and ``tokens``."""
    def __hash__(self) -> int:
        """Hash of ``(text, tokens)``."""

@final
class TokenStopFilter:
    """Stop sequences and stop token ids over a stream of token ids: detokenizes and matches
    in one pass, and counts which input tokens the emitted text covers."""

    def __new__(
        cls,
        vocab: Vocab,
        stops: _Stops,
        *,
        include_stop: bool = False,
        stop_token_ids: Iterable[int] | None = None,
        errors: str = "replace",
        skip: _SkipRegions = None,
        skip_until: str | None = None,
    ) -> Self:
        """Create a filter.

        Args:
            vocab: the tokenizer's vocabulary.
            stops: ``None``, one ``str``, ``Stop`` or ``Regex``, an iterable of them, or a
                ``StopSet``: matched over the decoded text exactly as ``StopFilter`` matches it.
            include_stop: keep the stop (and a stop token's own text) in the output; not
                given: ``False``, or the set's own.
            stop_token_ids: ids that end the stream where they occur.
            errors: ``"replace"`` (invalid UTF-8 becomes U+FFFD) or ``"strict"``.
            skip: ``(open, close)`` literal pairs: regions the stops do not see (contract §6.4).
            skip_until: stops are inactive until this literal marker has occurred.

        Raises:
            TypeError: an argument has the wrong type.
            ValueError: a stop or a stop token id is invalid, or an option differs from the
                ``StopSet``'s own.
        """
    def feed(self, ids: SupportsIndex | Iterable[int]) -> TokenPiece:
        """Take the next token ids (an iterable of ints, or one id as an ``int`` or any
        non-iterable with ``__index__``: the usual step, and the fastest); return the text now
        safe to emit and how many tokens it releases. An id outside the vocabulary is a
        ``ValueError`` naming it, and the call consumes nothing; ids after a stop in the same
        call are ignored unchecked."""
    def finish(self) -> TokenPiece:
        """End of input: release what is held back (idempotent). The end of the stream can
        settle a regex stop (``$``, ``\\b``): then it returns the text before the cut, with
        ``stop_reason == "stop_sequence"``."""
    def reset(self) -> None:
        """Start a new stream with the same vocabulary, stops and settings."""
    @property
    def vocab(self) -> Vocab:
        """The vocabulary."""
    @property
    def stops(self) -> tuple[_StopItem, ...]:
        """The stops as given, in order (``stop_index`` indexes this tuple)."""
    @property
    def stop_token_ids(self) -> tuple[int, ...]:
        """The stop token ids, sorted, without duplicates."""
    @property
    def include_stop(self) -> bool:
        """Whether the stop (sequence, or stop token's text) is emitted."""
    @property
    def errors(self) -> str:
        """``"replace"`` (invalid UTF-8 becomes U+FFFD) or ``"strict"`` (it raises)."""
    @property
    def stopped(self) -> bool:
        """Whether a stop sequence or a stop token ended the stream."""
    @property
    def stop_sequence(self) -> str | None:
        """The text the stop that fired matched (a literal stop itself), or ``None``."""
    @property
    def stop_index(self) -> int | None:
        """The index in ``stops`` of the stop sequence that fired, or ``None``."""
    @property
    def stop_reason(self) -> _TokenStopReason | None:
        """``"stop_sequence"``, ``"stop_token"``, ``"end"`` after ``finish()``, or ``None``."""
    @property
    def stop_token_id(self) -> int | None:
        """The stop token id that ended the stream, or ``None``."""
    @property
    def pending(self) -> str:
        """The text held back right now (without an incomplete UTF-8 character)."""

def feed_batch(
    filters: Sequence[TokenStopFilter], ids_per_filter: Sequence[SupportsIndex | Iterable[int]]
) -> list[TokenPiece]:
    """Feed ``ids_per_filter[i]`` to ``filters[i]`` for every ``i`` in one call; the result
    equals feeding each alone. An entry is what ``TokenStopFilter.feed`` takes (one ``int`` per
    stream is the usual step, and the fastest). The Rust work runs with the GIL released.
    Filters may use different vocabularies, and one filter may appear more than once (its
    entries are fed in order).

    All or nothing: an error in any entry changes no filter. What feeding ``filters[i]`` alone
    with ``ids_per_filter[i]`` would raise (a bad id, ids of the wrong type, a finished filter,
    invalid UTF-8 in strict mode, an error of the ids' own iterable) is raised as the same
    exception type with its message prefixed ``ids_per_filter[i]: `` (for a
    ``UnicodeDecodeError``, its reason; encoding, object, start and end are kept), chained from
    the original (``__cause__``). Only an unusable ``filters[i]`` (not a ``TokenStopFilter``,
    or in use by another call) is named ``filters[i]``."""

# ---------------------------------------------------------------------------------------------
# Private machinery: the native parts of the package's own drivers (``stopstream._lifecycle``,
# ``stopstream.sse``, the provider adapters) and readers (``stopstream.Vocab.from_tokenizers``).
# Importable by name, absent from ``__all__``, and not part of the API: they change with the
# package.

@disjoint_base
class SyncDriver:
    """The sync driver of the stream lifecycle: pulls from an upstream, feeds a stage, and
    follows the lifecycle's rules (the base of ``StopStream`` and of the provider adapters'
    sync streams). Dropped before its end, reference cycles included, it closes the upstream.
    """

    def __new__(cls, source: Iterable[Any], stage: Any, *_args: Any, **_kwargs: Any) -> Self:
        """A driver of ``stage`` (``push(item)`` returning a piece or a list of items,
        ``closing``, ``end()``; or the native SSE stage) over ``source``; further arguments
        are a subclass's.

        Raises:
            TypeError: ``source`` is not iterable.
        """
    def __iter__(self) -> Self:
        """The stream itself."""
    def __next__(self) -> Any:
        """The next output item.

        Raises:
            StopIteration: the stream ended.
            RuntimeError: the stream is already being iterated.
        """
    def close(self) -> None:
        """Stop the stream and close the upstream (once; later calls do nothing); see
        ``StopStream.close``."""
    def __del__(self) -> None:
        """Close the upstream of a stream dropped before its end (the finalizer, by name, for
        subclasses made in Python)."""
    def __enter__(self) -> Self:
        """The stream itself."""
    def __exit__(
        self,
        *_args: type[BaseException] | BaseException | TracebackType | None,
    ) -> bool:
        """Close the stream; exceptions propagate."""

@disjoint_base
class AsyncDriver:
    """The async driver of the stream lifecycle (``stopstream._lifecycle.AsyncPull``).

    It holds the stream's state, and its pulls and closes carry out the actions of the one
    lifecycle state machine that the sync driver (``SyncDriver``) follows too.
    """

    def __new__(cls, *_args: Any, **_kwargs: Any) -> Self:
        """An unstarted driver; the subclass's ``__init__`` calls ``_start``."""
    def _start(self, iterator: Any, source: Any, stage: Any) -> None:
        """Set the upstream iterator, the object given (``None`` when it is the iterator)
        and the stage (a Python stage, or a native one: ``_FilterStage``, ``_SSEStage``,
        ``_SDKStage``). Once only.

        Raises:
            RuntimeError: the driver was started already.
        """
    def __aiter__(self) -> Self:
        """The stream itself."""
    def __anext__(self) -> Awaitable[Any]:
        """The next pull: an ``AsyncPullStep``, which does nothing until first awaited (or
        sent to)."""
    def aclose(self) -> Awaitable[None]:
        """End the stream and close the upstream (once; later calls do nothing): an
        ``AsyncPullStep`` that awaits each object's ``aclose()`` (else ``close()``).

        From another task while a pull waits on the upstream, it returns at once without
        raising: the object given is closed now where it is not the iterator itself, and the
        waiting pull closes the iterator as soon as it returns, then ends.
        """
    @property
    def _stage(self) -> Any:
        """The stage given to ``_start`` (``None`` before)."""
    @property
    def _running(self) -> bool:
        """Whether a pull is in progress."""

@final
class AsyncPullStep(Generic[_T]):
    """One pull of an ``AsyncDriver`` (or its ``aclose()``), with a coroutine's protocol.

    ``await`` returns the next piece (raises ``StopAsyncIteration`` at the end). Like a
    coroutine it does nothing until first sent to, cannot be awaited twice, and when dropped
    while suspended it is closed (the upstream's awaitable closed, the stream ended).
    """

    def __await__(self) -> Self:
        """The awaitable itself (its own iterator)."""
    def __iter__(self) -> Self:
        """The awaitable itself."""
    def __next__(self) -> Any:
        """``send(None)``."""
    def send(self, value: Any, /) -> Any:
        """Resume the pull with ``value``: returns what it yields to the event loop next.

        Raises:
            StopIteration: the pull returned; ``value`` holds the piece.
            StopAsyncIteration: the stream ended.
            RuntimeError: awaited again after it finished, or another pull is in progress.
            TypeError: a value other than ``None`` sent before the start.
            ValueError: called from within its own step.
        """
    def throw(self, typ: Any, val: Any = None, tb: TracebackType | None = None, /) -> Any:
        """Raise the exception where the pull waits (the upstream's awaitable, or a close in
        progress); returns what it yields next, as ``send`` does."""
    def close(self) -> None:
        """End the pull where it waits (a ``GeneratorExit`` thrown in), as a coroutine's
        ``close()`` does.

        Raises:
            RuntimeError: the pull went on instead of ending.
        """

@final
class _FilterStage:
    """``awrap``'s stage: the built-in filter (``wrap``'s own), fed natively by the async
    driver; the first item decides between text and bytes. Its attributes are what
    ``awrap``'s stream reports."""

    def __new__(
        cls, stops: _Stops = None, include_stop: bool = False, errors: str = "strict"
    ) -> Self:
        """The filter of ``stops`` (see ``StopStream``).

        Raises:
            TypeError: ``stops`` has the wrong type.
            ValueError: a stop is empty, ``errors`` is unknown, or ``include_stop`` differs
                from the set's.
        """
    @property
    def stops(self) -> tuple[_StopItem, ...]:
        """The stops as given, in order."""
    @property
    def include_stop(self) -> bool:
        """Whether the stop is kept in the output."""
    @property
    def stopped(self) -> bool:
        """Whether a stop fired."""
    @property
    def stop_sequence(self) -> str | None:
        """The text the stop that fired matched (a literal stop itself), else ``None``."""
    @property
    def stop_index(self) -> int | None:
        """The position in ``stops`` of the stop that fired, else ``None``."""
    @property
    def stop_reason(self) -> _StopReason | None:
        """``"stop_sequence"`` after a stop, ``"end"`` at the upstream's end, else ``None``."""
    @property
    def pending(self) -> str | bytes:
        """The text (or bytes) held back."""

@final
class _SDKStage:
    """The lifecycle stage of the SDK adapters (``stopstream.openai.wrap_chat``,
    ``stopstream.anthropic.wrap_messages``): handles the common SDK event natively (a text
    delta of an open text stream that fires no stop: the event itself, or the event ``replace``
    makes with the released text) and hands every other event to ``driver``."""

    def __new__(
        cls,
        driver: Any,
        open: dict[Any, StopFilter],
        replace: Callable[[Any, str], Any],
        sdk: Literal["chat", "messages"],
    ) -> Self:
        """``driver``: a ``ModelDriver`` (``push``, ``end``, ``closing``); ``open``: the
        filters of the open text streams, by index, which only the driver's side writes;
        ``replace(event, text)``: the event with its text replaced; ``sdk``: whose events they
        are."""
    def push(self, item: Any) -> list[Any]:
        """Feeds one event; returns the events to emit."""
    @property
    def closing(self) -> bool:
        """Every text stream stopped with ``on_stop="close"``: close the upstream, then
        ``end``."""
    def end(self) -> list[Any]:
        """The upstream is done: the events still owed."""

@final
class _SSEStage:
    """The lifecycle stage of ``stopstream.sse``: parses the body natively, handles the common
    event (a text delta of an open text stream that fires no stop: forwarded as the same bytes,
    or with only its text string replaced), and hands every other event to ``slow``."""

    def __new__(
        cls,
        slow: Callable[[Any, bytes, bytes | int | None], bytes],
        state: Callable[[], tuple[bool, bool, list[tuple[Any, ...]], int | None]],
        end: Callable[[bytes, bytes | int | None], bytes],
        shape: Literal["chat", "messages", "responses", "gemini"],
        event: type[Any],
    ) -> Self:
        """The Python side (a ``stopstream.sse.SSEDriver``'s): ``slow(event, eol, seen)``, the
        bytes written for an event not handled natively; ``state()``, read after each call
        (whether the common event may be handled natively, closing, the open text streams'
        filters, the last sequence number); ``end(eol, seen)``, the bytes written at the end of
        the body. ``shape``: the provider's event shape (OpenAI Chat Completions, Anthropic
        Messages, OpenAI Responses, Gemini); ``event``: the class of the events handed to
        ``slow`` (``stopstream.sse.Event``)."""
    def push(self, item: _BytesLike | str) -> bytes:
        """Parses a body chunk; returns the bytes to forward (empty for none)."""
    @property
    def closing(self) -> bool:
        """Every text stream stopped with ``on_stop="close"``: close the upstream, then ``end``."""
    def end(self) -> list[bytes]:
        """The end of the body: the block a final ``\\r`` completes, then what is still owed."""
    @property
    def partial(self) -> bool:
        """Some of an unfinished block has been received."""

def _tokenizer_tokens(
    config: str, vocab: dict[str, int], size: int, /
) -> tuple[list[bytes | None], list[int], bool]:
    """What ``stopstream.Vocab.from_tokenizers`` reads: every id's bytes (``None`` for an
    unassigned id), the special ids in ascending order and whether the decoder drops the first
    space, from a tokenizer's JSON (``to_str()``), its ``get_vocab(with_added_tokens=True)``
    and its ``get_vocab_size(with_added_tokens=True)``. An unsupported decoder is a
    ``ValueError`` naming it."""
