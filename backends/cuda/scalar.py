"""The CUDA dialect of the element-wise expressions: the C target's, with x86's NaN results.

The C target's expressions (``gradc.backends.c.scalar.SCALAR``) run on x86, whose arithmetic
propagates the first NaN operand (quieted) and makes a negative default NaN for an invalid
operation; so does the reference. An NVIDIA GPU makes its canonical NaN instead (SPEC.md §1.6
asks for the reference's bits, payloads included, from every exact op). This table replaces the
expressions whose result can be a NaN made by floating-point arithmetic -- ``add``, ``sub``,
``mul``, ``div``, ``sqrt``, ``neg``, float <-> double ``cast``, ``leaky_relu``'s product, and the
results of the transcendental functions (the C target's own double-precision step, wrapped) --
with calls of the prelude's ``x86nan.cuh`` helpers, which compute the
operation natively and select x86's NaN where the result is one. Selections (relu, clip,
maximum, where, comparisons, ...) and integer arithmetic move or compare stored values and are
the C target's own. Float16 is widened exactly, computed in float, rounded once (as in C).

``tests/test_cuda_nan.py`` checks every op of the table on NaN operands through the host
harness, which makes every NaN the GPU's canonical one (``host_gpunan.h``): an expression here
that misses a fixup fails on the CPU.
"""

from __future__ import annotations

from types import SimpleNamespace
import typing
from typing import Mapping

from gradc.ir.core import Node
from gradc.ir.types import DType

from gradc.backends.c.ctypes_map import CType, ctype, float_literal
from gradc.backends.c.scalar import SCALAR, Scalar


def _t(node: Node, i: int = 0) -> CType:
    return ctype(node.inputs[i].type.dtype)


def _sfx(t: CType) -> str:
    """The helpers' suffix of a float type's compute type."""
    return "f64" if t.dtype == DType.float64 else "f32"


def _op(t: CType, name: str, *args: str) -> str:
    """``gc_<name>_<f32|f64>(args)`` on stored values (float16 widened, the result rounded)."""
    if t.is_f16:
        return f"gc_f2h(gc_{name}_f32({', '.join(f'gc_h2f({a})' for a in args)}))"
    return f"gc_{name}_{_sfx(t)}({', '.join(args)})"


def _arith(name: str, c_version: Scalar) -> Scalar:
    def emit(node: Node, a: list[str]) -> str:
        t = _t(node)
        return _op(t, name, *a[:2 if name != "sqrt" else 1]) if t.is_float else c_version(node, a)
    return emit


def neg(node: Node, a: list[str]) -> str:
    t = _t(node)
    return f"gc_neg_{_sfx(t)}({a[0]})" if t.is_float and not t.is_f16 else SCALAR["neg"](node, a)


def to_double(t: CType, e: str) -> str:
    """A stored float value as a double, as x86 converts it (NaN payloads kept)."""
    if t.is_f16:
        return f"gc_h2d({e})"
    return e if t.dtype == DType.float64 else f"gc_f2d({e})"


def from_double(t: CType, e: str) -> str:
    """A double rounded once to the stored form of ``t``, as x86 converts it."""
    if t.is_f16:
        return f"gc_d2h({e})"
    return e if t.dtype == DType.float64 else f"gc_d2f({e})"


class _AsDouble:
    """A node seen with float64 operands and result: the C target's expression of it is then
    its step in double alone (no widening or rounding around it), whichever functions the C
    target calls for it (libm's or its own)."""

    def __init__(self, node: Node) -> None:
        f64 = SimpleNamespace(type=SimpleNamespace(dtype=DType.float64))
        self.op, self.attrs = node.op, node.attrs
        self.inputs, self.outputs = [f64] * len(node.inputs), [f64] * len(node.outputs)


def in_double(node: Node, args: list[str]) -> str:
    """The C target's expression of ``node`` evaluated in double on the double ``args``."""
    return SCALAR[node.op](typing.cast(Node, _AsDouble(node)), args)


def libm(node: Node, a: list[str]) -> str:
    """The C target's double-precision function of the (x86-widened) operand, its NaN x86's:
    the argument's own, quieted, or the default NaN (as glibc returns them), rounded once."""
    t = _t(node)
    x = to_double(t, a[0])
    return from_double(t, f"gc_nan1_f64({x}, {in_double(node, [x])})")


def leaky_relu(node: Node, a: list[str]) -> str:
    t = _t(node)
    x = f"gc_h2f({a[0]})" if t.is_f16 else a[0]
    alpha = float_literal(float(node.attrs["alpha"]), t.compute)
    scaled = f"gc_mul_{_sfx(t)}({x}, {alpha})"
    if t.is_f16:
        scaled = f"gc_f2h({scaled})"
    return f"({x} >= 0 ? {a[0]} : {scaled})"


def cast(node: Node, a: list[str]) -> str:
    src, dst = _t(node), ctype(node.outputs[0].type.dtype)
    pair = (src.dtype, dst.dtype)
    if pair == (DType.float32, DType.float64):
        return f"gc_f2d({a[0]})"
    if pair == (DType.float64, DType.float32):
        return f"gc_d2f({a[0]})"
    return SCALAR["cast"](node, a)


def gelu_grad(node: Node, a: list[str]) -> str:
    """dY times the slope: the C target's slope in double (its product with 1.0, exact), its NaN
    fixed up, rounded to the accumulation type, then one product with x86's NaN."""
    t = _t(node)
    x = to_double(t, a[0])
    d = f"gc_nan1_f64({x}, {in_double(node, [x, '1.0'])})"
    if t.dtype == DType.float64:
        return f"gc_mul_f64({a[1]}, {d})"
    product = f"gc_mul_f32({'gc_h2f(' + a[1] + ')' if t.is_f16 else a[1]}, gc_d2f({d}))"
    return f"gc_f2h({product})" if t.is_f16 else product


CUDA_SCALAR: Mapping[str, Scalar] = {
    **SCALAR,
    **{op: _arith(op, SCALAR[op]) for op in ("add", "sub", "mul", "div", "sqrt")},
    "neg": neg, "cast": cast, "leaky_relu": leaky_relu, "gelu_grad": gelu_grad,
    **{op: libm for op in ("exp", "log", "tanh", "pow", "sigmoid", "erf", "sin", "cos", "gelu")},
}
