"""Fuse chains and trees of elementwise nodes of one shape into ``fused`` nodes (kind
``"elementwise"``), so a backend runs one loop instead of one per node.

    %a = relu_grad(%x, %dy) : f32[8]          %b = fused(%x, %dy, %lo) {kind = "elementwise"}
    %b = clip_grad(%lo, %a, 0.0, 6.0) : f32[8]   ->    : f32[8] graph elementwise_0(...) {...}

Nodes are visited once in topological order; a node joins the groups of the operands it reads
(and, with ``siblings``, the group of the previous reader of a full-size operand: two consumers
of one gradient then read it once) when they all have its result shape and the union stays
legal. A member value read outside the group (or returned by the graph) becomes an output of
the group, so nothing is computed twice.

Legality in linear time, by a schedule that is kept valid as groups grow: every unit (a node
outside any group, or a group) has a time, greater than the time of every unit whose value it
reads. A node outside groups gets 1 + the latest time it reads. A group's time is 1 + the
latest time of a value it reads from outside; each group also records ``escape``, the earliest
time of a unit outside it that reads one of its values. A node may join (or merge) groups only
if the joined group's new time stays below the ``escape`` of every part. So every edge of the
graph with the groups contracted goes from an earlier to a later time: no cycle, whatever the
number of groups on a would-be cycle (``check_cycles=True`` also checks the result with
``graph.to_networkx()``). The test is conservative: it may refuse a rare legal union.

Nodes that check their operands when run (``gather``, ``gather_grad``: ``raises_input_error``)
keep their relative order: each gets a time after the previous one's, as if it read it. A group
that fed a forward ``gather`` and also read a backward ``gather_grad`` would otherwise run the
``gather_grad`` first, and a bad index would be reported by the wrong node.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from gradc.ir.core import Graph, Node, Value
from gradc.ir.fused import is_elementwise
from gradc.ir.ops.registry import get_op
from gradc.passes.fusion import fuse_groups
from gradc.passes.manager import Pass, PassResult, register_pass


# The most nodes in one group. A C compiler's optimizers are superlinear in the size of one loop
# body and in the pointers live in it: with groups of 256 nodes the C of a 2,000-input gradient
# took 23 s to build and 4,000 inputs over 60 s; with 64, 13 s and 28 s (linear). Longer
# chains become several loops, one after the other.
MAX_GROUP_NODES = 64


@dataclass(eq=False)
class _Group:
    members: list[Node]
    shape: tuple
    time: int  # later than every value the group reads from outside
    escape: float = math.inf  # earliest time of an outside unit that reads the group
    merged_into: "_Group | None" = None

    def root(self) -> "_Group":
        g = self
        while g.merged_into is not None:
            g = g.merged_into
        return g


@dataclass
class _State:
    siblings: bool = True
    group_of: dict[Node, _Group] = field(default_factory=dict)
    node_time: dict[Node, int] = field(default_factory=dict)
    last_reader: dict[Value, Node] = field(default_factory=dict)

    def group(self, n: Node | None) -> _Group | None:
        g = self.group_of.get(n) if n is not None else None
        if g is None or g.merged_into is None:
            return g
        r = g.root()
        self.group_of[n] = r  # type: ignore[index]
        return r

    def time_of(self, v: Value) -> int:
        """The time of the unit that computes ``v`` (0 for graph inputs)."""
        p = v.producer
        if p is None:
            return 0
        g = self.group(p)
        return g.time if g is not None else self.node_time[p]

    def needed_time(self, n: Node, parts: list[_Group]) -> int:
        """The time of ``n`` joined with ``parts``: after everything they read from outside."""
        t = max([g.time for g in parts], default=0)
        for v in n.inputs:
            if self.group(v.producer) not in parts:
                t = max(t, self.time_of(v) + 1)
        return max(t, 1)


def _join(state: _State, n: Node) -> _Group:
    shape = n.outputs[0].type.shape
    candidates: list[_Group] = []
    for v in n.inputs:
        near = [v.producer]
        if state.siblings and v.type.shape == shape:
            near.append(state.last_reader.get(v))  # another reader of the same full-size value
        for m in near:
            g = state.group(m)
            if g is not None and g.shape == shape and g not in candidates:
                candidates.append(g)
    parts: list[_Group] = []
    size = 1
    for g in candidates:
        t = state.needed_time(n, parts + [g])
        if all(t < h.escape for h in parts + [g]) and size + len(g.members) <= MAX_GROUP_NODES:
            parts.append(g)
            size += len(g.members)
    t = state.needed_time(n, parts)
    if not parts:
        group = _Group([n], shape, t)
    else:
        group = max(parts, key=lambda g: len(g.members))
        for g in parts:
            if g is not group:
                group.members.extend(g.members)
                group.escape = min(group.escape, g.escape)
                g.merged_into = group
        group.members.append(n)
        group.time = t
    state.group_of[n] = group
    for v in n.inputs:
        state.last_reader[v] = n
    return group


def _checks(n: Node) -> bool:
    """True when ``n`` (or a node of its body) may raise an input error when run."""
    if n.body is not None:
        return any(_checks(m) for m in n.body.nodes)
    return n.op != "constant" and get_op(n.op).raises_input_error


def find_groups(graph: Graph, siblings: bool = True) -> list[list[Node]]:
    """Groups of at least two elementwise nodes, each in topological order."""
    state = _State(siblings)
    pos = {n: i for i, n in enumerate(graph.nodes)}
    last_check = 0  # the time of the latest node that checks its operands when run
    for n in graph.nodes:
        mine = _join(state, n) if is_elementwise(n) else None
        if mine is None:
            state.node_time[n] = state.needed_time(n, [])
            if _checks(n):
                # Nodes that may raise an input error keep their order (the first to fail in
                # graph order names the error on every target): each is scheduled after the
                # previous one, as if it read it, so no group can put one before another.
                state.node_time[n] = last_check = max(state.node_time[n], last_check + 1)
        t = mine.time if mine is not None else state.node_time[n]
        for v in n.inputs:
            g = state.group(v.producer)
            if g is not None and g is not mine:
                g.escape = min(g.escape, t)
    roots: dict[int, _Group] = {}
    for g in state.group_of.values():
        r = g.root()
        roots.setdefault(id(r), r)
    groups = [sorted(g.members, key=pos.__getitem__) for g in roots.values()
              if len(g.members) >= 2]
    groups.sort(key=lambda m: pos[m[-1]])
    return groups


@register_pass
@dataclass
class FuseElementwise(Pass):
    """Group elementwise nodes of one shape into fused nodes of kind ``"elementwise"``."""

    name = "fuse-elementwise"
    check_cycles: bool = False
    siblings: bool = True

    def run(self, graph: Graph) -> PassResult:
        groups = [("elementwise", m) for m in find_groups(graph, self.siblings)]
        return PassResult(*fuse_groups(graph, groups, self.check_cycles))
