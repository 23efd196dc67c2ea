"""The gradc command: subcommands work, bad input gives one line and exit status 2."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import warnings

import pytest

import gradc
from gradc.cli import main


def gradc_cmd(*args: str, cwd: str | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "gradc", *args], capture_output=True,
                          text=True, cwd=cwd, timeout=300)


def test_verify_print_run_examples(capsys):
    assert main(["verify", "example:pool_step"]) == 0
    assert "ok: graph 'pool_step'" in capsys.readouterr().out
    assert main(["print", "example:train_step"]) == 0
    text = capsys.readouterr().out
    assert gradc.parse(text) == gradc.examples.train_step()
    assert main(["run", "example:forward", "--shape", "N=1", "-p", "none"]) == 0
    out = capsys.readouterr().out
    assert "loss: float32[]" in out
    assert main(["examples"]) == 0
    assert "example:train_step" in capsys.readouterr().out


def test_text_ir_file_round_trip(tmp_path, capsys):
    src = tmp_path / "g.ir"
    src.write_text(str(gradc.examples.pool_step()))
    out = tmp_path / "out.ir"
    assert main(["print", str(src), "-o", str(out)]) == 0
    assert out.read_text() == src.read_text() + "\n"


@pytest.mark.parametrize("args,needle", [
    (["verify", "missing.ir"], "missing.ir: no such file"),
    (["verify", "bad.ir"], "bad.ir:1:"),
    (["verify", "badop.ir"], "relu: input.dtype: expected"),
    (["verify", "example:nope"], "no such built-in example"),
    (["run", "example:forward", "--shape", "N=0"], "--shape 'N=0'"),
    (["verify", "bad.onnx"], "bad.onnx"),
])
def test_bad_input_one_line_exit_2(tmp_path, args, needle):
    (tmp_path / "bad.ir").write_text("graph g(%x: f32[2]) { %y = }")
    (tmp_path / "badop.ir").write_text(
        "graph g(%x: i64[2]) {\n  %y = relu(%x) : i64[2]\n  return %y\n}")
    (tmp_path / "bad.onnx").write_bytes(b"\x08\x07garbage-not-a-model\xff")
    r = gradc_cmd(*args, cwd=str(tmp_path))
    assert r.returncode == 2, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("gradc: error: "), r.stderr
    assert needle in lines[0]
    assert "Traceback" not in r.stderr


def test_no_partial_output_file_on_error(tmp_path):
    (tmp_path / "bad.ir").write_text("graph g(%x: f32[2]) {")
    r = gradc_cmd("print", "bad.ir", "-o", "out.ir", cwd=str(tmp_path))
    assert r.returncode == 2
    assert not (tmp_path / "out.ir").exists()
    assert [p for p in os.listdir(tmp_path) if p.startswith(".gradc-")] == []


def test_help_for_each_subcommand():
    for sub in ["verify", "print", "run", "grad", "compile", "show", "check", "examples"]:
        r = gradc_cmd(sub, "--help")
        assert r.returncode == 0 and "usage: gradc" in r.stdout


def test_check_grad_leaves_out_values_no_gradient_reaches_by_definition(tmp_path, capsys):
    """Fuzz finding (cli harness, seed 9191): adam_optimizer's operands get no gradient by
    definition, so a finite difference through its results measured what the gradient leaves
    out (MISMATCH, exit 1); such values are listed as not compared, and a value with a real
    path is still compared."""
    path = tmp_path / "g.ir"
    path.write_text(
        "graph g(%p: f32[2], %d: f32[2], %s: i64[1], %x: f32[3]) {\n"
        "  %q, %m, %v = adam_optimizer(%p, %p, %p, %d, %s) {learning_rate = 0.5, "
        "beta1 = 0.9, beta2 = 0.999, epsilon = 0.001} : f32[2], f32[2], f32[2]\n"
        "  %y = mul(%x, %x) : f32[3]\n"
        "  return %q, %y\n}\n")
    assert main(["check", str(path), "--grad"]) == 0
    out = capsys.readouterr().out
    assert "MISMATCH" not in out
    assert re.search(r"grad_p +- +not compared", out) and re.search(r"grad_d +- +not compared", out)
    assert re.search(r"grad_x +max \|diff\| \S+ +ok", out)


def test_check_grad_skips_points_where_the_function_is_not_finite(tmp_path, capsys):
    """Fuzz finding (cli harness): sqrt of a negative random input is NaN on both sides of a
    central difference; that says nothing about the derivative and is no mismatch."""
    path = tmp_path / "g.ir"
    path.write_text("graph g(%v2: f16[]) {\n  %o = sqrt(%v2) : f16[]\n  return %o\n}\n")
    for seed in ("3", "4", "5"):  # seeds 4 and 5 draw a negative v2, seed 3 a positive one
        assert main(["check", str(path), "--grad", "--seed", seed]) == 0
    assert "MISMATCH" not in capsys.readouterr().out


def test_check_grad_of_outputs_near_the_float64_limit_warns_nothing(tmp_path, capsys):
    """Fuzz finding (cli harness, seed 14141): the finite differences' loss (outputs times
    random cotangents) overflowed to infinity for outputs near 1.8e308 and NumPy warned on
    stderr; such points are skipped, quietly."""
    path = tmp_path / "g.ir"
    path.write_text("graph g(%x: f64[3]) {\n"
                    "  %c = constant() {value = array<f64[]: [1.7976931348623157e+308]>} : f64[]\n"
                    "  %y = add(%x, %c) : f64[3]\n  return %y\n}\n")
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        assert main(["check", str(path), "--grad"]) == 0
    assert "MISMATCH" not in capsys.readouterr().out
