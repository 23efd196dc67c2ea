"""Graph-level checks: definitions before uses, unique names, types and attributes as inferred."""

from __future__ import annotations

from gradc.errors import GradcError, VerifyError
import numpy as np

from gradc.ir.core import Graph, Node, Parameter
from gradc.ir.printer import fmt_node, fmt_name, fmt_type
from gradc.ir.fused import infer_fused
from gradc.ir.ops.registry import infer_node


def _context(g: Graph, index: int) -> str:
    lo, hi = max(0, index - 2), min(len(g.nodes), index + 3)
    lines = []
    for i in range(lo, hi):
        mark = ">>" if i == index else "  "
        lines.append(f"{mark} {fmt_node(g.nodes[i], '')}")
    return "\n".join(lines)


def _fail(g: Graph, index: int, msg: str) -> VerifyError:
    return VerifyError(f"{msg}\n  in graph {g.name!r}:\n{_context(g, index)}")


def _check_node(g: Graph, i: int, n: Node) -> None:

    try:
        if n.body is not None:
            verify(n.body)
            attrs, types = infer_fused(n.op, list(n.inputs), dict(n.attrs), n.body)
        else:
            _, attrs, types = infer_node(n.op, [v.type for v in n.inputs], dict(n.attrs))
    except GradcError as e:
        raise _fail(g, i, str(e)) from None
    if [v.type for v in n.outputs] != types:
        raise _fail(g, i, f"{n.op}: result type: expected "
                    f"{', '.join(map(str, types))}, got "
                    f"{', '.join(str(v.type) for v in n.outputs)}")
    if set(attrs) != set(n.attrs):
        raise _fail(g, i, f"{n.op}: attributes: expected {sorted(attrs)}, got {sorted(n.attrs)}")


def _check_parameter(g: Graph, p: Parameter) -> None:
    a = p.value
    if a is None:
        return  # parsed without values: each call passes one
    if (not isinstance(a, np.ndarray) or a.dtype != p.type.dtype.numpy
            or a.shape != p.type.shape):
        got = (f"{a.dtype}{list(a.shape)}" if isinstance(a, np.ndarray)
               else type(a).__name__)
        raise VerifyError(f"graph {g.name!r}: parameter {fmt_name(p.name)}: value: expected an "
                          f"array of type {fmt_type(p.type)}, got {got}")


def verify(g: Graph) -> Graph:
    """Raise ``VerifyError`` (with the IR around the bad node) unless the graph is well formed."""
    if not isinstance(g, Graph):
        raise VerifyError(f"verify: graph: expected a gradc.Graph, got {type(g).__name__}")
    defined: set[int] = set()
    names: set[str] = set()
    for v in list(g.inputs) + list(g.parameters):
        if v.name in names:
            raise VerifyError(f"graph {g.name!r}: value {fmt_name(v.name)} is defined twice")
        names.add(v.name)
        defined.add(id(v))
    for p in g.parameters:
        _check_parameter(g, p)
    for i, n in enumerate(g.nodes):
        for v in n.inputs:
            if id(v) not in defined:
                raise _fail(g, i, f"{n.op}: operand {fmt_name(v.name)}: expected a value "
                            "defined earlier in the graph, got an undefined value")
        _check_node(g, i, n)
        for v in n.outputs:
            if v.name in names:
                raise _fail(g, i, f"{n.op}: value {fmt_name(v.name)} is defined twice")
            if v.producer is not n or v.graph is not g:
                raise _fail(g, i, f"{n.op}: result {fmt_name(v.name)} is not owned by its node")
            names.add(v.name)
            defined.add(id(v))
    for v in g.outputs:
        if id(v) not in defined:
            raise VerifyError(f"graph {g.name!r}: output {fmt_name(v.name)}: expected a value "
                              "defined in the graph, got an undefined value")
    return g
