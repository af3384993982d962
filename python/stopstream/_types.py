"""The type aliases of the public API, exported as ``stopstream.Stops``, ``StopItem``,
``SkipRegions``, ``StopReason`` and ``TokenStopReason``; the stubs of ``stopstream._core`` and the
Python modules use these."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Literal, TypeAlias

from stopstream._core import Regex, Stop, StopSet

__all__ = ["SkipRegions", "StopItem", "StopReason", "Stops", "TokenStopReason"]

StopItem: TypeAlias = str | Stop | Regex
"""One stop of a list: a literal ``str``, a ``Stop`` (a literal with its own include flag) or a
``Regex``. A filter's ``stops`` property returns them as given."""

SkipRegions: TypeAlias = Iterable[tuple[str, str]] | None
"""What every ``skip`` parameter takes: ``(open, close)`` pairs of literals, each a region the
stops do not see, from ``open`` through ``close`` (contract §6.4); ``None``: no region."""

Stops: TypeAlias = StopItem | Iterable[StopItem] | StopSet | None
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
