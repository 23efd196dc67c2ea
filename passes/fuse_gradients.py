"""Fuse elementwise producers and consumers into the gradient operators that they feed or read.

    %g = relu_grad(%x, %dy) : f32[1,1,2,2]
    %d = max_pooling_grad(%p, %g) {...} : f32[1,1,4,4]
    %e = clip_grad(%q, %d, 0.0, 6.0) : f32[1,1,4,4]
  ->
    %e = fused(%x, %dy, %p, %q) {kind = "max_pooling_grad"} : f32[1,1,4,4] graph ... {
      %g = relu_grad(%x, %dy) ...   (prologue: computes the anchor's input_gradient)
      %d = max_pooling_grad(%p, %g) ...
      %e = clip_grad(%q, %d, ...) ...   (epilogue: consumes the anchor's result)
      return %e
    }

The anchors are the ops whose definition names an ``anchor_operand`` (``max_pooling_grad``,
``slice_grad`` and ``resample_grad``; the group's kind is the anchor's op, see
``gradc.ir.fused``). The prologue is the tree of elementwise nodes that
compute the anchor's ``input_gradient`` and whose results nothing else reads; every value it reads
from outside has the input_gradient's shape. The epilogue is the chain of elementwise nodes that
are each the only reader of the previous result, of the anchor result's shape, reading only
outside values of that shape. A value with another reader stops the growth: an anchored group
has exactly one output, so pulling it in would either lose that reader or compute it twice.

No cycle is possible: every value inside the group is read only inside it, so no path can
leave the group and come back (``check_cycles=True`` also checks the result on
``graph.to_networkx()``).
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass

from gradc.ir.core import Graph, Node, Value
from gradc.ir.fused import anchors_group, is_elementwise
from gradc.ir.ops.registry import REGISTRY
from gradc.passes.fusion import fuse_groups
from gradc.passes.manager import Pass, PassResult, register_pass



class _Graph:
    """Read-only facts about the graph being fused: positions, users, outputs, taken nodes."""

    def __init__(self, graph: Graph) -> None:
        self.pos = {n: i for i, n in enumerate(graph.nodes)}
        self.users = graph.users()
        self.outputs = set(graph.outputs)
        self.taken: set[Node] = set()

    def only_read_by(self, v: Value, group: set[Node]) -> bool:
        return v not in self.outputs and all(u in group for u in self.users.get(v, ()))

    def joinable(self, n: Node | None, shape: tuple) -> bool:
        """An untaken elementwise node whose result and operands all have ``shape``."""
        return (n is not None and n not in self.taken and is_elementwise(n)
                and n.outputs[0].type.shape == shape
                and all(v.type.shape == shape for v in n.inputs))


def prologue(anchor: Node, g: _Graph) -> list[Node]:
    """The elementwise tree computing the anchor's input_gradient (latest producers first)."""
    index = REGISTRY[anchor.op].gradient_index
    dy = anchor.inputs[index]
    shape = dy.type.shape
    # The anchor's other operands (max_pooling_grad's input) must stay body inputs.
    kept_outside = {v for i, v in enumerate(anchor.inputs) if i != index}
    group = {anchor}
    heap: list[tuple[int, int, Value]] = []
    counter = 0

    def push(v: Value) -> None:
        nonlocal counter
        if v.producer is not None:
            heapq.heappush(heap, (-g.pos[v.producer], counter, v))
            counter += 1

    push(dy)
    while heap:  # latest first, so every reader inside the group is already a member
        _, _, v = heapq.heappop(heap)
        p = v.producer
        if (p in group or v in kept_outside or not g.joinable(p, shape)
                or not g.only_read_by(v, group)):
            continue
        group.add(p)  # type: ignore[arg-type]
        for w in p.inputs:  # type: ignore[union-attr]
            push(w)
    group.discard(anchor)
    return sorted(group, key=g.pos.__getitem__)


def epilogue(anchor: Node, g: _Graph) -> list[Node]:
    """The chain of elementwise nodes that each solely read the previous result."""
    shape = anchor.outputs[0].type.shape
    chain: list[Node] = []
    r = anchor.outputs[0]
    while r not in g.outputs:
        readers = set(g.users.get(r, ()))
        if len(readers) != 1:
            break
        (e,) = readers
        if not g.joinable(e, shape):
            break
        chain.append(e)
        r = e.outputs[0]
    return chain


@register_pass
@dataclass
class FuseGradients(Pass):
    """Merge elementwise prologues and epilogues into pooling, slice and resample gradients."""

    name = "fuse-gradients"
    check_cycles: bool = False

    def run(self, graph: Graph) -> PassResult:
        g = _Graph(graph)
        anchors = [n for n in graph.nodes if anchors_group(n.op) and n.body is None]
        pro: dict[Node, list[Node]] = {}
        for a in anchors:  # prologues first: a node between two anchors feeds the later one
            pro[a] = prologue(a, g)
            g.taken.update(pro[a])
            g.taken.add(a)
        groups = []
        for a in anchors:
            epi = epilogue(a, g)
            g.taken.update(epi)
            if pro[a] or epi:
                groups.append((a.op, pro[a] + [a] + epi))
        return PassResult(*fuse_groups(graph, groups, self.check_cycles))
