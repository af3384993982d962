"""``generate()`` on the tiny model with seeded sampling, batched with left padding: the
criterion, the streamer and ``cut`` against the reference (``stopstream.reference``) over each
row's unstopped decoding.

Each seed batch (8 rows) is generated once without stops; then, per case, 1 to 10 stops are
drawn from its rows' text (overlapping ones, ones that end together, non-ASCII ones, ones that
span tokens, regexes, ``Stop`` items with their own flag, skip regions), and:

* ``cut`` of the unstopped output equals the reference (ids through the token after which the
  stop fired, text, ``stop_sequence``, ``stop_index``, ``stop_reason``);
* the streamer, fed the prompt and then one id at a time as ``generate()`` feeds it, has
  emitted exactly the reference's output after every id (minimal holdback), never more than
  the final text (no byte of a stop);
* ``generate()`` with the criterion (the same seed) ends each row at the token the reference
  names, pads it after that, and its output cuts to the same rows.
"""

from __future__ import annotations

import random
import unicodedata
from dataclasses import dataclass
from functools import cache
from typing import Any

import oracle
import pytest
import torch
from transformers import StoppingCriteriaList

import stopstream
from stopstream import reference
from stopstream.transformers import StopSequenceCriteria, StopTextStreamer, cut

SEED_BATCHES = 25
BATCH = 8
NEW_TOKENS = 24
CASES_PER_BATCH = 3
PROMPTS = [
    "Hello",
    "The answer is",
    "café au lait",
    "x",
    "a b c d e f g h",
    "日本語のテキスト",
    "The end.",
    "Question: what is 6 times 7?\nAnswer:",
    "<answer>",
    "emoji 😀",
]


@dataclass(frozen=True)
class Run:
    seed: int
    inputs: dict[str, torch.Tensor]
    prompt_length: int
    sequences: torch.Tensor
    """The unstopped output (prompt included)."""


@cache
def runs(model: Any, tokenizer: Any) -> tuple[Run, ...]:
    done = []
    for seed in range(SEED_BATCHES):
        rng = random.Random(seed)
        prompts = [rng.choice(PROMPTS) for _ in range(BATCH)]
        inputs = dict(tokenizer(prompts, return_tensors="pt", padding=True))
        torch.manual_seed(seed)
        out = model.generate(**inputs, do_sample=True, max_new_tokens=NEW_TOKENS)
        done.append(Run(seed, inputs, inputs["input_ids"].shape[1], out))
    return tuple(done)


# --- Drawing stop lists ---------------------------------------------------------------------

RUST_META = set("\\.+*?()|[]{}^$#&-~")


def escape(text: str) -> str:
    """A literal in both regex dialects (Rust's `regex` and Python's `re`)."""
    return "".join("\\" + c if c in RUST_META else c for c in text)


def word_safe(text: str) -> bool:
    """Whether `\\w` means the same in both dialects on every character of ``text`` (they differ
    on marks and on numerals that are not digits)."""
    return not any(
        unicodedata.category(c)[0] == "M" or unicodedata.category(c) == "No" for c in text
    )


@dataclass
class Case:
    stops: list[Any]
    """The stopstream items."""
    ref: list[Any]
    """The same stops for the reference."""
    include_stop: bool
    skip: list[tuple[str, str]] | None
    skip_until: str | None
    alphabet: str


def draw_case(rng: random.Random, texts: list[str], kind: int) -> Case:
    """A stop list drawn from the rows' texts: kind 0 literal strings only, 1 with ``Stop`` and
    ``Regex`` items, 2 with skip regions or a ``skip_until`` marker as well."""
    pool = [t for t in texts if len(t) >= 4] or ["abcd"]
    stops: list[Any] = []
    ref: list[Any] = []
    alphabet = set("a \n")

    def literal(s: str) -> None:
        flag = rng.choice([None, None, True, False]) if kind else None
        if flag is None and rng.random() < 0.7:
            stops.append(s)
            ref.append(s)
        else:
            stops.append(stopstream.Stop(s, include=flag))
            ref.append(reference.Stop(s, include=flag))

    def pattern(p: str) -> None:
        flag = rng.choice([None, True, False])
        compiled = stopstream.Regex(p, include=flag)
        stops.append(compiled)
        ref.append(reference.Regex(p, include=flag, max_len=compiled.max_len))
        alphabet.update(c for c in p if c not in "\\.|")

    for _ in range(rng.randint(1, 10)):
        t = rng.choice(pool)
        i = rng.randrange(len(t) - 1)
        n = rng.randint(1, 6)
        shape = rng.random()
        if shape < 0.45 or (kind == 0 and shape < 0.8):
            literal(t[i : i + n])
        elif shape < 0.6 or kind == 0:
            # Overlapping, or ending together (the longer one cuts earlier).
            literal(t[i : i + n])
            j = min(i + rng.randint(0, 2), len(t) - 1)
            literal(t[j : i + n + rng.choice([0, 0, 1])] or t[j])
        elif shape < 0.75 and i + 2 < len(t) and "\n" not in t[i : i + 3]:
            pattern(escape(t[i]) + "." + escape(t[i + 2]))
        elif shape < 0.9:
            j = rng.randrange(len(t) - 1)
            pattern(escape(t[i : i + 2]) + "|" + escape(t[j : j + 2]))
        else:
            words = [w for w in t.split() if w.isascii() and w.isalnum() and len(w) <= 3]
            if words and all(word_safe(x) for x in texts):
                pattern(r"\b" + escape(rng.choice(words)) + r"\b")
            else:
                literal(t[i : i + n])
        if rng.random() < 0.05:
            literal(stops[-1] if isinstance(stops[-1], str) else t[i])
    if rng.random() < 0.2:
        literal("\x00never")
    skip = until = None
    if kind == 2:
        t = rng.choice(pool)
        i, j = sorted(rng.sample(range(len(t)), 2))
        if rng.random() < 0.5:
            skip = [(t[i : i + rng.randint(1, 2)], t[j : j + rng.randint(1, 2)])]
        else:
            until = t[i : i + rng.randint(1, 3)]
    return Case(stops, ref, rng.random() < 0.3, skip, until, "".join(sorted(alphabet)))


# --- The checks ------------------------------------------------------------------------------


class Recorder(StopTextStreamer):
    """The streamer, recording what it emits after each ``put``."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.out = ""
        self.ended = False

    def on_finalized_text(self, text: str, stream_end: bool = False) -> None:
        assert not self.ended
        self.out += text
        self.ended = stream_end


def options(case: Case) -> dict[str, Any]:
    return {"include_stop": case.include_stop, "skip": case.skip, "skip_until": case.skip_until}


def row_ids(sequences: torch.Tensor, row: int, prompt_length: int) -> list[int]:
    ids: list[int] = sequences[row, prompt_length:].tolist()
    return ids


def check_streamer(
    tokenizer: Any, run: Run, row: int, case: Case, want: oracle.Expected, skip_prompt: bool
) -> None:
    streamer = Recorder(tokenizer, case.stops, skip_prompt=skip_prompt, **options(case))
    prompt = run.inputs["input_ids"][row : row + 1]
    streamer.put(prompt)
    start = "" if skip_prompt else tokenizer.decode(prompt[0], skip_special_tokens=True)
    assert streamer.out == start
    ids = row_ids(run.sequences, row, run.prompt_length)
    for k, i in enumerate(ids):
        streamer.put(torch.tensor([i]))
        got = streamer.out[len(start) :]
        if k < len(want.emitted) - 1:
            assert got == want.emitted[k], f"after id {k}"
        assert want.text.startswith(got), f"after id {k}: more than the output"
    streamer.end()
    assert streamer.ended
    assert streamer.out == start + want.text
    assert (streamer.stop_sequence, streamer.stop_index, streamer.stop_reason) == (
        want.stop_sequence,
        want.stop_index,
        want.stop_reason,
    )


def check_cut(rows: list[Any], wants: list[oracle.Expected], run: Run) -> None:
    for row, (got, want) in enumerate(zip(rows, wants, strict=True)):
        ids = row_ids(run.sequences, row, run.prompt_length)
        assert got.token_ids == ids[: want.taken], row
        assert (got.text, got.stop_sequence, got.stop_index, got.stop_reason) == (
            want.text,
            want.stop_sequence,
            want.stop_index,
            want.stop_reason,
        ), row


@pytest.mark.parametrize("seed", range(SEED_BATCHES))
def test_generations_match_the_reference(model: Any, tokenizer: Any, seed: int) -> None:
    run = runs(model, tokenizer)[seed]
    table = oracle.Table.of(tokenizer)
    eos = frozenset([tokenizer.eos_token_id])
    n = run.prompt_length
    rows = [row_ids(run.sequences, r, n) for r in range(BATCH)]
    texts = [tokenizer.decode(ids, skip_special_tokens=True) for ids in rows]
    # The reference's decoding is the tokenizer's (the stops are drawn from the latter).
    for ids in rows:
        cut_at = next((k for k, i in enumerate(ids) if i in eos), len(ids))
        assert table.text(ids[:cut_at]) == tokenizer.decode(ids[:cut_at], skip_special_tokens=True)
    rng = random.Random(1000 + seed)
    for kind in range(CASES_PER_BATCH):
        case = draw_case(rng, texts, kind)
        streamed = rng.sample(range(BATCH), 2)
        wants = [
            oracle.expected(
                table,
                ids,
                case.ref,
                include_stop=case.include_stop,
                skip=case.skip,
                skip_until=case.skip_until,
                stop_token_ids=eos,
                alphabet=case.alphabet,
                every_id=row in streamed,
            )
            for row, ids in enumerate(rows)
        ]
        where = f"case {kind}: {case}"
        # cut over the unstopped output.
        check_cut(
            cut(run.sequences, tokenizer, case.stops, prompt_length=n, **options(case)), wants, run
        )
        # The streamer, every feed (two rows per case; the prompt emitted or skipped).
        for row in streamed:
            check_streamer(tokenizer, run, row, case, wants[row], skip_prompt=rng.random() < 0.5)
        # generate() with the criterion ends each row at the reference's token.
        criteria = StopSequenceCriteria(tokenizer, case.stops, **options(case))
        torch.manual_seed(run.seed)
        out = model.generate(
            **run.inputs,
            do_sample=True,
            max_new_tokens=NEW_TOKENS,
            stopping_criteria=StoppingCriteriaList([criteria]),
        )
        stops_early = [w.on_id for w in wants]
        assert criteria.stopped == stops_early, where
        length = max(
            (w.taken if s else NEW_TOKENS) for w, s in zip(wants, stops_early, strict=True)
        )
        assert out.shape[1] == n + length, where
        for r, (want, ids) in enumerate(zip(wants, rows, strict=True)):
            got = row_ids(out, r, n)
            assert got[: want.taken] == ids[: want.taken], (r, where)
            assert set(got[want.taken :]) <= {tokenizer.pad_token_id}, (r, where)
        check_cut(cut(out, tokenizer, case.stops, prompt_length=n, **options(case)), wants, run)
