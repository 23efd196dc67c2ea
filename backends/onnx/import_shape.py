"""Static shape computations at import: Shape, Gather, ConstantOfShape, Expand and their kin.

Exporters compute static shapes and scales with small subgraphs (``Shape -> Gather -> Unsqueeze
-> Concat -> Reshape``, a ``Concat`` of ``Constant`` scales feeding ``Resize``,
``ConstantOfShape``/``Expand`` around ``F.mse_loss``). The importer evaluates such a node
(``fold_node``) when every input is known at import: a constant that is no parameter, or the
static shape of a value. ``Shape`` of a value with symbolic dims is a vector whose elements at
static dims are known (SPEC-transformers §28.2): a symbolic dim travels as its name in an object
array, so that ``Reshape(y, Concat(Gather(Shape(y), 0), Div(Gather(Shape(y), 2), 4)))`` keeps the
batch symbol and computes ``C // 4``. Arithmetic needing a symbol's value does not fold (gradc
has no run-time shapes); ``import_fold`` holds the arithmetic, comparison and mask folders. Float
arithmetic folds only where one operand derives from a shape, so a model's own float constants
keep their nodes.

Where the inputs are not known, ``Gather`` becomes gradc's ``gather`` (as does a ``Gather``
of a floating-point initializer: a parameter, such as an embedding table, is never folded),
and ``ConstantOfShape`` and ``Expand`` become gradc's ``expand`` (converters below), whose
``like`` operand carries the symbols (``_like``).

Before any folder runs, the node has the inputs, outputs and attributes its ONNX schema allows
(``import_schema.check_node``, run by the importer) and its known inputs the dtypes the schema's
type constraints allow (``check_dtypes``, run here).
"""

from __future__ import annotations

import math
from typing import Any, Callable, Sequence

import numpy as np

from gradc.ir import builders as ops
from gradc.errors import UnsupportedError, VerifyError
from gradc.ir.core import Value
from gradc.ir.types import DType, element_count
from gradc.backends.onnx.format import dtype_of
from gradc.backends.onnx.import_ops import slice_axis
from gradc.backends.onnx.import_node import (
    Context, OnnxNode, Produced, converter, int_list, normalize_axes, require_dtype, require_rank,
)
from gradc.backends.onnx.import_schema import check_dtypes

FOLD_LIMIT = 4096  # elements: a larger result is left to the gradc graph (never bloats a model)
LIKE_LIMIT = 1 << 16  # elements of a shape carrier baked into the graph (one byte each)
SMALL = 64  # a ConstantOfShape up to this size folds (a shape-like vector); larger ones expand

Folder = Callable[[OnnxNode, list[Any], Any], list[np.ndarray]]
FOLDERS: dict[str, Folder] = {}
NUMERIC: set[str] = set()  # float arithmetic: folds only where derived from a shape
SHAPE_READERS = ("Shape", "Size")  # read only the type of their input


def folder(*op_types: str, numeric: bool = False) -> Callable[[Folder], Folder]:
    """Decorator: register a NumPy evaluation of ONNX op types for known inputs
    (``numeric``: float operands fold only where one derives from a shape)."""
    def wrap(fn: Folder) -> Folder:
        for op in op_types:
            FOLDERS[op] = fn
            if numeric:
                NUMERIC.add(op)
        return fn
    return wrap


# -- the importer's entry points ----------------------------------------------------------------

def foldable(n: OnnxNode, known: Callable[[str], bool]) -> bool:
    """True when the node may be evaluated at import (first pass: its inputs will be known)."""
    if n.domain or n.op not in FOLDERS:
        return False
    if n.op in SHAPE_READERS:
        return True
    names = [x for x in n.inputs if x]
    return bool(names) and all(known(x) for x in names)


def fold_node(n: OnnxNode, ctx: Any) -> list[np.ndarray] | None:
    """The node's results evaluated at import, or None when it is no static computation."""
    if n.domain or n.op not in FOLDERS:
        return None
    if n.op in SHAPE_READERS:
        args = [_shape_of(n, ctx)]
        if args[0] is None:
            return None
    else:
        names = [x for x in n.inputs if x]
        shape_work = any(x in ctx.derived for x in names)
        if not names or not all(ctx.is_fixed(x) or (shape_work and x in ctx.consts
                                                    and n.op in NUMERIC) for x in names):
            return None  # a float initializer is a parameter, unless it scales a shape (an
            # Expand of it to a shape, as a class token, keeps it: SPEC-transformers §28.1)
        args = [ctx.consts[x] if x else None for x in n.inputs]
        if not args or args[0] is None:
            return None  # a missing first input: the converter reports it
        if n.op in NUMERIC and not _shape_arithmetic(n, ctx, args):
            return None
        check_dtypes(n, ctx.opset, [None if a is None else a.dtype for a in args])
    try:
        with np.errstate(all="ignore"):
            out = [_as_array(a) for a in FOLDERS[n.op](n, args, ctx)]
    except (TypeError, ValueError, OverflowError, IndexError):
        return None  # a symbol's value needed, a result too large, or an argument that the
        # converter (or the importer's refusal) reports
    if n.op not in SHAPE_READERS and any(a.size > FOLD_LIMIT for a in out):
        return None
    return [_tidy(a) for a in out]


def _shape_arithmetic(n: OnnxNode, ctx: Any, args: list[Any]) -> bool:
    """Arithmetic folds on integers, bools and symbols, and on floats derived from a shape."""
    present = [a for a in args if a is not None]
    if all(a.dtype.kind in "iub" or a.dtype == object for a in present):
        return True
    return any(x in ctx.derived for x in n.inputs if x)


def _shape_of(n: OnnxNode, ctx: Any) -> np.ndarray | None:
    name = n.input(0)
    t = ctx.value_type(name)
    if t is not None:
        source = ctx.env[name]
        ctx.shape_sources.setdefault(tuple(t.shape), source)
        return np.array(list(t.shape), dtype=object)
    if name in ctx.consts:
        return np.array(list(ctx.consts[name].shape), dtype=object)
    return None


def _as_array(a: Any) -> np.ndarray:
    """NumPy gives an element, not an array, for a scalar pick of an object array."""
    if isinstance(a, np.ndarray):
        return a
    return np.array(a, dtype=object) if isinstance(a, str) else np.asarray(a)


def _tidy(a: np.ndarray) -> np.ndarray:
    """An object array without symbols becomes int64 (else it stays: it holds a symbol)."""
    if a.dtype == object and not any(isinstance(v, str) for v in a.reshape(-1)):
        return np.array(a.tolist(), dtype=np.int64).reshape(a.shape)
    return a if a.flags.c_contiguous else a.copy()  # (ascontiguousarray makes 0-d 1-d)


def symbolic_error(what: str, a: np.ndarray) -> UnsupportedError:
    """The error for a shape value that holds a symbolic dim where a number is needed
    (SPEC-transformers §28: only Reshape, Expand and ConstantOfShape take symbolic shapes)."""
    syms = sorted({v for v in a.reshape(-1) if isinstance(v, str)})
    return UnsupportedError(f"{what} depends on the symbolic dim {syms[0]!r} (gradc has no "
                            f"run-time shapes; export with a fixed size for {syms[0]!r})")


def dims_of(a: np.ndarray, field: str) -> list[int | str]:
    """A 1-D shape constant as a list of ints and symbol names."""
    if a.ndim > 1 or (a.dtype != object and a.dtype.kind not in "iu"):
        raise VerifyError(f"input {field}: expected a 1-D integer tensor, got "
                          f"{a.dtype}{list(a.shape)}")
    return [v if isinstance(v, str) else int(v) for v in a.reshape(-1).tolist()]


# -- folders ------------------------------------------------------------------------------------

@folder("Shape")
def _fold_shape(n: OnnxNode, args: list[Any], ctx: Any) -> list[np.ndarray]:
    dims = args[0]
    r = len(dims)
    start, end = n.get_int("start", 0), n.get_int("end", r)
    start, end = (min(max(v + r if v < 0 else v, 0), r) for v in (start, end))
    return [dims[start:end]]


@folder("Size")
def _fold_size(n: OnnxNode, args: list[Any], ctx: Any) -> list[np.ndarray]:
    dims = args[0]
    if any(isinstance(d, str) for d in dims):
        raise TypeError("symbolic size")
    return [np.array(math.prod(int(d) for d in dims), np.int64)]


@folder("Gather")
def _fold_gather(n: OnnxNode, args: list[Any], ctx: Any) -> list[np.ndarray]:
    data, idx = args[0], args[1]
    if idx.dtype.kind not in "iu" or data.ndim == 0:
        raise TypeError("indices")
    if n.input(0) in getattr(ctx, "candidates", ()):
        raise TypeError("a parameter")  # read by gradc's gather (SPEC-transformers §28.1)
    axis = normalize_axes([n.get_int("axis", 0)], data.ndim, "axis")[0]
    size = data.shape[axis]
    if np.any(idx < -size) or np.any(idx >= size):
        raise VerifyError(f"input indices: expected indices in {-size}..{size - 1}, got "
                          f"{idx.reshape(-1).tolist()[:8]}")
    return [np.take(data, np.where(idx < 0, idx + size, idx), axis=axis)]


def _axes(n: OnnxNode, args: list[Any], index: int) -> list[int] | None:
    if len(args) > index and args[index] is not None:
        return int_list(args[index], "axes")
    return n.get_ints("axes", None)


@folder("Unsqueeze")
def _fold_unsqueeze(n: OnnxNode, args: list[Any], ctx: Any) -> list[np.ndarray]:
    data = args[0]
    axes = _axes(n, args, 1)
    if axes is None:
        raise VerifyError("axes: expected the axes to insert, got none")
    rank = data.ndim + len(axes)
    out = data
    for a in sorted(normalize_axes(axes, rank, "axes")):
        out = np.expand_dims(out, a)
    return [out]


@folder("Squeeze")
def _fold_squeeze(n: OnnxNode, args: list[Any], ctx: Any) -> list[np.ndarray]:
    data = args[0]
    axes = _axes(n, args, 1)
    if axes is None:
        return [data.reshape([d for d in data.shape if d != 1])]
    return [np.squeeze(data, tuple(normalize_axes(axes, data.ndim, "axes")))]


@folder("Concat")
def _fold_concat(n: OnnxNode, args: list[Any], ctx: Any) -> list[np.ndarray]:
    parts = [a for a in args if a is not None]
    kinds = {a.dtype for a in parts}
    if len(kinds) > 1 and not all(k.kind in "iuO" for k in kinds):
        raise TypeError("mixed dtypes")
    axis = normalize_axes([n.get_int("axis", 0)], parts[0].ndim, "axis")[0]
    out = np.concatenate(parts, axis=axis)
    return [out.astype(object) if any(k.kind == "O" for k in kinds) else out]


@folder("Cast")
def _fold_cast(n: OnnxNode, args: list[Any], ctx: Any) -> list[np.ndarray]:
    dtype = dtype_of(n.get_int("to", 0))
    a = args[0]
    if a.dtype == object:
        if not dtype.is_int:
            raise TypeError("a symbolic dim is no float")
        return [a]
    return [a.astype(dtype.numpy)]


@folder("Identity")
def _fold_identity(n: OnnxNode, args: list[Any], ctx: Any) -> list[np.ndarray]:
    return [args[0]]


@folder("Reshape")
def _fold_reshape(n: OnnxNode, args: list[Any], ctx: Any) -> list[np.ndarray]:
    if len(args) < 2 or args[1] is None:
        raise TypeError("no shape input: left to the converter, which reports it")
    shape = dims_of(args[1], "shape")
    if any(isinstance(d, str) for d in shape):
        raise TypeError("a symbolic target shape")
    target = [args[0].shape[i] if d == 0 else d for i, d in enumerate(shape)]
    return [args[0].reshape(target)]


@folder("Slice")
def _fold_slice(n: OnnxNode, args: list[Any], ctx: Any) -> list[np.ndarray]:
    if len(args) < 3:
        raise TypeError("Slice-1 takes attributes: left to its converter")
    data = args[0]
    starts, ends = int_list(args[1], "starts"), int_list(args[2], "ends")
    axes = int_list(args[3], "axes") if len(args) > 3 and args[3] is not None \
        else list(range(len(starts)))
    steps = int_list(args[4], "steps") if len(args) > 4 and args[4] is not None \
        else [1] * len(starts)
    index: list[Any] = [slice(None)] * data.ndim
    for a, s, e, t in zip(normalize_axes(axes, data.ndim, "axes"), starts, ends, steps):
        if t == 0:
            raise VerifyError("input steps: expected non-zero steps, got 0")
        off, _, count = slice_axis(data.shape[a], s, e, t)
        first = off if t > 0 else off + (count - 1) * -t  # off: the window's lowest index
        index[a] = [first + k * t for k in range(count)]
        data = data[tuple(index)]
        index[a] = slice(None)
    return [data]


@folder("ConstantOfShape")
def _fold_constant_of_shape(n: OnnxNode, args: list[Any], ctx: Any) -> list[np.ndarray]:
    shape = [d for d in dims_of(args[0], "input") if isinstance(d, int)]
    if len(shape) < args[0].size or math.prod(shape) > SMALL:
        raise TypeError("not static, or a tensor rather than a shape: the converter expands")
    return [np.full(shape, _fill_value(n))]


@folder("Expand")
def _fold_expand(n: OnnxNode, args: list[Any], ctx: Any) -> list[np.ndarray]:
    shape = dims_of(args[1], "shape")
    if any(isinstance(d, str) for d in shape):
        raise TypeError("a symbolic target shape")
    target = np.broadcast_shapes(args[0].shape, tuple(shape))  # type: ignore[arg-type]
    if element_count(target) > FOLD_LIMIT:  # checked before anything is allocated
        raise TypeError("a result too large to fold: the converter expands")
    return [np.broadcast_to(args[0], target).copy()]


@folder("Range")
def _fold_range(n: OnnxNode, args: list[Any], ctx: Any) -> list[np.ndarray]:
    start, limit, delta = args[0], args[1], args[2]
    if delta.reshape(-1)[0] == 0:
        raise VerifyError("input delta: expected a non-zero step, got 0")
    s, e, d = start.item(), limit.item(), delta.item()
    if math.ceil((e - s) / d) > FOLD_LIMIT:  # counted before anything is allocated
        raise TypeError("a result too large to fold")
    return [np.arange(s, e, d, dtype=start.dtype)]


# -- converters for what does not fold ------------------------------------------------------------

def _fill_value(n: OnnxNode) -> np.ndarray:
    """ConstantOfShape's ``value`` (one element; default float32 0)."""
    v = n.get_tensor("value")
    if v is None:
        return np.zeros((), np.float32)
    if v.size != 1:
        raise VerifyError(f"attribute value: expected one element, got {v.size}")
    return v.reshape(())


def _like(ctx: Context, dims: Sequence[int | str], what: str) -> Value:
    """A value of exactly these dims for ``expand`` (which never reads its elements): a value a
    Shape node read, else a constant, else one built from values that carry the symbols."""
    source = ctx.shape_source(tuple(dims))
    if source is not None:
        return source
    if any(isinstance(d, str) for d in dims):
        return _carried(ctx, dims, what)
    static = [int(d) for d in dims]
    if element_count(static) <= LIKE_LIMIT:
        return ops.constant(np.zeros(static, np.uint8))
    # Larger: a one-element constant padded to the shape at run time (expand never reads the
    # elements of its shape operand), so the model never holds a table as large as a tensor.
    one = ops.constant(np.zeros([1] * len(static), np.uint8), graph=ctx.graph)
    return ops.pad(one, [0] * len(static), [d - 1 for d in static])


def _carried(ctx: Context, dims: Sequence[int | str], what: str) -> Value:
    """A uint8 value of ``dims``: for each symbol, the line of a value that has it along that
    axis (its other static axes sliced to 1, other symbolic ones reduced), reshaped into place;
    their broadcast sum; padded to the static dims."""
    rank = len(dims)
    out: Value | None = None
    for pos, d in enumerate(dims):
        if not isinstance(d, str):
            continue
        found = ctx.symbol_carrier(d)
        if found is None:
            raise UnsupportedError(f"{what}: the shape {tuple(dims)} has the symbolic dim {d!r}, "
                                   "which no value of the graph has")
        v, axis = found
        shape = v.type.shape
        other = [k for k, x in enumerate(shape) if k != axis and isinstance(x, str)]
        line = ops.cast(ops.slice(v, [0] * len(shape), [x if k == axis or k in other else 1
                                                        for k, x in enumerate(shape)],
                                  [1] * len(shape)), DType.uint8)
        if other:  # a slice keeps a symbolic axis whole: reduce it to 1
            line = ops.reduce_max(line, other, True)
        place: list[int | str] = [1] * rank
        place[pos] = d
        piece = ops.reshape(line, place)
        out = piece if out is None else ops.add(out, piece)
    assert out is not None
    grow = [0 if isinstance(d, str) else int(d) - 1 for d in dims]
    return ops.pad(out, [0] * rank, grow) if any(grow) else out


def _broadcast_dims(a: Sequence[int | str], b: Sequence[int | str]) -> list[int | str]:
    """ONNX's two-way broadcast of two shapes (a symbol matches itself or 1)."""
    r = max(len(a), len(b))
    a = [1] * (r - len(a)) + list(a)
    b = [1] * (r - len(b)) + list(b)
    out: list[int | str] = []
    for i, (x, y) in enumerate(zip(a, b)):
        if x == y or y == 1:
            out.append(x)
        elif x == 1:
            out.append(y)
        else:
            raise VerifyError(f"input shape[{i}]: expected {x} or 1 (broadcast to the input), "
                              f"got {y}")
    return out


@converter("Shape", "Size")
def _shape(n: OnnxNode, ctx: Context) -> list[Produced]:
    raise UnsupportedError("input data: its shape is not known at import")


@converter("Gather")
def _gather(n: OnnxNode, ctx: Context) -> list[Produced]:
    """SPEC-transformers §28.1: gradc's ``gather`` where the folder above does not apply
    (computed data or indices, or a parameter's data); constant indices are checked here."""
    data = ctx.value(n, 0, "data")
    require_rank(data, 1, 8, "data", "gather")
    indices = ctx.value(n, 1, "indices")
    require_dtype(indices, (DType.int64, DType.int32), "indices", "gather")
    axis = normalize_axes([n.get_int("axis", 0)], data.type.rank, "attribute axis")[0]
    if data.type.rank - 1 + indices.type.rank > 8:
        raise UnsupportedError(f"input indices: rank {indices.type.rank} gives a result of rank "
                               f"{data.type.rank - 1 + indices.type.rank} (gradc: at most 8)")
    size = data.type.shape[axis]
    try:
        known = ctx.const(n, 1, "indices")
    except UnsupportedError:  # computed indices: checked when the graph runs (InputError)
        known = None
    if known is not None and not isinstance(size, str):
        k = known.astype(np.int64)
        if ((k < -size) | (k >= size)).any():
            raise VerifyError(f"input indices: expected indices in {-size}..{size - 1} "
                              f"(data.shape[{axis}] = {size}), got {k.reshape(-1).tolist()[:8]}")
    return [ops.gather(data, indices, axis=axis)]


@converter("ConstantOfShape")
def _constant_of_shape(n: OnnxNode, ctx: Context) -> list[Produced]:
    dims = ctx.dims(n, 0, "input")
    if dims is None:
        raise VerifyError("input input: expected a value (required input), got none")
    value = _fill_value(n)
    if not all(isinstance(d, str) or d >= 1 for d in dims):
        raise UnsupportedError(f"input input: shape {tuple(dims)} has a dim below 1 (gradc has "
                               "no empty tensors)")
    if ctx.shape_source(tuple(dims)) is None and not any(isinstance(d, str) for d in dims) \
            and element_count([int(d) for d in dims]) <= FOLD_LIMIT:
        return [np.full([int(d) for d in dims], value)]
    return [ops.expand(ops.constant(value), _like(ctx, dims, "input input"))]


@converter("Expand")
def _expand(n: OnnxNode, ctx: Context) -> list[Produced]:
    x = ctx.value(n, 0, "input")
    dims = ctx.dims(n, 1, "shape")
    if dims is None:
        raise VerifyError("input shape: expected a value (required input), got none")
    if any(isinstance(d, int) and d < 0 for d in dims):  # a 1 broadcasts, -1 is no dim here
        raise VerifyError(f"input shape: expected dims of at least 0, got {list(dims)}")
    if any(d == 0 for d in dims):
        raise UnsupportedError(f"input shape: shape {tuple(dims)} has a dim of 0 (gradc has "
                               "no empty tensors)")
    target = _broadcast_dims(x.type.shape, dims)
    if tuple(target) == x.type.shape:
        return [x]  # an alias, as Identity
    if x.type.rank < len(target):
        x = ops.reshape(x, [1] * (len(target) - x.type.rank) + list(x.type.shape))
    return [ops.expand(x, _like(ctx, target, "input shape"))]


__all__ = ["FOLDERS", "FOLD_LIMIT", "fold_node", "foldable", "dims_of", "symbolic_error",
           "folder"]
