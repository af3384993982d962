"""One SGLang request's stop state in the scheduler: its text, decoded a token at a time, fed
to a :class:`~stopstream.StopFilter` (contract §2, §6, §11).

Free of any SGLang import, so the per-token logic is tested and type-checked without SGLang.
The request object is anything with SGLang's ``Req`` fields that this reads: ``output_ids``,
``origin_input_ids_unpadded``, ``tokenizer`` and ``sampling_params``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from ._core import StopFilter, StopSet

__all__ = ["PROMPT_CONTEXT", "Decode", "Fired", "RequestStream", "decoder_for"]

#: Prompt tokens that prime the decoding, as SGLang's detokenizer does
#: (``INIT_INCREMENTAL_DETOKENIZATION_OFFSET``): a tokenizer that drops a leading space at the
#: start of a text keeps it in the middle of one.
PROMPT_CONTEXT = 5

Decode = Callable[[Sequence[int]], str]


def decoder_for(tokenizer: Any, params: Any) -> Decode:
    """``ids -> text`` as SGLang's detokenizer decodes this request: a fast tokenizer with the
    request's ``skip_special_tokens`` and ``spaces_between_special_tokens``; another one
    without them, special ids dropped by hand when they are skipped."""
    skip = bool(getattr(params, "skip_special_tokens", True))
    if getattr(tokenizer, "is_fast", False):
        spaces = bool(getattr(params, "spaces_between_special_tokens", True))

        def fast(ids: Sequence[int]) -> str:
            text: str = tokenizer.decode(
                list(ids), skip_special_tokens=skip, spaces_between_special_tokens=spaces
            )
            return text

        return fast
    special: set[int] = set()
    if skip:
        found = getattr(tokenizer, "all_special_ids_set", None)
        if found is None:
            found = getattr(tokenizer, "all_special_ids", None)
        special = set(found or ())

    def plain(ids: Sequence[int]) -> str:
        text: str = tokenizer.decode([t for t in ids if t not in special] if special else list(ids))
        return text

    return plain


class Fired:
    """A stop that fired: the stop's text as SGLang reports it (``matched``: the stop as given,
    for a regex the matched text), whether it is a regex, how many output tokens are kept
    (``tokens``: through the token that completed it) and how many characters of the text
    decoded through that token come after the cut (``drop``)."""

    __slots__ = ("drop", "matched", "regex", "tokens")

    def __init__(self, matched: str, regex: bool, tokens: int, drop: int) -> None:
        self.matched = matched
        self.regex = regex
        self.tokens = tokens
        self.drop = drop

    def __repr__(self) -> str:
        return (
            f"Fired(matched={self.matched!r}, regex={self.regex}, tokens={self.tokens}, "
            f"drop={self.drop})"
        )


class RequestStream:
    """The text of one request's output, decoded as it grows and fed to a filter.

    ``advance(output_ids)`` reads the tokens it has not seen (however many a step accepted),
    one at a time, and returns the stop that fired, if any. ``held()`` says whether the text
    so far ends with something that could still become a stop (§2.5): SGLang sends whole
    tokens, so the step is held then.
    """

    __slots__ = (
        "_decode",
        "_emitted",
        "_fed",
        "_filter",
        "_ids",
        "_prefix",
        "_read",
        "_regex",
        "_sent",
        "_tail",
        "consumed",
        "fired",
        "source",
    )

    def __init__(self, compiled: StopSet, regex: Sequence[bool], decode: Decode, prompt: Any):
        self._filter = StopFilter(compiled)
        self._regex = tuple(regex)
        self._decode = decode
        self._ids: list[int] = list(prompt[-PROMPT_CONTEXT:]) if prompt else []
        # Decoding window: text of ids[_prefix:_read] is already fed; ids[_read:] are waiting
        # for a complete character.
        self._prefix = 0
        self._read = len(self._ids)
        # Characters of the window's new text already fed (a character still incomplete at
        # its end waits), and how many U+FFFD that incomplete tail decodes to.
        self._sent = 0
        self._tail = 0
        self._fed = 0
        self._emitted = 0
        #: Output tokens read so far.
        self.consumed = 0
        #: The output-id array read (SGLang replaces it when it restarts a request).
        self.source: Any = None
        self.fired: Fired | None = None

    def advance(self, output_ids: Sequence[int]) -> Fired | None:
        """Read the output tokens not read yet; the stop that fired, if one did."""
        if self.fired is not None:
            return self.fired
        total = len(output_ids)
        while self.consumed < total:
            token = int(output_ids[self.consumed])
            self.consumed += 1
            self._ids.append(token)
            text = self._new_text()
            if not text:
                continue
            out = self._filter.feed(text)
            self._fed += len(text)
            self._emitted += len(out)
            if self._filter.stopped:
                index = self._filter.stop_index
                matched = self._filter.stop_sequence
                assert index is not None and matched is not None
                # The detokenizer's text through this token ends with the incomplete tail too.
                drop = self._fed - self._emitted + self._tail
                self.fired = Fired(matched, self._regex[index], self.consumed, drop)
                return self.fired
        return None

    def _new_text(self) -> str:
        """The characters the last token completes, decoded with the tokens before it as
        context, as SGLang's (and vLLM's) incremental decoders do. A character split over
        tokens (the text ends in U+FFFD) belongs to the token that completes it; the complete
        text before it is fed at once, so a stop is found in the token that completes it."""
        ids = self._ids
        prefix_text = self._decode(ids[self._prefix : self._read])
        full = self._decode(ids[self._prefix :])
        start = len(prefix_text) + self._sent
        if full.endswith("\ufffd"):
            complete = full.rstrip("\ufffd")
            self._tail = len(full) - len(complete)
            new = complete[start:]
            self._sent += len(new)
            return new
        self._tail = 0
        if len(full) <= len(prefix_text):
            return ""
        self._prefix = self._read
        self._read = len(ids)
        self._sent = 0
        return full[start:]

    def held(self) -> bool:
        """Whether the step must be held back: the filter holds text (§2.5). An incomplete
        character needs no hold: SGLang's detokenizer never sends part of one."""
        if self.fired is not None:
            return False
        return bool(self._filter.pending)
