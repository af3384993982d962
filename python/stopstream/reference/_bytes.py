"""The reference for UTF-8 byte chunks (``ByteStopFilter``), decoding with CPython's incremental
decoder (corrected as the package docstring says)."""

from __future__ import annotations

import codecs
import functools
from collections.abc import Iterable

from stopstream.reference._items import _ERRORS_MODES, DEFAULT_ALPHABET, Stops
from stopstream.reference._text import _Matcher


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
        # CPython defers ED A0..ED BF; no continuation can make them valid (see the package doc).
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
