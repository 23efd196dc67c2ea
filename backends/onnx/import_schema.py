"""The shape of every ONNX node the importer knows, checked before any converter or fold runs.

The table is ONNX's own: ``onnx.defs`` holds, for each op and opset, the formal inputs (single,
optional or variadic, with their type constraints), the outputs, and each attribute's kind and
whether it is required. ``check_node`` holds a node to the schema of its op at the model's
opset: the number of inputs and outputs, a required input or output left empty, an attribute
the op does not have, an attribute of the wrong kind, a required attribute missing. Each is a
``VerifyError`` naming the input or attribute (the importer prefixes the node), raised before
anything reads the node, so no converter and no NumPy fold ever sees a malformed node.

``check_dtypes`` holds the dtypes of known inputs to the schema's type constraints (``Where``'s
condition is bool, ``Add``'s operands share one type ``T``, ...); the importer runs it before it
folds a node at import, where NumPy would otherwise meet them.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np
import onnx.defs
from onnx import TensorProto

from gradc.errors import VerifyError
from gradc.backends.onnx.import_node import OnnxNode, attr_kind_name

UNBOUNDED = 2 ** 31 - 1  # onnx.defs' max_input of a variadic op


@dataclass(frozen=True)
class Formal:
    """One formal input or output of a schema."""

    name: str
    option: str  # "single", "optional" or "variadic"
    type_str: str  # a constraint name ("T") or a type ("tensor(int64)")
    types: frozenset[str]


@dataclass(frozen=True)
class Signature:
    """What ONNX allows for one op at one opset."""

    op: str
    since: int
    inputs: tuple[Formal, ...]
    outputs: tuple[Formal, ...]
    min_inputs: int
    max_inputs: int
    min_outputs: int
    max_outputs: int
    attributes: dict[str, tuple[int, bool]]  # name -> (AttributeProto kind, required)

    def formal_input(self, i: int) -> Formal | None:
        """The formal parameter of input ``i`` (a variadic last one covers the rest)."""
        if i < len(self.inputs):
            return self.inputs[i]
        if self.inputs and self.inputs[-1].option == "variadic":
            return self.inputs[-1]
        return None

    def input_name(self, i: int) -> str:
        """ONNX's name of input ``i`` (``inputs[3]`` of a variadic one)."""
        f = self.formal_input(i)
        if f is None:
            return f"{i}"
        return f"{f.name}[{i - len(self.inputs) + 1}]" if f.option == "variadic" and \
            i >= len(self.inputs) - 1 and len(self.inputs) else f.name


_OPTIONS = {onnx.defs.OpSchema.FormalParameterOption.Single: "single",
            onnx.defs.OpSchema.FormalParameterOption.Optional: "optional",
            onnx.defs.OpSchema.FormalParameterOption.Variadic: "variadic"}


@functools.cache
def signature(op: str, opset: int) -> Signature | None:
    """The default-domain schema of ``op`` in effect at ``opset`` (None: the op does not exist
    there)."""
    try:  # onnx.defs takes a C int: a larger opset has the schemas of the newest one
        s = onnx.defs.get_schema(op, min(max(opset, 0), UNBOUNDED), "")
    except onnx.defs.SchemaError:
        return None

    def formal(p: Any) -> Formal:
        return Formal(p.name, _OPTIONS.get(p.option, "single"), p.type_str, frozenset(p.types))

    return Signature(op, int(s.since_version), tuple(formal(p) for p in s.inputs),
                     tuple(formal(p) for p in s.outputs), int(s.min_input), int(s.max_input),
                     int(s.min_output), int(s.max_output),
                     {k: (_kind(a), bool(a.required)) for k, a in s.attributes.items()})


def _kind(a: Any) -> int:
    """The AttributeProto kind of a schema attribute (onnx.defs' AttrType is an int enum)."""
    return int(a.type)


def check_node(n: OnnxNode, opset: int) -> None:
    """VerifyError unless the node has the inputs, outputs and attributes ONNX allows."""
    sig = signature(n.op, opset)
    if sig is None:
        raise VerifyError(f"op {n.op}: expected an op of opset {opset} of the default domain, "
                          f"got one that opset {opset} does not have")
    _check_count(n.inputs, sig.inputs, sig.min_inputs, sig.max_inputs, "input")
    _check_count(n.outputs, sig.outputs, sig.min_outputs, sig.max_outputs, "output")
    for name, a in n.attrs.items():
        if name not in sig.attributes:
            raise VerifyError(f"attribute {name}: expected an attribute of {n.op}-{sig.since} "
                              f"({', '.join(sorted(sig.attributes)) or 'it has none'}), got "
                              "an unknown one")
        kind, _ = sig.attributes[name]
        if int(a.type) != kind:
            raise VerifyError(f"attribute {name}: expected {attr_kind_name(kind)}, got "
                              f"{attr_kind_name(int(a.type))}")
    for name, (kind, required) in sig.attributes.items():
        if required and name not in n.attrs:
            raise VerifyError(f"attribute {name}: expected {attr_kind_name(kind)} (a required "
                              "attribute), got none")


def _check_count(names: Sequence[str], formals: Sequence[Formal], lo: int, hi: int,
                 what: str) -> None:
    count = len(names)
    for i, f in enumerate(formals):
        given = names[i] if i < count else ""
        if f.option == "single" and not given and (i < count or i < lo):
            raise VerifyError(f"{what} {f.name}: expected a value (required {what}), got none")
    if count < lo:
        raise VerifyError(f"{what}s: expected at least {lo}, got {count}")
    if count > hi:
        listed = ", ".join(f.name for f in formals)
        raise VerifyError(f"{what}s: expected at most {hi} ({listed}), got {count}")


_TYPE_NAMES = {np.dtype(onnx.helper.tensor_dtype_to_np_dtype(e)): "tensor(" + {
    "DOUBLE": "double", "FLOAT": "float"}.get(TensorProto.DataType.Name(e),
                                               TensorProto.DataType.Name(e).lower()) + ")"
    for e in (TensorProto.DOUBLE, TensorProto.FLOAT, TensorProto.FLOAT16, TensorProto.INT64,
              TensorProto.INT32, TensorProto.INT16, TensorProto.INT8, TensorProto.UINT64,
              TensorProto.UINT32, TensorProto.UINT16, TensorProto.UINT8, TensorProto.BOOL)}


def type_name(dtype: np.dtype) -> str:
    """ONNX's name of a NumPy dtype (``tensor(float)``); a symbol array counts as int64."""
    if np.dtype(dtype).kind == "O":
        return "tensor(int64)"
    return _TYPE_NAMES.get(np.dtype(dtype), f"tensor({dtype})")


def check_dtypes(n: OnnxNode, opset: int, dtypes: Sequence[np.dtype | None]) -> None:
    """VerifyError unless the known input dtypes meet the schema's type constraints."""
    sig = signature(n.op, opset)
    if sig is None:
        return
    bound: dict[str, tuple[str, int]] = {}  # constraint -> (type, the input that bound it)
    for i, dt in enumerate(dtypes):
        f = sig.formal_input(i)
        if dt is None or f is None:
            continue
        t = type_name(dt)
        if t not in f.types:
            allowed = ", ".join(sorted(x[7:-1] for x in f.types))
            raise VerifyError(f"input {sig.input_name(i)}: expected a tensor of {allowed}, got "
                              f"{t[7:-1]}")
        if f.type_str in bound and bound[f.type_str][0] != t and f.type_str not in f.types:
            first = sig.input_name(bound[f.type_str][1])
            raise VerifyError(f"input {sig.input_name(i)}: expected the element type of input "
                              f"{first} ({bound[f.type_str][0][7:-1]}, type {f.type_str}), got "
                              f"{t[7:-1]}")
        bound.setdefault(f.type_str, (t, i))


__all__ = ["Signature", "signature", "check_node", "check_dtypes", "type_name"]
