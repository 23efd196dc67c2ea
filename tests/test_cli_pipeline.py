"""The gradc command end to end: grad, compile with every pass instrument, show, check."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx

import gradc
from gradc.cli import main

EXAMPLE = str(Path(__file__).resolve().parent.parent / "examples" / "cnn.onnx")


def test_grad_check_on_bundled_model(tmp_path, capsys):
    """The README's main command: training graph out, onnxruntime agrees with the reference."""
    out = tmp_path / "train.onnx"
    assert main(["grad", EXAMPLE, "-o", str(out), "--check"]) == 0
    text = capsys.readouterr().out
    assert "onnxruntime agrees with the reference target on every output" in text
    model = onnx.load(str(out))
    onnx.checker.check_model(model, full_check=True)
    # the model's weights are parameters: initializers also listed as inputs (issue 11)
    assert [i.name for i in model.graph.input] == ["x", "grad_loss", "w", "b"]
    assert [t.name for t in model.graph.initializer if t.name in ("w", "b")] == ["w", "b"]
    assert [o.name for o in model.graph.output] == ["loss", "grad_x"]
    assert {n.domain for n in model.graph.node} <= {""}


def test_grad_wrt_and_text_output(tmp_path, capsys):
    out = tmp_path / "train.ir"
    assert main(["grad", "example:forward", "-o", str(out), "--wrt", "w"]) == 0
    g = gradc.parse(out.read_text())
    assert [v.name for v in g.outputs] == ["loss", "grad_w"]
    assert main(["grad", "example:forward", "-o", str(out), "--wrt", "nope"]) == 2
    assert "nope" in capsys.readouterr().err


def test_compile_instruments(tmp_path, capsys):
    train = tmp_path / "train.onnx"
    assert main(["grad", EXAMPLE, "-o", str(train)]) == 0
    capsys.readouterr()
    dump = tmp_path / "dump"
    assert main(["compile", str(train), "-t", "numpy", "-o", str(tmp_path / "t.py"),
                 "--print-after-change", "--print-diff", "--time-passes", "--pass-statistics",
                 "--dump-ir", str(dump)]) == 0
    err = capsys.readouterr().err
    assert "// -----// IR after 005 relu-mask-from-output (changed) //----- //" in err
    assert "// -----// IR after 006 fuse-gradients (changed) //----- //" in err
    assert "IR after 001 canonicalize" not in err           # unchanged: not printed
    assert "+++ after fuse-elementwise" in err                # the diff
    assert "Pass execution timing report" in err and "Total" in err
    assert "nodes-fused" in err and "bytes-before" in err
    names = sorted(p.name for p in dump.iterdir())
    assert names[0] == "000-input.ir" and "007-fuse-elementwise.ir" in names
    final = gradc.parse((dump / names[-1]).read_text())  # parameters without values
    assert any(n.op == "fused" for n in final.nodes)
    src = (tmp_path / "t.py").read_text()
    assert "import numpy as np" in src


def test_compile_print_after_all_and_pass_list(tmp_path, capsys):
    assert main(["compile", "example:train_step", "-t", "c", "-o", str(tmp_path / "t.c"),
                 "-p", "cse,dce", "--print-after-all"]) == 0
    err = capsys.readouterr().err
    assert err.count("// -----// IR after") == 2
    assert "001 cse" in err and "002 dce" in err
    assert main(["compile", "example:train_step", "-t", "c", "-p", "cse,nosuchpass"]) == 2
    assert "nosuchpass" in capsys.readouterr().err
    assert not (tmp_path / "x.c").exists()


def test_compile_onnx_needs_an_output_file(capsys):
    assert main(["compile", "example:forward", "-t", "onnx"]) == 2
    assert "-o FILE" in capsys.readouterr().err


def test_check_reports_every_target_and_grad(capsys):
    assert main(["check", "example:forward", "--grad", "--shape", "N=1"]) == 0
    out = capsys.readouterr().out
    for target in ("numpy", "c", "onnx"):
        assert target in out
    assert "finite" in out.lower()


def test_check_exit_1_when_a_target_disagrees(monkeypatch, capsys):
    import gradc.backends.numpy.target as nt
    real = nt.NumpyRunner.__call__

    def wrong(self, *args, **kwargs):
        return {k: v + np.ones_like(v) for k, v in real(self, *args, **kwargs).items()}

    monkeypatch.setattr(nt.NumpyRunner, "__call__", wrong)
    assert main(["check", "example:forward", "--shape", "N=1", "--targets", "numpy"]) == 1
    assert "numpy" in capsys.readouterr().out


def test_check_wants_bits_from_numpy_and_c_and_a_tolerance_from_onnx():
    from gradc.check import identical, max_error
    ref = np.array([0.0, 1.0, np.nan, -np.inf], np.float32)
    nan2 = np.array([0x7FC00001], np.uint32).view(np.float32)[0]
    assert identical(np.array([0.0, 1.0, nan2, -np.inf], np.float32), ref)  # NaN payload
    assert not identical(np.array([-0.0, 1.0, np.nan, -np.inf], np.float32), ref)  # -0.0
    off = np.array([0.0, np.nextafter(np.float32(1), np.float32(2)), np.nan, -np.inf], np.float32)
    assert not identical(off, ref) and max_error(off, ref)[1]  # 1 ulp: onnx only
    assert not max_error(np.array([0.0, 1.01, np.nan, -np.inf], np.float32), ref)[1]
    assert not identical(ref.astype(np.float64), ref)


def test_check_exit_1_when_numpy_is_one_ulp_off(monkeypatch, capsys):
    import gradc.backends.numpy.target as nt
    real = nt.NumpyRunner.__call__

    def ulp(self, *args, **kwargs):
        return {k: np.nextafter(v, np.inf).astype(v.dtype) if v.dtype.kind == "f" else v
                for k, v in real(self, *args, **kwargs).items()}

    monkeypatch.setattr(nt.NumpyRunner, "__call__", ulp)
    assert main(["check", "example:forward", "--shape", "N=1", "--targets", "numpy"]) == 1
    assert "expected bit-exact" in capsys.readouterr().out


def test_compile_c_source_needs_no_compiler(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("CC", "/nonexistent/cc")
    out = tmp_path / "t.c"
    assert main(["compile", "example:train_step", "-t", "c", "-o", str(out), "--shape", "N=4"]) == 0
    src = out.read_text()
    assert "int gradc_entry(const int64_t *S, void *const *A, int nt)" in src
    assert "A[0] input 0: float32[4,3,16,16]" in src


def test_shape_flag_sizes_the_statistics(capsys):
    assert main(["show", "example:train_step", "--shape", "N=32"]) == 0
    big = capsys.readouterr().out
    assert main(["show", "example:train_step"]) == 0
    small = capsys.readouterr().out
    bytes_of = lambda text: int(text.split("bytes-before=")[1].split()[0])  # noqa: E731
    assert bytes_of(big) > 16 * bytes_of(small)


def test_pass_statistics_report_the_c_programs_planned_arena(tmp_path, capsys):
    """--pass-statistics on the C target also names the planned arena of intermediate values
    (static shapes: here once N is bound), in bytes, as the generated source's header does."""
    train = tmp_path / "train.onnx"
    assert main(["grad", EXAMPLE, "-o", str(train)]) == 0
    capsys.readouterr()
    out = tmp_path / "t.c"
    assert main(["compile", str(train), "-t", "c", "-o", str(out), "--pass-statistics"]) == 0
    assert "no planned arena (values of symbolic shape" in capsys.readouterr().err
    assert main(["compile", str(train), "-t", "c", "-o", str(out), "--pass-statistics",
                 "--shape", "N=2"]) == 0
    err = capsys.readouterr().err
    line = next(x for x in err.splitlines() if "planned arena" in x)
    nbytes = int(line.split(":")[-1].split()[0])
    assert nbytes > 0 and f"planned arena of intermediate values: {nbytes} bytes" in \
        out.read_text()


def test_check_grad_on_the_readme_training_graph(tmp_path, capsys):
    """The README's round trip (issue 25): `gradc grad examples/cnn.onnx -o train.onnx`, then
    `gradc check train.onnx --grad` differentiates a graph that has `grad_loss` and `grad_x`
    already (fresh names, and max_pooling_grad's own gradient) and exits 0."""
    train = tmp_path / "train.onnx"
    assert main(["grad", EXAMPLE, "-o", str(train)]) == 0
    capsys.readouterr()
    assert main(["check", str(train), "--grad", "--shape", "N=1"]) == 0
    out = capsys.readouterr().out
    assert "all targets agree" in out
    for name in ("grad_x_1", "grad_grad_loss", "grad_w", "grad_b"):  # gradient outputs
        assert f"  {name} " in out
    second = tmp_path / "train2.onnx"
    assert main(["grad", str(train), "-o", str(second), "--wrt", "all"]) == 0
    g = gradc.from_onnx(str(second))
    assert [v.name for v in g.inputs] == ["x", "grad_loss", "grad_loss_1", "grad_grad_x"]
    assert [v.name for v in g.outputs] == ["loss", "grad_x", "grad_x_1", "grad_grad_loss",
                                           "grad_w", "grad_b"]
