"""The reference for ``str`` chunks (``StopFilter``, ``truncate``), and the matching state the
bytes and token references decode into."""

from __future__ import annotations

import sys
from collections.abc import Iterable

from stopstream.reference._items import (
    DEFAULT_ALPHABET,
    Regex,
    StopItem,
    StopReason,
    Stops,
    validate_items,
    validate_skip,
)
from stopstream.reference._literal import find_stop, held_suffix_length
from stopstream.reference._scan import _Scan


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
