"""The 36 cases of transformers' own ``StopStringCriteria`` tests
(``tests/generation/test_stopping_criteria.py``: the stop-string, byte-fragment, byte-fallback,
ASCII, non-byte-level, single-letter and per-row cases), through ``StopSequenceCriteria``, with
tokenizers trained here in place of the hub's (GPT-2, Qwen2, Llama, BERT).

Each case is a text, tokenized whole and handed to a criterion in one call (as those tests do),
and also one token per call (as ``generate()`` does). What the contract says: a row stops when
a stop occurs anywhere in its new text (earliest end first), with special tokens contributing
no text. ``StopStringCriteria`` answers whether a stop ends in the *last* token; called once per
generated token that is the same question, so it parts ways with the contract only when a call
brings several tokens (a stop inside them that does not reach the last is missed), on special
tokens (it matches their text) and on decoders it handles that ``stopstream.Vocab`` does not
(WordPiece). ``PEER`` records its answer in transformers' tests; it is checked here too, on
these tokenizers, for the cases whose answer does not depend on how GPT-2 splits the text.
"""

from __future__ import annotations

import functools
from typing import Any

import pytest
import tiny
import torch
from transformers import StopStringCriteria

from stopstream.transformers import StopSequenceCriteria

IM_STOPS = ["<|im_end|>", "stop", "e nd"]
IM_TRUE = [
    "<|im_start|><|im_end|>",
    "<|im_start|><|im_end|<|im_end|>",
    ">><|im_start|>>stop",
    "stop",
    "e nd",
]
IM_FALSE = [
    "<|im_start|><|im_end|",
    "<|im_start|><|im_end|<|im_end|",
    "<|im_end|><|im_start|>",
    "<|im_end|<>stop<|im_end|",
    "end",
    "en d",
    "eNd",
    "<|im_end|",
    "|im_end|>",
    "s",
]
PUZZLE = "They completed the challenging puzzle, revealing the hidden image at the end"

# (group, tokenizer, text, stops, what transformers' test expects of StopStringCriteria, what
# the contract says; None: the tokenizer is refused (ValueError)). "minus last" drops the last
# token of the text, as the per-row tests do.
CASES: list[tuple[str, str, str, list[str], bool, bool | None]] = [
    *[("stop strings", "gpt2", t, IM_STOPS, True, True) for t in IM_TRUE],
    *[
        (
            "stop strings",
            "gpt2",
            t,
            IM_STOPS,
            False,
            t in ("<|im_end|><|im_start|>", "<|im_end|<>stop<|im_end|"),
        )
        for t in IM_FALSE
    ],
    ("byte fragments", "gpt2", "대화 끝", ["끝"], True, True),
    ("byte fragments", "gpt2", "작업 완료", ["완료"], True, True),
    ("byte fragments", "gpt2", "대화 끝 다음", ["끝"], False, True),
    ("byte fallback", "llama", "대화 끝", ["끝"], True, True),
    ("byte fallback", "llama", "abc 끝!", ["끝!"], True, True),
    ("byte fallback", "llama", "대화 끝 다음", ["끝"], False, True),
    ("byte fallback", "llama", "완료 후속", ["완료"], False, True),
    ("byte-level ASCII", "gpt2", "the end", ["end"], True, True),
    ("byte-level ASCII", "gpt2", "end of", ["end"], False, True),
    ("non-byte-level", "bert", "the end", ["end"], True, None),
    ("non-byte-level", "bert", "end of", ["end"], False, None),
    *[("single letter", "gpt2", t, ["a"], True, True) for t in ["a", "baa", "abc"]],
    *[("single letter", "gpt2", t, ["a"], False, t != "b") for t in ["abbbbbbb", "b"]],
    ("per row", "gpt2", PUZZLE, ["end"], True, True),
    ("per row", "gpt2", PUZZLE + " minus last", ["end"], False, False),
    ("per row batched", "gpt2", PUZZLE, ["end"], True, True),
    ("per row batched", "gpt2", "Today a dragon flew over France", ["end"], False, False),
    (
        "per row batched",
        "gpt2",
        "The aroma of freshly baked pizza filled the kitchen",
        ["end"],
        False,
        False,
    ),
]
assert len(CASES) == 36

# The same 15 stop-string cases with <|im_start|>/<|im_end|> as special tokens (Qwen2's
# layout): their text is none, so they never complete a stop.
SPECIAL_CASES = [
    (
        "stop strings, special",
        "qwen",
        t,
        IM_STOPS,
        peer,
        t in (">><|im_start|>>stop", "stop", "e nd", "<|im_end|<>stop<|im_end|"),
    )
    for t, peer in [*((t, True) for t in IM_TRUE), *((t, False) for t in IM_FALSE)]
]

# Cases whose answer from StopStringCriteria depends on how GPT-2 or Qwen split the text (here
# "abc" is not one token, so the stop "a" does not reach the last one).
TOKENIZATION_DEPENDENT = {("single letter", "abc")}


@functools.cache
def tokenizer(name: str) -> Any:
    make = {
        "gpt2": lambda: tiny.make_peer_tokenizer(im_special=False),
        "qwen": lambda: tiny.make_peer_tokenizer(im_special=True),
        "llama": tiny.make_byte_fallback_tokenizer,
        "bert": tiny.make_wordpiece_tokenizer,
    }[name]
    tok = make()
    tok.padding_side = "left"
    return tok


def ids_of(tok: Any, text: str) -> torch.Tensor:
    if text.endswith(" minus last"):
        return ids_of(tok, text.removesuffix(" minus last"))[:, :-1]
    ids: list[int] = tok(text, add_special_tokens=False)["input_ids"]
    return torch.tensor([ids])


def ours_whole(tok: Any, ids: torch.Tensor, stops: list[str]) -> bool:
    criteria = StopSequenceCriteria(tok, stops, prompt_length=0, stop_token_ids=())
    return bool(criteria(ids, None)[0])


def ours_per_token(tok: Any, ids: torch.Tensor, stops: list[str]) -> bool:
    criteria = StopSequenceCriteria(tok, stops, prompt_length=0, stop_token_ids=())
    done = False
    for k in range(1, ids.shape[1] + 1):
        done = bool(criteria(ids[:, :k], None)[0])
    return done


def peer_whole(tok: Any, ids: torch.Tensor, stops: list[str]) -> bool:
    return bool(StopStringCriteria(tok, stops)(ids, None)[0])


def peer_per_token(tok: Any, ids: torch.Tensor, stops: list[str]) -> bool:
    criteria = StopStringCriteria(tok, stops)
    return any(bool(criteria(ids[:, :k], None)[0]) for k in range(1, ids.shape[1] + 1))


@pytest.mark.parametrize(
    ("group", "name", "text", "stops", "peer", "contract"), CASES + SPECIAL_CASES
)
def test_peer_case(
    group: str, name: str, text: str, stops: list[str], peer: bool, contract: bool | None
) -> None:
    tok = tokenizer(name)
    ids = ids_of(tok, text)
    if contract is None:
        with pytest.raises(ValueError, match="WordPiece"):
            StopSequenceCriteria(tok, stops)
        return
    assert ours_whole(tok, ids, stops) == contract
    assert ours_per_token(tok, ids, stops) == contract
    if (group, text) not in TOKENIZATION_DEPENDENT:
        assert peer_whole(tok, ids, stops) == peer


def test_per_row_batched_with_left_padding() -> None:
    """transformers' batched per-row case as one call: rows of different lengths, left padding
    (padding is a special token: no text)."""
    tok = tokenizer("gpt2")
    texts = [c[2] for c in CASES if c[0] == "per row batched"]
    ids = tok(texts, return_tensors="pt", padding="longest", add_special_tokens=False)["input_ids"]
    criteria = StopSequenceCriteria(tok, ["end"], prompt_length=0, stop_token_ids=())
    assert criteria(ids, None).tolist() == [True, False, False]
    assert StopStringCriteria(tok, ["end"])(ids, None).tolist() == [True, False, False]
    criteria.reset()
    assert criteria(ids[:, :-1], None).tolist() == [False, False, False]


def differences() -> list[str]:
    """Where StopStringCriteria's answer, called once on the whole text, differs from the
    contract (printed by ``python test_peer_cases.py``)."""
    lines = []
    for group, name, text, stops, _, contract in CASES + SPECIAL_CASES:
        tok = tokenizer(name)
        ids = ids_of(tok, text)
        try:
            whole, step = peer_whole(tok, ids, stops), peer_per_token(tok, ids, stops)
        except Exception as error:
            whole = step = repr(error)  # type: ignore[assignment]
        if whole != contract or step != contract:
            lines.append(
                f"{group:24} {text!r:40} stops={stops!r}: StopStringCriteria whole={whole} "
                f"per token={step}, contract={contract}"
            )
    return lines


if __name__ == "__main__":
    print("\n".join(differences()))
