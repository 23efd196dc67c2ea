"""ATen converters of ``gradc.from_torch``: convolution, matrix products, batch normalization,
softmax, dropout and losses.

- ``convolution`` (every ``conv*d`` and ``conv_transpose*d`` after decomposition): gradc's
  ``convolution``, ``direction="backward"`` for a transposed one (PyTorch's and ONNX's
  ``ConvTranspose`` weight layout ``(C_in, C_out/groups, k...)``).
- ``linear``, ``matmul``, ``addmm``, ``mm``, ``bmm``: one ``gemm`` each (batch axes broadcast;
  a linear layer's weight is read with ``trans_b``, not transposed).
- Batch normalization: ``_native_batch_norm_legit_functional`` in training mode is
  ``batch_normalization_training`` plus PyTorch's running-statistics update, built only where
  the program reads it (its ``BUFFER_MUTATION`` outputs): ``(1 - m) * old + m * batch`` with
  PyTorch's ``m`` (default 0.1) and its unbiased batch variance ``var * n / (n - 1)``
  (SPEC-training.md §12.5 with ``f = n/(n - 1)``). **Choice:** the two factors are rounded
  once from float64 to the dtype, so in float64 they are PyTorch's ``m`` and ``1 - m``
  exactly (gradc's ``running_statistics`` rounds ONNX's momentum to float32 first, which would
  part from PyTorch's float64 running statistics in the 8th digit). The inference forms are
  ``batch_normalization`` with the running statistics.
- ``native_dropout`` in training is gradc's ``dropout`` composite drawing from ``rng_state``
  (SPEC-training.md §20); its bits are not PyTorch's (a comparison with PyTorch sets p = 0).
- ``nll_loss_forward``/``nll_loss2d_forward`` and ``mse_loss``: gradc's loss composites
  (PyTorch's ``ignore_index``, -100 by default, is kept).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from gradc.errors import UnsupportedError, VerifyError
from gradc.ir import builders as B
from gradc.ir.core import Value
from gradc.ir.dropout import dropout
from gradc.ir.losses import mean_squared_error, negative_log_likelihood
from gradc.ir.ops.common import F
from gradc.ir.types import DType
from gradc.torch_ops import Context, TorchNode, aten, axis, ints

REDUCTIONS = {0: "none", 1: "mean", 2: "sum"}


def _float(v: Value, field: str) -> Value:
    if v.type.dtype not in F:
        raise UnsupportedError(f"argument {field}: dtype {v.type.dtype} is not supported "
                               "(float64, float32, float16)")
    return v


def _channel(v: Value | None, rank: int) -> Value | None:
    """A ``(C,)`` vector as ``(1, C, 1, ...)`` of the given rank."""
    if v is None:
        return None
    return B.reshape(v, (1, v.type.shape[0]) + (1,) * (rank - 2))


def _const(value: float, dt: DType) -> Value:
    return B.constant(np.array(value, np.float64).astype(dt.numpy))


# -- convolution and matrix products ---------------------------------------------------------


@aten("convolution.default")
def _convolution(n: TorchNode, ctx: Context) -> Value:
    x = _float(ctx.value(n.arg("input"), "input"), "input")
    w = ctx.value(n.arg("weight"), "weight")
    nd = x.type.rank - 2
    if nd < 1 or nd > 3:
        raise UnsupportedError(f"input rank {x.type.rank} is not supported (batched 1-d, 2-d or "
                               "3-d convolution)")
    b = n.arg("bias", None)
    bias = _channel(ctx.value(b, "bias"), x.type.rank) if b is not None else None
    stride, dilation = ints(n.arg("stride"), "stride", nd), ints(n.arg("dilation"), "dilation", nd)
    padding = ints(n.arg("padding"), "padding", nd)
    transposed = bool(n.arg("transposed"))
    out_pad = ints(n.arg("output_padding"), "output_padding", nd)
    if not transposed and any(out_pad):
        raise VerifyError(f"argument output_padding: expected zeros for a convolution that is "
                          f"not transposed, got {out_pad}")
    return B.convolution(x, w, bias, "cross_correlation",
                         "backward" if transposed else "forward", stride, dilation, padding,
                         padding, out_pad if transposed else None, int(n.arg("groups")))


def _to_rank(v: Value, rank: int) -> Value:
    if v.type.rank == rank:
        return v
    return B.reshape(v, (1,) * (rank - v.type.rank) + tuple(v.type.shape))


def matmul(a: Value, b: Value, trans_b: bool = False, c: Value | None = None) -> Value:
    """NumPy's matmul (1-D operands get a unit axis, removed after) as one ``gemm``."""
    if a.type.rank == 0 or b.type.rank == 0:
        raise UnsupportedError("a scalar operand is not supported (matmul needs rank >= 1)")
    a_vec, b_vec = a.type.rank == 1, b.type.rank == 1
    if a_vec:
        a = B.reshape(a, (1,) + tuple(a.type.shape))
    if b_vec:
        b = B.reshape(b, tuple(b.type.shape) + (1,) if not trans_b else (1,) + tuple(
            b.type.shape))
    rank = max(a.type.rank, b.type.rank)
    if rank > 8:
        raise UnsupportedError(f"rank {rank} is not supported (gradc gemm takes rank 2..8)")
    a, b = _to_rank(a, rank), _to_rank(b, rank)
    y = B.gemm(a, b, None if c is None else _to_rank(c, rank), trans_b=trans_b)
    if a_vec or b_vec:
        shape = list(y.type.shape)
        if b_vec:
            shape.pop(-1)
        if a_vec:
            shape.pop(-2 if not b_vec else -1)
        y = B.reshape(y, tuple(shape))
    return y


@aten("linear.default")
def _linear(n: TorchNode, ctx: Context) -> Value:
    x = _float(ctx.value(n.arg("input"), "input"), "input")
    w = ctx.value(n.arg("weight"), "weight")
    b = n.arg("bias", None)
    bias = ctx.value(b, "bias") if b is not None else None
    if x.type.rank == 1 or w.type.rank == 1:
        y = matmul(x, w, trans_b=w.type.rank == 2)
        return y if bias is None else B.add(y, bias)
    return matmul(x, w, trans_b=True, c=bias)


@aten("matmul.default", "mm.default", "bmm.default")
def _mm(n: TorchNode, ctx: Context) -> Value:
    a = _float(ctx.value(n.arg("self"), "self"), "self")
    return matmul(a, ctx.value(n.arg("other" if n.op.startswith("matmul") else "mat2"),
                                "other"))


@aten("addmm.default")
def _addmm(n: TorchNode, ctx: Context) -> Value:
    a = _float(ctx.value(n.arg("mat1"), "mat1"), "mat1")
    b = ctx.value(n.arg("mat2"), "mat2")
    c = _to_rank(ctx.value(n.arg("self"), "self"), 2)
    return B.gemm(a, b, c, alpha=float(n.arg("alpha", 1)), beta=float(n.arg("beta", 1)))


# -- batch normalization ---------------------------------------------------------------------


def _affine(n: TorchNode, ctx: Context, x: Value) -> tuple[Value, Value]:
    """Scale and bias as ``(1, C, 1, ...)``; ones and zeros when the layer has none."""
    c = x.type.shape[1]
    if isinstance(c, str):
        raise UnsupportedError(f"the channel size is the symbol {c!r}")
    out = []
    for field, fill in (("weight", 1.0), ("bias", 0.0)):
        v = n.arg(field, None)
        vec = ctx.value(v, field) if v is not None else B.constant(
            np.full((c,), fill, x.type.dtype.numpy))
        out.append(_channel(vec, x.type.rank))
    return out[0], out[1]  # type: ignore[return-value]


def _eps(n: TorchNode) -> float:
    return float(n.arg("eps"))


def _training_outputs(n: TorchNode, ctx: Context, x: Value, first: int
                      ) -> tuple[Value, list[Value | None]]:
    """``y`` and the saved mean and inverse standard deviation (built only where read)."""
    scale, bias = _affine(n, ctx, x)
    y, mean, var = B.batch_normalization_training(x, scale, bias, epsilon=_eps(n))
    c = (x.type.shape[1],)
    saved: list[Value | None] = [None, None]
    if n.used(first):
        saved[0] = B.reshape(mean, c)
    if n.used(first + 1):
        std = B.sqrt(B.add(var, _const(_eps(n), x.type.dtype)))
        saved[1] = B.reshape(B.div(_const(1.0, x.type.dtype), std), c)
    return y, [mean, var] + saved


def _running(x: Value, mean: Value, var: Value, old_mean: Value, old_var: Value,
             momentum: float) -> tuple[Value, Value]:
    """PyTorch's update: ``(1 - m) * old + m * batch``, the variance unbiased (docstring)."""
    dt = x.type.dtype
    c = tuple(old_mean.type.shape)
    keep, take = _const(1.0 - momentum, dt), _const(momentum, dt)
    count = B.element_count(x, (0,) + tuple(range(2, x.type.rank)), dt)
    unbiased = B.mul(var, B.div(count, B.sub(count, _const(1.0, dt))))
    new_mean = B.add(B.mul(B.reshape(mean, c), take), B.mul(old_mean, keep))
    new_var = B.add(B.mul(B.reshape(unbiased, c), take), B.mul(old_var, keep))
    return new_mean, new_var


def _check_x(n: TorchNode, ctx: Context) -> Value:
    x = _float(ctx.value(n.arg("input"), "input"), "input")
    if x.type.rank < 2:
        raise UnsupportedError(f"input rank {x.type.rank} is not supported (rank 2..8)")
    return x


@aten("_native_batch_norm_legit_functional.default")
def _batch_norm_functional(n: TorchNode, ctx: Context) -> tuple[Value | None, ...]:
    """Results: y, saved mean, saved inverse std, new running mean, new running variance."""
    x = _check_x(n, ctx)
    old_mean = ctx.value(n.arg("running_mean"), "running_mean")
    old_var = ctx.value(n.arg("running_var"), "running_var")
    if not n.arg("training"):
        return (_inference(n, ctx, x, old_mean, old_var), None, None, old_mean, old_var)
    y, (mean, var, s_mean, s_std) = _training_outputs(n, ctx, x, 1)
    new: tuple[Value | None, Value | None] = (None, None)
    if n.used(3) or n.used(4):
        new = _running(x, mean, var, old_mean, old_var,  # type: ignore[arg-type]
                       float(n.arg("momentum")))
    return (y, s_mean, s_std) + new


@aten("_native_batch_norm_legit.no_stats")
def _batch_norm_no_stats(n: TorchNode, ctx: Context) -> tuple[Value | None, ...]:
    """Training mode without running statistics: y, saved mean, saved inverse std."""
    x = _check_x(n, ctx)
    if not n.arg("training"):
        raise UnsupportedError("inference mode without running statistics is not supported")
    y, (_, _, s_mean, s_std) = _training_outputs(n, ctx, x, 1)
    return (y, s_mean, s_std)


def _inference(n: TorchNode, ctx: Context, x: Value, mean: Value, var: Value) -> Value:
    scale, bias = _affine(n, ctx, x)
    return B.batch_normalization(x, _channel(mean, x.type.rank), _channel(var, x.type.rank),
                                 scale, bias, epsilon=_eps(n))


@aten("_native_batch_norm_legit_no_training.default")
def _batch_norm_inference(n: TorchNode, ctx: Context) -> tuple[Value | None, ...]:
    x = _check_x(n, ctx)
    if n.used(1) or n.used(2):
        raise UnsupportedError("results 1-2 (empty in inference mode) are not supported")
    mean = ctx.value(n.arg("running_mean"), "running_mean")
    var = ctx.value(n.arg("running_var"), "running_var")
    return (_inference(n, ctx, x, mean, var), None, None)


# -- softmax, dropout, losses ----------------------------------------------------------------


@aten("_softmax.default", "_log_softmax.default")
def _softmax(n: TorchNode, ctx: Context) -> Value:
    if n.arg("half_to_float", False):
        raise UnsupportedError("half_to_float=True is not supported")
    x = _float(ctx.value(n.arg("self"), "self"), "self")
    if x.type.rank == 0:
        return B.reshape((B.log_softmax if "log" in n.op else B.softmax)(
            B.reshape(x, (1,)), (0,)), ())
    ax = axis(n.arg("dim"), x.type.rank)
    return (B.log_softmax if "log" in n.op else B.softmax)(x, (ax,))


@aten("native_dropout.default")
def _native_dropout(n: TorchNode, ctx: Context) -> tuple[Value, Value | None]:
    x = _float(ctx.value(n.arg("input"), "input"), "input")
    p, train = float(n.arg("p")), n.arg("train")
    if train is False:
        keep = B.expand(B.constant(np.array(True)), x) if n.used(1) else None
        return x, keep
    if not 0.0 <= p < 1.0:
        raise UnsupportedError(f"probability {p} is not supported (0 <= p < 1)")
    y, keep, state = dropout(x, ctx.rng_state(), p)
    ctx.set_rng_state(state)
    return y, keep


def _reduction(n: TorchNode) -> str:
    r = n.arg("reduction", 1)
    if r not in REDUCTIONS:
        raise VerifyError(f"argument reduction: expected 0, 1 or 2, got {r!r}")
    return REDUCTIONS[r]


@aten("nll_loss_forward.default", "nll_loss2d_forward.default")
def _nll_loss(n: TorchNode, ctx: Context) -> tuple[Value, None]:
    if n.used(1):
        raise UnsupportedError("result total_weight is not supported")
    x = _float(ctx.value(n.arg("self"), "self"), "self")
    labels = ctx.value(n.arg("target"), "target")
    w: Any = n.arg("weight", None)
    weight = ctx.value(w, "weight") if w is not None else None
    return negative_log_likelihood(x, labels, weight, _reduction(n),
                                   int(n.arg("ignore_index", -100))), None


@aten("mse_loss.default")
def _mse_loss(n: TorchNode, ctx: Context) -> Value:
    x = _float(ctx.value(n.arg("self"), "self"), "self")
    return mean_squared_error(x, ctx.operand(n.arg("target"), x.type.dtype, "target"),
                              _reduction(n))


__all__ = ["matmul"]
