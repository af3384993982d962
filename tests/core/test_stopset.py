"""``stopstream.StopSet``: a compiled stop list accepted by every entry point that takes
``stops``, its option rules, value semantics, and the package's public namespace."""

from __future__ import annotations

import asyncio
import copy
import json
import pickle
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest

import stopstream
from stopstream import anthropic, openai, providers, sse

STOPS = ("</a>", "\n\nUser:")
TEXT = "x</a>y"


async def _achunks(items: list[str]) -> AsyncIterator[str]:
    for item in items:
        yield item


def _collect_async(stream: stopstream.AsyncStopStream[str]) -> str:
    async def run() -> str:
        return "".join([piece async for piece in stream])

    return asyncio.run(run())


def _chat_chunk(text: str) -> dict[str, Any]:
    return {
        "id": "c",
        "object": "chat.completion.chunk",
        "created": 0,
        "model": "m",
        "choices": [{"index": 0, "delta": {"content": text}, "finish_reason": None}],
    }


def _chat_text(chunks: list[Any]) -> str:
    return "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"])


def _message_events(text: str) -> list[dict[str, Any]]:
    return [
        {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
        {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": text}},
        {"type": "content_block_stop", "index": 0},
    ]


def _message_text(events: list[Any]) -> str:
    return "".join(
        e["delta"]["text"]
        for e in events
        if e["type"] == "content_block_delta" and e["delta"]["type"] == "text_delta"
    )


def _opt(include: bool | None) -> dict[str, Any]:
    """The native classes take ``include_stop`` or nothing (``None`` is a ``TypeError``)."""
    return {} if include is None else {"include_stop": include}


# Each entry point, run over TEXT with the given stops and include_stop (None: not given): the
# text it outputs.
ENTRY_POINTS: dict[str, Callable[[Any, Any], str]] = {
    "StopFilter": lambda s, inc: (lambda f: f.feed(TEXT) + f.finish())(
        stopstream.StopFilter(s, **_opt(inc))
    ),
    "ByteStopFilter": lambda s, inc: (lambda f: (f.feed(TEXT.encode()) + f.finish()).decode())(
        stopstream.ByteStopFilter(s, errors="strict", **_opt(inc))
    ),
    "wrap": lambda s, inc: "".join(stopstream.wrap(iter([TEXT]), s, inc)),
    "awrap": lambda s, inc: _collect_async(stopstream.awrap(_achunks([TEXT]), s, inc)),
    "truncate": lambda s, inc: stopstream.truncate(TEXT, s, **_opt(inc))[0],
    "openai.wrap_chat": lambda s, inc: _chat_text(
        list(openai.wrap_chat(iter([_chat_chunk(TEXT)]), s, include_stop=inc))
    ),
    "anthropic.wrap_messages": lambda s, inc: _message_text(
        list(anthropic.wrap_messages(iter(_message_events(TEXT)), s, include_stop=inc))
    ),
    "sse.wrap_openai": lambda s, inc: _sse_text(
        b"".join(sse.wrap_openai(iter([_sse(TEXT)]), s, include_stop=inc))
    ),
}


def _sse(text: str) -> bytes:
    return b"data: " + json.dumps(_chat_chunk(text)).encode() + b"\n\n"


def _sse_text(body: bytes) -> str:
    events = body.decode().split("\n\n")
    data = [e.removeprefix("data: ") for e in events if e.startswith("data: {")]
    return _chat_text([json.loads(d) for d in data])


@pytest.mark.parametrize("name", sorted(ENTRY_POINTS))
@pytest.mark.parametrize("include", [False, True])
def test_every_entry_point_takes_a_stopset_and_its_options(name: str, include: bool) -> None:
    run = ENTRY_POINTS[name]
    s = stopstream.StopSet(STOPS, include)
    expected = "x</a>" if include else "x"
    assert run(s, None) == expected
    assert run(s, include) == expected  # the same option again is accepted
    with pytest.raises(ValueError, match="include_stop"):
        run(s, not include)


def test_filters_report_the_sets_options_and_stops() -> None:
    s = stopstream.StopSet(["a", "b"], include_stop=True)
    for f in (stopstream.StopFilter(s), stopstream.ByteStopFilter(s, errors="replace")):
        assert f.stops == ("a", "b")
        assert f.include_stop is True
    stream = stopstream.wrap(iter(["xb"]), s)
    assert list(stream) == ["xb"]
    assert stream.stop_index == 1
    assert stream.include_stop is True


@pytest.mark.parametrize("kind", [list, tuple])
@pytest.mark.parametrize("where", [0, 2, -1])
def test_a_list_differing_from_a_recent_one_in_one_stop_is_its_own(
    kind: Callable[[list[str]], Any], where: int
) -> None:
    # Recently used lists are compared with a new one last stop first, then in full: a
    # difference anywhere must tell them apart, and an equal list must still match.
    base = [f"<stop{i}>" for i in range(5)]
    assert stopstream.StopFilter(kind(base)).stops == tuple(base)
    changed = list(base)
    changed[where] = "<other>"
    f = stopstream.StopFilter(kind(changed))
    assert f.stops == tuple(changed)
    assert f.feed(f"a{base[where]}b<other>c") == f"a{base[where]}b"
    assert f.stop_sequence == "<other>"
    again = stopstream.StopFilter(kind(list(base)))
    assert again.stops == tuple(base)
    assert again.feed(f"a{base[where]}b") == "a"


def test_the_recent_lists_hand_out_one_tuple_per_list() -> None:
    # A filter per request shares the stop tuple of a recent equal list: the same tuple object
    # given again, an equal list or tuple, and the empty list in every spelling.
    SF = stopstream.StopFilter
    empty = SF(None).stops
    assert SF([]).stops is empty and SF(()).stops is empty
    given = ("<r1>", "<r2>")
    assert SF(given).stops is given and SF(given).stops is given
    first = SF(["<q1>", "<q2>"]).stops
    assert SF(["<q1>", "<q2>"]).stops is first
    # An equal tuple is remembered as given, so that passing it again is an identity check.
    equal = ("<q1>", "<q2>")
    assert SF(equal).stops is equal
    assert SF(["<q1>", "<q2>"]).stops is equal


def test_the_recent_lists_are_the_last_eight() -> None:
    SF = stopstream.StopFilter
    stops = ["<m1>", "<m2>"]
    first = SF(stops).stops
    for i in range(7):
        SF([f"<other{i}>"])
    assert SF(stops).stops is first  # seven lists since: still recent, and now the newest
    for i in range(8):
        SF([f"<later{i}>"])
    again = SF(stops).stops
    assert again == first and again is not first  # eight since: compiled again


def test_a_recent_list_matches_only_exact_str_items() -> None:
    class Text(str):
        pass

    stopstream.StopFilter(["<a>", "<b>"])
    f = stopstream.StopFilter(("<a>", Text("<b>")))
    assert [type(s) for s in f.stops] == [str, str]
    assert f.feed("x<b>") == "x"
    assert type(f.stop_sequence) is str


def test_include_stop_none_rejected_by_the_native_classes() -> None:
    s = stopstream.StopSet("a")
    makers: list[Callable[..., object]] = [
        stopstream.StopSet,
        stopstream.StopFilter,
        stopstream.ByteStopFilter,
    ]
    for make in makers:
        with pytest.raises(TypeError):
            make(s, None)
    with pytest.raises(TypeError):
        stopstream.truncate("a", s, None)  # type: ignore[arg-type]


def test_errors_still_validated_with_a_stopset() -> None:
    with pytest.raises(ValueError, match="errors"):
        stopstream.ByteStopFilter(stopstream.StopSet("a"), errors="ignore")


def test_split_stops_takes_a_stopset() -> None:
    s = stopstream.StopSet(["a", "b", "a", "c"])
    assert providers.split_stops(s, 2) == providers.StopSplit(["a", "b"], ["c"])


def test_constructor_validates_like_the_filters() -> None:
    with pytest.raises(TypeError, match="stops must be"):
        stopstream.StopSet(b"a")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="position 1"):
        stopstream.StopSet(["a", 1])  # type: ignore[list-item]
    with pytest.raises(ValueError, match="position 0 is empty"):
        stopstream.StopSet([""])
    assert stopstream.StopSet(None).stops == ()
    assert stopstream.StopSet("ab").stops == ("ab",)
    assert stopstream.StopSet(iter(["a", "b"])).stops == ("a", "b")


def test_stopset_of_a_stopset_keeps_or_checks_its_options() -> None:
    s = stopstream.StopSet("a", include_stop=True)
    assert stopstream.StopSet(s) == s
    assert stopstream.StopSet(s, True) == s
    with pytest.raises(ValueError, match="differs"):
        stopstream.StopSet(s, False)


@pytest.mark.parametrize(
    ("a", "b", "equal"),
    [
        ((["a", "b"],), (("a", "b"),), True),
        ((["a", "b"], False), (["a", "b"],), True),
        ((["a", "b"], True), (["a", "b"],), False),
        ((["a", "b"],), (["b", "a"],), False),
        (("a",), (["a"],), True),
        ((None,), ([],), True),
        ((["a", "a"],), (["a"],), False),
    ],
)
def test_equality_and_hash_by_value(a: tuple[Any, ...], b: tuple[Any, ...], equal: bool) -> None:
    x, y = stopstream.StopSet(*a), stopstream.StopSet(*b)
    assert (x == y) is equal
    assert (x != y) is not equal
    if equal:
        assert hash(x) == hash(y)
        assert len({x, y}) == 1


def test_not_equal_to_other_types() -> None:
    s = stopstream.StopSet(["a"])
    assert s != ("a",)
    assert s != stopstream.StopFilter(["a"])


def test_repr_len_and_attributes() -> None:
    s = stopstream.StopSet(["a", "\n"], include_stop=True)
    assert repr(s) == "StopSet(('a', '\\n'), include_stop=True)"
    assert repr(stopstream.StopSet("a")) == "StopSet(('a',), include_stop=False)"
    assert len(s) == 2
    assert len(stopstream.StopSet(None)) == 0
    assert s.stops == ("a", "\n")
    assert s.include_stop is True


def test_immutable() -> None:
    s = stopstream.StopSet(["a"])
    with pytest.raises(AttributeError):
        s.stops = ("b",)  # type: ignore[misc]
    with pytest.raises(AttributeError):
        s.include_stop = True  # type: ignore[misc]
    with pytest.raises((AttributeError, TypeError)):
        s.extra = 1  # type: ignore[attr-defined]
    with pytest.raises(TypeError):

        class Sub(stopstream.StopSet):  # type: ignore[misc]
            pass


@pytest.mark.parametrize("include", [False, True])
def test_pickle_and_copy(include: bool) -> None:
    s = stopstream.StopSet(["a", "b"], include)
    for clone in (pickle.loads(pickle.dumps(s)), copy.copy(s), copy.deepcopy(s)):
        assert clone == s
        assert clone.include_stop is include
        assert stopstream.truncate("xby", clone)[0] == ("xb" if include else "x")


def test_version_is_the_distributions() -> None:
    from importlib.metadata import version

    assert stopstream.__version__ == version("stopstream")


def test_sizeof_counts_the_compiled_automata() -> None:
    """``sys.getsizeof`` of a list counts what it compiled (caches bound themselves by it)."""
    import sys

    small = sys.getsizeof(stopstream.StopSet(["a"]))
    big = sys.getsizeof(stopstream.StopSet([f"{i:05}-".ljust(32, "q") for i in range(1000)]))
    regex = sys.getsizeof(stopstream.StopSet([stopstream.Regex(r"\w{1,3}z")]))
    assert 0 < small < 100_000 < regex
    assert big > 1_000_000
