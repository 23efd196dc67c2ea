"""Scalar C expressions of the elementwise ops, and the generator that chains them per element.

Every expression works on stored forms (``CType.store``; float16 as its bit pattern). Selections
(relu, relu_grad, clip, clip_grad, identity, expand, neg of a float16) move stored values, so they
are bit-exact; arithmetic widens float16 to float32 and rounds once when it stores the result.
Integer arithmetic is done in an unsigned type of at least 32 bits, so overflow wraps (no UB).
"""

from __future__ import annotations

from typing import Callable, Mapping

from gradc.errors import UnsupportedError
from gradc.ir.core import Node, Value
from gradc.ir.fused import value_operands
from gradc.ir.types import DType

from gradc.backends.c.ctypes_map import CType, compute_literal, ctype, literal
from gradc.backends.c.elementwise_math import MATH_SCALAR
from gradc.backends.c.activation import ACTIVATION_SCALAR

Scalar = Callable[[Node, list[str]], str]


def widen(t: CType, e: str) -> str:
    """The compute-type value of a stored value (float16 bits -> float)."""
    return f"gc_h2f({e})" if t.is_f16 else e


def narrow(t: CType, e: str) -> str:
    """The stored form of a compute-type value (float -> float16 bits, rounding once)."""
    return f"gc_f2h({e})" if t.is_f16 else e


def wrap(t: CType, e: str) -> str:
    """An unsigned arithmetic result wrapped into integer type ``t``."""
    if t.signed:
        return f"gc_wrap_i{t.width}((uint64_t)({e}))"
    return f"(({t.store})({e}))"


def _t(node: Node, i: int = 0) -> CType:
    return ctype(node.inputs[i].type.dtype)


def _zero(t: CType) -> str:
    return literal(0, t.dtype)


def _bound(t: CType, v: float | int) -> str:
    return compute_literal(v, t.dtype) if t.is_float else literal(v, t.dtype)


def relu(node: Node, a: list[str]) -> str:
    t = _t(node)
    return f"({widen(t, a[0])} > 0 ? {a[0]} : {_zero(t)})"


def relu_grad(node: Node, a: list[str]) -> str:
    t = _t(node)
    return f"({widen(t, a[0])} > 0 ? {a[1]} : {_zero(t)})"


def clip(node: Node, a: list[str]) -> str:
    t = _t(node)
    mn, mx = node.attrs["min"], node.attrs["max"]
    x = widen(t, a[0])
    lo, hi = _bound(t, mn), _bound(t, mx)
    # t = x > max ? max : x; y = t < min ? min : t  (compared in compute type, stored bits moved)
    tc = f"({x} > {hi} ? {hi} : {x})"
    ts = f"({x} > {hi} ? {literal(mx, t.dtype)} : {a[0]})"
    y = f"({tc} < {lo} ? {literal(mn, t.dtype)} : {ts})"
    if t.is_float:
        nan = literal(mx if mn <= mx else mn, t.dtype)
        y = f"({x} != {x} ? {nan} : {y})"
    return y


def clip_grad(node: Node, a: list[str]) -> str:
    t = _t(node)
    x = widen(t, a[0])
    lo, hi = _bound(t, node.attrs["min"]), _bound(t, node.attrs["max"])
    # `|` of the two comparisons, not `||`: GCC 12 at -O3 with AVX2/AVX-512 miscompiled the
    # short-circuit form inside a vectorized loop nest (gradient zeroed where it passes;
    # tests/test_c_target.py::test_clip_grad_condition_vectorizes_correctly)
    return f"((({x} <= {lo}) | ({x} >= {hi})) ? {_zero(t)} : {a[1]})"


def _binary(op: str) -> Scalar:
    def emit(node: Node, a: list[str]) -> str:
        t = _t(node)
        if t.is_f16:
            return f"gc_f2h(gc_h2f({a[0]}) {op} gc_h2f({a[1]}))"
        if t.is_float:
            return f"({a[0]} {op} {a[1]})"
        u = t.uarith
        return wrap(t, f"({u}){a[0]} {op} ({u}){a[1]}")
    return emit


def neg(node: Node, a: list[str]) -> str:
    t = _t(node)
    if t.is_f16:
        return f"((uint16_t)({a[0]} ^ 0x8000u))"
    if t.is_float:
        return f"(-{a[0]})"
    return wrap(t, f"({t.uarith})0 - ({t.uarith}){a[0]}")


def identity(node: Node, a: list[str]) -> str:
    return a[0]


def cast(node: Node, a: list[str]) -> str:
    return cast_expr(_t(node), ctype(node.outputs[0].type.dtype), a[0])


def cast_expr(src: CType, dst: CType, e: str) -> str:
    """NumPy ``astype`` from ``src`` to ``dst`` of a stored value (see prelude.h for float->int)."""
    if src.dtype == dst.dtype:
        return e
    if dst.dtype == DType.bool:
        if src.is_f16:
            return f"((uint8_t)((({e}) & 0x7fffu) != 0))"
        return f"((uint8_t)(({e}) != 0))"
    if src.dtype == DType.bool:
        return literal_select(dst, e)
    if dst.is_float:
        if src.is_f16:
            return f"gc_h2d({e})" if dst.dtype == DType.float64 else f"gc_h2f({e})"
        if dst.is_f16:
            return f"gc_d2h((double)({e}))" if src.dtype == DType.float64 else \
                f"gc_f2h((float)({e}))"
        return f"(({dst.store})({e}))"
    if src.is_float:
        return _float_to_int(dst, f"(double){widen(src, e)}")
    if not dst.signed:
        return f"(({dst.store})({e}))"
    return f"gc_wrap_i{dst.width}((uint64_t)({e}))"


def literal_select(dst: CType, e: str) -> str:
    """A bool (0/1) converted to ``dst``."""
    return f"(({e}) ? {literal(1, dst.dtype)} : {literal(0, dst.dtype)})"


def _float_to_int(dst: CType, d: str) -> str:
    if dst.dtype == DType.int64:
        return f"gc_cvt64({d})"
    if dst.dtype == DType.uint64:
        return f"gc_f2u64({d})"
    if dst.dtype == DType.uint32:
        return f"gc_f2u32({d})"
    if dst.signed:
        return f"gc_wrap_i{dst.width}((uint64_t)(uint32_t)gc_cvt32({d}))"
    return f"(({dst.store})(uint32_t)gc_cvt32({d}))"


SCALAR: dict[str, Scalar] = {
    "relu": relu, "relu_grad": relu_grad, "clip": clip, "clip_grad": clip_grad,
    "add": _binary("+"), "sub": _binary("-"), "mul": _binary("*"), "neg": neg,
    "identity": identity, "expand": identity, "cast": cast,
    **MATH_SCALAR,  # -- math (SPEC-training §16)
    **ACTIVATION_SCALAR,  # -- activation (SPEC-transformers §25)
}


class ExprGen:
    """Emits one C statement per value needed at one element: loads, then op expressions.

    ``loads`` maps values read from memory to ``(pointer, offset function)``; ``fixed`` maps
    values already held in a C variable (an anchor's result) to that variable. The pointers that
    a load is emitted from are added to ``read`` (a kernel's record of the parameters it uses).
    ``table`` is the dialect's expressions (``SCALAR``, the C target's, when None).
    """

    def __init__(self, loads: dict[Value, tuple[str, Callable[[Value], str]]],
                 fixed: dict[Value, str] | None = None, prefix: str = "t",
                 read: set[str] | None = None,
                 table: Mapping[str, Scalar] | None = None) -> None:
        self.table = SCALAR if table is None else table
        self.loads = loads
        self.fixed = dict(fixed or {})
        self.prefix = prefix
        self.read = read if read is not None else set()
        self.lines: list[str] = []
        self.names: dict[Value, str] = {}

    def get(self, v: Value) -> str:
        """The C variable holding ``v`` at the current element (emitting what it needs).

        Operands are emitted before their users, depth first in operand order, with an explicit
        stack: a fused chain of any length needs no Python recursion.
        """
        stack: list[tuple[Value, bool]] = [(v, False)]
        while stack:
            u, ready = stack.pop()
            if u in self.fixed or u in self.names:
                continue
            if u in self.loads:
                ptr, offset = self.loads[u]
                self.read.add(ptr)
                self._emit(u, f"{ptr}[{offset(u)}]")
                continue
            node = u.producer
            if node is None or node.op not in self.table:
                raise UnsupportedError(f"c target: {node.op if node else 'input'}: expected an "
                                       "elementwise op inside an elementwise loop")
            if not ready:
                stack.append((u, True))
                stack.extend((x, False) for x in reversed(value_operands(node)))
                continue
            args = {id(x): self.fixed.get(x) or self.names[x] for x in value_operands(node)}
            self._emit(u, self.table[node.op](node, [args.get(id(x), "0") for x in node.inputs]))
        return self.fixed.get(v) or self.names[v]

    def _emit(self, v: Value, expr: str) -> None:
        name = f"{self.prefix}{len(self.names)}"
        self.names[v] = name
        self.lines.append(f"const {ctype(v.type.dtype).store} {name} = {expr};")


def needed_inputs(outputs: list[Value], stop: set[Value]) -> list[Value]:
    """Values in ``stop`` (or without producer) reached from ``outputs`` through used operands,
    in depth-first order (an explicit stack: no recursion limit on the length of a chain)."""
    seen: set[int] = set()
    found: list[Value] = []
    stack = list(reversed(outputs))
    while stack:
        v = stack.pop()
        if id(v) in seen:
            continue
        seen.add(id(v))
        if v in stop or v.producer is None:
            found.append(v)
            continue
        stack.extend(reversed(value_operands(v.producer)))
    return found
