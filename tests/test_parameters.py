"""Parameters (API.md "Parameters"): IR, text IR, passes, every target, ONNX out and in, grad."""

from __future__ import annotations

import time

import numpy as np
import pytest

import gradc
from gradc import ops
from gradc.ir.verify import verify

onnx = pytest.importorskip("onnx")

TARGETS = ["reference", "numpy", "c", "onnx"]
F32 = np.float32


def affine() -> gradc.Graph:
    """y = relu(x * w + b) with parameters w (3,) and b (); x is (N, 3)."""
    g = gradc.Graph("affine")
    x = g.input("x", "float32", ("N", 3))
    w = g.parameter("w", np.array([0.5, -1.0, 2.0], F32))
    b = g.parameter("b", np.array(0.25, F32))
    g.output(ops.relu(ops.add(ops.mul(x, w), b)), "y")
    return g


X = np.array([[1.0, 2.0, -3.0], [4.0, -0.5, 0.5]], F32)


def expected(w: np.ndarray, b: np.ndarray) -> np.ndarray:
    return np.maximum(X * w + b, 0).astype(F32)


# -- the graph --------------------------------------------------------------------------------

def test_parameter_is_named_typed_and_copied():
    value = np.arange(6, dtype=F32).reshape(2, 3)
    g = gradc.Graph("g")
    p = g.parameter("p", value)
    value[0, 0] = 99  # the graph holds its own copy
    assert [q.name for q in g.parameters] == ["p"] and g.parameters[0] is p
    assert p.type == gradc.TensorType("float32", (2, 3)) and p.value[0, 0] == 0
    assert p.producer is None and p not in g.inputs
    s = g.parameter("s", np.float64(2.0))  # 0-d stays 0-d
    assert s.type.shape == () and s.value.shape == ()


@pytest.mark.parametrize("value,field", [
    (np.zeros((0, 2), F32), "non-empty"),
    (np.array(["a"]), "gradc dtype"),
    (np.zeros([1] * 9, F32), "rank at most 8"),
])
def test_bad_parameter_values_are_refused(value, field):
    g = gradc.Graph("g")
    with pytest.raises(gradc.VerifyError, match=field):
        g.parameter("p", value)


def test_parameter_names_are_unique_among_values():
    g = affine()
    with pytest.raises(gradc.VerifyError, match="name"):
        g.parameter("x", np.zeros(2, F32))
    with pytest.raises(gradc.VerifyError, match="name"):
        g.input("w", "float32", (2,))


def test_copy_and_equality_include_values():
    g = affine()
    h = g.copy()
    assert h == g and h.parameters[0] is not g.parameters[0]
    h.parameters[1].value = np.array(0.5, F32)
    assert h != g
    h.parameters[1].value = np.array(0.25, F32)
    assert h == g


def test_verify_checks_a_parameter_value_against_its_type():
    g = affine()
    g.parameters[0].value = np.zeros(4, F32)
    with pytest.raises(gradc.VerifyError, match="parameter %w: value"):
        verify(g)


# -- the text IR -------------------------------------------------------------------------------

def test_text_prints_name_and_type_and_round_trips_with_values():
    g = affine()
    text = str(g)
    assert "param %w: f32[3]" in text and "param %b: f32[]" in text
    assert "0.5" not in text  # never the values
    back = gradc.parse(text, parameters={p.name: p.value for p in g.parameters})
    assert back == g
    other = gradc.parse(text, parameters={"w": np.ones(3, F32), "b": np.array(0.25, F32)})
    assert other != g


def test_text_without_values_parses_to_parameters_without_values():
    g = gradc.parse(str(affine()))
    assert [p.value for p in g.parameters] == [None, None]
    exe = gradc.compile(g, "reference")
    assert exe.parameters == {}
    with pytest.raises(gradc.InputError, match="'w'"):
        exe(x=X)
    w, b = np.ones(3, F32), np.array(0.0, F32)
    np.testing.assert_array_equal(exe(x=X, w=w, b=b)["y"], expected(w, b))


@pytest.mark.parametrize("params,match", [
    ({"w": np.ones(3, F32)}, "parameter %b: no value"),
    ({"w": np.ones(4, F32), "b": np.array(0, F32)}, "parameter %w: value"),
    ({"w": np.ones(3, np.float64), "b": np.array(0, F32)}, "float64"),
    ({"w": np.ones(3, F32), "b": np.array(0, F32), "z": np.ones(1)}, "'z' is not a parameter"),
])
def test_parse_refuses_missing_misfit_and_extra_values(params, match):
    with pytest.raises(gradc.ParseError, match=match):
        gradc.parse(str(affine()), parameters=params)


def test_text_stays_small_and_fast_for_a_large_model():
    g = gradc.Graph("big")
    x = g.input("x", "float32", ("N", 1024))
    for i in range(11):  # 11 x 1M parameters = 11.5M
        w = g.parameter(f"layer{i}.weight", np.zeros((1024, 1024), F32))
        x = ops.relu(ops.add(x, ops.reduce_sum(w, [0], False)))
    g.output(x, "y")
    start = time.perf_counter()
    text = str(g)
    assert time.perf_counter() - start < 0.5 and len(text) < 4000
    params = {p.name: p.value for p in g.parameters}
    assert gradc.parse(text, parameters=params) == g


# -- passes and targets ---------------------------------------------------------------------------

def test_passes_never_fold_a_parameter_and_keep_them_all():
    g = gradc.Graph("g")
    x = g.input("x", "float32", (3,))
    w = g.parameter("w", np.ones(3, F32))
    unused = g.parameter("unused", np.ones(2, F32))
    assert unused.name == "unused"
    g.output(ops.add(ops.relu(w), ops.add(x, ops.relu(w))), "y")  # cse, and nothing folds w
    opt = gradc.optimize(g).graph
    assert [p.name for p in opt.parameters] == ["w", "unused"]
    assert not any(n.op == "constant" for n in opt.nodes)
    verify(opt)


@pytest.mark.parametrize("target", TARGETS)
def test_every_target_uses_the_held_values_or_an_override(target):
    g = affine()
    exe = gradc.compile(g, target)
    assert sorted(exe.parameters) == ["b", "w"]
    np.testing.assert_array_equal(exe(x=X)["y"], expected(g.parameters[0].value,
                                                         g.parameters[1].value))
    w2 = np.array([1.0, 2.0, 3.0], F32)
    np.testing.assert_array_equal(exe(x=X, w=w2)["y"], expected(w2, g.parameters[1].value))
    with pytest.raises(gradc.InputError, match="'w'"):
        exe(x=X, w=np.ones(4, F32))  # checked like an input
    with pytest.raises(gradc.InputError, match="'b'"):
        exe(x=X, b=np.ones((), np.float64))


# -- ONNX out and back ----------------------------------------------------------------------------

def test_to_onnx_writes_initializers_also_listed_as_inputs():
    ort = pytest.importorskip("onnxruntime")
    g = affine()
    m = gradc.to_onnx(g)
    onnx.checker.check_model(m, full_check=True)
    assert [i.name for i in m.graph.input] == ["x", "w", "b"]
    assert {"w", "b"} <= {t.name for t in m.graph.initializer}
    s = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    w = g.parameters[0].value
    np.testing.assert_array_equal(s.run(["y"], {"x": X})[0], expected(w, np.float32(0.25)))
    w2 = np.array([3.0, 1.0, 1.0], F32)  # a caller may feed new values
    np.testing.assert_array_equal(s.run(["y"], {"x": X, "w": w2})[0], expected(w2, 0.25))
    assert gradc.from_onnx(m) == g  # the embedded IR, with the initializers' values


def test_an_edited_export_imports_the_initializers_as_parameters():
    g = gradc.Graph("g")
    x = g.input("x", "float32", ("N", 3))
    w = g.parameter("w", np.array([0.5, -1.0, 2.0], F32))
    g.output(ops.mul(x, w), "y")
    m = gradc.to_onnx(g)
    m.graph.doc_string = "edited"  # the digest no longer matches: imported node by node
    back = gradc.from_onnx(m)
    assert [p.name for p in back.parameters] == ["w"]
    out = gradc.compile(back, "reference")(x=X)["y"]
    np.testing.assert_array_equal(out, X * w.value)


# -- differentiation ---------------------------------------------------------------------------

def test_grad_wrt_keywords_and_names_in_order():
    g = affine()
    names = {
        None: ["y", "grad_x"], "inputs": ["y", "grad_x"], "parameters": ["y", "grad_w", "grad_b"],
        "all": ["y", "grad_x", "grad_w", "grad_b"], ("b", "x"): ["y", "grad_b", "grad_x"],
    }
    for wrt, outs in names.items():
        t = gradc.grad(g, list(wrt) if isinstance(wrt, tuple) else wrt)
        assert [v.name for v in t.outputs] == outs
        assert [v.name for v in t.inputs] == ["x", "grad_y"]
        assert [p.name for p in t.parameters] == ["w", "b"]  # the result keeps them
    with pytest.raises(gradc.VerifyError, match="'nope'"):
        gradc.grad(g, ["nope"])


def test_integer_outputs_get_no_cotangent_and_integer_parameters_no_gradient():
    g = gradc.Graph("g")
    x = g.input("x", "float32", (3,))
    k = g.parameter("k", np.array([1, 2, 3], np.int32))
    w = g.parameter("w", np.ones(3, F32))
    g.output(ops.mul(x, w), "y")
    g.output(ops.add(k, k), "kk")
    t = gradc.grad(g, "parameters")
    assert [v.name for v in t.inputs] == ["x", "grad_y"]
    assert [v.name for v in t.outputs] == ["y", "kk", "grad_w"]
    with pytest.raises(gradc.VerifyError, match="floating-point"):
        gradc.grad(g, ["k"])


@pytest.mark.parametrize("target", TARGETS)
def test_parameter_gradients_match_finite_differences(target):
    g = gradc.Graph("g")
    x = g.input("x", "float64", ("N", 3))
    w = g.parameter("w", np.array([0.5, -1.0, 2.0]))
    b = g.parameter("b", np.array([[0.1, 0.2, -0.3]]))
    g.output(ops.mul(ops.add(ops.mul(x, w), b), ops.mul(x, w)), "y")
    t = gradc.grad(g, "all")
    xv = np.random.default_rng(0).standard_normal((2, 3))
    dy = np.random.default_rng(1).standard_normal((2, 3))
    out = gradc.compile(t, target)(x=xv, grad_y=dy)
    fwd = gradc.compile(g, "reference")
    for p in g.parameters:
        num = np.zeros_like(p.value)
        for i in np.ndindex(p.value.shape):
            plus, minus = p.value.copy(), p.value.copy()
            plus[i] += 1e-6
            minus[i] -= 1e-6
            num[i] = np.sum((fwd(x=xv, **{p.name: plus})["y"]
                             - fwd(x=xv, **{p.name: minus})["y"]) * dy) / 2e-6
        np.testing.assert_allclose(out[f"grad_{p.name}"], num, rtol=1e-6, atol=1e-8)


def test_parameter_gradients_match_torch_autograd():
    torch = pytest.importorskip("torch")
    g = affine()
    t = gradc.grad(g, "parameters")
    dy = np.array([[1.0, -2.0, 0.5], [0.25, 1.0, -1.0]], F32)
    out = gradc.compile(t, "c")(x=X, grad_y=dy)
    w = torch.tensor(g.parameters[0].value, requires_grad=True)
    b = torch.tensor(g.parameters[1].value, requires_grad=True)
    torch.relu(torch.tensor(X) * w + b).backward(torch.tensor(dy))
    np.testing.assert_allclose(out["grad_w"], w.grad.numpy(), rtol=1e-6)
    np.testing.assert_allclose(out["grad_b"], b.grad.numpy(), rtol=1e-6)


# -- the command line ------------------------------------------------------------------------------

def test_cli_grad_wrt_parameters_and_text_with_values(tmp_path, capsys):
    from gradc.cli import main

    src = tmp_path / "m.onnx"
    src.write_bytes(gradc.to_onnx(affine()).SerializeToString())
    out = tmp_path / "t.ir"
    assert main(["grad", str(src), "-o", str(out), "--wrt", "parameters"]) == 0
    assert "t.ir.npz" in capsys.readouterr().out
    with np.load(str(out) + ".npz") as data:
        values = {k: data[k] for k in data.files}
    t = gradc.parse(out.read_text(), parameters=values)
    assert [v.name for v in t.outputs] == ["y", "grad_w", "grad_b"]
    assert main(["verify", str(out), "--parameters", str(out) + ".npz"]) == 0
    assert "2 parameters" in capsys.readouterr().out
    assert main(["grad", str(src), "-o", str(out), "--wrt", "w", "x"]) == 0
    assert main(["grad", str(src), "-o", str(out), "--wrt", "all", "w"]) == 2
    assert "--wrt" in capsys.readouterr().err
    assert main(["check", str(src), "--grad", "--targets", "numpy"]) == 0
    assert "grad_w" in capsys.readouterr().out  # finite differences visit parameters too


def test_values_round_trip_bit_for_bit_through_text_and_onnx():
    nan = np.array([0x7FC00001, 0xFFC00000, 0x80000000, 0x00000001], np.uint32).view(F32)
    g = gradc.Graph("g")
    x = g.input("x", "float32", (4,))
    p = g.parameter("layer 1/conv.weight", nan)  # any name: printed as %"..."
    g.output(ops.add(x, p), "y")
    back = gradc.parse(str(g), parameters={p.name: p.value})
    assert back == g and back.parameters[0].value.tobytes() == nan.tobytes()
    assert gradc.from_onnx(gradc.to_onnx(g)) == g


def test_an_initializer_that_is_an_output_is_a_constant_or_refused():
    from onnx import helper as oh

    from onnx_import_helpers import make

    w = {"w": np.ones(3, F32)}
    alone = make([oh.make_node("Neg", ["x"], ["y"])], {"x": (F32, [3])},
                 {"y": F32, "w": F32}, w)
    assert gradc.from_onnx(alone).parameters == ()  # no node reads it: a constant
    read = make([oh.make_node("Mul", ["x", "w"], ["y"])], {"x": (F32, [3])},
                {"y": F32, "w": F32}, w)
    with pytest.raises(gradc.UnsupportedError, match="'w' is the graph parameter"):
        gradc.from_onnx(read)


def test_show_draws_parameters_by_name_and_type():
    from gradc.show import show

    g = affine()
    assert "param %w: f32[3]" in show(g, fmt="text", passes=None, shapes={})
    page = show(g, fmt="html", passes=None, shapes={})
    assert "param %w" in page and "param %b" in page
