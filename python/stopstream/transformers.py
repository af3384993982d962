"""Stop sequences for Hugging Face ``transformers``' ``generate()`` (contract §11).

Three pieces, each over the token ids ``generate()`` produces, with every stop kind of the
contract (``str``, ``Stop``, ``Regex``, ``skip``/``skip_until``, a ``StopSet``) and stop token
ids:

* :class:`StopSequenceCriteria`, a ``StoppingCriteria``: ends each row of a batch at the token
  that completes its first stop (earliest end, then longest, then first listed). One
  ``stopstream.feed_batch`` call per step for the whole batch.
* :class:`StopTextStreamer` (prints), :class:`StopTextIteratorStreamer` (a blocking iterator,
  like ``TextIteratorStreamer``) and :class:`AsyncStopTextIteratorStreamer` (an async one, like
  ``AsyncTextIteratorStreamer``): ``BaseStreamer`` subclasses that emit, after every token, all
  the text that is certain to be in the output (minimal holdback) and never a byte of a stop.
  Batch size 1, as transformers' own streamers.
* :func:`cut`: cuts ``generate()``'s output, row by row, at the stop, and reports which fired
  (:class:`CutRow`: ``token_ids``, ``text``, ``stop_sequence``, ``stop_index``,
  ``stop_reason``, ``stop_token_id``).

``generate()`` itself never trims: the criterion only ends a row, the returned ids still hold
the stop's text. The streamer and :func:`cut` give the cut text. Used together::

    stops = ["\\n\\nUser:", Regex(r"\\bEND\\b")]
    criteria = StopSequenceCriteria(tokenizer, stops)
    out = model.generate(**inputs, stopping_criteria=StoppingCriteriaList([criteria]))
    rows = cut(out, tokenizer, stops, prompt_length=inputs["input_ids"].shape[1])
    rows[0].text, rows[0].stop_sequence

What is decoded: only the new tokens (those after the prompt; left padding is part of the
prompt), as ``tokenizer.decode(new_ids, skip_special_tokens=True)`` decodes them (the
tokenizer's vocabulary is read once by :class:`stopstream.Vocab`, cached per tokenizer). So a
SentencePiece tokenizer's first generated space is dropped, as that call drops it.

``stop_token_ids``: ``None`` (the default) takes the tokenizer's ``eos_token_id`` when it has
one, so rows that end on it are cut there (padding after it never counts); pass the model's
``generation_config.eos_token_id`` when it differs, or ``()`` for none.

Importing this module imports ``transformers`` and ``torch``; ``import stopstream`` imports
neither.
"""

from __future__ import annotations

import asyncio
import functools
import queue
import weakref
from collections import OrderedDict
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from transformers.generation.stopping_criteria import StoppingCriteria
from transformers.generation.streamers import BaseStreamer

from stopstream._core import StopSet, TokenStopFilter, feed_batch
from stopstream._core import Vocab as _CoreVocab
from stopstream._types import Stops, TokenStopReason
from stopstream._vocab import Vocab

__all__ = [
    "AsyncStopTextIteratorStreamer",
    "CutRow",
    "StopSequenceCriteria",
    "StopTextIteratorStreamer",
    "StopTextStreamer",
    "cut",
    "vocab_for",
]


def __dir__() -> list[str]:
    # The API only: not this module's imports and helpers.
    return sorted(__all__)


# ---------------------------------------------------------------------------------------------
# Vocabularies, built once per tokenizer

_VOCAB_CACHE_SIZE = 8
# id(tokenizer) -> (a reference to it, its size when read, the vocabulary). The reference is
# weak where the tokenizer allows it (a dead tokenizer's entry goes), else strong, so that an id
# is never reused while its entry exists. Bounded: a vocabulary of 150k ids is a few MB.
_VOCABS: OrderedDict[int, tuple[Any, int, Vocab]] = OrderedDict()


def _size(backend: Any) -> int:
    try:
        return int(backend.get_vocab_size(with_added_tokens=True))
    except (AttributeError, TypeError):
        raise TypeError(
            "tokenizer must be a fast transformers tokenizer, a tokenizers.Tokenizer or a "
            f"stopstream.Vocab, not {type(backend).__module__}.{type(backend).__qualname__}"
        ) from None


def vocab_for(tokenizer: Any) -> _CoreVocab:
    """The ``stopstream.Vocab`` of a fast ``transformers`` tokenizer or a ``tokenizers``
    ``Tokenizer``, read once and cached (a few tokenizers at a time; a tokenizer that grew new
    tokens since is read again). A ``Vocab`` is returned as is.

    Raises:
        TypeError: ``tokenizer`` is none of these (a slow, Python-only tokenizer included).
        ValueError: its decoder is one ``Vocab.from_tokenizers`` does not reproduce.
    """
    if isinstance(tokenizer, _CoreVocab):
        return tokenizer
    backend = getattr(tokenizer, "backend_tokenizer", tokenizer)
    size = _size(backend)
    key = id(tokenizer)
    entry = _VOCABS.get(key)
    if entry is not None:
        ref, known, vocab = entry
        alive = ref() if isinstance(ref, weakref.ref) else ref
        if alive is tokenizer and known == size:
            _VOCABS.move_to_end(key)
            return vocab
        del _VOCABS[key]
    vocab = Vocab.from_tokenizers(tokenizer)
    try:
        ref = weakref.ref(tokenizer, functools.partial(_forget, key))
    except TypeError:
        ref = tokenizer
    _VOCABS[key] = (ref, size, vocab)
    while len(_VOCABS) > _VOCAB_CACHE_SIZE:
        _VOCABS.popitem(last=False)
    return vocab


def _forget(key: int, _: object = None) -> None:
    entry = _VOCABS.get(key)
    if entry is not None and isinstance(entry[0], weakref.ref) and entry[0]() is None:
        del _VOCABS[key]


# ---------------------------------------------------------------------------------------------
# Options shared by the three pieces


def _stop_ids(tokenizer: Any, stop_token_ids: int | Iterable[int] | None) -> tuple[int, ...]:
    if stop_token_ids is None:
        eos = getattr(tokenizer, "eos_token_id", None)
        if eos is None:
            return ()
        stop_token_ids = eos
    if isinstance(stop_token_ids, torch.Tensor):
        stop_token_ids = stop_token_ids.flatten().tolist()
    if isinstance(stop_token_ids, int):
        return (stop_token_ids,)
    if isinstance(stop_token_ids, (str, bytes)):
        raise TypeError(f"stop_token_ids must be ints, not {type(stop_token_ids).__name__}")
    ids = tuple(stop_token_ids)
    for position, i in enumerate(ids):
        if not isinstance(i, int) or isinstance(i, bool):
            raise TypeError(f"stop_token_ids[{position}] must be an int, not {type(i).__name__}")
    return ids


class _Setup:
    """A vocabulary, a compiled stop list and stop token ids: what every filter is made of."""

    __slots__ = ("stop_ids", "stops", "vocab")

    def __init__(
        self,
        tokenizer: Any,
        stops: Stops | StopSet,
        include_stop: bool | None,
        stop_token_ids: int | Iterable[int] | None,
        skip: Iterable[tuple[str, str]] | None,
        skip_until: str | None,
    ) -> None:
        self.vocab = vocab_for(tokenizer)
        # Only the options given go to StopSet: a StopSet passed as `stops` keeps its own.
        options: dict[str, Any] = {}
        if include_stop is not None:
            options["include_stop"] = include_stop
        if skip is not None:
            options["skip"] = skip
        if skip_until is not None:
            options["skip_until"] = skip_until
        self.stops = StopSet(stops, **options)
        self.stop_ids = _stop_ids(tokenizer, stop_token_ids)
        # Built once here so that a bad stop token id fails at construction, not mid-generation.
        self.filter()

    def filter(self) -> TokenStopFilter:
        return TokenStopFilter(self.vocab, self.stops, stop_token_ids=self.stop_ids)


def _rows(ids: Any) -> list[list[int]]:
    """Token ids as a list of rows: a 2-D tensor, a 1-D one (one row), a ``generate()`` output
    object (its ``sequences``) or lists of ints."""
    ids = getattr(ids, "sequences", ids)
    if isinstance(ids, torch.Tensor):
        if ids.dim() == 1:
            ids = ids[None, :]
        if ids.dim() != 2:
            raise ValueError(f"expected token ids of shape (batch, length), not {tuple(ids.shape)}")
        rows: list[list[int]] = ids.tolist()
        return rows
    if isinstance(ids, (str, bytes)) or not isinstance(ids, Sequence):
        raise TypeError(
            "expected a tensor of token ids, a generate() output or a list of lists of ints, "
            f"not {type(ids).__name__}"
        )
    if ids and all(isinstance(i, int) for i in ids):
        return [list(ids)]
    return [list(row) for row in ids]


# ---------------------------------------------------------------------------------------------
# The stopping criterion


class StopSequenceCriteria(StoppingCriteria):  # type: ignore[misc]
    """A ``StoppingCriteria`` that ends each row of ``generate()`` at the token that completes
    its first stop (contract §2, §6), or at a stop token id.

    Pass it in ``stopping_criteria=StoppingCriteriaList([...])``. Only the new tokens are
    matched: the prompt's length is read on the first call (the first new token is the last
    column then), unless ``prompt_length`` is given (needed when the first call can bring
    several new tokens, as assisted generation's does). A row that has stopped stays stopped;
    rows that other criteria ended are still fed (their padding), which changes nothing they
    return. Beam search works: a row whose earlier tokens changed since the last call is read
    again from the prompt.

    One object serves one ``generate()`` call at a time. A call whose batch size differs, or
    whose ids are not longer than the last call's, starts over (a new ``generate()``);
    :meth:`reset` does so explicitly.

    ``generate()`` does not trim: the ids it returns run through the stop's token (and padding
    after it in a batch). :func:`cut` gives each row's text and ids cut at the stop.
    """

    def __init__(
        self,
        tokenizer: Any,
        stops: Stops | StopSet = None,
        *,
        include_stop: bool | None = None,
        stop_token_ids: int | Iterable[int] | None = None,
        skip: Iterable[tuple[str, str]] | None = None,
        skip_until: str | None = None,
        prompt_length: int | None = None,
    ) -> None:
        """Compile the stops once, and read the tokenizer's vocabulary (cached per tokenizer).

        Args:
            tokenizer: a fast ``transformers`` tokenizer, a ``tokenizers.Tokenizer`` or a
                ``stopstream.Vocab``.
            stops: what ``stopstream.TokenStopFilter`` takes: ``None``, a ``str``, ``Stop``,
                ``Regex``, a list of them, or a ``StopSet`` (its options then apply).
            include_stop: whether the stop belongs to the text (it changes where :func:`cut`
                cuts, and which text is held back; not when a row ends).
            stop_token_ids: ids that end a row where they occur; ``None``: the tokenizer's
                ``eos_token_id``, if any.
            skip: ``(open, close)`` literal pairs: regions the stops do not see.
            skip_until: stops are inactive until this literal marker has occurred.
            prompt_length: how many leading columns of ``input_ids`` are the prompt; ``None``:
                all but the last column of the first call.

        Raises:
            TypeError: an argument has the wrong type.
            ValueError: a stop, a stop token id or ``prompt_length`` is invalid.
        """
        if prompt_length is not None and (
            not isinstance(prompt_length, int)
            or isinstance(prompt_length, bool)
            or prompt_length < 0
        ):
            raise ValueError(f"prompt_length must be an int >= 0 or None, not {prompt_length!r}")
        self._setup = _Setup(tokenizer, stops, include_stop, stop_token_ids, skip, skip_until)
        self._prompt_length = prompt_length
        self.reset()

    def reset(self) -> None:
        """Forget the rows: the next call starts a new ``generate()``."""
        self._filters: list[TokenStopFilter] = []
        self._start = 0
        # The ids of the last call (a reference: generate() makes a new tensor every step).
        self._seen: Any = None

    @property
    def stops(self) -> StopSet:
        """The compiled stop list (``stop_index`` indexes its ``stops``)."""
        return self._setup.stops

    @property
    def stop_token_ids(self) -> tuple[int, ...]:
        """The ids that end a row where they occur."""
        return self._setup.stop_ids

    @property
    def stopped(self) -> list[bool]:
        """Per row: whether a stop (sequence or token id) has ended it."""
        return [f.stopped for f in self._filters]

    @property
    def stop_sequences(self) -> list[str | None]:
        """Per row: the text the stop that fired matched, or ``None``."""
        return [f.stop_sequence for f in self._filters]

    @property
    def stop_indices(self) -> list[int | None]:
        """Per row: the index in ``stops`` of the stop that fired, or ``None``."""
        return [f.stop_index for f in self._filters]

    def _start_rows(self, batch: int, length: int) -> None:
        start = self._prompt_length if self._prompt_length is not None else length - 1
        if start > length:
            raise ValueError(f"prompt_length {start} is longer than the input ids ({length})")
        self._filters = [self._setup.filter() for _ in range(batch)]
        self._start = start
        self._seen = None

    def _reread_changed_rows(self, input_ids: Any) -> None:
        """Beam search hands rows over between beams: a row whose ids before the new ones are
        not what was fed is fed again from the prompt (its new tokens follow as usual)."""
        seen = self._seen
        width = seen.shape[1]
        if torch.equal(input_ids[:, :width], seen):
            return
        changed = (input_ids[:, self._start : width] != seen[:, self._start :]).any(dim=1)
        history = input_ids[:, self._start : width]
        for row in changed.nonzero().flatten().tolist():
            f = self._filters[row]
            f.reset()
            f.feed(history[row].tolist())

    def __call__(self, input_ids: Any, scores: Any, **kwargs: Any) -> Any:
        """One generation step: feed every row's new ids, return which rows have stopped (a
        bool tensor of shape ``(batch,)`` on ``input_ids``' device)."""
        batch, length = input_ids.shape
        seen = self._seen
        if seen is not None and (batch != seen.shape[0] or length <= seen.shape[1]):
            self.reset()
            seen = None
        if not self._filters:
            self._start_rows(batch, length)
            fed = self._start
        else:
            fed = seen.shape[1]
            self._reread_changed_rows(input_ids)
        self._seen = input_ids
        filters = self._filters
        # One int per row is the usual step (and the fastest for feed_batch); lists otherwise.
        new = input_ids[:, fed].tolist() if length - fed == 1 else input_ids[:, fed:].tolist()
        active = [i for i, f in enumerate(filters) if not f.stopped]
        if len(active) == batch:
            _feed(filters, new, active)
        elif active:
            _feed([filters[i] for i in active], [new[i] for i in active], active)
        return torch.tensor([f.stopped for f in filters], dtype=torch.bool, device=input_ids.device)


def _feed(filters: list[TokenStopFilter], ids: list[Any], rows: list[int]) -> None:
    try:
        feed_batch(filters, ids)
    except (ValueError, UnicodeDecodeError) as error:
        # feed_batch names its own positions (`ids_per_filter[k]: ...`); say which row.
        cause = error.__cause__ if error.__cause__ is not None else error
        message = str(error)
        if message.startswith("ids_per_filter["):
            k = int(message[len("ids_per_filter[") : message.index("]")])
            message = f"row {rows[k]}: {cause}"
        raise ValueError(message) from error


# ---------------------------------------------------------------------------------------------
# Streamers


def _one_row(value: Any) -> list[int]:
    if isinstance(value, torch.Tensor):
        if value.dim() > 1:
            if value.shape[0] > 1:
                raise ValueError("the stopstream streamers support batch size 1 only")
            value = value[0]
        ids: list[int] = value.tolist()
        return ids if isinstance(ids, list) else [ids]
    if isinstance(value, int):
        return [value]
    return list(value)


class StopTextStreamer(BaseStreamer):  # type: ignore[misc]
    """A ``generate()`` streamer (``streamer=``) that applies stops to the text it streams, and
    prints it, as ``TextStreamer`` does.

    After every token it emits exactly the text certain to be in the output (the minimal
    holdback of contract §2.5: only what could still become a stop is held), never a byte of a
    stop, and nothing after it. ``generate()`` first hands over the prompt: with ``skip_prompt``
    it is dropped, else its text is emitted as is (stops are sought in the new tokens only).
    ``end()`` releases what is still held. Subclasses override :meth:`on_finalized_text`.

    Without :class:`StopSequenceCriteria` generation runs on after a stop (the streamer emits
    nothing more); with it, generation ends at the stop's token. Batch size 1.
    """

    def __init__(
        self,
        tokenizer: Any,
        stops: Stops | StopSet = None,
        *,
        include_stop: bool | None = None,
        stop_token_ids: int | Iterable[int] | None = None,
        skip: Iterable[tuple[str, str]] | None = None,
        skip_until: str | None = None,
        skip_prompt: bool = False,
    ) -> None:
        """Compile the stops; the arguments are :class:`StopSequenceCriteria`'s, plus
        ``skip_prompt`` (drop the prompt's text instead of emitting it first).

        Raises:
            TypeError: an argument has the wrong type.
            ValueError: a stop or a stop token id is invalid.
        """
        self._setup = _Setup(tokenizer, stops, include_stop, stop_token_ids, skip, skip_until)
        self.skip_prompt = bool(skip_prompt)
        self._filter = self._setup.filter()
        self._next_is_prompt = True

    @property
    def stops(self) -> StopSet:
        """The compiled stop list."""
        return self._setup.stops

    @property
    def stopped(self) -> bool:
        """Whether a stop (sequence or token id) ended the stream."""
        return self._filter.stopped

    @property
    def stop_sequence(self) -> str | None:
        """The text the stop that fired matched, or ``None``."""
        return self._filter.stop_sequence

    @property
    def stop_index(self) -> int | None:
        """The index in ``stops`` of the stop that fired, or ``None``."""
        return self._filter.stop_index

    @property
    def stop_token_id(self) -> int | None:
        """The stop token id that ended the stream, or ``None``."""
        return self._filter.stop_token_id

    @property
    def stop_reason(self) -> TokenStopReason | None:
        """``"stop_sequence"``, ``"stop_token"``, ``"end"`` (after ``end()``), or ``None``
        while the stream is open."""
        return self._filter.stop_reason

    @property
    def pending(self) -> str:
        """The text held back right now."""
        return self._filter.pending

    def put(self, value: Any) -> None:
        """Take the next token ids from ``generate()`` (the first call: the prompt)."""
        ids = _one_row(value)
        if self._next_is_prompt:
            self._next_is_prompt = False
            self._filter.reset()
            if not self.skip_prompt:
                # The prompt's text as the filter decodes (special tokens and padding: none).
                decoder = TokenStopFilter(self._setup.vocab, None)
                text = decoder.feed(ids).text + decoder.finish().text
                if text:
                    self.on_finalized_text(text)
            return
        if self._filter.stopped:
            return
        text = self._filter.feed(ids).text
        if text:
            self.on_finalized_text(text)

    def end(self) -> None:
        """The end of generation: release what is held back, then signal the end."""
        self._next_is_prompt = True
        text = "" if self._filter.stop_reason is not None else self._filter.finish().text
        self.on_finalized_text(text, stream_end=True)

    def on_finalized_text(self, text: str, stream_end: bool = False) -> None:
        """Print ``text`` (a newline after the last); subclasses send it elsewhere."""
        print(text, flush=True, end=None if stream_end else "")


_END = object()


class StopTextIteratorStreamer(StopTextStreamer):
    """:class:`StopTextStreamer` as a blocking iterator of text pieces, like
    ``TextIteratorStreamer``: run ``generate()`` in another thread and iterate here. It never
    yields an empty piece; iteration ends after ``generate()`` ends. ``timeout`` (seconds)
    bounds each wait (``queue.Empty`` when it passes, as transformers' streamer raises)."""

    def __init__(
        self,
        tokenizer: Any,
        stops: Stops | StopSet = None,
        *,
        include_stop: bool | None = None,
        stop_token_ids: int | Iterable[int] | None = None,
        skip: Iterable[tuple[str, str]] | None = None,
        skip_until: str | None = None,
        skip_prompt: bool = False,
        timeout: float | None = None,
    ) -> None:
        """The arguments are :class:`StopTextStreamer`'s, plus ``timeout``."""
        super().__init__(
            tokenizer,
            stops,
            include_stop=include_stop,
            stop_token_ids=stop_token_ids,
            skip=skip,
            skip_until=skip_until,
            skip_prompt=skip_prompt,
        )
        self.text_queue: queue.Queue[object] = queue.Queue()
        self.timeout = timeout

    def on_finalized_text(self, text: str, stream_end: bool = False) -> None:
        """Queue ``text`` (and the end, after the last)."""
        if text:
            self.text_queue.put(text, timeout=self.timeout)
        if stream_end:
            self.text_queue.put(_END, timeout=self.timeout)

    def __iter__(self) -> Iterator[str]:
        """The streamer is its own iterator."""
        return self

    def __next__(self) -> str:
        """The next piece of text; ``StopIteration`` after the end."""
        value = self.text_queue.get(timeout=self.timeout)
        if value is _END:
            raise StopIteration
        assert isinstance(value, str)
        return value


class AsyncStopTextIteratorStreamer(StopTextStreamer):
    """:class:`StopTextStreamer` as an async iterator, like ``AsyncTextIteratorStreamer``:
    create it inside a coroutine (it binds the running loop), run ``generate()`` in a thread,
    and ``async for`` here. Never yields an empty piece. ``timeout`` (seconds) bounds each wait
    (``TimeoutError`` when it passes)."""

    def __init__(
        self,
        tokenizer: Any,
        stops: Stops | StopSet = None,
        *,
        include_stop: bool | None = None,
        stop_token_ids: int | Iterable[int] | None = None,
        skip: Iterable[tuple[str, str]] | None = None,
        skip_until: str | None = None,
        skip_prompt: bool = False,
        timeout: float | None = None,
    ) -> None:
        """The arguments are :class:`StopTextStreamer`'s, plus ``timeout``.

        Raises:
            RuntimeError: no event loop is running.
        """
        super().__init__(
            tokenizer,
            stops,
            include_stop=include_stop,
            stop_token_ids=stop_token_ids,
            skip=skip,
            skip_until=skip_until,
            skip_prompt=skip_prompt,
        )
        self.loop = asyncio.get_running_loop()
        self.text_queue: asyncio.Queue[object] = asyncio.Queue()
        self.timeout = timeout

    def on_finalized_text(self, text: str, stream_end: bool = False) -> None:
        """Queue ``text`` (and the end, after the last) on the loop, from any thread."""
        if text:
            self.loop.call_soon_threadsafe(self.text_queue.put_nowait, text)
        if stream_end:
            self.loop.call_soon_threadsafe(self.text_queue.put_nowait, _END)

    def __aiter__(self) -> AsyncStopTextIteratorStreamer:
        """The streamer is its own async iterator."""
        return self

    async def __anext__(self) -> str:
        """The next piece of text; ``StopAsyncIteration`` after the end."""
        try:
            value = await asyncio.wait_for(self.text_queue.get(), self.timeout)
        except asyncio.TimeoutError:
            # Python 3.10's asyncio.TimeoutError is not the builtin one.
            raise TimeoutError(f"no text within {self.timeout} s") from None
        if value is _END:
            raise StopAsyncIteration
        assert isinstance(value, str)
        return value


# ---------------------------------------------------------------------------------------------
# Cutting generate()'s output


@dataclass(frozen=True)
class CutRow:
    """One row of ``generate()``'s output, cut at its stop.

    ``token_ids`` are the row's new ids through the token that ended it (the one that completed
    the stop, or the stop token id), none after; all of them when nothing stopped the row.
    ``text`` is the decoded text of the new ids cut as contract §2 says (before the stop, or
    through it with ``include``).
    """

    token_ids: list[int]
    """The new ids through the one that ended the row."""
    text: str
    """The text, cut at the stop."""
    stop_sequence: str | None
    """The text the stop that fired matched (a literal stop itself), or ``None``."""
    stop_index: int | None
    """The index in the stop list of the stop that fired, or ``None``."""
    stop_reason: TokenStopReason
    """``"stop_sequence"``, ``"stop_token"``, or ``"end"`` (no stop: the row ran out)."""
    stop_token_id: int | None
    """The stop token id that ended the row, or ``None``."""


def cut(
    sequences: Any,
    tokenizer: Any,
    stops: Stops | StopSet = None,
    *,
    prompt_length: int = 0,
    include_stop: bool | None = None,
    stop_token_ids: int | Iterable[int] | None = None,
    skip: Iterable[tuple[str, str]] | None = None,
    skip_until: str | None = None,
) -> list[CutRow]:
    """Cut each row of ``generate()``'s output at its first stop.

    Args:
        sequences: what ``generate()`` returned (a tensor of shape ``(batch, length)``, or the
            output object with ``return_dict_in_generate``), a 1-D tensor (one row), or lists of
            ints.
        tokenizer: a fast ``transformers`` tokenizer, a ``tokenizers.Tokenizer`` or a
            ``stopstream.Vocab``.
        stops, include_stop, stop_token_ids, skip, skip_until: as
            :class:`StopSequenceCriteria` takes them (use the same values).
        prompt_length: how many leading columns are the prompt (``inputs["input_ids"].shape[1]``
            for a decoder-only model; with left padding, one length for all rows).

    Returns:
        One :class:`CutRow` per row.

    Raises:
        TypeError: an argument has the wrong type.
        ValueError: a stop, a stop token id or ``prompt_length`` is invalid, or an id is not in
            the vocabulary (the message names its row).
    """
    if not isinstance(prompt_length, int) or isinstance(prompt_length, bool) or prompt_length < 0:
        raise ValueError(f"prompt_length must be an int >= 0, not {prompt_length!r}")
    setup = _Setup(tokenizer, stops, include_stop, stop_token_ids, skip, skip_until)
    result = []
    for number, row in enumerate(_rows(sequences)):
        if prompt_length > len(row):
            raise ValueError(f"prompt_length {prompt_length} is longer than row {number}")
        ids = row[prompt_length:]
        f = setup.filter()
        pieces: list[str] = []
        taken = len(ids)
        try:
            for k, i in enumerate(ids):
                pieces.append(f.feed(i).text)
                if f.stopped:
                    taken = k + 1
                    break
            else:
                pieces.append(f.finish().text)
        except UnicodeDecodeError:
            raise
        except (ValueError, TypeError) as error:
            raise type(error)(f"row {number}: {error}") from error
        reason = f.stop_reason
        assert reason is not None
        result.append(
            CutRow(
                token_ids=ids[:taken],
                text="".join(pieces),
                stop_sequence=f.stop_sequence,
                stop_index=f.stop_index,
                stop_reason=reason,
                stop_token_id=f.stop_token_id,
            )
        )
    return result
