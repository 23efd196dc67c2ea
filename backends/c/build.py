"""C source -> shared library, cached by a hash of the source, the compiler and the flags.

The cache lives in the directory the caller passes (``c_target.build`` resolves
``$XDG_CACHE_HOME/gradc`` or ``~/.cache/gradc`` at the API boundary). Writes are atomic: each
process compiles into a temporary file of the cache directory and ``os.replace``s it, so
concurrent builds of one graph all succeed and a reader never sees a partial library.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import shlex
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from gradc.errors import GradcError

# Every operation rounded separately (SPEC.md §1.6): no contraction into FMA, no fast math.
# -fno-math-errno changes no value (the library functions return the same results; only the
# global errno goes unset) but lets sqrtf and friends become vector instructions: with errno a
# sqrt in a loop is a scalar call guarded for negative inputs, and AdamW's update ran 2.7x
# slower (measured on resnet18's 512x512x3x3 update: 4.7 ms, 1.75 ms without).
BASE_FLAGS = ("-std=c11", "-O3", "-ffp-contract=off", "-fno-fast-math", "-fno-math-errno",
              "-fno-strict-aliasing", "-fPIC", "-shared")
# GCC's vectorizer versions a loop for aliasing with at most 10 run-time checks by default; a
# fused kernel's `omp parallel for` loses its operands' `restrict` (the loop is outlined and reads
# them through a struct), so one with 3 outputs and a handful of inputs stayed scalar: AdamW's
# update, 3 outputs and 8 operands, ran at 3.3 ns per element on one thread. Probed: compilers
# that do not know the parameter simply go without it.
# GCC 12's loop vectorizer miscompiles with 512-bit vectors on AVX-512 machines: a thin
# transposed convolution's direct loops (stride 2 on the last axis) lost terms at -O3
# -march=native and were right at -O2, without AVX-512 or with 256-bit vectors (fuzz seed
# 8484; tests/test_c_backward_conv_strides.py). 256-bit vectors cost 0-2% on this project's
# AMD EPYC (Zen 4 splits 512-bit operations in two): squeezenet1_0's batch-8 step 11.86 ->
# 12.11 ms, resnet18's 32.34 -> 32.70, the MLP's 0.26 -> 0.24. Compilers without the flag
# (other architectures) go without it.
OPTIONAL_FLAGS = ("-march=native", "--param=vect-max-version-for-alias-checks=64",
                  "-mprefer-vector-width=256")
OPENMP_FLAG = "-fopenmp"
PROBE_SOURCE = "#include <omp.h>\nint gradc_probe(void) { return omp_get_max_threads(); }\n"


@dataclass(frozen=True)
class Toolchain:
    """A working C compiler with the flags it accepts."""

    argv: tuple[str, ...]
    version: str
    flags: tuple[str, ...]
    openmp: bool


CC_TIMEOUT = 300.0  # seconds one compiler run may take before the build is refused


def _run(argv: list[str], cwd: str | None = None) -> subprocess.CompletedProcess:
    timeout = CC_TIMEOUT
    try:
        return subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise GradcError(f"c target: cc: {shlex.join(argv[:1])} did not finish within "
                         f"{timeout:g} s") from None


def _version(argv: tuple[str, ...]) -> str:
    try:
        r = _run([*argv, "--version"])
    except (FileNotFoundError, PermissionError, NotADirectoryError) as e:
        raise GradcError(f"c target: cc: expected a C compiler, got {shlex.join(argv)!r} "
                         f"({e.strerror or e}); install one or pass cc=... (or set $CC)") from None
    if r.returncode != 0:
        raise GradcError(f"c target: cc: expected a working C compiler, got "
                         f"{shlex.join(argv)!r} ({(r.stderr or r.stdout).strip()[:200]})")
    return (r.stdout or r.stderr).strip()


def _accepts(argv: tuple[str, ...], flags: list[str], source: str) -> bool:
    with tempfile.TemporaryDirectory(prefix="gradc-probe-") as d:
        src = os.path.join(d, "probe.c")
        with open(src, "w") as f:
            f.write(source)
        r = _run([*argv, *BASE_FLAGS, *flags, "-o", os.path.join(d, "probe.so"), src])
        return r.returncode == 0


@functools.lru_cache(maxsize=None)
def toolchain(cc: str, cache_dir: str) -> Toolchain:
    """Probe a compiler once per process (and once per machine, through the cache directory)."""
    argv = tuple(shlex.split(cc)) or ("cc",)
    version = _version(argv)
    key = hashlib.sha256("\0".join([*argv, version, *BASE_FLAGS, *OPTIONAL_FLAGS]).encode()
                         ).hexdigest()[:24]
    path = Path(cache_dir) / f"probe-{key}.json"
    try:
        data = json.loads(path.read_text())
        return Toolchain(argv, version, tuple(data["flags"]), bool(data["openmp"]))
    except (OSError, ValueError, KeyError, TypeError):
        pass
    flags = [f for f in OPTIONAL_FLAGS if _accepts(argv, [f], "int gradc_probe;\n")]
    openmp = _accepts(argv, flags + [OPENMP_FLAG], PROBE_SOURCE)
    tc = Toolchain(argv, version, tuple(flags), openmp)
    _atomic_write(path, json.dumps({"flags": flags, "openmp": openmp}).encode())
    return tc


def _atomic_write(path: Path, data: bytes, strict: bool = False) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except OSError:
        if strict:
            raise
        # A probe result that cannot be cached only costs a probe next time.


def compile_library(source: str, cc: str, cache_dir: str, openmp: bool = True,
                    name: str = "graph") -> Path:
    """The path of the shared library of ``source``, compiling it unless it is cached.

    ``name`` (the graph's) is named in errors: a failing or hanging compiler is a GradcError.
    """
    tc = toolchain(cc, cache_dir)
    flags = [*BASE_FLAGS, *tc.flags] + ([OPENMP_FLAG] if openmp and tc.openmp else [])
    key = hashlib.sha256("\0".join([source, *tc.argv, tc.version, *flags]).encode()).hexdigest()
    lib = Path(cache_dir) / f"{key[:32]}.so"
    if lib.exists():
        return lib
    src = lib.with_suffix(".c")
    try:
        lib.parent.mkdir(parents=True, exist_ok=True)
        _atomic_write(src, source.encode(), strict=True)
        fd, tmp = tempfile.mkstemp(dir=lib.parent, prefix=".tmp-", suffix=".so")
        os.close(fd)
    except OSError as e:
        raise GradcError(f"c target: cache_dir: expected a writable directory, got "
                         f"{str(lib.parent)!r} ({e.strerror})") from None
    try:
        try:
            r = _run([*tc.argv, *flags, "-o", tmp, str(src), "-lm"])
        except GradcError as e:
            raise GradcError(f"{e} on graph {name!r} ({source.count(chr(10))} lines of C in "
                             f"{src})") from None
        if r.returncode != 0:
            raise GradcError(f"c target: the C compiler failed on the generated source of "
                             f"graph {name!r} ({src}):\n{r.stderr.strip()[-2000:]}")
        os.replace(tmp, lib)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return lib
