"""Dropout (SPEC-training.md §20.2), a composite of ``random_generator``, ``greater_equal``,
``where`` and ``mul``.

An element is kept when its 32 random bits, as an unsigned integer, are at least
``T = ceil(ratio * 2**32)`` (exact for the float32 ``ratio``); kept elements are multiplied by
``1 / (1 - ratio)`` (float64, rounded once to the dtype), dropped ones by +0. The gradient is
``mul``'s: ``dinput = dY * M``, PyTorch's ``native_dropout_backward``.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from gradc.ir import builders as B
from gradc.ir.core import Value
from gradc.ir.training_args import ArgCheck
from gradc.ir.types import DType


def keep_threshold(ratio: float) -> int:
    """``ceil(ratio * 2**32)`` for the float32 ``ratio`` (exact in float64)."""
    return math.ceil(ratio * 2.0 ** 32)


def dropout(input: Value, input_state: Value, ratio: float = 0.5) -> tuple[Value, Value, Value]:
    """``(output, mask, output_state)``: each element kept with probability ``1 - ratio``.

    The keep decision uses 32 Philox bits per element drawn from ``input_state`` (kept when
    the bits are at least ``ceil(ratio * 2**32)``); kept elements are scaled by
    ``1 / (1 - ratio)``, dropped ones become +0; ``mask`` is the bool keep mask and
    ``output_state`` the advanced state.
    """
    c = ArgCheck("dropout")
    x = c.floating("input", input, 0, 8)
    st = c.value("input_state", input_state)
    c.dtype_in("input_state", st, (DType.uint32,))
    if st.type.shape != (6,):
        c.fail("input_state.shape", "(6,)", st.type.shape)
    r = c.real("ratio", ratio, 0.0, 1.0, hi_open=True)
    shape = x.type.shape
    bits, out_state = B.random_generator(st, shape if shape else (1,))
    if not shape:
        bits = B.reshape(bits, ())
    threshold = B.constant(np.array(keep_threshold(r), np.uint32))
    keep = B.greater_equal(bits, threshold)
    dt = x.type.dtype.numpy
    scale = B.constant(np.array(1.0 / (1.0 - r), np.float64).astype(dt))
    m = B.where(keep, scale, B.constant(np.zeros((), dt)))
    return B.mul(x, m), keep, out_state


__all__: list[Any] = ["dropout", "keep_threshold"]
