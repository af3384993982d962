"""Stand-ins for the CUDA libraries that PyPI's torch links against, so it imports on a CPU.

    python cuda_stubs.py TORCH_LIB_DIR

PyPI's Linux torch wheels are CUDA builds: their libraries name libcudart, libcublas, libcudnn,
libnccl and a dozen more as DT_NEEDED, so `import torch` fails without about 3 GB of nvidia
wheels that a CPU never uses. This writes, into torch's own library directory (on its rpath),
one small shared library per missing soname: it carries the symbol versions torch's libraries
require of it, and every function they import, each returning 100 (cudaErrorNoDevice,
CUDA_ERROR_NO_DEVICE): torch then finds no GPU (`torch.cuda.is_available()` is False) and its
CPU paths work. The functions torch imports without a version get their stand-ins in the
libcudart one, which every CUDA-using torch library loads. Needs gcc, readelf and nm.
"""

from __future__ import annotations

import collections
import re
import subprocess
import sys
import tempfile
from pathlib import Path

# What the system provides (never stubbed).
SYSTEM = re.compile(
    r"^(libc\.so|libm\.so|libdl\.so|libpthread\.so|librt\.so|libgcc_s\.so|libstdc\+\+\.so"
    r"|libgomp\.so|ld-linux)"
)


def run(*args: str) -> str:
    return subprocess.run(args, capture_output=True, text=True, check=True).stdout


def system_symbols(lib: Path) -> set[str]:
    """Symbols the C and C++ runtimes define (libraries torch loads from the system)."""
    paths = [str(lib / "libgomp.so.1")] if (lib / "libgomp.so.1").exists() else []
    for line in run("ldconfig", "-p").splitlines():
        m = re.search(r"^\s*(\S+) \(.*x86-64.*\) => (\S+)$", line)
        if m and SYSTEM.match(m.group(1)):
            paths.append(m.group(2))
    names: set[str] = set()
    for path in paths:
        names.update(
            s.split()[-1].split("@")[0]
            for s in run("nm", "-D", "--defined-only", path).splitlines()
        )
    return names


def main(lib: Path) -> None:
    files = sorted(lib.glob("*.so")) + sorted(lib.parent.glob("_C*.so"))
    present = {p.name for p in lib.iterdir()}
    needed: set[str] = set()
    versions: dict[str, set[str]] = collections.defaultdict(set)
    versioned: dict[tuple[str, str], set[str]] = collections.defaultdict(set)
    unversioned: set[str] = set()
    defined: set[str] = set()
    for f in files:
        needed.update(re.findall(r"\(NEEDED\).*\[(.*)\]", run("readelf", "-d", str(f))))
        # Version needs: which version names each needed library must define.
        text = run("readelf", "-V", str(f))
        text = text[text.find("Version needs") :] if "Version needs" in text else ""
        owner: dict[str, str] = {}
        current = None
        for line in text.splitlines():
            m = re.search(r"File: (\S+)", line)
            if m:
                current = m.group(1)
                continue
            m = re.search(r"Name: (\S+)", line)
            if m and current:
                versions[current].add(m.group(1))
                owner[m.group(1)] = current
        for line in run("nm", "-D", "--undefined-only", str(f)).splitlines():
            kind, name = line.split()[-2:]
            if "@" in name:
                symbol, version = name.split("@", 1)
                if version in owner:
                    versioned[(owner[version], version)].add(symbol)
            elif kind == "U":
                unversioned.add(name)
        defined.update(
            s.split()[-1].split("@")[0]
            for s in run("nm", "-D", "--defined-only", str(f)).splitlines()
        )
    unversioned -= defined | system_symbols(lib)
    # The Python C API comes from the interpreter.
    unversioned = {s for s in unversioned if not s.startswith(("Py", "_Py"))}
    missing = sorted(n for n in needed if n not in present and not SYSTEM.match(n))
    with tempfile.TemporaryDirectory() as tmp:
        for soname in missing:
            body: list[str] = []
            script: list[str] = []
            for version in sorted(versions[soname]):
                names = sorted(versioned[(soname, version)])
                body += [f"long {s}(void) {{ return 100; }}\n" for s in names]
                exported = " ".join(f"{n};" for n in names)
                script.append(
                    f"{version} {{ global: {exported} }};\n" if names else f"{version} {{ }};\n"
                )
            if soname.startswith("libcudart."):
                body += [f"long {s}(void) {{ return 100; }}\n" for s in sorted(unversioned)]
            source = Path(tmp, soname + ".c")
            source.write_text("".join(body) or "int stopstream_cuda_stub;\n")
            args = [
                "gcc",
                "-shared",
                "-fPIC",
                "-o",
                str(lib / soname),
                str(source),
                f"-Wl,-soname,{soname}",
            ]
            if script:
                version_script = Path(tmp, soname + ".map")
                version_script.write_text("".join(script))
                args.append(f"-Wl,--version-script,{version_script}")
            subprocess.run(args, check=True)
    print(f"cuda stubs: {len(missing)} libraries ({', '.join(missing)})")


if __name__ == "__main__":
    main(Path(sys.argv[1]))
