"""Bad inputs (contract §3) raise the named exception, and the filter stays usable."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from implementations import IMPLEMENTATIONS, ByteFilter, Implementation, StrFilter


@pytest.fixture(params=IMPLEMENTATIONS, ids=str)
def impl(request: pytest.FixtureRequest) -> Implementation:
    implementation: Implementation = request.param
    return implementation


def constructors(impl: Implementation) -> list[Callable[[Any], object]]:
    """Everything that takes a stop list."""
    return [
        lambda stops: impl.str_filter(stops),
        lambda stops: impl.str_filter(stops, include_stop=True),
        lambda stops: impl.byte_filter(stops),
        lambda stops: impl.byte_filter(stops, errors="replace"),
        lambda stops: impl.truncate("text", stops),
    ]


EMPTY_STOP_AT = [
    ("", 0),
    ([""], 0),
    (["a", ""], 1),
    (("a", "b", "c", "", "d"), 3),
    (["x"] * 12 + [""], 12),
]


@pytest.mark.parametrize(("stops", "position"), EMPTY_STOP_AT)
def test_empty_stop_is_value_error_naming_position(
    impl: Implementation, stops: Any, position: int
) -> None:
    for construct in constructors(impl):
        for argument in (stops, stops if isinstance(stops, str) else iter(stops)):
            with pytest.raises(ValueError, match=rf"\b{position}\b") as info:
                construct(argument)
            assert type(info.value) is ValueError


NON_STR_STOP_AT = [
    ([1], 0),
    (["a", None], 1),
    (["a", "b", b"c"], 2),
    (("a", "b", "c", "d", ["e"]), 4),
    (["x"] * 11 + [3.5], 11),
    (["x", 5, ""], 1),  # the first offending item
]


@pytest.mark.parametrize(("stops", "position"), NON_STR_STOP_AT)
def test_non_str_stop_is_type_error_naming_position(
    impl: Implementation, stops: list[Any], position: int
) -> None:
    for construct in constructors(impl):
        with pytest.raises(TypeError, match=rf"\b{position}\b"):
            construct(stops)
        with pytest.raises(TypeError, match=rf"\b{position}\b"):
            construct(iter(stops))


@pytest.mark.parametrize("stops", [5, 2.0, object(), b"ab", bytearray(b"ab")])
def test_stops_of_the_wrong_type(impl: Implementation, stops: Any) -> None:
    for construct in constructors(impl):
        with pytest.raises(TypeError):
            construct(stops)


@pytest.mark.parametrize("stops", [[" "], ["\t\n"], ["a", "a", "a"], [], None, ()])
def test_allowed_stop_lists(impl: Implementation, stops: Any) -> None:
    """Whitespace-only stops, duplicates and no stops at all are fine."""
    items = None if stops is None else list(stops)
    assert impl.str_filter(items).stops == tuple(items or ())
    assert impl.byte_filter(items).stops == tuple(items or ())


@pytest.mark.parametrize("errors", ["ignore", "surrogateescape", "backslashreplace", "STRICT", ""])
def test_unknown_errors_mode(impl: Implementation, errors: str) -> None:
    with pytest.raises(ValueError):
        impl.byte_filter(["x"], errors=errors)


def str_filter_twins(impl: Implementation) -> tuple[StrFilter, StrFilter]:
    """Two filters in the same state: one gets bad input, the other does not."""
    twins = (impl.str_filter(["</a>"]), impl.str_filter(["</a>"]))
    for f in twins:
        assert f.feed("x </") == "x "
    return twins


def byte_filter_twins(impl: Implementation, errors: str) -> tuple[ByteFilter, ByteFilter]:
    twins = (
        impl.byte_filter(["</a>"], errors=errors),
        impl.byte_filter(["</a>"], errors=errors),
    )
    for f in twins:
        assert f.feed(b"x </\xc3") == b"x "
    return twins


def same_state(a: StrFilter | ByteFilter, b: StrFilter | ByteFilter) -> None:
    assert (a.pending, a.stopped, a.stop_sequence, a.stop_index, a.stop_reason) == (
        b.pending,
        b.stopped,
        b.stop_sequence,
        b.stop_index,
        b.stop_reason,
    )


WRONG_STR_CHUNKS: list[tuple[object, str]] = [
    (b"a>", "bytes"),
    (bytearray(b"a>"), "bytearray"),
    (memoryview(b"a>"), "memoryview"),
    (5, "int"),
    (None, "NoneType"),
    (["a>"], "list"),
]


@pytest.mark.parametrize(("chunk", "type_name"), WRONG_STR_CHUNKS)
def test_wrong_chunk_type_str(impl: Implementation, chunk: Any, type_name: str) -> None:
    f, twin = str_filter_twins(impl)
    with pytest.raises(TypeError, match=type_name):
        f.feed(chunk)
    same_state(f, twin)
    assert f.pending == "</"
    assert f.feed("a>") == twin.feed("a>") == ""
    assert f.stop_sequence == "</a>"
    same_state(f, twin)


WRONG_BYTE_CHUNKS: list[tuple[object, str]] = [
    ("a>", "str"),
    (5, "int"),
    (None, "NoneType"),
    ([97], "list"),
]


@pytest.mark.parametrize("errors", ["strict", "replace"])
@pytest.mark.parametrize(("chunk", "type_name"), WRONG_BYTE_CHUNKS)
def test_wrong_chunk_type_bytes(
    impl: Implementation, chunk: Any, type_name: str, errors: str
) -> None:
    f, twin = byte_filter_twins(impl, errors)
    with pytest.raises(TypeError, match=type_name):
        f.feed(chunk)
    same_state(f, twin)
    assert f.pending == b"</\xc3"
    assert f.feed(b"\xa9") == twin.feed(b"\xa9") == b"</\xc3\xa9"
    same_state(f, twin)


def test_wrong_chunk_type_after_stop(impl: Implementation) -> None:
    f = impl.str_filter(["x"])
    f.feed("axb")
    with pytest.raises(TypeError, match="bytes"):
        f.feed(b"b")  # type: ignore[arg-type]
    assert f.stop_reason == "stop_sequence"
    assert f.feed("c") == ""
    b = impl.byte_filter(["x"])
    b.feed(b"axb")
    with pytest.raises(TypeError, match="str"):
        b.feed("b")  # type: ignore[arg-type]
    assert b.stop_reason == "stop_sequence"


def test_truncate_wrong_text_type(impl: Implementation) -> None:
    with pytest.raises(TypeError, match="bytes"):
        impl.truncate(b"text", ["x"])
    with pytest.raises(TypeError, match="int"):
        impl.truncate(5, ["x"])


INVALID_UTF8 = [
    b"\xff",
    b"\x80",
    b"\xc0\xaf",
    b"\xe0\x80\x80",
    b"\xed\xa0\x80",
    b"\xed\xa0",
    b"\xf4\x90\x80\x80",
    b"\xf8\x88\x80\x80\x80",
    b"\xc3(",
    b"\xe2\x82(",
]


@pytest.mark.parametrize("invalid", INVALID_UTF8)
def test_invalid_utf8_strict(impl: Implementation, invalid: bytes) -> None:
    f, twin = impl.byte_filter(["</a>"]), impl.byte_filter(["</a>"])
    assert f.feed(b"x </") == twin.feed(b"x </") == b"x "
    with pytest.raises(UnicodeDecodeError) as info:
        f.feed(b"a" + invalid + b"a>")
    assert info.value.encoding.replace("-", "").lower() == "utf8"
    same_state(f, twin)
    assert f.pending == b"</"
    # Nothing of the raising chunk was consumed: the stream goes on as if it never came.
    assert f.feed(b"a>") == twin.feed(b"a>") == b""
    same_state(f, twin)
    assert f.stop_sequence == "</a>"


@pytest.mark.parametrize("invalid", INVALID_UTF8)
def test_invalid_utf8_replace(impl: Implementation, invalid: bytes) -> None:
    f = impl.byte_filter(["</a>"], errors="replace")
    output = f.feed(b"a" + invalid + b"</a>")
    assert output == (b"a" + invalid).decode("utf-8", "replace").encode()
    assert f.stop_sequence == "</a>"


@pytest.mark.parametrize("tail", [b"\xc3", b"\xe2", b"\xe2\x82", b"\xf0\x9f\x98", b"\xed\x9f"])
def test_incomplete_at_finish_strict(impl: Implementation, tail: bytes) -> None:
    f = impl.byte_filter(["zz"])
    assert f.feed(b"ok z" + tail) == b"ok "
    for _ in range(2):
        with pytest.raises(UnicodeDecodeError):
            f.finish()
        assert f.stop_reason is None
        assert not f.stopped
        assert f.pending == b"z" + tail
    with pytest.raises(UnicodeDecodeError):
        f.feed(b"!")  # still open: "!" after the incomplete sequence is invalid
    assert f.pending == b"z" + tail
    f.reset()
    assert f.feed(b"z") == b""
    assert f.finish() == b"z"


@pytest.mark.parametrize("tail", [b"\xc3", b"\xe2\x82", b"\xf0\x9f\x98"])
def test_incomplete_at_finish_replace(impl: Implementation, tail: bytes) -> None:
    f = impl.byte_filter(["zz"], errors="replace")
    assert f.feed(b"ok z" + tail) == b"ok "
    assert f.finish() == "z\ufffd".encode()
    assert f.stop_reason == "end"


def test_feed_after_finish(impl: Implementation) -> None:
    f = impl.str_filter(["x"])
    assert f.finish() == ""
    with pytest.raises(ValueError) as info:
        f.feed("a")
    assert type(info.value) is ValueError
    f.reset()
    assert f.feed("a") == "a"
    b = impl.byte_filter(["x"])
    assert b.finish() == b""
    with pytest.raises(ValueError) as byte_info:
        b.feed(b"a")
    assert type(byte_info.value) is ValueError
    b.reset()
    assert b.feed(b"a") == b"a"


@pytest.mark.parametrize("errors", [None, b"strict", 0])
def test_errors_mode_of_the_wrong_type(impl: Implementation, errors: Any) -> None:
    with pytest.raises(TypeError):
        impl.byte_filter(["x"], errors=errors)


@pytest.mark.parametrize("include_stop", [None, 0, 1, "yes"])
def test_include_stop_must_be_bool(impl: Implementation, include_stop: Any) -> None:
    for construct in (impl.str_filter, impl.byte_filter):
        with pytest.raises(TypeError):
            construct(["x"], include_stop=include_stop)
    with pytest.raises(TypeError):
        impl.truncate("x", ["x"], include_stop=include_stop)
