"""ONNX ``Attention`` (opsets 23-25) inlined: SPEC-transformers §28.3.

**Choice** (§28.3): gradc has no attention operator (§27.3); an ``Attention`` node is replaced,
before the importer reads the model (``import_rewrite.prepare``), by its function body, which
``onnx`` makes for the node's attributes and its inputs' types
(``OpSchema.get_context_dependent_function``, as ONNX Runtime's inliner does). The body's
values get names ``<node>/<body name>`` that no other value has; its formal inputs and outputs
are the node's. The importer then takes the body by the usual rules: the shape arithmetic
folds, the scale becomes a constant, ``Q`` and ``K`` are each multiplied by ``√scale``, the bias
comes from ``attn_mask`` (a bool mask through ``Where(mask, 0, -inf)``), ``is_causal`` and the
windows (25), K and V are repeated for grouped-query attention, ``softcap`` is ``Div``, ``Tanh``,
``Mul``, and fully masked rows are guarded by ``Where(ReduceMax(bias) == -inf, 0, softmax)``, a
row guard whose gradient is 0 there (§27.2).

Refused, naming the input or output (the node then stays, and its converter below reports it):
the key/value cache (``past_key``, ``past_value``, ``present_key``, ``present_value``,
``nonpad_kv_seqlen``: inference), a ``qk_matmul_output`` that something reads, a bfloat16
``softmax_precision``, and a node whose inputs' types the model does not give (the body depends
on them). Outputs that nothing reads are dropped before the checks.
"""

from __future__ import annotations

import onnx
from onnx import AttributeProto, FunctionProto, NodeProto, TypeProto

from gradc.errors import UnsupportedError
from gradc.backends.onnx.import_node import Context, OnnxNode, Produced, converter
from gradc.backends.onnx.import_rewrite import Rewriter, rewrite

_CACHE_INPUTS = {4: "past_key", 5: "past_value", 6: "nonpad_kv_seqlen"}
_OPTIONAL_OUTPUTS = {1: "present_key", 2: "present_value", 3: "qk_matmul_output"}
_BFLOAT16 = onnx.TensorProto.BFLOAT16


def attention_problems(inputs: list[str], outputs: list[str],
                       softmax_precision: int) -> list[str]:
    """What gradc refuses in an Attention node (§28.3), one message per input or output."""
    found = []
    for i, field in _CACHE_INPUTS.items():
        if len(inputs) > i and inputs[i]:
            found.append(f"input {field} ({inputs[i]!r}) is a key/value cache (inference "
                         "state): gradc imports attention without one (export without "
                         "past key values)")
    for i, field in _OPTIONAL_OUTPUTS.items():
        if len(outputs) > i and outputs[i]:
            what = ("is a key/value cache (inference state)" if i < 3 else
                    "is read: gradc imports the attention output Y only")
            found.append(f"output {field} ({outputs[i]!r}) {what}")
    if softmax_precision == _BFLOAT16:
        found.append("attribute softmax_precision: 16 (bfloat16) is not supported (gradc has "
                     "no bfloat16)")
    return found


def _softmax_precision(node: NodeProto) -> int:
    return next((int(a.i) for a in node.attribute if a.name == "softmax_precision"), 0)


@rewrite("Attention")
def _inline(node: NodeProto, r: Rewriter) -> list[NodeProto] | None:
    kept = NodeProto()
    kept.CopyFrom(node)
    for i in range(1, len(kept.output)):
        if not r.read(kept.output[i]):
            kept.output[i] = ""  # an unread optional output is as good as absent
    while len(kept.output) > 1 and not kept.output[-1]:
        del kept.output[-1]
    if attention_problems(list(kept.input), list(kept.output), _softmax_precision(kept)):
        return [kept]
    body = _body(kept, r)
    return [kept] if body is None else _renamed(body, kept, r)


def _body(node: NodeProto, r: Rewriter) -> FunctionProto | None:
    """The node's function body for its attributes and input types; None when not made."""
    try:
        schema = onnx.defs.get_schema("Attention", r.opset)
    except onnx.defs.SchemaError:
        return None
    types: list[TypeProto] = []
    for x in node.input:
        t = r.type_of(x) if x else TypeProto()
        if t is None:
            return None
        types.append(t)
    try:
        raw = schema.get_context_dependent_function(  # type: ignore[attr-defined]
            node.SerializeToString(), [t.SerializeToString() for t in types])
    except Exception:  # onnx's function builder refuses the node (C++ errors of many kinds)
        return None
    body = FunctionProto()
    body.ParseFromString(raw)
    return body if len(body.node) else None


def _renamed(body: FunctionProto, node: NodeProto, r: Rewriter) -> list[NodeProto]:
    """The body's nodes with the node's inputs and outputs and fresh internal names."""
    base = node.name or node.output[0]
    names = {f: a for f, a in zip(body.input, node.input) if a}
    names.update({f: a for f, a in zip(body.output, node.output) if a})
    absent = set(body.input) - set(names)
    attrs = {a.name: a for a in node.attribute}
    out: list[NodeProto] = []
    for b in body.node:
        c = NodeProto()
        c.CopyFrom(b)
        for i, x in enumerate(c.input):
            c.input[i] = "" if not x or x in absent else names[x]
        for i, y in enumerate(c.output):
            if y and y not in names:
                names[y] = r.fresh(f"{base}/{y}")
            c.output[i] = names.get(y, "")
        c.name = c.output[0] if c.output and c.output[0] else f"{base}/{b.op_type}"
        _substitute(c, attrs)
        out.append(c)
    return out


def _substitute(c: NodeProto, attrs: dict[str, AttributeProto]) -> None:
    """Attributes that refer to the node's (``ref_attr_name``) get its values, or go."""
    kept = []
    for a in c.attribute:
        if a.ref_attr_name:
            if a.ref_attr_name in attrs:
                v = AttributeProto()
                v.CopyFrom(attrs[a.ref_attr_name])
                v.name = a.name
                kept.append(v)
        else:
            kept.append(a)
    del c.attribute[:]
    c.attribute.extend(kept)


def _check(n: OnnxNode, ctx: Context) -> list[str]:
    found = attention_problems(list(n.inputs), list(n.outputs),
                               n.get_int("softmax_precision", 0))
    return found or [f"its function body could not be made for opset {ctx.opset}: gradc "
                     "inlines Attention (opsets 23-25) with the types of its inputs, which "
                     "the model must state (graph inputs, value_info) or ONNX shape inference "
                     "must find"]


@converter("Attention", check=_check)
def _attention(n: OnnxNode, ctx: Context) -> list[Produced]:
    raise UnsupportedError(_check(n, ctx)[0])  # reached only by a node left in place


__all__ = ["attention_problems"]
