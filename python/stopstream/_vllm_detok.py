"""The detokenizer that :mod:`stopstream.vllm` gives a request with stops (contract §10).

It wraps the detokenizer vLLM would have used, with that detokenizer's own stop handling turned
off, and keeps vLLM's decoding: each new token goes through vLLM's ``update`` one at a time, so
the text is byte for byte vLLM's (``skip_special_tokens``, ``spaces_between_special_tokens``,
decoding primed with the prompt, fast and slow tokenizers alike). The stops are stopstream's:
the decoded text of each token is fed to a :class:`~stopstream.StopFilter`, which gives §2's
winner and cut and §2.5's minimal holdback. Feeding token by token tells which token completed
the stop, so the token ids (and, through vLLM's own trimming, the logprobs) end with it.

``min_tokens`` is vLLM's rule: no stop whose match ends within the text of the first
``min_tokens`` output tokens fires. The filter is quiet over those tokens (no stop fires, the
holdback stays minimal) and matches on from there, so a stop that began within them and ends
after them fires. Quiet needs the composed matcher and literal stops: the options reject regex
stops with ``min_tokens``, and compile plain ``str`` stops as :class:`~stopstream.Stop` items.

Nothing here imports vLLM: the wrapped detokenizer is used through the attributes vLLM 0.32's
``BaseIncrementalDetokenizer`` has (``update``, ``output_text``, ``token_ids``,
``output_token_ids``, ``num_output_tokens``, ``stop``, ``stop_buffer_length``).
"""

from __future__ import annotations

from bisect import bisect_right
from typing import Any

from ._core import StopFilter
from ._vllm_options import RequestStops

__all__ = ["StopDetokenizer", "stream_span"]


def stream_span(
    detokenizer: Any, kept: int, released: int, finished: bool, count: int
) -> tuple[int, int] | None:
    """The output tokens to stream with the text emitted so far, as ``(start, end)`` indexes
    into the ``kept`` output tokens, marked streamed (``detokenizer._sent_tokens``); ``None``
    when they are the last ``count`` (what vLLM sends anyway). Contract §7's release rule: a
    token goes out once all of its text has (the first ``released`` tokens); on a stop or at
    the end, every token kept."""
    end = kept if finished or detokenizer._done else released
    start: int = detokenizer._sent_tokens
    if end < start:
        end = start
    detokenizer._sent_tokens = end
    if end == kept and start == kept - count:
        return None
    return start, end


class StopDetokenizer:
    """vLLM's detokenizer interface (``update``, ``get_next_output_text``, ``output_token_ids``,
    ``num_output_tokens``) over vLLM's own decoding and stopstream's stops."""

    def __init__(self, inner: Any, options: RequestStops, max_tokens: int | None) -> None:
        # vLLM's detokenizer decodes; its own stop search and holdback are switched off.
        inner.stop = []
        inner.stop_buffer_length = 0
        self._inner = inner
        self._options = options
        self._max_tokens = max_tokens
        # Quiet over the first `min_tokens` output tokens (with no stops, nothing can fire).
        self._quiet = options.min_tokens > 0 and bool(options.stops)
        self._filter = self._new_filter()
        # All decoded text (the filter's input) and the text certain to be output.
        self._text = ""
        self._out = ""
        self._sent = 0
        # Where each output token's text ends in `_text`, and how many tokens were streamed.
        self._ends: list[int] = []
        self._sent_tokens = 0
        self._done = False
        self._stop: str | None = None

    def _new_filter(self) -> StopFilter:
        f = StopFilter(self._options.compiled)
        if self._quiet:
            f._quiet(True)
        return f

    # vLLM's interface -------------------------------------------------------------------------

    @property
    def output_token_ids(self) -> list[int]:
        ids: list[int] = self._inner.output_token_ids
        return ids

    def num_output_tokens(self) -> int:
        n: int = self._inner.num_output_tokens()
        return n

    @property
    def output_text(self) -> str:
        """The text certain to be output so far (the whole output once finished)."""
        return self._out

    def update(self, new_token_ids: list[int], stop_terminated: bool) -> str | None:
        """Decode ``new_token_ids`` (the last one is an engine stop token when
        ``stop_terminated``) and return the stop that fired, if one did. Tokens after the one
        completing the stop are not kept."""
        if self._done or not new_token_ids:
            return None
        inner = self._inner
        last = len(new_token_ids) - 1
        for i, token_id in enumerate(new_token_ids):
            before = len(inner.output_text)
            inner.update([token_id], stop_terminated and i == last)
            piece: str = inner.output_text[before:]
            self._ends.append(len(self._text) + len(piece))
            if self._feed(piece):
                return self._stop
        if stop_terminated or (
            self._max_tokens is not None and self.num_output_tokens() >= self._max_tokens
        ):
            # The last step: the end of the text decides too (a stop such as `x$`).
            self._finish()
            return self._stop
        return None

    def get_next_output_text(self, finished: bool, delta: bool) -> str:
        """The output text: all of it (``delta`` off) or what is new since the last call; only
        what is certain to be output while unfinished."""
        if finished and not self._done:
            self._finish()
        if not delta:
            return self._out
        # After a hand-over from the token-id path, what was streamed may run ahead of this
        # path's text by the whole characters of a token that ended mid-character.
        piece = self._out[self._sent :]
        self._sent = max(self._sent, len(self._out))
        return piece

    def stream_tokens(self, finished: bool, count: int) -> tuple[int, int] | None:
        """The output tokens to stream with the text emitted so far (see :func:`stream_span`)."""
        released = bisect_right(self._ends, len(self._out))
        return stream_span(self, self.num_output_tokens(), released, finished, count)

    def _feed(self, piece: str) -> bool:
        """Take one token's text; ``True`` when a stop fired on it."""
        self._text += piece
        if piece:
            self._out += self._filter.feed(piece)
        if self._quiet and self.num_output_tokens() >= self._options.min_tokens:
            # The last of the first `min_tokens` tokens: stops fire from its end on.
            self._filter._quiet(False)
            self._quiet = False
        if self._filter.stopped:
            self._stopped(self._filter.stop_sequence)
            return True
        return False

    def _stopped(self, stop: str | None) -> None:
        # The token that completed the stop is the last one kept: `update` feeds the wrapped
        # detokenizer one token at a time and stops there.
        self._done = True
        self._stop = stop

    def _finish(self) -> None:
        self._done = True
        self._out += self._filter.finish()
        if self._filter.stop_reason == "stop_sequence":
            self._stop = self._filter.stop_sequence
