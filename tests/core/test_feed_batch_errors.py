"""``feed_batch`` names the failing entry for every kind of error, and changes no filter.

The rule: what feeding ``filters[i]`` alone with ``ids_per_filter[i]`` would raise is raised as
the same exception type, its message prefixed ``ids_per_filter[i]: `` (a
``UnicodeDecodeError``: its reason; encoding, object, start and end are kept), with that error
as ``__cause__``. Only a ``filters[i]`` that cannot be fed at all (not a ``TokenStopFilter``)
is named ``filters[i]``.

Each kind of error runs in every batch shape: the engine's fast path (exact lists of filters
and of plain ``int`` ids, or of one-id lists), and the general one (tuples, longer lists, other
iterables), with the failing entry in the middle of open filters, literal and composed.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest

import stopstream

VOCAB = stopstream.Vocab([b"a", b"b", b"\xff", b"\xc3", None, b" ", b"\xa9"], special=[])
A, B, FF, C3, HOLE, SPACE, A9 = range(7)


def literal(errors: str = "replace") -> stopstream.TokenStopFilter:
    f = stopstream.TokenStopFilter(VOCAB, ["ab"], errors=errors)
    f.feed(A)
    return f


def composed(errors: str = "replace") -> stopstream.TokenStopFilter:
    f = stopstream.TokenStopFilter(VOCAB, [stopstream.Regex(r"ab\b")], errors=errors)
    f.feed(A)
    return f


def finished() -> stopstream.TokenStopFilter:
    f = literal()
    f.finish()
    return f


def carrying(errors: str = "strict") -> stopstream.TokenStopFilter:
    f = literal(errors)
    f.feed(C3)
    return f


class Index:
    def __init__(self, value: int) -> None:
        self.value = value

    def __index__(self) -> int:
        return self.value


class BrokenIndex:
    def __index__(self) -> int:
        raise ValueError("no index today")


def raising_ids() -> Iterator[int]:
    yield A
    raise RuntimeError("the ids ran dry")


@dataclass(frozen=True)
class Row:
    name: str
    make: Callable[[], stopstream.TokenStopFilter]
    ids: Callable[[], Any]
    error: type[Exception]
    single: bool
    """The failing entry is one id (so the batch can take the engine's shape)."""


ROWS = [
    Row("negative id", literal, lambda: -1, ValueError, True),
    Row("id past the end", literal, lambda: 7, ValueError, True),
    Row("huge id", literal, lambda: 2**70, ValueError, True),
    Row("unassigned id", literal, lambda: HOLE, ValueError, True),
    Row("bad id in a composed filter", composed, lambda: -5, ValueError, True),
    Row("finished filter", finished, lambda: A, ValueError, True),
    Row("strict, invalid byte", lambda: literal("strict"), lambda: FF, UnicodeDecodeError, True),
    Row("strict, composed", lambda: composed("strict"), lambda: FF, UnicodeDecodeError, True),
    Row("strict, after a carried byte", carrying, lambda: A, UnicodeDecodeError, True),
    Row("ids are a str", literal, lambda: "ab", TypeError, False),
    Row("ids are a float", literal, lambda: 1.5, TypeError, False),
    Row("ids are None", literal, lambda: None, TypeError, False),
    Row("an id is a str", literal, lambda: [A, "b"], TypeError, False),
    Row("an int-like too large", literal, lambda: Index(2**80), ValueError, False),
    Row("an int-like that raises", literal, lambda: [BrokenIndex()], ValueError, False),
    Row("the ids' iterable raises", literal, raising_ids, RuntimeError, False),
]

SHAPES = ["int", "one-id list", "tuples", "longer list"]


def entry(shape: str, ids: Any) -> Any:
    """An entry of the batch shape ``shape`` for ``ids`` (one id, or anything else as is)."""
    if shape == "int" or not isinstance(ids, int):
        return ids
    if shape == "one-id list":
        return [ids]
    if shape == "tuples":
        return (ids,)
    return [ids, SPACE]


def lone_error(make: Callable[[], stopstream.TokenStopFilter], ids: Any) -> BaseException:
    f = make()
    with pytest.raises(Exception) as info:
        f.feed(ids)
    return info.value


def state(f: stopstream.TokenStopFilter) -> tuple[object, ...]:
    return (f.pending, f.stopped, f.stop_sequence, f.stop_reason, f.stop_token_id)


def check_named(got: BaseException, lone: BaseException, i: int) -> None:
    """``got`` is ``lone`` named as entry ``i``, chained from an error equal to it."""
    assert type(got) is type(lone)
    prefix = f"ids_per_filter[{i}]: "
    if isinstance(lone, UnicodeDecodeError):
        assert isinstance(got, UnicodeDecodeError)
        assert (got.encoding, got.object, got.start, got.end) == (
            lone.encoding,
            lone.object,
            lone.start,
            lone.end,
        )
        assert got.reason == prefix + lone.reason
    else:
        assert got.args == (prefix + lone.args[0],)
    cause = got.__cause__
    assert type(cause) is type(lone) and str(cause) == str(lone)


# A failing entry that is not one id runs in an engine-shaped batch (the other entries plain
# ints) and as tuples.
CASES = [(r, s) for r in ROWS for s in SHAPES if r.single or s in ("int", "tuples")]


@pytest.mark.parametrize(("row", "shape"), CASES, ids=[f"{r.name}, {s}" for r, s in CASES])
def test_every_error_names_its_entry(row: Row, shape: str) -> None:
    lone = lone_error(row.make, entry(shape, row.ids()))
    filters = [literal(), row.make(), composed()]
    ids = [entry(shape, B), entry(shape, row.ids()), entry(shape, SPACE)]
    before = [state(f) for f in filters]
    container: Any = tuple if shape == "tuples" else list
    with pytest.raises(row.error) as info:
        stopstream.feed_batch(container(filters), container(ids))
    check_named(info.value, lone, 1)
    # No filter changed: each takes the next ids as its untouched twin does.
    assert [state(f) for f in filters] == before
    twins = [literal(), row.make(), composed()]
    for f, twin in zip(filters, twins, strict=True):
        for step in (B, SPACE):
            try:
                want = twin.feed(step)
            except (ValueError, UnicodeDecodeError) as error:
                with pytest.raises(type(error)):
                    f.feed(step)
            else:
                assert f.feed(step) == want
        assert state(f) == state(twin)


@pytest.mark.parametrize("shape", SHAPES)
def test_a_filter_given_twice_fails_at_its_second_entry(shape: str) -> None:
    """The second entry of a strict filter given twice meets an invalid byte that only the
    first entry's carried byte makes invalid: named as entry 2, the filter unchanged."""
    twin = carrying()
    twin.feed(entry(shape, A9))
    lone = lone_error(lambda: twin, entry(shape, FF))
    f, g = carrying(), literal()
    before = (state(f), state(g))
    with pytest.raises(UnicodeDecodeError) as info:
        stopstream.feed_batch([f, g, f], [entry(shape, A9), entry(shape, B), entry(shape, FF)])
    check_named(info.value, lone, 2)
    assert (state(f), state(g)) == before
    assert f.feed(A9) == stopstream.TokenPiece("a\u00e9", 3)
    assert g.feed(B) == stopstream.TokenPiece("", 0) and g.stop_sequence == "ab"


def test_only_an_unusable_filter_is_named_as_a_filter() -> None:
    f = literal()
    for filters in ([f, object()], (f, object())):
        with pytest.raises(
            TypeError, match=r"^filters\[1\] must be a TokenStopFilter, not object$"
        ):
            stopstream.feed_batch(filters, [A, A])  # type: ignore[arg-type]
    assert f.pending == "a"
    with pytest.raises(ValueError, match="2 filters and 1 id lists"):
        stopstream.feed_batch([f, f], [A])
    with pytest.raises(TypeError, match="filters must be a sequence"):
        stopstream.feed_batch(5, [A])  # type: ignore[arg-type]


def test_base_exceptions_pass_unchanged() -> None:
    """``KeyboardInterrupt`` from an iterable of ids is not renamed (nor caught)."""

    def interrupted() -> Iterator[int]:
        yield A
        raise KeyboardInterrupt

    f = literal()
    with pytest.raises(KeyboardInterrupt) as info:
        stopstream.feed_batch([f], [interrupted()])
    assert info.value.__cause__ is None
    assert f.pending == "a"


def test_an_error_type_that_takes_no_message_passes_unchanged() -> None:
    class Picky(Exception):
        def __init__(self, code: int, detail: str) -> None:
            super().__init__(code, detail)

    def picky() -> Iterator[int]:
        raise Picky(3, "x")
        yield A

    with pytest.raises(Picky) as info:
        stopstream.feed_batch([literal()], [picky()])
    assert info.value.args == (3, "x")
