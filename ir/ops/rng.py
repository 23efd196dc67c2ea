"""Random numbers (SPEC-training.md §20.1): ``random_generator``, Philox 4x32-10 counter blocks.

The state is uint32 ``(6,)``: counter words 0-3 (word 0 least significant), key words 4-5.
Element ``i`` of the result (row-major) is word ``i % 4`` of the block of counter
``ctr + i // 4``; the output state is ``ctr + ceil(count / 4)`` (mod 2**128) and the same key.
An exact op: every target reproduces the bits.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import numpy as np

from gradc.ir.core import Node, Value
from gradc.ir.ops.registry import PURE, Attr, Checker, OpDef, register
from gradc.ir.types import Dim, DType, TensorType

STATE_WORDS = 6
PHILOX_TYPES = ("philox_4x32_10",)


def philox_generate(state: np.ndarray, out_sizes: Sequence[int]) -> list[np.ndarray]:
    """(bits of shape ``out_sizes``, next state): ``random_generator``'s reference, vectorized.

    The blocks are computed with uint64 arrays (32x32 -> 64-bit products are exact there);
    each block's counter is ``ctr + b`` with the carry out of the low 64 bits.
    """
    mask = 0xFFFFFFFF
    w = [int(x) for x in state.reshape(-1)]
    ctr = w[0] | (w[1] << 32) | (w[2] << 64) | (w[3] << 96)
    count = 1
    for d in out_sizes:
        count *= int(d)
    nb = (count + 3) // 4
    lo0 = np.uint64(ctr & 0xFFFFFFFFFFFFFFFF)
    with np.errstate(over="ignore"):
        lo = np.arange(nb, dtype=np.uint64) + lo0  # wraps modulo 2**64
        hi = (lo < lo0).astype(np.uint64) + np.uint64(ctr >> 64)
    m32 = np.uint64(mask)
    c0, c1, c2, c3 = lo & m32, lo >> np.uint64(32), hi & m32, hi >> np.uint64(32)
    k0, k1 = w[4], w[5]
    for r in range(10):
        if r:
            k0, k1 = (k0 + 0x9E3779B9) & mask, (k1 + 0xBB67AE85) & mask
        p0 = c0 * np.uint64(0xD2511F53)
        p1 = c2 * np.uint64(0xCD9E8D57)
        c0, c1, c2, c3 = ((p1 >> np.uint64(32)) ^ c1 ^ np.uint64(k0), p1 & m32,
                          (p0 >> np.uint64(32)) ^ c3 ^ np.uint64(k1), p0 & m32)
    blocks = np.stack([c0, c1, c2, c3], axis=1).reshape(-1)
    out = blocks[:count].astype(np.uint32).reshape(tuple(int(d) for d in out_sizes))
    nxt = (ctr + nb) % 2 ** 128
    words = [(nxt >> (32 * j)) & mask for j in range(4)] + [w[4], w[5]]
    return [out, np.array(words, np.uint32)]


@register
class RandomGenerator(OpDef):
    """``random_generator(input_state, output_sizes, type)``: uint32 random bits shaped
    ``output_sizes`` from the Philox 4x32-10 counter-based generator keyed by ``input_state``,
    and the next state (its counter advanced past the blocks used)."""

    name = "random_generator"
    numerics = "exact"
    operands = ("input_state",)
    attributes = (Attr("output_sizes", "dims"),
                  Attr("type", "choice", "philox_4x32_10", PHILOX_TYPES))
    traits = PURE
    dtypes = (DType.uint32,)
    nan_from = ()

    def infer(self, c: Checker) -> list[TensorType]:
        c.dtype_in("input_state", self.dtypes)
        t = c.t("input_state")
        if t.shape != (STATE_WORDS,):
            c.fail("input_state.shape", f"({STATE_WORDS},)", t.shape)
        sizes = c.dims("output_sizes")
        if not 1 <= len(sizes) <= 8:
            c.fail("output_sizes", "1..8 dims", len(sizes))
        for i, d in enumerate(sizes):
            if not isinstance(d, str) and d < 1:
                c.fail(f"output_sizes[{i}]", "an integer >= 1 or a symbol name", d)
        c.choice("type")
        out: tuple[Dim, ...] = tuple(sizes)
        return [TensorType(DType.uint32, out), TensorType(DType.uint32, (STATE_WORDS,))]

    def reference(self, attrs: Mapping[str, Any], state: np.ndarray) -> list[np.ndarray]:
        return philox_generate(state, attrs["output_sizes"])

    def evaluate(self, node: Node, args: Sequence[np.ndarray],
                 bindings: Mapping[str, int]) -> list[np.ndarray]:
        """The reference with symbolic ``output_sizes`` bound."""
        sizes = [bindings[d] if isinstance(d, str) else d for d in node.attrs["output_sizes"]]
        return philox_generate(args[0], sizes)

    def vjp(self, node: Node, grads: Sequence[Value | None]) -> list[Value | None]:
        """uint32 results carry no gradient (SPEC-training §9.7)."""
        return [None]
