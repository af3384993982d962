"""What contract §2 and §10 say a request's output must be, computed from the same request run
without stops: vLLM's own decoding of its tokens, one at a time, gives the text after every
token; the stops are then found by brute force over that text."""

from __future__ import annotations

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
