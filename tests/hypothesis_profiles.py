"""Hypothesis profiles: how many examples the property tests run.

``STOPSTREAM_HYPOTHESIS_PROFILE`` picks one (``tests/conftest.py`` loads it):

- ``dev`` (the default: the README's test command, a developer's run): a quarter of the
  examples;
- ``ci`` (``.ci/run``): the full counts, the ones each test names (and Hypothesis's own 100
  where a test names none).

A test that names its count writes ``max_examples=examples(N)``: ``N`` under ``ci``, scaled by
the loaded profile otherwise.
"""

from __future__ import annotations

import os

from hypothesis import settings

#: The examples of a test that names no count, under ``ci``; counts named are relative to it.
FULL = 100

settings.register_profile("ci", max_examples=FULL)
settings.register_profile("dev", max_examples=FULL // 4)

PROFILE = os.environ.get("STOPSTREAM_HYPOTHESIS_PROFILE", "dev")
settings.load_profile(PROFILE)


def examples(full: int) -> int:
    """The examples to run for a test that runs ``full`` under the ``ci`` profile."""
    return max(1, full * settings().max_examples // FULL)
