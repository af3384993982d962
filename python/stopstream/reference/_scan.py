"""The rules of stops beyond literals and of skip regions (contract §6), over a whole text."""

from __future__ import annotations

import re

from stopstream.reference._items import Regex, Stop, StopItem

Win = tuple[int, int, int]
"""A match that fires: ``(start, end, index)``."""


class _Scan:
    """The rules of contract §6 over a whole text, read the slow and obvious way."""

    def __init__(
        self,
        items: tuple[StopItem, ...],
        include_stop: bool,
        skip: tuple[tuple[str, str], ...],
        skip_until: str | None,
        alphabet: str,
        horizon: int,
    ) -> None:
        self.items = items
        self.include = [
            include_stop if isinstance(i, str) or i.include is None else i.include for i in items
        ]
        self.skip = skip
        self.skip_until = skip_until
        self.alphabet = alphabet
        self.horizon = horizon
        # A match of ``P`` ending exactly at ``e`` with the character at ``e`` visible: search
        # ``text[:e + 1]`` for ``P`` followed by exactly one character; at the end of the text,
        # ``P`` followed by the end.
        self.before_char: list[re.Pattern[str] | None] = []
        self.before_end: list[re.Pattern[str] | None] = []
        for item in items:
            regex = item.pattern if isinstance(item, Regex) else None
            if regex is None:
                self.before_char.append(None)
                self.before_end.append(None)
            else:
                self.before_char.append(re.compile(f"(?:{regex})(?=[\\s\\S]\\Z)"))
                self.before_end.append(re.compile(f"(?:{regex})\\Z"))

    def literal(self, index: int) -> str | None:
        item = self.items[index]
        return item if isinstance(item, str) else item.text if isinstance(item, Stop) else None

    def ends_at(self, index: int, text: str, start: int, end: int) -> bool:
        """Whether stop ``index`` matches ``text[start:end]``, ``text`` being the whole stream."""
        literal = self.literal(index)
        if literal is not None:
            return text[start:end] == literal
        if end < len(text):
            pattern = self.before_char[index]
            return pattern is not None and pattern.match(text, start, end + 1) is not None
        pattern = self.before_end[index]
        return pattern is not None and pattern.match(text, start) is not None

    def first_win(self, text: str, floor: int = 0) -> tuple[Win | None, int | None]:
        """The stop that fires in ``text`` read as a whole stream, and where matching may start
        at its end (``None``: inside a region or before the ``skip_until`` marker). No match
        ending at or before ``floor`` fires (a quiet stream's)."""
        segment = 0
        if self.skip_until is not None:
            found = text.find(self.skip_until)
            if found < 0:
                return None, None
            segment = found + len(self.skip_until)
        end = segment + 1
        while end <= len(text):
            opening = [
                (-len(o), k)
                for k, (o, _) in enumerate(self.skip)
                if end - len(o) >= segment and text.startswith(o, end - len(o))
            ]
            if opening:
                close = self.skip[min(opening)[1]][1]
                found = text.find(close, end)
                if found < 0:
                    return None, None
                segment = found + len(close)
                end = segment + 1
                continue
            best: Win | None = None
            for index in range(len(self.items) if end > floor else 0):
                literal = self.literal(index)
                # A literal can only start at one place; a pattern anywhere.
                starts = (
                    range(segment, end)
                    if literal is None
                    else range(max(segment, end - len(literal)), end)
                )
                for start in starts:
                    if self.ends_at(index, text, start, end):
                        if best is None or (start, index) < (best[0], best[2]):
                            best = (start, end, index)
                        break
            if best is not None:
                return best, segment
            end += 1
        return None, segment

    def fired(self, text: str, floor: int = 0) -> Win | None:
        """The stop that has fired once ``text`` was received (the stream not finished)."""
        seen: Win | None = None
        for following in [*self.alphabet, ""]:
            win, _ = self.first_win(text + following, floor)
            if win is None or win[1] > len(text) or (seen is not None and win != seen):
                return None
            seen = win
        return seen

    def continuations(self, length: int) -> list[str]:
        result = [""]
        for _ in range(length):
            result = [c + a for c in result for a in self.alphabet]
        return result

    def holdback_start(self, text: str, floor: int = 0) -> int:
        """Where the held-back text starts (``len(text)``: nothing held), no stop having fired."""
        _, segment = self.first_win(text, floor)
        if segment is None:
            return len(text)
        for start in range(segment, len(text)):
            have = len(text) - start
            for index, item in enumerate(self.items):
                if self.include[index]:
                    continue
                literal = self.literal(index)
                if literal is not None:
                    # A whole stop here is held while it may still fire (a regex may beat it),
                    # not once it ended too early to (at or before the floor).
                    whole_late = len(literal) == have and len(text) > floor
                    if (len(literal) > have or whole_late) and literal.startswith(text[start:]):
                        return start
                    continue
                assert isinstance(item, Regex)
                if item.max_len is not None and have > item.max_len:
                    continue
                longest = self.horizon if item.max_len is None else item.max_len - have
                for extra in range(min(longest, self.horizon) + 1):
                    for more in self.continuations(extra):
                        for following in [*self.alphabet, ""]:
                            stream = text + more + following
                            if self.ends_at(index, stream, start, len(text) + extra):
                                return start
        return len(text)
