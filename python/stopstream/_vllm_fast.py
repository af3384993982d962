"""The token-id path of :mod:`stopstream.vllm`: one :class:`~stopstream.TokenStopFilter` per
request over a :class:`~stopstream.Vocab` built once per tokenizer, in place of vLLM's
``DecodeStream.step`` per token plus its stop search.

It serves a request only where its text is vLLM's own byte for byte (contract §10), which holds
for a ``tokenizers`` byte-level vocabulary (no leading-space rule), with special tokens skipped,
literal stops and no ``min_tokens``, while the text is valid UTF-8. The two decoders part ways
only on bytes that are not valid UTF-8: vLLM's ``DecodeStream`` waits while its text ends in
U+FFFD and never releases such a tail at the end, where the filter writes U+FFFD by CPython's
rule at once. So the first U+FFFD (or an incomplete character at the end) hands the request
over: the ids so far are replayed into the text path
(:class:`~stopstream._vllm_detok.StopDetokenizer` over vLLM's own detokenizer), which then
serves it to the end. Up to that token both paths give the same text, so what was already
streamed stays right. Every other request goes to the text path from the start.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ._core import TokenStopFilter
from ._vllm_detok import StopDetokenizer, stream_span
from ._vllm_options import RequestStops
from ._vocab import Vocab, tokenizers_tokens

__all__ = ["STATS", "TokenDetokenizer", "vocab_for"]

_REPLACEMENT = "\ufffd"
# id(tokenizer) -> (tokenizer, its vocabulary or None when the path cannot reproduce it). The
# tokenizer is kept alive with its entry, so an id is never reused while the entry exists.
_VOCABS: dict[int, tuple[Any, Vocab | None]] = {}
#: Requests served by this path, and how many of them were handed over to the text path.
STATS = {"requests": 0, "handed_over": 0}


def vocab_for(tokenizer: Any) -> Vocab | None:
    """The tokenizer's vocabulary, built once; ``None`` if this path cannot reproduce vLLM's
    decoding for it (not a byte-level ``tokenizers`` vocabulary)."""
    entry = _VOCABS.get(id(tokenizer))
    if entry is not None and entry[0] is tokenizer:
        return entry[1]
    vocab: Vocab | None
    try:
        backend = getattr(tokenizer, "_tokenizer", None) or tokenizer
        tokens, special, strip = tokenizers_tokens(backend)
        # A leading-space rule depends on what the prompt decoded to: left to vLLM's decoding.
        vocab = None if strip else Vocab(tokens, special=special)
    except (TypeError, ValueError):
        vocab = None
    _VOCABS[id(tokenizer)] = (tokenizer, vocab)
    return vocab


class TokenDetokenizer:
    """vLLM's detokenizer interface over a :class:`~stopstream.TokenStopFilter`; hands over to
    the text path (``fallback(tokenizer, request, options)``) where the decoded text stops
    being valid UTF-8.

    A request in flight holds one of these: slots, and nothing per request that can be shared
    or made again on the rare hand-over, keep it below vLLM's own detokenizer (about 600 bytes
    with 4 stops against vLLM's 600; ``benches/vllm_bench.py`` measures both)."""

    __slots__ = (
        "_done",
        "_fallback",
        "_filter",
        "_held",
        "_ids",
        "_include",
        "_max_tokens",
        "_options",
        "_released",
        "_request",
        "_sent_chars",
        "_sent_tokens",
        "_steady",
        "_stop",
        "_text",
        "_tokenizer",
    )

    def __init__(
        self,
        vocab: Vocab,
        options: RequestStops,
        max_tokens: int | None,
        fallback: Callable[[Any, Any, RequestStops], StopDetokenizer],
        tokenizer: Any,
        request: Any,
    ) -> None:
        # Raises TypeError/ValueError where this build's filter does not take the options.
        self._filter = TokenStopFilter(vocab, options.compiled)
        # Shared with every request that sent the same options; kept for a hand-over.
        self._options = options
        self._include = options.include_stop
        self._max_tokens = max_tokens
        self._fallback = fallback
        self._tokenizer = tokenizer
        self._request = request
        self._text: StopDetokenizer | None = None
        self._ids: list[int] = []
        # The emitted text not sent yet (usually one token's shared text object; all of the
        # text when vLLM asks for whole texts, not deltas, which it then copies as its own
        # detokenizer does), the characters sent, and how many tokens have all their text
        # emitted and how many were sent.
        self._held = ""
        self._sent_chars = 0
        self._released = 0
        self._sent_tokens = 0
        self._done = False
        # Neither stopped, finished nor handed over: the one-token step may run.
        self._steady = True
        self._stop: str | None = None
        STATS["requests"] += 1

    @property
    def output_token_ids(self) -> list[int]:
        return self._ids if self._text is None else self._text.output_token_ids

    def num_output_tokens(self) -> int:
        return len(self._ids) if self._text is None else self._text.num_output_tokens()

    @property
    def output_text(self) -> str:
        """The text emitted so far. Sent deltas are not kept (vLLM keeps no text either): the
        sent part is decoded again from the ids, of which it is a prefix."""
        if self._text is not None:
            return self._text.output_text
        held = self._held
        if not self._sent_chars:
            return held
        vocab = self._filter.vocab
        data = b"".join(vocab.token_bytes(i) or b"" for i in self._ids)
        return data.decode("utf-8", "replace")[: self._sent_chars] + held

    def update(self, new_token_ids: list[int], stop_terminated: bool) -> str | None:
        if self._steady and len(new_token_ids) == 1 and not stop_terminated:
            # The usual step: one token, no stop, valid text. Each operation here costs about
            # 2% of the step (vLLM's own detokenizer takes 2.3 us per token with 4 stops).
            token_id = new_token_ids[0]
            ids = self._ids
            ids.append(token_id)
            piece = self._filter.feed(token_id)
            text = piece.text
            if self._filter.stopped or _REPLACEMENT in text:
                done, stop = self._took(piece, [], False)
                if done:
                    return stop
            else:
                if text:
                    self._held = self._held + text if self._held else text
                self._released += piece.tokens
            if len(ids) == self._max_tokens:
                return self._finish(False)
            return None
        return self._update(new_token_ids, stop_terminated)

    def _update(self, new_token_ids: list[int], stop_terminated: bool) -> str | None:
        if self._text is not None:
            return self._text.update(new_token_ids, stop_terminated)
        if self._done or not new_token_ids:
            return None
        last = len(new_token_ids) - 1
        for i, token_id in enumerate(new_token_ids):
            self._ids.append(token_id)
            if stop_terminated and i == last and not self._include:
                # vLLM does not decode an engine stop token unless the stop is included.
                break
            done, stop = self._took(
                self._filter.feed(token_id), new_token_ids[i + 1 :], stop_terminated
            )
            if done:
                return stop
        if stop_terminated or (self._max_tokens is not None and len(self._ids) >= self._max_tokens):
            return self._finish(stop_terminated)
        return None

    def _took(self, piece: Any, rest: list[int], stop_terminated: bool) -> tuple[bool, str | None]:
        """Take what one fed token released; ``(True, stop)`` when the step ends here."""
        f = self._filter
        self._released += piece.tokens
        if _REPLACEMENT in piece.text:
            return True, self._hand_over(rest, stop_terminated)
        if piece.text:
            self._held += piece.text
        if f.stopped:
            if _REPLACEMENT in (f.stop_sequence or "") or not self._whole_so_far():
                # vLLM's decoding has not produced this token's text yet, or the match holds
                # invalid bytes (held text is checked here, not on every step).
                return True, self._hand_over(rest, stop_terminated)
            self._done = True
            self._steady = False
            self._stop = f.stop_sequence
            return True, self._stop
        return False, None

    def get_next_output_text(self, finished: bool, delta: bool) -> str:
        if finished or not delta or not self._steady:
            return self._output(finished, delta)
        piece = self._held
        if piece:
            self._held = ""
            self._sent_chars += len(piece)
        return piece

    def _output(self, finished: bool, delta: bool) -> str:
        if self._text is not None:
            return self._text.get_next_output_text(finished, delta)
        if finished and not self._done:
            self._finish()
            if self._text is not None:
                return self._text.get_next_output_text(finished, delta)
        if not delta:
            return self.output_text
        piece = self._held
        self._held = ""
        self._sent_chars += len(piece)
        return piece

    def stream_tokens(self, finished: bool, count: int) -> tuple[int, int] | None:
        """The output tokens to stream with the text emitted so far (see
        :func:`~stopstream._vllm_detok.stream_span`)."""
        n = len(self._ids)
        if self._steady and not finished and self._released == n and self._sent_tokens == n - count:
            # The usual step: every token's text is out, and they are what vLLM sends.
            self._sent_tokens = n
            return None
        if self._text is not None:
            return self._text.stream_tokens(finished, count)
        return stream_span(self, n, self._released, finished, count)

    def _whole_so_far(self) -> bool:
        """Whether the text through the last token is valid UTF-8 ending with a whole character,
        so that vLLM's decoding has released it too. The text before it was valid (else the
        request was handed over), so at most an incomplete character is open before it."""
        vocab = self._filter.vocab
        before = b"".join(vocab.token_bytes(i) or b"" for i in self._ids[-5:-1])
        try:
            (_open_tail(before) + (vocab.token_bytes(self._ids[-1]) or b"")).decode("utf-8")
        except UnicodeDecodeError:
            return False
        return True

    def _finish(self, stop_terminated: bool = False) -> str | None:
        held = self._filter.pending
        piece = self._filter.finish()
        if piece.text != held or _REPLACEMENT in piece.text:
            # An incomplete character at the end (vLLM never releases it), or invalid bytes.
            return self._hand_over([], stop_terminated, final=True)
        self._done = True
        self._steady = False
        if piece.text:
            self._held += piece.text
        self._released = len(self._ids)
        if self._filter.stop_reason == "stop_sequence":
            self._stop = self._filter.stop_sequence
        return self._stop

    def _hand_over(self, rest: list[int], stop_terminated: bool, final: bool = False) -> str | None:
        """Replay every id so far into the text path, which serves the request from now on."""
        STATS["handed_over"] += 1
        text = self._fallback(self._tokenizer, self._request, self._options)
        ids = self._ids
        stop: str | None = None
        for k, token_id in enumerate(ids):
            last = k == len(ids) - 1 and not rest
            stop = text.update([token_id], stop_terminated and last)
            if stop is not None:
                break
        # What was streamed is a prefix of what the text path gives: the same text up to here.
        text._sent = self._sent_chars
        text._sent_tokens = self._sent_tokens
        self._text = text
        self._steady = False
        if stop is None and rest:
            stop = text.update(rest, stop_terminated)
        if stop is None and final:
            text.get_next_output_text(True, False)
        return stop


def _open_tail(data: bytes) -> bytes:
    """The incomplete character at the end of ``data`` (valid UTF-8 but for that tail)."""
    for back in range(1, min(3, len(data)) + 1):
        byte = data[-back]
        if byte < 0x80:
            return b""
        if byte >= 0xC0:
            need = 2 if byte < 0xE0 else 3 if byte < 0xF0 else 4
            return data[-back:] if need > back else b""
    return b""
