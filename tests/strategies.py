"""Hypothesis strategies for stop lists, texts, chunkings and (broken) UTF-8 byte streams.

Everything is drawn from a small alphabet so that stops overlap, share prefixes and actually
occur in the text: ASCII letters and the characters of markup and chat delimiters, characters of
2, 3 and 4 UTF-8 bytes, a combining mark, U+FFFD (also what invalid bytes turn into in
``"replace"`` mode), and lone surrogates (``str`` only: they have no UTF-8 encoding). Regex
stops over broken UTF-8 come as pattern pairs (Rust syntax for ``stopstream``, Python syntax
for the reference) over the reference's default alphabet.
"""

from __future__ import annotations

import itertools
import random
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import AnyStr, Literal, TypeAlias

from hypothesis import strategies as st

import stopstream
from stopstream import reference

ASCII_CHARS = ["a", "b", "c", "<", "/", "\n"]
MULTIBYTE_CHARS = [
    "\u00e9",  # é: 2 bytes
    "\u20ac",  # €: 3 bytes
    "\u4e2d",  # 中: 3 bytes
    "\U0001f600",  # 😀: 4 bytes
    "\U00010000",  # 4 bytes, F0 90 80 80: not the same as the two lone surrogates below
    "\u0301",  # combining acute accent: matched as a code point of its own
    "\ufffd",  # the replacement character
]
SURROGATES = ["\ud800", "\udc00"]

BYTE_ALPHABET: list[str] = ASCII_CHARS + MULTIBYTE_CHARS
"""Characters for byte streams (each one has a UTF-8 encoding)."""

STR_ALPHABET: list[str] = BYTE_ALPHABET + SURROGATES
"""Characters for ``str`` streams."""

INVALID_UTF8: list[bytes] = [
    b"\xff",  # never valid
    b"\xfe",
    b"\xf5",  # above U+10FFFF
    b"\x80",  # lone continuation byte
    b"\xbf",
    b"\xc3",  # lead byte without its continuation
    b"\xc0\xaf",  # overlong "/"
    b"\xe0\x80\x80",  # overlong
    b"\xe2\x82",  # truncated "€"
    b"\xf0\x9f\x98",  # truncated "😀"
    b"\xf0\x9f",
    b"\xed\xa0\x80",  # encoded surrogate U+D800
    b"\xed\xbf\xbf",  # encoded surrogate U+DFFF
    b"\xed\xa0",  # first two bytes of an encoded surrogate
    b"\xf4\x90\x80\x80",  # U+110000
    b"\xf8\x88\x80\x80\x80",  # 5-byte form
]
"""Byte snippets that are (or, next to the right neighbours, become) invalid UTF-8."""

ChunkKind = Literal["bytes", "bytearray", "memoryview"]
ByteChunk: TypeAlias = bytes | bytearray | memoryview
StopsArgument: TypeAlias = str | Iterable[str] | None


def joined(
    characters: st.SearchStrategy[str], min_size: int, max_size: int
) -> st.SearchStrategy[str]:
    """Strings of ``min_size``..``max_size`` characters drawn from ``characters``."""
    return st.lists(characters, min_size=min_size, max_size=max_size).map("".join)


def alphabets(characters: Sequence[str]) -> st.SearchStrategy[list[str]]:
    """A non-empty subset of ``characters``: small subsets make matches and overlaps frequent."""
    return st.lists(st.sampled_from(characters), min_size=1, max_size=len(characters), unique=True)


@st.composite
def stop_lists(
    draw: st.DrawFn,
    letters: Sequence[str],
    *,
    max_stops: int = 30,
    max_length: int = 6,
) -> list[str]:
    """0..``max_stops`` stops of 1..``max_length`` characters from ``letters``.

    Besides fresh random stops it derives stops from earlier ones: prefixes, extensions,
    suffixes, infixes and exact duplicates, so that stops nest inside each other.
    """
    fresh = joined(st.sampled_from(letters), 1, max_length)
    count = draw(st.integers(0, max_stops))
    stops: list[str] = []
    for _ in range(count):
        if not stops:
            stops.append(draw(fresh))
            continue
        kind = draw(st.sampled_from(["fresh", "prefix", "extend", "suffix", "infix", "duplicate"]))
        base = draw(st.sampled_from(stops))
        if kind == "prefix":
            stop = base[: draw(st.integers(1, len(base)))]
        elif kind == "extend":
            stop = (base + draw(fresh))[:max_length]
        elif kind == "suffix":
            stop = base[draw(st.integers(0, len(base) - 1)) :]
        elif kind == "infix":
            start = draw(st.integers(0, len(base) - 1))
            stop = base[start : draw(st.integers(start + 1, len(base)))]
        elif kind == "duplicate":
            stop = base
        else:
            stop = draw(fresh)
        stops.append(stop)
    return stops


@st.composite
def texts(
    draw: st.DrawFn, letters: Sequence[str], stops: Sequence[str], *, max_pieces: int = 12
) -> str:
    """Text over ``letters`` with stops, partial stops and near misses planted in it."""
    noise = joined(st.sampled_from(letters), 0, 8)
    if not stops:
        return "".join(draw(noise) for _ in range(draw(st.integers(0, max_pieces))))
    stop = st.sampled_from(stops)
    partial = stop.flatmap(lambda s: st.integers(0, len(s) - 1).map(lambda n: s[:n]))
    # A stop with one character replaced: almost matches.
    altered = st.tuples(stop, st.sampled_from(letters)).flatmap(
        lambda pair: st.integers(0, len(pair[0]) - 1).map(
            lambda i: pair[0][:i] + pair[1] + pair[0][i + 1 :]
        )
    )
    piece = st.one_of(noise, stop, partial, altered)
    return "".join(draw(piece) for _ in range(draw(st.integers(0, max_pieces))))


@st.composite
def cut_points(draw: st.DrawFn, length: int) -> list[int]:
    """Sorted cut positions in ``0..length``; repeated positions make empty chunks."""
    style = draw(st.sampled_from(["random", "whole", "single", "empty-chunks"]))
    if style == "whole":
        return []
    if style == "single":
        return list(range(1, length))
    if style == "empty-chunks":
        # Every unit on its own, with empty chunks around and between.
        return sorted([*range(length + 1), *range(length + 1)])
    return sorted(draw(st.lists(st.integers(0, length), max_size=length + 3)))


def split(sequence: AnyStr, cuts: Sequence[int]) -> list[AnyStr]:
    """Cut ``sequence`` at ``cuts`` (sorted positions); ``"".join`` of the result is the input."""
    bounds = [0, *cuts, len(sequence)]
    return [sequence[start:end] for start, end in itertools.pairwise(bounds)]


@st.composite
def chunkings(draw: st.DrawFn, sequence: AnyStr) -> list[AnyStr]:
    """``sequence`` split anywhere (for bytes: also inside a character), empty chunks included."""
    return split(sequence, draw(cut_points(len(sequence))))


@st.composite
def with_invalid_utf8(draw: st.DrawFn, data: bytes, *, max_insertions: int = 3) -> bytes:
    """``data`` with invalid snippets inserted anywhere (also inside characters), and possibly
    cut short inside its last character."""
    result = data
    for _ in range(draw(st.integers(0, max_insertions))):
        position = draw(st.integers(0, len(result)))
        result = result[:position] + draw(st.sampled_from(INVALID_UTF8)) + result[position:]
    if result and draw(st.booleans()):
        result = result[: len(result) - draw(st.integers(1, min(3, len(result))))]
    return result


def as_chunk(data: bytes, kind: ChunkKind) -> ByteChunk:
    """``data`` as the given kind of bytes-like object."""
    if kind == "bytearray":
        return bytearray(data)
    if kind == "memoryview":
        return memoryview(data)
    return data


@st.composite
def chunk_kinds(draw: st.DrawFn, count: int) -> list[ChunkKind]:
    """A bytes-like type for each of ``count`` chunks (mostly ``bytes``)."""
    kind: st.SearchStrategy[ChunkKind] = st.sampled_from(
        ["bytes", "bytes", "bytes", "bytearray", "memoryview"]
    )
    return draw(st.lists(kind, min_size=count, max_size=count))


@dataclass(frozen=True)
class StopsForm:
    """How a stop list is passed to a constructor: list, tuple, iterator, single str or None."""

    name: str

    def build(self, stops: Sequence[str]) -> StopsArgument:
        """A fresh argument (iterators can only be consumed once) for ``stops``."""
        if self.name == "tuple":
            return tuple(stops)
        if self.name == "iterator":
            return iter(list(stops))
        if self.name == "single":
            (stop,) = stops
            return stop
        if self.name == "none":
            assert not stops
            return None
        return list(stops)


def stops_forms(stops: Sequence[str]) -> st.SearchStrategy[StopsForm]:
    """Every way of passing ``stops`` that the contract accepts."""
    names = ["list", "tuple", "iterator"]
    if len(stops) == 1:
        names.append("single")
    if not stops:
        names.append("none")
    return st.sampled_from(names).map(StopsForm)


@dataclass(frozen=True)
class StrCase:
    """A stop list and a text split into ``str`` chunks."""

    stops: list[str]
    chunks: list[str]

    @property
    def text(self) -> str:
        return "".join(self.chunks)


@dataclass(frozen=True)
class ByteCase:
    """A stop list and a byte stream split into chunks (each passed as ``kinds[i]``)."""

    stops: list[str]
    chunks: list[bytes]
    kinds: list[ChunkKind]

    @property
    def data(self) -> bytes:
        return b"".join(self.chunks)

    def chunk_objects(self) -> list[ByteChunk]:
        """Fresh chunk objects of the drawn kinds."""
        return [as_chunk(chunk, kind) for chunk, kind in zip(self.chunks, self.kinds, strict=True)]


@st.composite
def stops_and_text(
    draw: st.DrawFn, characters: Sequence[str], *, max_stops: int = 30
) -> tuple[list[str], str]:
    """A stop list and a text with the stops planted in it, over a sub-alphabet."""
    letters = draw(alphabets(characters))
    stops = draw(stop_lists(letters, max_stops=max_stops))
    return stops, draw(texts(letters, stops))


@st.composite
def str_cases(draw: st.DrawFn, *, max_stops: int = 30) -> StrCase:
    """Stops and a chunked ``str`` text, lone surrogates included."""
    stops, text = draw(stops_and_text(STR_ALPHABET, max_stops=max_stops))
    return StrCase(stops, draw(chunkings(text)))


@st.composite
def byte_streams(draw: st.DrawFn, *, invalid: bool, max_stops: int = 30) -> tuple[list[str], bytes]:
    """Stops and the UTF-8 of a text with the stops in it, optionally with invalid bytes.

    A few stops may contain a lone surrogate: valid stops that no decoded text can contain, but
    whose other characters still count as a prefix to hold back.
    """
    stops, text = draw(stops_and_text(BYTE_ALPHABET, max_stops=max_stops))
    for stop in draw(st.lists(st.sampled_from(stops or ["a"]), max_size=2)):
        position = draw(st.integers(0, len(stop)))
        surrogate = draw(st.sampled_from(SURROGATES))
        stops.insert(draw(st.integers(0, len(stops))), stop[:position] + surrogate)
    data = text.encode("utf-8")
    if invalid:
        data = draw(with_invalid_utf8(data))
    return stops, data


@st.composite
def byte_cases(draw: st.DrawFn, *, invalid: bool = True, max_stops: int = 30) -> ByteCase:
    """Stops and a byte stream split anywhere, optionally with invalid UTF-8 injected."""
    stops, data = draw(byte_streams(invalid=invalid, max_stops=max_stops))
    chunks = draw(chunkings(data))
    return ByteCase(stops, chunks, draw(chunk_kinds(len(chunks))))


@st.composite
def repetitive_cases(draw: st.DrawFn, *, max_length: int = 12) -> StrCase:
    """Long stops over two letters (``"aab"``, ``"abab"``...), where suffixes and prefixes of
    stops overlap in many ways, and a text made of their pieces."""
    stops = draw(stop_lists(["a", "b"], max_stops=6, max_length=max_length))
    text = draw(texts(["a", "b"], stops, max_pieces=16))
    return StrCase(stops, draw(chunkings(text)))


@st.composite
def many_stops_cases(draw: st.DrawFn, *, count: int = 1000) -> StrCase:
    """About ``count`` distinct stops of 4-10 characters over four letters, and a text over the
    same letters."""
    letters = ["a", "b", "\u20ac", "\U0001f600"]
    rng = random.Random(draw(st.integers(0, 2**32 - 1)))  # too many to draw one by one
    stops = list(
        dict.fromkeys("".join(rng.choices(letters, k=rng.randint(4, 10))) for _ in range(count))
    )
    text = draw(joined(st.sampled_from(letters), 0, 40))
    return StrCase(stops, draw(chunkings(text)))


# Regex stops over broken UTF-8 (contract §9.9: an invalid sequence ends the text for the
# stops' look-around).

REGEX_PAIRS: list[tuple[str, str, int | None]] = [
    # (Rust pattern, Python pattern, longest match) over the reference's alphabet: each needs
    # the character after its match, or the end, to decide.
    (r"\bab\b", r"\bab\b", 2),
    (r"a$", r"a\Z", 1),
    (r"1+\b", r"1+\b", None),
    (r"(?m:b$)", r"(?m:b$)", 1),
    (r"\w\b", r"\w\b", 1),
    (r"-\B", r"-\B", 1),
    (r"\u{e9}+\b", "\u00e9+\\b", None),
    (r"[ab]{2}\b", r"[ab]{2}\b", 2),
    (r".ab\b", r".ab\b", 3),
    (r"b\b", r"b\b", 1),
    (r"a\B", r"a\B", 1),
    (r"ab", r"ab", 2),
]
REGEX_TEXT = ["a", "b", "\u00e9", "-", " ", "\n", "1", "ab", "b a"]


@dataclass(frozen=True)
class RegexByteCase:
    """Stops (literal or regex, each as both implementations take it) and raw chunks."""

    real: tuple[str | stopstream.Regex, ...]
    ref: tuple[str | reference.Regex, ...]
    chunks: tuple[bytes, ...]
    include_stop: bool


@st.composite
def regex_byte_cases(draw: st.DrawFn) -> RegexByteCase:
    """One to three stops (mostly regex ones, each with its own include flag) and a text with
    invalid snippets inserted, cut into chunks anywhere."""
    real: list[str | stopstream.Regex] = []
    ref: list[str | reference.Regex] = []
    for _ in range(draw(st.integers(1, 3))):
        if draw(st.integers(0, 3)) == 0:
            literal = draw(st.sampled_from(["ab", "b-", "a", "1"]))
            real.append(literal)
            ref.append(literal)
        else:
            rust, python, longest = draw(st.sampled_from(REGEX_PAIRS))
            include = draw(st.sampled_from([None, None, True, False]))
            real.append(stopstream.Regex(rust, include=include))
            ref.append(reference.Regex(python, include, longest))
    text = "".join(draw(st.lists(st.sampled_from(REGEX_TEXT), max_size=8)))
    raw = draw(with_invalid_utf8(text.encode(), max_insertions=2))
    cuts = draw(cut_points(len(raw)))
    return RegexByteCase(tuple(real), tuple(ref), tuple(split(raw, cuts)), draw(st.booleans()))
