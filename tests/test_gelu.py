"""SPEC-transformers §25 on every target: the §30.2 vectors (T-GELU-1..4, T-EW-8..10), the §30.9
rows V-56..V-59, the VJP rules (float64 finite differences; gelu_grad's own gradient), and the
reference's float64 constants.

Targets: the reference gives the spec's bits, numpy the reference's, c and onnx are within §25.4
(``activation_support.assert_25_4``), and every target gives the spec's dyadic values exactly.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

import gradc
from gradc import ops
from gradc.ir.ops import activation
from activation_support import assert_25_4, assert_targets, outputs
from helpers import assert_bits
from test_elementwise_math_support import graph

nan, inf = np.nan, np.inf
X1 = [-3, -1, -0.5, -0.0, 0.5, 1, 3]


def f32(*v: float) -> np.ndarray:
    return np.array(v, np.float32)


def _gelu_graph(mode: str, dtype: str, n: int) -> gradc.Graph:
    """gelu and, through gradc.grad, its gelu_grad: outputs y and grad_x."""
    return gradc.grad(graph(lambda x: {"y": ops.gelu(x, mode)}, {"x": (dtype, (n,))}))


def _run_gelu(mode: str, x: np.ndarray, dy: np.ndarray) -> dict:
    return outputs(_gelu_graph(mode, x.dtype.name, x.size), {"x": x, "grad_y": dy})


# -- §30.2 --------------------------------------------------------------------------------------

T_GELU = {  # mode -> (gelu, gelu_grad with dY = 1) of X1
    "none": (f32(-0.004049694165587425, -0.15865525603294373, -0.1542687714099884, -0.0,
                 0.3457312285900116, 0.8413447737693787, 2.995950222015381),
             f32(-0.011945647187530994, -0.08331546932458878, 0.1325048804283142, 0.5,
                 0.8674951195716858, 1.0833154916763306, 1.0119456052780151)),
    "tanh": (f32(-0.003637392073869705, -0.15880800783634186, -0.1542859971523285, -0.0,
                 0.3457140028476715, 0.8411920070648193, 2.9963626861572266),
             f32(-0.011584166437387466, -0.08296408504247665, 0.1326300948858261, 0.5,
                 0.8673698902130127, 1.0829640626907349, 1.0115841627120972)),
}
EXACT1 = np.array([False, False, False, True, False, False, False])  # -0.0 and 0.5


@pytest.mark.parametrize("mode", ["none", "tanh"])
def test_t_gelu_1_2_values_and_gradients(mode):
    x = f32(*X1)
    y, dx = T_GELU[mode]
    one = np.ones(7, np.float32)
    outs = _run_gelu(mode, x, one)
    assert_targets(outs, "y", y, x=x, exact=EXACT1)
    assert_targets(outs, "grad_x", dx, x=x, dy=one, exact=EXACT1)
    twice = _run_gelu(mode, x, 2 * one)  # the derivative is rounded first: exactly twice
    for t, o in twice.items():
        assert_bits(o["grad_x"], 2 * outs[t]["grad_x"])


T_GELU_3 = {  # (dtype, mode) -> (gelu, gelu_grad) of x = [-1, 0.5, 2], dY = 1
    ("float16", "none"): ([-0.15869140625, 0.345703125, 1.9541015625],
                          [-0.08331298828125, 0.86767578125, 1.0849609375]),
    ("float16", "tanh"): ([-0.1588134765625, 0.345703125, 1.955078125],
                          [-0.08294677734375, 0.8671875, 1.0859375]),
    ("float64", "none"): ([-0.15865525393145702, 0.34573123063700656, 1.9544997361036416],
                          [-0.08331547058768635, 0.8674951246561629, 1.085231801078197]),
    ("float64", "tanh"): ([-0.15880800939172326, 0.34571400982514394, 1.9545976940877752],
                          [-0.08296408384578255, 0.8673699035346424, 1.0860992566236185]),
}


@pytest.mark.parametrize("dtype,mode", sorted(T_GELU_3))
def test_t_gelu_3_float16_and_float64(dtype, mode):
    x = np.array([-1, 0.5, 2], dtype)
    one = np.ones(3, dtype)
    y, dx = (np.array(v, dtype) for v in T_GELU_3[dtype, mode])
    outs = _run_gelu(mode, x, one)
    assert_targets(outs, "y", y, x=x)
    assert_targets(outs, "grad_x", dx, x=x, dy=one)


@pytest.mark.parametrize("mode", ["none", "tanh"])
def test_t_gelu_4_special_and_huge_values_exactly(mode):
    x = f32(inf, -inf, nan, 3e38, -3e38, 1e20, -1e20)
    outs = _run_gelu(mode, x, np.ones(7, np.float32))
    for t, o in outs.items():
        assert_bits(o["y"], f32(inf, nan, nan, 3e38, -0.0, 1e20, -0.0), nan_payload=False)
        assert_bits(o["grad_x"], f32(nan, nan, nan, 1, 0, 1, 0), nan_payload=False)


X8 = f32(0, -0.0, 0.5, 1, -2, inf, -inf, nan)
EXACT8 = np.array([True, True, False, False, False, True, True, True])
T_EW_8 = {
    "erf": f32(0, -0.0, 0.5204998850822449, 0.8427007794380188, -0.9953222870826721, 1, -1, nan),
    "sin": f32(0, -0.0, 0.4794255495071411, 0.8414709568023682, -0.9092974066734314, nan, nan,
               nan),
    "cos": f32(1, 1, 0.8775825500488281, 0.5403022766113281, -0.416146844625473, nan, nan, nan),
}


def test_t_ew_8_erf_sin_cos():
    g = graph(lambda x: {k: getattr(ops, k)(x) for k in T_EW_8}, {"x": ("float32", (8,))})
    outs = outputs(g, {"x": X8})
    for k, want in T_EW_8.items():
        exact = EXACT8 | (np.arange(8) < 2) if k == "cos" else EXACT8  # cos(+-0) = 1
        assert_targets(outs, k, want, exact=exact)


T_EW_9 = {
    "erf": f32(1.128379225730896, 0.8302150368690491, 0.01033349335193634, -0.8787826299667358),
    "sin": f32(1, 1.0806045532226562, -0.2080734223127365, -0.8775825500488281),
    "cos": f32(-0.0, -1.6829419136047363, 0.4546487033367157, 0.4794255495071411),
}


@pytest.mark.parametrize("op", sorted(T_EW_9))
def test_t_ew_9_gradients(op):
    t = gradc.grad(graph(lambda x: {"y": getattr(ops, op)(x)}, {"x": ("float32", (4,))}))
    outs = outputs(t, {"x": f32(0, 1, -2, 0.5), "grad_y": f32(1, 2, 0.5, -1)})
    exact = np.array([op != "erf", False, False, False])  # sin's 1 and cos's -0.0
    assert_targets(outs, "grad_x", T_EW_9[op], exact=exact)


@pytest.mark.parametrize("dtype", ["float16", "float32", "float64"])
def test_t_ew_10_is_nan_exact(dtype):
    x = np.array([1, nan, inf, -inf, -nan, 0, -0.0], dtype)
    assert np.signbit(x[4])  # -nan really is a negative NaN
    g = graph(lambda x: {"y": ops.is_nan(x)}, {"x": (dtype, (7,))})
    want = np.array([False, True, False, False, True, False, False])
    for o in outputs(g, {"x": x}).values():
        assert_bits(o["y"], want)


def test_float16_erf_sin_cos_and_rank0():
    x16 = np.array([-3, -0.0, 0.3333, 1.5, 1000, 65504], np.float16)
    g = graph(lambda x: {"e": ops.erf(x), "s": ops.sin(x), "c": ops.cos(x)},
              {"x": ("float16", (6,))})
    outs = outputs(g, {"x": x16})
    for k, fn in (("e", np.frompyfunc(math.erf, 1, 1)), ("s", np.sin), ("c", np.cos)):
        want = np.asarray(fn(x16.astype(np.float64)), np.float64).astype(np.float16)
        assert_targets(outs, k, want)
    g0 = graph(lambda x: {"y": ops.gelu(x), "n": ops.is_nan(x)}, {"x": ("float32", ())})
    for o in outputs(g0, {"x": np.float32(1.0)}).values():
        assert o["y"].shape == () and o["n"].shape == () and o["n"].dtype == np.bool_


# -- §30.9 --------------------------------------------------------------------------------------

def _in(g: gradc.Graph, name: str, dtype: str, shape: tuple) -> gradc.Value:
    return g.input(name, dtype, shape)


REJECTED = [
    ("V-56", lambda g: ops.gelu(_in(g, "x", "float32", (4,)), approximation="fast"),
     "gelu: approximation"),
    ("V-57", lambda g: ops.gelu_grad(_in(g, "x", "float32", (4,)), _in(g, "dy", "float16", (4,))),
     "gelu_grad: input_gradient.dtype"),
    ("V-58", lambda g: ops.erf(_in(g, "x", "int32", (4,))), "erf: input.dtype"),
    ("V-59", lambda g: ops.is_nan(_in(g, "x", "int64", (4,))), "is_nan: input.dtype"),
    ("gelu-rank", lambda g: ops.gelu(_in(g, "x", "float32", (1,) * 9)), "gelu: input.rank"),
    ("gelu_grad-shape", lambda g: ops.gelu_grad(_in(g, "x", "float32", (4,)),
                                                _in(g, "dy", "float32", (2, 2))),
     "gelu_grad: input_gradient.shape"),
    ("gelu_grad-order", lambda g: ops.gelu_grad(_in(g, "x", "int32", (4,)),
                                                _in(g, "dy", "float16", (3,)), "fast"),
     "gelu_grad: input.dtype"),
    ("gelu_grad-mode", lambda g: ops.gelu_grad(_in(g, "x", "float32", (4,)),
                                               _in(g, "dy", "float32", (4,)), 1),
     "gelu_grad: approximation"),
    ("sin-bool", lambda g: ops.sin(_in(g, "x", "bool", (4,))), "sin: input.dtype"),
    ("cos-rank", lambda g: ops.cos(_in(g, "x", "float64", (1,) * 9)), "cos: input.rank"),
]


@pytest.mark.parametrize("call,field", [r[1:] for r in REJECTED], ids=[r[0] for r in REJECTED])
def test_rejected_arguments_name_the_field(call, field):
    with pytest.raises(gradc.VerifyError) as e:
        call(gradc.Graph("v"))
    assert str(e.value).startswith(f"{field}: expected "), str(e.value)


def test_v56_message():
    with pytest.raises(gradc.VerifyError, match=r'^gelu: approximation: expected "none" or '
                       r'"tanh", got \'fast\'$'):
        ops.gelu(gradc.Graph("v").input("x", "float32", (4,)), approximation="fast")


# -- VJPs ---------------------------------------------------------------------------------------

def _finite_differences(fn, x: np.ndarray, h: float = 1e-6) -> None:
    """gradc.grad against central differences of <cot, fn(x)> in float64."""
    g = graph(lambda x: {"y": fn(x)}, {"x": ("float64", x.shape)})
    cot = np.random.default_rng(5).standard_normal(x.shape)
    got = gradc.compile(gradc.grad(g), target="reference")(x=x, grad_y=cot)["grad_x"]
    fwd = gradc.compile(g, target="reference")
    num = np.array([(np.sum(fwd(x=x + h * e)["y"] * cot) - np.sum(fwd(x=x - h * e)["y"] * cot))
                    / (2 * h) for e in np.eye(x.size).reshape((x.size,) + x.shape)])
    np.testing.assert_allclose(got, num.reshape(x.shape), rtol=1e-7, atol=1e-8)


@pytest.mark.parametrize("name,fn", [
    ("gelu", lambda x: ops.gelu(x)), ("gelu_tanh", lambda x: ops.gelu(x, "tanh")),
    ("erf", ops.erf), ("sin", ops.sin), ("cos", ops.cos),
    ("gelu_grad_dy", None), ("gelu_grad_tanh_dy", None)])
def test_gradients_match_float64_finite_differences(name, fn):
    x = np.array([[-4.2, -1.3, -0.4, 0.05], [0.6, 1.7, 2.9, 5.5]])
    if fn is None:  # gelu_grad as a function of its input_gradient (its d(input_gradient))
        mode = "tanh" if "tanh" in name else "none"
        xc = ops.constant(x)
        fn = lambda dy: ops.gelu_grad(xc, dy, mode)  # noqa: E731
    _finite_differences(fn, x)


def test_gelu_grad_input_gradient_rule_and_input_refusal():
    g = gradc.Graph("gg")
    x, dy = g.input("x", "float32", (3,)), g.input("dy", "float32", (3,))
    g.output(ops.gelu_grad(x, dy, "tanh"), "y")
    with pytest.raises(gradc.UnsupportedError, match="gelu_grad.*second derivative of gelu"):
        gradc.grad(g)
    g2 = gradc.Graph("gg2")
    dy2 = g2.input("dy", "float32", (3,))
    g2.output(ops.gelu_grad(ops.constant(f32(-1, 0.5, 2)), dy2, "tanh"), "y")
    t = gradc.grad(g2)
    assert [n.op for n in t.nodes].count("gelu_grad") == 2
    got = gradc.compile(t, "reference")(dy=f32(1, 1, 1), grad_y=f32(1, 2, 3))["grad_dy"]
    want = np.array(T_GELU_3["float64", "tanh"][1], np.float64).astype(np.float32) * f32(1, 2, 3)
    np.testing.assert_allclose(got, want, rtol=1e-6)


def test_erf_gradient_is_pytorchs_order_with_the_constant_in_the_dtype():
    t = gradc.grad(graph(lambda x: {"y": ops.erf(x)}, {"x": ("float16", (2,))}))
    consts = [n.attrs["value"] for n in t.nodes if n.op == "constant"]
    assert any(c.dtype == np.float16 and c == np.float16(2 / math.sqrt(math.pi)) for c in consts)
    assert [n.op for n in t.nodes if n.op != "constant"][-5:] == ["mul", "neg", "exp", "mul", "mul"]


def test_is_nan_has_no_gradient():
    g = graph(lambda x: {"y": ops.where(ops.is_nan(x), ops.constant(np.float32(0)), x)},
              {"x": ("float32", (3,))})
    got = gradc.compile(gradc.grad(g), "reference")(x=f32(nan, 1, 2), grad_y=f32(5, 6, 7))
    assert_bits(got["grad_x"], f32(0, 6, 7))


# -- the reference's constants ------------------------------------------------------------------

def test_reference_literals_are_the_float64_constants():
    import inspect  # lazy: only this test reads the source
    src = inspect.getsource(activation)
    assert repr(math.sqrt(0.5)) == "0.7071067811865476" and "0.7071067811865476" in src
    assert repr(math.sqrt(2 / math.pi)) == "0.7978845608028654" in src
    assert 2 / math.sqrt(math.pi) * math.sqrt(0.5) * 0.5 == 0.3989422804014327
    assert 3 * 0.044715 == 0.134145


def test_reference_gelu_uses_erfc_not_one_plus_erf():
    """Below x = -6 the written form 1 + erf(x/sqrt 2) cancels to 0 even in float64."""
    mp = pytest.importorskip("mpmath")
    mp.mp.prec = 200
    x = np.array([-10.0, -20.0, -37.0])
    got = activation.gelu64(x, "none")
    exact = np.array([float(v * mp.erfc(-mp.mpf(v) / mp.sqrt(2)) / 2) for v in x])
    np.testing.assert_allclose(got, exact, rtol=1e-12)  # erfc's condition number is ~x**2
    assert (x * 0.5 * (1 + np.array([math.erf(v / math.sqrt(2)) for v in x])) == 0).all()


# -- a slow per-element oracle written from §25.1-§25.2 -----------------------------------------

def _exp(v: float) -> float:
    return math.exp(v) if v < 709.7 else math.inf  # math.exp raises where the result overflows


def _oracle_gelu(x: float, mode: str) -> float:
    if mode == "none":
        return x * (0.5 * math.erfc(-x * math.sqrt(0.5)))
    u = math.sqrt(2 / math.pi) * (x + 0.044715 * x * x * x)
    return x * (1 / (1 + _exp(-2 * u)))


def _oracle_slope(x: float, mode: str) -> float:
    if not math.isfinite(x):
        return math.nan
    if mode == "none":
        pdf = math.exp(-x * x / 2) / math.sqrt(2 * math.pi) if abs(x) < 1e150 else 0.0
        return 0.5 * math.erfc(-x * math.sqrt(0.5)) + x * pdf
    u = math.sqrt(2 / math.pi) * (x + 0.044715 * x * x * x) if abs(x) < 1e100 else \
        math.copysign(math.inf, x)
    p, q = 1 / (1 + _exp(-2 * u)), 1 / (1 + _exp(2 * u))
    if p * q == 0:
        return p
    return p + 2 * x * p * q * math.sqrt(2 / math.pi) * (1 + 3 * 0.044715 * x * x)


@pytest.mark.parametrize("dtype", ["float16", "float32", "float64"])
@pytest.mark.parametrize("mode", ["none", "tanh"])
def test_reference_matches_the_loop_oracle(dtype, mode):
    rng = np.random.default_rng(11)
    x = np.concatenate([rng.standard_normal(300) * 4, 10.0 ** rng.uniform(-8, 4, 100)
                        * rng.choice([-1, 1], 100), [inf, -inf, nan, 0, -0.0]]).astype(dtype)
    dy = rng.standard_normal(x.shape).astype(dtype)
    acc = np.float64 if dtype == "float64" else np.float32
    y = np.array([_oracle_gelu(float(v), mode) for v in x]).astype(dtype)
    d = np.array([_oracle_slope(float(v), mode) for v in x]).astype(acc)
    dx = (dy.astype(acc) * d).astype(dtype)
    ref = gradc.compile(graph(lambda x, dy: {"y": ops.gelu(x, mode),
                                             "dx": ops.gelu_grad(x, dy, mode)},
                              {"x": (dtype, x.shape), "dy": (dtype, x.shape)}),
                        "reference")(x=x, dy=dy)
    # the oracle's own association and math.exp differ from the reference's float64 rounding
    # by an ulp or two: float64 results within §25.4, float16/32 nearly always the same bits
    assert_25_4(ref["y"], y, x)
    assert_25_4(ref["dx"], dx, x, dy)
    if dtype != "float64":
        assert np.mean(ref["y"] == y) > 0.99 and np.mean(ref["dx"] == dx) > 0.99


# -- GELU written out in ONNX -------------------------------------------------------------------

def test_written_out_gelu_imports_op_by_op():
    """Div/Erf/Add/Mul and Pow/Mul/Add/Tanh/Mul (§28.1): each op its gradc op, never gelu."""
    onnx = pytest.importorskip("onnx")
    pytest.importorskip("onnxruntime")
    from onnx import helper as oh  # lazy: optional dependency, skipped above
    from onnx_import_helpers import cross_check, make

    def c(name: str, v: float):
        return oh.make_node("Constant", [], [name], value=oh.make_tensor(
            name, onnx.TensorProto.FLOAT, [], [v]))

    erf_form = [c("r2", math.sqrt(2)), c("one", 1.0), c("half", 0.5),
                oh.make_node("Div", ["x", "r2"], ["a"]), oh.make_node("Erf", ["a"], ["b"]),
                oh.make_node("Add", ["b", "one"], ["d"]), oh.make_node("Mul", ["x", "d"], ["e"]),
                oh.make_node("Mul", ["e", "half"], ["y"])]
    tanh_form = [c("three", 3.0), c("k", 0.044715), c("s", math.sqrt(2 / math.pi)),
                 c("one", 1.0), c("half", 0.5), oh.make_node("Pow", ["x", "three"], ["p"]),
                 oh.make_node("Mul", ["p", "k"], ["a"]), oh.make_node("Add", ["x", "a"], ["b"]),
                 oh.make_node("Mul", ["b", "s"], ["d"]), oh.make_node("Tanh", ["d"], ["t"]),
                 oh.make_node("Add", ["t", "one"], ["u"]), oh.make_node("Mul", ["x", "u"], ["v"]),
                 oh.make_node("Mul", ["v", "half"], ["y"])]
    x = f32(-3, -1, -0.5, 0.5, 1, 3)
    for nodes, want in ((erf_form, {"div", "erf", "add", "mul"}),
                        (tanh_form, {"pow", "mul", "add", "tanh"})):
        m = make(nodes, {"x": (np.float32, [6])}, {"y": np.float32})
        g = gradc.from_onnx(m)
        assert want <= {n.op for n in g.nodes} and "gelu" not in {n.op for n in g.nodes}
        cross_check(m, {"x": x}, exact=False, rtol=1e-6, atol=1e-7)


# -- the onnx target's model --------------------------------------------------------------------

@pytest.mark.parametrize("dtype", ["float16", "float32", "float64"])
def test_exported_model_passes_the_checker_and_runs_in_a_stock_session(dtype):
    """Default domain only, the full checker, a symbolic batch, and a stock onnxruntime session
    (every optimization on) giving the target's bits, within §25.4 of the reference."""
    pytest.importorskip("onnxruntime")
    from onnx_export_helpers import both, build  # lazy: needs onnx and onnxruntime

    rng = np.random.default_rng(4)
    x = np.concatenate([rng.standard_normal(24) * 4, [inf, -inf, nan, -0.0, 40, -40, 7e4, -7e4]])
    with np.errstate(over="ignore"):
        x, dy = x.reshape(4, 8).astype(dtype), rng.standard_normal((4, 8)).astype(dtype)

    def fn(x, dy):
        return (ops.gelu(x), ops.gelu(x, "tanh"), ops.gelu_grad(x, dy),
                ops.gelu_grad(x, dy, "tanh"), ops.erf(x), ops.sin(x), ops.cos(x), ops.is_nan(x))
    g = build(fn, [x, dy], symbolic=True)
    model = gradc.to_onnx(g)
    assert {o.domain for o in model.opset_import} == {""}
    got, ref = both(g, [x, dy])
    for i, (a, b) in enumerate(zip(got, ref)):
        if b.dtype == np.bool_:
            assert_bits(a, b)
        else:
            assert_25_4(a, b, x if i < 4 else None, dy if i in (2, 3) else None, what=f"y{i}")


def test_numpy_module_imports_math_only_for_erf(tmp_path):
    """math.erf/erfc (NumPy has none): the module imports Python's math, and still stands
    alone; a module without them keeps importing NumPy only."""
    import ast  # lazy: only this test parses the generated source
    from test_numpy_target import import_source

    g = graph(lambda x: {"y": ops.gelu(x), "e": ops.erf(x), "s": ops.sin(x)},
              {"x": ("float32", (7,))})
    src = gradc.compile(g, target="numpy").source
    imports = [ast.unparse(n) for n in ast.walk(ast.parse(src)) if isinstance(n, ast.Import)]
    assert imports == ["import math", "import numpy as np"]
    assert "imports only NumPy and Python's math." in src
    mod = import_source(src, tmp_path / "gelu_module.py")
    got = mod.ENTRY(f32(*X1))
    want = gradc.compile(g, target="reference")(x=f32(*X1))
    for k in want:
        assert_bits(got[k], want[k])
    g2 = graph(lambda x: {"s": ops.sin(x), "n": ops.is_nan(x)}, {"x": ("float32", (7,))})
    assert "import math" not in gradc.compile(g2, target="numpy").source
