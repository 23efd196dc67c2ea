"""Reverse-mode differentiation: a forward graph in, its vector-Jacobian-product graph out.

The result has the forward inputs followed by one cotangent input
``grad_<output>`` per floating-point forward output (except state updates named
``<parameter>.next``, ``gradc.ir.state``), the forward parameters, and the forward
outputs followed by ``grad_<name>`` for each input or parameter in ``wrt``. It is built from
each operator's ``vjp`` rule, so the graph can be printed, optimized, exported and compiled like
any other.

Names (``grad_names``, the one place that makes them): ``grad_<name>`` when no value of the
graph has that name; otherwise the first of ``grad_<name>_1``, ``grad_<name>_2``, ... that is
free. Names are given in order, the cotangent inputs (in output order) first, then the
gradient outputs (in ``wrt`` order), and a name given earlier counts as taken. So a graph that
already has values named ``grad_*`` (a training graph differentiated again) differentiates;
whoever needs the names (``gradc check --grad``, ``training_step``) asks ``grad_names``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Sequence

import numpy as np

from gradc.errors import VerifyError
from gradc.ir.core import Graph, Value
from gradc.ir.ops.registry import get_op, make_node
from gradc.ir.state import state_outputs
from gradc.ir.verify import verify


WRT_KEYWORDS = ("inputs", "parameters", "all")


def _wrt(graph: Graph, wrt: str | Sequence[str] | None) -> list[Value]:
    """The values to differentiate with respect to, for ``wrt`` as ``gradc.grad`` takes it."""
    floats = [v for v in graph.inputs if v.type.dtype.is_float]
    params: list[Value] = [p for p in graph.parameters if p.type.dtype.is_float]
    if wrt is None or wrt == "inputs":
        return floats
    if wrt == "parameters":
        return params
    if wrt == "all":
        return floats + params
    if isinstance(wrt, str):
        wrt = [wrt]
    if not isinstance(wrt, Sequence) or not all(isinstance(n, str) for n in wrt):
        raise VerifyError(f"grad: wrt: expected 'inputs', 'parameters', 'all' or a list of "
                          f"names, got {wrt!r}")
    by_name: dict[str, Value] = {v.name: v for v in graph.inputs}
    by_name.update((p.name, p) for p in graph.parameters)
    out: list[Value] = []
    for name in wrt:
        if name not in by_name:
            raise VerifyError(f"grad: wrt: expected names of inputs or parameters of "
                              f"{graph.name!r} ({', '.join(by_name) or 'none'}), got {name!r}")
        v = by_name[name]
        if not v.type.dtype.is_float:
            raise VerifyError(f"grad: wrt: expected a floating-point input or parameter, got "
                              f"{name!r} of dtype {v.type.dtype}")
        if v in out:
            raise VerifyError(f"grad: wrt: expected each name once, got {name!r} twice")
        out.append(v)
    return out


@dataclass(frozen=True)
class GradNames:
    """The names ``grad`` gives its new values (module docstring)."""

    cotangents: Mapping[str, str]  # forward output name -> its cotangent input's name
    gradients: Mapping[str, str]  # differentiated input or parameter -> its gradient output


def grad_names(graph: Graph, wrt: str | Sequence[str] | None = None) -> GradNames:
    """The cotangent input and gradient output names of ``grad(graph, wrt)``."""
    if not isinstance(graph, Graph):
        raise VerifyError(f"grad: graph: expected a gradc.Graph, got {type(graph).__name__}")
    targets = [v.name for v in _wrt(graph, wrt)]
    taken = {v.name for v in graph.values()}

    def fresh(name: str) -> str:
        base = candidate = f"grad_{name}"
        k = 0
        while candidate in taken:
            k += 1
            candidate = f"{base}_{k}"
        taken.add(candidate)
        return candidate

    cotangents = {v.name: fresh(v.name) for v in _seeded(graph)}
    gradients = {n: fresh(n) for n in targets}
    return GradNames(cotangents, gradients)


def _seeded(graph: Graph) -> list[Value]:
    """The outputs that get a cotangent input: floating point, not a state update."""
    state = set(state_outputs(graph).values())  # `<param>.next` outputs: not differentiated
    return [v for v in graph.outputs if v.type.dtype.is_float and v not in state]


def _accumulate(cot: dict[Value, Value], v: Value, g: Value | None) -> None:
    if g is None or not v.type.dtype.is_float:
        return  # integer values carry no gradient
    if g.type != v.type:
        raise VerifyError(f"grad: internal error: cotangent {g.type} for value of type {v.type}")
    cot[v] = make_node("add", [cot[v], g], {}) if v in cot else g


def zeros_like(v: Value) -> Value:
    """A zero tensor of ``v``'s type (symbolic dims included), independent of its values."""
    zero = make_node("constant", [], {"value": np.zeros((), v.type.dtype.numpy)}, graph=v.graph)
    return make_node("expand", [zero, v], {})


def grad(graph: Graph, wrt: str | Sequence[str] | None = None) -> Graph:
    """The VJP graph of ``graph`` with respect to ``wrt`` (default: every floating input).

    ``wrt``: "inputs", "parameters", "all" or a list of input and parameter names. One
    cotangent input per floating-point output, named ``grad_<output>``, and one gradient output
    per differentiated value, named ``grad_<name>``; where the graph already has a value of
    that name, ``grad_<name>_1``, ``grad_<name>_2``, ... (the first that is free; ``grad_names``
    gives them). The result keeps the parameters.
    """
    if not isinstance(graph, Graph):
        raise VerifyError(f"grad: graph: expected a gradc.Graph, got {type(graph).__name__}")
    verify(graph)
    names = grad_names(graph, wrt)
    g = graph.copy()
    forward_nodes = len(g.nodes)
    g.name = graph.name if graph.name.endswith("_grad") else f"{graph.name}_grad"
    cot: dict[Value, Value] = {}
    for out in _seeded(g):  # integer, bool and uint32 outputs carry no gradient
        seed = g.input(names.cotangents[out.name], out.type.dtype, out.type.shape)
        _accumulate(cot, out, seed)
    for node in reversed(list(g.nodes)):
        grads = [cot.get(v) for v in node.outputs]
        if all(x is None for x in grads) or node.op == "constant":
            continue
        if node.body is not None:
            raise VerifyError("grad: fused: expected a graph without fused nodes (differentiate "
                              "before optimizing)")
        ins = get_op(node.op).vjp(node, grads)
        for v, dv in zip(node.inputs, ins):
            _accumulate(cot, v, dv)
    by_name: dict[str, Value] = {v.name: v for v in g.inputs}
    by_name.update((p.name, p) for p in g.parameters)
    for name, out_name in names.gradients.items():
        v = by_name[name]
        g.output(cot[v] if v in cot else zeros_like(v), out_name)
    _drop_unused_backward(g, forward_nodes)
    return g


def _drop_unused_backward(g: Graph, forward_nodes: int) -> None:
    """Remove backward nodes that reach no output: cotangents of constants and of inputs not in
    ``wrt`` (each vjp rule builds every operand's gradient). Forward nodes are kept as given."""
    live = set(g.outputs)
    keep = []
    for i in range(len(g.nodes) - 1, -1, -1):
        n = g.nodes[i]
        if i < forward_nodes or any(v in live for v in n.outputs):
            keep.append(n)
            live.update(n.inputs)
    g.retain(reversed(keep))
