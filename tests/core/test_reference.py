"""The contract by example: contract §5 and hand-written cases, run against every implementation.

Expected values here are worked out by hand from contract §2-4, not produced by either
implementation. The last part checks the reference's shortcuts against the literal definitions.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import stopstream
from hypothesis_profiles import examples
from implementations import IMPLEMENTATIONS, REFERENCE, Implementation
from stopstream import reference
from stopstream.reference import (
    ReferenceStopFilter,
    find_stop,
    held_suffix_length,
    reference_truncate,
)
from strategies import STR_ALPHABET, stops_and_text


@pytest.fixture(params=IMPLEMENTATIONS, ids=str)
def impl(request: pytest.FixtureRequest) -> Implementation:
    implementation: Implementation = request.param
    return implementation


@dataclass(frozen=True)
class StrExample:
    """Feeding ``chunks`` returns ``outputs`` one by one, then ``finish()`` returns ``final``."""

    stops: list[str] | str | None
    chunks: list[str]
    outputs: list[str]
    final: str
    stop_sequence: str | None
    stop_index: int | None = None
    include_stop: bool = False
    pendings: list[str] | None = None  # `pending` after each feed, when worth stating
    id: str = field(default="", compare=False)


@dataclass(frozen=True)
class ByteExample:
    """The same for ``ByteStopFilter``; an output of ``None`` means the feed raises."""

    stops: list[str] | str | None
    chunks: list[bytes]
    outputs: list[bytes | None]
    final: bytes | None
    stop_sequence: str | None
    stop_index: int | None = None
    include_stop: bool = False
    errors: str = "strict"
    pendings: list[bytes] | None = None
    id: str = field(default="", compare=False)


CONTRACT_STR_EXAMPLES = [
    StrExample(["</answer>"], ["Hello </ans", "wer> tail"], ["Hello ", ""], "", "</answer>", 0),
    StrExample(["</answer>"], ["a <", "b"], ["a ", "<b"], "", None),
    StrExample(["</answer>"], ["x </an"], ["x "], "</an", None),
    StrExample(["abcd", "bc"], ["abcd"], ["a"], "", "bc", 1),
    StrExample(["\n\nUser:"], ["a\n", "\nUser: hi"], ["a\n", "\nUser:"], "", "\n\nUser:", 0, True),
]
CONTRACT_BYTE_EXAMPLES = [
    ByteExample(
        ["</a>"],
        [b"caf\xc3", b"\xa9</", b"a> \xff"],
        [b"caf", b"\xc3\xa9", b""],
        b"",
        "</a>",
        0,
    ),
]

STR_EXAMPLES = [
    # Overlapping stops: the one that ends first wins, even if it starts later.
    StrExample(
        ["abcd", "bc"],
        ["a", "b", "c", "d"],
        ["", "", "a", ""],
        "",
        "bc",
        1,
        pendings=["a", "ab", "", ""],
        id="overlap-char-by-char",
    ),
    StrExample(["ab", "cd"], ["xabcd"], ["x"], "", "ab", 0, id="two-stops-first-ends-first"),
    StrExample(["cd", "ab"], ["xab", "cd"], ["x", ""], "", "ab", 1, id="list-order-irrelevant"),
    StrExample(["bcd", "abc"], ["abcd"], [""], "", "abc", 1, id="earlier-start-earlier-end"),
    # A stop that is a prefix of another completes first.
    StrExample(["abc", "ab"], ["a", "bc"], ["", ""], "", "ab", 1, id="prefix-completes-first"),
    # A stop that is a suffix of another ends at the same place: the longest wins.
    StrExample(["xab", "ab"], ["xab"], [""], "", "xab", 0, id="suffix-longest-wins"),
    StrExample(["ab", "xab"], ["1x", "ab"], ["1", ""], "", "xab", 1, id="suffix-longest-wins-2"),
    StrExample(["b", "ab"], ["ab"], [""], "", "ab", 1, id="longest-at-same-end"),
    StrExample(
        ["xab", "ab"], ["xab"], ["xab"], "", "xab", 0, include_stop=True, id="suffix-include"
    ),
    StrExample(
        ["abcd", "bc"], ["abcd"], ["abc"], "", "bc", 1, include_stop=True, id="overlap-include"
    ),
    # Duplicates: the first listed wins.
    StrExample(["end", "end"], ["the end"], ["the "], "", "end", 0, id="duplicate"),
    StrExample(["a", "b", "b"], ["xb"], ["x"], "", "b", 1, id="duplicate-later"),
    # Self-overlapping stop: the held part shrinks as the text moves on.
    StrExample(
        ["aab"],
        ["aa", "a", "b"],
        ["", "a", ""],
        "",
        "aab",
        0,
        pendings=["aa", "aa", ""],
        id="self-overlap",
    ),
    # Held text is released as soon as it can no longer become a stop.
    StrExample(
        ["</answer>"],
        ["<", "/a", "x", "y"],
        ["", "", "</ax", "y"],
        "",
        None,
        pendings=["<", "</a", "", ""],
        id="release-on-mismatch",
    ),
    StrExample(["abc", "x"], ["ab", "x"], ["", "ab"], "", "x", 1, id="held-then-other-stop"),
    StrExample(["ab"], ["ab", "more"], ["", ""], "", "ab", 0, id="stop-at-start"),
    StrExample([" "], ["a b"], ["a"], "", " ", 0, id="whitespace-stop"),
    StrExample(["a"], ["", "", "ba"], ["", "", "b"], "", "a", 0, id="empty-chunks"),
    # Characters outside the BMP and multi-code-point sequences.
    StrExample(["\U0001f600!"], ["a\U0001f600", "b"], ["a", "\U0001f600b"], "", None, id="emoji"),
    StrExample(["中文"], ["我说中", "文了"], ["我说", ""], "", "中文", 0, id="cjk"),
    StrExample(
        ["e\u0301"],
        ["caf\u00e9 cafe\u0301!"],
        ["caf\u00e9 caf"],
        "",
        "e\u0301",
        0,
        id="combining-mark-not-normalized",
    ),
    StrExample(
        ["\u00e9"], ["cafe\u0301"], ["cafe\u0301"], "", None, id="precomposed-not-decomposed"
    ),
    # Lone surrogates are code points of their own.
    StrExample(["\ud800"], ["a\ud800b"], ["a"], "", "\ud800", 0, id="lone-surrogate"),
    StrExample(["\ud800\udc00"], ["\U00010000"], ["\U00010000"], "", None, id="pair-is-not-astral"),
    StrExample(
        ["\U00010000"], ["\ud800\udc00"], ["\ud800\udc00"], "", None, id="astral-is-not-pair"
    ),
    StrExample(
        ["\ud800\udc00"],
        ["x\ud800", "\udc00y"],
        ["x", ""],
        "",
        "\ud800\udc00",
        0,
        pendings=["\ud800", ""],
        id="surrogates-split",
    ),
    StrExample(["\udc00"], ["\ud800", "a"], ["\ud800", "a"], "", None, id="surrogate-passes"),
    # include_stop: nothing is ever held back.
    StrExample(
        ["</a>"],
        ["x</", "a", ">yz"],
        ["x</", "a", ">"],
        "",
        "</a>",
        0,
        include_stop=True,
        pendings=["", "", ""],
        id="include-stop",
    ),
    # No stops: everything passes through unchanged.
    StrExample(None, ["a", "", "<\ud800\n"], ["a", "", "<\ud800\n"], "", None, id="stops-none"),
    StrExample([], ["a", "b"], ["a", "b"], "", None, id="stops-empty-list"),
    # A single str is one stop, not a list of characters.
    StrExample("END", ["xxE", "N", "Dyy"], ["xx", "", ""], "", "END", 0, id="single-str"),
    StrExample("ab", ["b"], ["b"], "", None, id="single-str-not-chars"),
    StrExample(
        ["</answer>"], ["x </answer", ""], ["x ", ""], "</answer", None, id="partial-at-end"
    ),
]

BYTE_EXAMPLES = [
    ByteExample(
        ["\u00e9!"],
        [b"caf\xc3", b"\xa9", b"?"],
        [b"caf", b"", b"\xc3\xa9?"],
        b"",
        None,
        pendings=[b"\xc3", b"\xc3\xa9", b""],
        id="2-byte-split",
    ),
    ByteExample(
        ["\u20ac"],
        [b"1\xe2", b"\x82", b"\xac2"],
        [b"1", b"", b""],
        b"",
        "\u20ac",
        0,
        pendings=[b"\xe2", b"\xe2\x82", b""],
        id="3-byte-split",
    ),
    ByteExample(
        ["x"],
        [b"\xf0\x9f", b"\x98\x80", b"x"],
        [b"", b"\xf0\x9f\x98\x80", b""],
        b"",
        "x",
        0,
        id="4-byte-split",
    ),
    ByteExample(
        ["\U0001f600"],
        [b"a\xf0", b"\x9f", b"\x98", b"\x80z"],
        [b"a", b"", b"", b""],
        b"",
        "\U0001f600",
        0,
        pendings=[b"\xf0", b"\xf0\x9f", b"\xf0\x9f\x98", b""],
        id="4-byte-stop-byte-by-byte",
    ),
    ByteExample(
        ["\u4e2d!"],
        [b"\xe4\xb8\xad", b"\xe4", b"\xb8\xad!"],
        [b"", b"", b"\xe4\xb8\xad"],
        b"",
        "\u4e2d!",
        0,
        id="3-byte-prefix-held",
    ),
    ByteExample(
        ["</a>"],
        [b"x</a", b">yz"],
        [b"x</a", b">"],
        b"",
        "</a>",
        0,
        include_stop=True,
        id="include-stop",
    ),
    ByteExample(
        ["</a>"],
        [b"x</a\xc3", b"\xa9"],
        [b"x</a", b"\xc3\xa9"],
        b"",
        None,
        include_stop=True,
        pendings=[b"\xc3", b""],
        id="include-stop-holds-incomplete-char",
    ),
    ByteExample(None, [b"a\xc3", b"\xa9b"], [b"a", b"\xc3\xa9b"], b"", None, id="no-stops"),
    # Strict mode.
    ByteExample(["b"], [b"ab\xff"], [b"a"], b"", "b", 0, id="stop-before-invalid-wins"),
    ByteExample(
        ["b"],
        [b"a", b"\xffb", b"cb"],
        [b"a", None, b"c"],
        b"",
        "b",
        0,
        pendings=[b"", b"", b""],
        id="invalid-before-stop-raises",
    ),
    ByteExample(
        ["bc"],
        [b"ab", b"\xff", b"c"],
        [b"a", None, b""],
        b"",
        "bc",
        0,
        pendings=[b"b", b"b", b""],
        id="raising-feed-consumes-nothing",
    ),
    ByteExample([], [b"x\xed\xa0\x80"], [None], b"", None, id="encoded-surrogate"),
    # ED A0 cannot start any valid sequence (CPython's incremental decoder waits for a third
    # byte; the contract follows Unicode).
    ByteExample([], [b"x\xed\xa0"], [None], b"", None, id="surrogate-lead-bytes"),
    ByteExample(
        [],
        [b"x\xed\x9f"],
        [b"x"],
        None,
        None,
        pendings=[b"\xed\x9f"],
        id="valid-ed-prefix-held",
    ),
    ByteExample([], [b"a\xc3"], [b"a"], None, None, pendings=[b"\xc3"], id="incomplete-at-finish"),
    # Replace mode: U+FFFD per maximal invalid subpart, and matched like any character.
    ByteExample(
        ["\ufffd"], [b"ab\xffcd"], [b"ab"], b"", "\ufffd", 0, errors="replace", id="replace-stop"
    ),
    ByteExample(
        [],
        [b"a\xff\xc0\xaf", b"\xe2\x82!", b"\xed\xa0\x80"],
        [b"a" + b"\xef\xbf\xbd" * 3, b"\xef\xbf\xbd!", b"\xef\xbf\xbd" * 3],
        b"",
        None,
        errors="replace",
        id="replace-maximal-subparts",
    ),
    ByteExample(
        [],
        [b"x\xed\xa0"],
        [b"x\xef\xbf\xbd\xef\xbf\xbd"],
        b"",
        None,
        errors="replace",
        pendings=[b""],
        id="replace-surrogate-lead-bytes-at-once",
    ),
    ByteExample(
        [],
        [b"a\xf0\x9f"],
        [b"a"],
        b"\xef\xbf\xbd",
        None,
        errors="replace",
        pendings=[b"\xf0\x9f"],
        id="replace-incomplete-at-finish",
    ),
    ByteExample(
        ["a\ufffd"],
        [b"xa\xc3"],
        [b"x"],
        b"",
        "a\ufffd",
        0,
        errors="replace",
        pendings=[b"a\xc3"],
        id="replace-at-finish-completes-stop",
    ),
    ByteExample(
        ["\ufffd"],
        [b"ok\xe2\x82"],
        [b"ok"],
        b"\xef\xbf\xbd",
        "\ufffd",
        0,
        errors="replace",
        include_stop=True,
        id="replace-at-finish-include-stop",
    ),
]


def run_str(impl: Implementation, example: StrExample) -> None:
    f = impl.str_filter(example.stops, include_stop=example.include_stop)
    outputs: list[str] = []
    pendings: list[str] = []
    for chunk in example.chunks:
        output = f.feed(chunk)
        assert type(output) is str
        outputs.append(output)
        pendings.append(f.pending)
    assert outputs == example.outputs
    if example.pendings is not None:
        assert pendings == example.pendings
    final = f.finish()
    assert type(final) is str
    assert final == example.final
    assert f.stop_sequence == example.stop_sequence
    assert f.stop_index == example.stop_index
    assert f.stopped == (example.stop_sequence is not None)
    assert f.stop_reason == ("end" if example.stop_sequence is None else "stop_sequence")
    assert f.pending == ""
    assert f.finish() == ""


def run_bytes(impl: Implementation, example: ByteExample) -> None:
    f = impl.byte_filter(example.stops, include_stop=example.include_stop, errors=example.errors)
    pendings: list[bytes] = []
    for chunk, expected in zip(example.chunks, example.outputs, strict=True):
        if expected is None:
            before = f.pending
            with pytest.raises(UnicodeDecodeError):
                f.feed(chunk)
            assert f.pending == before
            assert f.stop_reason is None
        else:
            output = f.feed(chunk)
            assert type(output) is bytes
            assert output == expected
        pendings.append(f.pending)
    if example.pendings is not None:
        assert pendings == example.pendings
    if example.final is None:
        before = f.pending
        with pytest.raises(UnicodeDecodeError):
            f.finish()
        assert f.pending == before
        assert f.stop_reason is None
        assert not f.stopped
        return
    final = f.finish()
    assert type(final) is bytes
    assert final == example.final
    assert f.stop_sequence == example.stop_sequence
    assert f.stop_index == example.stop_index
    assert f.stopped == (example.stop_sequence is not None)
    assert f.stop_reason == ("end" if example.stop_sequence is None else "stop_sequence")
    assert f.pending == b""
    assert f.finish() == b""


@pytest.mark.parametrize("example", CONTRACT_STR_EXAMPLES)
def test_spec_examples_str(impl: Implementation, example: StrExample) -> None:
    run_str(impl, example)


@pytest.mark.parametrize("example", CONTRACT_BYTE_EXAMPLES)
def test_spec_examples_bytes(impl: Implementation, example: ByteExample) -> None:
    run_bytes(impl, example)


@pytest.mark.parametrize("example", STR_EXAMPLES, ids=[e.id for e in STR_EXAMPLES])
def test_str_examples(impl: Implementation, example: StrExample) -> None:
    run_str(impl, example)


@pytest.mark.parametrize("example", BYTE_EXAMPLES, ids=[e.id for e in BYTE_EXAMPLES])
def test_byte_examples(impl: Implementation, example: ByteExample) -> None:
    run_bytes(impl, example)


@pytest.mark.parametrize(
    "example", CONTRACT_STR_EXAMPLES + STR_EXAMPLES, ids=lambda e: getattr(e, "id", "") or None
)
def test_str_examples_as_bytes(impl: Implementation, example: StrExample) -> None:
    """Each str example (without lone surrogates) gives the same result over UTF-8 chunks."""
    text = "".join(example.chunks)
    if any(0xD800 <= ord(c) <= 0xDFFF for c in text + "".join(example.stops or [])):
        return
    run_bytes(
        impl,
        ByteExample(
            example.stops,
            [chunk.encode() for chunk in example.chunks],
            [output.encode() for output in example.outputs],
            example.final.encode(),
            example.stop_sequence,
            example.stop_index,
            example.include_stop,
            pendings=None if example.pendings is None else [p.encode() for p in example.pendings],
        ),
    )


@pytest.mark.parametrize("example", CONTRACT_STR_EXAMPLES + STR_EXAMPLES)
def test_truncate_examples(impl: Implementation, example: StrExample) -> None:
    text = "".join(example.chunks)
    expected = "".join(example.outputs) + example.final
    assert impl.truncate(text, example.stops, example.include_stop) == (
        expected,
        example.stop_sequence,
    )
    assert impl.truncate(text, example.stops, include_stop=example.include_stop) == (
        expected,
        example.stop_sequence,
    )


# Lifecycle: properties, finish, feed after finish, feed after the stop, reset.


def test_properties(impl: Implementation) -> None:
    f = impl.str_filter(["a", "bb", "a"], include_stop=True)
    assert f.stops == ("a", "bb", "a")
    assert type(f.stops) is tuple
    assert f.include_stop is True
    assert impl.str_filter("x").stops == ("x",)
    assert impl.str_filter(None).stops == ()
    assert impl.str_filter(iter(["x", "y"])).stops == ("x", "y")
    assert impl.str_filter(["x"]).include_stop is False
    b = impl.byte_filter(("x", "\u20ac"))
    assert b.stops == ("x", "\u20ac")
    assert b.include_stop is False


def test_fresh_state(impl: Implementation) -> None:
    for f in (impl.str_filter(["x"]), impl.byte_filter(["x"])):
        assert not f.stopped
        assert f.stop_sequence is None
        assert f.stop_index is None
        assert f.stop_reason is None
    assert impl.str_filter(["x"]).pending == ""
    assert impl.byte_filter(["x"]).pending == b""


def test_finish_is_idempotent(impl: Implementation) -> None:
    f = impl.str_filter(["</a>"])
    assert f.feed("a </") == "a "
    assert f.pending == "</"
    assert f.finish() == "</"
    assert f.stop_reason == "end"
    assert not f.stopped
    assert f.pending == ""
    assert f.finish() == ""
    assert f.finish() == ""
    assert f.stop_reason == "end"


def test_finish_after_stop(impl: Implementation) -> None:
    f = impl.str_filter(["</a>"])
    assert f.feed("x</a>y") == "x"
    assert f.finish() == ""
    assert f.stop_reason == "stop_sequence"
    assert f.finish() == ""
    assert f.stop_reason == "stop_sequence"
    assert f.stop_sequence == "</a>"


def test_feed_after_stop_is_ignored(impl: Implementation) -> None:
    f = impl.str_filter(["stop"])
    assert f.feed("go stop now") == "go "
    assert f.pending == ""
    assert f.feed("more") == ""
    assert f.feed("stop") == ""
    assert f.pending == ""
    assert f.stop_index == 0
    b = impl.byte_filter(["stop"])
    assert b.feed(b"go stop now \xc3") == b"go "
    assert b.pending == b""
    assert b.feed(b"\xff\xfe") == b""  # ignored, not decoded
    assert b.pending == b""
    assert b.finish() == b""  # no incomplete-sequence error either


def test_feed_after_finish_raises(impl: Implementation) -> None:
    f = impl.str_filter(["x"])
    f.feed("a")
    f.finish()
    with pytest.raises(ValueError):
        f.feed("b")
    with pytest.raises(ValueError):
        f.feed("")
    assert f.stop_reason == "end"
    b = impl.byte_filter(["x"])
    b.finish()
    with pytest.raises(ValueError):
        b.feed(b"b")


def test_feed_after_stop_and_finish_raises(impl: Implementation) -> None:
    f = impl.str_filter(["x"])
    f.feed("ax")
    f.finish()
    with pytest.raises(ValueError):
        f.feed("b")
    assert f.stop_reason == "stop_sequence"


def test_reset(impl: Implementation) -> None:
    f = impl.str_filter(["</a>", "zz"])
    assert f.feed("1</a>2") == "1"
    f.reset()
    assert not f.stopped
    assert f.stop_reason is None
    assert f.stop_sequence is None
    assert f.stop_index is None
    assert f.stops == ("</a>", "zz")
    assert f.feed("3 z") == "3 "
    assert f.pending == "z"
    f.reset()
    assert f.pending == ""
    assert f.feed("z") == ""
    assert f.finish() == "z"
    f.reset()
    assert f.stop_reason is None
    assert f.feed("q zz") == "q "
    assert f.stop_index == 1


def test_reset_bytes(impl: Implementation) -> None:
    b = impl.byte_filter(["\u20ac"], errors="strict")
    assert b.feed(b"a\xe2\x82") == b"a"
    assert b.pending == b"\xe2\x82"
    b.reset()
    assert b.pending == b""
    with pytest.raises(UnicodeDecodeError):
        b.feed(b"\xac")  # what was held before the reset is gone
    assert b.feed(b"b\xe2\x82\xac") == b"b"
    assert b.stop_sequence == "\u20ac"
    b.reset()
    assert b.finish() == b""
    assert b.stop_reason == "end"


def test_strict_finish_error_keeps_filter_open(impl: Implementation) -> None:
    b = impl.byte_filter(["\u00e9!"])
    assert b.feed(b"ab\xc3") == b"ab"
    with pytest.raises(UnicodeDecodeError):
        b.finish()
    assert b.stop_reason is None
    assert b.pending == b"\xc3"
    assert b.feed(b"\xa9") == b""
    assert b.pending == b"\xc3\xa9"
    assert b.feed(b"!") == b""
    assert b.stop_sequence == "\u00e9!"


# Strict bytes and regex stops (contract §9.9): an invalid sequence ends the text for the stops'
# look-around, as finish() would. Texts are over the reference's alphabet.


@dataclass(frozen=True)
class Pattern:
    """A regex stop, in Rust syntax for ``stopstream`` and Python syntax for the reference."""

    rust: str
    python: str = ""
    include: bool | None = None

    def build(self, impl: Implementation) -> object:
        if impl is REFERENCE:
            return reference.Regex(self.python or self.rust, self.include)
        return stopstream.Regex(self.rust, include=self.include)


DecodeFailure = tuple[bytes, int, int]
"""A ``UnicodeDecodeError`` expected: its ``object``, ``start`` and ``end``."""


@dataclass(frozen=True)
class StrictEndExample:
    """Calls (``feed`` with a chunk, or ``finish``) and what each returns or raises; then the
    stop that fired, as ``(stop_index, stop_sequence)``."""

    stops: list[str | Pattern]
    calls: list[tuple[bytes | None, bytes | DecodeFailure | type[Exception]]]
    stop: tuple[int, str] | None
    errors: str = "strict"
    id: str = field(default="", compare=False)


AB = Pattern(r"\bab\b")
STRICT_END_EXAMPLES = [
    StrictEndExample(
        [AB],
        [
            (b"b a", b"b "),
            (b"b\xff a", b""),  # the end of "b ab" fires the stop
            (b"a", (b"b\xff a", 1, 2)),  # the error it owes, as feed would have raised it
            (b"a", b""),
            (None, b""),
            (None, b""),
            (b"a", ValueError),
        ],
        (0, "ab"),
        id="feed-fires-then-the-next-feed-raises",
    ),
    StrictEndExample(
        [AB],
        [
            (b"b ab\xe2", b"b "),
            (None, b""),
            (None, (b"\xe2", 0, 1)),
            (None, b""),
            (b"a", ValueError),
        ],
        (0, "ab"),
        id="incomplete-end-fires-then-the-next-finish-raises",
    ),
    StrictEndExample(
        [Pattern("a$", r"a\Z")],
        [(b"ba\xe2\x82", b"b"), (None, b""), (b"a", (b"\xe2\x82", 0, 2)), (b"a", ValueError)],
        (0, "a"),
        id="end-anchor",
    ),
    StrictEndExample(
        [Pattern(r"1+\b")],
        [(b"a 11\xff", b"a "), (None, (b"a 11\xff", 4, 5)), (None, b"")],
        (0, "11"),
        id="greedy-repetition-up-to-a-boundary",
    ),
    StrictEndExample(
        ["ab", Pattern(r".ab\b")],
        [(b"bab\xff", b""), (None, (b"bab\xff", 3, 4))],
        (1, "bab"),
        id="the-longer-match-the-end-decides-wins",
    ),
    StrictEndExample(
        [Pattern(r"\bab\b", include=True)],
        [(b"b ab\xff", b"b ab"), (b"", (b"b ab\xff", 4, 5)), (b"", b"")],
        (0, "ab"),
        id="include",
    ),
    StrictEndExample(
        [AB],
        [(b"b ab", b"b "), (b"a\xff", (b"a\xff", 1, 2)), (b" ", b""), (None, b"")],
        (0, "ab"),
        id="no-stop-at-the-error-raises-and-consumes-nothing",
    ),
    StrictEndExample(
        [AB], [(b"b ab \xff", b"b "), (None, b"")], (0, "ab"), id="stop-decided-before-the-error"
    ),
    StrictEndExample(
        ["ab"],
        [(b"b a\xff", (b"b a\xff", 3, 4)), (None, b"")],
        None,
        id="literal-stops-need-no-end",
    ),
    StrictEndExample(
        [Pattern(r"\bab\B")],
        [(b"b ab\xff", (b"b ab\xff", 4, 5)), (b"b ab-", b"b ab-"), (None, b"")],
        None,
        id="the-end-is-no-word-character",
    ),
    StrictEndExample(
        [AB],
        [(b"b ab\xff", b"b "), (None, b"")],
        (0, "ab"),
        errors="replace",
        id="replace-u+fffd-is-a-non-word-character",
    ),
    StrictEndExample(
        [Pattern(r"\bab\B")],
        [(b"b ab\xffa", b"b ab\xef\xbf\xbd"), (None, b"a")],
        None,
        errors="replace",
        id="replace-u+fffd-fails-a-non-boundary",
    ),
]


@pytest.mark.parametrize("example", STRICT_END_EXAMPLES, ids=[e.id for e in STRICT_END_EXAMPLES])
def test_strict_error_ends_the_text_for_the_look_around(
    impl: Implementation, example: StrictEndExample
) -> None:
    stops = [s.build(impl) if isinstance(s, Pattern) else s for s in example.stops]
    f = impl.byte_filter(stops, errors=example.errors)
    for step, (chunk, expected) in enumerate(example.calls):
        what = f"call {step}: {'finish' if chunk is None else f'feed {chunk!r}'}"
        before = (f.pending, f.stopped, f.stop_sequence, f.stop_index, f.stop_reason)
        call: Callable[[], bytes] = f.finish if chunk is None else partial(f.feed, chunk)
        if isinstance(expected, bytes):
            assert call() == expected, what
        elif isinstance(expected, tuple):
            with pytest.raises(UnicodeDecodeError) as info:
                call()
            got = (info.value.object, info.value.start, info.value.end)
            assert got == expected, what
            if not f.stopped:
                # Raised by the call that met the error: it consumed nothing.
                assert (f.pending, f.stopped, f.stop_sequence, f.stop_index, f.stop_reason) == (
                    before
                ), what
        else:
            with pytest.raises(expected):
                call()
    got_stop = None if f.stop_index is None else (f.stop_index, f.stop_sequence)
    reason = "stop_sequence" if example.stop else "end"
    assert (got_stop, f.stop_reason) == (example.stop, reason)
    f.reset()
    assert (f.pending, f.stopped, f.stop_reason) == (b"", False, None)
    assert f.finish() == b""


def test_reset_drops_the_owed_error(impl: Implementation) -> None:
    f = impl.byte_filter([AB.build(impl)])
    assert f.feed(b"b ab\xff") == b"b "
    f.reset()
    assert f.feed(b"a") == b""
    assert f.finish() == b"a"


def test_chunk_types(impl: Implementation) -> None:
    b = impl.byte_filter(["</a>"])
    assert b.feed(bytearray(b"x<")) == b"x"
    assert b.feed(memoryview(b"/a")) == b""
    assert b.feed(memoryview(b"__>__")[2:3]) == b""
    assert b.stop_sequence == "</a>"
    chunk = bytearray(b"y\xc3")
    b = impl.byte_filter([])
    assert b.feed(chunk) == b"y"
    chunk[1:2] = b"z"  # the filter must have copied what it holds
    assert b.feed(b"\xa9") == b"\xc3\xa9"


def test_str_subclass_chunks_and_stops(impl: Implementation) -> None:
    class Text(str):
        pass

    f = impl.str_filter([Text("ab")])
    assert f.feed(Text("xa")) == "x"
    assert f.feed(Text("b")) == ""
    assert f.stop_sequence == "ab"


def test_many_stops(impl: Implementation) -> None:
    stops = [f"<stop{i}>" for i in range(10_000)]
    f = impl.str_filter(stops)
    assert f.feed("text <stop9") == "text "
    assert f.feed("999") == ""
    assert f.pending == "<stop9999"
    assert f.feed("> more") == ""
    assert f.stop_index == 9999
    assert impl.truncate("a<stop5>b<stop4>", stops) == ("a", "<stop5>")


def test_long_stop(impl: Implementation) -> None:
    stop = "x" * 5000 + "!"
    f = impl.str_filter([stop])
    assert f.feed("a" + "x" * 4999) == "a"
    assert f.feed("x") == ""
    assert f.feed("x") == "x"
    assert f.pending == "x" * 5000
    assert f.feed("!") == ""
    assert f.stop_sequence == stop


# The reference's shortcuts against the literal definitions of contract §2.


def literal_stop(text: str, stops: list[str]) -> tuple[int, int, int] | None:
    """contract §2.2 word for word: scan end positions; at the first one with a stop ending there,
    take the longest such stop, the first listed among equal ones."""
    for end in range(1, len(text) + 1):
        ending = [(i, s) for i, s in enumerate(stops) if text[:end].endswith(s)]
        if ending:
            index, stop = max(ending, key=lambda pair: (len(pair[1]), -pair[0]))
            return end - len(stop), end, index
    return None


def literal_holdback(text: str, stops: list[str]) -> int:
    """contract §2.5: the longest suffix of ``text`` that is a proper prefix of some stop."""
    lengths = [
        n
        for n in range(min(len(text), max(map(len, stops), default=0)) + 1)
        for s in stops
        if n < len(s) and s[:n] == text[len(text) - n :]
    ]
    return max(lengths, default=0)


@pytest.mark.slow
@settings(max_examples=examples(300), deadline=None)
@given(case=stops_and_text(STR_ALPHABET))
def test_find_stop_is_the_literal_rule(case: tuple[list[str], str]) -> None:
    stops, text = case
    match = literal_stop(text, stops)
    assert find_stop(text, tuple(stops)) == match
    # Before the stop's end, no stop has fired: check the holdback of every such prefix.
    for end in range(len(text) + 1 if match is None else match[1]):
        prefix = text[:end]
        assert held_suffix_length(prefix, tuple(stops)) == literal_holdback(prefix, stops)


@pytest.mark.slow
@settings(max_examples=examples(200), deadline=None)
@given(case=stops_and_text(STR_ALPHABET), include_stop=st.booleans())
def test_reference_filter_agrees_with_reference_truncate(
    case: tuple[list[str], str], include_stop: bool
) -> None:
    stops, text = case
    f = ReferenceStopFilter(stops, include_stop)
    output = "".join(f.feed(c) for c in text) + f.finish()
    assert (output, f.stop_sequence) == reference_truncate(text, stops, include_stop)
