"""The contenders: stopstream and re-implementations of what serving engines do.

Every streaming contender is a function ``(chunks, stops) -> iterator of output pieces`` that
consumes the whole stream. The stream is a run of responses: when a stop fires, the rest of
that chunk is dropped and a new response (a fresh filter) starts at the next chunk, so a stop
that fires often (``"\\n\\n"``) still exercises the whole input. Pieces are never empty. All
contenders therefore produce the same text except where their stop rules differ from the
contract's (earliest end, then longest) on overlapping stops.

``vllm`` and ``holdall`` take an optional ``probe`` list: when given, they append, after each
chunk, how many received characters they hold back (not yet emitted, not cut by a stop).
``held_stopstream`` and ``held_minimum`` record the same for stopstream and for the
reference (the exact minimum, contract §2.5).
"""

from __future__ import annotations

import codecs
import re
import sys
from collections.abc import AsyncIterator, Callable, Iterable, Iterator, Sequence
from itertools import chain

import stopstream
from stopstream.reference import ReferenceStopFilter

StrContender = Callable[[Sequence[str], Sequence[str]], Iterator[str]]
BytesContender = Callable[[Sequence[bytes], Sequence[str]], Iterator[bytes]]
AsyncContender = Callable[[Sequence[str], Sequence[str]], AsyncIterator[str]]


# -- (4) floor ------------------------------------------------------------------------------


def floor(chunks: Sequence[str], stops: Sequence[str]) -> Iterator[str]:
    """A bare generator passing chunks through: the cost of one Python layer per chunk."""
    for chunk in chunks:  # noqa: UP028 (the per-chunk Python step is what is measured)
        yield chunk


def bytes_floor(chunks: Sequence[bytes], stops: Sequence[str]) -> Iterator[bytes]:
    """``floor`` for ``bytes`` chunks."""
    for chunk in chunks:  # noqa: UP028 (the per-chunk Python step is what is measured)
        yield chunk


# -- (1) vLLM v1 ---------------------------------------------------------------------------


def check_stop_strings(output_text: str, new_char_count: int, stops: Sequence[str]) -> int:
    """vLLM's stop check; returns where to cut ``output_text`` (the match's start) or -1.

    Source: vllm/v1/engine/detokenizer.py, ``check_stop_strings`` (recent versions; earlier
    ones lived in vllm/engine/output_processor/stop_checker.py as
    ``StopChecker.check_stop_strings``). For each stop, ``output_text.find(stop,
    1 - new_char_count - len(stop))`` looks only at the tail that the new text can complete;
    the stop that ends earliest wins, ties go to list order (older versions returned the first
    stop in list order that matched). ``include_stop_str_in_output`` is off here.
    """
    if not new_char_count or not stops:
        return -1
    best_end = sys.maxsize
    cut = -1
    for stop_str in stops:
        stop_len = len(stop_str)
        index = output_text.find(stop_str, 1 - new_char_count - stop_len)
        if index == -1:
            continue
        end = index + stop_len
        if end < best_end:
            best_end = end
            cut = index
    return cut


def vllm(
    chunks: Sequence[str], stops: Sequence[str], probe: list[int] | None = None
) -> Iterator[str]:
    """vLLM v1's streaming stop handling, one decoded token per chunk.

    Source: vllm/v1/engine/detokenizer.py. ``IncrementalDetokenizer.from_new_request`` (later
    ``BaseIncrementalDetokenizer.__init__``) sets ``stop_buffer_length = max(len(s) for s in
    stops) - 1`` when stops are set and ``include_stop_str_in_output`` is off; ``update``
    appends the new text to ``output_text`` and runs ``check_stop_strings``, cutting
    ``output_text`` at a match; ``get_next_output_text(finished, delta=True)`` returns
    ``output_text[last_offset : len(output_text) - buffer_length]`` (no buffer once finished).

    The text is accumulated in a local variable, which CPython appends to in place; vLLM keeps
    it in an attribute, which copies the whole text at each step. The difference favours this
    contender.
    """
    stop_list = list(stops)
    buffer_length = max(map(len, stop_list)) - 1 if stop_list else 0
    iterator = iter(chunks)
    while True:
        output_text = ""
        sent = 0
        for new_text in iterator:
            output_text += new_text
            cut = check_stop_strings(output_text, len(new_text), stop_list)
            if cut >= 0:
                output_text = output_text[:cut]
                if sent < cut:
                    yield output_text[sent:]
                if probe is not None:
                    probe.append(0)
                break
            length = len(output_text) - buffer_length
            if sent < length:
                yield output_text[sent:length]
                sent = length
            if probe is not None:
                probe.append(len(output_text) - sent)
        else:
            if sent < len(output_text):
                yield output_text[sent:]
            return


# -- (2) SGLang / llama.cpp: hold everything while the tail is a partial match --------------


def holdall(
    chunks: Sequence[str], stops: Sequence[str], probe: list[int] | None = None
) -> Iterator[str]:
    """Hold back all unsent text while its tail is a proper prefix of some stop.

    Sources: llama.cpp's server (examples/server/server.cpp, now tools/server/server.cpp):
    ``process_token`` appends the token to ``generated_text``, looks for a full stop in the
    unsent text with ``find_stopping_strings(..., is_full_stop=true)`` (``text.find(word,
    size - (len(word) + last_token_size))``, the earliest start wins) and cuts there;
    otherwise, if ``find_partial_stop_string`` (examples/server/utils.hpp; now
    ``string_find_partial_stop`` in common/common.cpp) finds that the text ends with a prefix of
    some stop, it sends nothing this step, else it sends all unsent text. SGLang does the same
    per step with ``Req.check_match_stop_str_prefix``
    (python/sglang/srt/managers/schedule_batch.py). Here on characters (llama.cpp works on
    bytes); the partial check stops at the first stop that has a partial match, which gives the
    same decision.
    """
    stop_list = list(stops)
    iterator = iter(chunks)
    while True:
        generated = ""
        sent = 0
        for token_str in iterator:
            generated += token_str
            text = generated[sent:]
            size = len(text)
            last_token_size = len(token_str)
            stop_pos = -1
            for word in stop_list:
                from_pos = size - (len(word) + last_token_size)
                pos = text.find(word, from_pos if from_pos > 0 else 0)
                if pos != -1 and (stop_pos == -1 or pos < stop_pos):
                    stop_pos = pos
            if stop_pos != -1:
                if stop_pos:
                    yield text[:stop_pos]
                if probe is not None:
                    probe.append(0)
                break
            partial = False
            last_char = text[-1]
            for word in stop_list:
                index = word.rfind(last_char)
                while index >= 0:
                    if text.endswith(word[: index + 1]):
                        partial = True
                        break
                    index = word.rfind(last_char, 0, index)
                if partial:
                    break
            if not partial:
                yield text
                sent = len(generated)
            if probe is not None:
                probe.append(len(generated) - sent)
        else:
            if sent < len(generated):
                yield generated[sent:]
            return


# -- (3) the project's pure-Python reference -----------------------------------------------


def reference(chunks: Sequence[str], stops: Sequence[str]) -> Iterator[str]:
    """``stopstream.reference.ReferenceStopFilter`` in a feed loop (re-reads all text per feed)."""
    iterator = iter(chunks)
    while True:
        f = ReferenceStopFilter(stops)
        for chunk in iterator:
            out = f.feed(chunk)
            if out:
                yield out
            if f.stopped:
                break
        else:
            tail = f.finish()
            if tail:
                yield tail
            return


# -- (5) stopstream ------------------------------------------------------------------------


def _wrap_responses(chunks: Sequence[str], stops: Sequence[str]) -> Iterator[Iterable[str]]:
    iterator = iter(chunks)
    while True:
        stream = stopstream.wrap(iterator, stops)
        yield stream
        # ``chain`` asks for the next response only once this one is exhausted.
        if stream.stop_reason != "stop_sequence":
            return


def stopstream_wrap(chunks: Sequence[str], stops: Sequence[str]) -> Iterator[str]:
    """``stopstream.wrap``, the native iterator (one per response, chained in C)."""
    return chain.from_iterable(_wrap_responses(chunks, stops))


def stopstream_feed(chunks: Sequence[str], stops: Sequence[str]) -> Iterator[str]:
    """A Python loop over ``StopFilter.feed``."""
    iterator = iter(chunks)
    while True:
        f = stopstream.StopFilter(stops)
        for chunk in iterator:
            out = f.feed(chunk)
            if out:
                yield out
            if f.stopped:
                break
        else:
            tail = f.finish()
            if tail:
                yield tail
            return


def stopstream_bytes(chunks: Sequence[bytes], stops: Sequence[str]) -> Iterator[bytes]:
    """A Python loop over ``ByteStopFilter.feed`` on raw token bytes."""
    iterator = iter(chunks)
    while True:
        f = stopstream.ByteStopFilter(stops)
        for chunk in iterator:
            out = f.feed(chunk)
            if out:
                yield out
            if f.stopped:
                break
        else:
            tail = f.finish()
            if tail:
                yield tail
            return


def _wrap_bytes_responses(
    chunks: Sequence[bytes], stops: Sequence[str]
) -> Iterator[Iterable[bytes]]:
    iterator = iter(chunks)
    while True:
        stream = stopstream.wrap(iterator, stops)
        yield stream
        if stream.stop_reason != "stop_sequence":
            return


def stopstream_wrap_bytes(chunks: Sequence[bytes], stops: Sequence[str]) -> Iterator[bytes]:
    """``stopstream.wrap`` over raw token bytes."""
    return chain.from_iterable(_wrap_bytes_responses(chunks, stops))


def decoder_vllm(chunks: Sequence[bytes], stops: Sequence[str]) -> Iterator[bytes]:
    """CPython's incremental UTF-8 decoder, then ``vllm``'s stop handling, re-encoded.

    What a gateway without a bytes-aware filter does with a raw byte stream (vLLM itself
    detokenizes to ``str`` before ``check_stop_strings``).
    """
    stop_list = list(stops)
    buffer_length = max(map(len, stop_list)) - 1 if stop_list else 0
    iterator = iter(chunks)
    new_decoder = codecs.getincrementaldecoder("utf-8")
    while True:
        decode = new_decoder("strict").decode
        output_text = ""
        sent = 0
        for data in iterator:
            new_text = decode(data)
            if not new_text:
                continue
            output_text += new_text
            cut = check_stop_strings(output_text, len(new_text), stop_list)
            if cut >= 0:
                output_text = output_text[:cut]
                if sent < cut:
                    yield output_text[sent:].encode("utf-8")
                break
            length = len(output_text) - buffer_length
            if sent < length:
                yield output_text[sent:length].encode("utf-8")
                sent = length
        else:
            output_text += decode(b"", True)
            if sent < len(output_text):
                yield output_text[sent:].encode("utf-8")
            return


# -- async ---------------------------------------------------------------------------------


class AsyncChunks:
    """An async iterator over a shared iterator of chunks (no ``aclose``: it survives a stop)."""

    __slots__ = ("_iterator",)

    def __init__(self, iterator: Iterator[str]) -> None:
        self._iterator = iterator

    def __aiter__(self) -> AsyncChunks:
        return self

    async def __anext__(self) -> str:
        try:
            return next(self._iterator)
        except StopIteration:
            raise StopAsyncIteration from None


async def async_floor(chunks: Sequence[str], stops: Sequence[str]) -> AsyncIterator[str]:
    """An async generator passing chunks from an async source through."""
    async for chunk in AsyncChunks(iter(chunks)):
        yield chunk


async def stopstream_awrap(chunks: Sequence[str], stops: Sequence[str]) -> AsyncIterator[str]:
    """``stopstream.awrap`` over the same async source, one per response."""
    source = AsyncChunks(iter(chunks))
    while True:
        stream = stopstream.awrap(source, stops)
        async for piece in stream:
            yield piece
        if stream.stop_reason != "stop_sequence":
            return


# -- holdback probes -----------------------------------------------------------------------


def held_stopstream(chunks: Sequence[str], stops: Sequence[str]) -> list[int]:
    """Characters ``StopFilter`` holds back (``len(pending)``) after each chunk."""
    held: list[int] = []
    iterator = iter(chunks)
    f = stopstream.StopFilter(stops)
    for chunk in iterator:
        f.feed(chunk)
        held.append(len(f.pending))
        if f.stopped:
            f = stopstream.StopFilter(stops)
    return held


def held_minimum(chunks: Sequence[str], stops: Sequence[str]) -> list[int]:
    """The exact minimum: what the reference holds back (``len(pending)``) after each chunk."""
    held: list[int] = []
    f = ReferenceStopFilter(stops)
    for chunk in chunks:
        f.feed(chunk)
        held.append(len(f.pending))
        if f.stopped:
            f = ReferenceStopFilter(stops)
    return held


def held_vllm(chunks: Sequence[str], stops: Sequence[str]) -> list[int]:
    """What ``vllm`` holds back after each chunk."""
    probe: list[int] = []
    for _ in vllm(chunks, stops, probe):
        pass
    return probe


def held_holdall(chunks: Sequence[str], stops: Sequence[str]) -> list[int]:
    """What ``holdall`` holds back after each chunk."""
    probe: list[int] = []
    for _ in holdall(chunks, stops, probe):
        pass
    return probe


# -- one-shot truncation baselines ----------------------------------------------------------


def find_each(text: str, stops: Sequence[str]) -> tuple[str, str | None]:
    """``str.find`` once per stop; the contract's winner (earliest end, then longest, then first).

    The obvious pure-Python way to cut a whole response.
    """
    best: tuple[int, int, int] | None = None
    for index, stop in enumerate(stops):
        start = text.find(stop)
        if start >= 0:
            key = (start + len(stop), -len(stop), index)
            if best is None or key < best:
                best = key
    if best is None:
        return text, None
    end, negative_length, index = best
    return text[: end + negative_length], stops[index]


def compile_alternation(stops: Sequence[str]) -> re.Pattern[str]:
    """One ``re`` alternation of the escaped stops, longest first."""
    ordered = sorted(stops, key=len, reverse=True)
    return re.compile("|".join(map(re.escape, ordered)))


def regex_truncate(text: str, pattern: re.Pattern[str]) -> tuple[str, str | None]:
    """Cut at ``pattern``'s first match (leftmost start: the contract's winner when no two
    stops overlap)."""
    match = pattern.search(text)
    if match is None:
        return text, None
    return text[: match.start()], match.group()
