"""The stop list and skip regions a reference filter takes (contract §3, §6.1, §6.4): the
stop types, and validation that raises as the contract requires."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterable, Sequence
from typing import Literal

StopReason = Literal["stop_sequence", "end"]
"""Why a filter ended: a stop sequence fired, or ``finish()`` was called without one."""


@dataclasses.dataclass(frozen=True)
class Stop:
    """A literal stop with its own include flag (``None``: the filter's ``include_stop``)."""

    text: str
    include: bool | None = None


@dataclasses.dataclass(frozen=True)
class Regex:
    """A pattern stop, in Python :mod:`re` syntax (see the package docstring).

    ``max_len`` bounds its matches in characters (``None``: unbounded), which only limits how far
    back the holdback search starts.
    """

    pattern: str
    include: bool | None = None
    max_len: int | None = None


StopItem = str | Stop | Regex
Stops = StopItem | Iterable[StopItem] | None
"""What the ``stops`` argument accepts (contract §3, §6.1)."""

DEFAULT_ALPHABET = "ab\u00e9- \n1"
"""Characters the reference tries as continuations (see the package docstring)."""

_ERRORS_MODES = ("strict", "replace")


def validate_stops(stops: object) -> tuple[str, ...]:
    """Like :func:`validate_items` for lists of plain ``str`` only (contract §3)."""
    items = validate_items(stops)
    for position, item in enumerate(items):
        if not isinstance(item, str):
            raise TypeError(f"stops[{position}] must be a str, not {type(item).__name__}")
    return tuple(item for item in items if isinstance(item, str))


def validate_items(stops: object) -> tuple[StopItem, ...]:
    """Normalize ``stops`` to a tuple, raising as contract §3 requires.

    ``None`` means no stops; a single ``str`` is one stop; anything else must be an iterable of
    non-empty ``str``. A non-``str`` item is a ``TypeError`` and an empty string a
    ``ValueError``; both messages name the item's position.
    """
    if stops is None:
        return ()
    wrong_type = f"stops must be None, a str or an iterable of str, not {type(stops).__name__}"
    if isinstance(stops, (str, Stop, Regex)):
        items: list[object] = [stops]
    elif isinstance(stops, (bytes, bytearray, memoryview)):
        # Iterating bytes yields ints; say what is wrong with the argument as a whole.
        raise TypeError(wrong_type)
    else:
        try:
            iterator = iter(stops)  # type: ignore[call-overload]
        except TypeError:
            raise TypeError(wrong_type) from None
        items = list(iterator)
    result: list[StopItem] = []
    for position, item in enumerate(items):
        if not isinstance(item, (str, Stop, Regex)):
            raise TypeError(
                f"stops[{position}] must be a str, Stop or Regex, not {type(item).__name__}"
            )
        if (isinstance(item, str) and not item) or (isinstance(item, Stop) and not item.text):
            raise ValueError(f"stops[{position}] is an empty string")
        if isinstance(item, Regex):
            try:
                compiled = re.compile(item.pattern)
            except re.error as error:
                raise ValueError(f"regex stop at position {position} is invalid: {error}") from None
            probes = ("", "a", "-", "a-", "-a", "\n", "a\na")
            if any(
                (m := compiled.match(p, i)) is not None and m.end() == i
                for p in probes
                for i in range(len(p) + 1)
            ):
                raise ValueError(
                    f"regex stop at position {position} is invalid: "
                    "the pattern matches the empty string"
                )
        result.append(item)
    return tuple(result)


def validate_skip(
    skip: object, skip_until: object
) -> tuple[tuple[tuple[str, str], ...], str | None]:
    """Normalize the skip-region options (contract §6.4), raising for bad ones."""
    if skip_until is not None:
        if not isinstance(skip_until, str):
            raise TypeError(f"skip_until must be a str or None, not {type(skip_until).__name__}")
        if not skip_until:
            raise ValueError("skip_until is empty")
    pairs: list[tuple[str, str]] = []
    if skip is not None:
        if isinstance(skip, (str, bytes)) or not isinstance(skip, Iterable):
            raise TypeError(
                f"skip must be an iterable of (open, close) pairs, not {type(skip).__name__}"
            )
        for position, pair in enumerate(skip):
            if not (isinstance(pair, Sequence) and len(pair) == 2):
                raise TypeError(f"skip[{position}] must be an (open, close) pair of str")
            opening, closing = pair
            if not isinstance(opening, str) or not isinstance(closing, str):
                raise TypeError(f"skip[{position}] must be an (open, close) pair of str")
            if not opening:
                raise ValueError(f"skip[{position}] opening marker is empty")
            if not closing:
                raise ValueError(f"skip[{position}] closing marker is empty")
            pairs.append((opening, closing))
    return tuple(pairs), skip_until
