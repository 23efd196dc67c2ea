"""Model builders and cross-checks shared by the ONNX importer tests."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
from onnx import TensorProto as TP
from onnx import helper as oh
from onnx import numpy_helper

import gradc
from helpers import assert_bits

IR = {6: 3, 9: 4, 10: 5, 11: 6, 12: 7, 13: 7, 17: 8, 18: 8, 19: 9, 20: 9, 21: 10}
ELEM = {np.dtype(k): v for k, v in [(np.float32, TP.FLOAT), (np.float64, TP.DOUBLE),
                                    (np.float16, TP.FLOAT16), (np.int8, TP.INT8),
                                    (np.uint8, TP.UINT8), (np.int32, TP.INT32),
                                    (np.int64, TP.INT64), (np.bool_, TP.BOOL),
                                    (np.int16, TP.INT16), (np.uint16, TP.UINT16),
                                    (np.uint32, TP.UINT32), (np.uint64, TP.UINT64)]}
RNG = np.random.default_rng(1234)


# -- helpers ------------------------------------------------------------------------------------

def make(nodes, inputs, outputs, inits=None, opset=18, name="t"):
    """A model: inputs/outputs as {name: (dtype, shape)}, inits as {name: array}."""
    tensors = [numpy_helper.from_array(np.asarray(a), k) for k, a in (inits or {}).items()]
    ins = [oh.make_tensor_value_info(k, ELEM[np.dtype(d)], s) for k, (d, s) in inputs.items()]
    outs = [oh.make_tensor_value_info(k, ELEM[np.dtype(d)], None) for k, d in outputs.items()]
    m = oh.make_model(oh.make_graph(nodes, name, ins, outs, tensors),
                      opset_imports=[oh.make_opsetid("", opset)])
    m.ir_version = IR[opset]
    return m


def unary(op, x_shape, attrs=None, extra=(), inits=None, opset=18, dtype=np.float32,
          out_dtypes=None):
    """One node ``op(x, *extra)`` with outputs y (and y1, ... from out_dtypes)."""
    out_dtypes = out_dtypes or [dtype]
    outs = ["y"] + [f"y{i}" for i in range(1, len(out_dtypes))]
    node = oh.make_node(op, ["x", *extra], outs, name="n", **(attrs or {}))
    return make([node], {"x": (dtype, x_shape)}, dict(zip(outs, out_dtypes)), inits, opset)


def distinct(shape, dtype=np.float32, rng=RNG):
    """Values without ties (a permutation), centred on 0, in the dtype."""
    n = int(np.prod(shape))
    v = rng.permutation(n).astype(np.float64) - n // 2
    if np.dtype(dtype).kind == "f":
        v = v + 0.25  # no -0 or ties at 0
    return v.astype(dtype).reshape(shape)


def run_ort(model, feeds):
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    opts.log_severity_level = 3
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    sess = ort.InferenceSession(model.SerializeToString(), opts,
                                providers=["CPUExecutionProvider"])
    names = [o.name for o in sess.get_outputs()]
    return dict(zip(names, sess.run(None, feeds)))


def run_gradc(model, feeds):
    g = gradc.from_onnx(model)
    return gradc.compile(g, target="reference", passes=None)(**feeds)


def cross_check(model, feeds, exact=True, rtol=1e-5, atol=1e-6):
    """Import, run the reference target and onnxruntime, compare every output."""
    feeds = {k: np.asarray(v) for k, v in feeds.items()}
    got, want = run_gradc(model, feeds), run_ort(model, feeds)
    assert list(got) == list(want)
    for k in want:
        if exact:
            assert_bits(got[k], want[k])
        else:
            assert got[k].dtype == want[k].dtype and got[k].shape == want[k].shape
            np.testing.assert_allclose(got[k], want[k], rtol=rtol, atol=atol)
    return got


def only_node(g, op):
    nodes = [n for n in g.nodes if n.op == op]
    assert len(nodes) == 1, [n.op for n in g.nodes]
    return nodes[0]


def c64(*v):
    return np.array(v, np.int64)


def resize_model(shape, scales, sizes, opset=18, dtype=np.float32, roi=None, **attrs):
    inits, extra = {}, ["roi" if roi is not None else ""]
    if roi is not None:
        inits["roi"] = np.array(roi, np.float32)
    if scales is not None:
        extra.append("scales")
        inits["scales"] = np.array(scales, np.float32)
    else:
        extra += ["", "sizes"]
        inits["sizes"] = c64(*sizes)
    return unary("Resize", shape, attrs, extra, inits, opset, dtype)
