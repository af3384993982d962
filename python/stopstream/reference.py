"""Pure-Python reference implementation of the stopstream contract (contract §2-4, §6, §7).

This module is the executable statement of the matching rules, written to be plainly correct
rather than fast: every ``feed`` re-examines everything received so far. The compiled filters in
:mod:`stopstream` are tested against it, and benchmarks use it as a baseline. It depends on
nothing but the standard library (in particular not on ``stopstream._core``).

The rules, for ``T`` = all text received so far and ``S`` = the stop list:

* The stop fires at the smallest end position at which any stop ends in ``T``; among the stops
  ending there the longest wins; among equal strings the first listed.
* Without ``include_stop`` the output is everything before the winning match; with it,
  everything through the match's end. Nothing after the match is ever emitted.
* While no stop has fired, the total emitted after each ``feed`` is ``T`` minus its longest
  suffix that is a proper prefix of some stop (all of ``T`` with ``include_stop``); bytes input
  additionally holds back an incomplete trailing UTF-8 sequence.

Beyond literal stops (contract §6), stops may be :class:`Stop` (a literal with its own include
flag) and :class:`Regex` (a pattern, here in Python :mod:`re` syntax: the tests generate pattern
pairs on which Python's and Rust's engines agree), and a filter may have skip regions. Those
rules are implemented by :class:`_Scan`, which re-reads the whole text on every call:

* the winner is the first end position at which a skip marker or a stop ends (a marker first),
  with assertions evaluated on the whole text; a stop has fired once every continuation of the
  text (each character of ``alphabet``, or the end of the stream) gives the same winner ending
  within the text;
* the holdback is the earliest start ``p`` from which some continuation (up to ``horizon``
  characters of ``alphabet``, then one more or the end) gives a flag-off stop a match.

Both quantify over ``alphabet``: the reference is exact for stops whose behaviour every
character outside it imitates, which is how the tests choose it.

Decoding of bytes input uses CPython's incremental UTF-8 decoder as the oracle, with one
correction: CPython's decoder keeps ``ED A0``..``ED BF`` (the first two bytes of an encoded
surrogate) back as if incomplete, although no byte can complete them into well-formed UTF-8
(Unicode, Table 3-7). Here an incomplete tail is only a proper prefix of a well-formed sequence,
so such bytes are invalid as soon as they arrive (the U+FFFD count in ``"replace"`` mode is the
same either way).
"""

from __future__ import annotations

import codecs
import dataclasses
import functools
import re
import sys
from collections.abc import Callable, Iterable, Sequence
from typing import Any, Literal

__all__ = [
    "ReferenceByteStopFilter",
    "ReferenceStopFilter",
    "ReferenceTokenStopFilter",
    "Regex",
    "Stop",
    "StopReason",
    "find_stop",
    "held_suffix_length",
    "reference_tokenizer_tokens",
    "reference_truncate",
    "validate_stops",
]


def __dir__() -> list[str]:
    # The API only: not this module's imports and helpers.
    return sorted(__all__)


StopReason = Literal["stop_sequence", "end"]
"""Why a filter ended: a stop sequence fired, or ``finish()`` was called without one."""


@dataclasses.dataclass(frozen=True)
class Stop:
    """A literal stop with its own include flag (``None``: the filter's ``include_stop``)."""

    text: str
    include: bool | None = None


@dataclasses.dataclass(frozen=True)
class Regex:
    """A pattern stop, in Python :mod:`re` syntax (see the module docstring).

    ``max_len`` bounds its matches in characters (``None``: unbounded), which only limits how far
    back the holdback search starts.
    """

    pattern: str
    include: bool | None = None
    max_len: int | None = None


StopItem = str | Stop | Regex
Stops = StopItem | Iterable[StopItem] | None
"""What the ``stops`` argument accepts (contract §3, §6.1)."""

DEFAULT_ALPHABET = "ab\u00e9- \n1"
"""Characters the reference tries as continuations (see the module docstring)."""

_ERRORS_MODES = ("strict", "replace")


def validate_stops(stops: object) -> tuple[str, ...]:
    """Like :func:`validate_items` for lists of plain ``str`` only (contract §3)."""
    items = validate_items(stops)
    for position, item in enumerate(items):
        if not isinstance(item, str):
            raise TypeError(f"stops[{position}] must be a str, not {type(item).__name__}")
    return tuple(item for item in items if isinstance(item, str))


def validate_items(stops: object) -> tuple[StopItem, ...]:
    """Normalize ``stops`` to a tuple, raising as contract §3 requires.

    ``None`` means no stops; a single ``str`` is one stop; anything else must be an iterable of
    non-empty ``str``. A non-``str`` item is a ``TypeError`` and an empty string a
    ``ValueError``; both messages name the item's position.
    """
    if stops is None:
        return ()
    wrong_type = f"stops must be None, a str or an iterable of str, not {type(stops).__name__}"
    if isinstance(stops, (str, Stop, Regex)):
        items: list[object] = [stops]
    elif isinstance(stops, (bytes, bytearray, memoryview)):
        # Iterating bytes yields ints; say what is wrong with the argument as a whole.
        raise TypeError(wrong_type)
    else:
        try:
            iterator = iter(stops)  # type: ignore[call-overload]
        except TypeError:
            raise TypeError(wrong_type) from None
        items = list(iterator)
    result: list[StopItem] = []
    for position, item in enumerate(items):
        if not isinstance(item, (str, Stop, Regex)):
            raise TypeError(
                f"stops[{position}] must be a str, Stop or Regex, not {type(item).__name__}"
            )
        if (isinstance(item, str) and not item) or (isinstance(item, Stop) and not item.text):
            raise ValueError(f"stops[{position}] is an empty string")
        if isinstance(item, Regex):
            try:
                compiled = re.compile(item.pattern)
            except re.error as error:
                raise ValueError(f"regex stop at position {position} is invalid: {error}") from None
            probes = ("", "a", "-", "a-", "-a", "\n", "a\na")
            if any(
                (m := compiled.match(p, i)) is not None and m.end() == i
                for p in probes
                for i in range(len(p) + 1)
            ):
                raise ValueError(
                    f"regex stop at position {position} is invalid: "
                    "the pattern matches the empty string"
                )
        result.append(item)
    return tuple(result)


def find_stop(text: str, stops: tuple[str, ...]) -> tuple[int, int, int] | None:
    """Return ``(start, end, index)`` of the stop that fires in ``text``, or ``None``.

    The first occurrence of a stop is also the one that ends first (all its occurrences have the
    same length), so each stop only needs its first occurrence. The winner has the smallest end,
    then the greatest length (the earliest start), then the smallest index.
    """
    best: tuple[int, int, int] | None = None  # (end, -length, index): smallest wins
    for index, stop in enumerate(stops):
        start = text.find(stop)
        if start < 0:
            continue
        key = (start + len(stop), -len(stop), index)
        if best is None or key < best:
            best = key
    if best is None:
        return None
    end, negative_length, index = best
    return end + negative_length, end, index


def held_suffix_length(text: str, stops: tuple[str, ...]) -> int:
    """Length of the longest suffix of ``text`` that is a proper prefix of some stop."""
    longest_stop = max((len(stop) for stop in stops), default=0)
    for length in range(min(len(text), longest_stop - 1), 0, -1):
        suffix = text[len(text) - length :]
        if any(len(stop) > length and stop.startswith(suffix) for stop in stops):
            return length
    return 0


def reference_truncate(
    text: str,
    stops: Stops,
    include_stop: bool = False,
    *,
    skip: Iterable[tuple[str, str]] | None = None,
    skip_until: str | None = None,
) -> tuple[str, str | None]:
    """Cut ``text`` at the first stop (contract §2, §6); return the text and the matched text."""
    if not isinstance(text, str):
        raise TypeError(f"text must be str, not {type(text).__name__}")
    f = ReferenceStopFilter(stops, include_stop, skip=skip, skip_until=skip_until)
    out = f.feed(text) + f.finish()
    return out, f.stop_sequence


Win = tuple[int, int, int]
"""A match that fires: ``(start, end, index)``."""


class _Scan:
    """The rules of contract §6 over a whole text, read the slow and obvious way."""

    def __init__(
        self,
        items: tuple[StopItem, ...],
        include_stop: bool,
        skip: tuple[tuple[str, str], ...],
        skip_until: str | None,
        alphabet: str,
        horizon: int,
    ) -> None:
        self.items = items
        self.include = [
            include_stop if isinstance(i, str) or i.include is None else i.include for i in items
        ]
        self.skip = skip
        self.skip_until = skip_until
        self.alphabet = alphabet
        self.horizon = horizon
        # A match of ``P`` ending exactly at ``e`` with the character at ``e`` visible: search
        # ``text[:e + 1]`` for ``P`` followed by exactly one character; at the end of the text,
        # ``P`` followed by the end.
        self.before_char: list[re.Pattern[str] | None] = []
        self.before_end: list[re.Pattern[str] | None] = []
        for item in items:
            regex = item.pattern if isinstance(item, Regex) else None
            if regex is None:
                self.before_char.append(None)
                self.before_end.append(None)
            else:
                self.before_char.append(re.compile(f"(?:{regex})(?=[\\s\\S]\\Z)"))
                self.before_end.append(re.compile(f"(?:{regex})\\Z"))

    def literal(self, index: int) -> str | None:
        item = self.items[index]
        return item if isinstance(item, str) else item.text if isinstance(item, Stop) else None

    def ends_at(self, index: int, text: str, start: int, end: int) -> bool:
        """Whether stop ``index`` matches ``text[start:end]``, ``text`` being the whole stream."""
        literal = self.literal(index)
        if literal is not None:
            return text[start:end] == literal
        if end < len(text):
            pattern = self.before_char[index]
            return pattern is not None and pattern.match(text, start, end + 1) is not None
        pattern = self.before_end[index]
        return pattern is not None and pattern.match(text, start) is not None

    def first_win(self, text: str, floor: int = 0) -> tuple[Win | None, int | None]:
        """The stop that fires in ``text`` read as a whole stream, and where matching may start
        at its end (``None``: inside a region or before the ``skip_until`` marker). No match
        ending at or before ``floor`` fires (a quiet stream's)."""
        segment = 0
        if self.skip_until is not None:
            found = text.find(self.skip_until)
            if found < 0:
                return None, None
            segment = found + len(self.skip_until)
        end = segment + 1
        while end <= len(text):
            opening = [
                (-len(o), k)
                for k, (o, _) in enumerate(self.skip)
                if end - len(o) >= segment and text.startswith(o, end - len(o))
            ]
            if opening:
                close = self.skip[min(opening)[1]][1]
                found = text.find(close, end)
                if found < 0:
                    return None, None
                segment = found + len(close)
                end = segment + 1
                continue
            best: Win | None = None
            for index in range(len(self.items) if end > floor else 0):
                literal = self.literal(index)
                # A literal can only start at one place; a pattern anywhere.
                starts = (
                    range(segment, end)
                    if literal is None
                    else range(max(segment, end - len(literal)), end)
                )
                for start in starts:
                    if self.ends_at(index, text, start, end):
                        if best is None or (start, index) < (best[0], best[2]):
                            best = (start, end, index)
                        break
            if best is not None:
                return best, segment
            end += 1
        return None, segment

    def fired(self, text: str, floor: int = 0) -> Win | None:
        """The stop that has fired once ``text`` was received (the stream not finished)."""
        seen: Win | None = None
        for following in [*self.alphabet, ""]:
            win, _ = self.first_win(text + following, floor)
            if win is None or win[1] > len(text) or (seen is not None and win != seen):
                return None
            seen = win
        return seen

    def continuations(self, length: int) -> list[str]:
        result = [""]
        for _ in range(length):
            result = [c + a for c in result for a in self.alphabet]
        return result

    def holdback_start(self, text: str, floor: int = 0) -> int:
        """Where the held-back text starts (``len(text)``: nothing held), no stop having fired."""
        _, segment = self.first_win(text, floor)
        if segment is None:
            return len(text)
        for start in range(segment, len(text)):
            have = len(text) - start
            for index, item in enumerate(self.items):
                if self.include[index]:
                    continue
                literal = self.literal(index)
                if literal is not None:
                    # A whole stop here is held while it may still fire (a regex may beat it),
                    # not once it ended too early to (at or before the floor).
                    whole_late = len(literal) == have and len(text) > floor
                    if (len(literal) > have or whole_late) and literal.startswith(text[start:]):
                        return start
                    continue
                assert isinstance(item, Regex)
                if item.max_len is not None and have > item.max_len:
                    continue
                longest = self.horizon if item.max_len is None else item.max_len - have
                for extra in range(min(longest, self.horizon) + 1):
                    for more in self.continuations(extra):
                        for following in [*self.alphabet, ""]:
                            stream = text + more + following
                            if self.ends_at(index, stream, start, len(text) + extra):
                                return start
        return len(text)


def validate_skip(
    skip: object, skip_until: object
) -> tuple[tuple[tuple[str, str], ...], str | None]:
    """Normalize the skip-region options (contract §6.4), raising for bad ones."""
    if skip_until is not None:
        if not isinstance(skip_until, str):
            raise TypeError(f"skip_until must be a str or None, not {type(skip_until).__name__}")
        if not skip_until:
            raise ValueError("skip_until is empty")
    pairs: list[tuple[str, str]] = []
    if skip is not None:
        if isinstance(skip, (str, bytes)) or not isinstance(skip, Iterable):
            raise TypeError(
                f"skip must be an iterable of (open, close) pairs, not {type(skip).__name__}"
            )
        for position, pair in enumerate(skip):
            if not (isinstance(pair, Sequence) and len(pair) == 2):
                raise TypeError(f"skip[{position}] must be an (open, close) pair of str")
            opening, closing = pair
            if not isinstance(opening, str) or not isinstance(closing, str):
                raise TypeError(f"skip[{position}] must be an (open, close) pair of str")
            if not opening:
                raise ValueError(f"skip[{position}] opening marker is empty")
            if not closing:
                raise ValueError(f"skip[{position}] closing marker is empty")
            pairs.append((opening, closing))
    return tuple(pairs), skip_until


class _Matcher:
    """Matching state over decoded text, shared by the ``str`` and ``bytes`` filters.

    ``_text`` is the decoded text received so far (cut at the emitted end once a stop fired),
    ``_emitted`` how many of its code points have been returned to the caller. Plain ``str``
    stops without skip regions follow contract §2 directly; anything else goes through
    :class:`_Scan`.
    """

    def __init__(
        self,
        stops: Stops,
        include_stop: bool,
        skip: Iterable[tuple[str, str]] | None = None,
        skip_until: str | None = None,
        alphabet: str = DEFAULT_ALPHABET,
        horizon: int = 4,
    ) -> None:
        if not isinstance(include_stop, bool):
            raise TypeError(f"include_stop must be a bool, not {type(include_stop).__name__}")
        self._stops = validate_items(stops)
        self._include_stop = include_stop
        pairs, until = validate_skip(skip, skip_until)
        self._plain = tuple(s for s in self._stops if isinstance(s, str))
        self._scan: _Scan | None = None
        if len(self._plain) < len(self._stops) or pairs or until is not None:
            self._scan = _Scan(self._stops, include_stop, pairs, until, alphabet, horizon)
        self._open()

    def _open(self) -> None:
        self._text = ""
        self._emitted = 0
        # No match ending at or before this offset fires; ``sys.maxsize`` while quiet.
        self._floor = 0
        self._stop_index: int | None = None
        self._stop_text: str | None = None
        self._finished = False

    def _decided(self, text: str) -> bool:
        """Whether a stop has fired once ``text`` was received."""
        if self._scan is None:
            return find_stop(text, self._plain) is not None
        return self._scan.fired(text) is not None

    def _fires_at_end(self, text: str) -> bool:
        """Whether ``text`` followed by the end of the stream fires a stop (literal stops fire
        as they complete, so the end adds one only with regex stops or skip regions)."""
        return self._scan is not None and self._scan.first_win(text)[0] is not None

    def _check_open(self) -> None:
        if self._finished:
            raise ValueError("feed() called after finish(); call reset() to start a new stream")

    def _advance(self, text: str, *, final: bool) -> str:
        """Take ``text`` (an extension of ``_text``) as all text so far; return what is new output.

        ``final`` means the input has ended: nothing is held back any more.
        """
        assert text.startswith(self._text), "decoded text must only ever grow"
        scan = self._scan
        if scan is None:
            match = find_stop(text, self._plain)
            include = self._include_stop
        else:
            floor = self._floor
            match = scan.first_win(text, floor)[0] if final else scan.fired(text, floor)
            include = match is not None and scan.include[match[2]]
        if match is not None:
            start, end, index = match
            target = end if include else start
            self._stop_index = index
            self._stop_text = text[start:end]
            text = text[:target]
        elif final or (scan is None and self._include_stop):
            target = len(text)
        elif scan is None:
            target = len(text) - held_suffix_length(text, self._plain)
        else:
            target = scan.holdback_start(text, self._floor)
        assert target >= self._emitted, "output already emitted cannot be taken back"
        output = text[self._emitted : target]
        self._text = text
        self._emitted = target
        return output

    @property
    def stops(self) -> tuple[StopItem, ...]:
        """The stops, as given."""
        return self._stops

    @property
    def include_stop(self) -> bool:
        """Whether the output includes the stop sequence that fired."""
        return self._include_stop

    @property
    def stopped(self) -> bool:
        """Whether a stop sequence fired."""
        return self._stop_index is not None

    @property
    def stop_sequence(self) -> str | None:
        """The text the stop that fired matched (a literal stop itself), or ``None``."""
        return self._stop_text

    @property
    def stop_index(self) -> int | None:
        """The index in ``stops`` of the stop that fired, or ``None``."""
        return self._stop_index

    @property
    def stop_reason(self) -> StopReason | None:
        """``"stop_sequence"``, ``"end"`` after ``finish()`` without a stop, or ``None``."""
        if self._stop_index is not None:
            return "stop_sequence"
        return "end" if self._finished else None

    def _held_text(self) -> str:
        if self._finished or self._stop_index is not None:
            return ""
        return self._text[self._emitted :]


class ReferenceStopFilter(_Matcher):
    """Reference for :class:`stopstream.StopFilter`: stop sequences over ``str`` chunks."""

    def __init__(
        self,
        stops: Stops,
        include_stop: bool = False,
        *,
        skip: Iterable[tuple[str, str]] | None = None,
        skip_until: str | None = None,
        alphabet: str = DEFAULT_ALPHABET,
        horizon: int = 4,
    ) -> None:
        super().__init__(stops, include_stop, skip, skip_until, alphabet, horizon)

    def feed(self, text: str) -> str:
        """Take the next chunk; return the text that is now safe to emit (may be empty)."""
        if not isinstance(text, str):
            raise TypeError(f"feed() argument must be str, not {type(text).__name__}")
        self._check_open()
        if self._stop_index is not None:
            return ""
        return self._advance(self._text + text, final=False)

    def finish(self) -> str:
        """End of input: return what is still held back (a partial match is ordinary text)."""
        if self._finished:
            return ""
        self._finished = True
        if self._stop_index is not None:
            return ""
        return self._advance(self._text, final=True)

    def reset(self) -> None:
        """Start a new stream with the same stops."""
        self._open()

    def _quiet(self, on: bool) -> None:
        """While quiet no stop fires; afterwards none that completed meanwhile does (the vLLM
        plugin's ``min_tokens``, contract §10). A composed list of literal stops only."""
        if self._scan is None or any(isinstance(s, Regex) for s in self._stops):
            raise ValueError(
                "only a composed list of literal stops (Stop items or skip regions, no regex "
                "stop) can be quiet"
            )
        if on:
            self._floor = sys.maxsize
        elif self._floor == sys.maxsize:
            self._floor = len(self._text)

    @property
    def pending(self) -> str:
        """The text held back right now."""
        return self._held_text()


@functools.cache
def _incomplete_utf8_prefixes() -> frozenset[bytes]:
    """Every proper prefix of the UTF-8 encoding of a Unicode scalar value."""
    prefixes: set[bytes] = set()
    for code_point in range(0x80, 0x110000):
        if 0xD800 <= code_point <= 0xDFFF:
            continue
        encoded = chr(code_point).encode("utf-8")
        for length in range(1, len(encoded)):
            prefixes.add(encoded[:length])
    return frozenset(prefixes)


def _shaped(error: UnicodeDecodeError, raw: bytes, offset: int) -> UnicodeDecodeError:
    """``error`` (from decoding ``raw``) as CPython's incremental decoder reports it, whose
    input starts at ``offset``: the incomplete sequence carried over, then the new chunk."""
    return UnicodeDecodeError(
        "utf-8", raw[offset:], error.start - offset, error.end - offset, error.reason
    )


def _decode(raw: bytes, errors: str, *, final: bool) -> tuple[str, bytes]:
    """Decode all of ``raw``; return the text and the incomplete trailing sequence kept aside.

    Raises ``UnicodeDecodeError`` in strict mode for an invalid sequence (or, when ``final``, an
    incomplete one).
    """
    decoder = codecs.getincrementaldecoder("utf-8")(errors)
    text = decoder.decode(raw, final=final)
    tail: bytes = decoder.getstate()[0]
    if tail and tail not in _incomplete_utf8_prefixes():
        # CPython defers ED A0..ED BF; no continuation can make them valid (see module doc).
        # Decoding everything as final settles them: U+FFFD in "replace" mode, an error in
        # "strict" mode.
        return raw.decode("utf-8", errors), b""
    return text, tail


class ReferenceByteStopFilter(_Matcher):
    """Reference for :class:`stopstream.ByteStopFilter`: stop sequences over UTF-8 byte chunks.

    It keeps every byte received (until a stop fires) and decodes them all again on each
    ``feed``.
    """

    def __init__(
        self,
        stops: Stops,
        include_stop: bool = False,
        errors: str = "strict",
        *,
        skip: Iterable[tuple[str, str]] | None = None,
        skip_until: str | None = None,
        alphabet: str = DEFAULT_ALPHABET,
        horizon: int = 4,
    ) -> None:
        if not isinstance(errors, str):
            raise TypeError(f"errors must be a str, not {type(errors).__name__}")
        if errors not in _ERRORS_MODES:
            raise ValueError(f"errors must be 'strict' or 'replace', not {errors!r}")
        super().__init__(stops, include_stop, skip, skip_until, alphabet, horizon)
        self._errors = errors

    def _open(self) -> None:
        super()._open()
        self._raw = b""
        self._tail = b""
        # The decoding error owed after a stop that it fired (contract §9.9).
        self._owed: UnicodeDecodeError | None = None

    def _raise_owed(self) -> None:
        owed, self._owed = self._owed, None
        if owed is not None:
            raise owed

    @property
    def errors(self) -> str:
        """How invalid UTF-8 is handled: ``"strict"`` or ``"replace"``."""
        return self._errors

    def feed(self, data: bytes | bytearray | memoryview) -> bytes:
        """Take the next chunk; return the UTF-8 that is now safe to emit (may be empty).

        In strict mode an invalid sequence ends the text for the stops' look-around, as the end
        of the stream would (contract §9.9). A stop that completes before it wins, and nothing
        is raised. A stop that the end of the text there fires is returned and reported too,
        and the ``UnicodeDecodeError`` is raised by the next ``feed()`` or ``finish()``, once.
        Without a stop the call raises and changes nothing. The error is shaped as CPython's
        incremental decoder's: its ``object`` is the incomplete sequence carried over followed
        by this chunk.
        """
        if not isinstance(data, (bytes, bytearray, memoryview)):
            raise TypeError(
                f"feed() argument must be bytes, bytearray or memoryview, not {type(data).__name__}"
            )
        chunk = bytes(data)
        self._raise_owed()
        self._check_open()
        if self._stop_index is not None:
            return b""
        raw = self._raw + chunk
        try:
            text, tail = _decode(raw, self._errors, final=False)
        except UnicodeDecodeError as error:
            shaped = _shaped(error, raw, len(self._raw) - len(self._tail))
            before_error = raw[: error.start].decode("utf-8")
            if not self._decided(before_error):
                if not self._fires_at_end(before_error):
                    raise shaped from None
                # The text ends at the error, and its end fires a stop: reported now, the
                # error owed.
                self._owed = shaped
                return self._advance(before_error, final=True).encode("utf-8")
            # A stop completes before the invalid bytes: the stop wins, the rest is dropped.
            text, tail = before_error, b""
        output = self._advance(text, final=False)
        self._raw = raw
        self._tail = tail
        return output.encode("utf-8")

    def finish(self) -> bytes:
        """End of input: return what is still held back.

        An incomplete trailing sequence raises ``UnicodeDecodeError`` in strict mode (the filter
        stays open and unchanged), unless the text before it fires a stop at its end: then that
        is returned and reported, and the error owed as ``feed`` owes one. In replace mode it
        becomes U+FFFD, which takes part in matching like any other character.
        """
        self._raise_owed()
        if self._finished:
            return b""
        if self._stop_index is not None:
            self._finished = True
            return b""
        try:
            text, _ = _decode(self._raw, self._errors, final=True)
        except UnicodeDecodeError as error:
            shaped = _shaped(error, self._raw, len(self._raw) - len(self._tail))
            before_error = self._raw[: error.start].decode("utf-8")
            if not self._fires_at_end(before_error):
                raise shaped from None
            self._owed = shaped
            self._finished = True
            return self._advance(before_error, final=True).encode("utf-8")
        self._finished = True
        return self._advance(text, final=True).encode("utf-8")

    def reset(self) -> None:
        """Start a new stream with the same stops."""
        self._open()

    @property
    def pending(self) -> bytes:
        """The bytes held back right now: held text (as UTF-8) and an incomplete sequence."""
        if self._finished or self._stop_index is not None:
            return b""
        return self._held_text().encode("utf-8") + self._tail


class _Unit:
    """One unit of decoded text: a character, or one U+FFFD for a maximal invalid subpart."""

    __slots__ = ("end", "invalid", "raw_end", "raw_start", "settle", "start")

    def __init__(
        self, raw_start: int, raw_end: int, start: int, invalid: bool, settle: int
    ) -> None:
        self.raw_start, self.raw_end = raw_start, raw_end
        self.start, self.end = start, start + 1
        self.invalid = invalid
        # The raw byte whose arrival decides the unit (len(raw) for a U+FFFD at the end).
        self.settle = settle


def _units(raw: bytes, final: bool) -> tuple[list[_Unit], str]:
    """Cut ``raw`` into units (Unicode §3.9 maximal subparts); an incomplete end is left out
    unless ``final``, where it is one U+FFFD."""
    prefixes = _incomplete_utf8_prefixes()
    units: list[_Unit] = []
    chars: list[str] = []
    i = 0
    while i < len(raw):
        char = next(
            (n for n in (1, 2, 3, 4) if i + n <= len(raw) and _is_char(raw[i : i + n])),
            0,
        )
        if char:
            units.append(_Unit(i, i + char, len(chars), False, i + char - 1))
            chars.append(raw[i : i + char].decode("utf-8"))
            i += char
            continue
        prefix = max(
            (n for n in (1, 2, 3) if raw[i : i + n] in prefixes and i + n <= len(raw)), default=0
        )
        if prefix and i + prefix == len(raw) and not final:
            break  # the incomplete tail
        length = max(prefix, 1)
        settle = i + prefix if prefix else i
        units.append(_Unit(i, i + length, len(chars), True, settle))
        chars.append("\ufffd")
        i += length
    return units, "".join(chars)


def _is_char(data: bytes) -> bool:
    try:
        return len(data.decode("utf-8")) == 1
    except UnicodeDecodeError:
        return False


class ReferenceTokenStopFilter:
    """Reference for :class:`stopstream.TokenStopFilter` (contract §7): token ids in.

    ``tokens`` is each id's bytes (``None``: unassigned); ``special`` ids decode as nothing.
    Stops are any of contract §6 (``str``, :class:`Stop`, :class:`Regex`, skip regions), with
    ``alphabet`` and ``horizon`` as for the other reference filters. Every call decodes all the
    ids accepted so far again and matches the text with the rules of :class:`_Matcher`, reading
    the ids one at a time as the filter does: the stream closes at the first id after which a
    stop has fired (or at a stop token id, which ends the text as ``finish()`` does), and ids
    after that are not looked at. Released tokens are counted by the contract's rule: a token is
    released once all of its text has been emitted; when a stop fires, if any of its text was
    emitted (tokens wholly after the cut never are); a token without text once all the text
    before it was emitted. ``feed`` and ``finish`` return ``(text, tokens)``.
    """

    def __init__(
        self,
        tokens: list[bytes | None],
        stops: Stops,
        *,
        special: Iterable[int] = (),
        include_stop: bool = False,
        stop_token_ids: Iterable[int] = (),
        errors: str = "replace",
        strip_leading_space: bool = False,
        skip: Iterable[tuple[str, str]] | None = None,
        skip_until: str | None = None,
        alphabet: str = DEFAULT_ALPHABET,
        horizon: int = 4,
    ) -> None:
        if errors not in _ERRORS_MODES:
            raise ValueError(f"errors must be 'strict' or 'replace', not {errors!r}")
        self._tokens = list(tokens)
        self._special = frozenset(special)
        self._matcher = _Matcher(stops, include_stop, skip, skip_until, alphabet, horizon)
        self._include_stop = include_stop
        self._stop_ids = frozenset(stop_token_ids)
        for i in self._stop_ids:
            if not self._valid(i):
                raise ValueError(f"stop token id {i} is not in the vocabulary")
        self._errors = errors
        self._strip = strip_leading_space
        self.reset()

    def reset(self) -> None:
        """Start a new stream with the same settings."""
        self._ids: list[int] = []
        self._out = ""
        self._released = 0
        self._finished = False
        # (stop index, matched text, stop token id, held text)
        self._state: tuple[int | None, str | None, int | None, str] = (None, None, None, "")

    @property
    def stops(self) -> tuple[StopItem, ...]:
        """The stops, as given."""
        return self._matcher.stops

    def _valid(self, i: int) -> bool:
        return 0 <= i < len(self._tokens) and (i in self._special or self._tokens[i] is not None)

    def _text(self, i: int) -> bytes:
        token = self._tokens[i]
        return b"" if i in self._special or token is None else token

    def _bytes(self, ids: list[int]) -> tuple[bytes, list[tuple[int, int]]]:
        """The bytes of ``ids`` (the leading-space rule applied) and each id's byte range."""
        raw = b""
        ranges: list[tuple[int, int]] = []
        first = True
        for i in ids:
            piece = self._text(i)
            if piece and first:
                first = False
                if self._strip and piece[:1] == b" ":
                    piece = piece[1:]
            ranges.append((len(raw), len(raw) + len(piece)))
            raw += piece
        return raw, ranges

    def _seen(self, raw: bytes, final: bool) -> tuple[list[_Unit], str, _Unit | None]:
        """The units of ``raw``, the text the stops see, and the first invalid unit in strict
        mode (the text then ends before it: a stop before it wins, else it is an error)."""
        units, text = _units(raw, final)
        bad = next((u for u in units if u.invalid), None) if self._errors == "strict" else None
        return units, text if bad is None else text[: bad.start], bad

    def _evaluate(self, ids: list[int], final: bool, fresh: int) -> tuple[str, int, bool]:
        """Cumulative ``(output, released, closed)`` for ``ids``, of which the first ``fresh``
        were accepted before without closing the stream; records the stop state."""
        m = self._matcher
        stop_at = next((k for k, i in enumerate(ids) if i in self._stop_ids), None)
        body = ids if stop_at is None else ids[:stop_at]
        ends = final or stop_at is not None
        # The ids one at a time: the stream closes at the first after which a stop has fired.
        read: int | None = None
        for k in range(fresh + 1, len(body) + 1):
            units, text, bad = self._seen(self._bytes(body[:k])[0], False)
            if m._decided(text):
                read = k
                break
            if bad is not None:
                raise UnicodeDecodeError("utf-8", b"", 0, 1, "invalid")
        m._open()
        if read is not None:
            body = body[:read]
            units, text, _ = self._seen(self._bytes(body)[0], False)
            m._advance(text, final=False)
        else:
            units, text, bad = self._seen(self._bytes(body)[0], ends)
            if bad is not None:
                raise UnicodeDecodeError("utf-8", b"", 0, 1, "unexpected end of data")
            m._advance(text, final=ends)
        _, ranges = self._bytes(body)
        emitted = m._emitted
        output = m._text[:emitted]

        def unit_of(byte: int) -> _Unit | None:
            return next((u for u in units if u.raw_start <= byte < u.raw_end), None)

        def end_of(b: int) -> int | None:
            """Where a token ending at raw byte ``b`` ends in the text (``None``: not settled)."""
            if b == 0:
                return 0
            u = unit_of(b - 1)
            return None if u is None else u.end

        released = 0
        if m.stopped:
            for a, b in ranges:
                if a < b:
                    u = unit_of(a)
                    released += u is not None and u.start < emitted
                else:
                    e = end_of(b)
                    released += e is not None and e <= emitted
            self._state = (m.stop_index, m.stop_sequence, None, "")
            return output, released, True
        for _, b in ranges:
            e = end_of(b)
            released += e is not None and e <= emitted
        if stop_at is not None:
            own = self._text(ids[stop_at])
            if self._include_stop and own:
                output += own.decode("utf-8", self._errors)
            released += not own or self._include_stop
            self._state = (None, None, ids[stop_at], "")
            return output, released, True
        self._state = (None, None, None, "" if ends else m._held_text())
        return output, released, False

    def _advance(self, ids: list[int], final: bool) -> tuple[str, int]:
        output, released, _ = self._evaluate(ids, final, len(self._ids))
        assert output.startswith(self._out) and released >= self._released
        new = output[len(self._out) :], released - self._released
        self._ids, self._out, self._released = ids, output, released
        return new

    def feed(self, ids: Iterable[int]) -> tuple[str, int]:
        """Take the next ids; return the text now safe to emit and how many tokens it releases.

        An id outside the vocabulary raises ``ValueError`` (and changes nothing) unless the
        stream closes before it.
        """
        new = [int(i) for i in ids]
        if self._finished:
            raise ValueError("feed() called after finish(); call reset() to start a new stream")
        if self.stopped:
            return "", 0
        bad = next((k for k, i in enumerate(new) if not self._valid(i)), None)
        if bad is not None:
            saved = self._state
            try:
                _, _, closed = self._evaluate(self._ids + new[:bad], False, len(self._ids))
            finally:
                self._state = saved
            if not closed:
                raise ValueError(f"token id {new[bad]} at position {bad} is not in the vocabulary")
            new = new[:bad]
        saved = self._state
        try:
            return self._advance(self._ids + new, False)
        except UnicodeDecodeError:
            self._state = saved
            raise

    def finish(self) -> tuple[str, int]:
        """End of input: release what is held."""
        if self._finished:
            return "", 0
        if self.stopped:
            self._finished = True
            return "", 0
        saved = self._state
        try:
            result = self._advance(self._ids, True)
        except UnicodeDecodeError:
            self._state = saved
            raise
        self._finished = True
        return result

    @property
    def stopped(self) -> bool:
        """Whether a stop sequence or a stop token ended the stream."""
        return self._state[0] is not None or self._state[2] is not None

    @property
    def stop_index(self) -> int | None:
        """The index of the stop sequence that fired, or ``None``."""
        return self._state[0]

    @property
    def stop_sequence(self) -> str | None:
        """The text the stop that fired matched (a literal stop itself), or ``None``."""
        return self._state[1]

    @property
    def stop_token_id(self) -> int | None:
        """The stop token id that ended the stream, or ``None``."""
        return self._state[2]

    @property
    def stop_reason(self) -> Literal["stop_sequence", "stop_token", "end"] | None:
        """Why the stream ended, or ``None`` while open."""
        if self._state[0] is not None:
            return "stop_sequence"
        if self._state[2] is not None:
            return "stop_token"
        return "end" if self._finished else None

    @property
    def pending(self) -> str:
        """The text held back (without an incomplete character)."""
        return "" if self._finished else self._state[3]


# ---------------------------------------------------------------------------------------------
# Token bytes of a Hugging Face ``tokenizers`` vocabulary (``Vocab.from_tokenizers``)


@functools.cache
def _byte_level_table() -> dict[str, int]:
    """GPT-2's byte-level alphabet: the printable character standing for each byte."""
    printable = [*range(ord("!"), ord("~") + 1), *range(0xA1, 0xAC + 1), *range(0xAE, 0xFF + 1)]
    table = {chr(b): b for b in printable}
    extra = 0
    for b in range(256):
        if b not in printable:
            table[chr(256 + extra)] = b
            extra += 1
    return table


def _byte_level(token: str) -> bytes:
    table = _byte_level_table()
    return b"".join(
        bytes((table[c],)) if c in table else c.encode("utf-8", "surrogatepass") for c in token
    )


def _sentencepiece(decoders: list[dict[str, Any]]) -> tuple[Callable[[str], bytes], bool]:
    """A per-token decoder for ``Sequence([Replace, ByteFallback, Fuse, Strip])``-style chains."""
    import json

    replacements: list[tuple[str, str]] = []
    byte_fallback = fused = strip = False
    for d in decoders:
        kind = d.get("type")
        if kind == "Replace" and not fused:
            pattern = d.get("pattern", {})
            if "String" not in pattern:
                raise ValueError(
                    f"unsupported decoder: Replace with a {next(iter(pattern))} pattern"
                )
            replacements.append((pattern["String"], d["content"]))
        elif kind == "ByteFallback" and not fused:
            byte_fallback = True
        elif kind == "Fuse":
            fused = True
        elif (
            kind == "Strip"
            and fused
            and d.get("content") == " "
            and d.get("start") in (0, 1)
            and d.get("stop") == 0
        ):
            strip = bool(d["start"])
        else:
            raise ValueError(f"unsupported decoder in Sequence: {json.dumps(d)}")

    def decode(token: str) -> bytes:
        if byte_fallback and (m := re.fullmatch(r"<0x([0-9A-Fa-f]{2})>", token)):
            return bytes((int(m.group(1), 16),))
        for old, new in replacements:
            token = token.replace(old, new)
        return token.encode("utf-8", "surrogatepass")

    return decode, strip


def _metaspace(d: dict[str, Any]) -> tuple[Callable[[str], bytes], bool]:
    replacement = d.get("replacement", "\u2581")
    scheme = d.get("prepend_scheme")
    strip = scheme in ("always", "first") if scheme is not None else bool(d.get("add_prefix_space"))

    def decode(token: str) -> bytes:
        return token.replace(replacement, " ").encode("utf-8", "surrogatepass")

    return decode, strip


def reference_tokenizer_tokens(
    config: dict[str, Any], vocab: dict[str, int], size: int
) -> tuple[list[bytes | None], list[int], bool]:
    """Every id's bytes (``None`` unassigned), the special ids and whether the decoder drops
    the first space, from a tokenizer's JSON (``json.loads(tokenizer.to_str())``), its
    ``get_vocab(with_added_tokens=True)`` and its ``get_vocab_size(with_added_tokens=True)``:
    ``ByteLevel``, ``Metaspace`` and ``Replace``/``ByteFallback``/``Fuse``/``Strip`` chains;
    any other decoder is a ``ValueError`` naming it."""
    decoder = config.get("decoder")
    decode: Callable[[str], bytes]
    if decoder is None:
        raise ValueError("unsupported decoder: the tokenizer has none")
    kind = decoder.get("type")
    if kind == "ByteLevel":
        decode, strip = _byte_level, False
    elif kind == "Metaspace":
        decode, strip = _metaspace(decoder)
    elif kind == "Sequence":
        parts = decoder.get("decoders", [])
        if len(parts) == 1 and parts[0].get("type") in ("ByteLevel", "Metaspace"):
            decode, strip = (
                (_byte_level, False) if parts[0]["type"] == "ByteLevel" else _metaspace(parts[0])
            )
        else:
            decode, strip = _sentencepiece(parts)
    else:
        raise ValueError(f"unsupported decoder: {kind}")
    tokens: list[bytes | None] = [None] * size
    for token, i in vocab.items():
        if i >= len(tokens):
            tokens.extend([None] * (i + 1 - len(tokens)))
        tokens[i] = decode(token)
    special = sorted(a["id"] for a in config.get("added_tokens", []) if a.get("special"))
    return tokens, special, strip
