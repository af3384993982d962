"""The implementations under test: the compiled ``stopstream`` and the pure-Python reference.

Tests that state the contract directly (expected values written out by hand) run against both.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

import stopstream
from stopstream.reference import (
    ReferenceByteStopFilter,
    ReferenceStopFilter,
    reference_truncate,
)


class FilterState(Protocol):
    """The read-only attributes shared by both filter kinds."""

    @property
    def stops(self) -> tuple[object, ...]: ...
    @property
    def include_stop(self) -> bool: ...
    @property
    def stopped(self) -> bool: ...
    @property
    def stop_sequence(self) -> str | None: ...
    @property
    def stop_index(self) -> int | None: ...
    @property
    def stop_reason(self) -> str | None: ...


class StrFilter(FilterState, Protocol):
    """``StopFilter``'s API."""

    def feed(self, text: str, /) -> str: ...
    def finish(self) -> str: ...
    def reset(self) -> None: ...
    @property
    def pending(self) -> str: ...


class ByteFilter(FilterState, Protocol):
    """``ByteStopFilter``'s API."""

    def feed(self, data: bytes | bytearray | memoryview, /) -> bytes: ...
    def finish(self) -> bytes: ...
    def reset(self) -> None: ...
    @property
    def pending(self) -> bytes: ...


@dataclass(frozen=True)
class Implementation:
    """One implementation of the contract's synchronous API."""

    name: str
    str_filter: Callable[..., StrFilter]
    byte_filter: Callable[..., ByteFilter]
    truncate: Callable[..., tuple[str, str | None]]

    def __str__(self) -> str:
        return self.name


REFERENCE = Implementation(
    "reference", ReferenceStopFilter, ReferenceByteStopFilter, reference_truncate
)
COMPILED = Implementation(
    "stopstream", stopstream.StopFilter, stopstream.ByteStopFilter, stopstream.truncate
)
IMPLEMENTATIONS = [REFERENCE, COMPILED]
