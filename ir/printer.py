"""The deterministic text form of a graph (parsed back exactly by ``gradc.ir.parser``).

  graph pool_step(%x: f32[N,64,56,56], %dy: f32[N,64,28,28]) {
    param %w: f32[64]
    %dx = max_pooling_grad(%x, %dy) {window_size = [2, 2], strides = [2, 2], ...} : f32[N,64,56,56]
    return %dx
  }

Names that are not plain identifiers are written as JSON strings (``%"a b"``); attribute values
are ints, floats (the shortest text that gives the stored value back), strings, ``true``/``false``,
dtype names, lists, and ``array<f32[2]: [1.0, 2.0]>`` literals (raw bytes as ``hex "..."`` when
the values would not print exactly, e.g. NaN payloads).

A parameter prints as ``param %name: type`` before the nodes, never with its value (a model's
weights would be megabytes of text): ``gradc.parse(text, parameters={name: array})`` supplies them.
"""

from __future__ import annotations

import json
import re
from typing import TYPE_CHECKING, Any

import numpy as np

from gradc.ir.types import DType, TensorType

if TYPE_CHECKING:  # the printer reads graphs; the graph prints itself through it
    from gradc.ir.core import Graph, Node, Value

_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_.]*\Z")
_VALUE_NAME = re.compile(r"([A-Za-z_][A-Za-z0-9_.]*|[0-9]+)\Z")
INLINE_ARRAY_LIMIT = 256


def fmt_name(name: str) -> str:
    """A value reference: ``%x``, ``%3`` or ``%"any text"``."""
    return "%" + (name if _VALUE_NAME.match(name) else json.dumps(name))


def fmt_ident(name: str) -> str:
    """A graph name or symbol: a bare identifier when possible, else a JSON string."""
    return name if _IDENT.match(name) and name not in _RESERVED else json.dumps(name)


_RESERVED = frozenset({"true", "false", "inf", "nan", "graph", "return", "array", "hex"}
                      | {d.short for d in DType})


def fmt_type(t: TensorType) -> str:
    """``f32[N,64,3]``."""
    dims = ",".join(fmt_ident(d) if isinstance(d, str) else str(d) for d in t.shape)
    return f"{t.dtype.short}[{dims}]"


def fmt_float(v: float, dtype: np.dtype | type[np.floating] = np.dtype(np.float64)) -> str:
    """The shortest text that parses back to the same value of ``dtype``."""
    return str(np.dtype(dtype).type(v))


def fmt_attr(v: Any) -> str:
    """One attribute value."""
    if isinstance(v, (bool, np.bool_)):
        return "true" if v else "false"
    if isinstance(v, (int, np.integer)):
        return str(int(v))
    if isinstance(v, float):
        # The parser reads a float attribute as a Python float: the float32 spelling is used
        # only where it reads back as exactly v (-2147483648.0 is a float32, but "-2.1474836e+09"
        # is not it).
        with np.errstate(over="ignore"):  # 1e300 is no float32: it prints as inf, not used
            short = fmt_float(v, np.float32)
        return short if float(short) == v else fmt_float(v)
    if isinstance(v, str):
        return json.dumps(v)
    if isinstance(v, DType):
        return v.short
    if isinstance(v, np.ndarray):
        return fmt_array(v)
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(fmt_attr(x) for x in v) + "]"
    raise TypeError(f"cannot print attribute value {v!r}")


def fmt_array(a: np.ndarray) -> str:
    """An array literal with its type."""
    t = fmt_type(TensorType(DType.of(a.dtype), a.shape))
    flat = a.reshape(-1)
    exact = a.dtype.kind != "f" or not np.isnan(flat).any()
    if exact and flat.size <= INLINE_ARRAY_LIMIT:
        if a.dtype.kind == "f":
            body = ", ".join(fmt_float(x, a.dtype) for x in flat)
        elif a.dtype.kind == "b":
            body = ", ".join("true" if x else "false" for x in flat)
        else:
            body = ", ".join(str(int(x)) for x in flat)
        return f"array<{t}: [{body}]>"
    little = np.ascontiguousarray(a).astype(a.dtype.newbyteorder("<"))
    return f'array<{t}: hex "{little.tobytes().hex()}">'


def fmt_node(n: Node, indent: str) -> str:
    """One statement."""
    outs = ", ".join(fmt_name(v.name) for v in n.outputs)
    ins = ", ".join(fmt_name(v.name) for v in n.inputs)
    attrs = ""
    if n.attrs:
        attrs = " {" + ", ".join(f"{k} = {fmt_attr(v)}" for k, v in n.attrs.items()) + "}"
    types = ", ".join(fmt_type(v.type) for v in n.outputs)
    text = f"{indent}{outs} = {n.op}({ins}){attrs} : {types}"
    if n.body is not None:
        text += " " + print_graph(n.body, indent).lstrip()
    return text


def print_graph(g: Graph, indent: str = "") -> str:
    """The whole graph as text (no trailing newline)."""
    params = ", ".join(f"{fmt_name(v.name)}: {fmt_type(v.type)}" for v in g.inputs)
    lines = [f"{indent}graph {fmt_ident(g.name)}({params}) {{"]
    lines += [f"{indent}  param {fmt_name(p.name)}: {fmt_type(p.type)}" for p in g.parameters]
    lines += [fmt_node(n, indent + "  ") for n in g.nodes]
    lines.append(f"{indent}  return " + ", ".join(fmt_name(v.name) for v in g.outputs))
    lines.append(f"{indent}}}")
    return "\n".join(lines)


def value_label(v: Value) -> str:
    """``%name: type`` for messages."""
    return f"{fmt_name(v.name)}: {fmt_type(v.type)}"
