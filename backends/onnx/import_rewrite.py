"""Rewrites of an ONNX model into standard nodes before the importer reads it.

Some ONNX ops are defined by other ONNX ops: ``Attention`` (opsets 23-25) by a function body
that depends on its inputs' types (SPEC-transformers §28.3), and a ``SplitToSequence`` read
only by ``SequenceAt`` at known positions (what the dynamo exporter writes for ``torch.split``
without its optimizer) is a ``Split`` or a few ``Slice`` nodes. ``prepare`` replaces such
nodes, in a copy of the model, by the nodes that define them, which the importer then takes by
its usual rules, so that every refusal and every fold applies to them too. A node that a
rewrite leaves in place (its function cannot be made, a sequence is read another way) reaches
its converter, which refuses it naming why.

A rewrite is registered per op type (``@rewrite``) and gets the node and a ``Rewriter``: the
model's value types (from its inputs, initializers and ``value_info``; ONNX shape inference
fills the gaps, only when a rewrite asks for a type the model does not state), fresh names,
the readers of each value, and a per-model scratch dict. It returns the nodes that replace the
node (possibly none), or None to keep it.
"""

from __future__ import annotations

from typing import Any, Callable

import onnx
from onnx import NodeProto, TypeProto, helper

from gradc.errors import VerifyError
from gradc.backends.onnx.format import tensor_to_array
from gradc.backends.onnx.import_node import OnnxNode
from gradc.backends.onnx.import_schema import check_node

Rewrite = Callable[[NodeProto, "Rewriter"], "list[NodeProto] | None"]
INT32 = 1 << 31
REWRITES: dict[str, Rewrite] = {}


def rewrite(*op_types: str) -> Callable[[Rewrite], Rewrite]:
    """Decorator: register a rewrite of default-domain nodes of these op types."""
    def wrap(fn: Rewrite) -> Rewrite:
        for op in op_types:
            REWRITES[op] = fn
        return fn
    return wrap


def _default(domain: str) -> bool:
    return domain in ("", "ai.onnx")


class Rewriter:
    """What a rewrite may ask about the model (see the module docstring)."""

    def __init__(self, model: Any) -> None:
        self.model = model
        version = next((int(o.version) for o in model.opset_import if _default(o.domain)), 0)
        self.opset = min(max(version, 0), INT32 - 1)  # onnx.defs takes a C int (as signature)
        g = model.graph
        self.taken: set[str] = {v.name for v in g.input} | {t.name for t in g.initializer}
        self.taken |= {o for n in g.node for o in n.output} | {v.name for v in g.value_info}
        self.outputs = {v.name for v in g.output}
        self.readers: dict[str, list[NodeProto]] = {}
        for n in g.node:
            for x in n.input:
                if x:
                    self.readers.setdefault(x, []).append(n)
        self.scratch: dict[str, Any] = {}
        self._types: dict[str, TypeProto] | None = None
        self._inferred: set[str] = set()
        self._consts: dict[str, Any] | None = None

    def read(self, name: str) -> bool:
        """True if a node or a graph output reads the value."""
        return name in self.outputs or bool(self.readers.get(name))

    def fresh(self, base: str) -> str:
        """A value name that no value of the model (or of an earlier rewrite) has."""
        name, k = base, 1
        while name in self.taken:
            name, k = f"{base}_{k}", k + 1
        self.taken.add(name)
        return name

    def type_of(self, name: str) -> TypeProto | None:
        """The value's ONNX type as the model states it (shape inference when it does not).

        ONNX's shape inference is C++ that trusts attribute values (onnx 1.23 segfaults on a
        three-output LayerNormalization whose axis is 2**31), and the model is not validated
        yet: it runs only on the nodes that compute ``name``, and only when none of them has an
        integer attribute beyond 32 bits (no valid value of an opset >= 23 node is). Otherwise
        the type stays unknown, and the node that asked for it is refused naming why.
        """
        if self._types is None:
            self._types = _stated_types(self.model.graph)
        if name not in self._types and name not in self._inferred:
            self._inferred.add(name)
            part = _upstream(self.model, name)
            try:
                inferred = onnx.shape_inference.infer_shapes(part).graph \
                    if part is not None else None
            except Exception:  # a model onnx cannot infer: the types stay unknown
                inferred = None
            if inferred is not None:
                for k, t in _stated_types(inferred).items():
                    self._types.setdefault(k, t)
        return self._types.get(name)

    def constant(self, name: str) -> Any:
        """The array of an initializer or a ``Constant`` node's ``value`` (None otherwise)."""
        if self._consts is None:
            g = self.model.graph
            self._consts = {t.name: t for t in g.initializer}
            self._consts.update({n.output[0]: n.attribute[0].t for n in g.node
                                 if n.op_type == "Constant" and len(n.output) == 1
                                 and len(n.attribute) == 1 and n.attribute[0].name == "value"})
        t = self._consts.get(name)
        # read as the importer reads initializers: malformed data a VerifyError naming the
        # tensor, external data never read from a file the model names
        return None if t is None else tensor_to_array(t, f"tensor {name!r}")

    def const_node(self, base: str, value: Any) -> tuple[NodeProto, str]:
        """A ``Constant`` node of an int64 vector, and its output's name."""
        name = self.fresh(base)
        return helper.make_node("Constant", [], [name], name=name,
                                value=helper.make_tensor(name, onnx.TensorProto.INT64,
                                                         [len(value)], list(value))), name


def _valid(n: NodeProto, index: int, opset: int) -> bool:
    """Whether the node has the inputs, outputs and attribute types of its ONNX schema: a
    rewrite reads them, so a node without them stays for the importer's schema check, which
    refuses it naming what is wrong (``import_schema``)."""
    try:
        check_node(OnnxNode(n, index), opset)
    except VerifyError:
        return False
    return True


def _upstream(model: Any, name: str) -> Any:
    """A copy of the model with only the nodes that ``name`` depends on, and ``name`` as its
    output; None when one of them has an integer attribute outside 32 bits (see
    ``Rewriter.type_of``)."""
    producers = {o: n for n in model.graph.node for o in n.output if o}
    keep: list[NodeProto] = []
    seen: set[int] = set()
    todo = [name]
    while todo:
        n = producers.get(todo.pop())
        if n is None or id(n) in seen:
            continue
        seen.add(id(n))
        keep.append(n)
        todo.extend(x for x in n.input if x)
    for n in keep:
        for a in n.attribute:
            ints = [a.i] if a.type == onnx.AttributeProto.INT else list(a.ints)
            if any(not -INT32 <= v < INT32 for v in ints):
                return None
    out = onnx.ModelProto()
    out.CopyFrom(model)
    order = {id(n): i for i, n in enumerate(model.graph.node)}
    del out.graph.node[:]
    out.graph.node.extend(sorted(keep, key=lambda n: order[id(n)]))
    del out.graph.output[:]
    out.graph.output.add().name = name
    return out


def _stated_types(graph: Any) -> dict[str, TypeProto]:
    out: dict[str, TypeProto] = {}
    for vi in list(graph.input) + list(graph.value_info) + list(graph.output):
        if vi.type.HasField("tensor_type") and vi.type.tensor_type.elem_type:
            out.setdefault(vi.name, vi.type)
    for t in graph.initializer:
        out.setdefault(t.name, helper.make_tensor_type_proto(t.data_type, list(t.dims)))
    return out


def prepare(model: Any) -> Any:
    """The model with every rewritable node replaced (a copy; the model itself when none is)."""
    if not any(n.op_type in REWRITES and _default(n.domain) for n in model.graph.node):
        return model
    out = onnx.ModelProto()
    out.CopyFrom(model)
    r = Rewriter(out)
    nodes: list[NodeProto] = []
    for i, n in enumerate(out.graph.node):
        fn = REWRITES.get(n.op_type) if _default(n.domain) else None
        new = fn(n, r) if fn is not None and _valid(n, i, r.opset) else None
        nodes.extend([n] if new is None else new)
    del out.graph.node[:]
    out.graph.node.extend(nodes)
    return out


__all__ = ["REWRITES", "Rewriter", "prepare", "rewrite"]
