"""Running a CUDA program: one device arena, the step captured once as a CUDA graph, replayed.

``CudaRunner`` is written against a ``Driver`` (``rt.DeviceDriver`` on a GPU, ``host.
HostDriver`` for the host harness), so the same code moves the data and replays the graph in
both. A call:

1. puts every input in its slot of the arena: a NumPy array is uploaded; a GPU array (a
   ``Foreign``: a ``DeviceArray`` or another library's array) is copied device to device --
   or not at all when it already is that slot (a ``Trainer``'s state, updated in place);
   sources inside this arena are staged first, so no slot is overwritten before it is read;
2. replays the graph (captured on the first call: the launches never change, since every
   kernel reads the arena's base and constant offsets); when the program checks indices, reads
   the error record back and raises ``InputError`` (the launches after a failed check
   returned at once: no output is produced and no in-place state written);
3. returns each output: a ``DeviceArray`` view of its slot for the names in
   ``keep_on_device`` (nothing is read back), else a NumPy copy.
"""

from __future__ import annotations

import math
import operator
import threading
import weakref
from typing import Any, Callable, Collection, Mapping, Protocol, Sequence

import numpy as np

from gradc.errors import InputError

from gradc.backends.cuda.arrays import DeviceArray, Foreign, describe
from gradc.backends.cuda.emit import Program
from gradc.backends.cuda.index import RECORD
from gradc.ir.ops.gather import record_message


class Driver(Protocol):
    """Device memory, copies and launches (see ``rt.DeviceDriver``, ``host.HostDriver``)."""

    arch: str

    def load(self, source: str, kernels: Sequence[str]) -> Any: ...
    def function(self, module: Any, name: str) -> Any: ...
    def alloc(self, nbytes: int) -> int: ...
    def free(self, ptr: int) -> None: ...
    def upload(self, dst: int, src: np.ndarray) -> None: ...
    def download(self, dst: np.ndarray, src: int) -> None: ...
    def copy(self, dst: int, src: int, nbytes: int) -> None: ...
    def capture(self, functions: list[tuple[Any, int, int, bool]], arena: int,
                deps: Sequence[Sequence[int]] | None = None) -> Any: ...
    def replay(self, graph: Any) -> None: ...
    def synchronize(self) -> None: ...
    def wait_for_others(self) -> None: ...
    def mark(self) -> Any: ...
    def wait_mark(self, mark: Any) -> None: ...


class CudaRunner:
    """One program loaded on one driver, with its arena and its captured graph."""

    def __init__(self, program: Program, driver: Driver, keep_on_device: Collection[str] = (),
                 on_device: bool = True) -> None:
        self.program, self.driver = program, driver
        self.keep = set(keep_on_device)
        self.on_device = on_device
        module = driver.load(program.source, [x.kernel for x in program.launches])
        self.functions = [(driver.function(module, x.kernel), x.grid, x.block, x.barrier)
                          for x in program.launches]
        self.arena_bytes = program.arena_bytes
        self.arena = 0  # allocated on the first call (a MemoryError there is the Executable's
        # ResourceError, naming the graph's largest value)
        self.graph: Any = None
        self._staging: tuple[int, int] | None = None  # (address, bytes) for in-arena sources
        # the outputs in order: name -> its DeviceArray view, or None for one downloaded
        # (``_outputs``), and (name, address, shape, dtype) of each downloaded one
        self._template: dict[str, DeviceArray | None] | None = None
        self._downloads: list[tuple[str, int, tuple[int, ...], Any]] = []
        self._lock = threading.Lock()  # one call at a time: the arena is shared
        # (names, DeviceArrays, the other inputs' indices): the inputs found in their own
        # slots by the last call; the same objects again need no look (``_inputs``)
        self._resident: tuple[list[str], list[Any], list[int]] | None = None

    def download(self, dst: np.ndarray, src: int) -> None:
        """A device -> host copy after the work queued so far (for ``DeviceArray``)."""
        self.driver.download(dst, src)

    def synchronize(self) -> None:
        """Wait for the work queued so far (before another library reads a ``DeviceArray``)."""
        self.driver.synchronize()

    def __call__(self, arrays: Mapping[str, Any], bindings: Mapping[str, int]
                 ) -> dict[str, Any]:
        with self._lock:
            if not self.arena:
                self.arena = self.driver.alloc(self.arena_bytes)
                weakref.finalize(self, self.driver.free, self.arena)
            others = self._inputs(arrays)
            copied = self.driver.mark() if others else None  # the foreign arrays are read
            if self.graph is None and self.functions:
                self.graph = self.driver.capture(self.functions, self.arena,
                                                 self.program.dependencies)
            if self.graph is not None:
                self.driver.replay(self.graph)
            self._raise_input_error()
            out = self._outputs()
            if copied is not None and not self._downloads and self.program.error_offset is None:
                # the caller may free its arrays once the call returns: wait for their copies
                # (a download, of an output or of the error record, waited for the stream)
                self.driver.wait_mark(copied)
            return out

    def _raise_input_error(self) -> None:
        """InputError when a range check of this call found an index out of range (its record
        in the arena; the launches after the check wrote nothing)."""
        if self.program.error_offset is None:
            return
        record = np.zeros(RECORD, np.int64)
        self.driver.download(record, self.arena + self.program.error_offset)
        if record[0]:
            raise InputError(record_message(record.tolist()))

    def _inputs(self, arrays: Mapping[str, Any]) -> bool:
        """Put the call's arrays in their slots; True when one is another library's (the
        call must then wait for the stream before it returns)."""
        p, d = self.program, self.driver
        staged: list[tuple[int, int, int]] = []  # (slot, source, bytes) of in-arena sources
        later: list[tuple[int, Any]] = []
        others = False
        last = self._resident
        again = last is not None and all(map(operator.is_, map(arrays.get, last[0]), last[1]))
        # again: the same DeviceArrays in their slots as in the last call; only the rest
        todo: Sequence[int] = last[2] if again and last is not None else range(len(p.inputs))
        resident: list[int] = []
        for i in todo:
            v = p.inputs[i]
            a, slot = arrays[v.name], self.arena + p.input_offsets[i]
            if type(a) is DeviceArray:  # taken as it is by the Executable's fast path
                if a.ptr == slot:
                    resident.append(i)
                    continue  # already in its slot: this executable's own output
                a = describe(a)
            if isinstance(a, Foreign):
                if a.ptr == slot:
                    continue  # already in its slot: this executable's own output
                nbytes = math.prod(a.shape) * a.dtype.itemsize
                if self.arena <= a.ptr < self.arena + self.arena_bytes:
                    staged.append((slot, a.ptr, nbytes))
                    continue
                others = others or not a.ours
            later.append((slot, a))
        if resident or not again:  # (resident: arrays that came back in their slots)
            if again and last is not None:
                rest = set(last[2])
                resident += [i for i in range(len(p.inputs)) if i not in rest]
            kept = set(resident)
            names = [p.inputs[i].name for i in resident]
            self._resident = (names, [arrays[n] for n in names],  # one assignment
                              [i for i in range(len(p.inputs)) if i not in kept])
        if others:
            d.wait_for_others()  # another library's stream may still be writing its array
        if staged:
            tmp = self._stage(sum(n for _, _, n in staged))
            at = tmp
            for _, src, n in staged:
                d.copy(at, src, n)
                at += n
            for slot, _, n in staged:
                later.append((slot, (tmp, n)))
                tmp += n
        for slot, a in later:
            if isinstance(a, np.ndarray):
                d.upload(slot, a)
            elif isinstance(a, Foreign):
                d.copy(slot, a.ptr, math.prod(a.shape) * a.dtype.itemsize)
            else:
                d.copy(slot, a[0], a[1])
        return others

    def _stage(self, nbytes: int) -> int:
        """A device buffer of at least ``nbytes`` for sources inside the arena."""
        if self._staging is None or self._staging[1] < nbytes:
            ptr = self.driver.alloc(nbytes)
            weakref.finalize(self, self.driver.free, ptr)
            self._staging = (ptr, nbytes)
        return self._staging[0]

    def _outputs(self) -> dict[str, Any]:
        """The outputs by name, in the program's order: a ``DeviceArray`` view for those kept
        on the device (one object per output: the arena never moves), a NumPy copy of the
        others. The views and the copies' places are worked out on the first call."""
        if self._template is None:
            p = self.program
            self._template, self._downloads = {}, []
            for j, v in enumerate(p.outputs):
                addr = self.arena + p.output_offsets[j]
                shape, dtype = p.output_shapes[j], v.type.dtype.numpy
                if v.name in self.keep:
                    self._template[v.name] = DeviceArray(addr, shape, dtype, self,
                                                         self.on_device)
                else:
                    self._template[v.name] = None
                    self._downloads.append((v.name, addr, shape, dtype))
        out: dict[str, Any] = dict(self._template)
        for name, addr, shape, dtype in self._downloads:
            a = np.empty(shape, dtype)
            self.driver.download(a, addr)
            out[name] = a
        return out


class Specializing:
    """A runner per set of symbol values: the CUDA program is generated for static shapes, so
    a graph with symbols is generated, compiled and loaded on the first call with each set."""

    LIMIT = 16  # programs kept; beyond, the least recently used is dropped

    def __init__(self, symbols: Sequence[str], make: Callable[[dict[str, int]], CudaRunner]):
        self.symbols = list(symbols)
        self.make = make
        self.runners: dict[tuple[int, ...], CudaRunner] = {}

    @property
    def arena_bytes(self) -> int | None:
        """The arena of the last program run (None before the first call)."""
        return next(reversed(self.runners.values())).arena_bytes if self.runners else None

    def __call__(self, arrays: Mapping[str, Any], bindings: Mapping[str, int]
                 ) -> dict[str, Any]:
        missing = [s for s in self.symbols if s not in bindings]
        if missing:
            raise InputError(f"symbol {missing[0]!r}: expected a value (from an input's shape "
                             f"or compile(shapes=...)), got none")
        key = tuple(int(bindings[s]) for s in self.symbols)
        runner = self.runners.pop(key, None)
        if runner is None:
            runner = self.make({s: int(bindings[s]) for s in self.symbols})
            if len(self.runners) >= self.LIMIT:
                self.runners.pop(next(iter(self.runners)))
        self.runners[key] = runner
        return runner(arrays, bindings)
