"""A vLLM request's stop options, read and checked once (contract §10).

Kept apart from :mod:`stopstream.vllm` and free of any vLLM import, so the rules for what a
request may ask for can be tested (and type-checked) without vLLM installed. A request's stops
are its own ``SamplingParams.stop`` followed by ``extra_args["stopstream"]["stop"]``; the
extra options arrive as a ``dict`` from Python, or as a JSON string of the same object from the
OpenAI-compatible server (whose ``vllm_xargs`` takes only strings, numbers and lists of them).
Every error is a ``ValueError`` naming the option, which vLLM reports as a 400.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from ._core import Regex, Stop, StopFilter

__all__ = ["EXTRA_KEY", "RequestStops", "read_options"]

EXTRA_KEY = "stopstream"
_OPTION = f'extra_args["{EXTRA_KEY}"]'
_KNOWN = ("stop", "skip", "skip_until")
# One tuple per distinct stop list, shared by the requests that send it (the filter of a request
# in flight keeps its list: 72 bytes for 4 stops, a tenth of the request's state). Bounded: a
# server that sees many distinct lists starts over.
_SHARED: dict[tuple[Any, ...], tuple[Any, ...]] = {}
_SHARED_MAX = 1024


def _shared(stops: tuple[Any, ...]) -> tuple[Any, ...]:
    try:
        shared = _SHARED.get(stops)
    except TypeError:  # an unhashable item
        return stops
    if shared is not None:
        return shared
    if len(_SHARED) >= _SHARED_MAX:
        _SHARED.clear()
    _SHARED[stops] = stops
    return stops


StopItem = str | Stop | Regex


@dataclass(frozen=True)
class RequestStops:
    """Everything the detokenizer needs: the stops in order (the request's own first), the
    request's ``include_stop_str_in_output``, the skip options and ``min_tokens``."""

    stops: tuple[StopItem, ...]
    include_stop: bool
    skip: tuple[tuple[str, str], ...] | None
    skip_until: str | None
    min_tokens: int

    @property
    def has_regex(self) -> bool:
        """Whether a stop is a regex (which ``min_tokens`` does not combine with)."""
        return any(isinstance(s, Regex) for s in self.stops)


def _stop_item(item: object, where: str) -> StopItem:
    if isinstance(item, str):
        if not item:
            raise ValueError(f"{where}: a stop cannot be empty")
        return item
    if isinstance(item, dict):
        unknown = set(item) - {"text", "regex", "include"}
        if unknown or ("text" in item) == ("regex" in item):
            raise ValueError(
                f'{where}: a stop object has "text" or "regex" (one of them) and optionally '
                f'"include", got keys {sorted(item)}'
            )
        include = item.get("include")
        if include is not None and not isinstance(include, bool):
            raise ValueError(f'{where}: "include" must be a boolean, got {include!r}')
        value = item.get("text", item.get("regex"))
        if not isinstance(value, str) or not value:
            raise ValueError(f"{where}: the stop's text must be a non-empty string")
        if "text" in item:
            return Stop(value, include=include)
        regex = Regex(value, include=include)
        try:
            # The pattern is compiled by a filter: that is where a bad one is reported.
            StopFilter([regex])
        except ValueError as e:
            raise ValueError(f"{where}: {e}") from None
        return regex
    raise ValueError(f"{where}: a stop is a string or an object, got {type(item).__name__}")


def _extra(params: Any) -> dict[str, Any] | None:
    extra_args = getattr(params, "extra_args", None)
    if not extra_args or EXTRA_KEY not in extra_args:
        return None
    raw = extra_args[EXTRA_KEY]
    if isinstance(raw, str):
        try:
            raw = json.loads(raw)
        except ValueError as e:
            raise ValueError(f"{_OPTION}: not valid JSON ({e})") from None
    if not isinstance(raw, dict):
        raise ValueError(f"{_OPTION}: expected an object, got {type(raw).__name__}")
    unknown = sorted(set(raw) - set(_KNOWN))
    if unknown:
        raise ValueError(f"{_OPTION}: unknown option {unknown[0]!r} (known: {', '.join(_KNOWN)})")
    return raw


def read_options(params: Any) -> RequestStops | None:
    """The stop options of a request's ``SamplingParams``, or ``None`` when it has neither stop
    strings nor stopstream options (vLLM's own detokenizer then serves it untouched)."""
    extra = _extra(params)
    own = params.stop
    own_stops: list[str] = [own] if isinstance(own, str) else list(own or ())
    if not own_stops and extra is None:
        return None
    stops: list[StopItem] = list(own_stops)
    skip: tuple[tuple[str, str], ...] | None = None
    skip_until: str | None = None
    if extra is not None:
        more = extra.get("stop", [])
        if isinstance(more, str):
            more = [more]
        if not isinstance(more, list):
            raise ValueError(f'{_OPTION}["stop"]: expected a list, got {type(more).__name__}')
        stops.extend(_stop_item(s, f'{_OPTION}["stop"][{i}]') for i, s in enumerate(more))
        skip = _skip(extra.get("skip"))
        until = extra.get("skip_until")
        if until is not None and (not isinstance(until, str) or not until):
            raise ValueError(f'{_OPTION}["skip_until"]: expected a non-empty string')
        skip_until = until
    options = RequestStops(
        stops=_shared(tuple(stops)),
        include_stop=bool(params.include_stop_str_in_output),
        skip=skip,
        skip_until=skip_until,
        min_tokens=int(params.min_tokens or 0),
    )
    if options.min_tokens and options.has_regex:
        raise ValueError(f"{_OPTION}: regex stops cannot be combined with min_tokens")
    if extra is not None:
        # The filter's own checks (markers, patterns) run here, at validation, not in the
        # engine's output loop.
        try:
            StopFilter(stops, include_stop=options.include_stop, skip=skip, skip_until=skip_until)
        except (TypeError, ValueError) as e:
            raise ValueError(f"{_OPTION}: {e}") from None
    return options


def _skip(value: object) -> tuple[tuple[str, str], ...] | None:
    if value is None:
        return None
    where = f'{_OPTION}["skip"]'
    if not isinstance(value, list):
        raise ValueError(f"{where}: expected a list of [open, close] pairs")
    pairs: list[tuple[str, str]] = []
    for i, pair in enumerate(value):
        if (
            not isinstance(pair, list | tuple)
            or len(pair) != 2
            or not all(isinstance(m, str) and m for m in pair)
        ):
            raise ValueError(f"{where}[{i}]: expected [open, close], two non-empty strings")
        pairs.append((pair[0], pair[1]))
    return tuple(pairs)
