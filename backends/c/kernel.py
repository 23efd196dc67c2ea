"""What every C emitter receives: the node, its buffers, symbolic dims, and index contexts."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Mapping, Sequence

from gradc.errors import GradcError
from gradc.ir.core import Node, Value
from gradc.ir.fused import anchored_parts
from gradc.ir.types import Dim

from gradc.backends.c.scalar import ExprGen, Scalar
from gradc.backends.c.ctypes_map import Dims, ctype, strides
from gradc.backends.c.writer import CWriter


@dataclass
class Kernel:
    """One generated C function: ``static int name(S, nt, <outputs>, <inputs>)``.

    An emitter writes the function's body into ``code``. A parameter's name goes into the text
    through ``param`` (or a load of an ``ExprGen`` made by ``ctx_gen``), which notes it in
    ``read``: the parameters never read are voided, so the C compiler does not warn about them.
    """

    name: str
    node: Node
    dims: Dims
    ptr: dict[Value, str]  # values held in memory (outer and body inputs/outputs) -> parameter
    code: CWriter = field(default_factory=CWriter)
    types: dict[str, str] = field(default_factory=dict)  # parameter -> C element type override
    read: set[str] = field(default_factory=set)  # parameters that the body uses
    epilogue: str | None = None  # "relu": applied to each result as it is stored (emit.py)
    scalar: Mapping[str, Scalar] | None = None  # the expressions' dialect (None: SCALAR, C's)
    # derive coordinates in unsigned 32-bit arithmetic where the shape has fewer than 2**31
    # elements (the CUDA target: a GPU divides 64-bit integers in software)
    narrow_index: bool = False

    def param(self, v: Value) -> str:
        """The parameter holding ``v``, noted as used by the body."""
        name = self.ptr[v]
        self.read.add(name)
        return name

    def as_bits(self, *values: Value) -> None:
        """Declare the parameters of ``values`` with the unsigned type of their width."""
        for v in values:
            self.types[self.ptr[v]] = ctype(v.type.dtype).bits


def omp_for(total: str, collapse: int = 1) -> str:
    """An OpenMP static parallel-for pragma, parallel only above GC_PAR_MIN elements."""
    c = f" collapse({collapse})" if collapse > 1 else ""
    return (f"#pragma omp parallel for schedule(static){c} num_threads(nt) "
            f"if(({total}) > GC_PAR_MIN)")


def padded(shape: Sequence[Dim], rank: int) -> tuple[Dim, ...]:
    """A shape with leading 1s up to ``rank`` (NumPy broadcasting)."""
    return (1,) * (rank - len(shape)) + tuple(shape)


NARROW = 1 << 31  # shapes with fewer elements may index in unsigned 32-bit arithmetic


class FlatCtx:
    """An element of ``shape`` given by its flat index; operands broadcast to it.

    Coordinates (for operands that broadcast on some axes) are derived from the flat index by
    division on first use and emitted into ``gen.lines`` before the load that needs them.
    """

    def __init__(self, dims: Dims, shape: Sequence[Dim], flat: str, prefix: str,
                 narrow: bool = False) -> None:
        self.dims = dims
        self.narrow = narrow
        self.shape = tuple(shape)
        self.flat = flat
        self.prefix = prefix
        self.gen: ExprGen | None = None
        self._coords: set[str] = set()

    def offset(self, v: Value) -> str:
        """The flat offset of the element of ``v`` that broadcasts to the current element."""
        r = len(self.shape)
        vs = padded(v.type.shape, r)
        if all(self.dims.same(a, b) for a, b in zip(vs, self.shape)):
            return self.flat
        if all(self.dims.static(d) == 1 for d in vs):
            return "0"
        st = strides(self.dims, vs)
        terms = [f"{self.coord(k)} * {st[k]}" for k in range(r)
                 if not (self.dims.static(vs[k]) == 1)]
        return " + ".join(terms) if terms else "0"

    def coord(self, k: int) -> str:
        """The C variable holding coordinate ``k`` of the current element (emitted once)."""
        name = f"{self.prefix}c{k}"
        if name not in self._coords:
            assert self.gen is not None
            st = strides(self.dims, self.shape)
            sizes = [s for s in (self.dims.static(d) for d in self.shape) if s is not None]
            if self.narrow and len(sizes) == len(self.shape) and math.prod(sizes) < NARROW:
                self.gen.lines.append(f"const int64_t {name} = (int64_t)((uint32_t)"
                                      f"({self.flat}) / {st[k]}u % {sizes[k]}u);")
            else:
                self.gen.lines.append(f"const int64_t {name} = ({self.flat}) / {st[k]} % "
                                      f"{self.dims.expr(self.shape[k])};")
            self._coords.add(name)
        return name


def ctx_gen(k: Kernel, shape: Sequence[Dim], flat: str, loads: dict[Value, str],
            fixed: dict[Value, str] | None = None, prefix: str = "t") -> ExprGen:
    """An ExprGen of kernel ``k`` whose loads index ``loads[value]`` at element ``flat`` of
    ``shape`` (the parameters it loads from are noted in ``k.read``)."""
    ctx = FlatCtx(k.dims, shape, flat, prefix, k.narrow_index)
    gen = ExprGen({v: (p, ctx.offset) for v, p in loads.items()}, fixed, prefix, k.read,
                  k.scalar)
    ctx.gen = gen
    return gen


@dataclass
class Anchored:
    """An anchored group (or a lone anchor op): prologue -> anchor -> epilogue."""

    anchor: Node
    out: Value  # the value stored: the last epilogue result, or the anchor's result
    loads: dict[Value, str]  # values read from memory -> parameter name
    out_ptr: str

    @property
    def result(self) -> Value:
        """The anchor's result."""
        return self.anchor.outputs[0]

    @property
    def has_epilogue(self) -> bool:
        """True when elementwise ops consume the anchor's result."""
        return self.out is not self.result

    def operand(self, i: int) -> Value:
        """The anchor's i-th operand (computed by the prologue or loaded)."""
        return self.anchor.inputs[i]


def anchored(k: Kernel) -> Anchored:
    """The anchored view of a kernel's node (a fused group or the op alone)."""
    n = k.node
    if n.body is None:
        return Anchored(n, n.outputs[0], {v: k.ptr[v] for v in n.inputs}, k.ptr[n.outputs[0]])
    parts = anchored_parts(n.body, n.attrs["kind"])
    if isinstance(parts, str):
        raise GradcError(f"internal error: c target: an illegal anchored group: {parts}")
    return Anchored(parts.anchor, parts.output, {v: k.ptr[v] for v in n.body.inputs},
                    k.ptr[parts.output])


STREAM_BLOCK = 64  # GC_BLK of the prelude


def traffic(dims: Dims, values: Sequence[Value]) -> str:
    """C expression: the bytes of ``values`` (what a kernel reads and writes at least once)."""
    return " + ".join(f"(int64_t){dims.prod(v.type.shape)} * {ctype(v.type.dtype).width // 8}"
                      for v in values) or "0"


def stream_flag(out_ptrs: Sequence[str], moved: str) -> str:
    """C condition: stream the stores of a kernel that moves ``moved`` bytes into ``out_ptrs``."""
    aligned = " && ".join(f"gc_al16({p})" for p in out_ptrs)
    return f"(GC_STREAM && ({moved}) >= GC_STREAM_MIN && {aligned})"


def fail_unless(cw: CWriter, ok: str) -> None:
    """``if (!ok) fail = 1;`` inside a parallel region (an atomic write: threads share it)."""
    with cw.block(f"if (!{ok})"):
        cw.line("#pragma omp atomic write", "fail = 1;")


def streamed_span(k: Kernel, cw: CWriter, out: Value, dst: str, count: int, body: Sequence[str],
                  value: str, st: str) -> None:
    """Write ``dst[q] = value`` for ``q < count`` (``body`` computes ``value`` from ``q``).

    ``dst`` points into the buffer of ``out`` (the value stored, whose dtype may differ from the
    anchor's when an epilogue casts), which sets the element type of the staging block.

    When ``st`` holds at run time (and a span is a whole number of 16-byte units, so that
    ``dst`` stays aligned from span to span) the values go through a block in registers or L1
    and out with streaming stores; otherwise a plain loop. Both compute the same expressions.
    """
    store_t = k.types.get(k.ptr[out], ctype(out.type.dtype).store)
    width = ctype(out.type.dtype).width // 8
    dst = f"({dst})"

    def plain() -> None:
        with cw.block(f"for (int64_t q = 0; q < {count}; q++)"):
            cw.line(*body, f"{dst}[q] = {value};")

    if (count * width) % 16:
        plain()
        return
    full, rem = count // STREAM_BLOCK * STREAM_BLOCK, count % STREAM_BLOCK

    def staged(start: str, n: int) -> None:
        cw.line(f"_Alignas(64) {store_t} sb[{STREAM_BLOCK}];")
        with cw.block(f"for (int64_t qj = 0; qj < {n}; qj++)"):
            cw.line(f"const int64_t q = {start} + qj;", *body, f"sb[qj] = {value};")
        cw.line(f"gc_stream({dst} + {start}, sb, (size_t){n} * {width});")

    with cw.block(f"if ({st})"):
        if full:
            with cw.block(f"for (int64_t q0 = 0; q0 < {full}; q0 += {STREAM_BLOCK})"):
                staged("q0", STREAM_BLOCK)
        if rem:
            with cw.block():
                staged(str(full), rem)
    with cw.orelse():
        plain()
