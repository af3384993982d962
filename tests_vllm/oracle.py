"""What contract §2 and §10 say a request's output must be, computed from the same request run
without stops: vLLM's own decoding of its tokens, one at a time, gives the text after every
token; the stops are then found by brute force over that text. Also what the engine tests and
the frontend harness (``frontend/``) share: the check of what a request streamed, and the stops
drawn from a request's own output."""

from __future__ import annotations

import codecs
import random
from collections.abc import Sequence
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any


@dataclass
class Expected:
    text: str
    token_ids: list[int]
    finish_reason: str
    stop_reason: Any
    match: tuple[int, int, int] | None  # (start, end, stop index)


def decode_offsets(
    tokenizer: Any, prompt_ids: list[int], token_ids: list[int], eos_stopped: bool, params: Any
) -> list[str]:
    """The text after each of ``token_ids`` (entry k: after k tokens), as vLLM decodes it."""
    from vllm.v1.engine import detokenizer

    request = SimpleNamespace(
        request_id="oracle",
        prompt_token_ids=list(prompt_ids),
        prompt_embeds=None,
        sampling_params=SimpleNamespace(
            stop=[],
            min_tokens=0,
            include_stop_str_in_output=params.include_stop_str_in_output,
            skip_special_tokens=params.skip_special_tokens,
            spaces_between_special_tokens=params.spaces_between_special_tokens,
        ),
    )
    if detokenizer.uses_fast_detokenizer(tokenizer):
        d: Any = detokenizer.FastIncrementalDetokenizer(tokenizer, request)
    else:
        d = detokenizer.SlowIncrementalDetokenizer(tokenizer, request)
    texts = [""]
    for i, t in enumerate(token_ids):
        d.update([t], eos_stopped and i == len(token_ids) - 1)
        texts.append(d.output_text)
    return texts


def all_matches(text: str, stops: list[str]) -> list[tuple[int, int, int]]:
    """Every ``(start, end, index)`` occurrence of every stop in ``text``."""
    found = []
    for index, stop in enumerate(stops):
        start = text.find(stop)
        while start >= 0:
            found.append((start, start + len(stop), index))
            start = text.find(stop, start + 1)
    return found


def expected(
    texts: list[str],
    token_ids: list[int],
    finish_reason: str,
    stop_reason: Any,
    stops: list[str],
    include: bool,
    min_tokens: int,
) -> Expected:
    """The output of the request with ``stops`` (literal), per §2 and vLLM's ``min_tokens``."""
    text = texts[-1]
    floor = len(texts[min_tokens]) if min_tokens < len(texts) else len(text) + 1
    candidates = [m for m in all_matches(text, stops) if m[1] > floor]
    if not candidates:
        return Expected(text, list(token_ids), finish_reason, stop_reason, None)
    # Earliest end, then the longest (smallest start), then the first listed.
    start, end, index = min(candidates, key=lambda m: (m[1], m[0], m[2]))
    kept = next(k for k in range(1, len(texts)) if len(texts[k]) >= end)
    cut = text[:end] if include else text[:start]
    return Expected(cut, list(token_ids[:kept]), "stop", stops[index], (start, end, index))


def held(text: str, stops: list[str], include: bool) -> int:
    """§2.5: the longest suffix of ``text`` that is a proper prefix of a stop."""
    if include:
        return 0
    best = 0
    for stop in stops:
        for k in range(min(len(stop) - 1, len(text)), best, -1):
            if text.endswith(stop[:k]):
                best = k
                break
    return best


def whole_characters(vocab: Any, ids: Any) -> str:
    """The text of ``ids`` (a ``stopstream.Vocab``'s bytes) without an incomplete character at
    the end."""
    decoder = codecs.getincrementaldecoder("utf-8")("replace")
    return decoder.decode(b"".join(vocab.token_bytes(i) or b"" for i in ids))


def check_streamed(
    where: object,
    *,
    emitted: str,
    previous: str,
    want: str,
    want_whole: str,
    final: str,
    ids: Sequence[int],
    logprobs: Sequence[Any] | None,
    token_ids: Sequence[int],
    texts: list[str],
    generated: int,
) -> None:
    """What a request has streamed while running, after the engine generated ``generated`` of
    ``token_ids`` (``texts``: vLLM's text after each count of them): the text ``emitted`` so
    far is §2.5's minimal-holdback output ``want`` of the text so far, and the token ids and
    logprobs (``None``: not asked for) go out with it (§7's release rule).

    The token-id path decodes the whole characters of a token whose bytes end mid-character at
    once, where vLLM's decoding waits for the rest of the token: ``want_whole`` is the output
    over that text. After a hand-over to the text path, what was streamed (``previous``: the
    text emitted before this output) stays until vLLM's text catches up.
    """
    if emitted != want:
        catching_up = emitted == previous and emitted.startswith(want)
        assert emitted == want_whole or catching_up, (where, emitted, want)
    assert final.startswith(emitted), (where, emitted, final)
    # Token ids (and their logprobs) go out with their text: never ahead of it, and never
    # behind a token whose text was emitted (tokens without text of their own, a character's
    # first bytes, may wait for the next one that has text).
    r = len(ids)
    assert list(ids) == list(token_ids[:r]), (where, ids)
    assert len(texts[r]) <= len(emitted), (where, r)
    must = [j for j in range(1, generated + 1) if len(texts[j - 1]) < len(texts[j]) <= len(emitted)]
    assert r >= max(must, default=0), (where, r)
    if logprobs is not None:
        assert len(logprobs) == len(ids), where
        assert all(t in lp for t, lp in zip(ids, logprobs, strict=True)), where


def draw_stops(rng: random.Random, text: str) -> list[str]:
    """1-10 stops from ``text``: substrings, overlapping ones, shared prefixes, equal ends,
    non-ASCII ones, and some that do not occur."""
    stops: list[str] = []
    want = rng.randint(1, 10)
    while len(stops) < want:
        kind = rng.random()
        if len(text) < 2 or kind < 0.1:
            stops.append(rng.choice(["zzq", "\u00e9\u00e9x", "\U0001f600!", "\n\n"]))
            continue
        a = rng.randrange(len(text) - 1)
        b = min(len(text), a + rng.randint(1, 6))
        s = text[a:b]
        if kind < 0.4:
            stops.append(s)
        elif kind < 0.55 and b - a > 1:  # equal ends
            stops += [s, s[1:]]
        elif kind < 0.7:  # overlapping
            stops += [s, text[a + 1 : b + 2] or s]
        elif kind < 0.85:  # shared prefix
            stops += [s, s + rng.choice("x\u00e9\u65e5")]
        else:  # non-ASCII, where the text has some
            na = [i for i, c in enumerate(text) if ord(c) > 127]
            i = rng.choice(na) if na else a
            stops.append(text[max(0, i - rng.randint(0, 2)) : i + rng.randint(1, 3)])
    return [s for s in stops if s][:10]
