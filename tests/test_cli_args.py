"""The command line's shared plumbing (issue 25 item 7), one test per class of failure:
every numeric option checks its range, every file read or written is checked before any work
with the same words, every command that writes says so on stdout, a resumed run says where it
resumed and numbers its steps on, the training figures say that they are, and a float16 model
with Adam's default eps is refused with the reason."""

from __future__ import annotations

import argparse
import re
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto as TP, helper as oh, numpy_helper as nh

import gradc.cli as cli
from gradc.cli import build_parser, main
from test_cli_train import blobs, bn_mlp_model

TRAIN = ["--loss", "cross_entropy", "-t", "reference"]


@pytest.fixture()
def files(tmp_path):
    onnx.save(bn_mlp_model(), tmp_path / "model.onnx")
    np.savez(tmp_path / "data.npz", **blobs())
    return tmp_path


def _actions(parser: argparse.ArgumentParser):
    for a in parser._actions:
        if isinstance(a, argparse._SubParsersAction):
            for name, sub in a.choices.items():
                yield from ((f"{name} {b}", act) for b, act in _actions(sub))
        else:
            yield ("/".join(a.option_strings) or a.dest), a


def test_every_numeric_option_checks_its_range():
    """No option parses a bare int or float (which took --batch-size 0 and fell back to 32):
    each goes through gradc.cli_args, which refuses a value outside its range."""
    bare = [name for name, a in _actions(build_parser()) if a.type in (int, float)]
    assert bare == []


@pytest.mark.parametrize("flag, value", [
    ("--batch-size", "0"), ("--epochs", "0"), ("--threads", "0"), ("--lr", "nan"),
    ("--lr", "-1"), ("--eps", "-1e-8"), ("--momentum", "inf"), ("--weight-decay", "x"),
    ("--max-grad-norm", "0"), ("--warmup-steps", "-1"), ("--total-steps", "0"),
    ("--class-axis", "1.5"), ("--ignore-index", str(2 ** 63)), ("--seed", "-1"),
])
def test_out_of_range_numbers_exit_2_naming_the_flag(files, capsys, flag, value):
    out = files / "t.onnx"
    with pytest.raises(SystemExit) as e:
        main(["train", str(files / "model.onnx"), "--data", str(files / "data.npz"), "-o",
              str(out), *TRAIN, f"{flag}={value}"])
    assert e.value.code == 2  # argparse's usage, then its error line
    err = capsys.readouterr().err.strip().splitlines()
    assert err[0].startswith("usage: gradc train") and \
        err[-1].startswith(f"gradc train: error: argument {flag}"), err
    assert not out.exists()


def test_betas_are_below_one(files, capsys):
    with pytest.raises(SystemExit):
        main(["train-step", str(files / "model.onnx"), "-o", str(files / "s.onnx"), "--betas",
              "0.9", "1"])
    assert "argument --betas: expected a finite number >= 0 and < 1" in capsys.readouterr().err


@pytest.mark.parametrize("argv", [
    ["verify", "{dir}"],
    ["train-step", "{dir}/g.ir", "-o", "{dir}/s.ir", "--parameters", "{dir}"],
    ["train", "{dir}/model.onnx", "--data", "{dir}", "-o", "{dir}/t.onnx"],
    ["train", "{dir}/model.onnx", "--data", "{dir}/data.npz", "--val-data", "{dir}", "-o",
     "{dir}/t.onnx"],
    ["train", "{dir}/model.onnx", "--data", "{dir}/data.npz", "--resume", "{dir}", "-o",
     "{dir}/t.onnx"],
])
def test_a_directory_where_a_file_is_read_says_so(files, capsys, monkeypatch, argv):
    (files / "g.ir").write_text("graph g(%x: f32[2]) {\n  %y = relu(%x) : f32[2]\n  return %y\n}")
    monkeypatch.setattr(cli, "load_graph", _no_work)
    assert main([a.format(dir=files) for a in argv]) == 2
    err = capsys.readouterr().err
    assert f"{files}: is a directory, expected a file" in err and "no such file" not in err


def _no_work(*args, **kwargs):
    raise AssertionError("the command started its work before checking its files")


WRITERS = [
    ["print", "example:forward", "-o", "{out}.ir"],
    ["grad", "example:forward", "-o", "{out}.onnx"],
    ["compile", "example:forward", "-t", "c", "-o", "{out}.c"],
    ["show", "example:forward", "-o", "{out}.txt"],
    ["train-step", "{dir}/model.onnx", "--loss", "cross_entropy", "-o", "{out}.onnx"],
    ["train", "{dir}/model.onnx", "--data", "{dir}/data.npz", *TRAIN, "-o", "{out}.onnx"],
    ["train", "{dir}/model.onnx", "--data", "{dir}/data.npz", *TRAIN, "-o", "{dir}/t.onnx",
     "--checkpoint", "{out}.npz"],
    ["train", "{dir}/model.onnx", "--data", "{dir}/data.npz", *TRAIN, "-o", "{dir}/t.onnx",
     "--curve", "{out}.svg"],
]


@pytest.mark.parametrize("argv", WRITERS, ids=lambda a: a[0])
def test_every_command_that_writes_says_so_on_stdout(files, capsys, argv):
    out = files / "out"
    assert main([a.format(dir=files, out=out) for a in argv]) == 0
    said = capsys.readouterr()
    path = next(a.format(dir=files, out=out) for a in argv if "{out}" in a)
    assert f"wrote {path}" in said.out and "wrote" not in said.err, said


@pytest.mark.parametrize("argv", WRITERS + [
    ["grad", "example:forward", "--check", "-o", "{out}.onnx"]], ids=lambda a: a[0])
def test_outputs_are_checked_before_any_work(files, capsys, monkeypatch, argv):
    monkeypatch.setattr(cli, "load_graph", _no_work)
    monkeypatch.setattr(cli, "example", _no_work)
    monkeypatch.setattr(cli, "compare_targets", _no_work)
    out = files / "missing" / "out"
    assert main([a.format(dir=files, out=out) for a in argv]) == 2
    err = capsys.readouterr().err
    assert "does not exist" in err and str(files / "missing") in err, err
    assert not (files / "t.onnx").exists()


def test_resume_says_where_and_numbers_the_curve_on(files, capsys):
    common = [str(files / "model.onnx"), "--data", str(files / "data.npz"), *TRAIN]
    ck, curve = files / "ck.npz", files / "c.svg"
    assert main(["train", *common, "-o", str(files / "a.onnx"), "--epochs", "2",
                 "--checkpoint", str(ck), "--curve", ""]) == 0
    capsys.readouterr()
    assert main(["train", *common, "-o", str(files / "b.onnx"), "--epochs", "3", "--resume",
                 str(ck), "--curve", str(curve)]) == 0
    said = capsys.readouterr().out
    # 96 examples in batches of 32: 3 steps an epoch, 6 done after two epochs
    assert "resumed from " + str(ck) + ": 6 steps done; continuing at step 7 (epoch 3, batch " \
        "1 of 3)" in said
    assert f"wrote {curve}: the loss of steps 7 to 9" in said
    svg = curve.read_text()
    xticks = re.findall(r'text-anchor="middle" font-size="12"[^>]*>([0-9]+)<', svg)
    assert xticks[0] == "7" and "resumed at step 7" in svg


def test_training_figures_are_labelled_as_such(files, capsys):
    np.savez(files / "val.npz", **blobs(40, seed=5))
    assert main(["train", str(files / "model.onnx"), "--data", str(files / "data.npz"), *TRAIN,
                 "-o", str(files / "t.onnx"), "--curve", ""]) == 0
    line = [s for s in capsys.readouterr().out.splitlines() if s.startswith("epoch ")][0]
    assert re.match(r"epoch 1/1: train loss [0-9.]+, train accuracy [0-9.]+% \(96 examples",
                    line), line


def fp16_model() -> onnx.ModelProto:
    r = np.random.default_rng(0)
    w = (r.standard_normal((3, 4)) * 0.5).astype(np.float16)
    g = oh.make_graph([oh.make_node("Gemm", ["x", "w"], ["logits"], transB=1)], "fp16",
                      [oh.make_tensor_value_info("x", TP.FLOAT16, ["N", 4])],
                      [oh.make_tensor_value_info("logits", TP.FLOAT16, ["N", 3])],
                      [nh.from_array(w, "w")])
    return oh.make_model(g, opset_imports=[oh.make_opsetid("", 17)])


def test_float16_with_adams_default_eps_is_refused_with_the_reason(files, capsys):
    onnx.save(fp16_model(), files / "h.onnx")
    d = blobs()
    np.savez(files / "h.npz", x=d["x"].astype(np.float16), labels=d["labels"])
    argv = ["train", str(files / "h.onnx"), "--data", str(files / "h.npz"), *TRAIN, "-o",
            str(files / "t.onnx")]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "eps: 1e-08 rounds to 0 in float16" in err and "NaN" in err
    assert not Path(files / "t.onnx").exists()
    assert main([*argv, "--eps", "1e-4"]) == 0
