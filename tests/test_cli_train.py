"""``gradc train-step`` and ``gradc train`` (API.md "Command line"): the step as standard ONNX
that a plain onnxruntime loop trains with, training from an .npz file, and every way it refuses
bad input (exit 2, nothing written), a diverging loss (exit 1) and Ctrl-C (exit 130)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto as TP, helper as oh, numpy_helper as nh

import gradc
from gradc.cli import main

F32 = np.float32
ROOT = Path(__file__).resolve().parents[1]


def bn_mlp_model(batch: int | str = "N", features: int = 4, classes: int = 3) -> onnx.ModelProto:
    """Gemm -> BatchNormalization (training mode) -> Relu -> Gemm: logits."""
    r = np.random.default_rng(0)
    nodes = [oh.make_node("Gemm", ["x", "w1", "b1"], ["h"], transB=1),
             oh.make_node("BatchNormalization", ["h", "s", "b", "rm", "rv"], ["n", "rm2", "rv2"],
                          training_mode=1, momentum=0.9),
             oh.make_node("Relu", ["n"], ["a"]),
             oh.make_node("Gemm", ["a", "w2", "b2"], ["logits"], transB=1)]
    inits = [nh.from_array(r.standard_normal((8, features)).astype(F32) * 0.5, "w1"),
             nh.from_array(np.zeros(8, F32), "b1"),
             nh.from_array(np.ones(8, F32), "s"), nh.from_array(np.zeros(8, F32), "b"),
             nh.from_array(np.zeros(8, F32), "rm"), nh.from_array(np.ones(8, F32), "rv"),
             nh.from_array(r.standard_normal((classes, 8)).astype(F32) * 0.5, "w2"),
             nh.from_array(np.zeros(classes, F32), "b2")]
    g = oh.make_graph(nodes, "bn_mlp",
                      [oh.make_tensor_value_info("x", TP.FLOAT, [batch, features])],
                      [oh.make_tensor_value_info("logits", TP.FLOAT, [batch, classes])], inits)
    return oh.make_model(g, opset_imports=[oh.make_opsetid("", 15)])


def blobs(n: int = 96, seed: int = 1) -> dict[str, np.ndarray]:
    """Three separable classes of 4-feature points."""
    r = np.random.default_rng(seed)
    labels = r.integers(0, 3, n)
    centers = np.array([[2, 0, 0, 0], [0, 2, 0, 0], [0, 0, 2, 0]], F32)
    x = (centers[labels] + r.standard_normal((n, 4)) * 0.5).astype(F32)
    return {"x": x, "labels": labels.astype(np.int64)}


@pytest.fixture()
def files(tmp_path):
    model = tmp_path / "model.onnx"
    onnx.save(bn_mlp_model(), model)
    data = tmp_path / "data.npz"
    np.savez(data, **blobs())
    return tmp_path, str(model), str(data)


def quiet_session(m: onnx.ModelProto | str) -> ort.InferenceSession:
    opts = ort.SessionOptions()
    opts.log_severity_level = 3  # the state inputs have initializers: onnxruntime warns
    src = m if isinstance(m, str) else m.SerializeToString()
    return ort.InferenceSession(src, opts)


# -- train-step ------------------------------------------------------------------------------

def test_train_step_onnx_trains_in_plain_onnxruntime(files, capsys):
    tmp, model, _ = files
    out = tmp / "step.onnx"
    assert main(["train-step", model, "-o", str(out), "--optimizer", "sgd", "--lr", "0.1",
                 "--momentum", "0.9", "--loss", "cross_entropy"]) == 0
    said = capsys.readouterr().out
    # 14 state tensors: 6 trained parameters, 2 running statistics, 6 momentum buffers
    assert "feed: x, labels, step" in said and "state: 14 tensors" in said
    m = onnx.load(out)
    onnx.checker.check_model(m, full_check=True)
    assert {n.domain for n in m.graph.node} <= {""}
    sess = quiet_session(m)
    outputs = [o.name for o in sess.get_outputs()]
    assert outputs[0] == "loss" and all(o.endswith(".next") for o in outputs[1:])
    trainer = gradc.Trainer(gradc.from_onnx(model), gradc.optim.SGD(0.1, momentum=0.9),
                            loss="cross_entropy", target="reference")
    data = blobs()
    state: dict[str, np.ndarray] = {}
    for t in range(1, 4):
        batch = {k: v[(t - 1) * 8:t * 8] for k, v in data.items()}
        loss, *new = sess.run(outputs, {**batch, "step": np.array([t]), **state})
        state = {name[:-len(".next")]: v for name, v in zip(outputs[1:], new)}
        want = trainer.step(**batch)
        # onnxruntime sums in its own order: float32 rounding, a few ulps per step.
        assert float(loss) == pytest.approx(want, rel=1e-5)
    for k, v in trainer.state_dict().items():
        if k != "step":
            np.testing.assert_allclose(state[k], v, rtol=1e-4, atol=1e-6, err_msg=k)


def test_train_step_text_ir_and_flag_errors(files, capsys):
    tmp, model, _ = files
    out = tmp / "step.ir"
    assert main(["train-step", model, "-o", str(out), "--loss", "mse", "--frozen", "w1"]) == 0
    assert (tmp / "step.ir.npz").exists()
    text = out.read_text()
    assert "%target: f32[N,3]" in text and "param %w1:" not in text
    capsys.readouterr()
    for argv, match in [
        ([], "is not a loss: pass --loss cross_entropy"),
        (["--loss", "cross_entropy", "--optimizer", "adam", "--momentum", "0.9"],
         "--momentum: only for --optimizer sgd"),
        (["--loss", "cross_entropy", "--frozen", "nope"],
         "frozen[0]: expected a name or pattern that matches a trainable parameter"),
        (["--loss", "cross_entropy", "--optimizer", "sgd", "--nesterov"],
         "nesterov: needs momentum > 0"),
    ]:
        bad = tmp / "bad.onnx"
        assert main(["train-step", model, "-o", str(bad), *argv]) == 2
        assert match in capsys.readouterr().err
        assert not bad.exists()


# -- train -----------------------------------------------------------------------------------

def run_train(model: str, data: str, out: Path, *extra: str) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "gradc", "train", model, "--data", data, "-o", str(out),
           "--loss", "cross_entropy", *extra]
    return subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, timeout=300)


def test_train_learns_and_writes_model_curve_checkpoint(files, capsys):
    tmp, model, data = files
    out = tmp / "trained.onnx"
    ck = tmp / "ck.npz"
    assert main(["train", model, "--data", data, "-o", str(out), "--loss", "cross_entropy",
                 "--optimizer", "adam", "--lr", "0.05", "--epochs", "4", "--batch-size", "16",
                 "--checkpoint", str(ck), "-t", "numpy"]) == 0
    said = capsys.readouterr().out.splitlines()
    epochs = [line for line in said if line.startswith("epoch ")]
    assert len(epochs) == 4
    means = [float(line.split("train loss ")[1].split(",")[0]) for line in epochs]
    assert means[-1] < means[0] / 2
    assert "accuracy" in epochs[-1] and float(epochs[-1].split("train accuracy ")[1][:4]) > 90
    assert (tmp / "trained.loss.svg").read_text().startswith("<svg")
    with np.load(ck) as z:
        assert int(z["step"]) == 4 * 6  # 96 examples in batches of 16
    sess = quiet_session(str(out))
    assert [i.name for i in sess.get_inputs()] == ["x"]
    d = blobs(60, seed=7)  # held-out points of the same classes
    pred = sess.run(None, {"x": d["x"]})[0].argmax(1)
    assert np.mean(pred == d["labels"]) > 0.9


def test_resume_continues_where_the_checkpoint_stopped(files, capsys):
    tmp, model, data = files
    common = ["--loss", "cross_entropy", "--optimizer", "sgd", "--lr", "0.1", "--momentum",
              "0.9", "--batch-size", "16", "-t", "reference", "--curve", ""]
    assert main(["train", model, "--data", data, "-o", str(tmp / "a.onnx"), "--epochs", "3",
                 *common]) == 0
    assert main(["train", model, "--data", data, "-o", str(tmp / "b1.onnx"), "--epochs", "2",
                 "--checkpoint", str(tmp / "ck.npz"), *common]) == 0
    assert main(["train", model, "--data", data, "-o", str(tmp / "b.onnx"), "--epochs", "3",
                 "--resume", str(tmp / "ck.npz"), *common]) == 0
    capsys.readouterr()
    a, b = onnx.load(tmp / "a.onnx"), onnx.load(tmp / "b.onnx")
    for x, y in zip(a.graph.initializer, b.graph.initializer):
        np.testing.assert_array_equal(nh.to_array(x), nh.to_array(y), err_msg=x.name)
    assert not (tmp / "a.loss.svg").exists()  # --curve '' writes none


@pytest.mark.parametrize("arrays, match", [
    ({"x": blobs()["x"]}, "labels"),
    ({"x": blobs()["x"][:, :3], "labels": blobs()["labels"]}, "'x'"),
    ({"x": blobs()["x"], "labels": blobs()["labels"] + 2}, "'labels'"),
    ({"x": blobs()["x"].astype(np.float64), "labels": blobs()["labels"]}, "'x'"),
    ({"x": blobs()["x"][:10], "labels": blobs()["labels"]}, "examples"),
    ({"x": np.full((4, 4), np.nan, F32), "labels": np.zeros(4, np.int64)}, "'x'"),
])
def test_bad_data_exits_2_naming_the_array_and_writes_nothing(files, arrays, match):
    tmp, model, _ = files
    data = tmp / "bad.npz"
    np.savez(data, **arrays)
    out = tmp / "t.onnx"
    r = run_train(model, str(data), out, "--checkpoint", str(tmp / "ck.npz"))
    assert r.returncode == 2, r.stderr
    assert r.stderr.startswith("gradc: error: ") and match in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1
    assert sorted(p.name for p in tmp.iterdir()) == ["bad.npz", "data.npz", "model.onnx"]


@pytest.mark.parametrize("content, match", [(b"", "empty file"), (b"not a zip", "bad.npz")])
def test_empty_or_broken_data_file(files, content, match, capsys):
    tmp, model, _ = files
    data = tmp / "bad.npz"
    data.write_bytes(content)
    assert main(["train", model, "--data", str(data), "-o", str(tmp / "t.onnx"),
                 "--loss", "cross_entropy"]) == 2
    assert match in capsys.readouterr().err
    assert not (tmp / "t.onnx").exists()


def test_fixed_batch_and_output_folder_checks(tmp_path, capsys):
    model = tmp_path / "fixed.onnx"
    onnx.save(bn_mlp_model(batch=8), model)
    data = tmp_path / "d.npz"
    np.savez(data, **blobs(20))
    assert main(["train", str(model), "--data", str(data), "-o", str(tmp_path / "t.onnx"),
                 "--loss", "cross_entropy", "--batch-size", "16"]) == 2
    assert "fixed batch of 8" in capsys.readouterr().err
    assert main(["train", str(model), "--data", str(data), "-o", str(tmp_path / "no/t.onnx"),
                 "--loss", "cross_entropy"]) == 2
    assert "does not exist" in capsys.readouterr().err
    # The model's batch of 8 is the default; 20 examples give 2 full batches, 4 dropped.
    assert main(["train", str(model), "--data", str(data), "-o", str(tmp_path / "t.onnx"),
                 "--loss", "cross_entropy", "-t", "reference"]) == 0
    said = capsys.readouterr().out
    assert "20 examples, the last 4 dropped (fixed batch), batch 8, 2 steps per epoch" in said


def test_a_diverging_loss_stops_at_its_step(files):
    tmp, model, data = files
    out = tmp / "t.onnx"
    r = run_train(model, data, out, "--optimizer", "sgd", "--lr", "1e30", "--epochs", "3",
                  "-t", "numpy")
    assert r.returncode == 1, r.stderr
    assert "training stopped: the loss is" in r.stderr and "at step" in r.stderr
    assert not out.exists() and not (tmp / "t.loss.svg").exists()


def test_ctrl_c_leaves_the_last_checkpoint_whole(files):
    tmp, model, _ = files
    big = tmp / "big.npz"
    np.savez(big, **blobs(4096))
    out, ck = tmp / "t.onnx", tmp / "ck.npz"
    cmd = [sys.executable, "-m", "gradc", "train", model, "--data", str(big), "-o", str(out),
           "--loss", "cross_entropy", "--epochs", "100000", "--batch-size", "8", "-t",
           "reference", "--checkpoint", str(ck)]
    # Ctrl-C's default action in the child even when this run ignores SIGINT (a shell starts a
    # background job with SIGINT ignored, and Python keeps an ignored SIGINT ignored)
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         cwd=ROOT, preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        line = p.stdout.readline()  # "training ..."
        line = p.stdout.readline()  # the first epoch's line: a checkpoint follows at once
        assert line.startswith("epoch 1/"), line
        deadline = time.time() + 60
        while not ck.exists() and time.time() < deadline:
            time.sleep(0.05)
        time.sleep(0.3)
        p.send_signal(signal.SIGINT)
        _, err = p.communicate(timeout=60)
    finally:
        p.kill()
    assert p.returncode == 130, err
    assert "interrupted at step" in err and "the last checkpoint" in err
    assert not out.exists()
    with np.load(ck) as z:  # whole and readable: a multiple of an epoch's 512 steps
        assert int(z["step"]) % 512 == 0 and int(z["step"]) >= 512
    assert [p.name for p in tmp.iterdir() if p.name.startswith(".")] == []  # no temp files
    os.remove(ck)


# -- the loss chosen from the data file, examples/mlp_digits.onnx, Ctrl-C anywhere -------------

def test_without_loss_the_data_file_chooses_it(files, capsys):
    tmp, model, data = files
    out = tmp / "t.onnx"
    assert main(["train", model, "--data", data, "-o", str(out), "-t", "reference",
                 "--curve", ""]) == 0
    said = capsys.readouterr().out
    assert said.startswith("loss: cross_entropy of the first output 'logits' and the array "
                           "'labels'") and "accuracy" in said
    both = tmp / "both.npz"
    np.savez(both, **blobs(), target=np.zeros((96, 3), F32))
    for path, match in [(both, "is not a loss: pass --loss"),
                        (tmp / "none.npz", "none.npz: no such file")]:
        assert main(["train", model, "--data", str(path), "-o", str(tmp / "u.onnx")]) == 2
        assert match in capsys.readouterr().err
        assert not (tmp / "u.onnx").exists()
    # mse from an array named target: the regression trains (loss falls)
    reg = tmp / "reg.npz"
    d = blobs()
    np.savez(reg, x=d["x"], target=np.eye(3, dtype=F32)[d["labels"]])
    assert main(["train", model, "--data", str(reg), "-o", str(out), "-t", "numpy", "--lr",
                 "0.02", "--epochs", "3", "--curve", ""]) == 0
    said = capsys.readouterr().out
    assert said.startswith("loss: mse") and "accuracy" not in said
    means = [float(s.split("train loss ")[1].split(" ")[0]) for s in said.splitlines()
             if s.startswith("epoch ")]
    assert means[-1] < means[0]


def test_mlp_digits_example_trains_and_its_accuracy_is_onnxruntimes(tmp_path, capsys):
    out = tmp_path / "trained.onnx"
    assert main(["train", str(ROOT / "examples/mlp_digits.onnx"), "--data",
                 str(ROOT / "examples/digits.npz"), "-o", str(out), "--epochs", "2",
                 "-t", "numpy"]) == 0
    epochs = [s for s in capsys.readouterr().out.splitlines() if s.startswith("epoch ")]
    means = [float(s.split("train loss ")[1].split(",")[0]) for s in epochs]
    assert len(means) == 2 and means[1] < means[0]
    printed = float(epochs[-1].split("train accuracy ")[1].split("%")[0])
    with np.load(ROOT / "examples/digits.npz") as z:
        x, labels = z["x"], z["labels"]
    got = 100 * np.mean(quiet_session(str(out)).run(None, {"x": x})[0].argmax(1) == labels)
    # the same model on the same 1797 examples; 0.2 points = 3 examples whose top two scores
    # are within float32 rounding of each other (numpy and onnxruntime sum in other orders)
    assert abs(got - printed) <= 0.2 and printed > 50


def test_mlp_digits_onnx_is_what_make_mlp_writes():
    pytest.importorskip("torch")
    sys.path.insert(0, str(ROOT / "examples"))
    try:
        import make_mlp
    finally:
        sys.path.remove(str(ROOT / "examples"))
    fresh = onnx.load_from_string(make_mlp.export(make_mlp.model()))
    kept = onnx.load(ROOT / "examples/mlp_digits.onnx")
    assert [n.op_type for n in fresh.graph.node] == [n.op_type for n in kept.graph.node] == \
        ["Flatten", "Gemm", "Relu", "Gemm"]
    assert [i.name for i in kept.graph.input] == ["x"]
    dims = kept.graph.input[0].type.tensor_type.shape.dim
    assert [d.dim_param or d.dim_value for d in dims] == ["N", 1, 8, 8]
    for a, b in zip(fresh.graph.initializer, kept.graph.initializer, strict=True):
        np.testing.assert_array_equal(nh.to_array(a), nh.to_array(b), err_msg=a.name)


def test_ctrl_c_before_training_or_while_writing(files, monkeypatch, capsys):
    import gradc.cli_train as ct

    tmp, model, data = files
    out = tmp / "t.onnx"

    def interrupt(*args, **kwargs):
        raise KeyboardInterrupt

    with monkeypatch.context() as m:  # while compiling
        m.setattr(ct, "Trainer", interrupt)
        assert main(["train", model, "--data", data, "-o", str(out), "--loss",
                     "cross_entropy"]) == 130
    assert "interrupted before training started: nothing written" in capsys.readouterr().err
    assert not out.exists()
    with monkeypatch.context() as m:  # after the model, while writing the curve
        m.setattr(ct, "write_loss_curve", interrupt)
        assert main(["train", model, "--data", data, "-o", str(out), "--loss",
                     "cross_entropy", "-t", "reference"]) == 130
    err = capsys.readouterr().err
    assert f"interrupted at step 3: wrote only {out}" in err  # 96 examples, batch 32
    assert out.exists() and not (tmp / "t.loss.svg").exists()


def test_ignore_index_labels_are_accepted_and_left_out(files, capsys):
    """--ignore-index: those labels pass the data check (refused without the flag), and the
    step trains on them (the loss counts labels outside [0, C) nowhere: tests/test_losses.py)."""
    tmp, model, _ = files
    d = blobs()
    d["labels"][::5] = -100
    data = tmp / "ign.npz"
    np.savez(data, **d)
    out = tmp / "t.onnx"
    common = [model, "--data", str(data), "-o", str(out), "--loss", "cross_entropy",
              "-t", "reference", "--batch-size", "16", "--curve", ""]
    assert main(["train", *common]) == 2
    assert "outside the class range [0, 3)" in capsys.readouterr().err
    assert main(["train", *common, "--ignore-index", "-100"]) == 0
    assert "train loss" in capsys.readouterr().out
    assert out.exists()
