"""Token ids in (contract §7): real tokenizers, the reference, batches and bad ids.

* The vocabularies read out of real tokenizers decode exactly as the tokenizers do.
* Every ``feed`` of a ``TokenStopFilter`` (text and released count) and the attributes after
  it equal ``stopstream.reference.ReferenceTokenStopFilter`` on random id streams: real text
  with stops planted, and random ids (special tokens, byte tokens splitting characters,
  invalid UTF-8 across tokens), split into random feeds, empty ones included.
* ``feed_batch`` equals feeding one by one; bad ids are ``ValueError`` and change nothing.
* One id may be given as a plain ``int`` (or any non-iterable with ``__index__``) wherever a
  list of ids is taken; the differential tests feed single ids in every form at random.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from tokenizers import Tokenizer

import stopstream
import tokenizer_support
from hypothesis_profiles import examples
from stopstream import _core, _vocab
from stopstream.reference import ReferenceTokenStopFilter, reference_tokenizer_tokens


@dataclass(frozen=True)
class Case:
    """A real tokenizer's vocabulary, as the filter and the reference see it."""

    name: str
    vocab: stopstream.Vocab
    tokens: list[bytes | None]
    special: list[int]
    strip: bool
    encode: Callable[[str], list[int]]

    def ids(self, text: str) -> list[int]:
        return list(self.encode(text))

    @functools.cached_property
    def valid_ids(self) -> st.SearchStrategy[int]:
        return st.sampled_from([i for i, t in enumerate(self.tokens) if t is not None])

    @functools.cached_property
    def holes(self) -> list[int]:
        return [i for i, t in enumerate(self.tokens) if t is None]


@functools.cache
def cases() -> dict[str, Case]:
    enc = tokenizer_support.cl100k()
    out = {}
    tokens, special, strip = _vocab.tiktoken_tokens(enc)
    out["cl100k"] = Case(
        "cl100k", stopstream.Vocab.from_tiktoken(enc), tokens, special, strip, enc.encode_ordinary
    )
    for name, tok in (
        ("byte_level", tokenizer_support.byte_level()),
        ("byte_fallback", tokenizer_support.byte_fallback()),
    ):
        tokens, special, strip = _vocab.tokenizers_tokens(tok)
        encode = functools.partial(lambda t, s: t.encode(s).ids, tok)
        out[name] = Case(
            name, stopstream.Vocab.from_tokenizers(tok), tokens, special, strip, encode
        )
    return out


def encode_with(tok: Tokenizer, text: str) -> list[int]:
    return list(tok.encode(text).ids)


CASE_NAMES = ("cl100k", "byte_level", "byte_fallback")


def hf(name: str) -> object:
    return getattr(tokenizer_support, name)()


def run_all(f: stopstream.TokenStopFilter, ids: Sequence[int]) -> str:
    return f.feed(ids).text + f.finish().text


# ---------------------------------------------------------------------------------------------
# The vocabularies decode as the tokenizers do


@pytest.mark.parametrize("line", [*tokenizer_support.corpus_lines()[::37], " two  spaces"])
@pytest.mark.parametrize("name", CASE_NAMES)
def test_real_text_decodes_like_the_tokenizer(name: str, line: str) -> None:
    case = cases()[name]
    ids = case.ids(line)
    want = tokenizer_support.cl100k().decode(ids) if name == "cl100k" else hf(name).decode(ids)  # type: ignore[attr-defined]
    assert run_all(stopstream.TokenStopFilter(case.vocab, None), ids) == want


@settings(max_examples=examples(150), deadline=None)
@given(data=st.data())
@pytest.mark.parametrize("name", ["cl100k", "byte_level"])
def test_random_ids_decode_like_the_tokenizer(name: str, data: st.DataObject) -> None:
    """Byte-level vocabularies: any ids, invalid UTF-8 included, decode exactly as the
    tokenizer's own decode (special tokens skipped)."""
    case = cases()[name]
    ids = data.draw(st.lists(case.valid_ids, max_size=30))
    if name == "cl100k":
        plain = [i for i in ids if i not in case.special]
        want = tokenizer_support.cl100k().decode_bytes(plain).decode("utf-8", "replace")
    else:
        want = hf(name).decode(ids, skip_special_tokens=True)  # type: ignore[attr-defined]
    assert run_all(stopstream.TokenStopFilter(case.vocab, None), ids) == want


@settings(max_examples=examples(150), deadline=None)
@given(data=st.data())
def test_byte_fallback_ids_decode_like_the_tokenizer(data: st.DataObject) -> None:
    """Byte-fallback: equal to the tokenizer's decode whenever the bytes are valid UTF-8 (on
    invalid runs HF writes one U+FFFD per byte, the contract CPython's count)."""
    case = cases()["byte_fallback"]
    ids = data.draw(st.lists(case.valid_ids, max_size=30))
    got = run_all(stopstream.TokenStopFilter(case.vocab, None), ids)
    raw = b"".join(case.tokens[i] or b"" for i in ids if i not in case.special)
    if case.strip and raw[:1] == b" ":
        raw = raw[1:]
    assert got == raw.decode("utf-8", "replace")
    try:
        raw.decode("utf-8")
    except UnicodeDecodeError:
        return
    assert got == hf("byte_fallback").decode(ids, skip_special_tokens=True)  # type: ignore[attr-defined]


def test_holes_and_specials() -> None:
    enc = tokenizer_support.cl100k()
    case = cases()["cl100k"]
    assert len(case.vocab) == enc.n_vocab
    eot = enc.eot_token
    assert case.vocab.is_special(eot) and case.vocab.token_bytes(eot) == b""
    holes = [i for i, t in enumerate(case.tokens) if t is None]
    assert holes and all(case.vocab.token_bytes(i) is None for i in holes)
    for bad in [holes[0], -1, len(case.vocab), 2**64, -(2**100)]:
        f = stopstream.TokenStopFilter(case.vocab, None)
        with pytest.raises(ValueError, match=f"token id {bad} at position 1 "):
            f.feed([0, bad])


def test_unsupported_decoders_are_named() -> None:
    from tokenizers import Tokenizer, decoders, models

    tok = Tokenizer(models.WordPiece({"[UNK]": 0, "a": 1}, unk_token="[UNK]"))
    tok.decoder = decoders.WordPiece()
    with pytest.raises(ValueError, match="WordPiece"):
        stopstream.Vocab.from_tokenizers(tok)
    tok.decoder = decoders.Sequence([decoders.ByteFallback(), decoders.CTC()])
    with pytest.raises(ValueError, match="CTC"):
        stopstream.Vocab.from_tokenizers(tok)
    with pytest.raises(TypeError):
        stopstream.Vocab.from_tokenizers(object())


@pytest.mark.parametrize(
    ("vocab", "size"), [({}, 2**40), ({"a": 2**40}, 0), ({"a": 2**62}, 0), ({"a": 2**64 - 1}, 0)]
)
def test_vocabularies_no_memory_can_hold_are_memory_errors(
    vocab: dict[str, int], size: int
) -> None:
    """A size, or an id, too large to allocate is ``MemoryError``, as a Python list's, never a
    crash of the process."""
    with pytest.raises(MemoryError):
        _core._tokenizer_tokens('{"decoder": {"type": "ByteLevel"}}', vocab, size)


def _reference_tokens(tok: Tokenizer) -> tuple[list[bytes | None], list[int], bool]:
    return reference_tokenizer_tokens(
        json.loads(tok.to_str()),
        tok.get_vocab(with_added_tokens=True),
        tok.get_vocab_size(with_added_tokens=True),
    )


def _with_decoder(decoder: object) -> Tokenizer:
    tok = Tokenizer.from_str(tokenizer_support.byte_fallback().to_str())
    tok.decoder = decoder  # type: ignore[assignment]
    return tok


@functools.cache
def _decoder_cases() -> dict[str, Tokenizer]:
    from tokenizers import decoders

    return {
        "byte_level": tokenizer_support.byte_level(),
        "byte_fallback": tokenizer_support.byte_fallback(),
        "metaspace_always": _with_decoder(decoders.Metaspace("\u2581", "always")),
        "metaspace_first": _with_decoder(decoders.Metaspace("_", "first")),
        "metaspace_never": _with_decoder(decoders.Metaspace("\u2581", "never")),
        "sequence_of_byte_level": _with_decoder(decoders.Sequence([decoders.ByteLevel()])),
        "sequence_no_strip": _with_decoder(
            decoders.Sequence([decoders.Replace("\u2581", " "), decoders.Fuse()])
        ),
    }


@pytest.mark.parametrize("name", list(_decoder_cases()))
def test_tokenizer_vocabularies_equal_the_reference(name: str) -> None:
    """Every id's bytes, the special ids and the leading-space rule, for each decoder kind,
    equal the plain reference's reading of the same tokenizer."""
    tok = _decoder_cases()[name]
    assert _vocab.tokenizers_tokens(tok) == _reference_tokens(tok)


_TOKEN_CHARS = st.one_of(
    st.characters(codec="utf-8"),
    st.sampled_from(["\u2581", "_", " ", "\u0120", "\u010a", "\u0100", "\u0143", "\ud800"]),
)
_TOKENS = st.one_of(
    st.text(_TOKEN_CHARS, max_size=8),
    st.integers(0, 255).map(lambda b: f"<0x{b:02X}>"),
    st.integers(0, 255).map(lambda b: f"<0x{b:02x}>"),
    st.sampled_from(["<0xGG>", "<0x0g>", "<0xg0>", "<0x1>", "<0x123>"]),
)
_STRINGS = st.sampled_from(["\u2581", " ", "_", "", "ab", "\u00e9"])


def _replace(old: str, new: str) -> dict[str, object]:
    return {"type": "Replace", "pattern": {"String": old}, "content": new}


_PARTS = st.one_of(
    st.builds(_replace, _STRINGS, _STRINGS),
    st.just({"type": "Replace", "pattern": {"Regex": " "}, "content": "_"}),
    st.just({"type": "ByteFallback"}),
    st.just({"type": "Fuse"}),
    st.builds(
        lambda content, start, stop: {
            "type": "Strip",
            "content": content,
            "start": start,
            "stop": stop,
        },
        st.sampled_from([" ", "x", "\U0001f600", "\x7f", "\x01", '"\\']),
        st.integers(0, 2),
        st.integers(0, 1),
    ),
    st.just({"type": "CTC", "pad_token": "<pad>", "cleanup": True}),
    st.just({"type": "ByteLevel"}),
    st.just({"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "first"}),
)
_DECODERS = st.one_of(
    st.just({"type": "ByteLevel", "add_prefix_space": True}),
    st.builds(
        lambda replacement, scheme, legacy: {
            "type": "Metaspace",
            "replacement": replacement,
            **({} if scheme == "absent" else {"prepend_scheme": scheme}),
            **({} if legacy is None else {"add_prefix_space": legacy}),
        },
        _STRINGS.filter(bool),
        st.sampled_from(["absent", None, "always", "first", "never"]),
        st.sampled_from([None, True, False]),
    ),
    st.builds(lambda parts: {"type": "Sequence", "decoders": parts}, st.lists(_PARTS, max_size=5)),
    st.just({"type": "WordPiece", "prefix": "##", "cleanup": True}),
    st.none(),
)


@settings(max_examples=examples(300), deadline=None)
@example(  # an empty pattern goes around every character, not every byte
    decoder={"type": "Sequence", "decoders": [_replace("", "_")]},
    tokens=["é"],
    special=[],
    extra=0,
    backwards=False,
)
@example(  # a quoted part: astral characters as surrogate pairs, DEL and controls escaped
    decoder={
        "type": "Sequence",
        "decoders": [{"type": "Fuse"}, {"type": "Strip", "content": "\U0001f600\x7f\x01"}],
    },
    tokens=[],
    special=[],
    extra=0,
    backwards=False,
)
@example(  # `prepend_scheme: null` falls back to `add_prefix_space`
    decoder={"type": "Metaspace", "prepend_scheme": None, "add_prefix_space": True},
    tokens=[],
    special=[],
    extra=0,
    backwards=False,
)
@example(  # not a byte token: `g` is no hex digit
    decoder={"type": "Sequence", "decoders": [{"type": "ByteFallback"}]},
    tokens=["<0x0g>"],
    special=[],
    extra=0,
    backwards=False,
)
@given(
    decoder=_DECODERS,
    tokens=st.lists(_TOKENS, max_size=12, unique=True),
    special=st.lists(st.booleans(), max_size=12),
    extra=st.integers(0, 3),
    backwards=st.booleans(),
)
def test_decoders_equal_the_reference(
    decoder: dict[str, object] | None,
    tokens: list[str],
    special: list[bool],
    extra: int,
    backwards: bool,
) -> None:
    """Random decoder chains, supported or not, over random tokens (lone surrogates, byte-level
    characters, byte tokens in either case and near misses), special tokens in either order:
    the same bytes, special ids, leading-space rule, or the same ``ValueError`` message (which
    quotes an unsupported part as ``json.dumps`` writes it)."""
    vocab = {t: i * 2 for i, t in enumerate(tokens)}  # odd ids unassigned
    added = [{"id": i * 2, "special": s} for i, s in enumerate(special)]
    config = {"added_tokens": added[::-1] if backwards else added, "decoder": decoder}
    size = len(tokens) + extra
    try:
        want = reference_tokenizer_tokens(config, vocab, size)
    except ValueError as e:
        with pytest.raises(ValueError) as got:
            _core._tokenizer_tokens(json.dumps(config), vocab, size)
        assert str(got.value) == str(e)
        return
    assert _core._tokenizer_tokens(json.dumps(config), vocab, size) == want


# ---------------------------------------------------------------------------------------------
# Differential: every feed against the reference

GUARDS = ("</answer>", "\n\n", "User:", "é", "😀", "\ufffd", " the", "()")


@st.composite
def streams(draw: st.DrawFn, case: Case) -> tuple[list[int], tuple[str, ...]]:
    """Ids and stops: real text with stops planted, or random ids (specials, bytes)."""
    if draw(st.booleans()):
        lines = tokenizer_support.corpus_lines()
        start = draw(st.integers(0, len(lines) - 1))
        text = "\n".join(lines[start : start + 2])[: draw(st.integers(0, 160))]
        stop = draw(st.sampled_from(GUARDS))
        if draw(st.booleans()) and text:
            at = draw(st.integers(0, len(text)))
            text = text[:at] + stop + text[at:]
        stops: list[str] = [stop]
        if text and draw(st.booleans()):
            a = draw(st.integers(0, len(text) - 1))
            stops.append(text[a : a + draw(st.integers(1, 6))])
        ids = case.ids(text)
    else:
        ids = draw(st.lists(case.valid_ids | st.sampled_from(case.special), max_size=24))
        stops = draw(st.lists(st.sampled_from(GUARDS), max_size=3))
    return ids, tuple(s for s in stops if s)


def splits(data: st.DataObject, ids: list[int]) -> list[list[int]]:
    """Cut ``ids`` into feeds of random sizes, empty ones included."""
    out: list[list[int]] = []
    i = 0
    while i < len(ids) or data.draw(st.integers(0, 4)) == 0:
        n = data.draw(st.integers(0, 5))
        out.append(ids[i : i + n])
        i += n
        if len(out) > 60:
            break
    out.append(ids[i:])
    return out


class Index:
    """An int-like id that is not an int (as NumPy's integers are)."""

    def __init__(self, value: int) -> None:
        self.value = value

    def __index__(self) -> int:
        return self.value


IdArg = int | Index | list[int] | tuple[int, ...]


def one_form(data: st.DataObject, ids: list[int]) -> IdArg:
    """``ids`` as fed: a list of one id in any form the API takes (int, int-like, list, tuple);
    any other list as it is."""
    if len(ids) != 1:
        return ids
    forms: list[IdArg] = [ids[0], ids, Index(ids[0]), tuple(ids)]
    return data.draw(st.sampled_from(forms))


def attributes(f: stopstream.TokenStopFilter | ReferenceTokenStopFilter) -> tuple[object, ...]:
    return (f.stopped, f.stop_sequence, f.stop_index, f.stop_reason, f.stop_token_id, f.pending)


@settings(max_examples=examples(300), deadline=None)
@given(data=st.data())
@pytest.mark.parametrize("name", CASE_NAMES)
def test_every_feed_matches_the_reference(name: str, data: st.DataObject) -> None:
    case = cases()[name]
    ids, stops = data.draw(streams(case))
    include = data.draw(st.booleans())
    errors = data.draw(st.sampled_from(["replace", "replace", "strict"]))
    stop_ids = data.draw(st.lists(st.sampled_from(case.special + ids[:8] or [0]), max_size=2))
    f = stopstream.TokenStopFilter(
        case.vocab, stops, include_stop=include, stop_token_ids=stop_ids, errors=errors
    )
    ref = ReferenceTokenStopFilter(
        case.tokens,
        stops,
        special=case.special,
        include_stop=include,
        stop_token_ids=stop_ids,
        errors=errors,
        strip_leading_space=case.strip,
    )
    for chunk in [*splits(data, ids), None]:
        arg = one_form(data, chunk) if chunk is not None else None
        try:
            want = ref.feed(chunk) if chunk is not None else ref.finish()
        except (ValueError, UnicodeDecodeError) as error:
            with pytest.raises(type(error)):
                f.feed(arg) if arg is not None else f.finish()
        else:
            got = f.feed(arg) if arg is not None else f.finish()
            assert (got.text, got.tokens) == want, chunk
        assert attributes(f) == attributes(ref), chunk


# ---------------------------------------------------------------------------------------------
# feed_batch


@settings(max_examples=examples(100), deadline=None)
@given(data=st.data())
def test_feed_batch_equals_one_by_one(data: st.DataObject) -> None:
    """Filters over different vocabularies (and one filter twice) in one batch, step by step."""
    names = data.draw(st.lists(st.sampled_from(CASE_NAMES), min_size=1, max_size=6))
    configs = []
    for name in names:
        case = cases()[name]
        ids, stops = data.draw(streams(case))
        configs.append((case, ids, stops, data.draw(st.booleans())))

    def build() -> list[stopstream.TokenStopFilter]:
        return [
            stopstream.TokenStopFilter(c.vocab, s, include_stop=inc, stop_token_ids=c.special[:1])
            for c, _, s, inc in configs
        ]

    batch, alone = build(), build()
    twice = data.draw(st.booleans())
    for step in range(max(len(ids) for _, ids, _, _ in configs) + 1):
        lists = [ids[step : step + data.draw(st.integers(1, 2))] for _, ids, _, _ in configs]
        filters: list[stopstream.TokenStopFilter] = list(batch)
        if twice:
            filters.append(batch[0])
            lists.append(lists[0][::-1])
        got = stopstream.feed_batch(filters, [one_form(data, ids) for ids in lists])
        want = [f.feed(ids) for f, ids in zip(alone, lists[: len(alone)], strict=True)]
        if twice:
            want.append(alone[0].feed(lists[-1]))
        assert got == want
        assert [attributes(f) for f in batch] == [attributes(f) for f in alone]
    assert [f.finish() for f in batch] == [f.finish() for f in alone]


def test_feed_batch_is_all_or_nothing() -> None:
    case = cases()["cl100k"]
    ids = case.ids("Hello world </answer> tail")
    filters = [stopstream.TokenStopFilter(case.vocab, ["</answer>"]) for _ in range(3)]
    stopstream.feed_batch(filters, [ids[:2]] * 3)
    before = [attributes(f) for f in filters]
    for bad in ([ids[2], -1], [ids[2], 2**70], [ids[2], 100256]):
        with pytest.raises(ValueError, match=r"ids_per_filter\[1\]: token id"):
            stopstream.feed_batch(filters, [[ids[2]], bad, [ids[2]]])
        assert [attributes(f) for f in filters] == before
    for bad_int in (-1, 2**70, 100256):
        with pytest.raises(
            ValueError, match=rf"ids_per_filter\[1\]: token id {bad_int} at position 0 "
        ):
            stopstream.feed_batch(filters, [ids[2], bad_int, ids[2]])
        assert [attributes(f) for f in filters] == before
    with pytest.raises(ValueError, match="3 filters and 2"):
        stopstream.feed_batch(filters, [[], []])
    with pytest.raises(TypeError, match=r"filters\[1\]"):
        stopstream.feed_batch([filters[0], object()], [[], []])  # type: ignore[list-item]
    with pytest.raises(TypeError, match="must be an int"):
        stopstream.feed_batch(filters[:1], [["x"]])  # type: ignore[list-item]
    assert [attributes(f) for f in filters] == before
    # After a stop, later ids (bad ones too) are ignored unchecked.
    out = stopstream.feed_batch(filters, [ids[2:], [*ids[2:], -5], ids[2:]])
    assert [p.text for p in out] == [" ", " ", " "]
    assert all(f.stop_reason == "stop_sequence" for f in filters)


def test_feed_batch_of_plain_ints_fails_as_feed_alone() -> None:
    """The engine's step (one plain int, or a list of one, per filter) with a filter that cannot
    take it: finished, or strict and fed invalid UTF-8, or given twice. Each raises (or runs)
    as feeding the filters one by one would, and a failing batch changes no filter."""
    vocab = stopstream.Vocab([b"a", b"\xff", b"b"])

    def primed(errors: str = "replace") -> stopstream.TokenStopFilter:
        f = stopstream.TokenStopFilter(vocab, ["ab"], errors=errors)
        assert f.feed(0) == stopstream.TokenPiece("", 0) and f.pending == "a"
        return f

    for shape in (lambda i: i, lambda i: [i]):
        done, strict = primed(), primed("strict")
        done.finish()
        for bad, ids, error, match in (
            (done, [2, 0, 2], ValueError, "after finish"),
            (strict, [2, 1, 2], UnicodeDecodeError, "invalid start byte"),
        ):
            filters = [primed(), bad, primed()]
            with pytest.raises(error, match=match):
                stopstream.feed_batch(filters, [shape(i) for i in ids])
            for f in (filters[0], filters[2]):
                assert (f.pending, f.stopped) == ("a", False)
                assert f.feed(0) == stopstream.TokenPiece("a", 1)
        f, g = primed(), primed()
        got = stopstream.feed_batch([f, g, f], [shape(i) for i in (0, 2, 2)])
        f2, g2 = primed(), primed()
        assert got == [f2.feed(0), g2.feed(2), f2.feed(2)]
        assert [attributes(x) for x in (f, g)] == [attributes(x) for x in (f2, g2)]


# ---------------------------------------------------------------------------------------------
# Bad ids


@settings(max_examples=examples(200), deadline=None)
@given(data=st.data())
@pytest.mark.parametrize("name", ["cl100k", "byte_fallback"])
def test_bad_ids_change_nothing(name: str, data: st.DataObject) -> None:
    case = cases()[name]
    holes = case.holes
    bad_ids = st.sampled_from([-1, -(2**63) - 1, len(case.tokens), 2**63, 2**200, *holes[:3]])
    ids, stops = data.draw(streams(case))
    f = stopstream.TokenStopFilter(case.vocab, stops)
    g = stopstream.TokenStopFilter(case.vocab, stops)
    for chunk in splits(data, ids):
        at = data.draw(st.integers(0, len(chunk)))
        bad = data.draw(bad_ids)
        before = attributes(f)
        try:
            got = f.feed([*chunk[:at], bad, *chunk[at:]])
        except ValueError as error:
            assert f"token id {bad} at position {at} " in str(error)
            assert attributes(f) == before
            got, want = f.feed(chunk), g.feed(chunk)
            assert (got.text, got.tokens) == (want.text, want.tokens)
        else:
            # Only possible when the stream closed before the bad id.
            want = g.feed(chunk[:at])
            assert f.stopped and (got.text, got.tokens) == (want.text, want.tokens)
        assert attributes(f) == attributes(g)


def test_attributes_and_lifecycle() -> None:
    case = cases()["cl100k"]
    eot = tokenizer_support.cl100k().eot_token
    f = stopstream.TokenStopFilter(case.vocab, "</a>", stop_token_ids=[eot, eot])
    assert f.stop_token_ids == (eot,) and f.errors == "replace" and not f.include_stop
    assert f.vocab is case.vocab and f.stops == ("</a>",)
    ids = case.ids("x </")
    p = f.feed([*ids, eot, 5])
    assert (p.text, p.tokens) == ("x </", len(ids) + 1)
    assert (f.stop_reason, f.stop_token_id, f.stopped, f.stop_sequence) == (
        "stop_token",
        eot,
        True,
        None,
    )
    assert f.feed([1]) == stopstream.TokenPiece("", 0)
    assert f.finish() == stopstream.TokenPiece("", 0)
    with pytest.raises(ValueError, match="after finish"):
        f.feed([1])
    f.reset()
    assert f.stop_reason is None and f.feed(ids).text == "x "
    assert f.pending == "</"
    with pytest.raises(ValueError, match="stop token id 100256"):
        stopstream.TokenStopFilter(case.vocab, None, stop_token_ids=[100256])
    with pytest.raises(ValueError, match="errors"):
        stopstream.TokenStopFilter(case.vocab, None, errors="ignore")
    with pytest.raises(TypeError, match="iterable of int"):
        f.feed("abc")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"feed\(\) takes an int or an iterable of int, not float"):
        f.feed(1.5)  # type: ignore[arg-type]
    for bad in (-1, 2**64, 100256):
        with pytest.raises(ValueError, match=f"token id {bad} at position 0 "):
            f.feed(bad)
    assert f.pending == "</"


def test_a_stop_set_lends_its_options() -> None:
    vocab = stopstream.Vocab([b"a", b"</", b"a>"])
    stops = stopstream.StopSet(["</a>"], include_stop=True)
    f = stopstream.TokenStopFilter(vocab, stops)
    assert f.feed([0, 1, 2, 0]) == stopstream.TokenPiece("a</a>", 3)
    assert f.include_stop and f.stop_sequence == "</a>" and f.stop_index == 0
    with pytest.raises(ValueError, match="differs"):
        stopstream.TokenStopFilter(vocab, stops, include_stop=False)
