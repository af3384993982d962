"""``stopstream``: apply stop sequences to a byte stream from stdin or a file.

Output is written as soon as it is safe (only text that could still become a stop is held
back), so the command works in a pipe behind a live producer. When a stop fires, the command
stops reading and exits, which closes the pipe to the producer.

With ``--sse openai|anthropic`` the input is a Server-Sent Events body of the Chat Completions
or Messages streaming API, and the output is that body with the stop sequences applied to the
generated text (see ``stopstream.sse``).

Exit status: 0 when a stop fired or the input ended; 1 when the input is not valid UTF-8 (with
``--errors strict``) or cannot be read; 2 for a usage error.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from collections.abc import Iterator, Sequence
from typing import BinaryIO

from stopstream import sse
from stopstream._core import ByteStopFilter, Regex, Stop

_ESCAPE = re.compile(r"\\(u[0-9a-fA-F]{4}|U[0-9a-fA-F]{8}|x[0-9a-fA-F]{2}|[nrt0\\])")
_SIMPLE = {"n": "\n", "r": "\r", "t": "\t", "0": "\0", "\\": "\\"}
_READ_SIZE = 1 << 16


def _unescape(text: str) -> str:
    def sub(m: re.Match[str]) -> str:
        code = m.group(1)
        return _SIMPLE.get(code) or chr(int(code[1:], 16))

    return _ESCAPE.sub(sub, text)


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="stopstream",
        description="Copy a UTF-8 stream to stdout, cutting it right before the first stop "
        "sequence. Text that could still become a stop is held back; everything else is "
        "written at once.",
        epilog="Exit status: 0 when a stop fired or the input ended, 1 on invalid UTF-8 "
        "(--errors strict) or a read error, 2 on a usage error. The stop that fired (or "
        "'end') is reported on stderr unless --quiet is given.",
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
        help=r"interpret \n \r \t \0 \\ \xHH \uHHHH \UHHHHHHHH in stop sequences",
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
        choices=("openai", "anthropic"),
        help="the input is an SSE body of the OpenAI Chat Completions or the Anthropic "
        "Messages streaming API: apply the stops to the generated text, write the body",
    )
    p.add_argument(
        "--on-stop",
        choices=("close", "drain"),
        default="close",
        help="with --sse, once every choice stopped: stop reading and end the body (close, "
        "default) or read the input to its end to pass on the final usage (drain)",
    )
    p.add_argument("-q", "--quiet", action="store_true", help="do not report on stderr")
    p.add_argument("file", nargs="?", metavar="FILE", help="input file (default: stdin)")
    return p


def _run(args: argparse.Namespace, src: BinaryIO, out: BinaryIO) -> int:
    f = ByteStopFilter(
        args.stops,
        args.include_stop,
        args.errors,
        skip=args.skip or None,
        skip_until=args.skip_until,
    )
    fd = src.fileno()
    try:
        while True:
            # os.read returns as soon as any data is available: no waiting for a full buffer.
            data = os.read(fd, _READ_SIZE)
            if not data:
                out.write(f.finish())
                out.flush()
                break
            try:
                piece = f.feed(data)
            except UnicodeDecodeError as exc:
                # Write what came before the bad byte (`exc.object` starts with the bytes of an
                # incomplete character carried over from the previous read).
                carried = len(exc.object) - len(data)
                out.write(f.feed(data[: max(exc.start - carried, 0)]))
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
    if not args.quiet:
        if f.stop_sequence is not None:
            sys.stderr.write(f"stopstream: stop sequence {f.stop_index}: {f.stop_sequence!r}\n")
        else:
            sys.stderr.write("stopstream: end of input, no stop sequence\n")
    return 0


def _chunks(src: BinaryIO) -> Iterator[bytes]:
    fd = src.fileno()
    while data := os.read(fd, _READ_SIZE):
        yield data


def _run_sse(args: argparse.Namespace, src: BinaryIO, out: BinaryIO) -> int:
    stops = args.stops
    stream: sse.OpenAISSEStream | sse.AnthropicSSEStream
    if args.sse == "openai":
        stream = sse.wrap_openai(
            _chunks(src), stops, include_stop=args.include_stop, on_stop=args.on_stop
        )
    else:
        stream = sse.wrap_anthropic(
            _chunks(src), stops, include_stop=args.include_stop, on_stop=args.on_stop
        )
    with stream:
        for piece in stream:
            out.write(piece)
            out.flush()
    if not args.quiet:
        if isinstance(stream, sse.OpenAISSEStream):
            indices = stream.stop_indices
            fired = [
                (f"choice {choice}: ", indices[choice], stop)
                for choice, stop in stream.stop_sequences.items()
            ]
        else:
            fired = [("", stream.stop_index, stream.stop_sequence)]
        lines = [f"{where}stop sequence {i}: {s!r}" for where, i, s in fired if s is not None]
        for line in lines or ["end of input, no stop sequence"]:
            sys.stderr.write(f"stopstream: {line}\n")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``stopstream`` command."""
    parser = _parser()
    args = parser.parse_args(argv)
    text = (lambda v: _unescape(v)) if args.escapes else (lambda v: v)
    args.stops = [
        text(v) if kind == "str" else Stop(text(v), include=True) if kind == "keep" else Regex(v)
        for kind, v in args.items
    ]
    args.skip = [(text(o), text(c)) for o, c in args.skip]
    if args.skip_until is not None:
        args.skip_until = text(args.skip_until)
    if args.sse is not None and args.errors != "strict":
        parser.error("--errors applies to plain streams, not to --sse (SSE bodies are JSON)")
    if args.sse is not None and (args.skip or args.skip_until is not None):
        parser.error("--skip and --skip-until apply to plain streams, not to --sse")
    try:
        ByteStopFilter(args.stops, skip=args.skip or None, skip_until=args.skip_until)
    except ValueError as exc:
        parser.error(str(exc))
    run = _run if args.sse is None else _run_sse
    try:
        if args.file is None:
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
