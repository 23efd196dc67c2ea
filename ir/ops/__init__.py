"""Every operator of gradc, defined once (one module per family) and exposed as builders.

A builder checks its arguments (SPEC.md checklists), infers the result type and appends the
node to the graph of its operands; it returns the result value (a tuple for several results).
"""

from __future__ import annotations

import builtins
from typing import Any, Sequence

import numpy as np

from gradc.ir.core import Value
from gradc.ir.ops import elementwise as _elementwise  # noqa: F401  (registers the ops)
from gradc.ir.ops import arith as _arith  # noqa: F401
from gradc.ir.ops import pooling as _pooling  # noqa: F401
from gradc.ir.ops import resample as _resample  # noqa: F401
from gradc.ir.ops import slice as _slice  # noqa: F401
from gradc.ir.ops.registry import REGISTRY, OpDef, get_op, make_node
from gradc.ir.types import DType

__all__ = [
    "relu", "relu_grad", "clip", "clip_grad", "slice", "slice_grad", "max_pooling",
    "max_pooling_grad", "resample", "resample_grad", "add", "sub", "mul", "neg", "constant",
    "reduce_sum", "reshape", "cast", "identity", "expand", "REGISTRY", "OpDef", "get_op",
]


def relu(input: Value) -> Value:
    """``x if x > 0 else +0`` (SPEC.md §2.1)."""
    return make_node("relu", [input], {})


def relu_grad(input: Value, input_gradient: Value) -> Value:
    """``dy if x > 0 else +0`` (SPEC.md §2.2)."""
    return make_node("relu_grad", [input, input_gradient], {})


def clip(input: Value, min: float, max: float) -> Value:
    """``max(min, min(x, max))``; NaN gives max (SPEC.md §3.1)."""
    return make_node("clip", [input], {"min": min, "max": max})


def clip_grad(input: Value, input_gradient: Value, min: float, max: float) -> Value:
    """``0 if x <= min or x >= max else dy`` (SPEC.md §3.2)."""
    return make_node("clip_grad", [input, input_gradient], {"min": min, "max": max})


def slice(input: Value, input_window_offsets: Sequence[int], input_window_sizes: Sequence[Any],
          input_window_strides: Sequence[int], output_sizes: Sequence[Any] | None = None) -> Value:
    """A strided window; negative strides read from the window's end (SPEC.md §4.1)."""
    return make_node("slice", [input], {
        "input_window_offsets": input_window_offsets, "input_window_sizes": input_window_sizes,
        "input_window_strides": input_window_strides, "output_sizes": output_sizes})


def slice_grad(input_gradient: Value, output_sizes: Sequence[Any],
               input_window_offsets: Sequence[int], input_window_sizes: Sequence[Any],
               input_window_strides: Sequence[int]) -> Value:
    """Scatter the gradient back into zeros of ``output_sizes`` (SPEC.md §4.2)."""
    return make_node("slice_grad", [input_gradient], {
        "output_sizes": output_sizes, "input_window_offsets": input_window_offsets,
        "input_window_sizes": input_window_sizes, "input_window_strides": input_window_strides})


def max_pooling(input: Value, window_size: Sequence[int], strides: Sequence[int] | None = None,
                start_padding: Sequence[int] | None = None,
                end_padding: Sequence[int] | None = None, dilations: Sequence[int] | None = None,
                output_indices: bool = False,
                output_sizes: Sequence[int] | None = None) -> Value | tuple[Value, Value]:
    """Window maxima, optionally with int64 flat indices (SPEC.md §5.1)."""
    return make_node("max_pooling", [input], {
        "window_size": window_size, "strides": strides, "start_padding": start_padding,
        "end_padding": end_padding, "dilations": dilations, "output_indices": output_indices,
        "output_sizes": output_sizes})


def max_pooling_grad(input: Value, input_gradient: Value, window_size: Sequence[int],
                     strides: Sequence[int] | None = None,
                     start_padding: Sequence[int] | None = None,
                     end_padding: Sequence[int] | None = None,
                     dilations: Sequence[int] | None = None) -> Value:
    """The gradient summed at each window's argmax, recomputed from ``input`` (SPEC.md §5.2)."""
    return make_node("max_pooling_grad", [input, input_gradient], {
        "window_size": window_size, "strides": strides, "start_padding": start_padding,
        "end_padding": end_padding, "dilations": dilations})


def resample(input: Value, scales: Sequence[float], interpolation_mode: str = "nearest",
             rounding_direction: str = "decreasing",
             input_pixel_offsets: Sequence[float] | None = None,
             output_pixel_offsets: Sequence[float] | None = None,
             output_sizes: Sequence[Any] | None = None) -> Value:
    """Nearest or multilinear resampling over 1..4 axes (SPEC.md §6.2)."""
    return make_node("resample", [input], {
        "scales": scales, "interpolation_mode": interpolation_mode,
        "rounding_direction": rounding_direction, "input_pixel_offsets": input_pixel_offsets,
        "output_pixel_offsets": output_pixel_offsets, "output_sizes": output_sizes})


def resample_grad(input_gradient: Value, output_sizes: Sequence[Any], scales: Sequence[float],
                  interpolation_mode: str = "nearest", rounding_direction: str = "decreasing",
                  input_pixel_offsets: Sequence[float] | None = None,
                  output_pixel_offsets: Sequence[float] | None = None) -> Value:
    """The exact adjoint of ``resample`` with the same fields (SPEC.md §6.3)."""
    return make_node("resample_grad", [input_gradient], {
        "output_sizes": output_sizes, "scales": scales, "interpolation_mode": interpolation_mode,
        "rounding_direction": rounding_direction, "input_pixel_offsets": input_pixel_offsets,
        "output_pixel_offsets": output_pixel_offsets})


def _operands(lhs: Any, rhs: Any) -> list[Value]:
    """Let one operand of a binary op be a Python or NumPy number.

    The number becomes a constant of the other operand's dtype.
    """
    if isinstance(lhs, Value) and not isinstance(rhs, Value):
        rhs = constant(np.asarray(rhs, dtype=lhs.type.dtype.numpy))
    elif isinstance(rhs, Value) and not isinstance(lhs, Value):
        lhs = constant(np.asarray(lhs, dtype=rhs.type.dtype.numpy))
    return [lhs, rhs]


def add(lhs: Value, rhs: Value) -> Value:
    """Elementwise ``lhs + rhs`` with NumPy broadcasting."""
    return make_node("add", _operands(lhs, rhs), {})


def sub(lhs: Value, rhs: Value) -> Value:
    """Elementwise ``lhs - rhs`` with NumPy broadcasting."""
    return make_node("sub", _operands(lhs, rhs), {})


def mul(lhs: Value, rhs: Value) -> Value:
    """Elementwise ``lhs * rhs`` with NumPy broadcasting."""
    return make_node("mul", _operands(lhs, rhs), {})


def neg(input: Value) -> Value:
    """Elementwise ``-x``."""
    return make_node("neg", [input], {})


def constant(array: Any, dtype: DType | str | None = None) -> Value:
    """A tensor literal (in the graph of ``with graph:``, else adopted by its first user)."""
    from gradc.ir.core import _as_array
    return make_node("constant", [], {"value": _as_array(array, dtype)})


def reduce_sum(input: Value, axes: Sequence[int] | None = None, keepdims: bool = False) -> Value:
    """Sum over ``axes`` (all when None) in canonical order."""
    return make_node("reduce_sum", [input], {"axes": axes, "keepdims": keepdims})


def reshape(input: Value, shape: Sequence[Any]) -> Value:
    """Same elements, new shape (one -1 allowed; symbols must be the input's)."""
    return make_node("reshape", [input], {"shape": shape})


def cast(input: Value, dtype: DType | str) -> Value:
    """Convert to another dtype (NumPy ``astype``)."""
    return make_node("cast", [input], {"dtype": dtype})


def identity(input: Value) -> Value:
    """A copy of ``input``."""
    return make_node("identity", [input], {})


def expand(input: Value, like: Value) -> Value:
    """``input`` broadcast to the shape of ``like``."""
    return make_node("expand", [input, like], {})


del builtins
