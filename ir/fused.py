"""Fused nodes: ``op == "fused"`` with a body graph whose inputs and outputs match the node's.

    %3 = fused(%x, %dy) {kind = "elementwise"} : f32[8] graph fused_0(%a: f32[8], %b: f32[8]) {
      %c = relu_grad(%a, %b) : f32[8]
      return %c
    }
The body obeys every rule of a graph; the node's operands feed the body's inputs in order and
the body's outputs are the node's results. The one attribute, ``kind``, names the fusion pattern:

- ``"elementwise"``: every body node has the ``elementwise`` trait (relu, relu_grad, clip,
  clip_grad, add, sub, mul, neg, cast, identity, expand); every body output has the same shape,
  the group's shape, and every body input has that shape or broadcasts to it. Backends emit one
  loop over the group's shape.
- ``"max_pooling_grad"``, ``"slice_grad"``, ``"resample_grad"`` (an *anchored* group): exactly one
  body node is that gradient op (the anchor). The other body nodes are elementwise and form a
  *prologue* (they compute the anchor's ``input_gradient`` operand from body inputs of that
  shape; the anchor's ``input`` operand, for max_pooling_grad, is a body input) and/or an
  *epilogue* (they consume the anchor's result and body inputs of the result's shape). The body
  has exactly one output: the last epilogue node's result, or the anchor's result.

Any other kind is valid IR but backends may run its body node by node.
"""

from __future__ import annotations

from typing import Any, Sequence

from gradc.errors import VerifyError
from gradc.ir.core import Graph, Node, Value
from gradc.ir.types import TensorType

FUSED = "fused"


def infer_fused(op: str, args: Sequence[Value], attrs: dict[str, Any],
                body: Graph) -> tuple[dict[str, Any], list[TensorType]]:
    """Check a fused node against its body; returns (attributes, result types)."""
    if op != FUSED:
        raise VerifyError(f"{op}: body: expected no body (only {FUSED!r} nodes have one)")
    extra = sorted(set(attrs) - {"kind"})
    if extra:
        raise VerifyError(f"{op}: {extra[0]}: expected no such argument, got {attrs[extra[0]]!r}")
    kind = attrs.get("kind", "group")
    if not isinstance(kind, str) or not kind:
        raise VerifyError(f"{op}: kind: expected a non-empty string, got {kind!r}")
    if len(args) != len(body.inputs):
        raise VerifyError(f"{op}: operands: expected {len(body.inputs)} (the body's inputs), "
                          f"got {len(args)}")
    for i, (a, b) in enumerate(zip(args, body.inputs)):
        if a.type != b.type:
            raise VerifyError(f"{op}: operand {i}: expected {b.type} (body input %{b.name}), "
                              f"got {a.type}")
    if not body.outputs:
        raise VerifyError(f"{op}: body: expected at least one output, got none")
    return {"kind": kind}, [v.type for v in body.outputs]


def make_fused(graph: Graph | None, args: Sequence[Value], body: Graph,
               kind: str = "group") -> Node:
    """A fused node over ``args`` (not yet appended unless ``graph`` is given)."""
    attrs, types = infer_fused(FUSED, args, {"kind": kind}, body)
    node = Node(FUSED, args, attrs, types, body=body)
    if graph is not None:
        graph.append(node)
    return node
