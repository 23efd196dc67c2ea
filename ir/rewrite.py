"""Building a new graph from an old one: the passes never mutate their input."""

from __future__ import annotations

from typing import Iterable

from gradc.ir.core import Graph, Node, Value


def clone_node(n: Node, operands: list[Value]) -> Node:
    """A copy of ``n`` reading ``operands``, with the same result names and types."""
    m = Node(n.op, operands, n.attrs, [v.type for v in n.outputs], body=n.body, name=n.name)
    for old, new in zip(n.outputs, m.outputs):
        new.name = old.name
    return m


def rebuild(g: Graph, nodes: Iterable[Node] | None = None,
            replace: dict[Value, Value] | None = None) -> Graph:
    """A new graph with ``g``'s inputs, the given nodes (default all) cloned, and its outputs.

    ``replace`` maps old values to old values that stand in for them (applied transitively).
    """
    replace = replace or {}

    def resolve(v: Value) -> Value:
        seen = 0
        while v in replace and seen < 1000:
            v, seen = replace[v], seen + 1
        return v

    new = Graph(g.name)
    vmap: dict[Value, Value] = {}
    for v in g.inputs:
        vmap[v] = new.input(v.name, v.type.dtype, v.type.shape)
    for n in (g.nodes if nodes is None else nodes):
        m = clone_node(n, [vmap[resolve(x)] for x in n.inputs])
        new.append(m)
        vmap.update(zip(n.outputs, m.outputs))
    for v in g.outputs:
        src = vmap[resolve(v)]
        if src in new.outputs or src.producer is None or (src.name != v.name and v.name in
                                                          {x.name for x in new.values()}):
            from gradc.ir.ops.registry import make_node
            src = make_node("identity", [src], {}, graph=new)
        if src.name != v.name:
            new.rename(src, v.name)
        new.outputs.append(src)
    return new
