"""Loading a compiled graph through ctypes and calling it on checked arrays."""

from __future__ import annotations

import ctypes
import threading
from pathlib import Path
from typing import Mapping

import numpy as np

from gradc.errors import GradcError, InputError
from gradc.ir.core import Value
from gradc.backends.c.gather import INPUT_ERROR, RECORD, describe


class CRunner:
    """Calls ``gradc_entry`` of a loaded library; arrays are already checked by the Executable.

    Outputs are allocated here with the bound shapes, so C writes only to fresh, contiguous
    arrays of exactly the size it computes from the same symbol values; an output granted in
    place (``update_in_place``) is instead its input's array, which the call overwrites.
    """

    def __init__(self, lib_path: Path, symbols: list[str], inputs: list[Value],
                 outputs: list[Value], threads: int | None,
                 in_place: dict[int, int] | None = None, arena_bytes: int | None = None,
                 labels: list[str] | None = None, profile: bool = False) -> None:
        try:
            self.lib = ctypes.CDLL(str(lib_path))
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
            raise InputError(describe(list(record)))
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
