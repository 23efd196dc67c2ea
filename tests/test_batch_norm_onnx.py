"""ONNX BatchNormalization import (SPEC-training.md §21): opsets 9/14/15 in inference mode,
14/15 in training mode with §12.5's running statistics (f = 1, ONNX's momentum), against
onnxruntime on the original model; the refused forms name node and attribute; the exported
gradient graph of an imported training-mode model runs in stock onnxruntime."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto as TP
from onnx import helper as oh
from onnx import numpy_helper

import gradc
from gradc.ir.state import state_outputs
from helpers import assert_bits
from onnx_import_helpers import run_gradc, run_ort

F32 = np.float32
X = np.array([[[[1, 7]], [[-2, 4]]], [[[1, 7]], [[4, -2]]]], F32)
PARAMS = {"s": np.array([2, 0.5], F32), "b": np.array([1, -1], F32),
          "m": np.array([4, 1], F32), "v": np.array([9, 9], F32)}
ELEM = {np.dtype(np.float32): TP.FLOAT, np.dtype(np.float64): TP.DOUBLE,
        np.dtype(np.float16): TP.FLOAT16}


def bn_model(opset=15, outputs=("y",), x_shape=("N", 2, 1, 2), params=None, dtype=F32,
             as_inputs=False, **attrs):
    """One BatchNormalization node; parameters as initializers (or graph inputs)."""
    params = params if params is not None else PARAMS
    node = oh.make_node("BatchNormalization", ["x", "s", "b", "m", "v"], list(outputs),
                        name="bn", **attrs)
    elem = ELEM[np.dtype(dtype)]
    ins = [oh.make_tensor_value_info("x", elem, list(x_shape))]
    inits = []
    for k, v in params.items():
        if as_inputs:
            ins.append(oh.make_tensor_value_info(k, ELEM[v.dtype], list(v.shape)))
        else:
            inits.append(numpy_helper.from_array(v, k))
    outs = [oh.make_tensor_value_info(o, elem, None) for o in outputs if o]
    g = oh.make_graph([node], "bn", ins, outs, inits)
    m = oh.make_model(g, opset_imports=[oh.make_opsetid("", opset)])
    m.ir_version = 8 if opset >= 14 else 4
    return m


def bn_case():
    """The CASES entry of tests/test_onnx_format.py: T-BN-3 through onnxruntime (exact)."""
    return bn_model(opset=15, epsilon=7.0), {"x": X}


BN_CASES = {"BatchNormalization": (bn_case, "batch_normalization")}


@pytest.mark.parametrize("opset", [9, 13, 14, 15])
def test_inference_mode_matches_onnxruntime_exactly_on_t_bn_3(opset):
    m = bn_model(opset=opset, epsilon=7.0, momentum=0.5)
    got, want = run_gradc(m, {"x": X}), run_ort(m, {"x": X})
    assert_bits(got["y"], want["y"])
    ops_used = {n.op for n in gradc.from_onnx(m).nodes}
    assert "batch_normalization" in ops_used and "batch_normalization_training" not in ops_used


@pytest.mark.parametrize("opset", [14, 15])
def test_training_mode_t_bn_4_running_statistics(opset):
    p = dict(PARAMS, m=np.zeros(2, F32), v=np.ones(2, F32))
    m = bn_model(opset=opset, outputs=("y", "rm", "rv"), params=p, training_mode=1,
                 momentum=0.75, epsilon=7.0)
    got, want = run_gradc(m, {"x": X}), run_ort(m, {"x": X})
    assert_bits(got["rm"], np.array([1, 0.25], F32))
    assert_bits(got["rv"], np.array([3, 3], F32))  # ONNX's biased variance (PyTorch: 3.75)
    for k in ("y", "rm", "rv"):
        assert_bits(got[k], want[k])


def test_training_mode_random_against_onnxruntime():
    """Random data (onnxruntime needs all three outputs); dropped outputs import alone."""
    rng = np.random.default_rng(3)
    shape = (3, 4, 5, 2)
    x = (rng.standard_normal(shape) * 2 + 1).astype(F32)
    p = {"s": rng.standard_normal(4).astype(F32), "b": rng.standard_normal(4).astype(F32),
         "m": rng.standard_normal(4).astype(F32), "v": (rng.random(4) + 0.5).astype(F32)}
    full = ("y", "rm", "rv")
    m = bn_model(outputs=full, x_shape=("N", 4, 5, 2), params=p, training_mode=1)
    got, want = run_gradc(m, {"x": x}), run_ort(m, {"x": x})
    # The running statistics are initializers (parameters): their updates are also outputs
    # named <parameter>.next (gradc's state-update convention, gradc.ir.state).
    assert list(got) == list(want) + ["m.next", "v.next"]
    for k in want:
        np.testing.assert_allclose(got[k], want[k], rtol=2e-5, atol=2e-5)
    assert_bits(got["m.next"], got["rm"])
    assert_bits(got["v.next"], got["rv"])
    for outputs in (("y",), ("y", "rm", ""), ("y", "", "rv")):
        part = run_gradc(bn_model(outputs=outputs, x_shape=("N", 4, 5, 2), params=p,
                                  training_mode=1), {"x": x})
        assert list(part) == [o for o in outputs if o] + ["m.next", "v.next"]
        for k in part:
            assert_bits(part[k], got[k])


@pytest.mark.parametrize("dtype", [np.float64, np.float16])
def test_other_dtypes_and_parameters_as_inputs(dtype):
    rng = np.random.default_rng(5)
    x = rng.standard_normal((2, 3, 4)).astype(dtype)
    p = {"s": rng.standard_normal(3).astype(dtype), "b": rng.standard_normal(3).astype(dtype),
         "m": rng.standard_normal(3).astype(dtype), "v": (rng.random(3) + 0.5).astype(dtype)}
    m = bn_model(x_shape=(2, 3, 4), params=p, dtype=dtype, as_inputs=True)
    got, want = run_gradc(m, {"x": x, **p}), run_ort(m, {"x": x, **p})
    tol = 1e-3 if dtype == np.float16 else 1e-12
    np.testing.assert_allclose(got["y"].astype(np.float64), want["y"], rtol=tol, atol=tol)


REFUSED = [
    ("opset 7", dict(opset=7), "opset 7"),
    ("opset 9 training outputs", dict(opset=9, outputs=("y", "mean", "var")), "outputs"),
    ("mode 0 with statistics", dict(opset=15, outputs=("y", "rm", "rv")), "training_mode"),
]


@pytest.mark.parametrize("kw,word", [r[1:] for r in REFUSED], ids=[r[0] for r in REFUSED])
def test_refused_forms_name_node_and_attribute(kw, word):
    m = bn_model(**kw)
    with pytest.raises(gradc.UnsupportedError) as e:
        gradc.from_onnx(m)
    msg = str(e.value)
    assert "BatchNormalization 'bn'" in msg and word in msg, msg


def test_mixed_dtypes_and_bad_shapes():
    p = dict(PARAMS, m=PARAMS["m"].astype(np.float64))
    with pytest.raises(gradc.UnsupportedError, match="input_mean"):
        gradc.from_onnx(bn_model(params=p))
    p = dict(PARAMS, s=np.ones(3, F32))
    with pytest.raises(gradc.VerifyError, match="scale"):
        gradc.from_onnx(bn_model(params=p))
    with pytest.raises(gradc.VerifyError, match="training_mode"):
        gradc.from_onnx(bn_model(training_mode=2))


def test_imported_training_model_exports_a_gradient_graph_that_onnxruntime_runs():
    """from_onnx -> grad(wrt="parameters") -> to_onnx: standard ops, same numbers."""
    p = dict(PARAMS, m=np.zeros(2, F32), v=np.ones(2, F32))
    m = bn_model(outputs=("y", "rm", "rv"), params=p, training_mode=1, momentum=0.75,
                 epsilon=7.0)
    g = gradc.from_onnx(m)
    t = gradc.grad(g, wrt="parameters")
    feeds = {"x": X}
    updates = list(state_outputs(g).values())  # m.next, v.next: no cotangent (gradc.ir.state)
    assert [o.name for o in updates] == ["m.next", "v.next"]
    state = set(updates)
    for o in g.outputs:
        if o in state:
            continue
        shape = [2 if d == "N" else d for d in o.type.shape]
        feeds[f"grad_{o.name}"] = np.ones(shape, F32)
    ref = gradc.compile(t, target="reference")(**feeds)
    exported = gradc.to_onnx(t)
    onnx.checker.check_model(exported, full_check=True)
    assert {n.domain for n in exported.graph.node} <= {""}
    assert "BatchNormalization" not in {n.op_type for n in exported.graph.node}
    got = run_ort(exported, feeds)
    for k in ref:
        np.testing.assert_allclose(got[k], ref[k], rtol=1e-5, atol=1e-6, err_msg=k)
    assert_bits(ref["grad_s"], np.array([0, 0], F32))  # sum of dY * x_hat: the T-BN data


def test_numeric_output_names_of_torchscript_exports():
    """A converter's own nodes get counter names ("0", "1", ...) until bound: an ONNX output
    named by a number (as TorchScript names values) must still import."""
    p = dict(PARAMS, m=np.zeros(2, F32), v=np.ones(2, F32))
    node = oh.make_node("BatchNormalization", ["x", "s", "b", "m", "v"], ["3", "7", "8"],
                        training_mode=1, epsilon=7.0)
    g = oh.make_graph([node], "bn", [oh.make_tensor_value_info("x", TP.FLOAT, [2, 2, 1, 2])],
                      [oh.make_tensor_value_info(o, TP.FLOAT, None) for o in ("3", "7", "8")],
                      [numpy_helper.from_array(v, k) for k, v in p.items()])
    m = oh.make_model(g, opset_imports=[oh.make_opsetid("", 15)])
    m.ir_version = 8
    got, want = run_gradc(m, {"x": X}), run_ort(m, {"x": X})
    for k in want:
        assert_bits(got[k], want[k])


def test_conformance_one_member_per_channel():
    """docs/conformance.md: n = 1 in training mode. gradc and onnxruntime: variance 0, output
    = bias (epsilon > 0); PyTorch refuses ("Expected more than 1 value per channel")."""
    p = dict(PARAMS, m=np.zeros(2, F32), v=np.ones(2, F32))
    m = bn_model(outputs=("y", "rm", "rv"), x_shape=(1, 2), params=p, training_mode=1,
                 momentum=0.5)
    x = np.array([[5, -3]], F32)
    got, want = run_gradc(m, {"x": x}), run_ort(m, {"x": x})
    assert_bits(got["y"], PARAMS["b"].reshape(1, 2))
    assert_bits(got["rv"], np.array([0.5, 0.5], F32))
    for k in want:
        assert_bits(got[k], want[k])
    torch = pytest.importorskip("torch")
    with pytest.raises(ValueError, match="more than 1 value per channel"):
        torch.nn.functional.batch_norm(torch.tensor(x), None, None, training=True)
