"""Shared machinery of the fusion passes: building a group's fused node, and the acyclicity
check on the dependence graph. The legality of a group is ``gradc.ir.fused.violations``.

A group is a set of nodes of one graph. Its fused node (``gradc.ir.fused``) reads the group's
*external inputs* (values its members read but do not compute, deduplicated, in order of first
use) and returns its *outputs* (member values read by a node outside the group or returned by
the graph), so no work is duplicated and every outside consumer still finds its value. The body
holds clones of the members, in their original order, with the original value names.
"""

from __future__ import annotations

from collections import Counter
from typing import Iterable, Sequence

from gradc.errors import GradcError
from gradc.ir.core import Graph, Node, Value
from gradc.ir.fused import make_fused
from gradc.passes.rewriter import Rewriter


def external_inputs(members: Sequence[Node]) -> list[Value]:
    """Values the members read but do not compute, in order of first use."""
    inside = {v for m in members for v in m.outputs}
    seen: dict[Value, None] = {}
    for m in members:
        for v in m.inputs:
            if v not in inside:
                seen.setdefault(v, None)
    return list(seen)


def group_outputs(members: Sequence[Node], users: dict[Value, list[Node]],
                  graph_outputs: set[Value]) -> list[Value]:
    """Member values that a node outside the group reads or that the graph returns."""
    member_set = set(members)
    return [v for m in members for v in m.outputs
            if v in graph_outputs or any(u not in member_set for u in users.get(v, ()))]


def build_body(name: str, members: Sequence[Node], inputs: Sequence[Value],
               outputs: Sequence[Value]) -> Graph:
    """A graph of clones of ``members`` reading ``inputs`` and returning ``outputs``."""
    body = Graph(name)
    vmap = {v: body.input(v.name, v.type.dtype, v.type.shape) for v in inputs}
    for m in members:
        c = Node(m.op, [vmap[v] for v in m.inputs], m.attrs, [v.type for v in m.outputs])
        for old, new in zip(m.outputs, c.outputs):
            new.name = old.name
            vmap[old] = new
        body.append(c)
    for v in outputs:
        body.output(vmap[v])
    return body


def fuse_group(rw: Rewriter, members: Sequence[Node], kind: str, name: str,
               users: dict[Value, list[Node]], graph_outputs: set[Value]) -> Node | None:
    """Replace ``members`` (in topological order) by one fused node of ``kind``.

    A group none of whose values is used is dead code: it is left alone (for ``dce``).
    """
    inputs = external_inputs(members)
    outputs = group_outputs(members, users, graph_outputs)
    if not outputs:
        return None
    body = build_body(name, members, inputs, outputs)
    node = make_fused(None, [rw.find(v) for v in inputs], body, kind)
    rw.insert(node, before=members[-1])
    for old, new in zip(outputs, node.outputs):
        rw.replace_value(old, new)
    for m in members:
        rw.erase(m)
    return node


def fuse_groups(graph: Graph, groups: Sequence[tuple[str, Sequence[Node]]],
                check_cycles: bool = False) -> tuple[Graph, bool, dict[str, int]]:
    """Replace each (kind, members) group by a fused node; returns (graph, changed, stats)."""
    if check_cycles:
        assert_acyclic(graph, [m for _, m in groups])
    rw = Rewriter(graph)
    users, outputs = graph.users(), set(graph.outputs)
    fused = nodes = 0
    count = Counter(n.attrs.get("kind") for n in graph.nodes if n.body is not None)
    for kind, members in groups:
        name = f"{kind}_{count[kind]}"  # body names stay unique within the graph
        if fuse_group(rw, members, kind, name, users, outputs) is not None:
            count[kind] += 1
            fused += 1
            nodes += len(members)
    stats = {"groups": fused, "nodes-fused": nodes}
    if not fused:
        return graph, False, stats
    return rw.finish(), True, stats


def assert_acyclic(graph: Graph, groups: Iterable[Sequence[Node]]) -> None:
    """Raise GradcError if contracting each group to one node makes the dependence graph cyclic.

    Uses ``graph.to_networkx()`` and one linear-time acyclicity test of the contracted graph
    (equivalently: no path leaves a group and comes back into it).
    """
    import networkx as nx  # lazy: 0.2 s to load; only the optional cycle check needs it

    rep: dict[Node, object] = {}
    for i, g in enumerate(groups):
        for n in g:
            rep[n] = ("group", i)
    dg = graph.to_networkx()
    contracted = nx.DiGraph()
    contracted.add_nodes_from(rep.get(n, n) for n in dg.nodes)
    for a, b in dg.edges:
        ra, rb = rep.get(a, a), rep.get(b, b)
        if ra != rb:
            contracted.add_edge(ra, rb)
    if not nx.is_directed_acyclic_graph(contracted):
        cycle = nx.find_cycle(contracted)
        raise GradcError(f"internal error: fusion would create a cycle through {cycle[0]}")
