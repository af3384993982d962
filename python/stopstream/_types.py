"""The type aliases of the public API, exported as ``stopstream.Stops``, ``StopReason`` and
``TokenStopReason``; the stubs of ``stopstream._core`` and the Python modules use these."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Literal, TypeAlias

from stopstream._core import Regex, Stop, StopSet

__all__ = ["StopReason", "Stops", "TokenStopReason"]

Stops: TypeAlias = str | Stop | Regex | Iterable[str | Stop | Regex] | StopSet | None
"""What every ``stops`` parameter takes: ``None`` (no stop), one ``str``, ``Stop`` or ``Regex``,
an iterable of them, or a compiled ``StopSet`` (whose options then apply)."""

StopReason: TypeAlias = Literal["stop_sequence", "end"]
"""Why a text filter or stream ended (its ``stop_reason``): a stop sequence fired, or the input
ended without one."""

BytesLike: TypeAlias = bytes | bytearray | memoryview
"""A bytes chunk: what every bytes input takes (not exported: ``bytes``, ``bytearray`` or
``memoryview``)."""

TokenStopReason: TypeAlias = Literal["stop_sequence", "stop_token", "end"]
"""Why a :class:`~stopstream.TokenStopFilter` ended: a stop sequence fired, a stop token id
came, or the input ended without either."""
