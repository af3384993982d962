"""SGLang's own request, sampling parameters and detokenizer, on the CPU, with the stopstream
plugin loaded by SGLang from its entry point (as in production).

A request is driven as SGLang's scheduler drives it: output ids appended a step at a time (one
token, or several when speculative decoding accepts them), ``update_finish_state(k)``, then the
output streamer's rule for a streamed request (``SchedulerOutputStreamer.accept``, copied below:
send every unsent token unless ``check_match_stop_str_prefix()`` holds the step) and SGLang's
real ``DetokenizerManager`` turning the sent ids into text. The tokenizer is a byte-level fake
(as SGLang's CPU tests use fakes): each id is a byte string, so characters can be split across
tokens.
"""

from __future__ import annotations

import random
import sys
from array import array
from collections.abc import Iterator, Sequence
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

SITE = Path(__file__).resolve().parent / "site"
sys.path.insert(0, str(SITE))
import kernel_stub  # noqa: E402, F401  (before any SGLang module)
from sglang.srt.managers import schedule_batch  # noqa: E402
from sglang.srt.managers.detokenizer_manager import DetokenizerManager  # noqa: E402
from sglang.srt.plugins import load_plugins  # noqa: E402
from sglang.srt.sampling.sampling_params import SamplingParams  # noqa: E402

import stopstream.sglang  # noqa: E402

# The plugin as SGLang loads it: entry point, register(), then HookRegistry.apply_hooks().
load_plugins()
assert stopstream.sglang.active(), "the plugin was not loaded by SGLang"
stopstream.sglang.set_enabled(True)  # remembers the plugin's functions, for sglang_own


class ByteTokenizer:
    """Token id -> bytes; decodes like a byte-level BPE tokenizer (invalid UTF-8 -> U+FFFD)."""

    is_fast = False
    eos_token_id = None
    additional_stop_token_ids = None

    def __init__(self) -> None:
        self.pieces: list[bytes] = []
        self.ids: dict[bytes, int] = {}

    def id(self, piece: bytes) -> int:
        if piece not in self.ids:
            self.ids[piece] = len(self.pieces)
            self.pieces.append(piece)
        return self.ids[piece]

    def decode(self, ids: Sequence[int], **_: Any) -> str:
        return b"".join(self.pieces[i] for i in ids).decode("utf-8", "replace")

    def encode(self, text: str, add_special_tokens: bool = False) -> list[int]:
        return [self.id(bytes([b])) for b in text.encode()]

    def tokenize(self, text: str, rng: random.Random, most: int = 4) -> list[int]:
        """``text`` cut at random byte positions (characters split too) into tokens."""
        data = text.encode()
        ids, i = [], 0
        while i < len(data):
            n = rng.randint(1, most)
            ids.append(self.id(data[i : i + n]))
            i += n
        return ids

    def __len__(self) -> int:
        return len(self.pieces)


def make_detokenizer(tokenizer: ByteTokenizer) -> Any:
    """SGLang's DetokenizerManager without its sockets and process (the fields its decoding
    reads)."""
    d = DetokenizerManager.__new__(DetokenizerManager)
    d.tokenizer = tokenizer
    d.vocab_size = None
    d.decode_status = {}
    d.disable_tokenizer_batch_decode = False
    d.is_tool_call_parser_gpt_oss = False
    d.tool_close_token_ids = ()
    return d


class Run:
    """One request through SGLang's scheduler rules and detokenizer, step by step."""

    def __init__(
        self,
        tokenizer: ByteTokenizer,
        *,
        stop: Any = None,
        stop_regex: Any = None,
        custom: dict[str, Any] | None = None,
        no_stop_trim: bool = False,
        max_new_tokens: int = 100_000,
        prompt: str = "Q: ",
    ) -> None:
        self.tokenizer = tokenizer
        params = SamplingParams(
            max_new_tokens=max_new_tokens,
            stop=stop,
            stop_regex=stop_regex,
            custom_params=custom,
            no_stop_trim=no_stop_trim,
        )
        params.normalize(tokenizer)
        self.req = schedule_batch.Req(
            rid="r0",
            origin_input_text=prompt,
            origin_input_ids=array("q", tokenizer.encode(prompt)),
            sampling_params=params,
            stream=True,
        )
        self.req.tokenizer = tokenizer
        self.detok = make_detokenizer(tokenizer)
        self.streamed: list[str] = []
        self.sends = 0

    @property
    def text(self) -> str:
        return "".join(self.streamed)

    def step(self, ids: Sequence[int]) -> bool:
        """One scheduler step that accepted ``ids``; whether the request finished."""
        req = self.req
        req.output_ids.extend(ids)
        req.update_finish_state(len(ids))
        self.accept()
        return req.finished()

    def end(self) -> None:
        """The request ends without a stop (as by its length), if it has not finished."""
        if not self.req.finished():
            self.req.finished_reason = schedule_batch.FINISH_LENGTH(len(self.req.output_ids))
            self.accept()

    def accept(self) -> None:
        # SchedulerOutputStreamer.accept for a streamed request at stream_interval 1.
        req = self.req
        if req.finished():
            if req.finished_len is None:
                req.finished_len = len(req.output_ids)
        elif req.check_match_stop_str_prefix():
            return
        output_ids = req.output_ids_through_stop
        sent = list(output_ids[req.send_token_offset :])
        req.send_token_offset = len(output_ids)
        decode_ids, read_offset = req.init_incremental_detokenize()
        batch = SimpleNamespace(
            rids=[req.rid],
            decoded_texts=[req.decoded_text],
            decode_ids=[list(decode_ids[req.send_decode_id_offset :])],
            read_offsets=[read_offset],
            finished_reasons=[req.finished_reason.to_json() if req.finished_reason else None],
            no_stop_trim=[req.sampling_params.no_stop_trim],
            skip_special_tokens=[True],
            spaces_between_special_tokens=[True],
        )
        req.send_decode_id_offset = len(decode_ids)
        self.finish_json = batch.finished_reasons[0]
        del sent
        self.sends += 1
        self.streamed.extend(self.detok._decode_batch_token_id_output(batch))

    def feed(self, ids: Sequence[int], steps: Sequence[int]) -> Iterator[int]:
        """Step through ``ids`` in steps of the given sizes; yields the tokens read after each
        step until the request finishes."""
        i = 0
        for k in steps:
            if i >= len(ids):
                break
            chunk = ids[i : i + k]
            i += len(chunk)
            done = self.step(chunk)
            yield i
            if done:
                return


@pytest.fixture
def tokenizer() -> ByteTokenizer:
    return ByteTokenizer()


@pytest.fixture
def sglang_own() -> Iterator[None]:
    """The test runs with SGLang's own stop functions (for comparisons)."""
    stopstream.sglang.set_enabled(False)
    try:
        yield
    finally:
        stopstream.sglang.set_enabled(True)
