"""What every CUDA emitter receives: the C target's kernel context plus the launch's work.

A CUDA kernel is ``GC_KERNEL kN(char *__restrict__ gc_arena)``: every buffer lies at an offset of
the executable's one device arena that is a compile-time constant (``emit.py`` binds each to a
pointer ``p0``, ``p1``, ... before the body), constants are ``__device__`` arrays, and every shape
is static. The emitter writes the body into ``code``, exactly as a C emitter does (the context is
the C target's ``Kernel``, so ``anchored``, ``ctx_gen`` and the scalar expressions work unchanged,
in the CUDA dialect of ``scalar.py``), and opens its work loop with ``each``: a grid-stride loop
over ``count`` work items (output elements, groups, ...), from which ``emit.py`` sizes the launch.
"""

from __future__ import annotations

import math
import re
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Iterator, Mapping, Sequence

from gradc.errors import UnsupportedError
from gradc.ir.types import Dim

from gradc.backends.c.kernel import NARROW, Kernel
from gradc.backends.c.writer import CWriter
from gradc.backends.c.scalar import Scalar
from gradc.backends.cuda.scalar import CUDA_SCALAR

BLOCK = 256  # threads per block (GC_BLOCK of the prelude; __launch_bounds__)
# Threads per block of a launch whose threads each do a long sequential sum (a group's or a
# scale element's canonical sum): one warp per block spreads few such threads over many SMs.
SERIAL_BLOCK = 32
MAX_GRID = 4096  # blocks: more work items than BLOCK * MAX_GRID are strided over
# Entries of one baked ``__device__`` table (the geometry of a pooling or resampling axis): the
# tables are source text, so their size bounds the time and memory of generating and compiling.
TABLE_BUDGET = 1 << 18


def check_table(op: str, what: str, n: int) -> None:
    """UnsupportedError when a table of ``n`` entries would exceed ``TABLE_BUDGET``."""
    if n > TABLE_BUDGET:
        raise UnsupportedError(f"cuda target: {op}: expected {what} of at most {TABLE_BUDGET} "
                               f"entries (the kernel's tables are baked into its source), "
                               f"got {n}")


@dataclass
class Part:
    """One finished launch of a node that needs several (``CudaKernel.next_launch``)."""

    code: CWriter
    work: int
    barrier: bool
    read: set[str]
    block: int


@dataclass
class CudaKernel(Kernel):
    """A kernel function and its launch: ``work`` items over a grid-stride loop.

    A node whose work has steps that depend on each other across threads (sort, then sum)
    writes them as several launches: ``next_launch`` closes the current one. Scratch space
    (``scratch``) is a region of the arena after the temporaries, valid during the node's own
    launches only; ``error_at`` is the arena offset of the run-time error record (``index.py``)
    when the program has one."""

    work: int = 1
    barrier: bool = False  # the body uses __syncthreads (the host harness runs it as fibers)
    block: int = BLOCK  # threads per block of the current launch (at most BLOCK)
    tables: list[str] = field(default_factory=list)  # ``__device__`` arrays the body reads
    # the element-wise expressions: the C target's with x86's NaN results (scalar.py)
    scalar: Mapping[str, Scalar] | None = field(default_factory=lambda: CUDA_SCALAR)
    parts: list[Part] = field(default_factory=list)  # launches closed by ``next_launch``
    scratch_at: int = 0  # arena offset of the scratch region (set by emit.py)
    scratch_bytes: int = 0  # scratch used so far by this node
    error_at: int | None = None  # arena offset of the error record, if the program has one
    split: bool = False  # sums="split": long sums into few outputs may be split (split.py)
    reordered: bool = False  # set by an emitter that summed in another order than canonical
    narrow_index: bool = True  # broadcast coordinates in 32-bit arithmetic (c/kernel.py)

    def next_launch(self) -> None:
        """Close the current launch; what follows is written into the next one."""
        self.parts.append(self.part())
        self.code, self.work, self.barrier, self.read = CWriter(), 1, False, set()
        self.block = BLOCK

    def note_reads(self) -> None:
        """Note as used every buffer pointer that the current launch's text names (for lines
        made by closures that called ``param`` while an earlier launch was being written)."""
        text = self.code.text()
        for name in set(self.ptr.values()):
            if re.search(rf"\b{name}\b", text):
                self.read.add(name)

    def part(self) -> Part:
        """The current launch."""
        return Part(self.code, self.work, self.barrier, self.read, self.block)

    def scratch(self, ctype: str, count: int) -> str:
        """A C pointer expression to ``count`` elements of ``ctype`` of scratch (8-byte
        elements at most), 256-byte aligned."""
        at = self.scratch_at + self.scratch_bytes
        self.scratch_bytes += -(-max(1, count) * 8 // 256) * 256
        return f"(({ctype} *)(gc_arena + {at}))"

    def table(self, ctype: str, values: Sequence[int]) -> str:
        """A ``__device__`` array of integers for this kernel; returns its name."""
        name = f"{self.name}_t{len(self.tables)}"
        data = ", ".join(str(int(v)) for v in values) or "0"
        self.tables.append(f"__device__ const {ctype} {name}[{max(1, len(values))}] = "
                           f"{{{data}}};")
        return name

    @contextmanager
    def each(self, count: int, var: str = "i") -> Iterator[str]:
        """``for (int64_t var = first; var < count; var += stride)``: one work item per turn."""
        self.work = max(self.work, int(count))
        with self.code.block(f"for (int64_t {var} = gc_first(); {var} < {count}; "
                             f"{var} += gc_stride())"):
            yield var


def grid(work: int, block: int = BLOCK) -> int:
    """The blocks of a launch over ``work`` items."""
    return max(1, min(MAX_GRID, -(-work // block)))


def coords(k: Kernel, shape: Sequence[Dim], flat: str, prefix: str) -> list[str]:
    """Declare ``<prefix><a>``: the coordinates of element ``flat`` of ``shape`` (row-major,
    static); returns their names."""
    sizes = static_shape(k, shape)
    names = []
    narrow = len(sizes) > 1 and math.prod(sizes) < NARROW  # a GPU divides int64 in software
    if narrow:
        k.code.line(f"const uint32_t {prefix}_u = (uint32_t)({flat});")
    for a, (size, st) in enumerate(zip(sizes, row_major(sizes))):
        if narrow:
            value = f"{prefix}_u" if st == 1 else f"{prefix}_u / {st}u"
            value = f"(int64_t)({value} % {size}u)" if a > 0 else f"(int64_t)({value})"
        else:
            value = flat if st == 1 else f"{flat} / {st}"
            if a > 0:
                value = f"{value} % {size}"
        names.append(f"{prefix}{a}")
        k.code.line(f"const int64_t {names[-1]} = {value};")
    return names


def row_major(sizes: Sequence[int]) -> list[int]:
    """Element strides of a row-major shape."""
    out, inner = [], 1
    for s in reversed(sizes):
        out.append(inner)
        inner *= int(s)
    return out[::-1]


def static_shape(k: Kernel, shape: Sequence[Dim]) -> list[int]:
    """The sizes of a shape that is static in this program (the CUDA target binds every
    symbol before it generates)."""
    out = []
    for d in shape:
        s = k.dims.static(d)
        if s is None:
            raise ValueError(f"internal error: cuda target: dim {d!r} is not bound")
        out.append(s)
    return out
