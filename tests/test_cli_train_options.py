"""`gradc train` and `gradc train-step` with the options of transformer fine-tuning: a class
axis and ignore_index for token labels, gradient clipping, a schedule carried by the ONNX step,
--train/--frozen patterns, and --val-data's held-out loss and token accuracy."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto as TP, helper as oh, numpy_helper as nh

import gradc
import gradc.cli_train as ct
from gradc.cli import main
from gradc.ir.ops import REGISTRY
from gradc.optim import AdamW, WarmupCosine, WarmupLinear
from test_cli_train import quiet_session

T, F, V = 4, 3, 5


def token_model() -> onnx.ModelProto:
    """x [N, T, F] -> MatMul -> Relu -> MatMul: logits [N, T, V] (a tiny language-model head)."""
    r = np.random.default_rng(0)
    nodes = [oh.make_node("MatMul", ["x", "enc.w"], ["h"]), oh.make_node("Relu", ["h"], ["a"]),
             oh.make_node("MatMul", ["a", "head.w"], ["logits"])]
    inits = [nh.from_array(r.standard_normal((F, 8)).astype(np.float32), "enc.w"),
             nh.from_array(r.standard_normal((8, V)).astype(np.float32), "head.w")]
    g = oh.make_graph(nodes, "tok", [oh.make_tensor_value_info("x", TP.FLOAT, ["N", T, F])],
                      [oh.make_tensor_value_info("logits", TP.FLOAT, ["N", T, V])], inits)
    return oh.make_model(g, opset_imports=[oh.make_opsetid("", 17)])


def tokens(n: int, seed: int) -> dict[str, np.ndarray]:
    """Labels that follow the sign pattern of x (learnable), a quarter of them padding."""
    r = np.random.default_rng(seed)
    x = r.standard_normal((n, T, F)).astype(np.float32)
    labels = ((x[..., 0] > 0) * 2 + (x[..., 1] > 0)).astype(np.int64)
    labels[r.random((n, T)) < 0.25] = -100
    return {"x": x, "labels": labels}


@pytest.fixture()
def files(tmp_path):
    onnx.save(token_model(), tmp_path / "tok.onnx")
    np.savez(tmp_path / "train.npz", **tokens(64, 1))
    np.savez(tmp_path / "val.npz", **tokens(24, 2))
    return tmp_path


LM = ["--loss", "cross_entropy", "--class-axis", "-1", "--ignore-index", "-100"]


@pytest.mark.parametrize("schedule", ["warmup-linear", pytest.param(
    "warmup-cosine", marks=pytest.mark.skipif("cos" not in REGISTRY, reason="no cos yet"))])
def test_train_step_onnx_carries_schedule_clipping_and_patterns(files, capsys, schedule):
    out = files / "step.onnx"
    assert main(["train-step", str(files / "tok.onnx"), "-o", str(out), *LM, "--optimizer",
                 "adamw", "--lr", "0.05", "--max-grad-norm", "0.5", "--schedule", schedule,
                 "--warmup-steps", "2", "--total-steps", "6", "--train", "head.*"]) == 0
    cls = WarmupLinear if schedule == "warmup-linear" else WarmupCosine
    assert f"schedule={cls.__name__}(2, 6)" in capsys.readouterr().out
    m = onnx.load(out)
    onnx.checker.check_model(m, full_check=True)
    sess = quiet_session(str(out))
    outputs = [o.name for o in sess.get_outputs()]
    assert outputs == ["loss", "head.w.next", "head.w.exp_avg.next", "head.w.exp_avg_sq.next"]
    trainer = gradc.Trainer(gradc.from_onnx(files / "tok.onnx"),
                            AdamW(lr=0.05, schedule=cls(2, 6)), loss="cross_entropy",
                            class_axis=-1, ignore_index=-100, max_grad_norm=0.5,
                            parameters=["head.*"], target="reference")
    data = tokens(64, 1)
    state: dict[str, np.ndarray] = {}
    for t in range(1, 9):  # past total_steps too
        b = {k: v[(t - 1) * 8:t * 8] for k, v in data.items()}
        loss, *new = sess.run(outputs, {**b, "step": np.array([t]), **state})
        state = {name[:-len(".next")]: v for name, v in zip(outputs[1:], new)}
        assert float(loss) == pytest.approx(trainer.step(**b), rel=1e-5)
    np.testing.assert_allclose(state["head.w"], trainer.parameters["head.w"], rtol=1e-5,
                               atol=1e-6)


def test_train_with_val_data_reports_held_out_token_figures(files, capsys):
    out = files / "t.onnx"
    assert main(["train", str(files / "tok.onnx"), "--data", str(files / "train.npz"),
                 "--val-data", str(files / "val.npz"), "-o", str(out), *LM, "--optimizer",
                 "adamw", "--lr", "0.05", "--epochs", "3", "--batch-size", "16",
                 "--max-grad-norm", "1.0", "--schedule", "warmup-linear", "--warmup-steps",
                 "2", "--total-steps", "12", "-t", "numpy", "--curve", ""]) == 0
    lines = [s for s in capsys.readouterr().out.splitlines() if s.startswith("epoch ")]
    assert len(lines) == 3
    for s in lines:
        assert ", train token accuracy " in s and ", val loss " in s and \
            ", val token accuracy " in s, s
    printed_loss = float(lines[-1].split("val loss ")[1].split(",")[0])
    printed_acc = float(lines[-1].split("val token accuracy ")[1].split("%")[0])
    # The held-out figures of the last epoch are those of the exported model: check them with
    # onnxruntime and a mean over the labels that are not ignored (PyTorch's mean).
    val = tokens(24, 2)
    logits = quiet_session(str(out)).run(None, {"x": val["x"]})[0].astype(np.float64)
    logp = logits - logits.max(-1, keepdims=True)
    logp -= np.log(np.exp(logp).sum(-1, keepdims=True))
    keep = val["labels"] != -100
    nll = -np.take_along_axis(logp, np.where(keep, val["labels"], 0)[..., None], -1)[..., 0]
    assert printed_loss == pytest.approx(nll[keep].mean(), abs=6e-5)
    acc = 100 * np.mean(logits.argmax(-1)[keep] == val["labels"][keep])
    assert abs(printed_acc - acc) <= 0.05 + 1e-9


def test_token_labels_without_class_axis_name_it(files, capsys):
    assert main(["train", str(files / "tok.onnx"), "--data", str(files / "train.npz"), "-o",
                 str(files / "t.onnx"), "--loss", "cross_entropy", "--ignore-index", "-100",
                 "-t", "reference"]) == 2
    err = capsys.readouterr().err
    assert "array 'labels': expected shape (examples, 5)" in err
    assert "class axis 1" in err and "--class-axis" in err
    assert not (files / "t.onnx").exists()


def test_train_and_frozen_patterns_select_what_changes(files):
    out = files / "t.onnx"
    assert main(["train", str(files / "tok.onnx"), "--data", str(files / "train.npz"), "-o",
                 str(out), *LM, "--train", "*.w", "--frozen", "enc.*", "-t", "reference",
                 "--curve", ""]) == 0
    before = {t.name: nh.to_array(t) for t in token_model().graph.initializer}
    after = {t.name: nh.to_array(t) for t in onnx.load(out).graph.initializer}
    assert np.array_equal(after["enc.w"], before["enc.w"])
    assert not np.array_equal(after["head.w"], before["head.w"])


@pytest.mark.parametrize("flags, match", [
    (["--schedule", "warmup-cosine"], "--schedule warmup-cosine: needs --total-steps"),
    (["--total-steps", "10"], "--total-steps: only with --schedule"),
    (["--schedule", "warmup-linear", "--warmup-steps", "5", "--total-steps", "3"],
     "WarmupLinear: total_steps: expected at least warmup_steps (5), got 3"),
    (["--train", "nothing.*"], "parameters[0]: expected a name or pattern that matches"),
    (["--max-grad-norm", "1", "--loss", "mse", "--class-axis", "2"],
     "class_axis: only for loss='cross_entropy'"),
])
def test_step_flags_are_refused_before_training(files, capsys, monkeypatch, flags, match):
    monkeypatch.setattr(ct, "Trainer", lambda *a, **k: pytest.fail("training started"))
    assert main(["train", str(files / "tok.onnx"), "--data", str(files / "train.npz"), "-o",
                 str(files / "t.onnx"), *LM, *flags]) == 2
    assert match in capsys.readouterr().err
