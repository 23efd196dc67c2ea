"""The operator builders, made from each op's definition: one function per registered op.

A builder takes the op's operands, then its attributes by the schema's names and in its order
(``gradc.ir.ops.registry.Attr``); an omitted attribute (None) takes the schema's default. It
checks the arguments (``OpDef.infer``), infers the result type and appends the node to the
graph of its operands (``gradc.ir.ops.registry.make_node``: operands made without a graph, such
as a constant built outside ``with graph:``, join it with everything they are computed from,
``gradc.ir.core.adopt``); it returns the result value (a tuple for several results). ``gradc.ops``
re-exports these functions. ``constant`` is the one hand-written builder: it converts its
argument to an array first.
"""

from __future__ import annotations

import inspect
from typing import Any, Callable

import numpy as np

from gradc.ir.core import Graph, Value, as_array
from gradc.ir.ops import REGISTRY
from gradc.errors import VerifyError
from gradc.ir.ops.registry import OpDef, make_node, show_value
from gradc.ir.types import DType


def promote_scalars(lhs: Any, rhs: Any) -> list[Any]:
    """Let one operand of a binary op be a Python or NumPy number.

    The number becomes a constant of the other operand's dtype.
    """
    if isinstance(lhs, Value) and not isinstance(rhs, Value):
        rhs = constant(_scalar(rhs, lhs.type.dtype, "rhs"))
    elif isinstance(rhs, Value) and not isinstance(lhs, Value):
        lhs = constant(_scalar(lhs, rhs.type.dtype, "lhs"))
    return [lhs, rhs]


def _scalar(v: Any, dtype: DType, field: str) -> np.ndarray:
    """A number as a rank-0 array of ``dtype``: floats round to nearest (beyond the range: inf),
    integer dtypes need the exact value (no wrapping, no truncated fractions)."""
    if isinstance(v, np.ndarray) and v.ndim == 0:
        v = v.item()
    if isinstance(v, (bool, np.bool_)) and dtype != DType.bool or not isinstance(
            v, (int, float, np.number, bool, np.bool_)):
        raise VerifyError(f"{field}: expected a value or a number, got {show_value(v, repr)}")
    try:
        with np.errstate(over="ignore", invalid="ignore"):
            a = np.asarray(v, dtype=dtype.numpy)
    except (OverflowError, ValueError, TypeError):
        a = None
    if a is None or (not dtype.is_float and a.item() != v):
        raise VerifyError(f"{field}: expected a number representable as {dtype}, got "
                          f"{show_value(v, repr)}")
    return a


def _signature(d: OpDef) -> inspect.Signature:
    kind = inspect.Parameter.POSITIONAL_OR_KEYWORD
    params = [inspect.Parameter(o, kind, default=None) if o in d.optional_operands
              else inspect.Parameter(o, kind) for o in d.operands]
    for a in d.attributes:
        plain = a.default if isinstance(a.default, (bool, int, float, str)) else None
        default = inspect.Parameter.empty if a.required else plain
        params.append(inspect.Parameter(a.name, kind, default=default))
    return inspect.Signature(params)


def _sequence(d: OpDef, seq: Any) -> list[Any]:
    """The values of a variadic operand (``join([a, b], ...)``); VerifyError for a non-sequence."""
    if not isinstance(seq, (list, tuple)):
        raise VerifyError(f"{d.name}: {d.operands[0]}: expected a sequence of values, got "
                          f"{show_value(seq, lambda v: type(v).__name__)}")
    return list(seq)


def _fill_neutral(d: OpDef, operands: list[Any]) -> None:
    """An omitted ``neutral_operands`` operand before a given one becomes a constant of its
    neutral value (the first operand's dtype, shape (1,)): a node's inputs are positional."""
    first = operands[0] if operands else None
    for i, name in enumerate(d.operands[:len(operands)]):
        if operands[i] is None and name in d.neutral_operands and isinstance(first, Value):
            value = np.full((1,), d.neutral_operands[name], first.type.dtype.numpy)
            operands[i] = constant(value)


def make_builder(d: OpDef) -> Callable[..., Any]:
    """The builder of one op: its signature is the operands, then the schema's attributes."""
    signature = _signature(d)

    def build(*args: Any, **kwargs: Any) -> Any:
        bound = signature.bind(*args, **kwargs)
        bound.apply_defaults()
        operands = [bound.arguments[o] for o in d.operands]
        while operands and operands[-1] is None and d.operands[len(operands) - 1] in \
                d.optional_operands:  # an omitted optional operand: the node has no input
            operands.pop()
        if d.variadic:  # the one operand is a sequence of values: the node's inputs
            operands = _sequence(d, operands[0])
        else:
            _fill_neutral(d, operands)
        if d.promote_scalars:
            operands = promote_scalars(*operands)
        if not d.variadic:
            for name, v in zip(d.operands, operands):
                if not isinstance(v, Value):
                    got = "none" if v is None else show_value(v, lambda u: type(u).__name__)
                    raise VerifyError(f"{d.name}: {name}: expected a gradc value, got {got}")
        attrs = {a.name: bound.arguments[a.name] for a in d.attributes}
        out = make_node(d.name, operands, attrs)
        return (out,) if d.tuple_results and isinstance(out, Value) else out

    build.__name__ = build.__qualname__ = d.name
    build.__doc__ = (type(d).__doc__ or d.name).strip()
    build.__signature__ = signature  # type: ignore[attr-defined]
    return build


def constant(array: Any, dtype: DType | str | None = None, graph: Graph | None = None) -> Value:
    """A tensor literal in ``graph`` (default: the graph of ``with graph:``, else adopted by its
    first user)."""
    return make_node("constant", [], {"value": as_array(array, dtype)}, graph=graph)


BUILDERS: dict[str, Callable[..., Any]] = {
    name: make_builder(d) for name, d in sorted(REGISTRY.items()) if name != "constant"}
BUILDERS["constant"] = constant

__all__ = sorted(BUILDERS)


def __getattr__(name: str) -> Callable[..., Any]:
    """``builders.relu`` and ``from gradc.ir.builders import relu`` (PEP 562)."""
    try:
        return BUILDERS[name]
    except KeyError:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}") from None


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(BUILDERS))
