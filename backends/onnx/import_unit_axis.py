"""1-D pooling through a unit spatial axis: a rank-3 ONNX pool as gradc's 2-D pooling.

gradc's pooling ops take 2 or 3 spatial dims; ONNX's ``MaxPool`` and ``AveragePool`` also take
one (``MaxPool1d``, ``AdaptiveMaxPool1d``, ``AvgPool1d`` export a rank-3 node). A converter
computes the 1-D window, strides, pads, dilations and output size as usual, then calls
``pool_through_unit_axis``: the input ``(N, C, L)`` is reshaped to ``(N, C, L, 1)``, pooled with
a window of 1 (stride 1, no padding, dilation 1) on the new axis, and each result is reshaped
back. A window of one element on a unit axis selects that element, so the values (and the
argmax indices: ``l * 1 + 0``) are those of the 1-D pool, bit for bit.
"""

from __future__ import annotations

from typing import Callable, Sequence

from gradc.ir import builders as ops
from gradc.ir.core import Value

Pool2d = Callable[[Value, list[int], list[int], list[int], list[int], list[int],
                   "list[int] | None"], "Value | tuple[Value, ...]"]


def add_unit_axis(x: Value) -> Value:
    """``(N, C, L)`` -> ``(N, C, L, 1)``."""
    return ops.reshape(x, list(x.type.shape) + [1])


def drop_unit_axis(y: Value) -> Value:
    """``(N, C, L', 1)`` -> ``(N, C, L')``."""
    return ops.reshape(y, list(y.type.shape[:-1]))


def pool_through_unit_axis(x: Value, window: Sequence[int], strides: Sequence[int],
                           start: Sequence[int], end: Sequence[int], dilations: Sequence[int],
                           sizes: Sequence[int] | None, pool: Pool2d) -> list[Value]:
    """The results of ``pool`` on ``x`` with a unit axis added (the module docstring)."""
    out = pool(add_unit_axis(x), list(window) + [1], list(strides) + [1], list(start) + [0],
               list(end) + [0], list(dilations) + [1],
               None if sizes is None else list(sizes) + [1])
    results = list(out) if isinstance(out, tuple) else [out]
    return [drop_unit_axis(r) for r in results]


__all__ = ["add_unit_axis", "drop_unit_axis", "pool_through_unit_axis"]
