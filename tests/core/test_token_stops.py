"""Contract §6 over token ids (§7): ``Stop``, ``Regex``, ``StopSet`` and skip regions in a
``TokenStopFilter``, against ``stopstream.reference.ReferenceTokenStopFilter``.

Every call is compared: each ``feed``'s and ``finish``'s ``text`` and ``tokens``, then
``stopped``, ``stop_sequence``, ``stop_index``, ``stop_reason``, ``pending`` and
``stop_token_id``; a call that raises must raise the same type in both and change neither
(the following calls check that). Stops, patterns and markers come from
``tests/core/test_stops_regions.py`` (pattern pairs on which Rust's and Python's engines agree, over
an alphabet every other character imitates), and the vocabulary is small and made for it: whole
characters, a character split across two tokens, invalid bytes, an empty token, special tokens,
a hole, and tokens starting with a space (for the leading-space rule).

Strict mode with a regex stop and invalid UTF-8 is left out: there, a regex whose match waits on
the next character (``\\b``, ``$``) meets the error first, and what the stream does then is the
byte stream's decision (``tests/core/test_stops_regions.py``), not the token layer's. With a regex
stop, strict mode is fed valid UTF-8 only (a split character always completed by the next id);
literal-only composed lists (``Stop`` items, skip regions) get invalid bytes in both modes.

A real tokenizer (cl100k) runs too, with literal ``Stop`` items and skip markers planted in
prose.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import stopstream
import tokenizer_support
from hypothesis_profiles import examples
from stopstream import _vocab
from stopstream.reference import ReferenceTokenStopFilter, Stop
from stopstream.reference import Regex as RefRegex
from test_stops_regions import ALPHABET, MARKERS, Item, Pattern, items, patterns

TOKENS: list[bytes | None] = [
    b"a",  # 0
    b"b",  # 1
    b"ab",  # 2
    "\u00e9".encode(),  # 3
    b"\xc3",  # 4  first byte of é
    b"\xa9",  # 5  its last byte
    b"-",  # 6
    b"\n",  # 7
    b"<",  # 8
    b">",  # 9
    b"<a",  # 10
    b" ",  # 11
    b"a-",  # 12
    b"b\n",  # 13
    b"\xff",  # 14  never valid
    b"\xe2\x82",  # 15  a prefix of €, never completed here
    b"",  # 16  no text
    b"<|end|>",  # 17  special
    None,  # 18  hole
    b"<|eot|>",  # 19  special
    b"-b",  # 20
    b" a",  # 21
]
SPECIAL = [17, 19]
WHOLE = [0, 1, 2, 3, 6, 7, 8, 9, 10, 11, 12, 13, 16, 17, 19, 20, 21]
"""Ids whose bytes are whole characters (or none)."""
BROKEN = [4, 5, 14, 15]
"""Ids of part of a character, or of invalid bytes."""
BAD = [18, -1, len(TOKENS), 2**70]
"""Ids not in the vocabulary."""
STOP_IDS = [16, 17, 0, 14]


@functools.cache
def vocab(strip: bool) -> stopstream.Vocab:
    return stopstream.Vocab(TOKENS, special=SPECIAL, strip_leading_space=strip)


@dataclass(frozen=True)
class Case:
    items: tuple[Item, ...]
    include_stop: bool
    skip: tuple[tuple[str, str], ...]
    skip_until: str | None
    errors: str
    strip: bool
    stop_ids: tuple[int, ...]
    ids: tuple[int, ...]

    @property
    def regex(self) -> bool:
        return any(i.kind == "regex" for i in self.items)


CHAR_IDS = {"a": [0], "b": [1], "\u00e9": [3], "-": [6], "\n": [7], "<": [8], ">": [9], " ": [11]}
"""How each character of the stops' alphabet is spelled in ids."""


@st.composite
def token_ids(draw: st.DrawFn, stops: tuple[Item, ...], broken: bool) -> list[int]:
    """Up to 10 pieces of ids: whole tokens (mostly the characters patterns are made of), é
    split across two ids (always completed), tokens without text, a literal stop spelled out,
    and with ``broken`` invalid bytes, part of a character, and ids not in the vocabulary."""
    literals = [i.text for i in stops if i.kind != "regex"]
    whole = st.one_of(st.sampled_from([0, 1, 2, 3, 6, 7, 11]), st.sampled_from(WHOLE))
    kinds = ["whole"] * 6 + ["split", "none", "none"] + ["stop"] * (2 if literals else 0)
    kinds += ["broken", "broken", "bad"] if broken else []
    ids: list[int] = []
    for _ in range(draw(st.integers(0, 10))):
        kind = draw(st.sampled_from(kinds))
        if kind == "whole":
            ids.append(draw(whole))
        elif kind == "split":
            ids += [4, 5]
        elif kind == "none":
            ids.append(draw(st.sampled_from([16, 17, 19])))
        elif kind == "stop":
            ids += [i for ch in draw(st.sampled_from(literals)) for i in CHAR_IDS[ch]]
        elif kind == "broken":
            ids.append(draw(st.sampled_from(BROKEN)))
        else:
            ids.append(draw(st.sampled_from(BAD)))
    return ids


@st.composite
def cases(draw: st.DrawFn, *, at_end: bool = False) -> Case:
    """A case; with ``at_end``, the first stop is a pattern anchored at the end of the stream,
    which only ``finish()`` (or a stop token) can settle."""
    stops = tuple(draw(st.lists(items(), min_size=0 if at_end else 1, max_size=3)))
    if at_end:
        p = draw(patterns())
        anchored = Pattern(f"(?:{p.rust})$", f"(?:{p.python})\\Z", p.max_len)
        stops = (Item("regex", "", anchored, draw(st.sampled_from([None, True, False]))), *stops)
    skip: tuple[tuple[str, str], ...] = ()
    until = None
    if draw(st.booleans()):
        pairs = st.tuples(st.sampled_from(MARKERS), st.sampled_from(MARKERS))
        skip = tuple(draw(st.lists(pairs, max_size=2)))
        until = draw(st.one_of(st.none(), st.none(), st.sampled_from(MARKERS)))
    errors = draw(st.sampled_from(["strict", "replace"]))
    regex = any(i.kind == "regex" for i in stops)
    broken = errors == "replace" or not regex
    stop_ids = draw(st.lists(st.sampled_from(STOP_IDS if broken else STOP_IDS[:3]), max_size=2))
    return Case(
        stops,
        draw(st.booleans()),
        skip,
        until,
        errors,
        draw(st.booleans()),
        tuple(stop_ids),
        tuple(draw(token_ids(stops, broken))),
    )


def attributes(f: stopstream.TokenStopFilter | ReferenceTokenStopFilter) -> tuple[object, ...]:
    return (f.stopped, f.stop_sequence, f.stop_index, f.stop_reason, f.pending, f.stop_token_id)


def build(case: Case, data: st.DataObject) -> stopstream.TokenStopFilter:
    """The filter, with its stops given as a list or as a ``StopSet`` (options passed again with
    the same values, or not)."""
    stops = [i.real() for i in case.items]
    options: dict[str, Any] = {"skip": list(case.skip) or None, "skip_until": case.skip_until}
    common: dict[str, Any] = {"stop_token_ids": list(case.stop_ids), "errors": case.errors}
    v = vocab(case.strip)
    if data.draw(st.booleans(), label="as a StopSet"):
        compiled = stopstream.StopSet(stops, include_stop=case.include_stop, **options)
        again: dict[str, Any] = data.draw(
            st.sampled_from([{}, {"include_stop": case.include_stop}, options]), label="again"
        )
        return stopstream.TokenStopFilter(v, compiled, **again, **common)
    return stopstream.TokenStopFilter(v, stops, include_stop=case.include_stop, **options, **common)


def ref_filter(case: Case) -> ReferenceTokenStopFilter:
    return ReferenceTokenStopFilter(
        TOKENS,
        [i.ref() for i in case.items],
        special=SPECIAL,
        include_stop=case.include_stop,
        stop_token_ids=case.stop_ids,
        errors=case.errors,
        strip_leading_space=case.strip,
        skip=case.skip or None,
        skip_until=case.skip_until,
        alphabet="".join(ALPHABET),
    )


def feeds(data: st.DataObject, ids: tuple[int, ...]) -> list[list[int]]:
    """``ids`` cut into feeds of 0 to 3 ids."""
    out: list[list[int]] = []
    i = 0
    while i < len(ids):
        n = data.draw(st.integers(0, 3), label="feed size")
        out.append(list(ids[i : i + n]))
        i += n
    return out


def same_call(
    real: Callable[[], stopstream.TokenPiece],
    ref: Callable[[], tuple[str, int]],
    what: str,
) -> bool:
    """Call both: the same result, or the same exception type. Whether it raised."""
    try:
        want = ref()
    except (ValueError, UnicodeDecodeError) as error:
        with pytest.raises(type(error)):
            real()
        return True
    got = real()
    assert (got.text, got.tokens) == want, what
    return False


def compare(
    f: stopstream.TokenStopFilter,
    ref: ReferenceTokenStopFilter,
    calls: list[list[int] | None],
    data: st.DataObject,
) -> None:
    for n, call in enumerate(calls):
        what = f"call {n}: {'finish' if call is None else call}"
        if call is None:
            raised = same_call(f.finish, ref.finish, what)
        else:
            arg: Any = call
            if len(call) == 1 and data.draw(st.booleans(), label="as an int"):
                arg = call[0]
            raised = same_call(
                functools.partial(f.feed, arg), functools.partial(ref.feed, call), what
            )
        assert attributes(f) == attributes(ref), what
        if raised and call is None:
            break


SETTINGS = settings(
    max_examples=examples(300), deadline=None, suppress_health_check=[HealthCheck.too_slow]
)


@pytest.mark.slow
@SETTINGS
@given(case=cases(), data=st.data())
def test_every_feed_matches_the_reference(case: Case, data: st.DataObject) -> None:
    f = build(case, data)
    ref = ref_filter(case)
    assert f.stops == tuple(i.real() for i in case.items)
    assert (f.include_stop, f.errors) == (case.include_stop, case.errors)
    assert attributes(f) == attributes(ref)
    calls: list[list[int] | None] = [*feeds(data, case.ids), None, None, [0]]
    compare(f, ref, calls, data)
    # A new stream over the same filter: the same again.
    f.reset()
    ref.reset()
    assert attributes(f) == attributes(ref)
    compare(f, ref, [list(case.ids), None], data)


@pytest.mark.slow
@SETTINGS
@given(case=cases(at_end=True), data=st.data())
def test_stops_settled_at_the_end_match_the_reference(case: Case, data: st.DataObject) -> None:
    f = build(case, data)
    ref = ref_filter(case)
    compare(f, ref, [*feeds(data, case.ids), None, [0]], data)


# The same stream split differently: the concatenated text, released count and the stop do not
# depend on the split (contract §2.4), on the filter alone.


def run(f: stopstream.TokenStopFilter, calls: list[list[int]]) -> tuple[object, ...]:
    text, tokens = "", 0
    for call in calls:
        piece = f.feed(call)
        text, tokens = text + piece.text, tokens + piece.tokens
    piece = f.finish()
    return text + piece.text, tokens + piece.tokens, attributes(f)


@pytest.mark.slow
@SETTINGS
@given(case=cases(), data=st.data())
def test_the_split_never_matters(case: Case, data: st.DataObject) -> None:
    case = dataclasses.replace(case, ids=tuple(i for i in case.ids if i not in BAD))
    whole = build(case, data)
    try:
        want = run(whole, [list(case.ids)])
    except UnicodeDecodeError:
        return
    assert run(build(case, data), feeds(data, case.ids)) == want
    assert run(build(case, data), [[i] for i in case.ids]) == want


# A real tokenizer: cl100k, literal stops with their own include flags, skip regions planted.

MARKS = [("<think>", "</think>"), ("```", "```")]


@st.composite
def prose(draw: st.DrawFn) -> tuple[list[int], list[str | Stop], list[tuple[str, str]], str | None]:
    lines = tokenizer_support.corpus_lines()
    start = draw(st.integers(0, len(lines) - 1))
    text = "\n".join(lines[start : start + 3])[: draw(st.integers(0, 120))]
    for mark in draw(st.lists(st.sampled_from([m for pair in MARKS for m in pair]), max_size=3)):
        at = draw(st.integers(0, len(text)))
        text = text[:at] + mark + text[at:]
    stops: list[str | Stop] = []
    for _ in range(draw(st.integers(1, 3))):
        if text and draw(st.booleans()):
            a = draw(st.integers(0, len(text) - 1))
            stop = text[a : a + draw(st.integers(1, 5))]
        else:
            stop = draw(st.sampled_from(["</think>", "\n\n", " the", "()", "é"]))
        include = draw(st.sampled_from([None, True, False]))
        stops.append(stop if include is None else Stop(stop, include=include))
    skip = draw(st.lists(st.sampled_from(MARKS), max_size=1, unique=True))
    until = draw(st.one_of(st.none(), st.none(), st.just("</think>")))
    return list(tokenizer_support.cl100k().encode_ordinary(text)), stops, skip, until


@settings(max_examples=examples(100), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(stream=prose(), include=st.booleans(), data=st.data())
def test_real_tokens_with_stop_items_and_regions(
    stream: tuple[list[int], list[str | Stop], list[tuple[str, str]], str | None],
    include: bool,
    data: st.DataObject,
) -> None:
    ids, stops, skip, until = stream
    enc = tokenizer_support.cl100k()
    tokens, special, strip = _vocab.tiktoken_tokens(enc)
    real_stops = [
        s if isinstance(s, str) else stopstream.Stop(s.text, include=s.include) for s in stops
    ]
    errors = data.draw(st.sampled_from(["replace", "strict"]), label="errors")
    f = stopstream.TokenStopFilter(
        cl100k_vocab(),
        real_stops,
        include_stop=include,
        stop_token_ids=[enc.eot_token],
        errors=errors,
        skip=skip or None,
        skip_until=until,
    )
    ref = ReferenceTokenStopFilter(
        tokens,
        stops,
        special=special,
        include_stop=include,
        stop_token_ids=[enc.eot_token],
        errors=errors,
        strip_leading_space=strip,
        skip=skip or None,
        skip_until=until,
    )
    if data.draw(st.booleans(), label="end with the stop token"):
        ids = [*ids, enc.eot_token]
    compare(f, ref, [*feeds(data, tuple(ids)), None], data)


@functools.cache
def cl100k_vocab() -> stopstream.Vocab:
    return stopstream.Vocab.from_tiktoken(tokenizer_support.cl100k())


# Examples worth naming.


def test_regex_settled_at_finish_releases_the_tokens_before_the_cut() -> None:
    v = vocab(False)
    f = stopstream.TokenStopFilter(v, [stopstream.Regex(r"b\b")])
    assert f.feed([11, 0, 1]) == stopstream.TokenPiece(" a", 2)
    assert attributes(f) == (False, None, None, None, "b", None)
    assert f.finish() == stopstream.TokenPiece("", 0)
    assert attributes(f) == (True, "b", 0, "stop_sequence", "", None)
    # Its own flag on: nothing held, and the token holding the match was released with it.
    f = stopstream.TokenStopFilter(v, [stopstream.Regex(r"b\b", include=True)])
    assert f.feed([11, 0, 1]) == stopstream.TokenPiece(" ab", 3)
    assert f.finish() == stopstream.TokenPiece("", 0) and f.stop_sequence == "b"


def test_finish_can_release_tokens_before_a_cut_it_settles() -> None:
    """``a..$`` holds ``ab`` back (it may still match); the end of the stream kills it and
    settles ``b$``: the cut is before ``b``, so ``finish`` emits ``a`` and releases its token."""
    v = vocab(False)
    stops = [stopstream.Regex(r"a..$|b$")]
    f = stopstream.TokenStopFilter(v, stops)
    ref = ReferenceTokenStopFilter(TOKENS, [RefRegex(r"a..\Z|b\Z")], special=SPECIAL)
    assert f.feed([0, 1]) == stopstream.TokenPiece("", 0) and ref.feed([0, 1]) == ("", 0)
    assert f.pending == ref.pending == "ab"
    assert f.finish() == stopstream.TokenPiece("a", 1) and ref.finish() == ("a", 1)
    assert attributes(f) == attributes(ref) == (True, "b", 0, "stop_sequence", "", None)


def test_per_stop_include_decides_the_released_tokens() -> None:
    v = vocab(False)
    stops: list[str | stopstream.Stop] = ["\n", stopstream.Stop("ab", include=True)]
    f = stopstream.TokenStopFilter(v, stops)
    assert f.feed([11, 2, 0]) == stopstream.TokenPiece(" ab", 2)
    assert (f.stop_sequence, f.stop_index) == ("ab", 1)
    f = stopstream.TokenStopFilter(v, stops)
    assert f.feed([11, 13, 0]) == stopstream.TokenPiece(" b", 2)
    assert (f.stop_sequence, f.stop_index) == ("\n", 0)


def test_a_stop_token_ends_the_text_as_finish_does() -> None:
    v = vocab(False)
    f = stopstream.TokenStopFilter(v, [stopstream.Regex(r"a\b")], stop_token_ids=[17])
    assert f.feed([11, 0, 17, 0]) == stopstream.TokenPiece(" ", 1)
    assert (f.stop_reason, f.stop_token_id, f.stop_sequence) == ("stop_sequence", None, "a")
    f = stopstream.TokenStopFilter(v, [stopstream.Regex(r"a\b")], stop_token_ids=[17])
    assert f.feed([11, 1, 17, 0]) == stopstream.TokenPiece(" b", 3)
    assert (f.stop_reason, f.stop_token_id) == ("stop_token", 17)


def test_skip_regions_hold_nothing_and_release_their_tokens() -> None:
    v = vocab(False)
    f = stopstream.TokenStopFilter(v, ["a"], skip=[("<", ">")], skip_until="-")
    assert f.feed([0, 6]) == stopstream.TokenPiece("a-", 2)
    assert f.feed([10, 0]) == stopstream.TokenPiece("<aa", 2)
    assert f.feed([9, 1, 0, 1]) == stopstream.TokenPiece(">b", 2)
    assert (f.stop_sequence, f.stop_index) == ("a", 0)


def test_a_stop_set_lends_every_option() -> None:
    v = vocab(False)
    s = stopstream.StopSet([stopstream.Regex("a+")], include_stop=True, skip_until="-")
    f = stopstream.TokenStopFilter(v, s)
    assert f.include_stop and f.stops == (stopstream.Regex("a+"),)
    assert f.feed([0, 6, 0, 0]) == stopstream.TokenPiece("a-a", 3)
    assert f.stop_sequence == "a"
    for same in ({"include_stop": True}, {"skip_until": "-"}, {"skip": None}):
        stopstream.TokenStopFilter(v, s, **same)
    for differs in ({"include_stop": False}, {"skip_until": "<"}, {"skip": [("<", ">")]}):
        with pytest.raises(ValueError, match="differs"):
            stopstream.TokenStopFilter(v, s, **differs)


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"stops": [stopstream.Regex("(")]}, ValueError, "position 0"),
        ({"stops": [stopstream.Regex("a*")]}, ValueError, "empty string"),
        ({"stops": ["a", stopstream.Stop("")]}, ValueError, "position 1"),
        ({"stops": ["a", 3]}, TypeError, "position 1"),
        ({"stops": "a", "skip": "<>"}, TypeError, "skip"),
        ({"stops": "a", "skip": [("<", "")]}, ValueError, "closing marker is empty"),
        ({"stops": "a", "skip_until": 5}, TypeError, "skip_until"),
    ],
)
def test_bad_stops_and_options(kwargs: dict[str, Any], error: type[Exception], match: str) -> None:
    with pytest.raises(error, match=match):
        stopstream.TokenStopFilter(vocab(False), **kwargs)


@settings(max_examples=examples(100), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(batch=st.lists(cases(), min_size=1, max_size=4), data=st.data())
def test_feed_batch_of_composed_filters_equals_one_by_one(
    batch: list[Case], data: st.DataObject
) -> None:
    """Composed and literal filters in one batch (a composed one takes the general path), step
    by step: the same pieces and attributes as feeding each alone."""
    batch = [dataclasses.replace(c, ids=tuple(i for i in c.ids if i not in BAD)) for c in batch]
    plain = Case((Item("str", "ab", None, None),), False, (), None, "replace", False, (), (0, 1))
    batch.append(plain)
    together = [build(c, data) for c in batch]
    alone = [build(c, data) for c in batch]
    for step in range(max(len(c.ids) for c in batch) + 1):
        entries: list[Any] = [c.ids[step] if step < len(c.ids) else [] for c in batch]
        try:
            want = [f.feed(e) for f, e in zip(alone, entries, strict=True)]
        except UnicodeDecodeError:
            with pytest.raises(UnicodeDecodeError):
                stopstream.feed_batch(together, entries)
            return
        assert stopstream.feed_batch(together, entries) == want
        assert [attributes(f) for f in together] == [attributes(f) for f in alone]
