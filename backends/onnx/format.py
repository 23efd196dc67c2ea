"""ONNX format facts shared by the importer and the exporter.

The one place for what both directions must agree on: the dtype table (gradc ``DType`` <->
ONNX ``TensorProto`` element type), the opset and IR version the exporter writes, the metadata
keys of the embedded gradc IR, the tag of each gradc node's group of ONNX nodes, and the
conversion between ``TensorProto`` and NumPy arrays. The
importer (``importer``, ``import_*``) and the exporter (``target``, ``builder``, ``lower_*``)
both import this module and never each other. After onnx-ir's ``serde.py``, which keeps both
directions of the proto conversion in one module.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.metadata
import json
from dataclasses import dataclass
from typing import Any, Iterable, Mapping, Sequence

import numpy as np
from onnx import AttributeProto, GraphProto, NodeProto, TensorProto, numpy_helper

from gradc.errors import UnsupportedError, VerifyError
from gradc.ir.types import DType

__all__ = [
    # Versions
    "OPSET", "IR_VERSION", "PRODUCER", "producer_version",
    # Element types
    "ELEM_TYPES", "DTYPES", "dtype_of", "elem_type_name",
    # The embedded gradc IR
    "IR_KEY", "IR_HASH_KEY", "graph_digest",
    # The group tags
    "GROUP_KEY", "GroupTag", "read_tag", "members_by_scope", "reads", "group_digest",
    "producers_of",
    # Tensors
    "array_to_tensor", "tensor_to_array",
]

# -- versions -----------------------------------------------------------------------------------

OPSET = 21
"""The default-domain opset of exported models."""
IR_VERSION = 10
"""The ONNX IR version of exported models."""
PRODUCER = "gradc"
"""The ``producer_name`` of exported models."""


@functools.cache
def producer_version() -> str:
    """The ``producer_version`` of exported models: the installed gradc's version, else "0"."""
    try:
        return importlib.metadata.version("gradc")
    except importlib.metadata.PackageNotFoundError:  # pragma: no cover - run from a bare tree
        return "0"


# -- element types ------------------------------------------------------------------------------

ELEM_TYPES: dict[DType, int] = {
    DType.float64: TensorProto.DOUBLE, DType.float32: TensorProto.FLOAT,
    DType.float16: TensorProto.FLOAT16, DType.int64: TensorProto.INT64,
    DType.int32: TensorProto.INT32, DType.int16: TensorProto.INT16, DType.int8: TensorProto.INT8,
    DType.uint64: TensorProto.UINT64, DType.uint32: TensorProto.UINT32,
    DType.uint16: TensorProto.UINT16, DType.uint8: TensorProto.UINT8, DType.bool: TensorProto.BOOL,
}
"""gradc dtype -> ONNX element type (every gradc dtype has one)."""

DTYPES: dict[int, DType] = {elem: dtype for dtype, elem in ELEM_TYPES.items()}
"""ONNX element type -> gradc dtype (the other element types are unsupported)."""


def elem_type_name(elem: int) -> str:
    """The ONNX name of a tensor element type (``FLOAT``, ``BFLOAT16``, ...)."""
    try:
        return TensorProto.DataType.Name(elem)
    except ValueError:
        return f"element type {elem}"


def dtype_of(elem: int) -> DType:
    """The gradc dtype of an ONNX element type; UnsupportedError for the others."""
    if elem not in DTYPES:
        raise UnsupportedError(f"element type {elem_type_name(elem)} is not supported")
    return DTYPES[elem]


# -- the embedded gradc IR ----------------------------------------------------------------------

IR_KEY = "gradc.ir"
"""Model metadata key: the text IR of the exported gradc graph."""
IR_HASH_KEY = "gradc.ir.graph_sha256"
"""Model metadata key: ``graph_digest`` of the ONNX graph the text IR was exported as."""


def graph_digest(g: GraphProto) -> str:
    """SHA-256 of a serialized ONNX graph: ties the embedded text IR to the graph it came from.

    ``from_onnx`` reads a gradc export back through the embedded IR (exactly the graph that was
    exported, fused groups included) only while this digest still matches; an edited model is
    imported node by node like any other.
    """
    return hashlib.sha256(g.SerializeToString(deterministic=True)).hexdigest()


# -- the group tags ---------------------------------------------------------------------------
#
# The exporter lowers one gradc node into a group of ONNX nodes, all named ``<scope>/<OnnxOp>``
# (``scope``: ``gradc.<op>.<n>``, or ``gradc.fused.<n>/<op>.<m>`` inside a fused group). Some
# groups only make sense as a whole: ``max_pooling_grad`` scatters with ``ScatterElements``,
# ``reduce_max`` picks with ``ArgMax`` and ``GatherElements``, ``random_generator`` is Philox
# in ``BitShift`` and ``BitwiseXor``, ``resample`` branches with ``If``; gradc imports none of
# those as model ops. So the exporter tags the group's first node (its ``metadata_props`` key
# ``gradc.group``) with the gradc node as a one-node text IR graph, the ONNX names of its
# operands and results, and a SHA-256 of the group. The importer raises a group whose tag still
# matches back into its gradc node (``import_groups``), whatever the rest of the model looks
# like; a group whose nodes, tag or private constants were edited imports op by op.
#
# The digest covers the tag's fields (node text, operand and result names), the model's opset,
# every member node (in model order, without its ``metadata_props`` and ``doc_string``), and
# every tensor that the members read that is no operand: an initializer by name and bytes, a
# node output by its producer (the ``Shape`` nodes that read symbolic dims), anything else by
# name. Operands are not hashed: the values upstream of a gradc node may change (new weights,
# an edited producer), and the raised node then computes its op on them as the group would;
# the importer checks their types against the tag's.

GROUP_KEY = "gradc.group"
"""Node metadata key of the tag, on the first node of a group."""


@dataclass(frozen=True)
class GroupTag:
    """The tag of one group (see "the group tags" above)."""

    scope: str
    node: str  # the text IR of a graph holding just the gradc node
    operands: tuple[str, ...]
    results: tuple[str, ...]
    sha256: str

    def to_json(self) -> str:
        """The tag as stored in the node's metadata."""
        return json.dumps({"scope": self.scope, "node": self.node, "operands": self.operands,
                           "results": self.results, "sha256": self.sha256}, sort_keys=True)


def read_tag(node: NodeProto) -> GroupTag | None:
    """The node's tag, or None when it has none or one that does not read as a tag."""
    text = next((p.value for p in node.metadata_props if p.key == GROUP_KEY), None)
    if text is None:
        return None
    try:
        d = json.loads(text)
        tag = GroupTag(d["scope"], d["node"], tuple(d["operands"]), tuple(d["results"]),
                       d["sha256"])
    except (ValueError, KeyError, TypeError):
        return None
    strings = [tag.scope, tag.node, tag.sha256, *tag.operands, *tag.results]
    return tag if all(isinstance(s, str) for s in strings) else None


def members_by_scope(nodes: Iterable[NodeProto], scopes: Iterable[str]
                     ) -> dict[str, list[NodeProto]]:
    """scope -> its member nodes in order: those named ``<scope>/...`` (a node ``a/b/Op`` is a
    member of the scopes ``a`` and ``a/b``)."""
    wanted = set(scopes)
    out: dict[str, list[NodeProto]] = {}
    for n in nodes:
        name = n.name
        if not isinstance(name, str):
            continue  # not UTF-8 (protobuf hands it out as bytes): no tag names it
        cut = name.find("/")
        while cut >= 0:
            if name[:cut] in wanted:
                out.setdefault(name[:cut], []).append(n)
            cut = name.find("/", cut + 1)
    return out


def reads(node: NodeProto) -> set[str]:
    """The tensor names a node reads, those its subgraphs (``If`` branches) read from outside
    them included."""
    out = {x for x in node.input if x}
    for a in node.attribute:
        graphs = [a.g] if a.type == AttributeProto.GRAPH else list(a.graphs)
        for g in graphs:
            inner = {o for n in g.node for o in n.output} | {i.name for i in g.input} | {
                t.name for t in g.initializer}
            for n in g.node:
                out |= reads(n) - inner
            out |= {o.name for o in g.output} - inner
    return out


def group_digest(scope: str, node_text: str, operands: Sequence[str], results: Sequence[str],
                 members: Sequence[NodeProto], initializers: Mapping[str, TensorProto],
                 producers: Mapping[str, NodeProto], opset: int) -> str:
    """The SHA-256 of a group (what it covers: "the group tags" above; also the model's
    default-domain opset, which gives its ONNX nodes their meaning)."""
    h = hashlib.sha256()
    head = json.dumps([scope, node_text, list(operands), list(results), opset])
    _chunk(h, b"tag", head.encode("utf-8", "surrogatepass"))
    produced: set[str] = set()
    for n in members:
        _chunk(h, b"node", _stripped(n))
        produced.update(n.output)
    extra = sorted(set().union(*(reads(n) for n in members)) - produced - set(operands),
                   key=_utf8)
    for name in extra:
        key = _utf8(name)
        if name in initializers:
            _chunk(h, b"initializer", key + b"\0" +
                   initializers[name].SerializeToString(deterministic=True))
        elif name in producers:
            _chunk(h, b"producer", key + b"\0" + _stripped(producers[name]))
        else:
            _chunk(h, b"other", key)
    return h.hexdigest()


def _utf8(name: str | bytes) -> bytes:
    """A tensor name as bytes (protobuf hands out a name that is not UTF-8 as bytes)."""
    return name if isinstance(name, bytes) else name.encode("utf-8", "surrogatepass")


def _stripped(n: NodeProto) -> bytes:
    c = NodeProto()
    c.CopyFrom(n)
    del c.metadata_props[:]
    c.doc_string = ""
    return c.SerializeToString(deterministic=True)


def _chunk(h: Any, kind: bytes, data: bytes) -> None:
    h.update(kind + len(data).to_bytes(8, "little") + data)


def producers_of(nodes: Iterable[NodeProto]) -> dict[str, NodeProto]:
    """Each output name -> the node that writes it."""
    return {o: n for n in nodes for o in n.output if o}


# -- tensors ------------------------------------------------------------------------------------

def array_to_tensor(a: np.ndarray, name: str = "") -> TensorProto:
    """A TensorProto holding the array (its dtype must be one of ``ELEM_TYPES``)."""
    return numpy_helper.from_array(a, name)


def tensor_to_array(t: TensorProto, what: str) -> np.ndarray:
    """The NumPy array of a TensorProto (data type checked first, read errors as GradcError)."""
    if t.data_location == TensorProto.EXTERNAL:  # never read files named inside the model
        raise VerifyError(f"{what}: its data is stored in an external file that was not loaded "
                          "(pass the model's path to from_onnx)")
    if t.data_type not in DTYPES:
        raise UnsupportedError(f"{what}: element type {elem_type_name(t.data_type)} is not "
                               "supported")
    try:
        a = numpy_helper.to_array(t)
    except Exception as e:  # protobuf/onnx raise many kinds for malformed tensor data
        raise VerifyError(f"{what}: cannot read the tensor data ({type(e).__name__}: {e})") \
            from None
    return np.asarray(a, dtype=DTYPES[t.data_type].numpy)
