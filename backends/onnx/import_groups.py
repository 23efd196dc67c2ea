"""Raise the unedited groups of a gradc export back into their gradc nodes (``format``).

A model that gradc wrote and someone edited no longer matches the digest of its embedded IR, so
it is imported node by node. Most of gradc's lowerings are plain ONNX that imports op by op, but
some only make sense as a whole (``ScatterElements``, ``ArgMax``, ``BitShift``, ``If``, ...: ops
that gradc does not import as model ops). Before anything else, the importer looks for the tags
that the exporter put on each group's first node and replaces every group that is still as
written (its digest matches, nothing outside it reads its intermediate values) by one
``RaisedNode``, which builds the tagged gradc node from its operands. A group that was edited
stays as ONNX nodes: they import one by one, and a node that does not import names the gradc
node its group came from.
"""

from __future__ import annotations

from typing import Any, Sequence

from onnx import NodeProto, helper

from gradc.errors import GradcError, UnsupportedError
from gradc.ir.core import Graph
from gradc.ir.ops.registry import make_node
from gradc.ir.parser import parse_text
from gradc.backends.onnx.format import (
    GroupTag, group_digest, members_by_scope, producers_of, read_tag, reads,
)
from gradc.backends.onnx.import_node import Context, OnnxNode, Produced


class RaisedNode(OnnxNode):
    """An intact group of a gradc export, standing for the gradc node it was lowered from."""

    def __init__(self, tag: GroupTag, graph: Graph, index: int) -> None:
        super().__init__(helper.make_node("GradcNode", list(tag.operands), list(tag.results),
                                          name=tag.scope), index)
        self.tag = tag
        self.graph = graph
        self.gradc_op = graph.nodes[0].op
        self.op = f"gradc.{self.gradc_op}"
        self.where = f"gradc {self.gradc_op} node {tag.scope!r}"


def raise_groups(nodes: Sequence[OnnxNode], proto: Any, opset: int
                 ) -> tuple[list[OnnxNode], dict[str, str]]:
    """The node list with each intact tagged group replaced by a ``RaisedNode`` (indices
    renumbered), and for each node of an edited group the note its refusal should carry."""
    tagged = [(n, read_tag(n.proto)) for n in nodes]
    tags = [(n, t) for n, t in tagged if t is not None]
    if not tags:
        return list(nodes), {}
    protos = [n.proto for n in nodes]
    members = members_by_scope(protos, [t.scope for _, t in tags])
    initializers = {t.name: t for t in proto.initializer}
    producers = producers_of(protos)
    readers: dict[str, set[int]] = {}
    for i, p in enumerate(protos):
        for name in reads(p):
            readers.setdefault(name, set()).add(i)
    outputs = {o.name for o in proto.output}
    position = {id(p): i for i, p in enumerate(protos)}
    raised: dict[int, tuple[GroupTag, Graph]] = {}  # first member's position -> the node
    removed: set[int] = set()
    notes: dict[str, str] = {}
    for n, tag in tags:
        group = members.get(tag.scope, [])
        where = [position[id(p)] for p in group]
        try:
            graph = _one_node(tag)
            reason = _broken(tag, n.proto, group, where, removed, initializers, producers,
                             readers, outputs, opset)
        except GradcError as e:
            graph, reason = None, f"its tag does not read ({e})"
        if reason is None and graph is not None:
            raised[where[0]] = (tag, graph)
            removed.update(where)
            continue
        op = graph.nodes[0].op if graph is not None else "?"
        for p in group:
            notes[p.name] = (f"part of the ONNX lowering of gradc {op} node {tag.scope!r}, which "
                             f"was edited since gradc wrote it ({reason}), so gradc imports its "
                             "ONNX nodes one by one")
    out: list[OnnxNode] = []
    for i, n in enumerate(nodes):
        if i in raised:
            out.append(RaisedNode(*raised[i], len(out)))
        elif i not in removed:
            out.append(OnnxNode(n.proto, len(out)))
    return out, notes


def _one_node(tag: GroupTag) -> Graph:
    g = parse_text(tag.node)
    if len(g.nodes) != 1 or g.nodes[0].body is not None or g.parameters:
        raise UnsupportedError("expected one gradc node")
    return g


def _broken(tag: GroupTag, first: NodeProto, group: list[NodeProto], where: list[int],
            taken: set[int], initializers: Any, producers: Any, readers: dict[str, set[int]],
            outputs: set[str], opset: int) -> str | None:
    """Why the group cannot be raised (None: it is intact)."""
    if not group or group[0] is not first:
        return "its tag is not on its first node"
    if taken.intersection(where):
        return "its nodes are claimed by another group"
    digest = group_digest(tag.scope, tag.node, tag.operands, tag.results, group, initializers,
                          producers, opset)
    if digest != tag.sha256:
        return "its digest no longer matches"
    written = {o for p in group for o in p.output if o}
    if not set(tag.results) <= written:
        return "a result is no longer written by it"
    inside = set(where)
    for name in written - set(tag.results):
        if name in outputs or readers.get(name, set()) - inside:
            return f"its intermediate value {name!r} is read outside it"
    return None


def build_raised(n: RaisedNode, ctx: Context) -> list[Produced]:
    """The gradc node of an intact group, on the operands the importer has for it."""
    want = n.graph.inputs
    args = [ctx.value(n, i, f"operand {i}") for i in range(len(n.inputs))]
    for i, (v, w) in enumerate(zip(args, want)):
        if v.type != w.type:
            raise UnsupportedError(f"operand {i} ({n.inputs[i]!r}) is {v.type}, but the node "
                                   f"was exported for {w.type} (its producer was edited; "
                                   "export the model again from its source)")
    node = n.graph.nodes[0]
    out = make_node(node.op, args, dict(node.attrs), graph=ctx.graph)
    return list(out) if isinstance(out, tuple) else [out]


__all__ = ["RaisedNode", "raise_groups", "build_raised"]
