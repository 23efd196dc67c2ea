"""ONNX NegativeLogLikelihoodLoss and SoftmaxCrossEntropyLoss import (SPEC-training.md §21):
the imported graph against onnxruntime on the original model; refused and rejected forms."""

from __future__ import annotations

import numpy as np
import pytest

import gradc
from helpers import assert_bits

pytest.importorskip("onnxruntime")
from onnx_import_helpers import run_ort  # noqa: E402
from training_onnx_cases import loss_model  # noqa: E402

SHAPE = (3, 5, 2)


def _feeds(seed: int, labels_dtype=np.int64, log_probs: bool = True, ignore: int | None = None):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(SHAPE).astype(np.float32)
    if log_probs:
        x = (x - np.log(np.exp(x).sum(1, keepdims=True))).astype(np.float32)
    t = rng.integers(0, SHAPE[1], (SHAPE[0], SHAPE[2])).astype(labels_dtype)
    if ignore is not None:
        t[0, 1] = ignore
    return {"x": x, "t": t, "w": rng.uniform(0.5, 2, SHAPE[1]).astype(np.float32)}


def _compare(m, feeds, exact_none=True):
    g = gradc.from_onnx(m)
    want = run_ort(m, feeds)
    got = gradc.compile(g, target="reference")(**feeds)
    assert list(got) == list(want)
    for k in want:
        np.testing.assert_allclose(got[k], want[k], rtol=2e-6, atol=1e-7, err_msg=k)
    return g, got


@pytest.mark.parametrize("opset", [12, 13, 22])
@pytest.mark.parametrize("reduction", ["none", "sum", "mean"])
@pytest.mark.parametrize("weights, ignore", [(False, None), (True, None), (True, 3), (False, -1)])
def test_nll_matches_onnxruntime(opset, reduction, weights, ignore):
    attrs = {"reduction": reduction} | ({} if ignore is None else {"ignore_index": ignore})
    m = loss_model("NegativeLogLikelihoodLoss", SHAPE, weights=weights, opset=opset, **attrs)
    feeds = _feeds(opset, ignore=ignore)
    if not weights:
        del feeds["w"]
    g, got = _compare(m, feeds)
    assert any(n.op == "one_hot" for n in g.nodes)
    if reduction == "none":
        assert_bits(got["loss"], run_ort(m, feeds)["loss"])  # one product per element: exact


def test_nll_int32_labels_and_symbolic_batch():
    m = loss_model("NegativeLogLikelihoodLoss", ("N", 5, 2), labels_dtype=np.int32)
    feeds = _feeds(1, labels_dtype=np.int32)
    g, _ = _compare(m, feeds)
    assert g.inputs[0].type.shape == ("N", 5, 2)


@pytest.mark.parametrize("reduction", ["none", "sum", "mean"])
@pytest.mark.parametrize("weights, ignore", [(False, None), (True, 1), (True, None)])
def test_softmax_cross_entropy_matches_onnxruntime(reduction, weights, ignore):
    attrs = {"reduction": reduction} | ({} if ignore is None else {"ignore_index": ignore})
    m = loss_model("SoftmaxCrossEntropyLoss", SHAPE, weights=weights, log_prob=True, **attrs)
    feeds = _feeds(5, log_probs=False, ignore=ignore)
    if not weights:
        del feeds["w"]
    g, _ = _compare(m, feeds)
    assert any(n.op == "log_softmax" for n in g.nodes)


def test_refused_and_rejected_forms():
    m = loss_model("NegativeLogLikelihoodLoss", SHAPE, labels_dtype=np.float32)
    with pytest.raises(gradc.UnsupportedError, match="NegativeLogLikelihoodLoss 'loss_node'.*"
                                                     "target.*dtype float32"):
        gradc.from_onnx(m)
    m = loss_model("NegativeLogLikelihoodLoss", SHAPE, reduction="average")
    with pytest.raises(gradc.VerifyError, match="NegativeLogLikelihoodLoss 'loss_node'.*"
                                                "reduction: expected"):
        gradc.from_onnx(m)
