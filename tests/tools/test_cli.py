"""The ``stopstream`` command, run as ``python -m stopstream`` in a subprocess.

Besides whole files it is driven through a pipe by a live producer: the test writes part of a
stream, reads what the command has written *before* closing its stdin, and fails (rather than
hangs) when the output does not come.
"""

from __future__ import annotations

import json
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
from hypothesis import given
from hypothesis import strategies as st

import stopstream
from stopstream._cli import EscapeError, unescape

# Real servers or subprocesses: `-m "not e2e"` leaves them out.
pytestmark = pytest.mark.e2e

SAMPLE = Path(__file__).resolve().parents[2] / "examples" / "answer-stream.txt"
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


WARNING = "is matched literally, backslashes included; -e interprets escapes such as \\n"


def test_an_escape_without_e_is_matched_literally_with_a_warning() -> None:
    result = run_cli(["-s", r"\n\nUser:"], b"Hi.\n\nUser: more")
    assert (result.returncode, result.stdout) == (0, b"Hi.\n\nUser: more")
    warning, report = result.stderr.decode().splitlines()
    assert warning == f"stopstream: warning: -s '\\n\\nUser:' {WARNING}"
    assert report == "stopstream: end of input, no stop sequence"
    # With -e: the escapes are read, the stop fires, and nothing is said about them.
    result = run_cli(["-e", "-s", r"\n\nUser:"], b"Hi.\n\nUser: more")
    assert (result.returncode, result.stdout) == (0, b"Hi.")
    assert "warning" not in result.stderr.decode()


@pytest.mark.parametrize(
    ("args", "warned"),
    [
        (["-s", r"a\tb"], [r"-s 'a\tb'"]),
        (["-s", r"C:\\dir"], [r"-s 'C:\\dir'"]),
        (["-s", r"\r\n"], [r"-s '\r\n'"]),
        (["-k", r"\u00e9"], [r"-k '\u00e9'"]),
        (["-s", r"\x41", "-s", "plain", "-s", r"\U0001F600"], [r"-s '\x41'", r"-s '\U0001F600'"]),
        (["-s", "x", "--skip", r"<\n>", "</x>"], [r"--skip '<\n>'"]),
        (["-s", "x", "--skip-until", r"\t"], [r"--skip-until '\t'"]),
        # Not escapes -e would read (or regex syntax): no warning.
        (["-s", r"\q"], []),
        (["-s", r"\x4"], []),
        (["-s", "a/b"], []),
        (["-r", r"\bend\b\n"], []),
        (["-q", "-s", r"\n"], []),
    ],
)
def test_escape_warning_names_each_value_that_looks_escaped(
    args: list[str], warned: list[str]
) -> None:
    result = run_cli(args, b"data")
    assert result.returncode == 0
    lines = [line for line in result.stderr.decode().splitlines() if "warning" in line]
    assert lines == [f"stopstream: warning: {w} {WARNING}" for w in warned]


def test_escaped_utf8_bytes_form_one_character() -> None:
    result = run_cli(["-e", "-s", r"\xc3\xa9!"], "caf\u00e9! more".encode())
    assert (result.returncode, result.stdout) == (0, b"caf")


@pytest.mark.parametrize(
    ("stop", "expected"),
    [
        ("plain", "plain"),
        (r"a\nb", "a\nb"),
        (r"\\n", "\\n"),
        (r"\\\n", "\\\n"),
        (r"\x41\x42", "AB"),
        (r"\xC3\xA9", "\u00e9"),
        (r"\xe2\x82\xac", "\u20ac"),
        (r"\u20AC\u20ac", "\u20ac\u20ac"),
        (r"\U0010FFFF", "\U0010ffff"),
        (r"\U0001f600x", "\U0001f600x"),
        (r"\0x", "\0x"),
        (r"\x001", "\x001"),
        ("\u00e9\\t", "\u00e9\t"),
    ],
)
def test_unescape_table(stop: str, expected: str) -> None:
    assert unescape(stop) == expected


@given(st.text(st.characters(exclude_categories=["Cs"])))
def test_unescape_inverts_escaping_every_character(text: str) -> None:
    assert unescape("".join(f"\\U{ord(c):08x}" for c in text)) == text
    assert unescape(text.replace("\\", "\\\\")) == text
    utf8 = "".join(f"\\x{b:02x}" for b in text.encode())
    assert unescape(utf8) == text


@pytest.mark.parametrize(
    ("stop", "named"),
    [
        (r"\x4", r"'\x4'"),
        (r"a\x4g", r"'\x4'"),
        (r"\xg0", r"'\x'"),
        (r"\u12", r"'\u12'"),
        (r"\u12345", None),  # four digits, then a literal "5": valid
        (r"\U0011000", r"'\U0011000'"),
        (r"\U00110000", r"'\U00110000'"),
        (r"\UFFFFFFFF", r"'\UFFFFFFFF'"),
        (r"\q", r"'\q'"),
        (r"\a", r"'\a'"),
        (r"\ud800", r"'\ud800'"),
        (r"\uDFFF", r"'\uDFFF'"),
        (r"\ud83d\ude00", r"'\ud83d'"),
        (r"\xc3", r"'\xc3'"),
        (r"\xff", r"'\xff'"),
        (r"ok\xc3\xa9\x80", r"'\x80'"),
        (r"\xe2\x82", r"'\xe2\x82'"),
        (r"\012", r"'\01'"),
        ("end\\", "a backslash at the end"),
    ],
)
def test_bad_escape_is_a_usage_error_naming_it(stop: str, named: str | None) -> None:
    result = run_cli(["-e", "-s", stop], b"data")
    if named is None:
        assert result.returncode == 0
        return
    stderr = result.stderr.decode()
    assert (result.returncode, result.stdout) == (2, b"")
    assert "usage" in stderr and named in stderr, stderr
    assert "Traceback" not in stderr
    with pytest.raises(EscapeError):
        unescape(stop)


def test_bad_escape_in_a_later_stop_names_that_stop() -> None:
    result = run_cli(["-e", "-s", r"\n", "-s", r"x\uZZZZ"], b"data")
    assert result.returncode == 2
    assert r"-s 'x\uZZZZ': invalid escape '\u'" in result.stderr.decode()


# ---------------------------------------------------------------------------------------------
# FILE "-", --version


def test_dash_reads_stdin() -> None:
    result = run_cli(["-s", "</answer>", "-"], SAMPLE.read_bytes())
    assert result.returncode == 0
    assert result.stdout == SAMPLE.read_bytes().split(b"</answer>")[0]


def test_a_file_named_dash_is_reached_through_a_path(tmp_path: Path) -> None:
    (tmp_path / "-").write_bytes(b"from the file STOP")
    result = run_cli(["-s", "STOP", "./-"], b"from stdin STOP", cwd=tmp_path)
    assert (result.returncode, result.stdout) == (0, b"from the file ")


def test_version() -> None:
    result = run_cli(["--version"])
    assert result.returncode == 0
    assert result.stdout.decode().strip() == f"stopstream {stopstream.__version__}"


# ---------------------------------------------------------------------------------------------
# Strict errors: everything certain before the bad byte is written first


@pytest.mark.parametrize(
    ("data", "expected", "status"),
    [
        (b"abc </an\xff more", b"abc </an", 1),
        (b"abc </an\xc3\x28 more", b"abc </an", 1),  # an invalid continuation byte
        (b"abc </an\xe2\x82", b"abc </an", 1),  # incomplete at the end of the input
        (b"</\xff", b"</", 1),
        (b"\xff</answer>", b"", 1),
        (b"abc </answer>\xff", b"abc ", 0),  # the stop comes first: no error
    ],
)
def test_strict_error_writes_held_text_first(data: bytes, expected: bytes, status: int) -> None:
    result = run_cli(["-s", "</answer>"], data)
    assert (result.returncode, result.stdout) == (status, expected)


def test_strict_error_with_include_stop_and_several_stops() -> None:
    result = run_cli(["--include-stop", "-s", "</answer>", "-s", "<</x>"], b"a <</an\xffz")
    assert (result.returncode, result.stdout) == (1, b"a <</an")


@pytest.mark.parametrize(
    ("args", "data", "expected", "stop"),
    [
        (["-r", r"\bend\b"], b"the end\xff", b"the ", "stop sequence 0: 'end'"),
        (["-r", r"\bend\b"], b"the end\xe2\x82", b"the ", "stop sequence 0: 'end'"),
        (["-r", "x$"], b"ax\xff tail", b"a", "stop sequence 0: 'x'"),
        (["-r", r"\d+\b"], b"n = 42\xc3\x28", b"n = ", "stop sequence 0: '42'"),
        (["-s", "nd", "-r", r"\w+d\b"], b"the end\xff", b"the ", "stop sequence 1: 'end'"),
        (["--include-stop", "-r", r"\bend\b"], b"the end\xff", b"the end", "'end'"),
        # The end of the text fires nothing: the held text is ordinary text, then the error.
        (["-r", r"\bend\b"], b"the endx\xff", b"the endx", None),
        (["-r", r"\bend\B"], b"the end\xff", b"the end", None),
    ],
)
def test_strict_error_ends_the_text_for_the_stops(
    args: list[str], data: bytes, expected: bytes, stop: str | None
) -> None:
    """An invalid byte ends the text for the stops' look-around as the end of the input
    would: a stop that fires there is cut and reported, then the command fails as for any
    invalid input, and nothing it held is written."""
    result = run_cli(args, data)
    stderr = result.stderr.decode()
    assert (result.returncode, result.stdout) == (1, expected)
    assert "Traceback" not in stderr
    lines = stderr.splitlines()
    assert lines[-1].startswith("stopstream: invalid UTF-8 in input: ")
    if stop is None:
        assert len(lines) == 1
    else:
        # The stop is reported as any stop is, then the error.
        assert len(lines) == 2 and stop in lines[0]
    quiet = run_cli(["-q", *args], data)
    assert (quiet.returncode, quiet.stdout) == (1, expected)
    assert quiet.stderr.decode().splitlines() == [lines[-1]]


def test_strict_error_in_a_later_read_after_held_text() -> None:
    with live("-r", r"\bend\b") as proc:
        fd = out_fd(proc)
        send(proc, b"the end")
        assert read_some(fd, 4) == b"the "
        assert nothing_more_within(fd, 0.2)
        send(proc, b"\xff more")
        assert proc.wait(TIMEOUT) == 1
        assert os.read(fd, 100) == b""  # "end" was held, and is not written
        stderr = err_text(proc)
        assert "stop sequence 0: 'end'" in stderr
        assert "invalid UTF-8" in stderr


def test_live_producer_strict_error_releases_held_text() -> None:
    with live("-s", "</answer>") as proc:
        fd = out_fd(proc)
        send(proc, b"abc </an")
        assert read_some(fd, 4) == b"abc "
        assert nothing_more_within(fd, 0.2)
        send(proc, b"\xc3")  # an incomplete character, carried to the next read
        assert nothing_more_within(fd, 0.2)
        send(proc, b"\xff more")
        assert read_some(fd, 100) == b"</an"
        assert proc.wait(TIMEOUT) == 1
        assert "invalid UTF-8" in err_text(proc)


# ---------------------------------------------------------------------------------------------
# --sse


def chat_event(content: str | None, finish: str | None = None) -> str:
    delta = {} if content is None else {"content": content}
    choice = {"index": 0, "delta": delta, "finish_reason": finish}
    return "data: " + json.dumps(
        {"id": "c", "object": "chat.completion.chunk", "choices": [choice]}
    )


def sse_body(*events: str) -> bytes:
    return "".join(e + "\n\n" for e in events).encode()


CHAT = sse_body(
    chat_event("Hello </an"), chat_event("swer> tail"), chat_event(None, "stop"), "data: [DONE]"
)


def test_sse_stop_fires() -> None:
    result = run_cli(["--sse", "openai", "-s", "</answer>"], CHAT)
    assert result.returncode == 0
    assert b'"content":"Hello "' in result.stdout and b"tail" not in result.stdout
    assert result.stdout.endswith(b"data: [DONE]\n\n")
    assert "choice 0: stop sequence 0: '</answer>'" in result.stderr.decode()


def test_sse_body_from_a_file_with_bom_and_keep_alive_first(tmp_path: Path) -> None:
    path = tmp_path / "body.sse"
    path.write_bytes(b"\xef\xbb\xbf: keep-alive\n\n" + CHAT)
    result = run_cli(["--sse", "openai", "-s", "</answer>", str(path)])
    assert result.returncode == 0
    assert "stop sequence 0" in result.stderr.decode()


def test_sse_no_stop_fires_passes_the_body_on() -> None:
    data = sse_body(chat_event("Hello"), chat_event(None, "stop"), "data: [DONE]")
    result = run_cli(["--sse", "openai", "-s", "</answer>"], data)
    assert (result.returncode, result.stdout) == (0, data)
    assert "end of input, no stop sequence" in result.stderr.decode()


@pytest.mark.parametrize(
    ("data", "shown"),
    [
        (b'{"error": {"message": "Invalid model"}}\n', '\'{"error": {"message": '),
        (b'{"id": "chatcmpl-1", "object": "chat.completion"}', '\'{"id"'),
        (b"Hello, plain text\n", "'Hello, plain text'"),
        (b"<html><body>502 Bad Gateway", "'<html>"),
        (b"", "it is empty"),
    ],
)
def test_sse_body_that_is_not_sse_is_reported(data: bytes, shown: str) -> None:
    for api in ("openai", "anthropic"):
        result = run_cli(["--sse", api, "-s", "x"], data)
        stderr = result.stderr.decode()
        assert (result.returncode, result.stdout) == (1, b"")
        assert "not an SSE body" in stderr and shown in stderr, stderr
        assert "Traceback" not in stderr


@pytest.mark.parametrize(
    ("api", "data"),
    [
        ("openai", sse_body(chat_event("Hello"), chat_event(" wor"))),  # cut short
        ("openai", b": keep-alive\n\n"),
    ],
)
def test_sse_body_without_its_final_event_is_reported(api: str, data: bytes) -> None:
    result = run_cli(["--sse", api, "-s", "</answer>"], data)
    stderr = result.stderr.decode()
    assert result.returncode == 1
    assert result.stdout == data  # passed on as it came
    assert "ended before its final event" in stderr and "Traceback" not in stderr


@pytest.mark.parametrize(
    ("api", "data", "got"),
    [
        ("anthropic", CHAT, "not a Chat Completions chunk"),
        (
            "openai",
            sse_body(
                "event: message_start\ndata: "
                + json.dumps({"type": "message_start", "message": {"id": "m", "content": []}})
            ),
            "not a Messages event 'message_start'",
        ),
    ],
)
def test_sse_body_of_another_api_is_an_error(api: str, data: bytes, got: str) -> None:
    """Nothing passes unscanned: another API's events are named, never relayed as they came."""
    result = run_cli(["--sse", api, "-s", "</answer>"], data)
    stderr = result.stderr.decode()
    assert (result.returncode, result.stdout) == (1, b"")
    assert "is not a" in stderr and got in stderr and "Traceback" not in stderr, stderr


def test_sse_with_errors_replace_is_a_usage_error() -> None:
    result = run_cli(["--sse", "openai", "--errors", "replace", "-s", "x"], CHAT)
    assert result.returncode == 2
