"""Plants mutants and runs the tests that must catch them: the one runner behind each engine's
table (`tests_vllm/mutants.py`, `tests_sglang/mutants.py`, `tests_transformers/mutants.py`).

A table entry is `(name, path, a, b[, a2, b2 ...][, pytest_args])`: in the file at `path`, each
`a` (found exactly once) becomes its `b`; then `pytest -x -q` runs in the table's folder with
`pytest_args` (else the table's default), and the file is restored. A mutant that the tests do
not fail survives, and the run fails.

    python mutants.py [NAME-PART ...] [-- PYTEST-ARGS]   (from the table's folder; PYTEST-ARGS
                                                           replace every mutant's own)
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any


def _split(entry: Sequence[Any]) -> tuple[str, Path, list[tuple[str, str]], list[str] | None]:
    name, path, *rest = entry
    tests = rest.pop() if rest and isinstance(rest[-1], list) else None
    assert rest and len(rest) % 2 == 0, f"{name}: edits come in (old, new) pairs"
    return name, Path(path), list(zip(rest[::2], rest[1::2], strict=True)), tests


def run(mutants: Sequence[Sequence[Any]], default: list[str], folder: Path) -> int:
    """Run every mutant of the table whose name has one of the command line's parts; 1 if any
    survived."""
    args = sys.argv[1:]
    given = args[args.index("--") + 1 :] if "--" in args else None
    chosen = args[: args.index("--")] if "--" in args else args
    survivors = []
    for entry in mutants:
        name, path, edits, tests = _split(entry)
        if chosen and not any(c in name for c in chosen):
            continue
        original = path.read_text()
        mutated = original
        for a, b in edits:
            assert mutated.count(a) == 1, (name, a)
            mutated = mutated.replace(a, b)
        path.write_text(mutated)
        try:
            r = subprocess.run(
                [sys.executable, "-m", "pytest", "-x", "-q", *(given or tests or default)],
                cwd=folder,
                capture_output=True,
                text=True,
            )
        finally:
            path.write_text(original)
        tail = [s for s in r.stdout.splitlines() if "passed" in s or "failed" in s][-1:]
        failed = [s for s in r.stdout.splitlines() if s.startswith("FAILED")][:1]
        print(f"{name}: {'killed' if r.returncode else 'SURVIVED'} {failed} {tail}", flush=True)
        if r.returncode == 0:
            survivors.append(name)
    return 1 if survivors else 0
