"""Contract §6: ``Stop`` and ``Regex`` items, per-stop include flags and skip regions.

The compiled filters are compared with the reference (``stopstream.reference``) feed by feed:
output, ``pending``, ``stopped``, ``stop_sequence``, ``stop_index`` and ``stop_reason``, for
``str`` and ``bytes`` chunks in both error modes. Regex stops are generated as pairs of the same
pattern in Rust syntax (for ``stopstream``) and Python :mod:`re` syntax (for the reference), from
a subset on which the two engines agree: characters of the test alphabet, classes, bounded and
unbounded repetition, alternation, and the assertions (word boundaries, ASCII and Unicode,
anywhere in a pattern, start and end of stream, line starts and ends). The alphabet has ASCII
and non-ASCII word characters and non-word ones, so a Unicode boundary between two of them can
hold or fail, and an attempt that a later boundary dooms must be dropped as soon as its
characters have arrived (the exact holdback).
"""

from __future__ import annotations

import asyncio
import pickle
import re
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from typing import Any

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

import stopstream
from hypothesis_profiles import examples
from stopstream import reference
from strategies import chunkings, split, with_invalid_utf8

ALPHABET = ["a", "b", "\u00e9", "-", "\n"]
"""Text characters. Every other character behaves like one of these for the generated patterns
(``<`` and ``U+FFFD`` like ``-``), so the reference tries only these as continuations."""
TEXT_CHARS = [*ALPHABET, "<", ">", "ab", " "]
_TEXT_CHAR_SET = set("".join(TEXT_CHARS)) | {"\ufffd"}

# (Rust, Python, longest match in characters)
ATOMS: list[tuple[str, str, int]] = [
    ("a", "a", 1),
    ("b", "b", 1),
    ("\u00e9", "\u00e9", 1),
    ("-", "-", 1),
    (r"\n", r"\n", 1),
    (".", ".", 1),
    ("[ab]", "[ab]", 1),
    ("[^a]", "[^a]", 1),
    (r"\w", r"\w", 1),
    (r"\W", r"\W", 1),
    ("ab", "ab", 2),
    ("a-", "a-", 2),
]
UNICODE_BOUNDARIES = [(r"\b", r"\b"), (r"\B", r"\B")]
ASSERTIONS = [
    *UNICODE_BOUNDARIES,
    (r"(?-u:\b)", r"(?a:\b)"),
    (r"(?-u:\B)", r"(?a:\B)"),
    ("^", r"\A"),
    ("$", r"\Z"),
    ("(?m:^)", "(?m:^)"),
    ("(?m:$)", "(?m:$)"),
]


@dataclass(frozen=True)
class Pattern:
    rust: str
    python: str
    max_len: int | None


@st.composite
def branches(draw: st.DrawFn, *, unbounded: bool, assertions: Sequence[tuple[str, str]]) -> Pattern:
    """A concatenation of 1 to 3 pieces, the first one mandatory (so it never matches empty),
    with assertions drawn from ``assertions`` between them and at either end."""
    count = draw(st.integers(1, 3 if unbounded else 2))
    rust, python = "", ""
    total: int | None = 0
    for k in range(count):
        if assertions and draw(st.integers(0, 3)) == 0:
            r, p = draw(st.sampled_from(assertions))
            rust, python = rust + r, python + p
        r, p, n = draw(st.sampled_from(ATOMS))
        quantifiers: list[tuple[str, int | None]] = (
            [("", 1), ("{1,2}", 2)] if k == 0 else [("", 1), ("?", 1), ("{1,2}", 2)]
        )
        if unbounded:
            quantifiers += [("+", None)] if k == 0 else [("*", None), ("{2,}", None)]
        q, times = draw(st.sampled_from(quantifiers))
        rust += f"(?:{r}){q}"
        python += f"(?:{p}){q}"
        total = None if total is None or times is None else total + n * times
    if draw(st.booleans()) and assertions:
        r, p = draw(st.sampled_from(assertions))
        rust, python = rust + r, python + p
    return Pattern(rust, python, total)


@st.composite
def patterns(draw: st.DrawFn, *, unbounded: bool = False) -> Pattern:
    # One pattern in three has only Unicode word boundaries (the NFA engine), the others any
    # assertion (Unicode boundaries among them).
    kinds = draw(st.sampled_from([UNICODE_BOUNDARIES, ASSERTIONS, ASSERTIONS]))
    first = draw(branches(unbounded=unbounded, assertions=kinds))
    if draw(st.integers(0, 3)) > 0:
        return first
    second = draw(branches(unbounded=unbounded, assertions=kinds))
    longest = (
        None
        if first.max_len is None or second.max_len is None
        else max(first.max_len, second.max_len)
    )
    return Pattern(f"{first.rust}|{second.rust}", f"{first.python}|{second.python}", longest)


@dataclass(frozen=True)
class Item:
    """One stop, as the compiled filters and as the reference take it."""

    kind: str  # "str", "stop" or "regex"
    text: str
    pattern: Pattern | None
    include: bool | None

    def real(self) -> str | stopstream.Stop | stopstream.Regex:
        if self.kind == "str":
            return self.text
        if self.kind == "stop":
            return stopstream.Stop(self.text, include=self.include)
        assert self.pattern is not None
        return stopstream.Regex(self.pattern.rust, include=self.include)

    def ref(self) -> reference.StopItem:
        if self.kind == "str":
            return self.text
        if self.kind == "stop":
            return reference.Stop(self.text, include=self.include)
        assert self.pattern is not None
        return reference.Regex(self.pattern.python, self.include, self.pattern.max_len)


@st.composite
def items(draw: st.DrawFn, *, unbounded: bool = False, regex: bool = True) -> Item:
    kind = draw(st.sampled_from(["str", "stop", "regex", "regex"] if regex else ["str", "stop"]))
    include = draw(st.sampled_from([None, True, False]))
    if kind == "regex":
        return Item(kind, "", draw(patterns(unbounded=unbounded)), include)
    text = "".join(draw(st.lists(st.sampled_from([*ALPHABET, "<", ">"]), min_size=1, max_size=3)))
    return Item(kind, text, None, None if kind == "str" else include)


MARKERS = ["<", "<a", ">", "a-", "b\n", "-b"]


@dataclass(frozen=True)
class Case:
    items: tuple[Item, ...]
    include_stop: bool
    skip: tuple[tuple[str, str], ...]
    skip_until: str | None
    chunks: tuple[str, ...]

    def real_stops(self) -> list[str | stopstream.Stop | stopstream.Regex]:
        return [i.real() for i in self.items]

    def ref_stops(self) -> list[reference.StopItem]:
        return [i.ref() for i in self.items]

    def options(self) -> dict[str, Any]:
        return {"skip": list(self.skip) or None, "skip_until": self.skip_until}


@st.composite
def cases(
    draw: st.DrawFn, *, unbounded: bool = False, regions: bool = True, regex: bool = True
) -> Case:
    stops = tuple(draw(st.lists(items(unbounded=unbounded, regex=regex), min_size=1, max_size=3)))
    skip: tuple[tuple[str, str], ...] = ()
    until = None
    if regions:
        skip = tuple(
            draw(
                st.lists(st.tuples(st.sampled_from(MARKERS), st.sampled_from(MARKERS)), max_size=2)
            )
        )
        until = draw(st.one_of(st.none(), st.none(), st.sampled_from(MARKERS)))
    text = "".join(draw(st.lists(st.sampled_from(TEXT_CHARS), max_size=10)))
    cuts = draw(st.lists(st.integers(0, len(text)), max_size=4))
    return Case(stops, draw(st.booleans()), skip, until, tuple(split(text, sorted(cuts))))


def ref_filter(case: Case) -> reference.ReferenceStopFilter:
    return reference.ReferenceStopFilter(
        case.ref_stops(),
        case.include_stop,
        skip=case.skip or None,
        skip_until=case.skip_until,
        alphabet="".join(ALPHABET),
    )


def attrs(f: stopstream.StopFilter | reference.ReferenceStopFilter) -> tuple[object, ...]:
    return (f.pending, f.stopped, f.stop_sequence, f.stop_index, f.stop_reason)


def battrs(f: stopstream.ByteStopFilter | reference.ReferenceByteStopFilter) -> tuple[object, ...]:
    return (f.pending, f.stopped, f.stop_sequence, f.stop_index, f.stop_reason)


SETTINGS = settings(
    max_examples=examples(250), deadline=None, suppress_health_check=[HealthCheck.too_slow]
)


@pytest.mark.slow
@SETTINGS
@given(cases())
def test_str_filter_matches_reference(case: Case) -> None:
    real = stopstream.StopFilter(case.real_stops(), case.include_stop, **case.options())
    ref = ref_filter(case)
    for chunk in case.chunks:
        assert real.feed(chunk) == ref.feed(chunk), (case, chunk)
        assert attrs(real) == attrs(ref), (case, chunk)
    assert real.finish() == ref.finish(), case
    assert attrs(real) == attrs(ref), case


@st.composite
def quiet_cases(draw: st.DrawFn) -> Case:
    """Literal stops over two letters and a two-byte one, so that stops nest in and extend one
    another often (the passed-over states of a quiet stream), with or without a region."""
    letters = ["a", "b", "\u00e9"]

    def word(longest: int) -> str:
        return "".join(draw(st.lists(st.sampled_from(letters), min_size=1, max_size=longest)))

    stops = []
    for _ in range(draw(st.integers(1, 4))):
        kind = draw(st.sampled_from(["str", "stop"]))
        include = None if kind == "str" else draw(st.sampled_from([None, True, False]))
        stops.append(Item(kind, word(4), None, include))
    skip = draw(st.sampled_from([(), (("<", ">"),), (("a<", ">"),)]))
    until = draw(st.sampled_from([None, None, None, "<"]))
    text = "".join(draw(st.lists(st.sampled_from([*letters, "<", ">", "-"]), max_size=14)))
    cuts = draw(st.lists(st.integers(0, len(text)), max_size=5))
    return Case(tuple(stops), draw(st.booleans()), skip, until, tuple(split(text, sorted(cuts))))


@pytest.mark.slow
@SETTINGS
@given(st.one_of(quiet_cases(), cases(regex=False)), st.data())
def test_quiet_filter_matches_reference(case: Case, data: st.DataObject) -> None:
    """The vLLM plugin's ``min_tokens``: a quiet filter (turned on and off, and reset, between
    any chunks) gives every output, held text and attribute the reference does."""
    real = stopstream.StopFilter(case.real_stops(), case.include_stop, **case.options())
    ref = ref_filter(case)
    try:
        ref._quiet(True)
    except ValueError as e:
        with pytest.raises(ValueError, match=re.escape(str(e))):
            real._quiet(True)
        return
    real._quiet(True)
    for chunk in case.chunks:
        action = data.draw(st.sampled_from(["", "", "", "loud", "quiet", "reset"]), label="then")
        if action == "reset":
            real.reset()
            ref.reset()
        elif action:
            real._quiet(action == "quiet")
            ref._quiet(action == "quiet")
        assert real.feed(chunk) == ref.feed(chunk), (case, chunk)
        assert attrs(real) == attrs(ref), (case, chunk)
    assert real.finish() == ref.finish(), case
    assert attrs(real) == attrs(ref), case


@pytest.mark.slow
@SETTINGS
@given(cases(unbounded=True), st.data())
def test_unbounded_patterns_final_output_and_no_leak(case: Case, data: st.DataObject) -> None:
    """Unbounded stops: the final result matches; nothing emitted is ever taken back."""
    real = stopstream.StopFilter(case.real_stops(), case.include_stop, **case.options())
    out = "".join(real.feed(c) for c in case.chunks)
    out += real.finish()
    ref = ref_filter(case)
    text = "".join(case.chunks)
    want = ref.feed(text) + ref.finish()
    assert out == want, case
    assert (real.stop_sequence, real.stop_index, real.stop_reason) == (
        ref.stop_sequence,
        ref.stop_index,
        ref.stop_reason,
    )
    got, stop = stopstream.truncate(text, case.real_stops(), case.include_stop, **case.options())
    assert (got, stop) == (want, ref.stop_sequence)


@pytest.mark.slow
@SETTINGS
@given(cases(), st.data())
def test_byte_filter_matches_reference(case: Case, data: st.DataObject) -> None:
    raw = data.draw(with_invalid_utf8("".join(case.chunks).encode()))
    # An inserted snippet can complete a character of its own (U+2080 out of "€" and "\x80"):
    # outside the texts' characters, Python's and Rust's ``\w`` may disagree (Python counts
    # every numeric character), so such texts are not a test of stopstream.
    assume(set(raw.decode("utf-8", "replace")) <= _TEXT_CHAR_SET)
    errors = data.draw(st.sampled_from(["strict", "replace"]))
    cuts = data.draw(st.lists(st.integers(0, len(raw)), max_size=5))
    chunks = split(raw, sorted(cuts))
    real = stopstream.ByteStopFilter(case.real_stops(), case.include_stop, errors, **case.options())
    ref = reference.ReferenceByteStopFilter(
        case.ref_stops(),
        case.include_stop,
        errors,
        skip=case.skip or None,
        skip_until=case.skip_until,
        alphabet="".join(ALPHABET),
    )
    for chunk in [*chunks, None]:
        outcomes: list[tuple[str, object]] = []
        for f in (real, ref):
            try:
                outcomes.append(("ok", f.finish() if chunk is None else f.feed(chunk)))
            except UnicodeDecodeError as e:
                outcomes.append(("error", (e.start, e.end)))
        assert outcomes[0][0] == outcomes[1][0], (case, raw, chunks)
        if outcomes[0][0] == "ok":
            assert outcomes[0] == outcomes[1], (case, raw, chunks)
        assert battrs(real) == battrs(ref), (case, raw, chunks)
        if outcomes[0][0] == "error":
            break


@pytest.mark.slow
@SETTINGS
@given(cases(unbounded=True))
def test_chunking_never_matters(case: Case) -> None:
    def run(chunks: Sequence[str]) -> tuple[object, ...]:
        f = stopstream.StopFilter(case.real_stops(), case.include_stop, **case.options())
        out = "".join(f.feed(c) for c in chunks) + f.finish()
        return (out, f.stop_sequence, f.stop_index, f.stop_reason)

    text = "".join(case.chunks)
    assert run(case.chunks) == run([text]) == run(list(text))


@settings(max_examples=examples(60), deadline=None)
@given(cases(unbounded=True))
def test_wrap_and_awrap_match_the_filter(case: Case) -> None:
    f = stopstream.StopFilter(case.real_stops(), case.include_stop, **case.options())
    want = [p for p in (*(f.feed(c) for c in case.chunks), f.finish()) if p]
    s = stopstream.wrap(iter(case.chunks), case.real_stops(), case.include_stop, **case.options())
    assert list(s) == want
    assert (s.stop_sequence, s.stop_index, s.stop_reason) == (
        f.stop_sequence,
        f.stop_index,
        f.stop_reason,
    )

    async def upstream() -> AsyncIterator[str]:
        for c in case.chunks:
            yield c

    async def pull() -> list[str]:
        a = stopstream.awrap(upstream(), case.real_stops(), case.include_stop, **case.options())
        return [p async for p in a]

    assert asyncio.run(pull()) == want


# ---------------------------------------------------------------------------------------------
# The contract's examples, on both implementations


def both(stops: list[Any], **options: Any) -> list[Any]:
    ref_stops = [
        reference.Stop(s.text, include=s.include)
        if isinstance(s, stopstream.Stop)
        else reference.Regex(s.pattern, include=s.include)
        if isinstance(s, stopstream.Regex)
        else s
        for s in stops
    ]
    return [
        stopstream.StopFilter(stops, **options),
        reference.ReferenceStopFilter(ref_stops, alphabet="abcdez .-\n<>/", **options),
    ]


@pytest.mark.parametrize(
    ("stops", "options", "chunks", "outputs", "stop"),
    [
        (
            ["\n\nUser:", stopstream.Stop("</answer>", include=True)],
            {},
            ["<answer>42</answer> tail"],
            ["<answer>42</answer>", ""],
            ("</answer>", 1),
        ),
        (
            ["\n\nUser:", stopstream.Stop("</answer>", include=True)],
            {},
            ["hi\n\nUser: x"],
            ["hi", ""],
            ("\n\nUser:", 0),
        ),
        (
            [stopstream.Regex(r"\bend\b")],
            {},
            ["the calendar ends", " at the end", "."],
            ["the calendar ends", " at the ", "", ""],
            ("end", 0),
        ),
        ([stopstream.Regex("a+")], {}, ["xa", "aa"], ["x", "", ""], ("a", 0)),
        # Earliest end beats leftmost start; at the same end the longest wins.
        ([stopstream.Regex("a.*z"), "bc"], {}, ["abcz"], ["a", ""], ("bc", 1)),
        ([stopstream.Regex("a.*z"), "bc"], {}, ["ab", "cz"], ["", "a", ""], ("bc", 1)),
        (["bc", stopstream.Regex("[a-z]bc")], {}, ["abc d"], ["", ""], ("abc", 1)),
        ([stopstream.Regex("b."), "bc"], {}, ["abc"], ["a", ""], ("bc", 0)),
        (
            ["ab", stopstream.Regex(r".ab\b")],
            {},
            ["xab", " d"],
            ["", "", ""],
            ("xab", 1),
        ),
        (
            ["Question:"],
            {"skip_until": "</think>"},
            ["Let me see. Question: what\u2026</think>The answer is 4. Question: next"],
            ["Let me see. Question: what\u2026</think>The answer is 4. ", ""],
            ("Question:", 0),
        ),
        (
            ["Q:"],
            {"skip": [("<think>", "</think>")]},
            ["a <think>Q: x</thi", "nk> Q", ": y"],
            ["a <think>Q: x</thi", "nk> ", "", ""],
            ("Q:", 0),
        ),
    ],
)
def test_contract_examples(
    stops: list[Any],
    options: dict[str, Any],
    chunks: list[str],
    outputs: list[str],
    stop: tuple[str, int],
) -> None:
    for f in both(stops, **options):
        got = [f.feed(c) for c in chunks] + [f.finish()]
        assert got == outputs, f
        assert (f.stop_sequence, f.stop_index, f.stop_reason) == (*stop, "stop_sequence")


def test_truncate_keeps_the_terminator() -> None:
    stops: list[str | stopstream.Stop] = ["\n\nUser:", stopstream.Stop("</answer>", include=True)]
    assert stopstream.truncate("<answer>42</answer> tail", stops) == (
        "<answer>42</answer>",
        "</answer>",
    )


# ---------------------------------------------------------------------------------------------
# Stop and Regex objects, errors


def test_stop_and_regex_are_values() -> None:
    a, b = stopstream.Regex(r"\bend\b"), stopstream.Regex(r"\bend\b")
    assert a == b and hash(a) == hash(b) and a != stopstream.Regex(r"\bend\b", include=True)
    assert (
        repr(stopstream.Regex(r"\bend\b", include=True)) == "Regex('\\\\bend\\\\b', include=True)"
    )
    assert repr(stopstream.Stop("</a>")) == "Stop('</a>')"
    assert stopstream.Stop("x") == stopstream.Stop("x") != stopstream.Stop("x", include=False)
    assert len({stopstream.Stop("x"), stopstream.Stop("x"), stopstream.Regex("x")}) == 2
    assert stopstream.Stop("x") != "x"
    with pytest.raises(AttributeError):
        a.pattern = "y"  # type: ignore[misc]
    assert (a.pattern, a.include, stopstream.Stop("x", include=True).text) == (
        r"\bend\b",
        None,
        "x",
    )
    assert stopstream.Regex("ab|c{2,3}").max_len == 3
    assert stopstream.Regex("a.*b").max_len is None
    assert stopstream.Regex("\u00e9{2}").max_len == 2
    f = stopstream.StopFilter(["x", a])
    assert f.stops == ("x", a)


@pytest.mark.parametrize(
    ("pattern", "message"),
    [
        ("a(", "regex stop at position 1 is invalid"),
        ("a*", "matches the empty string"),
        (r"\b", "matches the empty string"),
        ("(?=a)", "look-around"),
    ],
)
def test_bad_patterns_name_the_position(pattern: str, message: str) -> None:
    # Checked when a stop list is compiled, where the position is known.
    for make in (stopstream.StopFilter, reference.ReferenceStopFilter):
        bad = (
            stopstream.Regex(pattern) if make is stopstream.StopFilter else reference.Regex(pattern)
        )
        with pytest.raises(ValueError) as info:
            make(["ok", bad])  # type: ignore[list-item]
        assert "regex stop at position 1 is invalid" in str(info.value)
        assert message in str(info.value) or make is reference.ReferenceStopFilter
    with pytest.raises(ValueError, match="invalid"):
        _ = stopstream.Regex(pattern).max_len


def test_a_size_limit_bounds_a_pattern() -> None:
    """A limit rejects a pattern as soon as compiling passes it, so an untrusted pattern costs
    little; a pattern whose DFA would pass it runs on its NFA, with the same matches."""
    hostile = stopstream.Regex(r"(\w+\s?){1,200}z", size_limit=64 << 10)
    with pytest.raises(ValueError, match="position 1 is invalid: the compiled pattern is over its"):
        stopstream.StopFilter(["ok", hostile])
    assert stopstream.StopFilter([stopstream.Regex(r"(\w+\s?){1,3}z", size_limit=64 << 10)])
    # (a|b)*a(a|b){12}c: a small NFA whose DFA has thousands of states.
    text = "ab" * 40 + "a" + "b" * 12 + "c tail"
    outs = []
    for limit in (None, 1 << 20, 4 << 10):
        f = stopstream.StopFilter([stopstream.Regex("(a|b)*a(a|b){12}c", size_limit=limit)])
        outs.append((f.feed(text) + f.finish(), f.stop_sequence))
    assert outs[0] == outs[1] == outs[2] and outs[0][0] == ""
    r = stopstream.Regex("x+", size_limit=100)
    assert r.size_limit == 100 and stopstream.Regex("x+").size_limit is None
    assert r != stopstream.Regex("x+") and r == stopstream.Regex("x+", size_limit=100)
    assert repr(r) == "Regex('x+', size_limit=100)"
    assert pickle.loads(pickle.dumps(r)) == r
    with pytest.raises(ValueError, match="size_limit must be a positive"):
        stopstream.Regex("x", size_limit=0)
    with pytest.raises(OverflowError):
        stopstream.Regex("x", size_limit=-1)


def test_bad_options() -> None:
    with pytest.raises(ValueError, match="position 0 is empty"):
        stopstream.StopFilter([stopstream.Stop("")])
    with pytest.raises(ValueError, match="skip_until is empty"):
        stopstream.StopFilter(["x"], skip_until="")
    with pytest.raises(ValueError, match=r"skip\[0\] closing marker is empty"):
        stopstream.StopFilter(["x"], skip=[("<", "")])
    with pytest.raises(TypeError):
        stopstream.StopFilter(["x"], skip=[("<",)])  # type: ignore[list-item]
    with pytest.raises(TypeError):
        stopstream.StopFilter([1])  # type: ignore[list-item]


def test_stopset_options_and_pickling() -> None:
    stops: list[str | stopstream.Stop | stopstream.Regex] = [
        "x",
        stopstream.Stop("</a>", include=True),
        stopstream.Regex(r"\bq\b"),
    ]
    s = stopstream.StopSet(stops, skip=[("<t>", "</t>")], skip_until="go")
    assert s.stops == tuple(stops) and len(s) == 3
    assert s.skip == (("<t>", "</t>"),) and s.skip_until == "go"
    assert pickle.loads(pickle.dumps(s)) == s
    assert pickle.loads(pickle.dumps(stops)) == stops
    assert s == stopstream.StopSet(stops, skip=[("<t>", "</t>")], skip_until="go")
    assert s != stopstream.StopSet(stops, skip=[("<t>", "</t>")])
    f = stopstream.StopFilter(s, skip_until="go")
    assert f.feed("q go <t>q</t> a q b") == "q go <t>q</t> a "
    assert f.stop_sequence == "q"
    with pytest.raises(ValueError, match="differs"):
        stopstream.StopFilter(s, skip_until="other")
    g = stopstream.ByteStopFilter(s)
    assert g.feed(b"go x") == b"go " and g.stop_index == 0


def test_token_filter_takes_composed_lists() -> None:
    """``Stop``, ``Regex`` and skip regions over token ids: the text is what the byte filter
    gives for the same bytes (``tests/core/test_token_stops.py`` has the differential tests)."""
    vocab = stopstream.Vocab([b"a", b"b", b" ", b"<t>", b"</t>"])
    stops: list[stopstream.Regex | stopstream.Stop] = [
        stopstream.Regex(r"ab\b"),
        stopstream.Stop("b", include=True),
    ]
    f = stopstream.TokenStopFilter(vocab, stops, skip=[("<t>", "</t>")])
    ids = [3, 1, 4, 0, 1, 0, 1, 2]
    got = "".join(f.feed([i]).text for i in ids) + f.finish().text
    g = stopstream.ByteStopFilter(stops, skip=[("<t>", "</t>")])
    data = b"".join(vocab.token_bytes(i) or b"" for i in ids)
    assert got == (g.feed(data) + g.finish()).decode()
    assert (f.stop_sequence, f.stop_index) == (g.stop_sequence, g.stop_index) == ("b", 1)


_LITERAL_TEXT = st.text(alphabet="ab<>/t \n", max_size=30)


@pytest.mark.slow
@settings(max_examples=examples(300), deadline=None)
@given(
    stops=st.lists(st.text(alphabet="ab<>/t\n", min_size=1, max_size=4), min_size=1, max_size=3),
    text=_LITERAL_TEXT,
    data=st.data(),
    include_stop=st.booleans(),
)
def test_wrap_over_literal_stops_with_regions_matches_the_filter(
    stops: list[str], text: str, data: st.DataObject, include_stop: bool
) -> None:
    """A literal list with a skip region: the stream's per-chunk shortcut against the filter."""
    chunks = data.draw(chunkings(text))
    options: dict[str, Any] = data.draw(
        st.sampled_from([{"skip": [("<t>", "</t>")]}, {"skip_until": "</t>"}])
    )
    f = stopstream.StopFilter(stops, include_stop, **options)
    want = [p for p in (*(f.feed(c) for c in chunks), f.finish()) if p]
    s = stopstream.wrap(iter(chunks), stops, include_stop, **options)
    assert list(s) == want
    assert (s.stop_sequence, s.stop_index, s.stop_reason) == (
        f.stop_sequence,
        f.stop_index,
        f.stop_reason,
    )
