"""The host harness and the mock driver: the generated CUDA kernels run on the CPU, for CI.

``HostDriver`` is a ``Driver`` (``runtime.py``) whose device memory is host memory and whose
module is the program's source compiled as C++ by the system compiler, after ``host.h``
(``__global__`` and friends defined away, ``blockIdx``/``threadIdx`` set by a loop over the
grid, ``__syncthreads`` as a switch between fibers): the same kernel bodies that NVRTC
compiles, with ``-ffp-contract=off`` (no FMA, as ``--fmad=false``). A launch runs the kernel
over its whole grid; a "graph" is the list of launches, replayed in order. So the runner's
arena, copies, graph capture and replay, and every kernel's indexing and summation order, run
in CI and are compared bit for bit with the reference (``runtime="host"``).

NaNs: by default the harness makes the NaNs a GPU makes (``host_gpunan.h``: every floating-point
operation whose result is NaN returns the canonical NaN, as NVIDIA's arithmetic does), so a
kernel that relies on x86's NaN propagation instead of fixing its NaNs up (``x86nan.cuh``) fails
on the CPU too. ``GRADC_HOST_NAN=x86`` compiles the kernels as plain C++ (x86's NaNs).
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import random
import shlex
import subprocess
import tempfile
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from gradc.errors import GradcError

from gradc.backends.cuda.dag import random_order
from gradc.backends.cuda.prelude import HOST_GPU_NAN, HOST_HEADER

FLAGS = ("-std=c++17", "-ffp-contract=off", "-fno-fast-math", "-fno-math-errno",
         "-fno-strict-aliasing", "-fPIC", "-shared", "-w")
# Sources above this many characters (a whole model's step: hundreds of kernels) are compiled
# without optimization: the C++ compiler's time grows faster than the kernels' run time shrinks
# (mobilenet_v2's 1.2 MB step: 19 s at -O1, 8 s at -O0). The arithmetic is IEEE either way.
LARGE_SOURCE = 256 * 1024
CXX_TIMEOUT = 300.0  # seconds one compiler run may take
NAN_MODES = ("gpu", "x86")


def nan_mode() -> str:
    """The harness's NaNs: ``$GRADC_HOST_NAN`` (``gpu``, the default, or ``x86``)."""
    mode = os.environ.get("GRADC_HOST_NAN", "gpu") or "gpu"
    if mode not in NAN_MODES:
        raise GradcError(f"cuda target: GRADC_HOST_NAN: expected one of {', '.join(NAN_MODES)}, "
                         f"got {mode!r}")
    return mode


def harness_source(source: str, kernels: Sequence[str], nan: str = "gpu") -> str:
    """``host.h`` (and ``host_gpunan.h`` in the GPU NaN mode), the program, and
    ``gradc_host_launch``: kernel number -> launch."""
    table = ", ".join(kernels) or "0"
    header = HOST_HEADER + ("\n" + HOST_GPU_NAN if nan == "gpu" else "")
    return (f"{header}\n{source}\n"
            f"static void (*const gc_table[])(char *) = {{{table}}};\n"
            "extern \"C\" int gradc_host_launch(int k, unsigned int gx, unsigned int bx, "
            "int fibers, char *arena) {\n"
            "  return gc_launch(gc_table[k], gx, 1, 1, bx, 1, 1, fibers, arena);\n}\n")


def _version(cxx: str) -> str:
    try:
        r = subprocess.run([*shlex.split(cxx), "--version"], capture_output=True, text=True,
                           timeout=CXX_TIMEOUT)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise GradcError(f"cuda target: cxx: expected a C++ compiler for the host harness, "
                         f"got {cxx!r} ({e})") from None
    return (r.stdout or r.stderr).strip()


def build_harness(source: str, cxx: str, cache_dir: str) -> Path:
    """The shared library of a harness source, compiled unless it is cached."""
    argv = shlex.split(cxx) or ["c++"]
    flags = (*FLAGS, "-O0" if len(source) > LARGE_SOURCE else "-O1")
    key = hashlib.sha256("\0".join([source, *argv, _version(cxx), *flags]).encode())
    lib = Path(cache_dir) / f"host-{key.hexdigest()[:32]}.so"
    if lib.exists():
        return lib
    try:
        lib.parent.mkdir(parents=True, exist_ok=True)
        src = lib.with_suffix(".cpp")
        src.write_text(source)
        fd, tmp = tempfile.mkstemp(dir=lib.parent, prefix=".tmp-", suffix=".so")
        os.close(fd)
    except OSError as e:
        raise GradcError(f"cuda target: cache_dir: expected a writable directory, got "
                         f"{str(lib.parent)!r} ({e.strerror})") from None
    try:
        try:
            r = subprocess.run([*argv, *flags, "-o", tmp, str(src), "-lm"], capture_output=True,
                               text=True, timeout=CXX_TIMEOUT)
        except subprocess.TimeoutExpired:
            raise GradcError(f"cuda target: cxx: {argv[0]} did not finish within "
                             f"{CXX_TIMEOUT:g} s ({src})") from None
        if r.returncode != 0:
            raise GradcError(f"cuda target: the host harness did not compile ({src}):\n"
                             f"{r.stderr.strip()[-3000:]}")
        os.replace(tmp, lib)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return lib


class HostDriver:
    """The ``Driver`` of ``runtime="host"``: host memory, kernels run by the harness."""

    arch = "host"

    def __init__(self, cxx: str, cache_dir: str, nan: str | None = None) -> None:
        self.cxx, self.cache_dir = cxx, cache_dir
        self.nan = nan or nan_mode()
        self._memory: dict[int, np.ndarray] = {}
        self.launches = 0  # kernels run so far (tests count graph replays with it)
        self.shuffle: random.Random | None = None  # replay in a random order of the DAG

    def load(self, source: str, kernels: Sequence[str]) -> Any:
        """Compile the harness of a program and load it."""
        lib = ctypes.CDLL(str(build_harness(harness_source(source, kernels, self.nan), self.cxx,
                                            self.cache_dir)))
        lib.gradc_host_launch.restype = ctypes.c_int
        lib.gradc_host_launch.argtypes = [ctypes.c_int, ctypes.c_uint, ctypes.c_uint,
                                          ctypes.c_int, ctypes.c_void_p]
        return (lib, {name: i for i, name in enumerate(kernels)})

    def function(self, module: Any, name: str) -> Any:
        """A kernel: (library, its number in the launch table)."""
        lib, numbers = module
        return (lib, numbers[name])

    def alloc(self, nbytes: int) -> int:
        """Host memory standing in for device memory (256-byte aligned, as cuMemAlloc's)."""
        try:
            raw = np.empty(max(1, nbytes) + 256, np.uint8)
        except ValueError:  # larger than NumPy can index: out of memory, as on the device
            raise MemoryError(f"cuda target: {nbytes} bytes of host harness memory") from None
        ptr = raw.ctypes.data + (-raw.ctypes.data % 256)
        self._memory[ptr] = raw
        return ptr

    def free(self, ptr: int) -> None:
        """Release what ``alloc`` returned."""
        self._memory.pop(ptr, None)

    def upload(self, dst: int, src: np.ndarray) -> None:
        """Host -> "device"."""
        ctypes.memmove(dst, src.ctypes.data, src.nbytes)

    def download(self, dst: np.ndarray, src: int) -> None:
        """"Device" -> host."""
        ctypes.memmove(dst.ctypes.data, src, dst.nbytes)

    def copy(self, dst: int, src: int, nbytes: int) -> None:
        """"Device" -> "device"."""
        ctypes.memmove(dst, src, nbytes)

    def capture(self, functions: list[tuple[Any, int, int, bool]], arena: int,
                deps: Sequence[Sequence[int]] | None = None) -> Any:
        """The launches to replay, in order -- or, with ``shuffle`` set (a ``random.Random``:
        tests), in a random order that respects ``deps``, as the GPU's streams may run them."""
        order = list(range(len(functions)))
        if self.shuffle is not None and deps is not None:
            order = random_order(deps, self.shuffle)
        return [(functions[j][0], functions[j][1], functions[j][2], functions[j][3], arena)
                for j in order]

    def replay(self, graph: Any) -> None:
        """Run every launch of a captured "graph" in order."""
        for (lib, k), grid, block, barrier, arena in graph:
            if lib.gradc_host_launch(k, grid, block, int(barrier), arena) != 0:
                raise MemoryError("cuda target: the host harness could not allocate the "
                                  "fibers of a launch")
            self.launches += 1

    def synchronize(self) -> None:
        """Nothing runs asynchronously here."""

    def wait_for_others(self) -> None:
        """Nothing runs asynchronously here."""

    def mark(self) -> Any:
        """Nothing runs asynchronously here: every copy is done."""
        return None

    def wait_mark(self, mark: Any) -> None:
        """Nothing runs asynchronously here."""
