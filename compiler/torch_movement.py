"""ATen converters of ``gradc.from_torch``: views, permutations, slices, concatenation, splits,
padding, copies and casts.

Every view that only changes the shape (``view``, ``squeeze``, ``unsqueeze``) is gradc's
``reshape`` to the shape the exporter recorded, so a symbolic size stays a symbol. Copies
(``clone``, ``alias``, a ``_to_copy`` to another device) are the value itself; a ``_to_copy`` to
another dtype is ``cast``. Slices and selections need a static size on the sliced axis (a
whole symbolic axis stays whole). The table holds the core-ATen forms only: ``reshape``,
``flatten``, ``split``, ``chunk``, ``transpose``, ``t`` and the like reach it decomposed.
"""

from __future__ import annotations

from typing import Any, Sequence

from gradc.errors import UnsupportedError, VerifyError
from gradc.ir import builders as B
from gradc.ir.core import Value
from gradc.ir.types import Dim, DType
from gradc.torch_ops import Context, TorchNode, aten, axis, ints

INT64_MAX = 2**63 - 1


@aten("view.default", "squeeze.dims", "unsqueeze.default")
def _view(n: TorchNode, ctx: Context) -> Value:
    x = ctx.value(n.arg("self"), "self")
    shape = ctx.shape(n)
    return x if tuple(shape) == tuple(x.type.shape) else B.reshape(x, shape)


@aten("clone.default", "alias.default")
def _copy(n: TorchNode, ctx: Context) -> Value:
    return ctx.value(n.arg("self"), "self")


@aten("_to_copy.default")
def _to_copy(n: TorchNode, ctx: Context) -> Value:
    return ctx.operand(n.arg("self"), ctx.dtype(n), "self")


@aten("copy.default")
def _copy_into(n: TorchNode, ctx: Context) -> Value:
    """``copy(self, src)``: ``src`` in ``self``'s dtype and shape (a functionalized ``copy_``)."""
    src = ctx.operand(n.arg("src"), ctx.dtype(n), "src")
    dims = ctx.shape(n)
    if tuple(src.type.shape) == tuple(dims):
        return src
    if src.type.rank < len(dims):
        src = B.reshape(src, (1,) * (len(dims) - src.type.rank) + tuple(src.type.shape))
    return B.expand(src, ctx.value(n.arg("self"), "self"))


@aten("permute.default")
def _permute(n: TorchNode, ctx: Context) -> Value:
    x = ctx.value(n.arg("self"), "self")
    rank = x.type.rank
    perm = [axis(d, rank, "dims") for d in ints(n.arg("dims"), "dims")]
    if sorted(perm) != list(range(rank)):
        raise VerifyError(f"argument dims: expected a permutation of 0..{rank - 1}, got {perm}")
    return x if perm == sorted(perm) else B.transpose(x, perm)


@aten("expand.default")
def _expand(n: TorchNode, ctx: Context) -> Value:
    x = ctx.value(n.arg("self"), "self")
    dims = ctx.shape(n)
    if tuple(dims) == tuple(x.type.shape):
        return x
    if x.type.rank < len(dims):
        x = B.reshape(x, (1,) * (len(dims) - x.type.rank) + tuple(x.type.shape))
    return B.expand(x, ctx.like(dims, "argument size"))


@aten("repeat.default")
def _repeat(n: TorchNode, ctx: Context) -> Value:
    """``repeat``: each axis ``d`` becomes ``(r, d)`` broadcast, then merged to ``r*d``."""
    x = ctx.value(n.arg("self"), "self")
    reps = ints(n.arg("repeats"), "repeats")
    shape = (1,) * (len(reps) - x.type.rank) + tuple(x.type.shape)
    if any(isinstance(d, str) for d in shape):
        raise UnsupportedError("repeating a tensor with a symbolic size is not supported")
    inter = [v for d in shape for v in (1, d)]
    wide = [v for r, d in zip(reps, shape) for v in (r, d)]
    y = B.expand(B.reshape(x, inter), ctx.like(wide, "argument repeats"))
    return B.reshape(y, ctx.shape(n))


def _window(x: Value, ax: int, start: int, size: int, step: int, count: int) -> Value:
    rank = x.type.rank
    offsets = [0] * rank
    sizes: list[Dim] = list(x.type.shape)
    strides = [1] * rank
    out: list[Dim] = list(x.type.shape)
    offsets[ax], sizes[ax], strides[ax], out[ax] = start, size, step, count
    if x.type.dtype == DType.bool:  # gradc's slice moves numbers: False/True as 0/1
        y = B.slice(B.cast(x, DType.uint8), offsets, sizes, strides, out)
        return B.cast(y, DType.bool)
    return B.slice(x, offsets, sizes, strides, out)


def _static(x: Value, ax: int, what: str) -> int:
    dim = x.type.shape[ax]
    if isinstance(dim, str):
        raise UnsupportedError(f"{what} on axis {ax}, whose size is the symbol {dim!r}, is not "
                               "supported")
    return int(dim)


@aten("slice.Tensor")
def _slice(n: TorchNode, ctx: Context) -> Value:
    x = ctx.value(n.arg("self"), "self")
    ax = axis(n.arg("dim", 0), x.type.rank)
    start, end, step = n.arg("start", None), n.arg("end", None), n.arg("step", 1)
    start = 0 if start is None else start
    end = INT64_MAX if end is None else end
    if isinstance(x.type.shape[ax], str) and start == 0 and end == INT64_MAX and step == 1:
        return x
    size = _static(x, ax, "a slice")
    bounds = [ctx.dim(v, f) for v, f in ((start, "start"), (end, "end"), (step, "step"))]
    b, e, t = (v if isinstance(v, int) else None for v in bounds)
    if b is None or e is None or t is None:
        raise UnsupportedError("a slice with symbolic bounds is not supported")
    b, e, _ = slice(b, e, t).indices(size)
    count = len(range(b, e, t))
    if count == 0:
        raise UnsupportedError("the slice is empty (gradc has no empty tensors)")
    if count == size:
        return x
    return _window(x, ax, b, (count - 1) * t + 1, t, count)


@aten("select.int")
def _select(n: TorchNode, ctx: Context) -> Value:
    x = ctx.value(n.arg("self"), "self")
    ax = axis(n.arg("dim"), x.type.rank)
    size = _static(x, ax, "a selection")
    index = ctx.dim(n.arg("index"), "index")
    if not isinstance(index, int) or not -size <= index < size:
        raise VerifyError(f"argument index: expected an index in {-size}..{size - 1}, got "
                          f"{index!r}")
    y = x if size == 1 else _window(x, ax, index % size, 1, 1, 1)
    return B.reshape(y, ctx.shape(n))


@aten("cat.default")
def _cat(n: TorchNode, ctx: Context) -> Value:
    """``cat``; empty parts (a key/value cache before its first entry, ``transformers``'
    ``DynamicCache``) add nothing and are left out, as PyTorch leaves them out."""
    dt = ctx.dtype(n)
    parts = [ctx.operand(t, dt, f"tensors[{i}]") for i, t in enumerate(n.arg("tensors"))
             if not _empty(t)]
    if not parts:
        raise VerifyError("argument tensors: expected at least one tensor, got none")
    if len(parts) == 1:
        return parts[0]
    return B.join(parts, axis(n.arg("dim", 0), parts[0].type.rank))


def _empty(arg: Any) -> bool:
    """True for an argument whose example tensor has no elements."""
    shape = getattr(arg.meta.get("val") if hasattr(arg, "meta") else None, "shape", ())
    return any(isinstance(d, int) and d == 0 for d in shape)


def _split(x: Value, ax: int, sizes: Sequence[int]) -> tuple[Value, ...]:
    if len(sizes) == 1:
        return (x,)
    out = B.split(x, ax, list(sizes))
    return tuple(out) if isinstance(out, (tuple, list)) else (out,)


@aten("split_with_sizes.default")
def _split_with_sizes(n: TorchNode, ctx: Context) -> tuple[Value, ...]:
    x = ctx.value(n.arg("self"), "self")
    ax = axis(n.arg("dim", 0), x.type.rank)
    _static(x, ax, "a split")
    sizes = ints(n.arg("split_sizes"), "split_sizes")
    if any(s <= 0 for s in sizes):
        raise UnsupportedError(f"split sizes {sizes}: an empty part is not supported")
    return _split(x, ax, sizes)


@aten("constant_pad_nd.default")
def _constant_pad(n: TorchNode, ctx: Context) -> Value:
    x = ctx.value(n.arg("self"), "self")
    pad = ints(n.arg("pad"), "pad")
    rank = x.type.rank
    if len(pad) % 2 or len(pad) // 2 > rank:
        raise VerifyError(f"argument pad: expected pairs for at most {rank} axes, got {pad}")
    start, end = [0] * rank, [0] * rank
    for i in range(len(pad) // 2):  # pairs from the last axis backwards
        start[rank - 1 - i], end[rank - 1 - i] = pad[2 * i], pad[2 * i + 1]
    if any(p < 0 for p in start + end):
        raise UnsupportedError(f"negative padding {pad} (cropping) is not supported")
    if not any(start + end):
        return x
    value: Any = n.arg("value", 0)
    return B.pad(x, start, end, padding_value=value)


__all__: list[str] = []
