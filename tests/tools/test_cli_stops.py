"""The command line's flags for stops beyond literal strings (contract §6)."""

from __future__ import annotations

import subprocess
import sys

import pytest

# Real servers or subprocesses: `-m "not e2e"` leaves them out.
pytestmark = pytest.mark.e2e


def run(args: list[str], data: bytes) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [sys.executable, "-m", "stopstream", *args], input=data, capture_output=True, check=False
    )


def test_regex_keep_and_skip_flags() -> None:
    r = run(
        ["-r", r"\bend\b", "-k", "</answer>", "--skip", "<think>", "</think>", "-s", "Q:"],
        b"the calendar ends <think>Q: end</think> at the end. Q: x",
    )
    assert (r.returncode, r.stdout) == (0, b"the calendar ends <think>Q: end</think> at the ")
    assert b"stop sequence 0: 'end'" in r.stderr
    r = run(["-s", r"\n\nUser:", "-k", "</answer>", "-e"], b"a <answer>42</answer> b")
    assert (r.returncode, r.stdout) == (0, b"a <answer>42</answer>")
    assert b"stop sequence 1: '</answer>'" in r.stderr


def test_skip_until_and_bad_pattern() -> None:
    r = run(["-s", "Q:", "--skip-until", "</think>"], b"Q: a</think>b Q: c")
    assert r.stdout == b"Q: a</think>b "
    r = run(["-r", "a("], b"x")
    assert r.returncode == 2
    assert b"regex stop at position 0 is invalid" in r.stderr
