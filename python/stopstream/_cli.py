"""``stopstream``: apply stop sequences to a byte stream from stdin or a file.

Output is written as soon as it is safe (only text that could still become a stop is held
back), so the command works in a pipe behind a live producer. When a stop fires, the command
stops reading and exits, which closes the pipe to the producer.

With ``--sse openai|responses|anthropic|gemini`` the input is a Server-Sent Events body of the
Chat Completions, Responses, Messages or Gemini ``streamGenerateContent?alt=sse`` streaming API,
and the output is that body with the stop sequences applied to the generated text (see
``stopstream.sse``).

Exit status: 0 when a stop fired or the input ended; 1 when the input is not what was expected
(invalid UTF-8 with ``--errors strict``; with ``--sse``, not an SSE body, or one that ended
before its final event) or cannot be read; 2 for a usage error.

With ``--errors strict`` invalid UTF-8 ends the text for the stops' look-around as the end of
the input would (contract §9.9): ``-r '\bend\b'`` on ``the end`` followed by an invalid byte
writes ``the ``, reports the stop, then fails as for any invalid input.
"""

from __future__ import annotations

import argparse
import itertools
import os
import re
import sys
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, BinaryIO, TypeVar

import stopstream
from stopstream import sse
from stopstream._core import ByteStopFilter, Regex, Stop, StopSet
from stopstream._streaming_apis import APIS

if TYPE_CHECKING:
    from stopstream._adapter import SyncAdapterStream

_READ_SIZE = 1 << 16

ESCAPES_HELP = (
    r"with -e: \n \r \t \\, \0 (NUL; not followed by a digit), \xHH (a byte: "
    r"consecutive \x escapes must form UTF-8, as with printf), \uHHHH and \UHHHHHHHH (a code "
    r"point up to 10FFFF, not a surrogate). Any other backslash sequence is a usage error."
)
_SIMPLE = {"n": "\n", "r": "\r", "t": "\t", "0": "\0", "\\": "\\"}
_DIGITS = {"x": 2, "u": 4, "U": 8}
# A backslash and what it escapes: as many hex digits as are there (fewer than required is an
# error), \0 with a following digit (so that a mistaken octal escape is caught), any other
# character, or nothing at the end of the text.
_ESCAPE = re.compile(
    r"\\(x[0-9a-fA-F]{0,2}|u[0-9a-fA-F]{0,4}|U[0-9a-fA-F]{0,8}|0[0-9]?|.|\Z)", re.DOTALL
)


# What looks like an escape -e would interpret; without -e it is matched as typed.
_LOOKS_ESCAPED = re.compile(r"\\(?:[nrt0\\]|x[0-9a-fA-F]{2}|u[0-9a-fA-F]{4}|U[0-9a-fA-F]{8})")


class EscapeError(ValueError):
    """A backslash escape ``-e`` does not support, or one that does not form text."""


def _quoted(text: str) -> str:
    """``text`` in quotes as the user typed it (``repr`` would double each backslash)."""
    return f"'{text}'" if text.isprintable() else repr(text)


def unescape(text: str) -> str:
    """``text`` with its backslash escapes replaced (see ``ESCAPES_HELP``).

    >>> unescape(r"\\n\\nUser:")
    '\\n\\nUser:'
    >>> unescape(r"caf\\xc3\\xa9 \\u00e9")
    'café é'
    """
    out: list[str] = []
    run = bytearray()  # bytes of consecutive \xHH escapes, decoded together
    run_text: list[str] = []

    def end_run() -> None:
        if not run:
            return
        try:
            out.append(run.decode("utf-8"))
        except UnicodeDecodeError as exc:
            bad = "".join(run_text[exc.start : exc.end])
            raise EscapeError(
                f"invalid escape {_quoted(bad)}: bytes written with \\x must form UTF-8 "
                "characters (for a code point, use \\u)"
            ) from None
        run.clear()
        run_text.clear()

    position = 0
    for m in _ESCAPE.finditer(text):
        if m.start() > position:
            end_run()
            out.append(text[position : m.start()])
        position = m.end()
        escape, code = m.group(0), m.group(1)
        if code in _SIMPLE:
            end_run()
            out.append(_SIMPLE[code])
        elif code[:1] in _DIGITS:
            kind, digits = code[0], code[1:]
            if len(digits) != _DIGITS[kind]:
                raise EscapeError(
                    f"invalid escape {_quoted(escape)}: "
                    f"\\{kind} takes exactly {_DIGITS[kind]} hex digits"
                )
            value = int(digits, 16)
            if kind == "x":
                run.append(value)
                run_text.append(escape)
                continue
            end_run()
            if value > 0x10FFFF:
                raise EscapeError(f"invalid escape {_quoted(escape)}: beyond U+10FFFF")
            if 0xD800 <= value <= 0xDFFF:
                raise EscapeError(
                    f"invalid escape {_quoted(escape)}: a surrogate, not a character "
                    "(write a character beyond U+FFFF as \\UHHHHHHHH)"
                )
            out.append(chr(value))
        elif code[:1] == "0":
            raise EscapeError(
                f"invalid escape {_quoted(escape)}: octal escapes are not supported "
                "(NUL is \\0, other bytes \\xHH)"
            )
        elif code == "":
            raise EscapeError("invalid escape: a backslash at the end (write \\\\ for one)")
        else:
            raise EscapeError(f"unknown escape {_quoted(escape)}")
    end_run()
    out.append(text[position:])
    return "".join(out)


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="stopstream",
        description="Copy a UTF-8 stream to stdout, cutting it right before the first stop "
        "sequence. Text that could still become a stop is held back; everything else is "
        "written at once.",
        epilog="Exit status: 0 when a stop fired or the input ended; 1 when the input is "
        "not what was expected (invalid UTF-8 with --errors strict; with --sse, not an SSE "
        "body or one that ended before its final event) or cannot be read; 2 on a usage "
        "error. The stop that fired (or 'end') is reported on stderr unless --quiet is given. "
        "Escapes " + ESCAPES_HELP.replace("%", "%%"),
    )
    p.add_argument(
        "-s",
        "--stop",
        dest="items",
        action="append",
        default=[],
        type=lambda v: ("str", v),
        metavar="STOP",
        help="a stop sequence (repeatable; stops of every kind are numbered in the order given)",
    )
    p.add_argument(
        "-r",
        "--regex",
        dest="items",
        action="append",
        type=lambda v: ("regex", v),
        metavar="PATTERN",
        help="a regex stop in Rust regex syntax, e.g. '\\bend\\b' (repeatable)",
    )
    p.add_argument(
        "-k",
        "--keep",
        dest="items",
        action="append",
        type=lambda v: ("keep", v),
        metavar="STOP",
        help="a stop sequence that is written with the output when it fires (repeatable)",
    )
    p.add_argument(
        "--skip",
        nargs=2,
        action="append",
        default=[],
        metavar=("OPEN", "CLOSE"),
        help="a region the stops do not see, from OPEN through CLOSE (repeatable)",
    )
    p.add_argument(
        "--skip-until",
        metavar="MARKER",
        help="the stops are inactive until MARKER has occurred",
    )
    p.add_argument(
        "-e",
        "--escapes",
        action="store_true",
        help=r"interpret \n \r \t \0 \\ \xHH \uHHHH \UHHHHHHHH in stop sequences (see below)",
    )
    p.add_argument(
        "--include-stop", action="store_true", help="also write the stop sequence itself"
    )
    p.add_argument(
        "--errors",
        choices=("strict", "replace"),
        default="strict",
        help="invalid UTF-8: fail (strict, default) or write U+FFFD (replace)",
    )
    p.add_argument(
        "--sse",
        choices=tuple(APIS),
        help="the input is an SSE body of the OpenAI Chat Completions or Responses, the "
        "Anthropic Messages or the Gemini streaming API: apply the stops to the generated "
        "text, write the body",
    )
    p.add_argument(
        "--on-stop",
        choices=("close", "drain"),
        default="close",
        help="with --sse, once every choice stopped: stop reading and end the body (close, "
        "default) or read the input to its end to pass on the final usage (drain)",
    )
    p.add_argument("-q", "--quiet", action="store_true", help="do not report on stderr")
    p.add_argument("--version", action="version", version=f"%(prog)s {stopstream.__version__}")
    p.add_argument("file", nargs="?", metavar="FILE", help="input file (default, or '-': stdin)")
    return p


def _certain(held: bytes) -> bytes:
    """What of the held bytes is output once the input proved invalid right after them, the
    filter having raised (so no stop fired there).

    A stop cannot span an invalid sequence, and the invalid sequence ends the text for the
    stops' look-around: a stop that the end of the text there would fire, the filter fires
    instead of raising (the error then comes after it). So held text that was waiting to see
    whether it becomes a stop is ordinary text; an incomplete character at its end is part of
    the invalid sequence and is not.
    """
    try:
        held.decode("utf-8")
    except UnicodeDecodeError as exc:
        return held[: exc.start]
    return held


def _run(args: argparse.Namespace, src: BinaryIO, out: BinaryIO) -> int:
    f = ByteStopFilter(args.stops, errors=args.errors)
    fd = src.fileno()
    try:
        while True:
            # os.read returns as soon as any data is available: no waiting for a full buffer.
            data = os.read(fd, _READ_SIZE)
            if not data:
                try:
                    out.write(f.finish())
                except UnicodeDecodeError:
                    out.write(_certain(f.pending))  # an incomplete character at the end
                    out.flush()
                    raise
                out.flush()
                break
            try:
                piece = f.feed(data)
            except UnicodeDecodeError as exc:
                # Write everything before the bad byte: the text up to it (`exc.object` starts
                # with the bytes of an incomplete character carried over from the previous
                # read), then what the filter held back, which the bad byte proved no stop.
                carried = len(exc.object) - len(data)
                out.write(f.feed(data[: max(exc.start - carried, 0)]))
                out.write(_certain(f.pending))
                out.flush()
                raise
            if piece:
                out.write(piece)
                out.flush()
            if f.stopped:
                break
    except UnicodeDecodeError as exc:
        sys.stderr.write(f"stopstream: invalid UTF-8 in input: {exc.reason}\n")
        return 1
    owed: UnicodeDecodeError | None = None
    try:
        # After a stop that invalid UTF-8 fired (it ended the text for the stops' look-around),
        # the filter raises the decoding error on the next call.
        f.finish()
    except UnicodeDecodeError as exc:
        owed = exc
    if not args.quiet:
        if f.stop_sequence is not None:
            sys.stderr.write(f"stopstream: stop sequence {f.stop_index}: {f.stop_sequence!r}\n")
        else:
            sys.stderr.write("stopstream: end of input, no stop sequence\n")
    if owed is not None:
        sys.stderr.write(f"stopstream: invalid UTF-8 in input: {owed.reason}\n")
        return 1
    return 0


def _chunks(src: BinaryIO) -> Iterator[bytes]:
    fd = src.fileno()
    while data := os.read(fd, _READ_SIZE):
        yield data


_BOM = b"\xef\xbb\xbf"
# The first line of an SSE body: a field the standard defines, or a comment (":").
_FIELD = re.compile(rb"([^:\r\n]*)(?::|\r|\n)")
_FIELDS = (b"", b"data", b"event", b"id", b"retry")


def _sse_verdict(head: bytes, at_end: bool) -> bool | None:
    """Whether a body starting with ``head`` is SSE (``None``: more bytes are needed)."""
    if not at_end and len(head) < len(_BOM) and _BOM.startswith(head):
        return None
    head = head.removeprefix(_BOM).lstrip(b"\r\n")
    m = _FIELD.match(head)
    if m is not None:
        return m.group(1) in _FIELDS
    if at_end:
        return head in _FIELDS[1:]  # a last line without its line ending
    # No field name is longer than "retry": a longer start without ":" is not a field.
    return None if len(head) <= len(b"retry") else False


def _sse_body(src: BinaryIO) -> tuple[Iterator[bytes], bytes | None]:
    """The body's chunks, and ``None``; or, when the body is not SSE, its first bytes."""
    chunks = _chunks(src)
    head = b""
    for chunk in chunks:
        head += chunk
        verdict = _sse_verdict(head, at_end=False)
        if verdict is not None:
            break
    else:
        verdict = _sse_verdict(head, at_end=True) if head else False
    if not verdict:
        return iter(()), head
    return itertools.chain([head], chunks), None


def _run_sse(args: argparse.Namespace, src: BinaryIO, out: BinaryIO) -> int:
    stops = args.stops
    chunks, not_sse = _sse_body(src)
    if not_sse is not None:
        start = not_sse.split(b"\n", 1)[0][:60].decode("utf-8", "replace")
        what = f"it starts with {start!r}" if not_sse else "it is empty"
        sys.stderr.write(
            f"stopstream: the input is not an SSE body ({what}); --sse {args.sse} expects the "
            'body of a streaming response ("stream": true)\n'
        )
        return 1
    options = {"include_stop": args.include_stop, "on_stop": args.on_stop}
    api = APIS[args.sse]
    try:
        view = _relay(sse._wrap(api, chunks, stops, **options), out)
    except TypeError as exc:  # an event of another API (contract §8): never passed unscanned
        sys.stderr.write(f"stopstream: the SSE body is not a {api.label} stream: {exc}\n")
        return 1
    stopped, ended = view.stopped, api.ended(view)
    if api.per is None:
        fired = [("", view.stop_index, view.stop_sequence)]
    else:
        indices = view.stop_indices
        fired = [
            (f"{api.per} {index}: ", indices[index], stop)
            for index, stop in view.stop_sequences.items()
        ]
    if not (stopped or ended):
        sys.stderr.write(
            f"stopstream: the SSE body ended before its final event ({api.final_event}): the "
            f"stream was cut short, or it is not a {api.label} stream\n"
        )
        return 1
    if not args.quiet:
        lines = [f"{where}stop sequence {i}: {s!r}" for where, i, s in fired if s is not None]
        for line in lines or ["end of input, no stop sequence"]:
            sys.stderr.write(f"stopstream: {line}\n")
    return 0


_S = TypeVar("_S", bound="SyncAdapterStream[bytes]")


def _relay(stream: _S, out: BinaryIO) -> _S:
    """Writes the stream's pieces to ``out`` as they come; returns the stream, ended."""
    with stream:
        for piece in stream:
            out.write(piece)
            out.flush()
    return stream


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``stopstream`` command."""
    parser = _parser()
    args = parser.parse_args(argv)

    def text(value: str, flag: str) -> str:
        if not args.escapes:
            if not args.quiet and _LOOKS_ESCAPED.search(value):
                sys.stderr.write(
                    f"stopstream: warning: {flag} {_quoted(value)} is matched literally, "
                    "backslashes included; -e interprets escapes such as \\n\n"
                )
            return value
        try:
            return unescape(value)
        except EscapeError as exc:
            parser.error(f"{flag} {_quoted(value)}: {exc}")

    args.stops = [
        text(v, "-s")
        if kind == "str"
        else Stop(text(v, "-k"), include=True)
        if kind == "keep"
        else Regex(v)
        for kind, v in args.items
    ]
    args.skip = [(text(o, "--skip"), text(c, "--skip")) for o, c in args.skip]
    if args.skip_until is not None:
        args.skip_until = text(args.skip_until, "--skip-until")
    if args.sse is not None and args.errors != "strict":
        parser.error("--errors applies to plain streams, not to --sse (SSE bodies are JSON)")
    if args.sse is not None and (args.skip or args.skip_until is not None):
        parser.error("--skip and --skip-until apply to plain streams, not to --sse")
    try:
        # Compiled once (and so checked) here.
        args.stops = StopSet(
            args.stops, args.include_stop, skip=args.skip or None, skip_until=args.skip_until
        )
    except ValueError as exc:
        parser.error(str(exc))
    run = _run if args.sse is None else _run_sse
    try:
        if args.file in (None, "-"):
            return run(args, sys.stdin.buffer, sys.stdout.buffer)
        with open(args.file, "rb") as src:
            return run(args, src, sys.stdout.buffer)
    except OSError as exc:
        if isinstance(exc, BrokenPipeError):
            # The reader went away: stop quietly, like other filters in a pipe.
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
            return 0
        sys.stderr.write(f"stopstream: {exc}\n")
        return 1


if __name__ == "__main__":
    sys.exit(main())
