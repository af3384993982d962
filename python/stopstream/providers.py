"""Hybrid enforcement: send the upstream the stops it accepts, enforce every stop locally.

Providers cap the ``stop`` parameter (OpenAI takes 4 sequences, Gemini 5) and some models
reject it outright. ``split_stops`` splits a stop list into the part to send upstream and the
rest; the gateway sends the first part (so the upstream stops generating early when one of
those fires, which saves tokens) and applies the *whole* list locally with the adapters::

    from stopstream.providers import split_stops
    from stopstream.sse import awrap_openai

    stops = request["stop"]                      # any number of stops
    upstream, rest = split_stops(stops, "openai")  # at most 4 go upstream
    if upstream:
        request["stop"] = upstream
    else:
        request.pop("stop", None)
    ...                                            # forward the request
    body = awrap_openai(response.aiter_bytes(), stops)  # enforce all of them locally

When a stop sent upstream fires, the upstream cuts the text and finishes the choice itself
(``finish_reason: "stop"``; OpenAI does not say which stop, vLLM and Anthropic do) and the local
filter releases what it held back. The result is the one local enforcement alone would give,
except when a local-only stop would have completed inside the upstream's match: the upstream
cannot know it. With ``include_stop=True`` the upstream's stops are cut without their text, so
send nothing upstream (``limit=0``) when the stop text must be kept.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, NamedTuple

from stopstream._core import Regex, Stop, StopSet

if TYPE_CHECKING:
    from stopstream._core import _Stops as Stops

__all__ = ["STOP_LIMITS", "StopSplit", "split_stops"]

#: How many stop sequences each API accepts; ``"none"``: models that reject ``stop``.
STOP_LIMITS: dict[str, int] = {
    "openai": 4,
    "gemini": 5,
    "none": 0,
}


class StopSplit(NamedTuple):
    """``upstream``: the stops to send upstream; ``rest``: the ones only enforced locally."""

    upstream: list[str]
    rest: Sequence[str | Stop | Regex]


def split_stops(stops: Stops, limit: int | str | None) -> StopSplit:
    """Split ``stops`` into what the upstream accepts and the rest.

    ``stops``: ``None``, one ``str``, an iterable of ``str`` or a ``StopSet``, validated like
    everywhere in stopstream. ``limit``: how many stops the upstream accepts: an ``int`` (``0``
    for a model that rejects ``stop``), a provider name from ``STOP_LIMITS`` (``"openai"``: 4,
    ``"gemini"``: 5, ``"none"``: 0), or ``None`` for no limit.

    ``upstream`` holds the first ``limit`` distinct plain ``str`` stops in the order given
    (duplicates are sent once); ``rest`` holds the remaining distinct stops, and every ``Stop``
    and ``Regex`` (a provider can neither match a pattern nor keep a terminator). Enforce the
    full list locally.

    >>> split_stops(["a", "b", "a", "c", "d", "e"], "openai")
    StopSplit(upstream=['a', 'b', 'c', 'd'], rest=['e'])
    >>> split_stops("</answer>", 0)
    StopSplit(upstream=[], rest=['</answer>'])
    """
    if isinstance(limit, str):
        try:
            count: int | None = STOP_LIMITS[limit]
        except KeyError:
            known = ", ".join(repr(name) for name in STOP_LIMITS)
            raise ValueError(f"unknown provider {limit!r} (known: {known})") from None
    elif limit is None:
        count = None
    elif isinstance(limit, bool) or not isinstance(limit, int):
        raise TypeError(f"limit must be an int, a provider name or None, not {limit!r}")
    elif limit < 0:
        raise ValueError(f"limit must be >= 0, not {limit}")
    else:
        count = limit
    distinct = list(dict.fromkeys(StopSet(stops).stops))
    plain = [s for s in distinct if isinstance(s, str)]
    others = [s for s in distinct if not isinstance(s, str)]
    if count is None:
        return StopSplit(plain, others)
    return StopSplit(plain[:count], [*plain[count:], *others])
