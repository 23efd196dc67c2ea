"""SPEC-training.md §16 on every target: the §22.7 vectors (values and gradients), the §22.12
rejected arguments, float16 and rank 0, and symbolic batch dims through the fusion passes."""

from __future__ import annotations

import numpy as np
import pytest

import gradc
from gradc import ops
from helpers import assert_bits
from test_elementwise_math_support import TARGETS, assert_ulps, graph, run_targets

nan, inf = np.nan, np.inf


def f32(*v: float) -> np.ndarray:
    return np.array(v, np.float32)


def _check(outs: dict, want: dict, approx: tuple[str, ...] = (), tol: int = 4) -> None:
    """Reference: ``want`` (a NaN it makes matches any NaN); other targets: the reference's bits,
    or within ``tol`` ulps of ``want`` for ``approx``."""
    ref = outs["reference"]
    for t, got in outs.items():
        for k, w in want.items():
            ulps = tol if (t, k) != ("onnx", "tanh") else 2 * tol  # onnxruntime's double tanh
            w = np.asarray(w, dtype=got[k].dtype)
            if t == "reference":
                assert_bits(got[k], w, nan_payload=False)
            elif k in approx:
                assert_ulps(got[k], w, ulps)
            else:
                assert_bits(got[k], ref[k])


def test_t_ew_1_maximum_minimum_and_gradient():
    lhs = f32(1, 2, nan, -0.0, 0.0, nan, 3)
    rhs = f32(1, 1, 5, 0.0, -0.0, nan, 4)
    g = graph(lambda a, b: {"mx": ops.maximum(a, b), "mn": ops.minimum(a, b)},
              {"a": ("float32", (7,)), "b": ("float32", (7,))})
    t = gradc.grad(g)
    feeds = {"a": lhs, "b": rhs, "grad_mx": f32(1, 2, 3, 4, 5, 6, 7), "grad_mn": f32(*[0] * 7)}
    _check(run_targets(t, feeds), {
        "mx": f32(1, 2, 5, -0.0, 0.0, nan, 4), "mn": f32(1, 1, 5, -0.0, 0.0, nan, 3),
        "grad_a": f32(1, 2, 0, 4, 5, 6, 0), "grad_b": f32(0, 0, 3, 0, 0, 0, 7)})


def test_t_ew_2_comparisons_and_where():
    x, y = f32(1, nan, -0.0, 2), f32(1, 1, 0.0, nan)
    f, tr = [False] * 4, np.array([True, False, True, False])
    g = graph(lambda x, y, c, a, b: {
        "gt": ops.greater(x, y), "lt": ops.less(x, y), "eq": ops.equal(x, y),
        "ge": ops.greater_equal(x, y), "le": ops.less_equal(x, y), "w": ops.where(c, a, b)},
        {"x": ("float32", (4,)), "y": ("float32", (4,)), "c": ("bool", (4,)),
         "a": ("float32", (4,)), "b": ("float32", (4,))})
    feeds = {"x": x, "y": y, "c": np.array([True, False, True, True]), "a": f32(1, 2, 3, 4),
             "b": f32(9, 8, 7, 6)}
    _check(run_targets(g, feeds), {"gt": f, "lt": f, "eq": tr, "ge": tr, "le": tr,
                                   "w": f32(1, 8, 3, 4)})


def test_t_ew_3_div_and_gradient():
    g = graph(lambda a, b: {"y": ops.div(a, b)}, {"a": ("float32", (4,)), "b": ("float32", (4,))})
    outs = run_targets(g, {"a": f32(1, -3, 0, 1), "b": f32(4, 2, -0.0, 0)})
    _check(outs, {"y": f32(0.25, -1.5, nan, inf)})
    g2 = graph(lambda a, b: {"y": ops.div(a, b)}, {"a": ("float32", (2,)), "b": ("float32", (2,))})
    outs = run_targets(gradc.grad(g2), {"a": f32(1, -3), "b": f32(4, 2), "grad_y": f32(1, 1)})
    _check(outs, {"grad_a": f32(0.25, 0.5), "grad_b": f32(-0.0625, 0.75)})


def test_t_ew_4_exp_log_sqrt_pow_and_gradients():
    g = graph(lambda x: {"exp": ops.exp(x), "log": ops.log(x), "sqrt": ops.sqrt(x),
                         "p15": ops.pow(x, 1.5), "pm1": ops.pow(x, -1)},
              {"x": ("float32", (4,))})
    outs = run_targets(g, {"x": f32(0.25, 1, 4, 9)})
    _check(outs, {
        "exp": f32(1.2840254306793213, 2.7182817459106445, 54.598148345947266, 8103.083984375),
        "log": f32(-1.3862943649291992, 0, 1.3862943649291992, 2.1972246170043945),
        "sqrt": f32(0.5, 1, 2, 3), "p15": f32(0.125, 1, 8, 27),
        "pm1": f32(4, 1, 0.25, 0.1111111119389534)}, approx=("exp", "log", "pm1"))
    for name, fn, want in (("log", ops.log, f32(4, 2, 0.75, 0.4444444477558136)),
                           ("sqrt", ops.sqrt, f32(1, 1, 0.75, 0.6666666865348816)),
                           ("p15", lambda v: ops.pow(v, 1.5), f32(0.75, 3, 9, 18))):
        t = gradc.grad(graph(lambda x: {"y": fn(x)}, {"x": ("float32", (4,))}))
        outs = run_targets(t, {"x": f32(0.25, 1, 4, 9), "grad_y": f32(1, 2, 3, 4)})
        _check(outs, {"grad_x": want}, approx=("grad_x",) if name == "p15" else ())
    t = gradc.grad(graph(lambda x: {"y": ops.pow(x, 0)}, {"x": ("float32", (2,))}))
    _check(run_targets(t, {"x": f32(0, 2), "grad_y": f32(1, 1)}), {"y": f32(1, 1),
                                                                   "grad_x": f32(0, 0)})


@pytest.mark.parametrize("dtype", ["float32", "float64", "float16"])
def test_pow_one_half_is_c_pow_not_sqrt(dtype):
    """fuzz/regressions/ir: pow is C's pow (§16.2), whose pow(-0, 0.5) is +0 and
    pow(-inf, 0.5) is +inf (C99 F.9.4.4), where sqrt gives -0 and NaN; NumPy's power takes
    sqrt for a scalar exponent of 0.5, so the reference gave NaN where C and onnx gave inf."""
    g = graph(lambda x: {"y": ops.pow(x, 0.5), "z": ops.pow(x, 2.0)}, {"x": (dtype, (5,))})
    x = np.array([-inf, -0.0, 0.0, -1, 4], dtype)
    for out in run_targets(g, {"x": x}).values():
        assert_bits(out["y"], np.array([inf, 0.0, 0.0, nan, 2], dtype), nan_payload=False)
        assert_bits(out["z"], np.array([inf, 0.0, 0.0, 1, 16], dtype))


def test_t_ew_5_sigmoid_tanh_and_gradients():
    t = gradc.grad(graph(lambda x: {"s": ops.sigmoid(x), "t": ops.tanh(x)},
                         {"x": ("float32", (5,))}))
    x, one = f32(-2, -0.5, 0, 0.5, 2), f32(*[1] * 5)
    outs = run_targets(t, {"x": x, "grad_s": one, "grad_t": f32(*[0] * 5)})
    _check(outs, {"s": f32(0.11920291930437088, 0.3775406777858734, 0.5, 0.622459352016449,
                           0.8807970881462097),
                  "t": f32(-0.9640275835990906, -0.46211716532707214, 0, 0.46211716532707214,
                           0.9640275835990906)}, approx=("s", "t"))
    outs = run_targets(t, {"x": x, "grad_s": one, "grad_t": f32(*[0] * 5)})
    ref = outs["reference"]
    assert_bits(ref["grad_x"], f32(0.10499358177185059, 0.23500370979309082, 0.25,
                                   0.23500370979309082, 0.10499357432126999))
    outs = run_targets(t, {"x": x, "grad_s": f32(*[0] * 5), "grad_t": one})
    assert_bits(outs["reference"]["grad_x"],
                f32(0.07065081596374512, 0.7864477038383484, 1, 0.7864477038383484,
                    0.07065081596374512))


def test_t_ew_6_leaky_relu_and_gradient():
    t = gradc.grad(graph(lambda x: {"y": ops.leaky_relu(x, 0.25)}, {"x": ("float32", (6,))}))
    outs = run_targets(t, {"x": f32(-1, 0, -0.0, 2, nan, -inf), "grad_y": f32(*[1] * 6)})
    _check(outs, {"y": f32(-0.25, 0, -0.0, 2, nan, -inf),
                  "grad_x": f32(0.25, 0.25, 0.25, 1, 0.25, 0.25)})


def test_nan_payloads_and_negative_zero_are_copied_exactly():
    payload = np.array([0x7FC01234, 0xFFC00042, 0x80000000, 0x3F800000], np.uint32).view(np.float32)
    other = f32(5, nan, 0.0, -1)
    c = np.array([True, False, True, False])
    g = graph(lambda a, b, c: {"mx": ops.maximum(a, b), "mn": ops.minimum(b, a),
                               "w": ops.where(c, a, b), "lr": ops.leaky_relu(a, 0.5),
                               "dv": ops.div(a, b)},
              {"a": ("float32", (4,)), "b": ("float32", (4,)), "c": ("bool", (4,))})
    outs = run_targets(g, {"a": payload, "b": other, "c": c}, passes="default")
    for t in TARGETS:
        for k in ("mx", "mn", "w", "lr", "dv"):
            assert_bits(outs[t][k], outs["reference"][k])
    assert_bits(outs["reference"]["w"], np.where(c, payload, other))


@pytest.mark.parametrize("dtype", ["float16", "float64"])
def test_other_float_dtypes_and_rank0(dtype):
    x = np.array([-3.5, -0.0, 0.0, 0.1, 2.0, 65000, nan, -inf], dtype)
    y = np.array([2.0, 0.0, -0.0, 3.0, -2.5, 7, 1, 1], dtype)
    fns = {"div": lambda a, b: ops.div(a, b), "sqrt": lambda a, b: ops.sqrt(a),
           "exp": lambda a, b: ops.exp(a), "log": lambda a, b: ops.log(b),
           "pow": lambda a, b: ops.pow(a, 2), "sig": lambda a, b: ops.sigmoid(a),
           "tanh": lambda a, b: ops.tanh(a), "lr": lambda a, b: ops.leaky_relu(a, 0.1),
           "mx": ops.maximum, "ge": ops.greater_equal}
    g = graph(lambda a, b: {k: f(a, b) for k, f in fns.items()},
              {"a": (dtype, (8,)), "b": (dtype, (8,))})
    outs = run_targets(g, {"a": x, "b": y})
    approx = ("exp", "log", "sig", "tanh")
    _check(outs, {k: outs["reference"][k] for k in fns}, approx, 1 if dtype == "float16" else 4)
    s = graph(lambda a, b: {"y": ops.div(ops.exp(a), b), "m": ops.less(a, b)},
              {"a": (dtype, ()), "b": (dtype, ())})
    got = run_targets(s, {"a": np.array(0.5, dtype), "b": np.array(3, dtype)})
    for t in TARGETS:
        assert got[t]["y"].shape == () and got[t]["m"].dtype == np.bool_


@pytest.mark.parametrize("dtype", ["int8", "uint16", "int32", "uint64", "int64"])
def test_integer_maximum_minimum_comparisons_where(dtype):
    info = np.iinfo(dtype)
    a = np.array([info.min, 0, 5, info.max, 7, 1], dtype)
    b = np.array([info.max, 0, -1 if info.min else 9, info.min, 7, 2], dtype)
    c = np.array([True, False, True, False, True, False])
    g = graph(lambda a, b, c: {"mx": ops.maximum(a, b), "mn": ops.minimum(a, b),
                               "gt": ops.greater(a, b), "le": ops.less_equal(a, b),
                               "eq": ops.equal(a, b), "w": ops.where(c, a, b)},
              {"a": (dtype, (6,)), "b": (dtype, (6,)), "c": ("bool", (6,))})
    outs = run_targets(g, {"a": a, "b": b, "c": c})
    want = {"mx": np.maximum(a, b), "mn": np.minimum(a, b), "gt": a > b, "le": a <= b,
            "eq": a == b, "w": np.where(c, a, b)}
    _check(outs, want)


def test_bool_where_and_symbolic_batch_through_fusion():
    def fn(x, y, m):
        keep = ops.greater(x, y)
        z = ops.where(keep, ops.sigmoid(x), ops.leaky_relu(y))
        return {"z": ops.div(z, ops.maximum(x, y)), "k": ops.where(m, keep, ops.less(x, y)),
                "s": ops.sqrt(ops.minimum(ops.exp(x), y))}
    g = graph(fn, {"x": ("float32", ("N", 3)), "y": ("float32", (3,)), "m": ("bool", ("N", 1))})
    rng = np.random.default_rng(5)
    for n in (1, 4):
        feeds = {"x": rng.standard_normal((n, 3)).astype(np.float32),
                 "y": f32(0.5, -1, 2), "m": rng.random((n, 1)) < 0.5}
        outs = run_targets(g, feeds, passes="default")
        assert any(nd.op == "fused" for nd in gradc.optimize(g).graph.nodes)
        _check(outs, outs["reference"], approx=("z", "s"))


# -- §22.12 rejected arguments, and the other checks in SPEC order -------------------------------

def _build(fn, *types):
    g = gradc.Graph("v")
    vals = [g.input(f"x{i}", d, s) for i, (d, s) in enumerate(types)]
    return fn(*vals)


@pytest.mark.parametrize("fn,types,field", [
    (ops.div, [("int32", (4,)), ("int32", (4,))], "div: lhs.dtype"),                     # V-34
    (ops.where, [("float32", (4,)), ("float32", (4,)), ("float32", (4,))],
     "where: condition.dtype"),                                                          # V-35
    (lambda x: ops.leaky_relu(x, 1e39), [("float32", (4,))], "leaky_relu: alpha"),       # V-36
    (ops.div, [("float32", (4,)), ("float64", (4,))], "div: rhs.dtype"),
    (ops.div, [("float32", (4,)), ("float32", (3,))], "div: rhs.shape"),
    (ops.maximum, [("bool", (4,)), ("bool", (4,))], "maximum: lhs.dtype"),
    (ops.greater, [("float32", (2, 1)), ("float32", (3, 2))], "greater: rhs.shape"),
    (ops.exp, [("int32", (4,))], "exp: input.dtype"),
    (ops.sqrt, [("float32", (1,) * 9)], "sqrt: input.rank"),
    (lambda x: ops.pow(x, float("nan")), [("float32", (4,))], "pow: exponent"),
    (lambda x: ops.pow(x, "2"), [("float32", (4,))], "pow: exponent"),
    (lambda x: ops.pow(x, None), [("float32", (4,))], "pow: exponent"),
    (ops.where, [("bool", (4,)), ("float32", (4,)), ("float16", (4,))], "where: b.dtype"),
    (ops.where, [("bool", (3,)), ("float32", (4,)), ("float32", (4,))], "where: a.shape"),
    (ops.where, [("bool", (4,)), ("float32", (4,)), ("float32", (2, 3))], "where: b.shape"),
])
def test_rejected_arguments_name_the_field(fn, types, field):
    with pytest.raises(gradc.VerifyError, match=f"^{field}: expected"):
        _build(fn, *types)


def test_float_attributes_are_float32_values():
    g = gradc.Graph("a")
    x = g.input("x", "float64", (2,))
    y = ops.leaky_relu(x, 0.1)
    assert y.producer.attrs["alpha"] == float(np.float32(0.1))
    assert ops.pow(x, 1 / 3).producer.attrs["exponent"] == float(np.float32(1 / 3))
    assert ops.leaky_relu(x).producer.attrs["alpha"] == float(np.float32(0.01))
    g.output(y, "y")
    assert gradc.parse(str(g)) == g
