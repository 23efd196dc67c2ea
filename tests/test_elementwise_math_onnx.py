"""ONNX import of SPEC-training.md §21's element-wise rows (Div, Exp, Log, Sqrt, Pow, Max, Min,
the comparisons, Where, Sigmoid, Tanh, LeakyRelu): the models of ``MATH_CASES`` (used by
test_onnx_format.py's per-converter check), exports that onnx's checker accepts, folding of
constant shape arithmetic, and the refused forms."""

from __future__ import annotations

import numpy as np
import pytest

import gradc
from gradc import ops
from test_elementwise_math_support import graph

onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")
from onnx import helper as oh  # noqa: E402

from onnx_import_helpers import IR, c64, cross_check, distinct, make, run_ort, unary  # noqa: E402

F32 = np.float32


def _model(nodes, inputs, outputs, opset=18):
    """``make`` with bool tensors too."""
    def info(k, d, shape):
        return oh.make_tensor_value_info(k, oh.np_dtype_to_tensor_dtype(np.dtype(d)), shape)
    m = oh.make_model(oh.make_graph(nodes, "t", [info(k, d, s) for k, (d, s) in inputs.items()],
                                    [info(k, d, None) for k, d in outputs.items()]),
                      opset_imports=[oh.make_opsetid("", opset)])
    m.ir_version = IR[opset]
    return m


def _positive(shape):
    return np.abs(distinct(shape)) + F32(0.5)


def _binary(op, out=np.float32):
    def case():
        m = _model([oh.make_node(op, ["a", "b"], ["y"])], {"a": (F32, [2, 3]), "b": (F32, [3])},
                   {"y": out})
        b = distinct((3,)) / 8
        return m, {"a": np.concatenate([b[None], distinct((1, 3)) / 8]), "b": b}
    return case


def _unary(op, positive=False, **attrs):
    def case():
        x = _positive((2, 3)) if positive else distinct((2, 3)) / 4
        return unary(op, [2, 3], attrs), {"x": x}
    return case


def _saturated(op):
    """Inputs where float32 libraries agree exactly (test_onnx_format compares bits): 0 and
    the saturated tails; other values differ by an ulp between onnxruntime and §9.5's rule."""
    def case():
        return unary(op, [2, 3]), {"x": F32([[0, 20, 30], [-110, -200, 50]])}
    return case


def _pow():
    m = unary("Pow", [2, 3], extra=("e",), inits={"e": F32(2.0)})
    return m, {"x": distinct((2, 3)) / 4}


def _variadic(op):
    def case():
        m = make([oh.make_node(op, ["a", "b", "c"], ["y"])],
                 {"a": (F32, [2, 3]), "b": (F32, [3]), "c": (F32, [1, 3])}, {"y": F32})
        return m, {"a": distinct((2, 3)), "b": distinct((3,)), "c": distinct((1, 3))}
    return case


def _where():
    m = _model([oh.make_node("Where", ["c", "a", "b"], ["y"])],
               {"c": (np.bool_, [2, 3]), "a": (F32, [2, 3]), "b": (F32, [3])}, {"y": F32})
    return m, {"c": distinct((2, 3)) > 0, "a": distinct((2, 3)), "b": distinct((3,))}


MATH_CASES = {
    "Div": (_binary("Div"), "div"),
    "Exp": (_unary("Exp"), "exp"),
    "Log": (_unary("Log", positive=True), "log"),
    "Sqrt": (_unary("Sqrt", positive=True), "sqrt"),
    "Pow": (_pow, "pow"),
    "Max": (_variadic("Max"), "maximum"),
    "Min": (_variadic("Min"), "minimum"),
    "Greater": (_binary("Greater", np.bool_), "greater"),
    "Less": (_binary("Less", np.bool_), "less"),
    "Equal": (_binary("Equal", np.bool_), "equal"),
    "GreaterOrEqual": (_binary("GreaterOrEqual", np.bool_), "greater_equal"),
    "LessOrEqual": (_binary("LessOrEqual", np.bool_), "less_equal"),
    "Where": (_where, "where"),
    "Sigmoid": (_saturated("Sigmoid"), "sigmoid"),
    "Tanh": (_saturated("Tanh"), "tanh"),
    "LeakyRelu": (_unary("LeakyRelu", alpha=0.25), "leaky_relu"),
}


def test_every_case_imports_as_its_op_and_matches_onnxruntime():
    for op_type, (build, gradc_op) in MATH_CASES.items():
        model, feeds = build()
        assert gradc_op in {n.op for n in gradc.from_onnx(model).nodes}, op_type
        cross_check(model, feeds, exact=op_type not in ("Exp", "Sigmoid", "Tanh"), rtol=3e-7)


def test_variadic_max_is_a_left_fold_and_one_input_is_identity():
    g = gradc.from_onnx(_variadic("Max")()[0])
    assert [n.op for n in g.nodes] == ["maximum", "maximum"]
    assert g.nodes[1].inputs[0] is g.nodes[0].outputs[0]
    m = make([oh.make_node("Min", ["a"], ["y"])], {"a": (F32, [3])}, {"y": F32})
    assert [n.op for n in gradc.from_onnx(m).nodes] == ["identity"]


def test_integer_constant_div_and_comparisons_fold_with_truncation():
    nodes = [oh.make_node("Div", ["p", "q"], ["d"]), oh.make_node("Greater", ["d", "q"], ["g"]),
             oh.make_node("Where", ["g", "d", "q"], ["w"]),
             oh.make_node("Max", ["w", "p"], ["m"]),
             oh.make_node("Reshape", ["x", "m"], ["y"])]
    m = make(nodes, {"x": (F32, [4, 6])}, {"y": F32},
             inits={"p": c64(-7, 12), "q": c64(2, 3)})
    g = gradc.from_onnx(m)
    # Div: (-3, 4) (toward zero); Greater: (F, T); Where: (2, 4); Max with p: (2, 12)
    assert g.outputs[0].type.shape == (2, 12) and [n.op for n in g.nodes] == ["reshape"]
    cross_check(m, {"x": distinct((4, 6))})


def test_refused_forms_name_node_and_input():
    m = make([oh.make_node("Pow", ["x", "e"], ["y"], name="p")],
             {"x": (F32, [3]), "e": (F32, [1])}, {"y": F32})
    with pytest.raises(gradc.UnsupportedError, match="Pow 'p': input Y .* must be a constant"):
        gradc.from_onnx(m)
    m = unary("Pow", [3], extra=("e",), inits={"e": np.array([2, 3], F32)})
    with pytest.raises(gradc.UnsupportedError, match="Pow 'n': input Y .* one value"):
        gradc.from_onnx(m)
    m = make([oh.make_node("Div", ["a", "b"], ["y"], name="d")],
             {"a": (np.int32, [3]), "b": (np.int32, [3])}, {"y": np.int32})
    with pytest.raises(gradc.UnsupportedError, match="Div 'd': input A: integer Div"):
        gradc.from_onnx(m)
    m = make([oh.make_node("Exp", ["a"], ["y"], name="e")], {"a": (np.int32, [3])},
             {"y": np.int32})
    with pytest.raises(gradc.UnsupportedError, match="Exp 'e': input input: dtype int32"):
        gradc.from_onnx(m)


def test_pow_exponent_of_any_dtype_and_rank_broadcasts():
    m = unary("Pow", [3], extra=("e",), inits={"e": np.array([[3]], np.int64)})
    g = gradc.from_onnx(m)
    assert g.outputs[0].type.shape == (1, 3)
    cross_check(m, {"x": distinct((3,)) / 2})


def test_exports_pass_the_full_checker_and_run_in_onnxruntime():
    def fn(x, y, c):
        z = ops.where(c, ops.sigmoid(x), ops.leaky_relu(y, 0.3))
        return {"z": ops.div(ops.maximum(z, x), ops.add(ops.exp(y), ops.constant(1.0, "float16"))),
                "k": ops.greater_equal(x, y), "s": ops.pow(ops.sqrt(ops.tanh(x)), 3.0),
                "l": ops.log(ops.minimum(x, y))}
    g = graph(fn, {"x": ("float16", ("N", 3)), "y": ("float16", (3,)), "c": ("bool", ("N", 1))})
    model = gradc.to_onnx(g)
    onnx.checker.check_model(model, full_check=True)
    assert {o.domain for o in model.opset_import} == {""}
    feeds = {"x": (distinct((2, 3)) / 4).astype(np.float16),
             "y": (distinct((3,)) / 4).astype(np.float16), "c": np.array([[True], [False]])}
    want = gradc.compile(g, target="reference", passes=None)(**feeds)
    got = run_ort(model, feeds)
    for k in want:
        np.testing.assert_array_equal(np.isnan(got[k]), np.isnan(want[k]))
        np.testing.assert_allclose(got[k], want[k], rtol=2e-3)


def test_frameworks_disagree_as_conformance_md_says():
    """The rows of docs/conformance.md's element-wise section: what the others do."""
    torch = pytest.importorskip("torch")
    a, b = torch.tensor([np.nan, -0.0]), torch.tensor([5.0, 0.0])
    assert torch.isnan(torch.maximum(a, b))[0] and torch.fmax(a, b)[0] == 5
    assert torch.signbit(torch.fmax(a, b))[1] and not np.signbit(np.fmax(np.float32(-0.0), 0))
    x, y = torch.tensor([1.0], requires_grad=True), torch.tensor([1.0], requires_grad=True)
    torch.maximum(x, y).backward()
    assert x.grad.item() == 0.5 and y.grad.item() == 0.5
    m = _model([oh.make_node("Max", ["a", "b"], ["y"])], {"a": (F32, [1]), "b": (F32, [1])},
               {"y": F32})
    assert np.isnan(run_ort(m, {"a": F32([np.nan]), "b": F32([5])})["y"][0])
    m = unary("Sigmoid", [3], dtype=np.float64)
    xs = np.array([-3.5, -20.0, -40.0])
    want = 1 / (1 + np.exp(-xs))
    far = np.abs(run_ort(m, {"x": xs})["y"] - want) / np.spacing(want)
    assert far.max() > 1e6  # sigmoid(-40) = 4.2e-18 comes out 0
    m = make([oh.make_node("Cast", ["x"], ["y"], to=10)], {"x": (F32, [1])}, {"y": np.float16})
    nan = np.array([0xFFEC2000], np.uint32).view(F32)  # float16 0xff61 widened
    assert run_ort(m, {"x": nan})["y"].view(np.uint16)[0] == 0xFE00


def test_a_float64_exponent_beyond_float32_is_refused_without_a_warning():
    """Pow's exponent is taken in float32 (gradc's pow attribute, which must be finite): 1e300
    rounds to inf there, and the import says so -- quietly otherwise (fuzz seed 17171 saw
    NumPy's overflow warning on stderr before the refusal)."""
    import warnings

    m = unary("Pow", [2, 3], extra=("e",), inits={"e": np.float64(1e300)})
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(gradc.errors.GradcError, match=r"exponent: expected a finite "
                                                          r"float32, got inf"):
            gradc.from_onnx(m)
