"""ONNX lowerings of SPEC-training.md §19.1 and §20.1: ``adam_optimizer``, ``random_generator``.

``random_generator`` is Philox 4x32-10 written with standard integer operators on uint64
(opset 18+ ``Mul``, ``BitShift``, ``BitwiseAnd``/``Or``/``Xor``, ``Add``, ``Cast``): a 32x32-bit
product fits in 64 bits, so each round is exact. The blocks are a ``Range`` over
``ceil(count / 4)``; the 128-bit counter ``ctr + b`` is two uint64 words, the carry out of the
low word found with bit operations only (``((a & b) | ((a | b) & ~sum)) >> 63``), since
onnxruntime has no uint64 ``Less``. The ten rounds and the key schedule are unrolled.

``adam_optimizer`` follows the reference: the bias correction in double (``Pow``, ``Sqrt``,
``Div``) once, rounded to the accumulation type, then element-wise ops in that type. Float
constants go through ``safe_binary`` (onnxruntime's NoopElimination must not drop them). The
losses, optimizers and dropout are composites (§9.6): they export op by op.
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from gradc.backends.onnx.builder import OnnxGraphBuilder, Tensor
from gradc.backends.onnx.lower_arith import safe_binary
from gradc.ir.core import Node
from gradc.ir.types import Dim, DType

U64, U32, I64, F32, F64 = DType.uint64, DType.uint32, DType.int64, DType.float32, DType.float64
MASK32 = 0xFFFFFFFF
PHILOX_M = (0xD2511F53, 0xCD9E8D57)
PHILOX_W = (0x9E3779B9, 0xBB67AE85)
BLOCKS = "gradc.philox.blocks"  # the shape name of the block axis when it is symbolic


class _U64:
    """uint64 helpers on a builder: constants, bit operations, wrapping sums."""

    def __init__(self, gb: OnnxGraphBuilder) -> None:
        self.gb = gb

    def c(self, v: int) -> Tensor:
        return self.gb.scalar(np.uint64(v), U64)

    def op(self, op_type: str, a: Tensor, b: Tensor) -> Tensor:
        return self.gb.binary(op_type, a, b)

    def shr(self, a: Tensor, n: int) -> Tensor:
        return self.gb.op("BitShift", [a, self.c(n)], U64, a.shape, direction="RIGHT")

    def shl(self, a: Tensor, n: int) -> Tensor:
        return self.gb.op("BitShift", [a, self.c(n)], U64, a.shape, direction="LEFT")

    def low(self, a: Tensor) -> Tensor:
        return self.op("BitwiseAnd", a, self.c(MASK32))

    def carry(self, a: Tensor, b: Tensor, total: Tensor) -> Tensor:
        """1 where ``a + b`` wrapped past 2**64 (``total`` is the wrapped sum), else 0."""
        both = self.op("BitwiseAnd", a, b)
        either = self.op("BitwiseOr", a, b)
        not_sum = self.op("BitwiseXor", total, self.c(2 ** 64 - 1))
        return self.shr(self.op("BitwiseOr", both, self.op("BitwiseAnd", either, not_sum)), 63)

    def add128(self, lo0: Tensor, hi0: Tensor, b: Tensor) -> tuple[Tensor, Tensor]:
        """(lo, hi) of the 128-bit ``(hi0, lo0) + b`` (b < 2**64), wrapping."""
        lo = self.op("Add", b, lo0)
        return lo, self.op("Add", self.carry(b, lo0, lo), hi0)


def _word(gb: OnnxGraphBuilder, s64: Tensor, j: int) -> Tensor:
    return gb.op("Gather", [s64, gb.scalar(j, I64)], U64, (), axis=0)


def _block_count(gb: OnnxGraphBuilder, shape: Sequence[Dim]) -> tuple[Tensor, Dim]:
    """ceil(count / 4) as a rank-0 int64 tensor, and the dim it gives the block axis."""
    count = gb.product(shape)
    if isinstance(count, int):
        nb = (count + 3) // 4
        limit = gb.scalar(nb, I64)
        if nb > 2 ** 53:  # ONNX shape inference sizes a Range of constants in double precision
            limit = gb.op("Identity", [limit], I64, ())
        return limit, nb
    plus = gb.binary("Add", count, gb.scalar(3, I64))
    return gb.binary("Div", plus, gb.scalar(4, I64)), BLOCKS


def lower_random_generator(gb: OnnxGraphBuilder, node: Node,
                           args: Sequence[Tensor]) -> list[Tensor]:
    """Philox 4x32-10 over ``ceil(count/4)`` counter blocks; the state advances by as many."""
    (state,) = args
    u = _U64(gb)
    shape = node.outputs[0].type.shape
    s64 = gb.cast(state, U64)
    w = [_word(gb, s64, j) for j in range(6)]
    lo0 = u.op("BitwiseOr", w[0], u.shl(w[1], 32))
    hi0 = u.op("BitwiseOr", w[2], u.shl(w[3], 32))
    nb, nb_dim = _block_count(gb, shape)
    blocks = gb.op("Range", [gb.scalar(0, I64), nb, gb.scalar(1, I64)], I64, (nb_dim,))
    lo, hi = u.add128(lo0, hi0, gb.cast(blocks, U64))
    c = [u.low(lo), u.shr(lo, 32), u.low(hi), u.shr(hi, 32)]
    k0, k1 = w[4], w[5]
    for r in range(10):
        if r:
            k0 = u.low(u.op("Add", k0, u.c(PHILOX_W[0])))
            k1 = u.low(u.op("Add", k1, u.c(PHILOX_W[1])))
        p0 = u.op("Mul", c[0], u.c(PHILOX_M[0]))
        p1 = u.op("Mul", c[2], u.c(PHILOX_M[1]))
        c = [u.op("BitwiseXor", u.op("BitwiseXor", u.shr(p1, 32), c[1]), k0), u.low(p1),
             u.op("BitwiseXor", u.op("BitwiseXor", u.shr(p0, 32), c[3]), k1), u.low(p0)]
    cols = [gb.unsqueeze(t, 1) for t in c]
    table = gb.op("Concat", cols, U64, (nb_dim, 4), axis=1)
    flat = gb.op("Reshape", [table, gb.ints([-1])], U64, ("gradc.philox.words",))
    count = gb.product(shape)
    end = gb.ints([count]) if isinstance(count, int) else gb.reshape(count, (1,))
    if isinstance(count, int) and count > 2 ** 53:  # as in _block_count: Slice too
        end = gb.op("Identity", [end], I64, (1,))
    n_dim: Dim = count if isinstance(count, int) else "gradc.philox.count"
    words = gb.op("Slice", [flat, gb.ints([0]), end, gb.ints([0])], U64, (n_dim,))
    out = gb.reshape(gb.cast(words, U32), shape)
    lo2, hi2 = u.add128(lo0, hi0, gb.cast(nb, U64))
    parts = [u.low(lo2), u.shr(lo2, 32), u.low(hi2), u.shr(hi2, 32), w[4], w[5]]
    vec = gb.op("Concat", [gb.reshape(p, (1,)) for p in parts], U64, (6,), axis=0)
    return [out, gb.cast(vec, U32)]


def lower_adam_optimizer(gb: OnnxGraphBuilder, node: Node,
                         args: Sequence[Tensor]) -> list[Tensor]:
    """DirectML's Adam: bias correction in double once, element-wise steps in ACC."""
    x, m, v, g, step = args
    dt = x.dtype
    acc = F64 if dt == F64 else F32
    lr, b1, b2, eps = (float(node.attrs[k]) for k in ("learning_rate", "beta1", "beta2",
                                                      "epsilon"))
    t = gb.cast(gb.reshape(step, ()), F64)
    one = gb.scalar(1.0, F64)
    b1t = gb.binary("Pow", gb.scalar(b1, F64), t)
    b2t = gb.binary("Pow", gb.scalar(b2, F64), t)
    corr = gb.binary("Div", gb.op("Sqrt", [gb.binary("Sub", one, b2t)], F64, ()),
                     gb.binary("Sub", one, b1t))
    lr_step = safe_binary(gb, "Mul", gb.scalar(np.float32(lr), acc), gb.cast(corr, acc))

    def k(value: float) -> Tensor:
        return gb.scalar(value, acc)  # float64 value rounded once to ACC

    ga, ma, va, xa = (gb.cast(a, acc) for a in (g, m, v, x))
    mo = safe_binary(gb, "Add", safe_binary(gb, "Mul", k(b1), ma),
                     safe_binary(gb, "Mul", k(1.0 - b1), ga))
    gg = gb.binary("Mul", ga, ga)
    vo = safe_binary(gb, "Add", safe_binary(gb, "Mul", k(b2), va),
                     safe_binary(gb, "Mul", k(1.0 - b2), gg))
    root = gb.op("Sqrt", [vo], acc, vo.shape)
    u = gb.binary("Div", gb.binary("Mul", lr_step, mo), safe_binary(gb, "Add", root, k(eps)))
    xo = gb.binary("Sub", xa, u)
    return [gb.cast(r, dt) for r in (xo, mo, vo)]


def lower_training_table() -> dict[str, Any]:
    """The lowerings of this module by gradc op name."""
    return {"random_generator": lower_random_generator, "adam_optimizer": lower_adam_optimizer}
