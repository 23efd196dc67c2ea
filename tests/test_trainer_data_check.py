"""Trainer.step checks a batch as `gradc train` checks its data file (gradc.train_data's
check_batch, shared by both), before the step runs: labels outside the class range, NaN or
infinite inputs and token labels of the wrong shape are an InputError naming the array, the
first bad value and its index, and the trainer's state (parameters, optimizer state, step
counter) is left exactly as it was, on every target. Also Adam's eps in float16."""

from __future__ import annotations

import numpy as np
import pytest

import gradc
from gradc import ops
from gradc.optim import SGD, Adam, AdamW
from gradc.train_data import check_batch, data_spec

TARGETS = ("reference", "numpy", "c", "onnx")
F32 = np.float32


def classifier(classes: int = 10, dtype: str = "float32") -> gradc.Graph:
    r = np.random.default_rng(0)
    g = gradc.Graph("clf")
    x = g.input("x", dtype, ("N", 4))
    w = g.parameter("w", r.standard_normal((classes, 4)).astype(dtype))
    with g:
        y = ops.gemm(x, w, trans_b=True)
    g.output(y, "logits")
    return g


def token_model(v: int = 5) -> gradc.Graph:
    """x [N, T, 3] -> logits [N, T, V] (a reshape around a gemm)."""
    r = np.random.default_rng(1)
    g = gradc.Graph("tok")
    x = g.input("x", "float32", (2, 4, 3))
    w = g.parameter("w", r.standard_normal((v, 3)).astype(F32))
    with g:
        y = ops.reshape(ops.gemm(ops.reshape(x, (8, 3)), w, trans_b=True), (2, 4, v))
    g.output(y, "logits")
    return g


def snapshot(tr: gradc.Trainer) -> dict[str, np.ndarray]:
    return tr.state_dict()


def assert_same_state(a: dict, b: dict) -> None:
    assert a.keys() == b.keys()
    for k in a:
        np.testing.assert_array_equal(a[k], b[k], err_msg=k)


def batch(n: int = 6, classes: int = 10) -> dict[str, np.ndarray]:
    r = np.random.default_rng(2)
    return {"x": r.standard_normal((n, 4)).astype(F32),
            "labels": r.integers(0, classes, n).astype(np.int64)}


@pytest.mark.parametrize("target", TARGETS)
def test_a_label_out_of_range_is_refused_and_the_state_is_untouched(target):
    tr = gradc.Trainer(classifier(), Adam(lr=0.1), loss="cross_entropy", target=target)
    tr.step(**batch())  # some optimizer state and a step counter of 1 to keep
    before = snapshot(tr)
    bad = batch()
    bad["labels"][3] = 10
    with pytest.raises(gradc.InputError) as e:
        tr.step(**bad)
    msg = str(e.value)
    assert msg == ("Trainer.step: array 'labels': 1 label(s) outside the class range [0, 10), "
                   "the first 10 at index [3]"), msg
    assert_same_state(before, snapshot(tr))
    assert tr.steps == 1
    tr.step(**batch())  # the trainer still works
    assert tr.steps == 2


@pytest.mark.parametrize("target", TARGETS)
def test_ignore_index_is_let_through_and_counts_nowhere(target):
    tr = gradc.Trainer(classifier(), SGD(0.1), loss="cross_entropy", ignore_index=-100,
                       target=target)
    b = batch()
    b["labels"][::2] = -100
    before = snapshot(tr)
    with pytest.raises(gradc.InputError, match=r"outside the class range \[0, 10\) or -100, "
                                               r"the first -1 at index \[1\]"):
        tr.step(x=b["x"], labels=np.where(np.arange(6) == 1, -1, b["labels"]))
    assert_same_state(before, snapshot(tr))
    loss = tr.step(**b)
    counted = b["labels"] != -100  # the mean over the three counted labels, as PyTorch's
    logits = b["x"].astype(np.float64) @ before["w"].T.astype(np.float64)
    logp = logits - np.log(np.exp(logits).sum(1, keepdims=True))
    want = -logp[counted, b["labels"][counted]].mean()
    assert loss == pytest.approx(want, rel=1e-6)


@pytest.mark.parametrize("target", TARGETS)
def test_nan_or_infinite_inputs_are_refused_as_the_data_file_is(target):
    tr = gradc.Trainer(classifier(), AdamW(lr=0.1), loss="cross_entropy", target=target)
    tr.step(**batch())
    before = snapshot(tr)
    b = batch()
    b["x"][2, 1] = np.nan
    b["x"][4, 0] = np.inf
    with pytest.raises(gradc.InputError, match=r"Trainer.step: array 'x': 2 value\(s\) are NaN "
                                               r"or infinite, the first nan at index \[2, 1\]"):
        tr.step(**b)
    assert_same_state(before, snapshot(tr))


def test_token_labels_of_the_wrong_shape_name_the_class_axis():
    tr = gradc.Trainer(token_model(), SGD(0.1), loss="cross_entropy", target="reference")
    r = np.random.default_rng(0)
    x = r.standard_normal((2, 4, 3)).astype(F32)
    with pytest.raises(gradc.InputError) as e:  # class_axis 1 by default: labels (2, 5)
        tr.step(x=x, labels=r.integers(0, 5, (2, 4)))
    msg = str(e.value)
    assert "expected shape (2, 5)" in msg and "class axis 1" in msg and "--class-axis" in msg
    tr = gradc.Trainer(token_model(), SGD(0.1), loss="cross_entropy", class_axis=-1,
                       target="reference")
    assert np.isfinite(tr.step(x=x, labels=r.integers(0, 5, (2, 4))))


def test_the_command_line_and_the_api_share_the_check(tmp_path):
    """load_dataset (gradc train) and Trainer.step say the same about the same labels."""
    g = classifier()
    tr = gradc.Trainer(g, SGD(0.1), loss="cross_entropy", target="reference")
    b = batch()
    b["labels"][5] = -3
    with pytest.raises(gradc.InputError) as api:
        tr.step(**b)
    np.savez(tmp_path / "d.npz", **b)
    from gradc.train_data import load_data
    with pytest.raises(gradc.InputError) as cli:
        load_data(tmp_path / "d.npz", tr.batch_spec)
    tail = "array 'labels': 1 label(s) outside the class range [0, 10), the first -3 at index [5]"
    assert str(api.value).endswith(tail) and str(cli.value).endswith(tail)
    spec = data_spec(g, tr.step_graph)
    assert spec == tr.batch_spec and spec.classes == 10
    check_batch("x", batch(), spec)  # a good batch passes


def test_float16_adam_eps_that_rounds_to_zero_is_refused():
    g = classifier(dtype="float16")
    with pytest.raises(gradc.VerifyError) as e:
        gradc.training_step(g, Adam(), loss="cross_entropy")
    msg = str(e.value)
    assert msg.startswith("Adam: eps: 1e-08 rounds to 0 in float16, the dtype of parameter "
                          "'w'") and "5.96e-08" in msg
    with pytest.raises(gradc.VerifyError, match="AdamW: eps"):
        gradc.Trainer(g, AdamW(), loss="cross_entropy", target="reference")
    tr = gradc.Trainer(g, AdamW(eps=1e-4), loss="cross_entropy", target="reference")
    b = {"x": batch()["x"].astype(np.float16), "labels": batch()["labels"]}
    for _ in range(3):
        assert np.isfinite(tr.step(**b))
    gradc.training_step(g, Adam(eps=0.0), loss="cross_entropy")  # eps 0 asked for: allowed


def test_an_input_named_self_is_fed_by_name():
    """fuzz/regressions/ir: ``Trainer.step(self, **batch)`` could not take a model input
    named ``self`` (TypeError: multiple values for argument 'self'); ``self`` is
    positional-only now, as in ``Executable.__call__``."""
    g = gradc.Graph("s")
    x = g.input("self", "float32", (2, 3))
    w = g.parameter("w", np.ones((3, 3), F32))
    g.output(ops.gemm(x, w), "y")
    t = gradc.Trainer(g, SGD(0.1), loss="mse", target="numpy")
    # executable_for too (fuzz seed 13131: `gradc train` of such a model exited 70 there)
    assert t.executable_for(self=np.ones((2, 3), F32),
                            target=np.zeros((2, 3), F32)) is t.executable
    loss = t.step(self=np.ones((2, 3), F32), target=np.zeros((2, 3), F32))
    assert loss == 9.0 and t.steps == 1
