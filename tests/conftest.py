"""The test suite's shared set-up: the Hypothesis profile (see ``hypothesis_profiles``)."""

from __future__ import annotations

import hypothesis_profiles  # noqa: F401  (loads the profile before any test module is imported)
