"""Stop sequences for streaming LLM output: exact, incremental, minimal holdback, UTF-8 safe.

``StopFilter`` / ``ByteStopFilter`` are push filters (``feed`` a chunk, get what is safe to emit),
``wrap`` / ``awrap`` wrap a sync / async iterator of chunks, ``truncate`` cuts a whole text, and
``StopSet`` is a stop list compiled once, accepted wherever ``stops`` is. ``Stop`` (a literal
with its own include flag) and ``Regex`` (a pattern) mix with ``str`` in any stop list.
"""

from __future__ import annotations

import importlib
from types import ModuleType

from stopstream._aio import AsyncStopStream, awrap
from stopstream._core import (
    ByteStopFilter,
    Regex,
    Stop,
    StopFilter,
    StopSet,
    StopStream,
    TokenPiece,
    TokenStopFilter,
    __version__,
    feed_batch,
    truncate,
)
from stopstream._types import SkipRegions, StopItem, StopReason, Stops, TokenStopReason
from stopstream._vocab import Vocab
from stopstream._wrap import wrap

__all__ = [
    "AsyncStopStream",
    "ByteStopFilter",
    "Regex",
    "SkipRegions",
    "Stop",
    "StopFilter",
    "StopItem",
    "StopReason",
    "StopSet",
    "StopStream",
    "Stops",
    "TokenPiece",
    "TokenStopFilter",
    "TokenStopReason",
    "Vocab",
    "__version__",
    "awrap",
    "feed_batch",
    "truncate",
    "wrap",
]

# Imported on first use: the adapters need nothing until a stream of theirs is wrapped.
_SUBMODULES = ("anthropic", "openai", "providers", "sse")


def __getattr__(name: str) -> ModuleType:
    if name in _SUBMODULES:
        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    # The API only: not the private modules (`_core`, `_wrap`...) or this module's helpers.
    return sorted([*__all__, *_SUBMODULES])
