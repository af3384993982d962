"""``stopstream.providers.split_stops``: what to send upstream, what to enforce only locally."""

from __future__ import annotations

import pytest

from stopstream.providers import STOP_LIMITS, StopSplit, split_stops

STOPS = ["</answer>", "\n\nUser:", "###", "END", "<|im_end|>", "Observation:"]


@pytest.mark.parametrize(
    ("limit", "upstream"),
    [("openai", 4), ("gemini", 5), ("none", 0), (0, 0), (2, 2), (10, 6), (None, 6)],
)
def test_split_by_limit(limit: int | str | None, upstream: int) -> None:
    split = split_stops(STOPS, limit)
    assert split == StopSplit(STOPS[:upstream], STOPS[upstream:])
    assert [*split.upstream, *split.rest] == STOPS


def test_duplicates_are_sent_once_and_inputs_are_validated() -> None:
    assert split_stops(["a", "a", "b", "a", "c"], 2) == (["a", "b"], ["c"])
    assert split_stops("one", "openai") == (["one"], [])
    assert split_stops(None, "openai") == ([], [])
    with pytest.raises(ValueError, match="position 1"):
        split_stops(["a", ""], 4)
    with pytest.raises(ValueError, match="unknown provider"):
        split_stops(STOPS, "mistral")
    with pytest.raises(ValueError, match=">= 0"):
        split_stops(STOPS, -1)
    with pytest.raises(TypeError):
        split_stops(STOPS, 1.5)  # type: ignore[arg-type]
    assert STOP_LIMITS["openai"] == 4 and STOP_LIMITS["gemini"] == 5
