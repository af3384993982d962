"""Property tests: the compiled filters behave exactly like the pure-Python reference.

Every call is compared: each ``feed``'s output (value and type), ``pending`` and the stop
attributes after every call, ``finish()``, and exceptions (by exact type). After a call that
raises, both filters must still be as they were, which the following calls check.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import partial
from typing import Literal, TypeAlias

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import stopstream
from hypothesis_profiles import examples
from implementations import ByteFilter, StrFilter
from stopstream.reference import (
    ReferenceByteStopFilter,
    ReferenceStopFilter,
    reference_truncate,
)
from strategies import (
    BYTE_ALPHABET,
    STR_ALPHABET,
    ByteCase,
    RegexByteCase,
    StopsArgument,
    StrCase,
    as_chunk,
    byte_cases,
    byte_streams,
    chunk_kinds,
    cut_points,
    many_stops_cases,
    regex_byte_cases,
    repetitive_cases,
    split,
    stops_and_text,
    stops_forms,
    str_cases,
)

Outcome: TypeAlias = tuple[Literal["returned"], type, object] | tuple[Literal["raised"], type]
Op: TypeAlias = tuple[Literal["feed", "finish", "reset"], int]


def outcome(call: Callable[[], object]) -> Outcome:
    """What a call did: its result (with the result's exact type), or the exception's type."""
    try:
        result = call()
    except Exception as error:
        return ("raised", type(error))
    return ("returned", type(result), result)


def state(f: StrFilter | ByteFilter) -> tuple[object, ...]:
    return (f.pending, f.stopped, f.stop_sequence, f.stop_index, f.stop_reason)


def same_call(real: Callable[[], object], ref: Callable[[], object], what: str) -> Outcome:
    """Call both; assert they did the same; return what happened."""
    expected = outcome(ref)
    actual = outcome(real)
    assert actual == expected, what
    return expected


def assert_same_state(real: StrFilter | ByteFilter, ref: StrFilter | ByteFilter, what: str) -> None:
    assert state(real) == state(ref), what


def lifecycle_ops(chunk_count: int) -> st.SearchStrategy[list[Op]]:
    """Feed every chunk in order, with occasional ``finish()`` and ``reset()`` calls between."""

    @st.composite
    def ops(draw: st.DrawFn) -> list[Op]:
        result: list[Op] = []
        for index in range(chunk_count + 1):
            extra = draw(st.sampled_from(["", "", "", "", "finish", "reset", "finish-reset"]))
            if "finish" in extra:
                result.append(("finish", 0))
            if "reset" in extra:
                result.append(("reset", 0))
            if index < chunk_count:
                result.append(("feed", index))
        result.append(("finish", 0))
        return result

    return ops()


# StopFilter


@settings(max_examples=examples(500), deadline=None)
@given(case=str_cases(), include_stop=st.booleans(), data=st.data())
def test_stop_filter_matches_reference(
    case: StrCase, include_stop: bool, data: st.DataObject
) -> None:
    form = data.draw(stops_forms(case.stops), label="stops form")
    real = stopstream.StopFilter(form.build(case.stops), include_stop=include_stop)
    ref = ReferenceStopFilter(form.build(case.stops), include_stop=include_stop)
    assert real.stops == ref.stops
    assert real.include_stop == ref.include_stop
    assert_same_state(real, ref, "fresh")
    for i, chunk in enumerate(case.chunks):
        same_call(partial(real.feed, chunk), partial(ref.feed, chunk), f"feed #{i}")
        assert_same_state(real, ref, f"after feed #{i}")
    same_call(real.finish, ref.finish, "finish")
    assert_same_state(real, ref, "after finish")
    same_call(real.finish, ref.finish, "second finish")
    assert_same_state(real, ref, "after second finish")
    same_call(lambda: real.feed("x"), lambda: ref.feed("x"), "feed after finish")
    assert_same_state(real, ref, "after feed after finish")


@settings(max_examples=examples(300), deadline=None)
@given(case=str_cases(max_stops=8), include_stop=st.booleans(), data=st.data())
def test_stop_filter_lifecycle_matches_reference(
    case: StrCase, include_stop: bool, data: st.DataObject
) -> None:
    ops = data.draw(lifecycle_ops(len(case.chunks)), label="ops")
    real = stopstream.StopFilter(case.stops, include_stop=include_stop)
    ref = ReferenceStopFilter(case.stops, include_stop=include_stop)
    for step, (op, index) in enumerate(ops):
        what = f"step {step}: {op} {index if op == 'feed' else ''}"
        if op == "feed":
            chunk = case.chunks[index]
            same_call(partial(real.feed, chunk), partial(ref.feed, chunk), what)
        elif op == "finish":
            same_call(real.finish, ref.finish, what)
        else:
            same_call(real.reset, ref.reset, what)
        assert_same_state(real, ref, what)


# ByteStopFilter


def run_byte_filters(
    case: ByteCase, include_stop: bool, errors: str, stops_argument: Callable[[], StopsArgument]
) -> None:
    real = stopstream.ByteStopFilter(stops_argument(), include_stop=include_stop, errors=errors)
    ref = ReferenceByteStopFilter(stops_argument(), include_stop=include_stop, errors=errors)
    assert real.stops == ref.stops
    assert_same_state(real, ref, "fresh")
    for i, chunk in enumerate(case.chunk_objects()):
        before = ref.pending
        result = same_call(partial(real.feed, chunk), partial(ref.feed, chunk), f"feed #{i}")
        if result[0] == "raised":
            assert ref.pending == before, "the reference changed on a raising call"
        assert_same_state(real, ref, f"after feed #{i}")
    result = same_call(real.finish, ref.finish, "finish")
    assert_same_state(real, ref, "after finish")
    if result[0] == "raised":
        # Still open and unchanged: more input is accepted, and finish can be retried.
        same_call(lambda: real.feed(b"\x80"), lambda: ref.feed(b"\x80"), "feed after failed finish")
        assert_same_state(real, ref, "after feed after failed finish")
        same_call(real.finish, ref.finish, "finish retried")
        assert_same_state(real, ref, "after finish retried")
    same_call(real.finish, ref.finish, "last finish")
    assert_same_state(real, ref, "after last finish")
    same_call(real.reset, ref.reset, "reset")
    assert_same_state(real, ref, "after reset")


@pytest.mark.slow
@pytest.mark.parametrize("errors", ["strict", "replace"])
@settings(max_examples=examples(400), deadline=None)
@given(case=byte_cases(), include_stop=st.booleans(), data=st.data())
def test_byte_stop_filter_matches_reference(
    errors: str, case: ByteCase, include_stop: bool, data: st.DataObject
) -> None:
    form = data.draw(stops_forms(case.stops), label="stops form")
    run_byte_filters(case, include_stop, errors, lambda: form.build(case.stops))


@pytest.mark.parametrize("errors", ["strict", "replace"])
@settings(max_examples=examples(200), deadline=None)
@given(case=byte_cases(invalid=False), include_stop=st.booleans())
def test_byte_stop_filter_matches_reference_on_valid_utf8(
    errors: str, case: ByteCase, include_stop: bool
) -> None:
    run_byte_filters(case, include_stop, errors, lambda: list(case.stops))


@pytest.mark.parametrize("errors", ["strict", "replace"])
@settings(max_examples=examples(200), deadline=None)
@given(case=byte_cases(max_stops=8), include_stop=st.booleans(), data=st.data())
def test_byte_stop_filter_lifecycle_matches_reference(
    errors: str, case: ByteCase, include_stop: bool, data: st.DataObject
) -> None:
    ops = data.draw(lifecycle_ops(len(case.chunks)), label="ops")
    real = stopstream.ByteStopFilter(case.stops, include_stop=include_stop, errors=errors)
    ref = ReferenceByteStopFilter(case.stops, include_stop=include_stop, errors=errors)
    chunks = case.chunk_objects()
    for step, (op, index) in enumerate(ops):
        what = f"step {step}: {op} {index if op == 'feed' else ''}"
        if op == "feed":
            chunk = chunks[index]
            same_call(partial(real.feed, chunk), partial(ref.feed, chunk), what)
        elif op == "finish":
            same_call(real.finish, ref.finish, what)
        else:
            same_call(real.reset, ref.reset, what)
        assert_same_state(real, ref, what)


# truncate


@pytest.mark.slow
@settings(max_examples=examples(500), deadline=None)
@given(case=stops_and_text(STR_ALPHABET), include_stop=st.booleans())
def test_truncate_matches_reference(case: tuple[list[str], str], include_stop: bool) -> None:
    stops, text = case
    expected = reference_truncate(text, stops, include_stop)
    assert stopstream.truncate(text, stops, include_stop=include_stop) == expected
    result = stopstream.truncate(text, stops, include_stop)
    assert type(result[0]) is str
    assert result == expected


# Chunk invariance (contract §2.4), checked on the compiled filters alone.


def run_str(stops: Sequence[str], chunks: Sequence[str], include_stop: bool) -> tuple[object, ...]:
    f = stopstream.StopFilter(stops, include_stop=include_stop)
    output = "".join(f.feed(chunk) for chunk in chunks) + f.finish()
    return output, f.stop_sequence, f.stop_index, f.stop_reason


def run_bytes(
    stops: Sequence[str],
    chunks: Sequence[bytes | bytearray | memoryview],
    include_stop: bool,
    errors: str,
) -> tuple[object, ...]:
    f = stopstream.ByteStopFilter(stops, include_stop=include_stop, errors=errors)
    output = b"".join(f.feed(chunk) for chunk in chunks) + f.finish()
    return output, f.stop_sequence, f.stop_index, f.stop_reason


@pytest.mark.slow
@settings(max_examples=examples(400), deadline=None)
@given(
    case=stops_and_text(STR_ALPHABET),
    include_stop=st.booleans(),
    data=st.data(),
)
def test_str_chunk_invariance(
    case: tuple[list[str], str], include_stop: bool, data: st.DataObject
) -> None:
    stops, text = case
    whole = run_str(stops, [text], include_stop)
    for _ in range(2):
        cuts = data.draw(cut_points(len(text)), label="cuts")
        assert run_str(stops, split(text, cuts), include_stop) == whole
    assert run_str(stops, list(text), include_stop) == whole
    output, stop_sequence, _, _ = whole
    assert stopstream.truncate(text, stops, include_stop=include_stop) == (output, stop_sequence)


@pytest.mark.slow
@settings(max_examples=examples(400), deadline=None)
@given(
    stream=st.booleans().flatmap(
        lambda invalid: st.tuples(st.just(invalid), byte_streams(invalid=invalid))
    ),
    include_stop=st.booleans(),
    data=st.data(),
)
def test_bytes_chunk_invariance(
    stream: tuple[bool, tuple[list[str], bytes]], include_stop: bool, data: st.DataObject
) -> None:
    """Valid UTF-8 in both modes, and invalid UTF-8 in replace mode: only the bytes count."""
    invalid, (stops, raw) = stream
    modes = ["replace"] if invalid else ["strict", "replace"]
    for errors in modes:
        whole = run_bytes(stops, [raw], include_stop, errors)
        for _ in range(2):
            chunks = split(raw, data.draw(cut_points(len(raw)), label="cuts"))
            kinds = data.draw(chunk_kinds(len(chunks)), label="kinds")
            objects = [as_chunk(chunk, kind) for chunk, kind in zip(chunks, kinds, strict=True)]
            assert run_bytes(stops, objects, include_stop, errors) == whole
        singles = [raw[i : i + 1] for i in range(len(raw))]
        assert run_bytes(stops, singles, include_stop, errors) == whole
        if not invalid:
            # Bytes and str agree on valid text.
            text = raw.decode("utf-8")
            output, *rest = run_str(stops, [text], include_stop)
            assert isinstance(output, str)
            assert whole == (output.encode("utf-8"), *rest)


@settings(max_examples=examples(200), deadline=None)
@given(case=stops_and_text(BYTE_ALPHABET), include_stop=st.booleans())
def test_str_and_bytes_filters_agree(case: tuple[list[str], str], include_stop: bool) -> None:
    """Fed the same text character by character, both filters emit the same, step by step."""
    stops, text = case
    text_filter = stopstream.StopFilter(stops, include_stop=include_stop)
    byte_filter = stopstream.ByteStopFilter(stops, include_stop=include_stop)
    for character in text:
        assert text_filter.feed(character).encode() == byte_filter.feed(character.encode())
        assert text_filter.pending.encode() == byte_filter.pending
    assert text_filter.finish().encode() == byte_filter.finish()
    assert text_filter.stop_index == byte_filter.stop_index


# Long self-overlapping stops, and large stop lists.


def compare_str_filters(case: StrCase, include_stop: bool) -> None:
    real = stopstream.StopFilter(case.stops, include_stop=include_stop)
    ref = ReferenceStopFilter(case.stops, include_stop=include_stop)
    for i, chunk in enumerate(case.chunks):
        same_call(partial(real.feed, chunk), partial(ref.feed, chunk), f"feed #{i}")
        assert_same_state(real, ref, f"after feed #{i}")
    same_call(real.finish, ref.finish, "finish")
    assert_same_state(real, ref, "after finish")


def compare_byte_filters(case: StrCase, include_stop: bool) -> None:
    """The same stream as UTF-8, one byte per chunk."""
    real = stopstream.ByteStopFilter(case.stops, include_stop=include_stop)
    ref = ReferenceByteStopFilter(case.stops, include_stop=include_stop)
    data = case.text.encode()
    for i in range(len(data)):
        chunk = data[i : i + 1]
        same_call(partial(real.feed, chunk), partial(ref.feed, chunk), f"feed #{i}")
        assert_same_state(real, ref, f"after feed #{i}")
    same_call(real.finish, ref.finish, "finish")
    assert_same_state(real, ref, "after finish")


@settings(max_examples=examples(300), deadline=None)
@given(case=repetitive_cases(), include_stop=st.booleans())
def test_long_overlapping_stops_match_reference(case: StrCase, include_stop: bool) -> None:
    compare_str_filters(case, include_stop)
    compare_byte_filters(case, include_stop)


@settings(max_examples=examples(25), deadline=None)
@given(case=many_stops_cases(), include_stop=st.booleans())
def test_many_stops_match_reference(case: StrCase, include_stop: bool) -> None:
    compare_str_filters(case, include_stop)
    compare_byte_filters(case, include_stop)


# Strict bytes with regex stops (contract §9.9): an invalid sequence ends the text for the
# stops' look-around, as the end of the stream would.


def error_outcome(call: Callable[[], object]) -> tuple[object, ...]:
    """What a call did, a decoding error compared in full (bytes, positions, reason)."""
    try:
        result = call()
    except UnicodeDecodeError as error:
        return ("raised", UnicodeDecodeError, error.object, error.start, error.end, error.reason)
    except Exception as error:
        return ("raised", type(error))
    return ("returned", type(result), result)


@settings(max_examples=examples(300), deadline=None)
@given(case=regex_byte_cases(), errors=st.sampled_from(["strict", "strict", "replace"]))
def test_regex_stops_over_invalid_bytes_match_reference(case: RegexByteCase, errors: str) -> None:
    """Every call and the attributes after it, through the error and past it: the output up to
    a stop that the end of the text at an invalid sequence fires, the error owed (raised once
    by the next ``feed()`` or ``finish()``), then the filter as after any stop."""
    real = stopstream.ByteStopFilter(list(case.real), case.include_stop, errors)
    ref = ReferenceByteStopFilter(list(case.ref), case.include_stop, errors)
    calls: list[tuple[str, bytes | None]] = [("feed", c) for c in case.chunks]
    calls += [("finish", None), ("feed", b"a"), ("finish", None), ("feed", b"b"), ("reset", None)]
    calls += [("feed", c) for c in case.chunks] + [("finish", None)]
    for step, (op, chunk) in enumerate(calls):
        what = f"step {step}: {op} {chunk!r}"
        if op == "feed":
            assert chunk is not None
            got, want = (
                error_outcome(partial(real.feed, chunk)),
                error_outcome(partial(ref.feed, chunk)),
            )
        elif op == "finish":
            got, want = error_outcome(real.finish), error_outcome(ref.finish)
        else:
            got, want = error_outcome(real.reset), error_outcome(ref.reset)
        assert got == want, what
        assert_same_state(real, ref, what)
