"""``stopstream.wrap``: the native pull API over a sync iterable of chunks.

Property tests compare every yielded piece, and the stream's attributes after it, with the
pure-Python reference filter; example tests pin down how the upstream is closed (exactly once:
when a stop fires, on ``close()``, on ``with`` exit, when the stream is dropped) and what the
stream does with upstream exceptions, mixed item types and re-entrant calls.
"""

from __future__ import annotations

import gc
import re
import traceback
import weakref
from collections.abc import Iterator
from typing import Any, Literal

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import stopstream
from hypothesis_profiles import examples
from stopstream import wrap
from stopstream.reference import ReferenceByteStopFilter, ReferenceStopFilter
from strategies import (
    ByteCase,
    RegexByteCase,
    StrCase,
    byte_cases,
    regex_byte_cases,
    str_cases,
)
from stream_support import (
    CountingIterator,
    CountingSource,
    GeneratorLog,
    Run,
    Snapshot,
    State,
    expected_run,
    logging_generator,
)

Errors = Literal["strict", "replace"]


def observed_run(stream: stopstream.StopStream[Any], upstream: CountingIterator[Any]) -> Run:
    """Iterate ``stream`` to its end (or a decode error) recording what it does."""
    run = Run()
    try:
        for piece in stream:
            run.snapshots.append(Snapshot.of(piece, stream))
    except UnicodeDecodeError as error:
        run.error = type(error)
    run.pulled = upstream.pulled
    run.final = State.of(stream)
    return run


# ---------------------------------------------------------------------------------------------
# Differential: wrap == reference filter fed item by item


@settings(deadline=None)
@given(case=str_cases(), include_stop=st.booleans())
def test_str_stream_matches_reference(case: StrCase, include_stop: bool) -> None:
    expected = expected_run(ReferenceStopFilter(case.stops, include_stop), case.chunks)
    upstream = CountingIterator(case.chunks)
    stream = wrap(upstream, case.stops, include_stop)
    assert observed_run(stream, upstream) == expected
    assert upstream.closed == int(expected.stopped_by_item)
    # The stream has ended for good.
    assert list(stream) == []
    assert stream.stops == tuple(case.stops)
    assert stream.include_stop is include_stop


@settings(deadline=None)
@given(
    case=byte_cases(invalid=True),
    include_stop=st.booleans(),
    errors=st.sampled_from(["strict", "replace"]),
)
def test_bytes_stream_matches_reference(case: ByteCase, include_stop: bool, errors: Errors) -> None:
    expected = expected_run(
        ReferenceByteStopFilter(case.stops, include_stop, errors), case.chunk_objects()
    )
    upstream = CountingIterator(case.chunk_objects())
    stream = wrap(upstream, case.stops, include_stop, errors)
    observed = observed_run(stream, upstream)
    if not case.chunks:
        # An empty upstream decides nothing: the stream's pending is then "" (a str).
        assert observed.snapshots == []
        assert observed.final == State("", False, None, None, "end")
        return
    assert observed == expected
    if expected.error is None:
        assert upstream.closed == int(expected.stopped_by_item)


@settings(deadline=None)
@given(case=byte_cases(invalid=False), include_stop=st.booleans())
def test_valid_bytes_stream_matches_reference(case: ByteCase, include_stop: bool) -> None:
    expected = expected_run(ReferenceByteStopFilter(case.stops, include_stop), case.chunk_objects())
    assert expected.error is None
    pieces = list(wrap(case.chunk_objects(), case.stops, include_stop))
    assert pieces == [snap.piece for snap in expected.snapshots]
    assert all(type(piece) is bytes and piece for piece in pieces)


def test_stream_examples() -> None:
    assert list(wrap(["Hello </ans", "wer> tail"], ["</answer>"])) == ["Hello "]
    assert list(wrap(["a <", "b"], ["</answer>"])) == ["a ", "<b"]
    assert list(wrap(["x </an"], ["</answer>"])) == ["x ", "</an"]
    assert list(wrap(["abcd"], ["abcd", "bc"])) == ["a"]
    assert list(wrap(["a\n", "\nUser: hi"], ["\n\nUser:"], include_stop=True)) == [
        "a\n",
        "\nUser:",
    ]
    # Held text released with the chunk after it, and a chunk cut before held text: new
    # strings of two parts (ASCII ones are built directly, others through the decoder).
    stops = ["\n\nUser:", "</answer>"]
    chunks = ["ok.\n", "next line", "<", "/b> and ", "é\n", "\nUs", "e"]
    assert list(wrap(chunks, stops)) == ["ok.", "\nnext line", "</b> and ", "é", "\n\nUse"]
    s = wrap([b"caf\xc3", b"\xa9</", b"a> \xff"], ["</a>"])
    assert list(s) == [b"caf", b"\xc3\xa9"]
    assert (s.stop_sequence, s.stop_index, s.stop_reason) == ("</a>", 0, "stop_sequence")


def test_pieces_are_never_empty_and_types_follow_first_item() -> None:
    assert list(wrap(["", "", "a", "", "b", ""], None)) == ["a", "b"]
    pieces = list(wrap([bytearray(b"ab"), memoryview(b"cd"), b"", b"e"], None))
    assert pieces == [b"ab", b"cd", b"e"]
    assert all(type(p) is bytes for p in pieces)


def test_empty_upstream_ends_with_reason_end() -> None:
    s = wrap([], ["x"])
    assert list(s) == []
    assert s.stop_reason == "end"
    assert not s.stopped
    assert s.stop_sequence is None
    assert s.pending == ""


def test_attributes_while_open() -> None:
    s = wrap(["ab<", "/x"], ["</a>"])
    assert s.stop_reason is None
    assert s.pending == ""
    assert next(s) == "ab"
    assert s.pending == "<"
    assert s.stop_reason is None
    assert not s.stopped
    assert next(s) == "</x"
    assert s.stop_reason is None
    assert s.pending == ""
    with pytest.raises(StopIteration):
        next(s)
    assert s.stop_reason == "end"


# ---------------------------------------------------------------------------------------------
# Closing the upstream


def test_stop_closes_upstream_before_yielding_last_piece() -> None:
    source = CountingSource(["Hello", " world</ans", "wer> tail", "never pulled"])
    s = wrap(source, ["</answer>"])
    assert next(s) == "Hello"
    assert (source.closed, source.iterator.closed) == (0, 0)
    assert next(s) == " world"
    assert (source.closed, source.iterator.closed) == (0, 0)
    source2 = CountingSource(["Hello", " world</answer> tail", "never pulled"])
    s = wrap(source2, ["</answer>"])
    assert next(s) == "Hello"
    assert (source2.closed, source2.iterator.closed) == (0, 0)
    assert next(s) == " world"
    # Closed as soon as the stop was seen, before the last piece reached the caller.
    assert (source2.closed, source2.iterator.closed) == (1, 1)
    assert source2.iterator.pulled == 2
    assert s.stop_reason == "stop_sequence"
    assert s.pending == ""
    with pytest.raises(StopIteration):
        next(s)
    s.close()
    s.close()
    del s
    gc.collect()
    assert (source2.closed, source2.iterator.closed) == (1, 1)


def test_stop_closes_upstream_when_the_stop_is_seen() -> None:
    """The upstream is already closed when the stream hands out its last piece."""
    source = CountingSource(["abc", "def<st", "op>ghi"])
    s = wrap(source, ["<stop>"])
    assert next(s) == "abc"
    assert source.closed == 0
    assert next(s) == "def"
    assert source.closed == 0
    # "op>" completes the stop: nothing new to yield, so the stream ends, closed.
    with pytest.raises(StopIteration):
        next(s)
    assert (source.closed, source.iterator.closed) == (1, 1)
    assert s.stop_sequence == "<stop>"


def test_stop_finalizes_generator_upstream() -> None:
    log = GeneratorLog()
    s = wrap(logging_generator(["a", "b<s>", "c", "d"], log), ["<s>"])
    assert next(s) == "a"
    assert next(s) == "b"
    # The generator was closed (GeneratorExit at its yield) before the last piece came out.
    assert (log.finalized, log.closed_by_exit) == (1, 1)
    assert log.produced == ["a", "b<s>"]
    assert list(s) == []
    del s
    gc.collect()
    assert log.finalized == 1


def test_stop_in_first_item_with_include_stop() -> None:
    upstream = CountingIterator(["x\n\nUser: y", "z"])
    s = wrap(upstream, ["\n\nUser:"], include_stop=True)
    assert list(s) == ["x\n\nUser:"]
    assert (upstream.pulled, upstream.closed) == (1, 1)


def test_break_then_close() -> None:
    source = CountingSource(["a", "b", "c"])
    s = wrap(source, None)
    for piece in s:
        assert piece == "a"
        break
    assert (source.closed, source.iterator.closed) == (0, 0)
    s.close()
    assert (source.closed, source.iterator.closed) == (1, 1)
    s.close()
    assert (source.closed, source.iterator.closed) == (1, 1)
    assert list(s) == []
    assert source.iterator.pulled == 1
    assert s.stop_reason is None
    del s
    gc.collect()
    assert (source.closed, source.iterator.closed) == (1, 1)


class _DynamicClose:
    """An iterator whose ``close`` comes from ``__getattr__``, or whose lookup of it raises."""

    def __init__(self, items: list[str], lookup_error: Exception | None = None) -> None:
        self._items = iter(items)
        self.closed = 0
        self._error = lookup_error

    def __iter__(self) -> _DynamicClose:
        return self

    def __next__(self) -> str:
        return next(self._items)

    def __getattr__(self, name: str) -> Any:
        if name != "close":
            raise AttributeError(name)
        if self._error is not None:
            raise self._error

        def close() -> None:
            self.closed += 1

        return close


def test_close_is_looked_up_by_the_attribute_protocol() -> None:
    # Found through ``__getattr__`` (not the type): called once.
    upstream = _DynamicClose(["a", "b"])
    s = wrap(upstream, None)
    assert next(s) == "a"
    s.close()
    assert upstream.closed == 1
    # A lookup that fails with another error than AttributeError is the close's failure.
    failing = _DynamicClose(["a", "b"], RuntimeError("no lookup"))
    s = wrap(failing, None)
    assert next(s) == "a"
    with pytest.raises(RuntimeError, match="no lookup"):
        s.close()


def test_break_then_close_generator() -> None:
    log = GeneratorLog()
    s = wrap(logging_generator(["a", "b", "c"], log), None)
    assert next(s) == "a"
    s.close()
    assert (log.finalized, log.closed_by_exit) == (1, 1)
    assert log.produced == ["a"]
    s.close()
    assert log.finalized == 1


def test_close_before_iterating() -> None:
    upstream = CountingIterator(["a"])
    s = wrap(upstream, None)
    s.close()
    assert upstream.closed == 1
    assert list(s) == []
    assert upstream.pulled == 0


def test_with_exit_closes_upstream() -> None:
    source = CountingSource(["a", "b", "c"])
    with wrap(source, None) as s:
        assert next(s) == "a"
    assert (source.closed, source.iterator.closed) == (1, 1)
    assert list(s) == []
    del s
    gc.collect()
    assert (source.closed, source.iterator.closed) == (1, 1)


def test_with_exit_on_exception_closes_upstream_and_propagates() -> None:
    log = GeneratorLog()

    class Boom(Exception):
        pass

    with pytest.raises(Boom), wrap(logging_generator(["a", "b"], log), None) as s:
        next(s)
        raise Boom
    assert (log.finalized, log.closed_by_exit) == (1, 1)


def test_with_exit_after_stop_closes_once() -> None:
    source = CountingSource(["a<s>", "b"])
    with wrap(source, "<s>") as s:
        assert list(s) == ["a"]
    assert (source.closed, source.iterator.closed) == (1, 1)


def test_gc_after_partial_iteration_closes_upstream() -> None:
    source = CountingSource(["a", "b", "c"])
    s = wrap(source, None)
    assert next(s) == "a"
    del s
    gc.collect()
    assert (source.closed, source.iterator.closed) == (1, 1)


def test_gc_after_partial_iteration_finalizes_generator() -> None:
    log = GeneratorLog()
    s = wrap(logging_generator(["a", "b", "c"], log), ["zz"])
    assert next(s) == "a"
    del s
    gc.collect()
    assert (log.finalized, log.closed_by_exit) == (1, 1)
    assert log.produced == ["a"]


def test_gc_of_stream_in_reference_cycle_closes_upstream() -> None:
    upstream = CountingIterator(["a", "b"])
    s = wrap(upstream, None)
    assert next(s) == "a"
    holder: dict[str, Any] = {}
    holder["self"] = holder
    holder["stream"] = s
    del s, holder
    gc.collect()
    assert upstream.closed == 1


def test_gc_of_stream_and_upstream_in_one_cycle_closes_intact_upstream() -> None:
    """Stream and upstream become garbage together (say, both referenced from a traceback that
    is part of a cycle): the upstream's ``close()`` runs once, on an intact object, and
    nothing is reported as an unraisable error."""
    log: list[str] = []

    class Upstream:
        def __init__(self) -> None:
            self.items = iter(["a", "b"])
            self.log = log

        def __iter__(self) -> Upstream:
            return self

        def __next__(self) -> str:
            return next(self.items)

        def close(self) -> None:
            self.log.append("closed")

    upstream = Upstream()
    s = wrap(upstream, None)
    assert next(s) == "a"
    holder: dict[str, Any] = {"stream": s, "upstream": upstream}
    holder["self"] = holder
    del s, upstream, holder
    gc.collect()
    assert log == ["closed"]


def test_exhaustion_does_not_close_upstream_iterator() -> None:
    upstream = CountingIterator(["a", "b"])
    s = wrap(upstream, ["zz"])
    assert list(s) == ["a", "b"]
    assert s.stop_reason == "end"
    assert upstream.closed == 0
    s.close()
    del s
    gc.collect()
    assert upstream.closed == 0


def test_exhaustion_of_generator_ends_it_naturally() -> None:
    log = GeneratorLog()
    s = wrap(logging_generator(["a", "b<"], log), ["<s>"])
    assert list(s) == ["a", "b", "<"]
    assert (log.finalized, log.closed_by_exit) == (1, 0)


# ---------------------------------------------------------------------------------------------
# Upstream exceptions


class UpstreamError(Exception):
    pass


def failing_generator(error: BaseException, log: GeneratorLog) -> Iterator[str]:
    try:
        yield "ab<"
        yield "/"
        raise_from_upstream(error)
        yield "never"
    finally:
        log.finalized += 1


def raise_from_upstream(error: BaseException) -> None:
    raise error


def test_upstream_exception_propagates_unchanged() -> None:
    error = UpstreamError("upstream broke")
    log = GeneratorLog()
    s = wrap(failing_generator(error, log), ["</a>"])
    assert next(s) == "ab"
    assert s.pending == "<"
    with pytest.raises(UpstreamError) as info:
        next(s)
    assert info.value is error
    frames = [frame.name for frame in traceback.extract_tb(info.value.__traceback__)]
    assert "failing_generator" in frames
    assert frames[-1] == "raise_from_upstream"
    # A dropped stream is not a finished one.
    assert s.stop_reason is None
    assert not s.stopped
    assert s.stop_sequence is None
    assert s.pending == "</"
    with pytest.raises(StopIteration):
        next(s)
    assert list(s) == []
    assert s.stop_reason is None
    assert s.pending == "</"
    assert log.finalized == 1


def test_upstream_exception_bytes_pending_kept() -> None:
    def upstream() -> Iterator[bytes]:
        yield b"caf\xc3"
        raise UpstreamError

    s = wrap(upstream(), ["<"])
    assert next(s) == b"caf"
    with pytest.raises(UpstreamError):
        next(s)
    assert s.pending == b"\xc3"
    assert s.stop_reason is None
    assert list(s) == []


def test_upstream_exception_from_iterator_object_then_close_once() -> None:
    class Broken(CountingIterator[str]):
        def __next__(self) -> Any:
            if self.pulled == 1:
                raise UpstreamError("second item")
            return super().__next__()

    upstream = Broken(["<a", "b"])
    s = wrap(upstream, ["<ab>"])
    with pytest.raises(UpstreamError, match="second item"):
        next(s)
    assert s.pending == "<a"
    assert s.stop_reason is None
    # The stream ended and closed the upstream; closing it again does nothing.
    assert upstream.closed == 1
    s.close()
    s.close()
    del s
    gc.collect()
    assert upstream.closed == 1


def test_upstream_exception_in_first_pull() -> None:
    def upstream() -> Iterator[str]:
        raise UpstreamError
        yield ""  # pragma: no cover

    s = wrap(upstream(), None)
    with pytest.raises(UpstreamError):
        next(s)
    assert s.stop_reason is None
    assert s.pending == ""
    assert list(s) == []


def test_keyboard_interrupt_from_upstream_propagates() -> None:
    def upstream() -> Iterator[str]:
        yield "a"
        raise KeyboardInterrupt

    s = wrap(upstream(), None)
    assert next(s) == "a"
    with pytest.raises(KeyboardInterrupt):
        next(s)
    assert list(s) == []


# ---------------------------------------------------------------------------------------------
# Item types


@pytest.mark.parametrize(
    ("items", "position", "type_name"),
    [
        (["a", b"b"], 1, "bytes"),
        (["a", "", bytearray(b"b")], 2, "bytearray"),
        (["a", memoryview(b"b")], 1, "memoryview"),
        (["a", 5], 1, "int"),
        ([b"a", "b"], 1, "str"),
        ([b"a", b"", bytearray(b"x"), memoryview(b"y"), "z"], 4, "str"),
        ([b"a", None], 1, "NoneType"),
        ([3.5], 0, "float"),
        ([None, "a"], 0, "NoneType"),
        ([["a"]], 0, "list"),
    ],
)
def test_wrong_item_type_names_position_and_type(
    items: list[Any], position: int, type_name: str
) -> None:
    upstream = CountingIterator(items)
    s = wrap(upstream, None)
    good: list[str | bytes] = []
    with pytest.raises(TypeError) as info:
        good.extend(s)
    message = str(info.value)
    assert re.search(rf"\bposition {position}\b", message), message
    assert re.search(rf"\b{type_name}\b", message), message
    # Everything before the offending item came through.
    assert good == [
        bytes(item) if not isinstance(item, str) else item for item in items[:position] if item
    ]
    assert upstream.pulled == position + 1
    s.close()
    assert upstream.closed == 1


def test_str_subclass_items_are_str() -> None:
    class Text(str):
        __slots__ = ()

    pieces = list(wrap([Text("ab"), Text("c<s>d")], "<s>"))
    assert pieces == ["ab", "c"]


def test_strict_decode_error_is_raised_at_the_invalid_item() -> None:
    upstream = CountingIterator([b"ok ", b"\xe2\x82", b"x\xff", b"never pulled"])
    s = wrap(upstream, None)
    assert next(s) == b"ok "
    with pytest.raises(UnicodeDecodeError):
        next(s)
    assert upstream.pulled == 3
    assert s.pending == b"\xe2\x82"
    assert s.stop_reason is None


def test_replace_mode_substitutes() -> None:
    s = wrap([b"ok ", b"\xe2\x82", b"x\xff"], None, errors="replace")
    assert b"".join(s) == "ok \ufffdx\ufffd".encode()


def test_incomplete_utf8_at_end_strict_raises() -> None:
    s = wrap([b"ab\xc3"], None)
    assert next(s) == b"ab"
    with pytest.raises(UnicodeDecodeError):
        next(s)


def test_invalid_bytes_after_stop_are_ignored() -> None:
    upstream = CountingIterator([b"a<s", b">\xff", b"\xfe"])
    s = wrap(upstream, ["<s>"])
    assert list(s) == [b"a"]
    assert upstream.pulled == 2
    assert s.stop_sequence == "<s>"


def test_bad_arguments() -> None:
    with pytest.raises(TypeError, match="int"):
        wrap(5, None)  # type: ignore[call-overload]
    with pytest.raises(ValueError, match="errors"):
        wrap(["a"], None, errors="ignore")
    with pytest.raises(ValueError, match="position 1"):
        wrap(["a"], ["x", ""])
    with pytest.raises(TypeError, match="position 0"):
        wrap(["a"], [b"x"])  # type: ignore[list-item]


def test_bad_stops_do_not_touch_upstream() -> None:
    upstream = CountingIterator(["a"])
    with pytest.raises(ValueError):
        wrap(upstream, [""])
    assert (upstream.pulled, upstream.closed) == (0, 0)


# ---------------------------------------------------------------------------------------------
# Re-entrancy


def test_reentrant_next_from_upstream_raises_runtime_error() -> None:
    seen: list[BaseException] = []

    def upstream() -> Iterator[str]:
        yield "a"
        try:
            next(s)
        except RuntimeError as error:
            seen.append(error)
        yield "b"

    s = wrap(upstream(), None)
    assert list(s) == ["a", "b"]
    assert len(seen) == 1
    assert type(seen[0]) is RuntimeError
    assert "iterated" in str(seen[0])


def test_reentrant_next_error_propagates_through_upstream() -> None:
    def upstream() -> Iterator[str]:
        yield "a"
        yield next(s)

    s = wrap(upstream(), None)
    assert next(s) == "a"
    with pytest.raises(RuntimeError):
        next(s)
    assert list(s) == []


def test_attributes_from_inside_upstream_answer_or_refuse() -> None:
    """The upstream may look at the stream that pulls from it: it gets the current values or a
    RuntimeError (a re-entrant call), never a hang."""
    seen: list[object] = []

    def upstream() -> Iterator[str]:
        yield "ab<"
        try:
            seen.append((s.pending, s.stop_reason, s.stopped, s.stop_sequence, s.stop_index))
        except RuntimeError as error:
            seen.append(type(error))
        yield "s>"

    s = wrap(upstream(), "<s>")
    assert list(s) == ["ab"]
    assert seen in ([("<", None, False, None, None)], [RuntimeError])
    assert s.stops == ("<s>",)
    assert s.include_stop is False


class FailingClose(CountingIterator[str]):
    def close(self) -> None:
        self.closed += 1
        raise OSError("close failed")


def test_close_error_on_stop_keeps_last_piece() -> None:
    """The piece before the stop is delivered; the upstream's close error comes on the next call."""
    upstream = FailingClose(["a<s>b", "c"])
    s = wrap(upstream, "<s>")
    assert next(s) == "a"
    with pytest.raises(OSError, match="close failed"):
        next(s)
    assert list(s) == []
    assert upstream.closed == 1
    assert s.stop_reason == "stop_sequence"


def test_close_error_on_stop_without_piece_is_raised() -> None:
    upstream = FailingClose(["a", "<s>b", "c"])
    s = wrap(upstream, "<s>")
    assert next(s) == "a"
    with pytest.raises(OSError, match="close failed"):
        next(s)
    assert list(s) == []
    assert upstream.closed == 1


def test_close_error_from_iterator_still_closes_source() -> None:
    class Source:
        def __init__(self) -> None:
            self.iterator = FailingClose(["a", "b"])
            self.closed = 0

        def __iter__(self) -> FailingClose:
            return self.iterator

        def close(self) -> None:
            self.closed += 1

    source = Source()
    s = wrap(source, None)
    assert next(s) == "a"
    with pytest.raises(OSError, match="close failed"):
        s.close()
    assert (source.closed, source.iterator.closed) == (1, 1)
    s.close()
    assert (source.closed, source.iterator.closed) == (1, 1)


def test_stop_completed_at_end_of_input_in_replace_mode() -> None:
    """An incomplete tail becomes U+FFFD at the end, which can complete a stop: the stream then
    ends with reason "stop_sequence"; the upstream had already ended and is not closed."""
    upstream = CountingIterator([b"ab", b"\xe2\x82"])
    s = wrap(upstream, ["b\ufffd"], errors="replace")
    assert list(s) == [b"a"]
    assert (s.stop_sequence, s.stop_reason) == ("b\ufffd", "stop_sequence")
    assert upstream.closed == 0


# ---------------------------------------------------------------------------------------------
# Strict bytes: an invalid sequence ends the text for the stops' look-around (contract §9.9)


@settings(deadline=None, max_examples=examples(150))
@given(case=regex_byte_cases(), errors=st.sampled_from(["strict", "strict", "replace"]))
def test_regex_stops_over_invalid_bytes_match_reference(
    case: RegexByteCase, errors: Errors
) -> None:
    """A stop that the text ending at an invalid sequence fires: its last piece, the upstream
    closed as on any stop, then the decoding error on the next pull."""
    expected = expected_run(
        ReferenceByteStopFilter(list(case.ref), case.include_stop, errors), case.chunks
    )
    upstream = CountingIterator(case.chunks)
    stream = wrap(upstream, list(case.real), case.include_stop, errors)
    observed = observed_run(stream, upstream)
    if not case.chunks:
        return
    assert observed == expected
    if expected.stopped_by_item or expected.error is None:
        assert upstream.closed == int(expected.stopped_by_item)


END = [stopstream.Regex(r"\bend\b")]


def test_strict_error_after_the_stop_it_fired_comes_on_the_next_pull() -> None:
    upstream = CountingIterator([b"the", b" end\xff more", b"never pulled"])
    s = wrap(upstream, END)
    assert next(s) == b"the"
    assert not s.stopped
    assert next(s) == b" "
    assert (s.stop_sequence, s.stop_index, s.stop_reason, s.pending) == (
        "end",
        0,
        "stop_sequence",
        b"",
    )
    assert (upstream.pulled, upstream.closed) == (2, 1)
    with pytest.raises(UnicodeDecodeError) as info:
        next(s)
    # The error the feed would have raised: the chunk, the position of the bad byte in it.
    assert (info.value.object, info.value.start, info.value.end) == (b" end\xff more", 4, 5)
    assert info.value.reason == "invalid start byte"
    assert list(s) == []
    assert s.stop_reason == "stop_sequence"
    assert (upstream.pulled, upstream.closed) == (2, 1)


def test_strict_incomplete_end_after_the_stop_it_fired() -> None:
    upstream = CountingIterator([b"the end\xe2\x82"])
    s = wrap(upstream, END)
    assert next(s) == b"the "  # "end" waits for what follows it
    with pytest.raises(UnicodeDecodeError, match="unexpected end of data") as info:
        next(s)
    assert (info.value.object, info.value.start, info.value.end) == (b"\xe2\x82", 0, 2)
    assert (s.stop_sequence, s.stop_reason) == ("end", "stop_sequence")
    assert list(s) == []
    assert upstream.closed == 0  # it ran out by itself
    # The last piece comes from the end: all of "the end" was held (a literal stop's prefix).
    s = wrap([b"the end\xe2"], ["the endless", *END])
    assert next(s) == b"the "
    assert s.stop_index == 1
    with pytest.raises(UnicodeDecodeError, match="unexpected end of data"):
        next(s)
    assert list(s) == []


def test_strict_error_after_a_stop_with_nothing_to_yield() -> None:
    upstream = CountingIterator([b"end\xff"])
    s = wrap(upstream, END)
    with pytest.raises(UnicodeDecodeError):
        next(s)
    assert (s.stop_sequence, s.stop_reason) == ("end", "stop_sequence")
    assert upstream.closed == 1
    assert list(s) == []


def test_strict_error_after_a_stop_keeps_a_failing_close_as_context() -> None:
    class Failing(CountingIterator[bytes]):
        def close(self) -> None:
            self.closed += 1
            raise OSError("close failed")

    upstream = Failing([b"x$ ax\xff", b"never pulled"])
    s = wrap(upstream, [stopstream.Regex("x$")])
    assert next(s) == b"x$ a"
    with pytest.raises(UnicodeDecodeError) as info:
        next(s)
    assert isinstance(info.value.__context__, OSError)
    assert list(s) == []
    assert upstream.closed == 1


def test_strict_error_without_a_stop_at_it_is_a_bad_item() -> None:
    upstream = CountingIterator([b"the ", b"endx\xff", b"never pulled"])
    s = wrap(upstream, END)
    assert next(s) == b"the "
    with pytest.raises(UnicodeDecodeError):
        next(s)
    assert (s.stop_reason, s.pending) == (None, b"")
    assert (upstream.pulled, upstream.closed) == (2, 1)


def test_replaced_byte_is_a_character_for_the_look_around() -> None:
    """U+FFFD is a non-word character: it decides ``\\b`` as any other (no error to owe)."""
    assert list(wrap([b"the end\xff more"], END, errors="replace")) == [b"the "]
    s = wrap([b"the end\xffx"], [stopstream.Regex(r"\bend\B")], errors="replace")
    assert b"".join(s) == "the end\ufffdx".encode()
    assert s.stop_reason == "end"


# ---------------------------------------------------------------------------------------------
# Items and upstreams that run Python code of their own


def test_str_subclass_encode_override_is_not_used() -> None:
    """Matching reads the code points of the str itself, whatever a subclass's ``encode`` says
    (running it would also execute Python code while the stream's state is locked)."""
    calls: list[str] = []

    class Liar(str):
        __slots__ = ()

        def encode(self, encoding: str = "utf-8", errors: str = "strict") -> bytes:
            calls.append(encoding)
            return b"zz"

    s = wrap([Liar("a\ud800b")], ["zz"])
    assert "".join(s) == "a\ud800b"
    assert s.stop_sequence is None
    assert calls == []


class Handler:
    """An object whose upstream is its own generator method and which keeps the stream: the
    stream, the generator's frame and the object form a reference cycle."""

    def __init__(self, log: GeneratorLog) -> None:
        self.log = log
        self.stream = wrap(self.chunks(), ["<stop>"])

    def chunks(self) -> Iterator[str]:
        try:
            yield "a"
            yield "b"
        finally:
            self.log.finalized += 1


def test_stream_in_a_cycle_with_its_upstream_is_collected() -> None:
    log = GeneratorLog()
    handler = Handler(log)
    assert next(handler.stream) == "a"
    ref = weakref.ref(handler)
    del handler
    gc.collect()
    assert ref() is None
    assert log.finalized == 1


class OwnedIterator:
    """An upstream with a ``close()`` of its own that refers back to the object owning the
    stream, so that owner, stream and upstream form a reference cycle."""

    def __init__(self, owner: object, log: list[str]) -> None:
        self.owner = owner
        self.log = log
        self.items = iter(["a", "b"])

    def __iter__(self) -> OwnedIterator:
        return self

    def __next__(self) -> str:
        return next(self.items)

    def close(self) -> None:
        self.log.append("closed")


class Owner:
    def __init__(self, log: list[str]) -> None:
        self.stream = wrap(OwnedIterator(self, log), None)


def test_stream_in_a_cycle_closes_upstream_once_when_collected() -> None:
    log: list[str] = []
    owner = Owner(log)
    assert next(owner.stream) == "a"
    ref = weakref.ref(owner)
    del owner
    gc.collect()
    assert ref() is None
    assert log == ["closed"]
