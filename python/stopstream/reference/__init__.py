"""Pure-Python reference implementation of the stopstream contract (contract §2-4, §6, §7).

This package is the executable statement of the matching rules, written to be plainly correct
rather than fast: every ``feed`` re-examines everything received so far. The compiled filters in
:mod:`stopstream` are tested against it, and benchmarks use it as a baseline. It depends on
nothing but the standard library (in particular not on ``stopstream._core``).

The rules, for ``T`` = all text received so far and ``S`` = the stop list:

* The stop fires at the smallest end position at which any stop ends in ``T``; among the stops
  ending there the longest wins; among equal strings the first listed.
* Without ``include_stop`` the output is everything before the winning match; with it,
  everything through the match's end. Nothing after the match is ever emitted.
* While no stop has fired, the total emitted after each ``feed`` is ``T`` minus its longest
  suffix that is a proper prefix of some stop (all of ``T`` with ``include_stop``); bytes input
  additionally holds back an incomplete trailing UTF-8 sequence.

Beyond literal stops (contract §6), stops may be :class:`Stop` (a literal with its own include
flag) and :class:`Regex` (a pattern, here in Python :mod:`re` syntax: the tests generate pattern
pairs on which Python's and Rust's engines agree), and a filter may have skip regions. Those
rules are implemented by :class:`_Scan`, which re-reads the whole text on every call:

* the winner is the first end position at which a skip marker or a stop ends (a marker first),
  with assertions evaluated on the whole text; a stop has fired once every continuation of the
  text (each character of ``alphabet``, or the end of the stream) gives the same winner ending
  within the text;
* the holdback is the earliest start ``p`` from which some continuation (up to ``horizon``
  characters of ``alphabet``, then one more or the end) gives a flag-off stop a match.

Both quantify over ``alphabet``: the reference is exact for stops whose behaviour every
character outside it imitates, which is how the tests choose it.

Decoding of bytes input uses CPython's incremental UTF-8 decoder as the oracle, with one
correction: CPython's decoder keeps ``ED A0``..``ED BF`` (the first two bytes of an encoded
surrogate) back as if incomplete, although no byte can complete them into well-formed UTF-8
(Unicode, Table 3-7). Here an incomplete tail is only a proper prefix of a well-formed sequence,
so such bytes are invalid as soon as they arrive (the U+FFFD count in ``"replace"`` mode is the
same either way).
"""

from __future__ import annotations

# One module per reference; their shared pieces are `_items` (the stop list), `_literal` and
# `_scan` (the rules) and `_text` (the matching state). A name imported `as` itself is outside
# `__all__` yet importable, as it was when the references were one module.
from stopstream.reference._bytes import ReferenceByteStopFilter
from stopstream.reference._items import DEFAULT_ALPHABET as DEFAULT_ALPHABET
from stopstream.reference._items import Regex, Stop, StopReason, validate_stops
from stopstream.reference._items import StopItem as StopItem
from stopstream.reference._items import Stops as Stops
from stopstream.reference._items import validate_items as validate_items
from stopstream.reference._items import validate_skip as validate_skip
from stopstream.reference._literal import find_stop, held_suffix_length
from stopstream.reference._scan import Win as Win
from stopstream.reference._text import ReferenceStopFilter, reference_truncate
from stopstream.reference._tokenizer import reference_tokenizer_tokens
from stopstream.reference._tokens import ReferenceTokenStopFilter

__all__ = [
    "ReferenceByteStopFilter",
    "ReferenceStopFilter",
    "ReferenceTokenStopFilter",
    "Regex",
    "Stop",
    "StopReason",
    "find_stop",
    "held_suffix_length",
    "reference_tokenizer_tokens",
    "reference_truncate",
    "validate_stops",
]


def __dir__() -> list[str]:
    # The API only: not this package's imports, modules and helpers.
    return sorted(__all__)
