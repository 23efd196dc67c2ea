"""ONNX format facts shared by the importer and the exporter.

The one place for what both directions must agree on: the dtype table (gradc ``DType`` <->
ONNX ``TensorProto`` element type), the opset and IR version the exporter writes, the metadata
keys of the embedded gradc IR, and the conversion between ``TensorProto`` and NumPy arrays. The
importer (``importer``, ``import_*``) and the exporter (``target``, ``builder``, ``lower_*``)
both import this module and never each other. After onnx-ir's ``serde.py``, which keeps both
directions of the proto conversion in one module.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.metadata

import numpy as np
from onnx import GraphProto, TensorProto, numpy_helper

from gradc.errors import UnsupportedError, VerifyError
from gradc.ir.types import DType

__all__ = [
    # Versions
    "OPSET", "IR_VERSION", "PRODUCER", "producer_version",
    # Element types
    "ELEM_TYPES", "DTYPES", "dtype_of", "elem_type_name",
    # The embedded gradc IR
    "IR_KEY", "IR_HASH_KEY", "graph_digest",
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
