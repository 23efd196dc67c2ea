"""Exported models use ``Where`` only on dtypes every supported onnxruntime has a kernel for.

onnxruntime's CPU ``Where`` gained int8 and uint32 kernels only in recent releases; the
onnxruntime on the lent GPU machine has none ("Could not find an implementation for Where(16)":
maximum, minimum, where and one_hot on int8/uint32 failed to load there, gpu_smoke.sh's first
run). gradc supports onnxruntime >= 1.18, whose ``Where`` has uint8, int32, int64, float, double
(and float16, which ``select`` uses only where no NaN can be taken). This test exports every
(op, dtype) case of the integer dtypes and checks each ``Where`` node's data type.
"""

from __future__ import annotations

import onnx
import pytest

import gradc

from dtype_cases import batch, cases

PORTABLE = {onnx.TensorProto.UINT8, onnx.TensorProto.INT32, onnx.TensorProto.INT64,
            onnx.TensorProto.FLOAT, onnx.TensorProto.DOUBLE, onnx.TensorProto.FLOAT16}
INTEGERS = ("int8", "uint8", "int16", "uint16", "int32", "uint32", "int64", "uint64")


def _where_types(model: onnx.ModelProto) -> list[tuple[str, int]]:
    """(node name, element type of its data operands) of every Where node."""
    inferred = onnx.shape_inference.infer_shapes(model, strict_mode=True)
    g = inferred.graph
    types = {v.name: v.type.tensor_type.elem_type
             for v in list(g.value_info) + list(g.input) + list(g.output)}
    types |= {t.name: t.data_type for t in g.initializer}
    return [(n.name, types[n.input[1]]) for n in g.node if n.op_type == "Where"]


@pytest.mark.parametrize("dtype", INTEGERS)
def test_where_only_on_portable_dtypes(dtype):
    pairs = [p for p in cases() if p[1] == dtype]
    model = gradc.to_onnx(batch(pairs, name=f"where_{dtype}").graph)
    bad = [(name, onnx.TensorProto.DataType.Name(t)) for name, t in _where_types(model)
           if t not in PORTABLE]
    assert not bad, f"Where on a dtype older onnxruntime lacks: {bad[:5]}"
