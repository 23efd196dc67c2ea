"""Building a new graph from an old one: the passes never change their input graph.

``rebuild_graph`` is the one rebuild helper: the rewriter finishes with it, and dead-code
elimination and CSE call it directly.
"""

from __future__ import annotations

from typing import Any, Iterable, Iterator, Mapping

from gradc.ir.core import Graph, Node, Value


def rebuild_graph(g: Graph, nodes: Iterable[Node], find: Any = None,
         preferred: Mapping[Value, str] | None = None) -> Graph:
    """A new graph with ``g``'s inputs, clones of ``nodes`` (operands through ``find``), outputs.

    Nodes keep their result names; a result without a name takes its ``preferred`` name when
    no live value has it, else a fresh number that no value of ``g`` had.
    """
    find = find or (lambda v: v)
    preferred = preferred or {}
    nodes = list(nodes)
    sources = list(g.inputs) + list(g.parameters)
    every = {v.name for v in sources} | {v.name for n in g.nodes for v in n.outputs}
    claimed = {v.name for v in sources} | {v.name for n in nodes for v in n.outputs if v.name}
    fresh = _fresh_names(every | claimed)
    new = Graph(g.name)
    vmap: dict[Value, Value] = {v: new.input(v.name, v.type.dtype, v.type.shape) for v in g.inputs}
    for p in g.parameters:
        vmap[p] = new.add_parameter(p.name, p.value, p.type)
    for n in nodes:
        m = Node(n.op, [vmap[find(x)] for x in n.inputs], n.attrs,
                 [v.type for v in n.outputs], body=n.body, name=n.name)
        for old, v in zip(n.outputs, m.outputs):
            name = old.name
            if not name:
                name = preferred.get(old, "")
                if not name or name in claimed:
                    name = next(fresh)
                claimed.add(name)
            v.name = name
            vmap[old] = v
        new.append(m)
    _rebuild_outputs(g, new, vmap, find)
    return new


def _rebuild_outputs(g: Graph, new: Graph, vmap: dict[Value, Value], find: Any) -> None:
    """Append the outputs of ``g`` under their names, adding identities only where needed."""
    originals = set(g.outputs)
    done: set[Value] = set()
    for v in g.outputs:
        r = find(v)
        src = vmap[r]
        if src.producer is None or src in done or (r is not v and r in originals):
            src = new.identity(src)
        new.rename(src, v.name)
        done.add(src)
        new.add_output(src)


def _fresh_names(taken: set[str]) -> Iterator[str]:
    i = 0
    while True:
        if str(i) not in taken:
            taken.add(str(i))
            yield str(i)
        i += 1
