"""Every public entry point against awkward and wrong inputs.

Each row has a documented outcome (see ``docs/bad-input.md``): a result, or an ordinary
exception whose message names the problem. Never a ``PanicException`` or a crash, and a filter
that refused a chunk is unchanged and still usable. The heavy rows (a 100 MB chunk, 100,000
stops, a 1 MB stop) and the rows that tear down objects mid-exception run in a subprocess, so a
crash fails the test instead of killing the run.
"""

from __future__ import annotations

import array
import asyncio
import subprocess
import sys
import textwrap
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import pytest

import stopstream


class StrSub(str):
    __slots__ = ()


WRONG: dict[str, Any] = {
    "None": None,
    "int": 1,
    "float": 1.5,
    "list": ["a"],
    "dict": {"a": 1},
}
BYTES_LIKE: dict[str, Any] = {
    "bytes": b"ab",
    "bytearray": bytearray(b"ab"),
    "non-contiguous memoryview": memoryview(b"a-b-")[::2],
    "memoryview of ints": memoryview(array.array("B", b"ab")),
}
STRS: dict[str, str] = {
    "str subclass": StrSub("ab"),
    "NUL characters": "a\0b",
    "lone surrogates": "a\ud800b",
}


def _raises(call: Callable[[], object], exc: type[BaseException], *fragments: str) -> None:
    with pytest.raises(exc) as info:
        call()
    assert type(info.value) is exc or issubclass(type(info.value), exc)
    for fragment in fragments:
        assert fragment in str(info.value), (str(info.value), fragment)


# -- stops argument (every constructor and truncate share one parser) -------------------------

STOP_TAKERS: dict[str, Callable[[Any], object]] = {
    "StopFilter": lambda stops: stopstream.StopFilter(stops),
    "ByteStopFilter": lambda stops: stopstream.ByteStopFilter(stops),
    "truncate": lambda stops: stopstream.truncate("text", stops),
    "wrap": lambda stops: stopstream.wrap(iter(["text"]), stops),
    "awrap": lambda stops: stopstream.awrap(_agen(["text"]), stops),
}


async def _agen(items: list[Any]) -> AsyncIterator[Any]:
    for item in items:
        yield item


@pytest.mark.parametrize("taker", STOP_TAKERS, ids=str)
@pytest.mark.parametrize("name", ["int", "float"], ids=str)
def test_stops_not_iterable(taker: str, name: str) -> None:
    _raises(lambda: STOP_TAKERS[taker](WRONG[name]), TypeError, "stops must be", name)


@pytest.mark.parametrize("taker", STOP_TAKERS, ids=str)
@pytest.mark.parametrize("name", list(BYTES_LIKE)[:3], ids=str)
def test_stops_bytes_like_rejected(taker: str, name: str) -> None:
    _raises(lambda: STOP_TAKERS[taker](BYTES_LIKE[name]), TypeError, "stops must be")


@pytest.mark.parametrize("taker", STOP_TAKERS, ids=str)
@pytest.mark.parametrize("item", [None, 1, 1.5, ["a"], {"a": 1}, b"a"], ids=repr)
def test_stop_item_of_wrong_type_names_position(taker: str, item: object) -> None:
    _raises(
        lambda: STOP_TAKERS[taker](["ok", item]),
        TypeError,
        "position 1",
        type(item).__name__,
    )


@pytest.mark.parametrize("taker", STOP_TAKERS, ids=str)
def test_empty_stop_names_position(taker: str) -> None:
    _raises(lambda: STOP_TAKERS[taker](["ok", "fine", ""]), ValueError, "position 2", "empty")


def test_dict_of_stops_uses_keys_and_str_stops_are_fine() -> None:
    # A dict is an iterable of its keys, like everywhere else in Python.
    assert stopstream.StopFilter({"</a>": 1}).stops == ("</a>",)
    for value in STRS.values():
        f = stopstream.StopFilter([value])
        assert f.stops == (value,)
        assert f.feed("x" + value + "y") == "x"
        assert f.stop_sequence == value


def test_none_and_empty_list_are_no_stops() -> None:
    no_stops: list[list[str] | tuple[str, ...] | None] = [None, [], ()]
    for stops in no_stops:
        f = stopstream.StopFilter(stops)
        text = "anything at all"
        assert f.feed(text) is text


# -- chunks -----------------------------------------------------------------------------------


@pytest.mark.parametrize("name", list(WRONG) + list(BYTES_LIKE), ids=str)
def test_str_filter_rejects_non_str_and_stays_usable(name: str) -> None:
    f = stopstream.StopFilter(["</a>"])
    assert f.feed("x </") == "x "
    value = {**WRONG, **BYTES_LIKE}[name]
    _raises(lambda: f.feed(value), TypeError, "takes str", type(value).__name__)
    assert f.pending == "</"
    assert f.feed("a>") == ""
    assert f.stop_sequence == "</a>"


@pytest.mark.parametrize("name", [*WRONG, "str", "str subclass"], ids=str)
def test_byte_filter_rejects_non_bytes_and_stays_usable(name: str) -> None:
    f = stopstream.ByteStopFilter(["</a>"])
    assert f.feed(b"x </") == b"x "
    value = {**WRONG, "str": "ab", "str subclass": StrSub("ab")}[name]
    _raises(lambda: f.feed(value), TypeError, "takes bytes", type(value).__name__)
    assert f.pending == b"</"
    assert f.feed(b"a>") == b""
    assert f.stop_sequence == "</a>"


@pytest.mark.parametrize("name", BYTES_LIKE, ids=str)
def test_byte_filter_accepts_every_bytes_like(name: str) -> None:
    value = BYTES_LIKE[name]
    assert isinstance(value, bytes | bytearray | memoryview)
    want = bytes(value)
    f = stopstream.ByteStopFilter(None)
    assert f.feed(value) == want


@pytest.mark.parametrize("name", STRS, ids=str)
def test_str_filter_accepts_any_str(name: str) -> None:
    value = STRS[name]
    f = stopstream.StopFilter(["zz"])
    out = f.feed(value)
    assert out == value
    assert type(out) is str


@pytest.mark.parametrize("name", [*WRONG, "bytes"], ids=str)
def test_truncate_rejects_non_str(name: str) -> None:
    value = {**WRONG, "bytes": b"ab"}[name]
    _raises(lambda: stopstream.truncate(value, ["x"]), TypeError, "takes str")


@pytest.mark.parametrize("name", STRS, ids=str)
def test_truncate_accepts_any_str(name: str) -> None:
    value = STRS[name]
    assert stopstream.truncate(value + "STOP tail", ["STOP"]) == (value, "STOP")


@pytest.mark.parametrize("value", [None, 1, 1.5, ["a"], {"a": 1}], ids=repr)
def test_wrap_rejects_bad_first_item(value: Any) -> None:
    closed: list[bool] = []

    def upstream() -> Iterator[Any]:
        try:
            yield value
            yield "ok"
        finally:
            closed.append(True)

    s = stopstream.wrap(upstream(), ["x"])
    _raises(lambda: next(s), TypeError, "position 0", type(value).__name__)
    # The bad item is consumed; the stream ends rather than splice the text around it, and
    # the upstream is cancelled.
    assert closed == [True]
    assert list(s) == []
    assert s.stop_reason is None


def test_wrap_rejects_switching_kinds() -> None:
    items: list[Any] = ["a", b"b"]
    s = stopstream.wrap(iter(items), ["x"])
    assert next(s) == "a"
    _raises(lambda: next(s), TypeError, "position 1", "bytes", "started with str")
    items2: list[Any] = [b"a", "b"]
    s2: Any = stopstream.wrap(iter(items2), ["x"])
    assert next(s2) == b"a"
    _raises(lambda: next(s2), TypeError, "position 1", "str", "started with bytes")


def test_wrap_rejects_non_iterable() -> None:
    _raises(lambda: stopstream.wrap(1, ["x"]), TypeError, "iterable", "int")  # type: ignore[call-overload]


def test_awrap_rejects_bad_items_and_non_async_iterables() -> None:
    _raises(lambda: stopstream.awrap([1], ["x"]), TypeError, "async iterable", "list")  # type: ignore[call-overload]

    async def main() -> None:
        s = stopstream.awrap(_agen(["a", None, "ok"]), ["x"])
        assert await s.__anext__() == "a"
        with pytest.raises(TypeError, match="position 1"):
            await s.__anext__()
        with pytest.raises(StopAsyncIteration):
            await s.__anext__()
        assert s.stop_reason is None

    asyncio.run(main())


@pytest.mark.parametrize("errors", ["ignore", "surrogateescape", "", "STRICT"])
def test_unknown_error_mode(errors: str) -> None:
    _raises(lambda: stopstream.ByteStopFilter(["x"], errors=errors), ValueError, "errors")
    _raises(lambda: stopstream.wrap(iter([b"a"]), ["x"], errors=errors), ValueError, "errors")


@pytest.mark.parametrize("value", [1, None, "yes"], ids=repr)
def test_include_stop_must_be_bool(value: object) -> None:
    _raises(lambda: stopstream.StopFilter(["x"], value), TypeError)  # type: ignore[arg-type]


# -- heavy and crash-prone rows, each in its own interpreter -----------------------------------

SUBPROCESS_ROWS: dict[str, str] = {
    "100 MB str chunk": """
        big = "a" * 100_000_000
        f = stopstream.StopFilter(["</answer>"])
        assert f.feed(big) is big
        assert f.feed("</ans") == "" and f.pending == "</ans"
        assert stopstream.truncate(big + "</answer>x", ["</answer>"])[0] == big
    """,
    "100 MB bytes chunk": """
        big = b"\\xc3\\xa9" * 50_000_000
        f = stopstream.ByteStopFilter(["</answer>"])
        assert f.feed(big) is big
        assert f.feed(big[:1]) == b"" and f.pending == b"\\xc3"
    """,
    "100,000 stops": """
        stops = [f"<stop-{i:06d}>" for i in range(100_000)]
        f = stopstream.StopFilter(stops)
        assert f.feed("text <stop-0999") == "text "
        assert f.feed("99> tail") == "" and f.stop_index == 99_999
    """,
    "1 MB stop": """
        stop = "\\u4e2d" * 1_000_000
        f = stopstream.StopFilter([stop])
        assert f.feed("x" + stop[:-1]) == "x"
        assert len(f.pending) == 999_999
        assert f.feed(stop[-1]) == "" and f.stop_sequence == stop
    """,
    "temporary stream dropped while its error propagates": """
        for src in ([None], iter([None]), (x for x in [None])):
            try:
                list(stopstream.wrap(src, ["x"]))
            except TypeError as exc:
                assert "position 0" in str(exc)
            else:
                raise AssertionError("no TypeError")
    """,
    "upstream without close() dropped mid-iteration": """
        import gc
        s = stopstream.wrap(iter(["a", "b"]), ["x"])
        assert next(s) == "a"
        del s
        gc.collect()
    """,
}


@pytest.mark.parametrize("row", SUBPROCESS_ROWS, ids=str)
def test_heavy_rows_in_subprocess(row: str) -> None:
    code = "import stopstream\n" + textwrap.dedent(SUBPROCESS_ROWS[row]) + "\nprint('ok')\n"
    proc = subprocess.run(
        [sys.executable, "-X", "faulthandler", "-c", code],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "ok"
    assert "PanicException" not in proc.stderr
