"""convolution and convolution_filter_grad (SPEC-training.md §10): vectors, checks, oracle, targets.

- §22.1's vectors on every target, exactly (their partial sums are exact);
- every §22.12 row of these ops, and the rest of the checklists, name their field;
- the reference against §10's pseudocode run loop by loop (``convolution_oracle``), bit for bit,
  on random data over the fields' ranges; ``numpy`` and ``c`` bit for bit against the reference
  (symbolic batch included), ``onnx`` within §9.5's bound.
"""

from __future__ import annotations

import numpy as np
import pytest

import gradc
from gradc import ops
from helpers import (assert_bits, f32, run, assert_c_compiles_cleanly, compile_for,
                     cuda_targets)

import convolution_oracle as oracle

TARGETS = ("reference", "numpy", "c", "onnx") + cuda_targets()
F16, F32, F64 = np.float16, np.float32, np.float64


def arr(values, shape, dtype=F32):
    return np.array(values, dtype).reshape(shape)


def _forward_graph(x, w, b, **f):
    """A graph computing ``y = convolution(x, w, b, **f)``."""
    g = gradc.Graph("conv")
    xv, wv = g.input("x", x.dtype.name, x.shape), g.input("w", w.dtype.name, w.shape)
    bv = g.input("b", b.dtype.name, b.shape) if b is not None else None
    g.output(ops.convolution(xv, wv, bv, **f), "y")
    return g


def grads(target, x, w, b, dy, **f):
    """y, dx, dw (and db) of convolution on ``target`` for the cotangent ``dy``."""
    t = gradc.grad(_forward_graph(x, w, b, **f))
    feeds = {"x": x, "w": w, "grad_y": dy}
    if b is not None:
        feeds["b"] = b
    out = compile_for(t, target, passes=None)(**feeds)
    names = ["y", "grad_x", "grad_w"] + (["grad_b"] if b is not None else [])
    return [out[k] for k in names]


# -- §22.1 ---------------------------------------------------------------------------------

X1 = np.arange(1, 10, dtype=F32).reshape(1, 1, 3, 3)
W1 = arr([1, 2, 3, 4], (1, 1, 2, 2))
ONES22 = np.ones((1, 1, 2, 2), F32)


@pytest.mark.parametrize("target", TARGETS)
def test_t_cv_1_bias(target):
    y, dx, dw, db = grads(target, X1, W1, arr([10], (1, 1, 1, 1)), ONES22)
    assert_bits(y, arr([47, 57, 77, 87], (1, 1, 2, 2)))
    assert_bits(dw, arr([12, 16, 24, 28], (1, 1, 2, 2)))
    assert_bits(db, arr([4], (1, 1, 1, 1)))
    assert_bits(dx, arr([1, 3, 2, 4, 10, 6, 3, 7, 4], (1, 1, 3, 3)))


@pytest.mark.parametrize("target", TARGETS)
def test_t_cv_2_mode_convolution(target):
    y, dx, dw = grads(target, X1, W1, None, ONES22, mode="convolution")
    assert_bits(y, arr([23, 33, 53, 63], (1, 1, 2, 2)))
    assert_bits(dw, arr([28, 24, 16, 12], (1, 1, 2, 2)))
    assert_bits(dx, arr([4, 7, 3, 6, 10, 4, 2, 3, 1], (1, 1, 3, 3)))


@pytest.mark.parametrize("target", TARGETS)
def test_t_cv_3_groups_strides_padding(target):
    x = np.arange(1, 33, dtype=F32).reshape(1, 2, 4, 4)
    w = arr([1, 0, -1, 2, 0, 1, 1, -1], (2, 1, 2, 2))
    f = dict(group_count=2, strides=(2, 2), start_padding=(1, 0), end_padding=(0, 1))
    y, dx, dw = grads(target, x, w, None, np.ones((1, 2, 2, 2), F32), **f)
    assert_bits(y, arr([3, 5, 16, 20, -1, -1, 21, 23], (1, 2, 2, 2)))
    assert_bits(dw, arr([12, 14, 24, 28, 44, 46, 88, 92], (2, 1, 2, 2)))
    assert_bits(dx, arr([-1, 2, -1, 2, 1, 0, 1, 0, -1, 2, -1, 2, 0, 0, 0, 0,
                         1, -1, 1, -1, 0, 1, 0, 1, 1, -1, 1, -1, 0, 0, 0, 0], (1, 2, 4, 4)))


@pytest.mark.parametrize("target", TARGETS)
def test_t_cv_4_dilations(target):
    x = np.arange(1, 17, dtype=F32).reshape(1, 1, 4, 4)
    y, dx, dw = grads(target, x, arr([1, -1, 2, 1], (1, 1, 2, 2)), None, ONES22,
                      dilations=(2, 2))
    assert_bits(y, arr([27, 30, 39, 42], (1, 1, 2, 2)))
    assert_bits(dw, arr([14, 22, 46, 54], (1, 1, 2, 2)))
    assert_bits(dx, arr([1, 1, -1, -1, 1, 1, -1, -1, 2, 2, 1, 1, 2, 2, 1, 1], (1, 1, 4, 4)))


T_CV_5 = [  # fields, bias, result, dW, dX
    (dict(strides=(2,)), None, [1, 10, 2, 20, 3, 30], [6, 6], [11, 11, 11]),
    (dict(strides=(2,), start_padding=(1,), output_padding=(1,)), None, [10, 2, 20, 3, 30, 0],
     [5, 6], [10, 11, 11]),
    (dict(strides=(3,), output_padding=(2,)), 5, [6, 15, 5, 7, 25, 5, 8, 35, 5, 5], [6, 6],
     [11, 11, 11]),
    (dict(strides=(2,), mode="convolution"), None, [10, 1, 20, 2, 30, 3], [6, 6], [11, 11, 11]),
]


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("case", range(len(T_CV_5)), ids=["5a", "5b", "5c", "7"])
def test_t_cv_5_and_7_backward_1d(target, case):
    f, bias, want, dw_want, dx_want = T_CV_5[case]
    x, w = arr([1, 2, 3], (1, 1, 3)), arr([1, 10], (1, 1, 2))
    b = None if bias is None else arr([bias], (1, 1, 1))
    out = grads(target, x, w, b, np.ones((1, 1, len(want)), F32), direction="backward", **f)
    assert_bits(out[0], arr(want, (1, 1, -1)))
    assert_bits(out[2], arr(dw_want, (1, 1, 2)))
    assert_bits(out[1], arr(dx_want, (1, 1, 3)))


@pytest.mark.parametrize("target", TARGETS)
def test_t_cv_6_backward_groups(target):
    x, w = arr([1, 2, 3, 4], (1, 2, 2)), arr([1, 1, 1, -1], (2, 1, 2))
    y, dx, dw = grads(target, x, w, None, np.ones((1, 2, 3), F32), direction="backward",
                      group_count=2)
    assert_bits(y, arr([1, 3, 2, 3, 1, -4], (1, 2, 3)))
    assert_bits(dw, arr([3, 3, 7, 7], (2, 1, 2)))
    assert_bits(dx, arr([2, 2, 0, 0], (1, 2, 2)))


@pytest.mark.parametrize("target", TARGETS)
def test_t_cv_8_3d(target):
    x = np.arange(8, dtype=F32).reshape(1, 1, 2, 2, 2)
    y, dx, dw = grads(target, x, np.ones((1, 1, 2, 2, 2), F32), None,
                      np.ones((1, 1, 1, 1, 1), F32))
    assert_bits(y, arr([28], (1, 1, 1, 1, 1)))
    assert_bits(dw, x)
    assert_bits(dx, np.ones_like(x))


# -- §22.12 and the checklists ----------------------------------------------------------------

def _two(s1, s2, d2="float32", bias=None, bias_dtype="float32", d1="float32"):
    """x and w (and a bias of shape ``bias``) in one graph."""
    g = gradc.Graph("v")
    vals = [g.input("x", d1, s1), g.input("w", d2, s2)]
    if bias is not None:
        vals.append(g.input("b", bias_dtype, bias))
    return vals


CHECKS = [
    ("V-14", lambda: ops.convolution(*_two((1, 2, 4, 4), (4, 3, 3, 3))), "filter.shape"),
    ("V-15", lambda: ops.convolution(*_two((1, 1, 2, 2), (1, 1, 3, 3))), "input.shape"),
    ("V-16", lambda: ops.convolution(*_two((1, 1, 4, 4), (1, 1, 2, 2)), output_padding=(1, 0)),
     "output_padding[0]"),
    ("V-17", lambda: ops.convolution(*_two((1, 1, 3), (1, 1, 2)), direction="backward",
                                     strides=(2,), output_padding=(2,)), "output_padding[0]"),
    ("V-18", lambda: ops.convolution(*_two((1, 4, 5, 5), (6, 2, 3, 3)), group_count=3),
     "group_count"),
    ("V-19", lambda: ops.convolution(*_two((1, 1, 4, 4), (1, 1, 2, 2), bias=(1,))),
     "bias.rank"),
    ("V-20", lambda: ops.convolution_filter_grad(*_two((1, 1, 3, 3), (1, 1, 3, 3)),
                                                 (1, 1, 2, 2)), "input_gradient.shape"),
    ("rank", lambda: ops.convolution(*_two((1, 4), (1, 4))), "input.rank"),
    ("dtype", lambda: ops.convolution(*_two((1, 1, 3), (1, 1, 2), "int32", d1="int32")),
     "input.dtype"),
    ("filter dtype", lambda: ops.convolution(*_two((1, 1, 3), (1, 1, 2), "float16")),
     "filter.dtype"),
    ("filter rank", lambda: ops.convolution(*_two((1, 1, 3), (1, 1, 2, 2))), "filter.rank"),
    ("bias dtype", lambda: ops.convolution(*_two((1, 1, 3), (1, 1, 2), bias=(1, 1, 1),
                                                 bias_dtype="float64")), "bias.dtype"),
    ("mode", lambda: ops.convolution(*_two((1, 1, 3), (1, 1, 2)), mode="flip"), "mode"),
    ("direction", lambda: ops.convolution(*_two((1, 1, 3), (1, 1, 2)), direction="up"),
     "direction"),
    ("strides len", lambda: ops.convolution(*_two((1, 1, 3), (1, 1, 2)), strides=(1, 1)),
     "strides"),
    ("strides 0", lambda: ops.convolution(*_two((1, 1, 3), (1, 1, 2)), strides=(0,)),
     "strides[0]"),
    ("dilations 0", lambda: ops.convolution(*_two((1, 1, 3), (1, 1, 2)), dilations=(0,)),
     "dilations[0]"),
    ("padding < 0", lambda: ops.convolution(*_two((1, 1, 3), (1, 1, 2)), end_padding=(-1,)),
     "end_padding[0]"),
    ("group 0", lambda: ops.convolution(*_two((1, 1, 3), (1, 1, 2)), group_count=0),
     "group_count"),
    ("group bool", lambda: ops.convolution(*_two((1, 1, 3), (1, 1, 2)), group_count=True),
     "group_count"),
    ("symbolic C", lambda: ops.convolution(*_two((1, "C", 3), (1, 1, 2))), "input.shape[1]"),
    ("symbolic K", lambda: ops.convolution(*_two((1, 1, 3), (1, 1, "K"))), "filter.shape[2]"),
    ("item 6 before 7", lambda: ops.convolution(*_two((1, 3, 3), (1, 1, "K")), group_count=2),
     "filter.shape[2]"),
    ("backward filter", lambda: ops.convolution(*_two((1, 2, 3), (1, 2, 2)),
                                                direction="backward"), "filter.shape"),
    ("bias shape", lambda: ops.convolution(*_two((1, 1, 3), (2, 1, 2), bias=(1, 1, 2))),
     "bias.shape"),
    ("backward size", lambda: ops.convolution(*_two((1, 1, 1), (1, 1, 1)), direction="backward",
                                              start_padding=(1,)), "end_padding[0]"),
    ("fg dtype", lambda: ops.convolution_filter_grad(*_two((1, 1, 3), (1, 1, 2), "float64"),
                                                     (1, 1, 2)), "input_gradient.dtype"),
    ("fg sizes", lambda: ops.convolution_filter_grad(*_two((1, 1, 3), (1, 1, 2)), (1, 1)),
     "output_sizes"),
    ("fg size 0", lambda: ops.convolution_filter_grad(*_two((1, 1, 3), (1, 1, 2)), (1, 1, 0)),
     "output_sizes[2]"),
    ("fg channels", lambda: ops.convolution_filter_grad(*_two((1, 2, 3), (1, 1, 2)), (1, 1, 2)),
     "output_sizes"),
    ("fg dy channels", lambda: ops.convolution_filter_grad(*_two((1, 1, 3), (1, 3, 2)),
                                                           (1, 1, 2)), "input_gradient.shape"),
]


@pytest.mark.parametrize("call,field", [c[1:] for c in CHECKS], ids=[c[0] for c in CHECKS])
def test_rejected_arguments_name_their_field(call, field):
    with pytest.raises(gradc.VerifyError) as e:
        call()
    msg = str(e.value)
    assert msg.split(": ")[1] == field, msg
    assert msg.startswith(("convolution: ", "convolution_filter_grad: ")) and ", got " in msg


def test_symbolic_batch_flows_through_and_bias_is_optional():
    g = gradc.Graph("s")
    x = g.input("x", "float32", ("N", 3, 8, 8))
    w = g.input("w", "float32", (6, 1, 3, 3))
    y = ops.convolution(x, w, strides=(2, 2), start_padding=(1, 1), end_padding=(1, 1),
                        group_count=3)
    assert y.type.shape == ("N", 6, 4, 4)
    assert len(y.producer.inputs) == 2
    t = ops.convolution(y, w, direction="backward", strides=(2, 2), output_padding=(1, 1),
                        start_padding=(1, 1), end_padding=(1, 1), group_count=3)
    assert t.type.shape == ("N", 3, 8, 8)
    assert ops.convolution_filter_grad(x, y, (6, 1, 3, 3), strides=(2, 2), start_padding=(1, 1),
                                       end_padding=(1, 1), group_count=3).type.shape == \
        (6, 1, 3, 3)


def test_text_ir_round_trips():
    g = gradc.Graph("r")
    x = g.input("x", "float32", ("N", 2, 5, 5))
    w = g.input("w", "float32", (4, 1, 2, 3))
    b = g.input("b", "float32", (1, 4, 1, 1))
    y = ops.convolution(x, w, b, mode="convolution", strides=(2, 1), dilations=(1, 2),
                        start_padding=(1, 0), end_padding=(0, 2), group_count=2)
    g.output(y, "y")
    g.output(ops.convolution(x, w, group_count=2), "z")
    assert gradc.parse(str(g)) == g


# -- the reference against §10's pseudocode; the targets against the reference ---------------

def random_case(rng: np.random.Generator, dtype=F32, max_nd=3):
    """Random fields over their ranges (groups, dilations, strides, asymmetric padding, output
    padding, both directions and modes); arrays (x, w, b or None, dy) and the fields."""
    nd = int(rng.integers(1, max_nd + 1))
    g, cig, cog = (int(v) for v in rng.integers(1, 3, 3))
    fwd = bool(rng.integers(2))
    k, s, d = ([int(v) for v in rng.integers(1, hi, nd)] for hi in (4, 4, 3))
    sp, ep = ([int(v) for v in rng.integers(0, 3, nd)] for _ in range(2))
    spatial = [int(v) for v in rng.integers(1, 6, nd)]
    if fwd:
        op = [0] * nd
        spatial = [max(n, (k[i] - 1) * d[i] + 1 - sp[i] - ep[i]) for i, n in enumerate(spatial)]
        w = rng.standard_normal([g * cog, cig] + k)
    else:
        op = [int(rng.integers(0, max(s[i], d[i]))) for i in range(nd)]
        w = rng.standard_normal([g * cig, cog] + k)
        for i in range(nd):  # an output of at least one element
            while oracle.conv_out_size(spatial[i], k[i], s[i], d[i], sp[i], ep[i], op[i],
                                       "backward") < 1:
                sp[i] = max(0, sp[i] - 1)
                ep[i] = max(0, ep[i] - 1)
                spatial[i] += 1
    f = dict(mode=("cross_correlation", "convolution")[int(rng.integers(2))],
             direction="forward" if fwd else "backward", strides=s, dilations=d,
             start_padding=sp, end_padding=ep, output_padding=op, group_count=g)
    x = rng.standard_normal([int(rng.integers(1, 3)), g * cig] + spatial)
    b = rng.standard_normal([1, g * cog] + [1] * nd) if rng.integers(2) else None
    y = oracle.convolution(x, w, b, f["mode"], f["direction"], s, d, sp, ep, op, g)
    dy = rng.standard_normal(y.shape)
    cast = [a if a is None else a.astype(dtype) for a in (x, w, b, dy)]
    return cast, f


def _oracle_fields(f):
    return (f["mode"], f["direction"], f["strides"], f["dilations"], f["start_padding"],
            f["end_padding"], f["output_padding"], f["group_count"])


@pytest.mark.parametrize("dtype", [F32, F64, F16])
def test_reference_is_the_pseudocode_bit_for_bit(dtype):
    rng = np.random.default_rng({F32: 1, F64: 2, F16: 3}[dtype])
    for _ in range(25):
        (x, w, b, dy), f = random_case(rng, dtype)
        want = oracle.convolution(x, w, b, *_oracle_fields(f))
        args = (x, w) if b is None else (x, w, b)
        got = run(lambda *v: ops.convolution(*v, **f), *args)[0]
        assert_bits(got, want, nan_payload=False)
        want = oracle.convolution_filter_grad(x, dy, w.shape, *_oracle_fields(f))
        got = run(lambda a, c: ops.convolution_filter_grad(a, c, w.shape, **f), x, dy)[0]
        assert_bits(got, want, nan_payload=False)


def _graph(x, w, b, dy, f, symbolic):
    g = gradc.Graph("c")
    n = "N" if symbolic else x.shape[0]
    xv = g.input("x", x.dtype.name, (n,) + x.shape[1:])
    wv = g.input("w", w.dtype.name, w.shape)
    bv = None if b is None else g.input("b", b.dtype.name, b.shape)
    dyv = g.input("dy", dy.dtype.name, (n,) + dy.shape[1:])
    g.output(ops.convolution(xv, wv, bv, **f), "y")
    g.output(ops.convolution_filter_grad(xv, dyv, w.shape, **f), "dw")
    return g


def _bound(x, w, b, dy, f):
    """§9.5's tolerance per element, from the ops on absolute values (n products, k = 1)."""
    a = [None if v is None else np.abs(v.astype(F64)) for v in (x, w, b, dy)]
    s_y = oracle.convolution(a[0], a[1], a[2], *_oracle_fields(f))
    s_w = oracle.convolution_filter_grad(a[0], a[3], w.shape, *_oracle_fields(f))
    ones = [None if v is None else np.ones_like(v) for v in a]
    n_y = oracle.convolution(ones[0], ones[1], None, *_oracle_fields(f))
    n_w = oracle.convolution_filter_grad(ones[0], ones[3], w.shape, *_oracle_fields(f))
    eps, eta = {F32: (2.0 ** -23, 2.0 ** -126), F64: (2.0 ** -52, 2.0 ** -1022)}.get(
        x.dtype.type, (None, None))
    if eps is None:  # float16
        return 2.0 ** -9 * s_y + 2.0 ** -24, 2.0 ** -9 * s_w + 2.0 ** -24
    return (n_y + 2) * eps * s_y + eta, (n_w + 1) * eps * s_w + eta


@pytest.mark.parametrize("dtype", [F32, F64, F16])
def test_targets_agree_with_the_reference(dtype):
    rng = np.random.default_rng({F32: 11, F64: 12, F16: 13}[dtype])
    for i in range(8):
        (x, w, b, dy), f = random_case(rng, dtype)
        g = _graph(x, w, b, dy, f, symbolic=i % 2 == 0)
        feeds = {"x": x, "w": w, "dy": dy} | ({} if b is None else {"b": b})
        want = gradc.compile(g, target="reference", passes=None)(**feeds)
        for target in ("numpy", "c"):
            got = gradc.compile(g, target=target, passes=None)(**feeds)
            for k in want:
                assert_bits(got[k], want[k], nan_payload=False)
        got = gradc.compile(g, target="onnx", passes=None)(**feeds)
        tol_y, tol_w = _bound(x, w, b, dy, f)
        for k, tol in (("y", tol_y), ("dw", tol_w)):
            err = np.abs(got[k].astype(F64) - want[k].astype(F64))
            assert got[k].dtype == want[k].dtype and (err <= tol).all(), (k, f, err.max())


def test_padding_terms_are_skipped_not_multiplied():
    """An inf filter tap that only meets padding leaves the output finite on every exact
    target (0 * inf would be NaN)."""
    x = f32(1, 2, 3).reshape(1, 1, 3)
    w = f32(np.inf, 1).reshape(1, 1, 2)
    for target in ("reference", "numpy", "c"):
        (y,) = run(lambda a, c: ops.convolution(a, c, start_padding=(1,)), x, w, target=target)
        assert_bits(y, f32(1, np.inf, np.inf).reshape(1, 1, 3))


def test_float16_rounds_once():
    """float16 data sums in float32 and rounds once: 2048 + 1 + 1 is 2050, not 2048."""
    x = np.array([2048, 1, 1], F16).reshape(1, 3, 1)
    w = np.ones((1, 3, 1), F16)
    for target in ("reference", "numpy", "c", "onnx"):
        (y,) = run(ops.convolution, x, w, target=target)
        assert_bits(y, np.array([2050], F16).reshape(1, 1, 1))


def test_resnet_like_layer_is_fast_enough():
    """A 64-channel 3x3 layer at batch 2, 32x32 through the reference (real models go through
    it in tests): forward, input gradient and filter gradient."""
    import time
    rng = np.random.default_rng(5)
    x = rng.standard_normal((2, 64, 32, 32)).astype(F32)
    w = rng.standard_normal((64, 64, 3, 3)).astype(F32)
    start = time.perf_counter()
    grads("reference", x, w, None, rng.standard_normal((2, 64, 32, 32)).astype(F32),
          start_padding=(1, 1), end_padding=(1, 1))
    assert time.perf_counter() - start < 3.0


def test_generated_c_compiles_without_warnings(tmp_path):
    """-Wall -Wextra -Werror on the kernels of both ops (every dtype, both directions, modes,
    symbolic batch, with and without bias): users compile the C too."""


    for i, (dtype, direction) in enumerate([("float16", "forward"), ("float32", "backward"),
                                            ("float64", "forward"), ("float32", "forward")]):
        g = gradc.Graph(f"w{i}")
        x = g.input("x", dtype, ("N", 2, 5, 4))
        w = g.input("w", dtype, (2, 1, 2, 3))
        b = g.input("b", dtype, (1, 2, 1, 1)) if i % 2 else None
        g.output(ops.convolution(x, w, b, ("convolution", "cross_correlation")[i % 2], direction,
                                 (2, 1), (1, 2), (1, 0), (0, 1),
                                 (1, 0) if direction == "backward" else None, 2), "y")
        assert_c_compiles_cleanly(gradc.grad(g), tmp_path)


def test_bias_is_an_optional_operand():
    from gradc.ir.ops.registry import make_node
    x, w = _two((1, 1, 3), (1, 1, 2))
    assert len(ops.convolution(x, w, None).producer.inputs) == 2
    with pytest.raises(gradc.VerifyError, match=r"convolution: operands: expected 2\.\.3"):
        make_node("convolution", [x], {})
