"""The ONNX graph builder: unique names, initializers, symbolic dims and exact selection helpers.

Every tensor the lowerings create is a ``Tensor`` (ONNX name, gradc dtype, shape with ints or
symbol names). ``OnnxGraphBuilder`` appends default-domain ``NodeProto``s in order, so the node
list is topologically sorted by construction. Names are strings that never reach generated code;
the builder only keeps them unique (graph input and output names are reserved up front). In the
lowerings, ``gb`` is the builder.

Selections that must copy bits go through ``select``. onnxruntime 1.31's CPU ``Where`` is not a
plain copy: for every float dtype a -0.0 taken from the *true* branch comes out +0.0 (its merge step
tests ``x != 0``), for float16 NaN payloads are rewritten, and int16/uint16/uint64 have no kernel;
int8 and uint32 have one only in recent releases (the onnxruntime of the lent GPU machine has none:
"Could not find an implementation for Where(16)"), and an exported model must run on every
onnxruntime gradc supports. ``select`` uses ``Where`` only where none of that can show, and
otherwise a ``GatherElements`` over the two stacked branches, which copies elements verbatim. A
"not" is written ``Equal(c, false)``: onnxruntime rewrites ``Where(Not(c), a, b)`` into ``Where(c,
b, a)``, which would undo a branch swap.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Sequence

import numpy as np
from onnx import NodeProto, TensorProto, helper

from gradc.errors import GradcError
from gradc.ir.types import Dim, DType, element_count
from gradc.backends.onnx.format import ELEM_TYPES, array_to_tensor

INT64_MIN = -(2 ** 63)
INT64_MAX = 2 ** 63 - 1

# dtypes whose onnxruntime CPU Where kernel exists in every release gradc supports and copies
# exactly (see the module docstring)
WHERE_EXACT = frozenset({DType.int64, DType.int32, DType.uint8})


@dataclass(frozen=True, eq=False)
class Tensor:
    """One ONNX tensor: its name, dtype and shape (ints or symbols); ``value`` if a constant."""

    name: str
    dtype: DType
    shape: tuple[Dim, ...]
    value: np.ndarray | None = field(default=None, repr=False)

    @property
    def rank(self) -> int:
        """The number of dims."""
        return len(self.shape)


def broadcast(*shapes: Sequence[Dim]) -> tuple[Dim, ...]:
    """NumPy broadcasting of shapes whose dims are compared as written."""
    n = max(len(s) for s in shapes)
    out: list[Dim] = [1] * n
    for s in shapes:
        for i, d in enumerate((1,) * (n - len(s)) + tuple(s)):
            if d != 1:
                if out[i] not in (1, d):
                    raise GradcError(f"internal error: cannot broadcast {shapes}")
                out[i] = d
    return tuple(out)


class OnnxGraphBuilder:
    """Collects the nodes and initializers of one ONNX graph."""

    def __init__(self, reserved: Iterable[str]) -> None:
        self.nodes: list[NodeProto] = []
        self.initializers: list[TensorProto] = []
        self.scope = "gradc"
        self.doc = ""
        self._taken: set[str] = set(reserved)
        self._counter = 0
        self._consts: dict[tuple, Tensor] = {}
        self._symbols: dict[str, tuple[Tensor, int]] = {}
        self._dims: dict[str, Tensor] = {}
        self._node_names: set[str] = set()
        self.renamed: dict[str, str] = {}  # old -> new tensor name (``rename``)

    # -- names, nodes, constants --------------------------------------------------------
    def fresh(self, hint: str) -> str:
        """A tensor name not used yet, derived from ``hint``."""
        name = hint
        while name in self._taken:
            self._counter += 1
            name = f"{hint}~{self._counter}"
        self._taken.add(name)
        return name

    def op(self, op_type: str, inputs: Sequence[Tensor | None], dtype: DType,
           shape: Sequence[Dim], **attrs: Any) -> Tensor:
        """Append one node with one result and return that result.

        ONNX shape inference sizes a Slice in double precision too (``range`` below), which
        is wrong for a data dim above 2**53: there its starts and ends go through an Identity
        that inference does not see through (the checker then leaves the size unknown)."""
        if op_type == "Slice" and inputs and inputs[0] is not None and any(
                isinstance(d, int) and d > 2 ** 53 for d in inputs[0].shape):
            inputs = [inputs[0]] + [self.op("Identity", [t], t.dtype, t.shape)
                                    if t is not None else None for t in inputs[1:3]] \
                + list(inputs[3:])
        out = Tensor(self.fresh(f"{self.scope}:{len(self.nodes)}"), dtype, tuple(shape))
        name = f"{self.scope}/{op_type}"
        k = 0
        while name in self._node_names:
            k += 1
            name = f"{self.scope}/{op_type}.{k}"
        self._node_names.add(name)
        node = helper.make_node(op_type, ["" if t is None else t.name for t in inputs],
                                [out.name], name=name, doc_string=self.doc, **attrs)
        self.nodes.append(node)
        return out

    def const(self, value: Any, dtype: DType) -> Tensor:
        """An initializer holding ``value`` converted to ``dtype`` (shared when identical)."""
        arr = np.array(value, dtype=dtype.numpy, order="C")
        key = (dtype, arr.shape, arr.tobytes())
        hit = self._consts.get(key)
        if hit is not None:
            return hit
        name = self.fresh(f"gradc.const.{len(self.initializers)}")
        arr = arr.copy()
        arr.flags.writeable = False
        self.initializers.append(array_to_tensor(arr, name))
        t = Tensor(name, dtype, arr.shape, arr)
        self._consts[key] = t
        return t

    def ints(self, values: Sequence[int]) -> Tensor:
        """A 1-D int64 constant."""
        return self.const(np.array(list(values), np.int64).reshape(-1), DType.int64)

    def rename(self, old: str, new: str, start: int) -> None:
        """Rename a tensor in the nodes added since index ``start``."""
        self.renamed[old] = new
        for node in self.nodes[start:]:
            for seq in (node.input, node.output):
                for i, n in enumerate(seq):
                    if n == old:
                        seq[i] = new

    def final_name(self, name: str) -> str:
        """The name a tensor has now, after the renames since it was made."""
        while name in self.renamed:
            name = self.renamed[name]
        return name

    # -- symbolic dims ------------------------------------------------------------------
    def add_symbol_source(self, t: Tensor) -> None:
        """Remember a graph input whose shape carries symbols (the first source wins)."""
        for axis, d in enumerate(t.shape):
            if isinstance(d, str) and d not in self._symbols:
                self._symbols[d] = (t, axis)

    def dim(self, d: Dim) -> Tensor:
        """A 1-element int64 tensor holding ``d`` (read from an input's shape for a symbol)."""
        if not isinstance(d, str):
            return self.ints([d])
        if d not in self._dims:
            if d not in self._symbols:
                raise GradcError(f"internal error: symbol {d!r} is not a dim of any graph input")
            src, axis = self._symbols[d]
            scope, self.scope = self.scope, "gradc.shape"
            self._dims[d] = self.op("Shape", [src], DType.int64, (1,), start=axis, end=axis + 1)
            self.scope = scope
        return self._dims[d]

    def scalar_dim(self, d: Dim) -> Tensor:
        """A rank-0 int64 tensor holding ``d``."""
        if not isinstance(d, str):
            return self.const(np.int64(d), DType.int64)
        return self.op("Reshape", [self.dim(d), self.ints([])], DType.int64, ())

    def shape_tensor(self, dims: Sequence[Dim]) -> Tensor:
        """A 1-D int64 tensor holding a shape; a constant when every dim is static."""
        if all(not isinstance(d, str) for d in dims):
            return self.ints([int(d) for d in dims])
        parts: list[Tensor] = []
        run: list[int] = []
        for d in dims:
            if isinstance(d, str):
                if run:
                    parts.append(self.ints(run))
                    run = []
                parts.append(self.dim(d))
            else:
                run.append(d)
        if run:
            parts.append(self.ints(run))
        return self.op("Concat", parts, DType.int64, (len(dims),), axis=0)

    def product(self, dims: Sequence[Dim]) -> int | Tensor:
        """The product of dims: an int, or a rank-0 int64 tensor when a symbol is involved."""
        static = element_count(dims)  # symbols count 1 here
        out: int | Tensor = static
        for d in dims:
            if isinstance(d, str):
                s = self.scalar_dim(d)
                out = s if isinstance(out, int) and out == 1 else self.mul_dim(out, s)
        return out

    def mul_dim(self, a: int | Tensor, b: int | Tensor) -> int | Tensor:
        """Product of two sizes, each an int or a rank-0 int64 tensor."""
        if isinstance(a, int) and isinstance(b, int):
            return a * b
        ta = a if isinstance(a, Tensor) else self.const(np.int64(a), DType.int64)
        tb = b if isinstance(b, Tensor) else self.const(np.int64(b), DType.int64)
        return self.op("Mul", [ta, tb], DType.int64, ())

    def if_(self, cond: Tensor, then: Callable[[], Tensor], orelse: Callable[[], Tensor],
            dtype: DType, shape: Sequence[Dim]) -> Tensor:
        """An ``If`` node whose branches are built by ``then`` and ``orelse``."""
        graphs = []
        for k, build in enumerate((then, orelse)):
            nodes, dims = self.nodes, dict(self._dims)
            self.nodes = []
            t = build()
            if t.name not in {o for n in self.nodes for o in n.output}:
                t = self.op("Identity", [t], t.dtype, t.shape)
            graphs.append(helper.make_graph(
                self.nodes, f"{self.scope}/{'then' if k == 0 else 'else'}", [],
                [helper.make_tensor_value_info(t.name, ELEM_TYPES[t.dtype], None)]))
            self.nodes, self._dims = nodes, dims  # Shape nodes made inside stay inside
        return self.op("If", [cond], dtype, shape, then_branch=graphs[0], else_branch=graphs[1])

    def all_finite(self, x: Tensor) -> Tensor:
        """A bool scalar: no element of the float tensor ``x`` is NaN or infinite."""
        zeros = self.binary("Sub", x, x)  # NaN exactly where x is not finite
        total = self.op("ReduceSum", [zeros], x.dtype, (), keepdims=0)
        return self.compare("Equal", total, self.scalar(0, x.dtype))

    # -- small helpers ------------------------------------------------------------------
    def range(self, n: Dim) -> Tensor:
        """``Range(0, n, 1)``: the int64 vector 0..n-1, for a static or symbolic n.

        ONNX shape inference sizes a Range of constants in double precision, which is wrong
        above 2**53 (the checker then rejects the model), so there the limit goes through an
        Identity that inference does not see through.
        """
        i64 = DType.int64
        limit = self.scalar_dim(n)
        if isinstance(n, int) and n > 2 ** 53:
            limit = self.op("Identity", [limit], i64, ())
        return self.op("Range", [self.scalar(0, i64), limit, self.scalar(1, i64)], i64, (n,))

    def cast(self, x: Tensor, dtype: DType) -> Tensor:
        """``Cast`` unless ``x`` already has ``dtype``."""
        if x.dtype == dtype:
            return x
        return self.op("Cast", [x], dtype, x.shape, to=ELEM_TYPES[dtype])

    def binary(self, op_type: str, a: Tensor, b: Tensor, dtype: DType | None = None) -> Tensor:
        """A broadcasting binary op (``dtype`` defaults to ``a``'s)."""
        return self.op(op_type, [a, b], dtype or a.dtype, broadcast(a.shape, b.shape))

    def compare(self, op_type: str, a: Tensor, b: Tensor) -> Tensor:
        """A broadcasting comparison with a bool result."""
        return self.binary(op_type, a, b, DType.bool)

    def scalar(self, value: Any, dtype: DType) -> Tensor:
        """A rank-0 constant."""
        return self.const(np.asarray(value, dtype.numpy).reshape(()), dtype)

    def filled(self, shape: Tensor, value: Any, dtype: DType, dims: Sequence[Dim]) -> Tensor:
        """A ``ConstantOfShape``: ``value`` repeated over the shape held by the tensor ``shape``."""
        fill = array_to_tensor(np.full(1, value, dtype.numpy))
        return self.op("ConstantOfShape", [shape], dtype, dims, value=fill)

    def not_(self, c: Tensor) -> Tensor:
        """Logical not, written so that onnxruntime does not fold it into a ``Where``."""
        return self.compare("Equal", c, self.scalar(False, DType.bool))

    def reshape(self, x: Tensor, dims: Sequence[Dim], spec: Sequence[int] | None = None) -> Tensor:
        """Reshape to ``dims`` (``spec``: an explicit ONNX shape with 0 and -1 entries)."""
        if tuple(x.shape) == tuple(dims):
            return x
        shape = self.ints(spec) if spec is not None else self.shape_tensor(dims)
        return self.op("Reshape", [x, shape], x.dtype, dims)

    def expand(self, x: Tensor, dims: Sequence[Dim]) -> Tensor:
        """Broadcast ``x`` to ``dims``."""
        if tuple(x.shape) == tuple(dims):
            return x
        return self.op("Expand", [x, self.shape_tensor(dims)], x.dtype, dims)

    def unsqueeze(self, x: Tensor, axis: int) -> Tensor:
        """Insert a size-1 axis at ``axis`` (negative counts from the end of the result)."""
        shape = list(x.shape)
        pos = axis if axis >= 0 else len(shape) + 1 + axis
        shape.insert(pos, 1)
        return self.op("Unsqueeze", [x, self.ints([axis])], x.dtype, shape)

    # -- exact selection ----------------------------------------------------------------
    def select(self, c: Tensor, a: Tensor, b: Tensor, a_neg0: bool = True, a_nan: bool = True,
               b_neg0: bool = True, b_nan: bool = True) -> Tensor:
        """``a`` where ``c`` else ``b``, copying the chosen elements bit for bit.

        The flags say whether the elements taken from a data operand may be -0.0 or NaN;
        for a constant operand they are read from its value.
        """
        a_neg0, a_nan = _risks(a, a_neg0, a_nan)
        b_neg0, b_nan = _risks(b, b_neg0, b_nan)
        dt = a.dtype
        shape = broadcast(c.shape, a.shape, b.shape)
        if dt.is_float and not (dt == DType.float16 and (a_nan or b_nan)):
            if not a_neg0:
                return self.op("Where", [c, a, b], dt, shape)
            if not b_neg0:
                return self.op("Where", [self.not_(c), b, a], dt, shape)
        elif dt in WHERE_EXACT:
            return self.op("Where", [c, a, b], dt, shape)
        return self.gather_select(c, a, b, shape)

    def gather_select(self, c: Tensor, a: Tensor, b: Tensor, shape: tuple[Dim, ...]) -> Tensor:
        """``a`` where ``c`` else ``b`` as a ``GatherElements`` over the stacked branches."""
        a = self.unsqueeze(self.expand(a, shape), 0)
        b = self.unsqueeze(self.expand(b, shape), 0)
        data = self.op("Concat", [b, a], a.dtype, (2,) + shape, axis=0)
        idx = self.unsqueeze(self.expand(self.cast(c, DType.int64), shape), 0)
        got = self.op("GatherElements", [data, idx], a.dtype, (1,) + shape, axis=0)
        return self.op("Squeeze", [got, self.ints([0])], a.dtype, shape)


def _risks(t: Tensor, neg0: bool, nan: bool) -> tuple[bool, bool]:
    """Whether a select operand may yield -0.0 or NaN (read from the value of a constant)."""
    if t.value is None or t.dtype not in (DType.float16, DType.float32, DType.float64):
        return neg0 and t.dtype.is_float, nan and t.dtype.is_float
    v = t.value
    return bool(((v == 0) & np.signbit(v)).any()), bool(np.isnan(v).any())
