"""What the contract says a run gives, computed by ``stopstream.reference`` (plain Python, no
``stopstream._core``) over the unstopped decoding of each row.

Decoding: each id's bytes as the reference reads them from the tokenizer's JSON
(``reference_tokenizer_tokens``), special ids none, through CPython's incremental UTF-8 decoder
(``errors="replace"``). A stop token id ends the text there as the end of the stream does.
"""

from __future__ import annotations

import codecs
import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from stopstream.reference import ReferenceStopFilter, reference_tokenizer_tokens


@dataclass(frozen=True)
class Table:
    """Every id's bytes (``b""`` for special and unassigned ids)."""

    tokens: tuple[bytes, ...]

    @classmethod
    def of(cls, tokenizer: Any) -> Table:
        backend = tokenizer.backend_tokenizer
        tokens, special, _ = reference_tokenizer_tokens(
            json.loads(backend.to_str()),
            backend.get_vocab(with_added_tokens=True),
            backend.get_vocab_size(with_added_tokens=True),
        )
        table = [b"" if t is None else t for t in tokens]
        for i in special:
            table[i] = b""
        return cls(tuple(table))

    def pieces(self, ids: Sequence[int]) -> list[str]:
        """The text each id adds to the decoded stream (an incomplete character waits)."""
        decoder = codecs.getincrementaldecoder("utf-8")("replace")
        return [decoder.decode(self.tokens[i]) for i in ids]

    def text(self, ids: Sequence[int]) -> str:
        return bytes(b for i in ids for b in self.tokens[i]).decode("utf-8", "replace")


@dataclass(frozen=True)
class Expected:
    """One row's run by the reference."""

    emitted: tuple[str, ...]
    """The text emitted in total after each id (while the stream was open), then at the end."""
    taken: int
    """How many ids the stream consumed: through the one after which the stop fired."""
    text: str
    stop_sequence: str | None
    stop_index: int | None
    stop_reason: str
    on_id: bool
    """Whether the stream ended on an id (a stop fired, or a stop token id) rather than at the
    end of the stream."""


def expected(
    table: Table,
    ids: Sequence[int],
    stops: list[Any],
    *,
    include_stop: bool = False,
    skip: list[tuple[str, str]] | None = None,
    skip_until: str | None = None,
    stop_token_ids: frozenset[int] = frozenset(),
    alphabet: str,
    horizon: int = 4,
    every_id: bool = True,
) -> Expected:
    """The reference's run over ``ids``. With ``every_id`` the ids are fed one at a time and
    ``emitted`` has the output after each; without, the id after which the stop fires is found
    by bisection over prefixes fed whole (chunk invariance, contract §2.4, makes both the same
    run), and ``emitted`` is the final text only: a few scans of the text instead of one per id.
    """
    if not every_id:
        return _bisected(
            table, ids, stops, include_stop, skip, skip_until, stop_token_ids, alphabet, horizon
        )
    f = ReferenceStopFilter(
        stops, include_stop, skip=skip, skip_until=skip_until, alphabet=alphabet, horizon=horizon
    )
    decoder = codecs.getincrementaldecoder("utf-8")("replace")
    out = ""
    emitted: list[str] = []
    reason = None
    on_id = True
    taken = len(ids)
    for k, i in enumerate(ids):
        if i in stop_token_ids:
            out += f.feed(decoder.decode(b"", final=True)) + f.finish()
            reason = "stop_sequence" if f.stop_index is not None else "stop_token"
            taken = k + 1
            break
        out += f.feed(decoder.decode(table.tokens[i]))
        emitted.append(out)
        if f.stop_index is not None:
            reason = "stop_sequence"
            taken = k + 1
            break
    else:
        out += f.feed(decoder.decode(b"", final=True)) + f.finish()
        reason = "stop_sequence" if f.stop_index is not None else "end"
        on_id = False
    emitted.append(out)
    return Expected(tuple(emitted), taken, out, f.stop_sequence, f.stop_index, reason, on_id)


def _bisected(
    table: Table,
    ids: Sequence[int],
    stops: list[Any],
    include_stop: bool,
    skip: list[tuple[str, str]] | None,
    skip_until: str | None,
    stop_token_ids: frozenset[int],
    alphabet: str,
    horizon: int,
) -> Expected:
    def new() -> ReferenceStopFilter:
        return ReferenceStopFilter(
            stops,
            include_stop,
            skip=skip,
            skip_until=skip_until,
            alphabet=alphabet,
            horizon=horizon,
        )

    end = next((k for k, i in enumerate(ids) if i in stop_token_ids), len(ids))
    pieces = table.pieces(ids[:end])
    prefix = ["".join(pieces[:k]) for k in range(end + 1)]

    def fired(k: int) -> bool:
        f = new()
        f.feed(prefix[k])
        return f.stop_index is not None

    # The smallest k in 1..end whose prefix fires (firing is monotonic in k), or none.
    lo, hi = 1, end + 1
    while lo < hi:
        mid = (lo + hi) // 2
        if fired(mid):
            hi = mid
        else:
            lo = mid + 1
    f = new()
    if lo <= end:
        out = f.feed(prefix[lo])
        return Expected((out,), lo, out, f.stop_sequence, f.stop_index, "stop_sequence", True)
    tail = bytes(b for i in ids[:end] for b in table.tokens[i]).decode("utf-8", "replace")
    out = f.feed(tail) + f.finish()
    if end < len(ids):
        reason = "stop_sequence" if f.stop_index is not None else "stop_token"
        return Expected((out,), end + 1, out, f.stop_sequence, f.stop_index, reason, True)
    reason = "stop_sequence" if f.stop_index is not None else "end"
    return Expected((out,), len(ids), out, f.stop_sequence, f.stop_index, reason, False)
