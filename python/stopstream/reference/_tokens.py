"""The reference for token ids (``TokenStopFilter``, contract §7)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Literal

from stopstream.reference._bytes import _incomplete_utf8_prefixes
from stopstream.reference._items import _ERRORS_MODES, DEFAULT_ALPHABET, StopItem, Stops
from stopstream.reference._text import _Matcher


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
