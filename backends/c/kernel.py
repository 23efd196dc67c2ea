"""What every C emitter receives: the node, its buffers, symbolic dims, and index contexts."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

from gradc.ir.core import Graph, Node, Value
from gradc.ir.types import Dim

from gradc.backends.c.scalar import SCALAR, ExprGen, used_operands
from gradc.backends.c.ctypes_map import Dims, ctype, strides


@dataclass
class Kernel:
    """One generated C function: ``static int name(S, nt, <outputs>, <inputs>)``."""

    name: str
    node: Node
    dims: Dims
    ptr: dict[Value, str]  # values held in memory (outer and body inputs/outputs) -> parameter
    lines: list[str] = field(default_factory=list)
    types: dict[str, str] = field(default_factory=dict)  # parameter -> C element type override

    def emit(self, *lines: str) -> None:
        """Append lines to the function body."""
        self.lines.extend(lines)

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


class FlatCtx:
    """An element of ``shape`` given by its flat index; operands broadcast to it.

    Coordinates (for operands that broadcast on some axes) are derived from the flat index by
    division on first use and emitted into ``gen.lines`` before the load that needs them.
    """

    def __init__(self, dims: Dims, shape: Sequence[Dim], flat: str, prefix: str) -> None:
        self.dims = dims
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
            self.gen.lines.append(f"const int64_t {name} = ({self.flat}) / {st[k]} % "
                                  f"{self.dims.expr(self.shape[k])};")
            self._coords.add(name)
        return name


def ctx_gen(dims: Dims, shape: Sequence[Dim], flat: str, loads: dict[Value, str],
            fixed: dict[Value, str] | None = None, prefix: str = "t") -> ExprGen:
    """An ExprGen whose loads index ``loads[value]`` at the element ``flat`` of ``shape``."""
    ctx = FlatCtx(dims, shape, flat, prefix)
    gen = ExprGen({v: (p, ctx.offset) for v, p in loads.items()}, fixed, prefix)
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
    body = n.body
    anchor = next(m for m in body.nodes if m.op == n.attrs["kind"])
    return Anchored(anchor, body.outputs[0], {v: k.ptr[v] for v in body.inputs},
                    k.ptr[body.outputs[0]])


def check_anchored(node: Node, dims: Dims) -> bool:
    """True when a fused node has the anchored shape that the C emitters handle."""
    body: Graph = node.body  # type: ignore[assignment]
    kind = node.attrs["kind"]
    anchors = [m for m in body.nodes if m.op == kind]
    if len(anchors) != 1 or len(body.outputs) != 1:
        return False
    if any(m.op not in SCALAR for m in body.nodes if m is not anchors[0]):
        return False
    a = anchors[0]
    inputs = set(body.inputs)
    dy_index = 1 if kind == "max_pooling_grad" else 0
    if kind == "max_pooling_grad" and a.inputs[0] not in inputs:
        return False
    pro = _reached([a.inputs[dy_index]], inputs, set())
    epi = _reached([body.outputs[0]], inputs, {a.outputs[0]})
    if a.outputs[0] in pro or any(v.producer is a and v is not a.outputs[0] for v in epi):
        return False
    dy_shape = a.inputs[dy_index].type.shape
    out_shape = a.outputs[0].type.shape
    return (all(broadcasts(dims, v.type.shape, dy_shape) for v in pro)
            and all(broadcasts(dims, v.type.shape, out_shape) for v in epi)
            and dims.same_shape(body.outputs[0].type.shape, out_shape))


def _reached(roots: list[Value], stop: set[Value], fixed: set[Value]) -> list[Value]:
    seen: dict[int, Value] = {}
    todo = list(roots)
    while todo:
        v = todo.pop()
        if id(v) in seen:
            continue
        seen[id(v)] = v
        if v in stop or v in fixed or v.producer is None:
            continue
        todo.extend(used_operands(v.producer))
    return list(seen.values())


def broadcasts(dims: Dims, shape: Sequence[Dim], to: Sequence[Dim]) -> bool:
    """True when ``shape`` broadcasts to ``to`` (dims compared as written)."""
    if len(shape) > len(to):
        return False
    vs = padded(shape, len(to))
    return all(dims.same(a, b) or dims.static(a) == 1 for a, b in zip(vs, to))


STREAM_BLOCK = 64  # GC_BLK of the prelude


def traffic(dims: Dims, values: Sequence[Value]) -> str:
    """C expression: the bytes of ``values`` (what a kernel reads and writes at least once)."""
    return " + ".join(f"(int64_t){dims.prod(v.type.shape)} * {ctype(v.type.dtype).width // 8}"
                      for v in values) or "0"


def stream_flag(out_ptrs: Sequence[str], moved: str) -> str:
    """C condition: stream the stores of a kernel that moves ``moved`` bytes into ``out_ptrs``."""
    aligned = " && ".join(f"gc_al16({p})" for p in out_ptrs)
    return f"(GC_STREAM && ({moved}) >= GC_STREAM_MIN && {aligned})"


def streamed_span(k: Kernel, out: Value, dst: str, count: int, body: list[str], value: str,
                  st: str) -> list[str]:
    """``dst[q] = value`` for ``q < count`` (``body`` computes ``value`` from ``q``).

    ``dst`` points into the buffer of ``out`` (the value stored, whose dtype may differ from the
    anchor's when an epilogue casts), which sets the element type of the staging block.

    When ``st`` holds at run time (and a span is a whole number of 16-byte units, so that
    ``dst`` stays aligned from span to span) the values go through a block in registers or L1
    and out with streaming stores; otherwise a plain loop. Both compute the same expressions.
    """
    store_t = k.types.get(k.ptr[out], ctype(out.type.dtype).store)
    width = ctype(out.type.dtype).width // 8
    dst = f"({dst})"
    plain = [f"for (int64_t q = 0; q < {count}; q++) {{", *("  " + ln for ln in body),
             f"  {dst}[q] = {value};", "}"]
    if (count * width) % 16:
        return plain
    full, rem = count // STREAM_BLOCK * STREAM_BLOCK, count % STREAM_BLOCK

    def block(start: str, n: int) -> list[str]:
        return [f"  _Alignas(64) {store_t} sb[{STREAM_BLOCK}];",
                f"  for (int64_t qj = 0; qj < {n}; qj++) {{",
                f"    const int64_t q = {start} + qj;", *("    " + ln for ln in body),
                f"    sb[qj] = {value};", "  }",
                f"  gc_stream({dst} + {start}, sb, (size_t){n} * {width});"]
    lines = [f"if ({st}) {{"]
    if full:
        lines += [f"  for (int64_t q0 = 0; q0 < {full}; q0 += {STREAM_BLOCK}) {{",
                  *("  " + ln for ln in block("q0", STREAM_BLOCK)), "  }"]
    if rem:
        lines += ["  {", *("  " + ln for ln in block(str(full), rem)), "  }"]
    return lines + ["} else {", *("  " + ln for ln in plain), "}"]
