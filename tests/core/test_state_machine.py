"""Stateful differential tests: random interleavings of every filter call against the reference.

Each step does the same thing to the compiled filter and to the reference and compares what
came back (a value, or an exception of the same type) and every attribute afterwards. Steps
include wrong-type chunks, calls after ``finish`` and after a stop, ``reset``, invalid UTF-8
in both error modes, and reading ``pending`` at any point.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

import stopstream
from hypothesis_profiles import examples
from stopstream.reference import ReferenceByteStopFilter, ReferenceStopFilter
from strategies import BYTE_ALPHABET, INVALID_UTF8, STR_ALPHABET

WRONG_TYPES: list[object] = [None, 1, 1.5, ["a"], {"a": 1}, object()]


def _outcome(call: Callable[[], Any]) -> tuple[str, Any]:
    try:
        return ("ok", call())
    except (TypeError, ValueError) as exc:  # UnicodeDecodeError is a ValueError
        return ("raised", type(exc))


def _stops(alphabet: list[str]) -> st.SearchStrategy[list[str]]:
    word = st.lists(st.sampled_from(alphabet), min_size=1, max_size=4).map("".join)
    return st.lists(word, max_size=6)


class _Machine(RuleBasedStateMachine):
    real: Any
    ref: Any

    def same(self, name: str, call: Callable[[Any], Any]) -> None:
        got = _outcome(lambda: call(self.real))
        want = _outcome(lambda: call(self.ref))
        assert got == want, f"{name}: {got!r} != {want!r}"

    @rule()
    def finish(self) -> None:
        self.same("finish", lambda f: f.finish())

    @rule()
    def reset(self) -> None:
        self.same("reset", lambda f: f.reset())

    @rule(value=st.sampled_from(WRONG_TYPES))
    def feed_wrong_type(self, value: object) -> None:
        self.same("feed(wrong type)", lambda f: f.feed(value))

    @invariant()
    def attributes_agree(self) -> None:
        if not hasattr(self, "real"):
            return
        for name in ("stops", "include_stop", "stopped", "stop_sequence", "stop_index"):
            assert getattr(self.real, name) == getattr(self.ref, name), name
        assert self.real.stop_reason == self.ref.stop_reason
        assert self.real.pending == self.ref.pending


class StrMachine(_Machine):
    @initialize(stops=_stops(STR_ALPHABET), include_stop=st.booleans())
    def create(self, stops: list[str], include_stop: bool) -> None:
        self.real = stopstream.StopFilter(stops, include_stop)
        self.ref = ReferenceStopFilter(stops, include_stop)

    @rule(text=st.lists(st.sampled_from(STR_ALPHABET), max_size=6).map("".join))
    def feed(self, text: str) -> None:
        self.same("feed", lambda f: f.feed(text))

    @rule(data=st.sampled_from([b"a", bytearray(b"a"), memoryview(b"a")]))
    def feed_bytes_to_str_filter(self, data: object) -> None:
        self.same("feed(bytes)", lambda f: f.feed(data))


_byte_piece = st.one_of(
    st.sampled_from(BYTE_ALPHABET).map(str.encode),
    st.sampled_from(INVALID_UTF8),
)


class BytesMachine(_Machine):
    @initialize(
        stops=_stops(BYTE_ALPHABET),
        include_stop=st.booleans(),
        errors=st.sampled_from(["strict", "replace"]),
    )
    def create(self, stops: list[str], include_stop: bool, errors: str) -> None:
        self.real = stopstream.ByteStopFilter(stops, include_stop, errors)
        self.ref = ReferenceByteStopFilter(stops, include_stop, errors)

    @rule(
        pieces=st.lists(_byte_piece, max_size=4),
        cut=st.integers(0, 12),
        kind=st.sampled_from([bytes, bytearray, memoryview]),
    )
    def feed(self, pieces: list[bytes], cut: int, kind: Callable[[bytes], Any]) -> None:
        # Cut the joined pieces so characters are split across calls.
        data = b"".join(pieces)
        for part in (data[:cut], data[cut:]):
            self._feed_one(kind(part))

    def _feed_one(self, chunk: object) -> None:
        self.same("feed", lambda f: f.feed(chunk))

    @rule()
    def feed_str_to_byte_filter(self) -> None:
        self.same("feed(str)", lambda f: f.feed("a"))


TestStrMachine = StrMachine.TestCase
TestStrMachine.settings = settings(
    max_examples=examples(150), stateful_step_count=30, deadline=None
)
TestBytesMachine = BytesMachine.TestCase
TestBytesMachine.settings = settings(
    max_examples=examples(200), stateful_step_count=30, deadline=None
)
