"""Smoke test of an installed stopstream: the import, a stop filter, wrap, and the CLI.

Run with the interpreter of the environment the package is installed in, from a directory that
does not contain the package's source:

    python .ci/smoke.py examples/answer-stream.txt

Needs nothing but the package (no test dependencies), so it also runs where the test extra
does not install (any platform the release workflow builds for).
"""

from __future__ import annotations

import subprocess
import sys
import sysconfig
from pathlib import Path


def main() -> None:
    sample = Path(sys.argv[1])

    import stopstream
    from stopstream import _core

    # The package must not come from a source tree on sys.path.
    for module in (stopstream, _core):
        assert not (Path(module.__file__ or "").parent.parent / "pyproject.toml").exists()

    f = stopstream.StopFilter(["</answer>", "\n\nUser:"])
    assert f.feed("Hello </ans") == "Hello "
    assert f.feed("wer> tail") == ""
    assert (f.stop_sequence, f.stop_index, f.stop_reason) == ("</answer>", 0, "stop_sequence")
    assert stopstream.truncate("a\n\nUser: b", ["\n\nUser:"]) == ("a", "\n\nUser:")
    assert "".join(stopstream.wrap(iter(["x </an", "swer> y"]), ["</answer>"])) == "x "

    # The CLI, as a module and as the installed console script, on the sample stream.
    text = sample.read_bytes().decode()
    stops = ["</answer>", "\n\nUser:"]
    expected = text[: min(text.find(s) for s in stops if s in text)]
    script = Path(sysconfig.get_path("scripts")) / (
        "stopstream.exe" if sys.platform == "win32" else "stopstream"
    )
    commands = [[sys.executable, "-m", "stopstream"], [str(script)]]
    for command in commands:
        args = [*command, "-s", stops[0], "-s", stops[1], str(sample)]
        done = subprocess.run(args, capture_output=True, check=False)
        assert done.returncode == 0, (args, done.returncode, done.stderr)
        out = done.stdout.decode().replace("\r\n", "\n")
        assert out == expected, (args, out, expected)
        assert "stop sequence 0" in done.stderr.decode(), (args, done.stderr)
    version = subprocess.run(
        [sys.executable, "-m", "stopstream", "--version"], capture_output=True, check=True
    )
    assert stopstream.__version__ in version.stdout.decode(), version.stdout

    where = Path(stopstream.__file__ or "").parent
    print(f"smoke test passed: stopstream {stopstream.__version__} from {where}")


if __name__ == "__main__":
    main()
