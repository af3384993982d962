"""A vLLM request's stop options: read, bounded and compiled once (contract §10, §10.2, §10.3).

Kept apart from :mod:`stopstream.vllm` and free of any vLLM import, so the rules for what a
request may ask for can be tested (and type-checked) without vLLM installed. A request's stops
are its own ``SamplingParams.stop`` followed by ``extra_args["stopstream"]["stop"]``; the
extra options arrive as a ``dict`` from Python, or as a JSON string of the same object from the
OpenAI-compatible server (whose ``vllm_xargs`` takes only strings, numbers and lists of them).

Any client can send these options, so everything is bounded before expensive work (:class:`Bounds`:
a default per bound, an environment variable to change it) and every error is a ``ValueError``
naming the option or the bound, which vLLM reports as a 400. Validation's result is what the
detokenizer uses: :func:`read_options` keeps the last lists it read (:data:`MEMO_ENTRIES`
entries, :data:`MEMO_BYTES` bytes of options and compiled lists at most), so the request's
own later read finds its options compiled.
"""

from __future__ import annotations

import json
import os
import re
import sys
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

from ._core import Regex, Stop, StopSet

__all__ = [
    "BOUND_ENV",
    "EXTRA_KEY",
    "VLLM",
    "Bounds",
    "Dialect",
    "Reasoning",
    "RequestStops",
    "read_options",
]

EXTRA_KEY = "stopstream"
_KNOWN = ("stop", "skip", "skip_until", "skip_reasoning")

StopItem = str | Stop | Regex


@dataclass(frozen=True)
class Bounds:
    """What one request may ask for; each default keeps the worst request's compile and
    per-step cost within a few milliseconds on one core (``docs/vllm.md`` has the figures).

    ``stops``: stops in all (the request's own ``stop`` included); ``stop_bytes``: UTF-8 bytes
    of every stop's text or pattern and every skip marker; ``regexes``: regex stops;
    ``pattern_bytes``: one pattern's bytes; ``regex_size``: one compiled pattern's heap (a
    pattern over it is rejected as soon as compiling passes it); ``skip_pairs``: ``skip``
    pairs; ``option_bytes``: the option's JSON text."""

    stops: int = 1024
    stop_bytes: int = 32 << 10
    regexes: int = 4
    pattern_bytes: int = 1024
    regex_size: int = 64 << 10
    skip_pairs: int = 16
    option_bytes: int = 128 << 10

    @classmethod
    def from_env(
        cls, environ: Mapping[str, str] = os.environ, names: Mapping[str, str] | None = None
    ) -> tuple[Bounds, list[str]]:
        """The bounds set in ``environ`` (``names``, by default :data:`BOUND_ENV`, names the
        variables), and what was wrong with any value (that bound then keeps its default)."""
        values: dict[str, int] = {}
        problems: list[str] = []
        for f in fields(cls):
            name = (names or BOUND_ENV)[f.name]
            raw = environ.get(name)
            if raw is None or not raw.strip():
                continue
            try:
                value = int(raw)
            except ValueError:
                value = 0
            if value < 1:
                problems.append(f"{name}={raw!r} is not a positive whole number")
                continue
            values[f.name] = value
        return cls(**values), problems


#: The environment variable of each bound.
BOUND_ENV = {
    "stops": "STOPSTREAM_VLLM_MAX_STOPS",
    "stop_bytes": "STOPSTREAM_VLLM_MAX_STOP_BYTES",
    "regexes": "STOPSTREAM_VLLM_MAX_REGEXES",
    "pattern_bytes": "STOPSTREAM_VLLM_MAX_PATTERN_BYTES",
    "regex_size": "STOPSTREAM_VLLM_MAX_REGEX_SIZE",
    "skip_pairs": "STOPSTREAM_VLLM_MAX_SKIP_PAIRS",
    "option_bytes": "STOPSTREAM_VLLM_MAX_OPTION_BYTES",
}


@dataclass(frozen=True)
class Dialect:
    """Where an engine's requests carry these options (``field``: the mapping of
    per-request extras, ``extra_args`` in vLLM) and the prefix of its bounds' environment
    variables, for messages that name what the operator sees."""

    field: str = "extra_args"
    prefix: str = "STOPSTREAM_VLLM_"

    @property
    def option(self) -> str:
        """The option as a client names it, e.g. ``extra_args["stopstream"]``."""
        return f'{self.field}["{EXTRA_KEY}"]'

    def env(self, bound: str) -> str:
        """The environment variable of a bound (a field of :class:`Bounds`)."""
        return self.prefix + BOUND_ENV[bound].removeprefix("STOPSTREAM_VLLM_")

    def env_names(self) -> dict[str, str]:
        """Every bound's environment variable (for :meth:`Bounds.from_env`)."""
        return {name: self.env(name) for name in BOUND_ENV}


#: vLLM's: ``SamplingParams.extra_args``, ``STOPSTREAM_VLLM_MAX_*``.
VLLM = Dialect()


def _over(what: str, got: int, bound: str, limit: int, d: Dialect = VLLM) -> ValueError:
    return ValueError(f"{what}: {got}, over the bound of {limit} ({d.env(bound)})")


@dataclass(frozen=True)
class Reasoning:
    """The server's reasoning markers (its ``--reasoning-parser``'s), and whether
    ``skip_reasoning`` is on for requests that do not say."""

    start: str | None = None
    end: str | None = None
    default: bool = False


@dataclass(frozen=True)
class RequestStops:
    """Everything the detokenizer needs: the stops in order (the request's own first), the
    request's ``include_stop_str_in_output``, the skip options, ``min_tokens``, and the list
    compiled with them (``compiled``: plain stops given as ``Stop`` items where ``min_tokens``
    needs the composed matcher's quiet mode)."""

    stops: tuple[StopItem, ...]
    include_stop: bool
    skip: tuple[tuple[str, str], ...] | None
    skip_until: str | None
    min_tokens: int
    compiled: StopSet
    #: Whether the server's reasoning markers are in ``skip`` (``skip_until`` then waits for
    #: the end marker when the prompt opens the reasoning: see :meth:`opened_in_reasoning`).
    reasoning: Reasoning | None = None

    def opened_in_reasoning(self) -> RequestStops:
        """These options for a prompt that ends inside the reasoning (the template opened it):
        the stops wait for the end marker."""
        if self.reasoning is None or self.skip_until is not None:
            return self
        key = ("opened", self)
        hit = _MEMO.get(key)
        if hit is not None:
            return hit
        until = self.reasoning.end
        compiled = StopSet(
            self.compiled.stops, include_stop=self.include_stop, skip=self.skip, skip_until=until
        )
        opened = RequestStops(
            self.stops, self.include_stop, self.skip, until, self.min_tokens, compiled, None
        )
        _remember(key, opened, 0)
        return opened


def _stop_item(item: object, where: str, bounds: Bounds, d: Dialect = VLLM) -> StopItem:
    if isinstance(item, str):
        if not item:
            raise ValueError(f"{where}: a stop cannot be empty")
        return item
    if isinstance(item, dict):
        unknown = set(item) - {"text", "regex", "include"}
        if unknown or ("text" in item) == ("regex" in item):
            raise ValueError(
                f'{where}: a stop object has "text" or "regex" (one of them) and optionally '
                f'"include", got keys {sorted(map(str, item))[:4]}'
            )
        include = item.get("include")
        if include is not None and not isinstance(include, bool):
            raise ValueError(f'{where}: "include" must be a boolean, got {type(include).__name__}')
        value = item.get("text", item.get("regex"))
        if not isinstance(value, str) or not value:
            raise ValueError(f"{where}: the stop's text must be a non-empty string")
        if "text" in item:
            return Stop(value, include=include)
        size = len(value.encode("utf-8", "surrogatepass"))
        if size > bounds.pattern_bytes:
            raise _over(f"{where}: pattern bytes", size, "pattern_bytes", bounds.pattern_bytes, d)
        try:
            return Regex(value, include=include, size_limit=bounds.regex_size)
        except ValueError as e:  # a lone surrogate
            raise ValueError(f"{where}: {e}") from None
    raise ValueError(f"{where}: a stop is a string or an object, got {type(item).__name__}")


def _extra(
    params: Any, bounds: Bounds, d: Dialect = VLLM
) -> tuple[dict[str, Any], str | None] | None:
    """The request's stopstream options as an object, with their JSON text when they came as
    one (the memo's key)."""
    extra_args = getattr(params, d.field, None)
    if not extra_args or EXTRA_KEY not in extra_args:
        return None
    raw = extra_args[EXTRA_KEY]
    text: str | None = None
    if isinstance(raw, str):
        text = raw
        # Characters first: no string has more characters than UTF-8 bytes.
        if len(raw) > bounds.option_bytes or len(raw.encode("utf-8", "surrogatepass")) > (
            bounds.option_bytes
        ):
            size = len(raw.encode("utf-8", "surrogatepass"))
            raise _over(f"{d.option}: JSON bytes", size, "option_bytes", bounds.option_bytes, d)
        try:
            raw = json.loads(raw)
        except RecursionError:
            raise ValueError(
                f"{d.option}: nested too deeply (the options are at most 3 levels deep)"
            ) from None
        except ValueError as e:
            raise ValueError(f"{d.option}: not valid JSON ({e})") from None
    if not isinstance(raw, dict):
        raise ValueError(f"{d.option}: expected an object, got {type(raw).__name__}")
    unknown = sorted(str(k) for k in raw if k not in _KNOWN)
    if unknown:
        raise ValueError(f"{d.option}: unknown option {unknown[0]!r} (known: {', '.join(_KNOWN)})")
    return raw, text


# The options read last, by their JSON text and the request's own fields: validation reads and
# compiles a request's options, and its detokenizer (after vLLM copies the request) finds them
# here. Bounded in entries and in bytes: the option text and the compiled list an entry holds
# (``sys.getsizeof`` of a ``StopSet`` counts its automata). A list at every bound compiles to
# about 4.2 MiB, so the bytes keep a few of those, or many lists of ordinary size.
_MEMO: OrderedDict[Any, RequestStops] = OrderedDict()
_MEMO_SIZE: dict[Any, int] = {}
MEMO_ENTRIES = 64
MEMO_BYTES = 16 << 20
_memo_bytes = 0


def _remember(key: Any, value: RequestStops, text_bytes: int) -> None:
    global _memo_bytes
    size = text_bytes + sys.getsizeof(value.compiled)
    if size > MEMO_BYTES // 2:
        return
    if key in _MEMO:
        _MEMO.move_to_end(key)
        return
    _MEMO[key] = value
    _MEMO_SIZE[key] = size
    _memo_bytes += size
    while len(_MEMO) > MEMO_ENTRIES or _memo_bytes > MEMO_BYTES:
        old, _ = _MEMO.popitem(last=False)
        _memo_bytes -= _MEMO_SIZE.pop(old)


def forget() -> None:
    """Empty the memo (tests measure what a request leaves behind)."""
    global _memo_bytes
    _MEMO.clear()
    _MEMO_SIZE.clear()
    _memo_bytes = 0


def read_options(
    params: Any,
    bounds: Bounds | None = None,
    reasoning: Reasoning | None = None,
    dialect: Dialect = VLLM,
) -> RequestStops | None:
    """The stop options of a request's ``SamplingParams``, or ``None`` when it has neither stop
    strings, stopstream options nor a server default that applies to it (vLLM's own
    detokenizer then serves it untouched). Raises ``ValueError`` naming a bad option or the
    bound it passes."""
    bounds = bounds or Bounds()
    found = _extra(params, bounds, dialect)
    own = params.stop
    own_stops: tuple[str, ...] = (own,) if isinstance(own, str) else tuple(own or ())
    if not own_stops and found is None:
        return None
    include = bool(params.include_stop_str_in_output)
    min_tokens = int(params.min_tokens or 0)
    key: Any = None
    if found is None or found[1] is not None:
        text = found[1] if found is not None else None
        key = (own_stops, text, include, min_tokens, reasoning, dialect)
        try:
            hit = _MEMO.get(key)
        except TypeError:  # an unhashable own stop: read below, where it is an error
            key, hit = None, None
        if hit is not None:
            _MEMO.move_to_end(key)
            return hit
    extra = found[0] if found is not None else {}
    options = _read(own_stops, extra, include, min_tokens, bounds, reasoning, dialect)
    if key is not None:
        _remember(key, options, len(found[1] or "") if found else 0)
    return options


def _read(
    own_stops: tuple[str, ...],
    extra: dict[str, Any],
    include: bool,
    min_tokens: int,
    bounds: Bounds,
    reasoning: Reasoning | None,
    d: Dialect = VLLM,
) -> RequestStops:
    total = 0
    for i, s in enumerate(own_stops):
        if not isinstance(s, str) or not s:
            raise ValueError(f"stop[{i}]: a stop is a non-empty string")
        total += len(s.encode("utf-8", "surrogatepass"))
    more = extra.get("stop", [])
    if isinstance(more, str):
        more = [more]
    if not isinstance(more, list):
        raise ValueError(f'{d.option}["stop"]: expected a list, got {type(more).__name__}')
    count = len(own_stops) + len(more)
    if count > bounds.stops:
        raise _over(f"{d.option}: stops", count, "stops", bounds.stops, d)
    stops: list[StopItem] = list(own_stops)
    regexes = 0
    for i, s in enumerate(more):
        item = _stop_item(s, f'{d.option}["stop"][{i}]', bounds, d)
        text = item if isinstance(item, str) else item.pattern if isinstance(item, Regex) else None
        if text is None:
            assert isinstance(item, Stop)
            text = item.text
        total += len(text.encode("utf-8", "surrogatepass"))
        if isinstance(item, Regex):
            regexes += 1
            if regexes > bounds.regexes:
                raise _over(f"{d.option}: regex stops", regexes, "regexes", bounds.regexes, d)
        stops.append(item)
    skip = _skip(extra.get("skip"), bounds, d)
    until = extra.get("skip_until")
    if until is not None and (not isinstance(until, str) or not until):
        raise ValueError(f'{d.option}["skip_until"]: expected a non-empty string')
    for marker in [m for pair in skip or () for m in pair] + ([until] if until else []):
        total += len(marker.encode("utf-8", "surrogatepass"))
    if total > bounds.stop_bytes:
        raise _over(f"{d.option}: stop bytes", total, "stop_bytes", bounds.stop_bytes, d)
    asked = extra.get("skip_reasoning")
    if asked is not None and not isinstance(asked, bool):
        raise ValueError(f'{d.option}["skip_reasoning"]: expected a boolean')
    markers: Reasoning | None = None
    if asked or (asked is None and reasoning is not None and reasoning.default):
        if reasoning is not None and reasoning.start and reasoning.end:
            markers = reasoning
            skip = ((reasoning.start, reasoning.end), *(skip or ()))
        elif asked and skip is None and until is None:
            raise ValueError(
                f'{d.option}["skip_reasoning"]: the server has no reasoning parser '
                "(--reasoning-parser) to take the markers from; give skip or skip_until"
            )
    if min_tokens and any(isinstance(s, Regex) for s in stops):
        raise ValueError(f"{d.option}: regex stops cannot be combined with min_tokens")
    quiet = min_tokens > 0 and bool(stops)
    # Quiet needs the composed matcher: plain stops go in as Stop items.
    items = [Stop(s) if quiet and isinstance(s, str) else s for s in stops]
    try:
        compiled = StopSet(items, include_stop=include, skip=skip, skip_until=until)
    except (TypeError, ValueError, MemoryError) as e:
        raise ValueError(_compile_error(str(e), len(own_stops), d)) from None
    return RequestStops(tuple(stops), include, skip, until, min_tokens, compiled, markers)


def _compile_error(message: str, own: int, d: Dialect = VLLM) -> str:
    """The compiler's message, naming the option of the stop it names."""
    m = re.match(r"regex stop at position (\d+) is invalid: ", message)
    if m is None:
        return f"{d.option}: {message}"
    i = int(m.group(1))
    where = f"stop[{i}]" if i < own else f'{d.option}["stop"][{i - own}]'
    rest = message[m.end() :]
    if "size limit" in rest:
        rest += f" ({d.env('regex_size')})"
    return f"{where}: invalid pattern: {rest}"


def _skip(value: object, bounds: Bounds, d: Dialect = VLLM) -> tuple[tuple[str, str], ...] | None:
    if value is None:
        return None
    where = f'{d.option}["skip"]'
    if not isinstance(value, list):
        raise ValueError(f"{where}: expected a list of [open, close] pairs")
    if len(value) > bounds.skip_pairs:
        raise _over(f"{where}: pairs", len(value), "skip_pairs", bounds.skip_pairs, d)
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
