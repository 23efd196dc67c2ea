"""ONNX Dropout import (SPEC-training.md §21): identity in inference, gradc's dropout with an
``rng_state`` input and ``rng_state_out`` output in training mode."""

from __future__ import annotations

import numpy as np
import pytest

import gradc
from gradc import ops
from helpers import assert_bits

pytest.importorskip("onnxruntime")
from onnx import helper as oh  # noqa: E402

from onnx_import_helpers import cross_check, run_ort  # noqa: E402
from training_onnx_cases import dropout_model, model  # noqa: E402

X = np.arange(24, dtype=np.float32).reshape(2, 3, 4) - 11.5


@pytest.mark.parametrize("training, ratio, opset", [
    (False, 0.3, 13), (None, 0.3, 13), (None, None, 12), (False, 0.5, 22), (None, None, 10),
    (None, None, 11), (None, None, 7)])
def test_inference_mode_is_the_input_and_an_all_true_mask(training, ratio, opset):
    m = dropout_model(training, ratio, opset, mask=opset >= 10)
    g = gradc.from_onnx(m)
    assert [v.name for v in g.inputs] == ["x"]
    assert not any(n.op == "random_generator" for n in g.nodes)
    if opset in (10, 11):  # onnxruntime's mask is all false there; ONNX's reference: all true
        from onnx.reference import ReferenceEvaluator
        got = gradc.compile(g, target="reference")(x=X)
        want = ReferenceEvaluator(m).run(None, {"x": X})
        assert_bits(got["mask0"], want[0])
        assert_bits(got["y"], run_ort(m, {"x": X})["y"])
        assert not run_ort(m, {"x": X})["mask0"].any()  # docs/conformance.md
        return
    cross_check(m, {"x": X})


def test_training_mode_draws_from_a_state_input_in_order():
    m = dropout_model(True, 0.25, count=2)
    g = gradc.from_onnx(m)
    assert [v.name for v in g.inputs] == ["x", "rng_state"]
    assert [v.name for v in g.outputs] == ["mask0", "mask1", "y", "rng_state_out"]
    assert g.inputs[1].type.dtype.value == "uint32" and g.inputs[1].type.shape == (6,)
    state = np.array([1, 2, 3, 4, 5, 6], np.uint32)
    got = gradc.compile(g, target="reference")(x=X, rng_state=state)
    want = gradc.Graph("w")
    x = want.input("x", "float32", (2, 3, 4))
    s = want.input("s", "uint32", (6,))
    h, m0, s1 = ops.dropout(x, s, 0.25)
    y, m1, s2 = ops.dropout(h, s1, 0.25)
    for v, name in ((m0, "mask0"), (m1, "mask1"), (y, "y"), (s2, "rng_state_out")):
        want.output(v, name)
    ref = gradc.compile(want, target="reference")(x=X, s=state)
    for k in ref:
        assert_bits(got[k], ref[k])
    # the counter: 1 + 2 x ceil(24 / 4)
    assert_bits(got["rng_state_out"], np.array([13, 2, 3, 4, 5, 6], np.uint32))
    assert [v.name for v in gradc.grad(g).outputs][-1] == "grad_x"  # the state gets none


def test_training_mode_ratio_zero_matches_onnxruntime():
    m = dropout_model(True, 0.0)
    ort_out = run_ort(m, {"x": X})
    ex = gradc.compile(gradc.from_onnx(m), target="reference")
    got = ex(x=X, rng_state=np.zeros(6, np.uint32))
    assert_bits(got["y"], ort_out["y"])
    assert_bits(got["mask0"], ort_out["mask0"])


def test_training_mode_keeps_the_expected_fraction_like_onnxruntime():
    m = dropout_model(True, 0.5, shape=(64, 64))
    x = np.ones((64, 64), np.float32)
    ex = gradc.compile(gradc.from_onnx(m), target="reference")
    got = ex(x=x, rng_state=np.arange(6, dtype=np.uint32))
    ort_mask = run_ort(m, {"x": x})["mask0"]
    assert abs(got["mask0"].mean() - 0.5) < 0.03 and abs(ort_mask.mean() - 0.5) < 0.03
    assert set(np.unique(got["y"])) == {0.0, 2.0}  # statistical, not bitwise, agreement


def test_state_names_are_fresh_when_taken():
    node = oh.make_node("Dropout", ["rng_state", "r", "tm"], ["rng_state_out"], seed=7)
    m = model([node], {"rng_state": (np.float32, [4])}, {"rng_state_out": np.float32},
              {"r": np.array(0.5, np.float32), "tm": np.array(True)})
    g = gradc.from_onnx(m)
    assert [v.name for v in g.inputs] == ["rng_state", "rng_state_1"]
    assert [v.name for v in g.outputs] == ["rng_state_out", "rng_state_out_1"]


def test_refused_and_rejected_forms():
    node = oh.make_node("Dropout", ["x", "r", "tm"], ["y"], name="d")
    m = model([node], {"x": (np.float32, [4]), "tm": (np.bool_, [])}, {"y": np.float32},
              {"r": np.array(0.5, np.float32)})
    with pytest.raises(gradc.UnsupportedError, match="Dropout 'd'.*training_mode"):
        gradc.from_onnx(m)
    with pytest.raises(gradc.VerifyError, match="Dropout 'drop0'.*dropout: ratio: expected"):
        gradc.from_onnx(dropout_model(True, 1.0))


def test_training_graph_exports_to_standard_onnx():
    onnx = pytest.importorskip("onnx")
    g = gradc.grad(gradc.from_onnx(dropout_model(True, 0.4, count=2)))
    exported = gradc.to_onnx(g)
    onnx.checker.check_model(exported, full_check=True)
    assert {o.domain for o in exported.opset_import} == {""}
    feeds = {"x": X, "rng_state": np.array([9, 8, 7, 6, 5, 4], np.uint32),
             "grad_y": np.ones_like(X)}
    want = gradc.compile(g, target="reference")(**feeds)
    got = run_ort(exported, feeds)
    for k in want:
        assert_bits(got[k], want[k])
