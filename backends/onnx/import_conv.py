"""ONNX converters of SPEC-training.md §21 for §10: Conv and ConvTranspose.

- ``Conv`` (opsets 1, 11, 22): ``convolution(X, W, reshape(B), "cross_correlation", "forward",
  strides, dilations, pads[:nd], pads[nd:], 0, group)``; ``auto_pad`` as SPEC.md §7.4.
- ``ConvTranspose``: the backward direction with ``output_padding``; ``output_shape`` (or
  ``auto_pad`` SAME, whose output shape is ``input * strides``) sets the pads from
  ``total = s*(in-1) + output_padding + ((k-1)*d+1) - output_shape``: SAME_UPPER puts the
  smaller half at the start, otherwise at the end (ONNX's text); ``total < 0`` is unsupported.

``kernel_shape``, if given, must equal W's spatial sizes. The bias ``(C,)`` becomes
``(1, C, 1, ...)``. Spatial and channel dims must be static (gradc's checklist); the batch
may be symbolic.
"""

from __future__ import annotations

from typing import Sequence

from gradc.errors import UnsupportedError, VerifyError
from gradc.ir import builders as ops
from gradc.ir.core import Value
from gradc.ir.ops.convolution import CONV_DTYPES
from gradc.backends.onnx.import_node import (Context, OnnxNode, Produced, converter,
                                             require_dtype, require_rank)
from gradc.backends.onnx.import_ops import AUTO_PADS, same_pads


def _check(n: OnnxNode, ctx: Context) -> list[str]:
    """Features this importer does not take (reported before anything is built)."""
    auto_pad = n.get_str("auto_pad", "NOTSET")
    if auto_pad not in AUTO_PADS:
        return [f"attribute auto_pad: {auto_pad!r} is not supported ({', '.join(AUTO_PADS)})"]
    return []


def _ints(n: OnnxNode, name: str, length: int, default: int) -> list[int]:
    v = n.get_ints(name, [default] * length)
    assert v is not None
    if len(v) != length:
        raise VerifyError(f"attribute {name}: expected {length} values, got {len(v)}")
    return v


def _operands(n: OnnxNode, ctx: Context) -> tuple[Value, Value, list[int], list[int]]:
    """X and W checked (rank, dtype, static sizes, kernel_shape); spatial sizes of both."""
    x, w = ctx.value(n, 0, "X"), ctx.value(n, 1, "W")
    rank = require_rank(x, 3, 5, "X", "convolution")
    require_dtype(x, CONV_DTYPES, "X", "convolution")
    for field, v in (("X", x), ("W", w)):
        for i, dim in enumerate(v.type.shape[1:], 1):
            if isinstance(dim, str):
                raise UnsupportedError(f"input {field}: dim {i} is the symbol {dim!r} (gradc "
                                       "convolution needs static channel and spatial sizes)")
    if w.type.rank != rank:  # before W's spatial sizes are read for the pads (fuzz 9999)
        raise VerifyError(f"input W: expected rank {rank} (X's rank: (C_out, C_in / group) "
                          f"and {rank - 2} spatial sizes), got rank {w.type.rank}")
    ks = [int(d) for d in w.type.shape[2:]]
    given = n.get_ints("kernel_shape", None)
    if given is not None and list(given) != ks:
        raise VerifyError(f"attribute kernel_shape: expected W's spatial sizes {ks}, got "
                          f"{list(given)}")
    return x, w, [int(d) for d in x.type.shape[2:]], ks


def _bias(n: OnnxNode, ctx: Context, rank: int) -> Value | None:
    if not n.input(2):
        return None
    b = ctx.value(n, 2, "B")
    if b.type.rank != 1:
        raise VerifyError(f"input B: expected a 1-D tensor (C,), got rank {b.type.rank}")
    return ops.reshape(b, (1, b.type.shape[0]) + (1,) * (rank - 2))


@converter("Conv", check=_check)
def _conv(n: OnnxNode, ctx: Context) -> list[Produced]:
    x, w, spatial, ks = _operands(n, ctx)
    nd = len(spatial)
    s, d = _ints(n, "strides", nd, 1), _ints(n, "dilations", nd, 1)
    pads = _ints(n, "pads", 2 * nd, 0)
    sp, ep = pads[:nd], pads[nd:]
    auto_pad = n.get_str("auto_pad", "NOTSET")
    if auto_pad == "VALID":
        sp, ep = [0] * nd, [0] * nd
    elif auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        pairs = [same_pads(spatial[i], ks[i], s[i], d[i], auto_pad == "SAME_UPPER")
                 for i in range(nd)]
        sp, ep = [p[0] for p in pairs], [p[1] for p in pairs]
    return [ops.convolution(x, w, _bias(n, ctx, nd + 2), "cross_correlation", "forward", s, d,
                            sp, ep, None, n.get_int("group", 1))]


def transpose_pads(spatial: Sequence[int], ks: Sequence[int], s: Sequence[int],
                   d: Sequence[int], op: Sequence[int], target: Sequence[int],
                   upper: bool) -> tuple[list[int], list[int]]:
    """§21's ConvTranspose pads for the output sizes ``target`` (UnsupportedError if < 0)."""
    start, end = [], []
    for i, n in enumerate(spatial):
        total = s[i] * (n - 1) + op[i] + (ks[i] - 1) * d[i] + 1 - target[i]
        if total < 0:
            raise UnsupportedError(f"attribute output_shape: {target[i]} on spatial axis {i} is "
                                   f"larger than the full transposed output ({target[i] + total}"
                                   "; it would need negative padding)")
        small = total // 2
        start.append(small if upper else total - small)
        end.append(total - small if upper else small)
    return start, end


@converter("ConvTranspose", check=_check)
def _conv_transpose(n: OnnxNode, ctx: Context) -> list[Produced]:
    x, w, spatial, ks = _operands(n, ctx)
    nd = len(spatial)
    s, d = _ints(n, "strides", nd, 1), _ints(n, "dilations", nd, 1)
    op = _ints(n, "output_padding", nd, 0)
    pads = _ints(n, "pads", 2 * nd, 0)
    sp, ep = pads[:nd], pads[nd:]
    auto_pad = n.get_str("auto_pad", "NOTSET")
    shape = n.get_ints("output_shape", None)
    if shape is not None:
        if len(shape) == nd + 2:
            shape = shape[2:]
        if len(shape) != nd:
            raise VerifyError(f"attribute output_shape: expected {nd} spatial sizes, got "
                              f"{len(shape)} values")
    elif auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        shape = [spatial[i] * s[i] for i in range(nd)]
    if shape is not None:
        sp, ep = transpose_pads(spatial, ks, s, d, op, shape, auto_pad == "SAME_UPPER")
    elif auto_pad == "VALID":
        sp, ep = [0] * nd, [0] * nd
    return [ops.convolution(x, w, _bias(n, ctx, nd + 2), "cross_correlation", "backward", s, d,
                            sp, ep, op, n.get_int("group", 1))]
