"""The pieces in ``generate()`` and on their own: the streamers (print, iterator, async) in a
real generation, beam search, a criterion reused, the vocabulary cache, bad input, and that
``import stopstream`` imports neither transformers nor torch."""

from __future__ import annotations

import asyncio
import gc
import queue
import subprocess
import sys
import threading
from typing import Any

import pytest
import torch
from transformers import StoppingCriteriaList

import stopstream
import stopstream.transformers as st
from stopstream.transformers import (
    AsyncStopTextIteratorStreamer,
    StopSequenceCriteria,
    StopTextIteratorStreamer,
    StopTextStreamer,
    cut,
)

PUBLIC = [
    "AsyncStopTextIteratorStreamer",
    "CutRow",
    "StopSequenceCriteria",
    "StopTextIteratorStreamer",
    "StopTextStreamer",
    "cut",
    "vocab_for",
]


def test_public_api() -> None:
    assert sorted(st.__all__) == PUBLIC
    assert dir(st) == PUBLIC
    for name in PUBLIC:
        assert getattr(st, name).__doc__, name


def test_import_stopstream_imports_neither() -> None:
    code = (
        "import sys, stopstream, stopstream.reference; "
        "print(sorted(m for m in ('torch', 'transformers') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def unstopped_text(
    model: Any, tokenizer: Any, prompt: str, seed: int, n: int = 24
) -> tuple[Any, str]:
    inputs = tokenizer([prompt], return_tensors="pt")
    torch.manual_seed(seed)
    out = model.generate(**inputs, do_sample=True, max_new_tokens=n)
    length = inputs["input_ids"].shape[1]
    return inputs, tokenizer.decode(out[0, length:], skip_special_tokens=True)


def a_stop(text: str) -> str:
    """A stop drawn from the middle of ``text``."""
    middle = len(text) // 2
    return text[middle : middle + 3]


def test_streamers_in_generate(model: Any, tokenizer: Any) -> None:
    """The three streamers in a real generate(), with the criterion: the same text as cut's,
    and generation ends at the stop."""
    inputs, text = unstopped_text(model, tokenizer, "The answer is", seed=5)
    stops = [a_stop(text)]
    n = inputs["input_ids"].shape[1]
    want = stopstream.truncate(text, stops)[0]

    def generate(streamer: Any) -> Any:
        torch.manual_seed(5)
        criteria = StopSequenceCriteria(tokenizer, stops)
        return model.generate(
            **inputs,
            do_sample=True,
            max_new_tokens=24,
            streamer=streamer,
            stopping_criteria=StoppingCriteriaList([criteria]),
        )

    class Collect(StopTextStreamer):
        pieces: list[str]

        def on_finalized_text(self, text: str, stream_end: bool = False) -> None:
            self.pieces = [*getattr(self, "pieces", []), text]

    collect = Collect(tokenizer, stops, skip_prompt=True)
    out = generate(collect)
    assert "".join(collect.pieces) == want
    assert collect.stop_sequence == stops[0] and collect.stop_reason == "stop_sequence"
    rows = cut(out, tokenizer, stops, prompt_length=n)
    assert rows[0].text == want and rows[0].stop_index == 0
    assert len(rows[0].token_ids) == out.shape[1] - n

    iterator = StopTextIteratorStreamer(tokenizer, stops, skip_prompt=True, timeout=60)
    thread = threading.Thread(target=generate, args=(iterator,))
    thread.start()
    pieces = list(iterator)
    thread.join()
    assert "".join(pieces) == want and all(pieces)

    async def consume() -> list[str]:
        streamer = AsyncStopTextIteratorStreamer(tokenizer, stops, skip_prompt=True, timeout=60)
        task = asyncio.get_running_loop().run_in_executor(None, generate, streamer)
        pieces = [p async for p in streamer]
        await task
        return pieces

    pieces = asyncio.run(consume())
    assert "".join(pieces) == want and all(pieces)


def test_the_prompt_is_emitted_unless_skipped(tokenizer: Any) -> None:
    prompt = tokenizer(["<pad><pad>Hello world"], return_tensors="pt")["input_ids"]
    for skip_prompt, first in [(False, "Hello world"), (True, "")]:
        streamer = StopTextIteratorStreamer(tokenizer, ["world"], skip_prompt=skip_prompt)
        streamer.put(prompt)  # the stop in the prompt is not sought
        streamer.put(torch.tensor([tokenizer.convert_tokens_to_ids("a")]))
        streamer.end()
        assert "".join(streamer) == first + "a"


def test_iterator_timeout(tokenizer: Any) -> None:
    streamer = StopTextIteratorStreamer(tokenizer, ["x"], timeout=0.01)
    with pytest.raises(queue.Empty):
        next(streamer)

    async def wait() -> None:
        streamer = AsyncStopTextIteratorStreamer(tokenizer, ["x"], timeout=0.01)
        with pytest.raises(TimeoutError):
            await streamer.__anext__()

    asyncio.run(wait())


def test_streamer_batch_size_one(tokenizer: Any) -> None:
    streamer = StopTextStreamer(tokenizer, ["x"])
    with pytest.raises(ValueError, match="batch size 1"):
        streamer.put(torch.zeros((2, 3), dtype=torch.long))


def test_beam_search(model: Any, tokenizer: Any) -> None:
    """Beam search reorders rows between steps: the criterion re-reads a row whose earlier ids
    changed, so each returned sequence ends at its first stop or runs to the end."""
    inputs = tokenizer(["Hello", "The answer is"], return_tensors="pt", padding=True)
    n = inputs["input_ids"].shape[1]
    plain = model.generate(**inputs, num_beams=3, num_return_sequences=3, max_new_tokens=16)
    texts = [tokenizer.decode(r[n:], skip_special_tokens=True) for r in plain]
    stops = sorted({a_stop(t) for t in texts if len(t) > 4})[:4]
    criteria = StopSequenceCriteria(tokenizer, stops)
    out = model.generate(
        **inputs,
        num_beams=3,
        num_return_sequences=3,
        max_new_tokens=16,
        stopping_criteria=StoppingCriteriaList([criteria]),
    )
    for row in out:
        ids = [i for i in row[n:].tolist() if i != tokenizer.pad_token_id]
        text = tokenizer.decode(ids, skip_special_tokens=True)
        got = cut([ids], tokenizer, stops)[0]
        if got.stop_reason == "stop_sequence":
            # Ends at the token that completed the first stop.
            assert len(got.token_ids) == len(ids), text
        else:
            assert len(ids) == 16 or got.stop_reason == "stop_token", text


def test_a_criterion_reused_and_rows_already_stopped(tokenizer: Any) -> None:
    a, b, c = (tokenizer.convert_tokens_to_ids(t) for t in "abc")
    criteria = StopSequenceCriteria(tokenizer, ["ab"], stop_token_ids=[c])
    prompt = torch.tensor([[b, b], [a, a], [c, c]])
    steps = [[a, a, a], [b, c, a], [a, a, b]]
    ids = prompt
    seen = []
    for step in steps:
        ids = torch.cat([ids, torch.tensor(step)[:, None]], dim=1)
        seen.append(criteria(ids, None).tolist())
    assert seen == [[False, False, False], [True, True, False], [True, True, True]]
    assert criteria.stop_sequences == ["ab", None, "ab"]
    # A new generate() (shorter ids): starts over.
    assert criteria(prompt[:, :1].repeat(1, 2)[:, :2], None).tolist() == [False, False, True]
    criteria.reset()
    assert criteria.stopped == []


def test_vocab_cache(tokenizer: Any) -> None:
    import tiny

    assert st.vocab_for(tokenizer) is st.vocab_for(tokenizer)
    other = tiny.make_peer_tokenizer(im_special=False)
    v = st.vocab_for(other)
    assert len(v) == len(other)
    other.add_tokens(["<new>"])
    assert len(st.vocab_for(other)) == len(other)
    key = id(other)
    del other, v
    gc.collect()
    assert key not in st._VOCABS
    vocab = stopstream.Vocab([b"a", b"b"])
    assert st.vocab_for(vocab) is vocab


def test_bad_input(tokenizer: Any) -> None:
    with pytest.raises(TypeError, match="tokenizer"):
        StopSequenceCriteria(object(), ["x"])
    with pytest.raises(ValueError, match="empty"):
        StopSequenceCriteria(tokenizer, ["x", ""])
    with pytest.raises(TypeError):
        StopSequenceCriteria(tokenizer, ["x", 3])
    with pytest.raises(ValueError, match="prompt_length"):
        StopSequenceCriteria(tokenizer, ["x"], prompt_length=-1)
    with pytest.raises(ValueError):
        StopSequenceCriteria(tokenizer, ["x"], stop_token_ids=[10**9])
    with pytest.raises(TypeError, match="stop_token_ids"):
        StopSequenceCriteria(tokenizer, ["x"], stop_token_ids="x")
    criteria = StopSequenceCriteria(tokenizer, ["x"])
    with pytest.raises(ValueError, match="row 1"):
        criteria(torch.tensor([[1, 2], [1, len(tokenizer) + 5]]), None)
    with pytest.raises(ValueError, match="row 0"):
        cut(torch.tensor([[len(tokenizer) + 5]]), tokenizer, ["x"])
    with pytest.raises(ValueError, match="prompt_length"):
        cut(torch.tensor([[1, 2]]), tokenizer, ["x"], prompt_length=3)
    with pytest.raises(TypeError, match="expected"):
        cut("ids", tokenizer, ["x"])


def test_cut_inputs(tokenizer: Any) -> None:
    ids = tokenizer("Hello world. The end", add_special_tokens=False)["input_ids"]
    stops = [stopstream.Regex(r"\bend\b"), stopstream.Stop(".", include=True)]
    for given in (torch.tensor(ids), torch.tensor([ids]), [ids], ids):
        (row,) = cut(given, tokenizer, stops)
        assert (row.text, row.stop_sequence, row.stop_index) == ("Hello world.", ".", 1)
    # A stop settled by the end of the stream (\b after "end"): every id is taken.
    (row,) = cut([ids[-2:]], tokenizer, stops[:1])
    assert row.stop_reason == "stop_sequence" and row.token_ids == ids[-2:]
