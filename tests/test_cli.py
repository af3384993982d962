"""The ``stopstream`` command, run as ``python -m stopstream`` in a subprocess.

Besides whole files it is driven through a pipe by a live producer: the test writes part of a
stream, reads what the command has written *before* closing its stdin, and fails (rather than
hangs) when the output does not come.
"""

from __future__ import annotations

import os
import selectors
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, suppress
from pathlib import Path

import pytest

SAMPLE = Path(__file__).resolve().parent.parent / "examples" / "answer-stream.txt"
TIMEOUT = 20.0


def command(*args: str) -> list[str]:
    return [sys.executable, "-m", "stopstream", *args]


def run_cli(
    args: Sequence[str], data: bytes = b"", cwd: Path | None = None
) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        command(*args), input=data, capture_output=True, timeout=TIMEOUT, cwd=cwd, check=False
    )


def read_some(fd: int, want: int, timeout: float = TIMEOUT) -> bytes:
    """Read until ``want`` bytes came, end of file, or ``timeout`` (then fail)."""
    got = b""
    deadline = time.monotonic() + timeout
    with selectors.DefaultSelector() as sel:
        sel.register(fd, selectors.EVENT_READ)
        while len(got) < want:
            left = deadline - time.monotonic()
            if left <= 0 or not sel.select(left):
                pytest.fail(f"timed out waiting for output: got {got!r}, wanted {want} bytes")
            chunk = os.read(fd, want - len(got))
            if not chunk:
                break
            got += chunk
    return got


def nothing_more_within(fd: int, seconds: float) -> bool:
    """True when no byte (and no end of file) arrives on ``fd`` within ``seconds``."""
    with selectors.DefaultSelector() as sel:
        sel.register(fd, selectors.EVENT_READ)
        return not sel.select(seconds)


@contextmanager
def live(*args: str) -> Iterator[subprocess.Popen[bytes]]:
    proc = subprocess.Popen(
        command(*args), stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(TIMEOUT)
        for stream in (proc.stdin, proc.stdout, proc.stderr):
            if stream is not None:
                with suppress(BrokenPipeError):
                    stream.close()


def send(proc: subprocess.Popen[bytes], data: bytes) -> None:
    assert proc.stdin is not None
    proc.stdin.write(data)
    proc.stdin.flush()


def out_fd(proc: subprocess.Popen[bytes]) -> int:
    assert proc.stdout is not None
    return proc.stdout.fileno()


def err_text(proc: subprocess.Popen[bytes]) -> str:
    assert proc.stderr is not None
    return proc.stderr.read().decode()


# ---------------------------------------------------------------------------------------------
# The sample file


def test_sample_file_stops_at_answer_end() -> None:
    text = SAMPLE.read_bytes()
    result = run_cli(["-s", "</answer>", str(SAMPLE)])
    assert result.returncode == 0
    assert result.stdout == text[: text.index(b"</answer>")]
    assert "stop sequence 0" in result.stderr.decode()
    assert "'</answer>'" in result.stderr.decode()


def test_sample_from_stdin_equals_file_argument() -> None:
    by_file = run_cli(["-s", "</answer>", str(SAMPLE)])
    by_stdin = run_cli(["-s", "</answer>"], SAMPLE.read_bytes())
    assert (by_stdin.returncode, by_stdin.stdout, by_stdin.stderr) == (
        by_file.returncode,
        by_file.stdout,
        by_file.stderr,
    )


def test_sample_with_escapes_and_include_stop() -> None:
    text = SAMPLE.read_bytes()
    result = run_cli(["-e", "-s", r"\n\nUser:", "--include-stop", str(SAMPLE)])
    assert result.returncode == 0
    end = text.index(b"\n\nUser:") + len(b"\n\nUser:")
    assert result.stdout == text[:end]
    assert repr("\n\nUser:") in result.stderr.decode()


def test_first_completed_stop_wins_and_index_is_reported() -> None:
    text = SAMPLE.read_bytes()
    result = run_cli(["-s", "Germany", "-s", "Paris", "-s", "</answer>", str(SAMPLE)])
    assert result.returncode == 0
    assert result.stdout == text[: text.index(b"Paris")]
    assert "stop sequence 1" in result.stderr.decode()
    assert "'Paris'" in result.stderr.decode()


def test_no_stop_found_copies_everything() -> None:
    text = SAMPLE.read_bytes()
    result = run_cli(["-s", "<never>", str(SAMPLE)])
    assert result.returncode == 0
    assert result.stdout == text
    assert "end of input" in result.stderr.decode()


def test_no_stops_at_all_copies_everything() -> None:
    result = run_cli([], b"plain </answer> text")
    assert (result.returncode, result.stdout) == (0, b"plain </answer> text")


def test_quiet_reports_nothing() -> None:
    result = run_cli(["-q", "-s", "</answer>", str(SAMPLE)])
    assert result.returncode == 0
    assert result.stderr == b""
    result = run_cli(["--quiet", "-s", "zz"], b"abc")
    assert (result.returncode, result.stdout, result.stderr) == (0, b"abc", b"")


def test_relative_file_path(tmp_path: Path) -> None:
    (tmp_path / "in.txt").write_bytes(b"one STOP two")
    result = run_cli(["-s", "STOP", "in.txt"], cwd=tmp_path)
    assert (result.returncode, result.stdout) == (0, b"one ")


def test_large_input_across_many_reads() -> None:
    data = b"x" * 300_000 + "\u00e9".encode() * 50_000 + b"<stop>" + b"y" * 1000
    result = run_cli(["-s", "<stop>"], data)
    assert result.returncode == 0
    assert result.stdout == data[: data.index(b"<stop>")]


def test_console_script_if_installed() -> None:
    script = shutil.which("stopstream", path=str(Path(sys.executable).parent))
    if script is None:
        pytest.skip("the stopstream script is not installed next to this interpreter")
    result = subprocess.run(
        [script, "-s", "</answer>", str(SAMPLE)], capture_output=True, timeout=TIMEOUT, check=False
    )
    assert result.returncode == 0
    assert result.stdout == SAMPLE.read_bytes().split(b"</answer>")[0]


# ---------------------------------------------------------------------------------------------
# A live producer on stdin


def test_live_producer_gets_safe_output_before_stdin_closes() -> None:
    with live("-s", "</answer>") as proc:
        fd = out_fd(proc)
        send(proc, b"Hello ")
        assert read_some(fd, 6) == b"Hello "
        send(proc, b"world </ans")
        # " world " is safe; "</ans" could still become the stop and is held back.
        assert read_some(fd, 6) == b"world "
        assert nothing_more_within(fd, 0.3)
        assert proc.poll() is None
        send(proc, b"wer> and more")
        # The stop fired: the command exits without waiting for the end of its input.
        assert proc.wait(TIMEOUT) == 0
        assert read_some(fd, 100) == b""
        assert "'</answer>'" in err_text(proc)


def test_live_producer_held_text_released_at_end() -> None:
    with live("-s", "</answer>") as proc:
        fd = out_fd(proc)
        send(proc, b"x </an")
        assert read_some(fd, 2) == b"x "
        assert nothing_more_within(fd, 0.3)
        assert proc.stdin is not None
        proc.stdin.close()
        assert read_some(fd, 100) == b"</an"
        assert proc.wait(TIMEOUT) == 0
        assert "end of input" in err_text(proc)


def test_live_producer_partial_match_that_fails_is_released_at_once() -> None:
    with live("-s", "</answer>") as proc:
        fd = out_fd(proc)
        send(proc, b"a <")
        assert read_some(fd, 2) == b"a "
        send(proc, b"b")
        assert read_some(fd, 2) == b"<b"


def test_live_producer_split_character() -> None:
    with live("-s", "</a>") as proc:
        fd = out_fd(proc)
        send(proc, b"caf\xc3")
        assert read_some(fd, 3) == b"caf"
        assert nothing_more_within(fd, 0.2)
        send(proc, b"\xa9</")
        assert read_some(fd, 2) == b"\xc3\xa9"
        send(proc, b"a> \xff")
        assert proc.wait(TIMEOUT) == 0
        assert read_some(fd, 10) == b""


def test_live_producer_include_stop_holds_nothing() -> None:
    with live("--include-stop", "-s", "</answer>") as proc:
        fd = out_fd(proc)
        send(proc, b"a </ans")
        assert read_some(fd, 7) == b"a </ans"
        send(proc, b"wer> tail")
        assert read_some(fd, 4) == b"wer>"
        assert proc.wait(TIMEOUT) == 0
        assert read_some(fd, 10) == b""


def test_live_producer_invalid_utf8_fails_after_earlier_output() -> None:
    with live("-s", "zz") as proc:
        fd = out_fd(proc)
        send(proc, b"fine ")
        assert read_some(fd, 5) == b"fine "
        send(proc, b"\xff")
        assert proc.wait(TIMEOUT) == 1
        assert "invalid UTF-8" in err_text(proc)


def test_reader_going_away_ends_quietly() -> None:
    with live("-s", "zz") as proc:
        fd = out_fd(proc)
        send(proc, b"first")
        assert read_some(fd, 5) == b"first"
        assert proc.stdout is not None
        proc.stdout.close()
        try:
            for _ in range(20):
                send(proc, b"more " * 1000)
                time.sleep(0.01)
        except BrokenPipeError:
            pass
        assert proc.wait(TIMEOUT) == 0
        assert "Traceback" not in err_text(proc)


# ---------------------------------------------------------------------------------------------
# Invalid UTF-8 and exit statuses


def test_invalid_utf8_strict_exits_1() -> None:
    result = run_cli(["-s", "zz"], b"ab\xffcd")
    assert result.returncode == 1
    assert "invalid UTF-8" in result.stderr.decode()
    assert "Traceback" not in result.stderr.decode()
    explicit = run_cli(["--errors", "strict", "-s", "zz"], b"ab\xffcd")
    assert (explicit.returncode, explicit.stdout) == (1, result.stdout)


def test_invalid_utf8_replace_writes_replacement_character() -> None:
    result = run_cli(["--errors", "replace", "-s", "zz"], b"ab\xffcd\xe2\x82")
    assert result.returncode == 0
    assert result.stdout == "ab\ufffdcd\ufffd".encode()


def test_replacement_takes_part_in_matching() -> None:
    result = run_cli(["--errors", "replace", "-s", "a\ufffdb"], b"xa\xffby")
    assert (result.returncode, result.stdout) == (0, b"x")


def test_incomplete_utf8_at_end_strict_exits_1() -> None:
    result = run_cli(["-s", "zz"], b"abc\xe2\x82")
    assert result.returncode == 1
    assert result.stdout == b"abc"
    assert "invalid UTF-8" in result.stderr.decode()


def test_invalid_utf8_after_the_stop_is_never_read() -> None:
    result = run_cli(["-s", "</a>"], b"ok</a>\xff\xfe")
    assert (result.returncode, result.stdout) == (0, b"ok")


def test_missing_file_exits_1() -> None:
    result = run_cli(["-s", "x", "/nonexistent/input.txt"])
    assert result.returncode == 1
    assert "/nonexistent/input.txt" in result.stderr.decode()
    assert "Traceback" not in result.stderr.decode()


@pytest.mark.parametrize(
    "args",
    [
        ["--errors", "ignore", "-s", "x"],
        ["--no-such-option"],
        ["-s"],
        ["-s", "x", "one", "two"],
    ],
)
def test_usage_errors_exit_2(args: list[str]) -> None:
    result = run_cli(args, b"data")
    assert result.returncode == 2
    assert result.stdout == b""
    assert "usage" in result.stderr.decode()


def test_empty_stop_is_a_usage_error() -> None:
    result = run_cli(["-s", ""], b"data")
    assert result.returncode == 2
    assert "Traceback" not in result.stderr.decode()


def test_help_exits_0() -> None:
    result = run_cli(["--help"])
    assert result.returncode == 0
    assert b"--include-stop" in result.stdout


# ---------------------------------------------------------------------------------------------
# Escapes


@pytest.mark.parametrize(
    ("stop", "data", "expected"),
    [
        (r"\n\n", b"a\n\nb", b"a"),
        (r"\t", b"a\tb", b"a"),
        (r"\r\n", b"a\r\nb", b"a"),
        (r"\\", b"a\\b", b"a"),
        (r"\x41", b"zAz", b"z"),
        (r"\u00e9", "caf\u00e9!".encode(), b"caf"),
        (r"\U0001F600", "hi \U0001f600 there".encode(), b"hi "),
        (r"\0", b"a\x00b", b"a"),
    ],
)
def test_escapes(stop: str, data: bytes, expected: bytes) -> None:
    assert run_cli(["-e", "-s", stop], data).stdout == expected
    assert run_cli(["--escapes", "-s", stop], data).stdout == expected


def test_without_escapes_backslashes_are_literal() -> None:
    result = run_cli(["-s", r"\n"], b"a\nb\\nc")
    assert (result.returncode, result.stdout) == (0, b"a\nb")
