"""Contract §2 for a list of plain ``str`` stops, read straight from its definitions."""

from __future__ import annotations


def find_stop(text: str, stops: tuple[str, ...]) -> tuple[int, int, int] | None:
    """Return ``(start, end, index)`` of the stop that fires in ``text``, or ``None``.

    The first occurrence of a stop is also the one that ends first (all its occurrences have the
    same length), so each stop only needs its first occurrence. The winner has the smallest end,
    then the greatest length (the earliest start), then the smallest index.
    """
    best: tuple[int, int, int] | None = None  # (end, -length, index): smallest wins
    for index, stop in enumerate(stops):
        start = text.find(stop)
        if start < 0:
            continue
        key = (start + len(stop), -len(stop), index)
        if best is None or key < best:
            best = key
    if best is None:
        return None
    end, negative_length, index = best
    return end + negative_length, end, index


def held_suffix_length(text: str, stops: tuple[str, ...]) -> int:
    """Length of the longest suffix of ``text`` that is a proper prefix of some stop."""
    longest_stop = max((len(stop) for stop in stops), default=0)
    for length in range(min(len(text), longest_stop - 1), 0, -1):
        suffix = text[len(text) - length :]
        if any(len(stop) > length and stop.startswith(suffix) for stop in stops):
            return length
    return 0
