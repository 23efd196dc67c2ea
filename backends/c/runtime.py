"""Loading a compiled graph through ctypes and calling it on checked arrays.

OpenMP's idle threads: every kernel of a program is a parallel region that ends with its
threads waiting for one another, and between regions the other threads wait for the next one.
GCC's OpenMP runtime (libgomp) spins in each such wait for ``GOMP_SPINCOUNT`` iterations
before it sleeps: 300,000 by default, 12 to 16 ms on the AMD EPYC this was measured on (a
``pause`` takes about 45 ns there; libgomp assumes 10). On an idle machine that costs nothing;
where other processes use the cores, a spinning thread holds its core while the thread it
waits for is not running, and each of a step's kernels can wait for a time slice: a
character-level GPT step of 274 kernels took 1.1 s instead of 24 ms with two busy processes
beside it. ``load_library`` sets libgomp's spin count (``spin_count``; default
``DEFAULT_SPIN_COUNT``, about 50 us there) when it brings libgomp into the process: as long as
the gaps between a step's kernels, so an idle machine runs as fast as with the default, and
short beside a time slice (0 sleeps at once, as ``OMP_WAIT_POLICY=passive``: 40% slower on
an idle machine for that GPT). libgomp reads its settings once, from the environment, when
it is loaded, so they are set for that load only and belong to the whole process: the first
program that loads libgomp decides (``openmp_state``); ``GOMP_SPINCOUNT`` or
``OMP_WAIT_POLICY`` set by the user before that are left as they are unless ``spin_count``
is given, and a library loaded before gradc's first program (PyTorch ships libgomp under the
same name) keeps its own settings.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import threading
from pathlib import Path
from typing import Iterator, Mapping

import numpy as np

from gradc.errors import GradcError, InputError
from gradc.ir.core import Value
from gradc.ir.ops.gather import record_message
from gradc.backends.c.gather import INPUT_ERROR, RECORD


DEFAULT_SPIN_COUNT = 1000  # libgomp's spins before an idle thread sleeps (see the docstring)
LIBGOMP = "libgomp.so.1"
_OPENMP_ENVIRONMENT = ("GOMP_SPINCOUNT", "OMP_WAIT_POLICY")
_openmp_lock = threading.Lock()
# What this process's libgomp was loaded with, once it is loaded: {"spin_count": int or None
# (unknown), "by": who set it}.
_openmp: dict[str, object] = {}


def _libgomp_loaded() -> bool:
    """True when a libgomp is in the process (a program's ``NEEDED`` libgomp.so.1 is then it)."""
    noload = getattr(os, "RTLD_NOLOAD", None)
    if noload is None:  # no way to ask: treated as loaded by someone else
        return True
    try:
        ctypes.CDLL(LIBGOMP, mode=noload | os.RTLD_LAZY)
    except OSError:
        return False
    return True


@contextlib.contextmanager
def _environment(name: str, value: str) -> Iterator[None]:
    """``name=value`` in the process's environment while the block runs, then as it was."""
    old = os.environ.get(name)
    os.environ[name] = value
    try:
        yield
    finally:
        if old is None:
            del os.environ[name]
        else:
            os.environ[name] = old


def openmp_state() -> dict[str, object]:
    """How this process's libgomp was set up: ``{}`` before it is loaded, else ``spin_count``
    (None when unknown) and ``by`` (gradc, the environment, or another library)."""
    with _openmp_lock:
        if not _openmp and _libgomp_loaded():
            _openmp.update(spin_count=None, by="another library")
        return dict(_openmp)


def load_library(path: str, spin_count: int | None = None) -> ctypes.CDLL:
    """Load a compiled program (or libgomp itself); the load that brings libgomp into the
    process sets its spin count: ``spin_count``, else the user's environment if it sets one,
    else ``DEFAULT_SPIN_COUNT``. A ``spin_count`` that the loaded libgomp does not have is a
    GradcError (it cannot change any more)."""
    with _openmp_lock:
        if not _openmp and _libgomp_loaded():
            _openmp.update(spin_count=None, by="another library")
        if _openmp:
            if spin_count is not None and _openmp["spin_count"] != spin_count:
                raise GradcError(_late(spin_count))
            return ctypes.CDLL(path)
        if spin_count is None and any(k in os.environ for k in _OPENMP_ENVIRONMENT):
            lib = ctypes.CDLL(path)
            given = os.environ.get("GOMP_SPINCOUNT", "")
            state = {"spin_count": int(given) if given.isdigit() else None,
                     "by": "the environment"}
        else:
            value = DEFAULT_SPIN_COUNT if spin_count is None else spin_count
            with _environment("GOMP_SPINCOUNT", str(value)):
                lib = ctypes.CDLL(path)
            state = {"spin_count": value, "by": "gradc"}
        if _libgomp_loaded():  # else a program without OpenMP: libgomp is still to come
            _openmp.update(state)
        return lib


def _late(spin_count: int) -> str:
    """Why ``spin_count`` cannot be had: libgomp is loaded with other settings."""
    if _openmp["by"] == "another library":
        how = ("by another library before gradc's first C program (PyTorch ships the same "
               "runtime), with its own settings")
    elif _openmp["spin_count"] is None:
        how = "with the settings of the environment (OMP_WAIT_POLICY or GOMP_SPINCOUNT)"
    else:
        how = (f"with spin count {_openmp['spin_count']} (set by "
               f"{'the first C program' if _openmp['by'] == 'gradc' else 'the environment'})")
    return (f"c target: spin_count={spin_count}: OpenMP (libgomp) was loaded into this process "
            f"{how}, and reads its spin count once, when it is loaded; pass spin_count to the "
            f"first C executable of the process (gradc train: --spin-count), set "
            f"GOMP_SPINCOUNT before the process starts, or leave spin_count out")


def preload_openmp(spin_count: int | None = None) -> None:
    """Load libgomp now with ``spin_count`` (as ``load_library``), before a library that brings
    its own (PyTorch) is imported; nothing where no libgomp is installed."""
    try:
        load_library(LIBGOMP, spin_count)
    except OSError:
        pass


class CRunner:
    """Calls ``gradc_entry`` of a loaded library; arrays are already checked by the Executable.

    Outputs are allocated here with the bound shapes, so C writes only to fresh, contiguous
    arrays of exactly the size it computes from the same symbol values; an output granted in
    place (``update_in_place``) is instead its input's array, which the call overwrites.
    """

    def __init__(self, lib_path: Path, symbols: list[str], inputs: list[Value],
                 outputs: list[Value], threads: int | None,
                 in_place: dict[int, int] | None = None, arena_bytes: int | None = None,
                 labels: list[str] | None = None, profile: bool = False,
                 spin_count: int | None = None) -> None:
        try:
            self.lib = load_library(str(lib_path), spin_count)
        except OSError as e:
            raise GradcError(f"c target: cc: expected a compiler whose shared libraries load "
                             f"into this process, got a library that does not load ({e})") from None
        self.fn = self.lib.gradc_entry
        self.fn.restype = ctypes.c_int
        self.fn.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int]
        self.fn_arena = self.lib.gradc_entry_arena
        self.fn_arena.restype = ctypes.c_int
        self.fn_arena.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int, ctypes.c_void_p]
        # The planned arena of intermediate values (static shapes): allocated on the first call
        # and reused by every later one, so a call allocates no memory for them. A call made
        # while another is running (threads) takes gradc_entry, which allocates its own.
        self.arena_bytes = arena_bytes
        self._arena: np.ndarray | None = None
        self._arena_lock = threading.Lock()
        self.labels = list(labels or [])
        self.profiled = profile
        self.symbols = symbols
        self.inputs = inputs
        self.outputs = outputs
        self.threads = threads or 0
        self.in_place = dict(in_place or {})  # output index -> input index it overwrites
        self._in_names = [v.name for v in inputs]
        self._ptrs = ctypes.c_void_p * max(1, len(inputs) + len(outputs))
        self._last: tuple[list[np.ndarray], list[int]] = ([], [])  # see _addresses

    def _addresses(self, ins: list[np.ndarray]) -> list[int]:
        """The inputs' data addresses. Reading one costs about 1.4 us (``a.ctypes`` builds an
        object), so a training step with 40 arrays spent 60 us on them: an input that is the
        very array of the previous call (a Trainer's state, updated in place) reuses its
        address. The previous call's inputs are held until the next one, so their data
        cannot move in between: NumPy refuses to resize an array that another reference
        holds (short of ``refcheck=False``, which it documents as unsafe for that reason)."""
        prev, addr = self._last
        out = [addr[i] if i < len(prev) and a is prev[i] else a.ctypes.data
               for i, a in enumerate(ins)]
        self._last = (ins, out)
        return out

    def _shape(self, v: Value, bindings: Mapping[str, int]) -> tuple[int, ...]:
        return tuple(bindings[d] if isinstance(d, str) else d for d in v.type.shape)

    def __call__(self, arrays: Mapping[str, np.ndarray],
                 bindings: Mapping[str, int]) -> dict[str, np.ndarray]:
        missing = [s for s in self.symbols if s not in bindings]
        if missing:
            raise InputError(f"symbol {missing[0]!r}: expected a value (from an input's shape "
                             f"or compile(shapes=...)), got none")
        sym = np.array([bindings[s] for s in self.symbols] or [0], dtype=np.int64)
        ins = [arrays[name] for name in self._in_names]
        # An output granted in place is the input array itself, updated by the call.
        outs = [ins[self.in_place[j]] if j in self.in_place else
                _aligned_empty(self._shape(v, bindings), v.type.dtype.numpy)
                for j, v in enumerate(self.outputs)]
        addr = self._addresses(ins)
        ptrs = self._ptrs(*addr, *[addr[self.in_place[j]] if j in self.in_place else
                                   a.ctypes.data for j, a in enumerate(outs)])
        if self.arena_bytes and self._arena_lock.acquire(blocking=False):
            try:
                if self._arena is None:
                    self._arena = _aligned_empty((self.arena_bytes,), np.dtype(np.uint8))
                rc = self.fn_arena(sym.ctypes.data, ptrs, self.threads, self._arena.ctypes.data)
            finally:
                self._arena_lock.release()
        else:
            rc = self.fn(sym.ctypes.data, ptrs, self.threads)
        if rc == INPUT_ERROR:  # an index out of range, found before anything was written
            record = (ctypes.c_int64 * RECORD)()
            self.lib.gradc_error(record)
            raise InputError(record_message(list(record)))
        if rc != 0:
            # A kernel's scratch allocation failed: the Executable reports it as a ResourceError
            # naming the graph's largest value and its bytes.
            raise MemoryError("c target: a kernel could not allocate its scratch memory")
        return {v.name: a for v, a in zip(self.outputs, outs)}


    def profile(self, reset: bool = False) -> list[dict]:
        """Time per kernel since the library was loaded (or last reset), slowest first."""
        n = len(self.labels)
        buf = (ctypes.c_double * max(1, 2 * n))()
        self.lib.gradc_profile.restype = ctypes.c_int
        self.lib.gradc_profile(buf, ctypes.c_int(1 if reset else 0))
        rows = [{"kernel": f"k{i}", "what": self.labels[i], "calls": int(buf[2 * i + 1]),
                 "seconds": float(buf[2 * i])} for i in range(n)]
        return sorted(rows, key=lambda r: -r["seconds"])


def _aligned_empty(shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
    """An uninitialized C-contiguous array whose data starts on a 64-byte boundary.

    Kernels stream large outputs with 16-byte non-temporal stores, and whole cache lines per
    block when the start is line aligned; NumPy itself only guarantees 16 bytes.
    """
    dtype = np.dtype(dtype)
    n = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    raw = np.empty(n + 64, np.uint8)
    off = -raw.ctypes.data % 64
    return raw[off:off + n].view(dtype).reshape(shape)
