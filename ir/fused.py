"""Fused nodes: ``op == "fused"`` with a body graph whose inputs and outputs match the node's.

    %3 = fused(%x, %dy) {kind = "elementwise"} : f32[8] graph fused_0(%a: f32[8], %b: f32[8]) {
      %c = relu_grad(%a, %b) : f32[8]
      return %c
    }
The body obeys every rule of a graph; the node's operands feed the body's inputs in order and
the body's outputs are the node's results. The one attribute, ``kind``, names the fusion pattern.
``violations`` is the one legality check of a group, used by the fusion passes' tests and by
every backend that emits a group as one kernel (dims compared as written, or through a backend's
knowledge of bound symbols):

- ``"elementwise"``: every body node has the ``elementwise`` trait; every body output has the
  group's shape (the first output's), and every body value has that shape or broadcasts to it.
  Backends emit one loop over the group's shape.
- an *anchored* group, whose kind names an op that anchors one (``OpDef.anchor_operand`` is
  set: ``max_pooling_grad``, ``slice_grad``, ``resample_grad``): exactly one body node is that
  op (the anchor) and the body has exactly one output. The other body nodes are elementwise
  and form a *prologue* (the values reached back from the anchor's gradient operand, up to body
  inputs; each broadcasts to that operand's shape, and none is the anchor's result) and/or an
  *epilogue* (the values reached back from the output, up to body inputs and the anchor's
  result; each broadcasts to the result's shape). The anchor's other operands (max_pooling_grad's
  ``input``) are body inputs, and the output has the anchor result's shape.

Any other kind is valid IR but backends run its body node by node.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol, Sequence

from gradc.errors import VerifyError
from gradc.ir.core import Graph, Node, Value
from gradc.ir.ops.registry import REGISTRY
from gradc.ir.types import Dim, TensorType

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


# -- the legality of a group -------------------------------------------------------------------
class DimRelation(Protocol):
    """How a backend compares dims: equal as written, or also through bound symbols."""

    def same(self, a: Dim, b: Dim) -> bool:
        """True when two dims are known to be equal."""
        ...

    def static(self, d: Dim) -> int | None:
        """The value of a dim when known at compile time."""
        ...


class AsWritten:
    """Dims are equal when written alike; only ints are known."""

    def same(self, a: Dim, b: Dim) -> bool:
        """True when written alike."""
        return a == b

    def static(self, d: Dim) -> int | None:
        """The int, or None for a symbol."""
        return None if isinstance(d, str) else int(d)


AS_WRITTEN = AsWritten()


def same_shape(a: Sequence[Dim], b: Sequence[Dim], dims: DimRelation = AS_WRITTEN) -> bool:
    """True when two shapes are equal dim by dim."""
    return len(a) == len(b) and all(dims.same(x, y) for x, y in zip(a, b))


def broadcasts(shape: Sequence[Dim], to: Sequence[Dim], dims: DimRelation = AS_WRITTEN) -> bool:
    """True when ``shape`` broadcasts to ``to`` (NumPy rules, dims compared by ``dims``)."""
    if len(shape) > len(to):
        return False
    padded = (1,) * (len(to) - len(shape)) + tuple(shape)
    return all(dims.same(a, b) or dims.static(a) == 1 for a, b in zip(padded, to))


def is_elementwise(n: Node) -> bool:
    """True for a single-result node of an op with the ``elementwise`` trait (no body)."""
    d = REGISTRY.get(n.op)
    return (n.body is None and d is not None and "elementwise" in d.traits
            and len(n.outputs) == 1)


def value_operands(n: Node) -> list[Value]:
    """The operands whose elements a node reads (not those that only give a shape)."""
    d = REGISTRY.get(n.op)
    return list(n.inputs) if d is None else d.value_operands(n)


def anchors_group(kind: object) -> bool:
    """True when a group kind names an op that anchors fused groups."""
    d = REGISTRY.get(kind) if isinstance(kind, str) else None
    return d is not None and d.anchors


@dataclass(frozen=True)
class Anchored:
    """The parts of a legal anchored group's body."""

    anchor: Node
    gradient: Value  # the anchor's operand that the prologue computes
    prologue: list[Value]  # reached back from ``gradient`` up to body inputs
    epilogue: list[Value]  # reached back from the output up to inputs and the anchor result
    output: Value


def anchored_parts(body: Graph, kind: str) -> Anchored | str:
    """The parts of an anchored body, or why it has none (no single anchor, not one output)."""
    found = [n for n in body.nodes if n.op == kind]
    if len(found) != 1:
        return f"expected one {kind} node, got {len(found)}"
    if len(body.outputs) != 1:
        return f"expected one output, got {len(body.outputs)}"
    a = found[0]
    gradient = a.inputs[REGISTRY[kind].gradient_index]
    inputs = set(body.inputs)
    prologue = _reached([gradient], inputs)
    epilogue = _reached([body.outputs[0]], inputs | {a.outputs[0]})
    return Anchored(a, gradient, prologue, epilogue, body.outputs[0])


def _reached(roots: list[Value], stop: set[Value]) -> list[Value]:
    """Values reached back from ``roots`` through the operands that are read, up to ``stop``."""
    seen: dict[Value, None] = {}
    todo = list(roots)
    while todo:
        v = todo.pop()
        if v in seen:
            continue
        seen[v] = None
        if v not in stop and v.producer is not None:
            todo.extend(value_operands(v.producer))
    return list(seen)


def violations(node: Node, dims: DimRelation = AS_WRITTEN) -> list[str]:
    """Every way a fused node breaks the rules of its kind (module docstring); empty: none."""
    body, kind = node.body, node.attrs.get("kind")
    if body is None:
        return ["not a fused node"]
    if kind == "elementwise":
        return _elementwise_violations(body, dims)
    if anchors_group(kind):
        return _anchored_violations(body, str(kind), dims)
    return []


def _elementwise_violations(body: Graph, dims: DimRelation) -> list[str]:
    out = [f"{n.op} is not elementwise" for n in body.nodes if not is_elementwise(n)]
    shape = body.outputs[0].type.shape
    out += [f"output %{v.name} has shape {v.type.shape}, not {shape}" for v in body.outputs
            if not same_shape(v.type.shape, shape, dims)]
    out += [f"%{v.name} does not broadcast to {shape}" for v in body.values()
            if not broadcasts(v.type.shape, shape, dims)]
    return out


def _anchored_violations(body: Graph, kind: str, dims: DimRelation) -> list[str]:
    parts = anchored_parts(body, kind)
    if isinstance(parts, str):
        return [parts]
    a = parts.anchor
    out = [f"{n.op} is not elementwise" for n in body.nodes if n is not a and not is_elementwise(n)]
    inputs = set(body.inputs)
    out += [f"the anchor's operand %{v.name} is not a body input" for v in a.inputs
            if v is not parts.gradient and v not in inputs]
    result, want = a.outputs[0], parts.gradient.type.shape
    if result in parts.prologue:
        out.append("the prologue reads the anchor's result")
    out += [f"prologue value %{v.name} of shape {v.type.shape} does not broadcast to {want}"
            for v in parts.prologue if not broadcasts(v.type.shape, want, dims)]
    out += [f"epilogue reads %{v.name}, another result of the anchor" for v in parts.epilogue
            if v.producer is a and v is not result]
    out += [f"epilogue value %{v.name} of shape {v.type.shape} does not broadcast to "
            f"{result.type.shape}" for v in parts.epilogue
            if not broadcasts(v.type.shape, result.type.shape, dims)]
    if not same_shape(parts.output.type.shape, result.type.shape, dims):
        out.append(f"the output's shape {parts.output.type.shape} is not the anchor result's "
                   f"{result.type.shape}")
    return out
