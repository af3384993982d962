"""Stop sequences for streaming LLM output: exact, incremental, minimal holdback, UTF-8 safe.

``StopFilter`` / ``ByteStopFilter`` are push filters (``feed`` a chunk, get what is safe to emit),
``wrap`` / ``awrap`` wrap a sync / async iterator of chunks, and ``truncate`` cuts a whole text.
"""

from __future__ import annotations

from stopstream._aio import AsyncStopStream, awrap
from stopstream._core import ByteStopFilter, StopFilter, StopStream, truncate
from stopstream._wrap import wrap

__all__ = [
    "AsyncStopStream",
    "ByteStopFilter",
    "StopFilter",
    "StopStream",
    "awrap",
    "truncate",
    "wrap",
]
__version__ = "0.1.0"
