"""Batch normalization (SPEC-training.md §12): the §22.3 vectors on every target, rejected
arguments (§12's checklist, §22.12 V-24/V-25), a slow loop oracle written from §12's
pseudocode, and cross-target agreement on random data: ``numpy`` and ``c`` bit for bit,
``onnx`` within §9.5's bound (symbolic batch dims, float16/32/64)."""

from __future__ import annotations

import itertools
import time

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import gradc
from gradc import ops
from gradc.ir.ops import REGISTRY
from gradc.backends.c import batch_norm as cbn
from helpers import assert_bits, run, assert_c_compiles_cleanly, cuda_targets

TARGETS = ("reference", "numpy", "c", "onnx") + cuda_targets()
BN_OPS = ("batch_normalization", "batch_normalization_grad", "batch_normalization_training",
          "batch_normalization_training_grad")


def f32(v, shape=(1, 2, 1, 1)):
    return np.array(v, np.float32).reshape(shape)


# §22.3: X (N, C, H, W) = 2x2x1x2, parameters 1x2x1x1, epsilon 7
X = np.array([[[[1, 7]], [[-2, 4]]], [[[1, 7]], [[4, -2]]]], np.float32)
DY = np.array([[[[1, 2]], [[1, 0]]], [[[3, 4]], [[0, -1]]]], np.float32)
SCALE, BIAS = f32([2, 0.5]), f32([1, -1])
MEAN, VAR = f32([4, 1]), f32([9, 9])
Y = np.array([[[[-0.5, 2.5]], [[-1.375, -0.625]]], [[[-0.5, 2.5]], [[-0.625, -1.375]]]],
             np.float32)


@pytest.mark.parametrize("target", TARGETS)
def test_t_bn_1_training(target):
    y, m, v = run(lambda x, s, b: ops.batch_normalization_training(x, s, b, epsilon=7),
                  X, SCALE, BIAS, target=target)
    assert_bits(y, Y)
    assert_bits(m, MEAN)
    assert_bits(v, VAR)


@pytest.mark.parametrize("target", TARGETS)
def test_t_bn_2_training_grad(target):
    dx, ds, db = run(lambda *a: ops.batch_normalization_training_grad(*a, epsilon=7),
                     X, DY, MEAN, VAR, SCALE, target=target)
    want = np.array([[[[-0.609375, -0.390625]], [[0.125, 0]]],
                     [[[0.390625, 0.609375]], [[0, -0.125]]]], np.float32)
    assert_bits(dx, want)
    assert_bits(ds, f32([1.5, 0]))
    assert_bits(db, f32([10, 0]))


@pytest.mark.parametrize("target", TARGETS)
def test_t_bn_3_inference_and_grad(target):
    (y,) = run(lambda *a: ops.batch_normalization(*a, epsilon=7), X, MEAN, VAR, SCALE, BIAS,
               target=target)
    assert_bits(y, Y)
    dx, ds, db = run(lambda *a: ops.batch_normalization_grad(*a, epsilon=7),
                     X, DY, MEAN, VAR, SCALE, target=target)
    want = np.array([[[[0.5, 1]], [[0.125, 0]]], [[[1.5, 2]], [[0, -0.125]]]], np.float32)
    assert_bits(dx, want)
    assert_bits(ds, f32([1.5, 0]))
    assert_bits(db, f32([10, 0]))


# -- rejected arguments -------------------------------------------------------------------------
def _vals(*shapes, dtypes=None):
    g = gradc.Graph("v")
    dtypes = dtypes or ["float32"] * len(shapes)
    return [g.input(f"a{i}", d, s) for i, (s, d) in enumerate(zip(shapes, dtypes))]


P = (1, 3, 1, 1)
X4 = (2, 3, 4, 4)
CHECKS = [
    ("V-24", lambda: ops.batch_normalization_training(*_vals(X4, P, (1, 3, 2, 1))),
     "bias.shape"),
    ("V-25", lambda: ops.batch_normalization(*_vals((2, 3), (3,), (1, 3), (1, 3), (1, 3))),
     "mean.rank"),
    ("rank 0", lambda: ops.batch_normalization_training(*_vals((), (), ())), "input.rank"),
    ("rank 9", lambda: ops.batch_normalization_training(*_vals((1,) * 9, (1,) * 9, (1,) * 9)),
     "input.rank"),
    ("int dtype", lambda: ops.batch_normalization_training(
        *_vals(X4, P, P, dtypes=["int32"] * 3)), "input.dtype"),
    ("scale dtype", lambda: ops.batch_normalization_training(
        *_vals(X4, P, P, dtypes=["float32", "float64", "float32"])), "scale.dtype"),
    ("dtype before rank", lambda: ops.batch_normalization_training(
        *_vals(X4, (3,), P, dtypes=["float32", "float32", "float16"])), "scale.rank"),
    ("dy dtype", lambda: ops.batch_normalization_grad(
        *_vals(X4, X4, P, P, P, dtypes=["float32", "float16", "float32", "float32",
                                        "float32"])), "input_gradient.dtype"),
    ("dy shape", lambda: ops.batch_normalization_training_grad(
        *_vals(X4, (2, 3, 4, 1), P, P, P)), "input_gradient.shape"),
    ("dy shape before params", lambda: ops.batch_normalization_grad(
        *_vals(X4, (2, 3, 4, 1), (1, 3, 2, 2), P, P)), "input_gradient.shape"),
    ("param dim", lambda: ops.batch_normalization(*_vals(X4, (1, 2, 1, 1), P, P, P)),
     "mean.shape"),
    ("params differ", lambda: ops.batch_normalization(*_vals(X4, P, P, P, (1, 1, 1, 1))),
     "bias.shape"),
    ("params differ grad", lambda: ops.batch_normalization_training_grad(
        *_vals(X4, X4, P, (1, 3, 4, 1), P)), "variance.shape"),
    ("symbol vs int", lambda: ops.batch_normalization_training(*_vals(("N", 3), ("N", 3),
                                                                     (2, 3))), "bias.shape"),
    ("epsilon < 0", lambda: ops.batch_normalization_training(*_vals(X4, P, P), epsilon=-1e-3),
     "epsilon"),
    ("epsilon inf", lambda: ops.batch_normalization(*_vals(X4, P, P, P, P), epsilon=1e39),
     "epsilon"),
    ("epsilon str", lambda: ops.batch_normalization_grad(*_vals(X4, X4, P, P, P),
                                                         epsilon="1"), "epsilon"),
]


@pytest.mark.parametrize("call,field", [c[1:] for c in CHECKS], ids=[c[0] for c in CHECKS])
def test_rejected_arguments_name_their_field(call, field):
    with pytest.raises(gradc.VerifyError) as e:
        call()
    msg = str(e.value)
    assert msg.split(": ")[0] in BN_OPS and msg.split(": ")[1] == field, msg
    assert ", got " in msg


def test_shapes_symbolic_batch_and_defaults():
    x, s, b = _vals(("N", 3, 5, 5), P, P)
    y, m, v = ops.batch_normalization_training(x, s, b)
    assert y.type.shape == ("N", 3, 5, 5) and m.type.shape == P and v.type.shape == P
    assert y.producer.attrs["epsilon"] == float(np.float32(1e-5))
    dx, ds, db = ops.batch_normalization_training_grad(x, y, m, v, s, epsilon=0)
    assert dx.type.shape == ("N", 3, 5, 5) and ds.type.shape == P and db.type.shape == P
    assert ops.batch_normalization(x, m, v, s, b).type.shape == ("N", 3, 5, 5)
    z, one = _vals((7,), (1,))
    assert ops.batch_normalization_training(z, one, one)[1].type.shape == (1,)


def test_text_ir_round_trips():
    g = gradc.Graph("r")
    x = g.input("x", "float32", ("N", 2, 3))
    s = g.input("s", "float32", (1, 2, 1))
    y, m, v = ops.batch_normalization_training(x, s, s, epsilon=0.125)
    g.output(y, "y")
    g.output(ops.batch_normalization(x, m, v, s, s, epsilon=0.5), "z")
    text = str(g)
    assert str(gradc.parse(text)) == text


# -- a slow loop oracle from §12's pseudocode ---------------------------------------------------
ACC = {np.dtype(np.float16): np.float32, np.dtype(np.float32): np.float32,
       np.dtype(np.float64): np.float64}


def groups(shape, pshape):
    """(base, members) per parameter position; members in increasing logical index."""
    for base in np.ndindex(*pshape):
        ranges = [range(n) if p == 1 else (base[j],) for j, (n, p) in
                  enumerate(zip(shape, pshape))]
        yield base, list(itertools.product(*ranges))


def canonical_sum(terms, a):
    s = a(0)
    for t in terms:
        s = a(s + a(t))
    return s


def slow_inference(X, mean, var, scale, bias, eps):
    a = ACC[X.dtype]
    Y = np.empty(X.shape, X.dtype)
    for i in np.ndindex(*X.shape):
        p = tuple(0 if sz == 1 else i[j] for j, sz in enumerate(mean.shape))
        dev = a(np.sqrt(a(a(var[p]) + a(eps))))
        Y[i] = a(a(a(scale[p]) * a(a(a(X[i]) - a(mean[p])) / dev)) + a(bias[p]))
    return [Y]


def slow_grad(X, dY, mean, var, scale, eps):
    a = ACC[X.dtype]
    dX, dS, dB = (np.empty(X.shape, X.dtype), np.empty(mean.shape, X.dtype),
                  np.empty(mean.shape, X.dtype))
    for base, members in groups(X.shape, mean.shape):
        dev = a(np.sqrt(a(a(var[base]) + a(eps))))
        c = a(a(scale[base]) / dev)
        for m in members:
            dX[m] = a(a(dY[m]) * c)
        dS[base] = a(canonical_sum([a(a(dY[m]) * a(a(X[m]) - a(mean[base]))) for m in members],
                                   a) / dev)
        dB[base] = canonical_sum([dY[m] for m in members], a)
    return [dX, dS, dB]


def slow_training(X, scale, bias, eps):
    a = ACC[X.dtype]
    Y = np.empty(X.shape, X.dtype)
    M, V = np.empty(scale.shape, X.dtype), np.empty(scale.shape, X.dtype)
    for base, members in groups(X.shape, scale.shape):
        n = a(len(members))
        mean = a(canonical_sum([X[m] for m in members], a) / n)
        var = a(canonical_sum([a(a(X[m]) - mean) * a(a(X[m]) - mean) for m in members], a) / n)
        dev = a(np.sqrt(a(var + a(eps))))
        for m in members:
            Y[m] = a(a(a(scale[base]) * a(a(a(X[m]) - mean) / dev)) + a(bias[base]))
        M[base], V[base] = mean, var
    return [Y, M, V]


def slow_training_grad(X, dY, mean, var, scale, eps):
    a = ACC[X.dtype]
    dX, dS, dB = (np.empty(X.shape, X.dtype), np.empty(mean.shape, X.dtype),
                  np.empty(mean.shape, X.dtype))
    for base, members in groups(X.shape, mean.shape):
        n = a(len(members))
        mu, ve, sc = a(mean[base]), a(a(var[base]) + a(eps)), a(scale[base])
        dev = a(np.sqrt(ve))
        sum_dy = canonical_sum([dY[m] for m in members], a)
        sum_dyt = canonical_sum([a(a(dY[m]) * a(a(X[m]) - mu)) for m in members], a)
        mdy, q = a(sum_dy / n), a(a(sum_dyt / n) / ve)
        for m in members:
            r = a(a(a(dY[m]) - mdy) - a(a(a(X[m]) - mu) * q))
            dX[m] = a(a(sc / dev) * r)
        dS[base], dB[base] = a(sum_dyt / dev), sum_dy
    return [dX, dS, dB]


@st.composite
def case(draw, dtypes=(np.float32, np.float64, np.float16), max_rank=4):
    """(dtype, X shape, parameter shape, arrays, epsilon) of a random batch normalization."""
    dtype = draw(st.sampled_from(dtypes))
    rank = draw(st.integers(1, max_rank))
    shape = tuple(draw(st.lists(st.integers(1, 4), min_size=rank, max_size=rank)))
    keep = draw(st.lists(st.booleans(), min_size=rank, max_size=rank))
    pshape = tuple(d if k else 1 for d, k in zip(shape, keep))
    seed = draw(st.integers(0, 2 ** 16))
    eps = draw(st.sampled_from([0.0, 1e-5, 0.1, 2.0]))
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal(shape) * 3 + rng.standard_normal()).astype(dtype)
    dy = rng.standard_normal(shape).astype(dtype)
    scale = rng.standard_normal(pshape).astype(dtype)
    bias = rng.standard_normal(pshape).astype(dtype)
    mean = rng.standard_normal(pshape).astype(dtype)
    var = (rng.random(pshape) * 2 + 0.25).astype(dtype)
    return dtype, shape, pshape, dict(x=x, dy=dy, scale=scale, bias=bias, mean=mean, var=var), eps


def _ref(op, arrays, eps):
    return REGISTRY[op].reference({"epsilon": float(np.float32(eps))}, *arrays)


def _args(op, a):
    return {
        "batch_normalization": (a["x"], a["mean"], a["var"], a["scale"], a["bias"]),
        "batch_normalization_grad": (a["x"], a["dy"], a["mean"], a["var"], a["scale"]),
        "batch_normalization_training": (a["x"], a["scale"], a["bias"]),
        "batch_normalization_training_grad": (a["x"], a["dy"], a["mean"], a["var"], a["scale"]),
    }[op]


SLOW = {"batch_normalization": slow_inference, "batch_normalization_grad": slow_grad,
        "batch_normalization_training": slow_training,
        "batch_normalization_training_grad": slow_training_grad}


@settings(max_examples=40, deadline=None)
@given(case(), st.sampled_from(BN_OPS))
def test_reference_matches_slow_loop_oracle(c, op):
    _, _, _, a, eps = c
    args = _args(op, a)
    eps32 = float(np.float32(eps))
    with np.errstate(all="ignore"):
        want = SLOW[op](*args, eps32)
        got = _ref(op, args, eps)
    for g, w in zip(got, want):
        assert_bits(g, w, nan_payload=False)


def test_oracle_sums_from_positive_zero():
    """A group of -0.0 terms sums to +0 (canonical order from +0), on every target."""
    x = np.full((2, 1), -0.0, np.float32)
    dy = np.full((2, 1), -0.0, np.float32)
    one, zero = np.ones((1, 1), np.float32), np.zeros((1, 1), np.float32)
    for t in TARGETS[:3]:
        dx, ds, db = run(lambda *v: ops.batch_normalization_grad(*v), x, dy, zero, one, one,
                         target=t)
        assert_bits(db, np.zeros((1, 1), np.float32))
        _, m, _ = run(lambda *v: ops.batch_normalization_training(*v), x, one, one, target=t)
        assert_bits(m, np.zeros((1, 1), np.float32))


# -- cross-target agreement ----------------------------------------------------------------------
EPS = {np.dtype(np.float32): 2.0 ** -23, np.dtype(np.float64): 2.0 ** -52}


def _bounds(op, a, eps):
    """(S, terms) per result: the computation on absolute values in float64 (§9.5)."""
    d = {k: np.abs(v.astype(np.float64)) for k, v in a.items()}
    axes = tuple(i for i, p in enumerate(a["scale"].shape) if p == 1)
    n = int(np.prod([a["x"].shape[i] for i in axes]))

    def s(t):
        return np.sum(t, axis=axes, keepdims=True)

    if op == "batch_normalization_training":
        x = a["x"].astype(np.float64)
        mean = s(x) / n
        var = s((x - mean) ** 2) / n
        ve = var + eps
        sm = s(d["x"]) / n
        sv = s((d["x"] + sm) ** 2) / n
        sy = d["scale"] * (d["x"] + sm) / np.sqrt(ve) * (1 + sv / ve) + d["bias"]
        return [(sy, n + 8), (sm, n + 1), (sv, n + 2)]
    ve = d["var"] + eps
    dev = np.sqrt(ve)
    cen = d["x"] + d["mean"]
    if op == "batch_normalization":
        return [(d["scale"] * cen / dev + d["bias"], 6)]
    sdyt = s(d["dy"] * cen)
    if op == "batch_normalization_grad":
        return [(d["dy"] * d["scale"] / dev, 4), (sdyt / dev, n + 2), (s(d["dy"]), n + 1)]
    sdx = d["scale"] / dev * (d["dy"] + s(d["dy"]) / n + cen * sdyt / n / ve)
    return [(sdx, n + 10), (sdyt / dev, n + 2), (s(d["dy"]), n + 1)]


def _close(got, ref, S, terms, dtype):
    if np.dtype(dtype) == np.float16:
        tol = 2.0 ** -9 * S * 4 + 2.0 ** -24 * 4  # one float16 rounding of a float32 result
    else:
        e = EPS[np.dtype(dtype)]
        tol = (terms + 1) * e * S * 2 + 1e-30
    g, r = got.astype(np.float64), ref.astype(np.float64)
    assert (np.isnan(g) == np.isnan(r)).all(), (got, ref)  # a NaN matches a NaN (§1.6)
    ok = ~np.isnan(r) & np.isfinite(tol)
    assert (np.abs(g - r)[ok] <= tol[ok]).all(), (got, ref, tol)


def _graph(a, eps, batch):
    """A graph of the four ops; ``x`` and ``dy`` have the symbolic batch ``N`` if ``batch``."""
    g = gradc.Graph("bn")
    vals = {}
    for name, arr in a.items():
        shape = ("N",) + arr.shape[1:] if batch and name in ("x", "dy") else arr.shape
        vals[name] = g.input(name, arr.dtype.name, shape)
    for op in BN_OPS:
        out = getattr(ops, op)(*_args(op, vals), epsilon=eps)
        for i, v in enumerate(out if isinstance(out, tuple) else (out,)):
            g.output(v, f"{op}{i}")
    return g


@settings(max_examples=8, deadline=None)
@given(case(max_rank=4), st.booleans())
def test_targets_agree(c, batch):
    dtype, shape, pshape, a, eps = c
    g = _graph(a, eps, batch and pshape[0] == 1)
    ref = gradc.compile(g, target="reference")(**a)
    for t in ("numpy", "c"):
        got = gradc.compile(g, target=t)(**a)
        for k in ref:
            assert_bits(got[k], ref[k], nan_payload=False)
    got = gradc.compile(g, target="onnx")(**a)
    for op in BN_OPS:
        with np.errstate(all="ignore"):
            bounds = _bounds(op, a, float(np.float32(eps)))
        for i, (S, terms) in enumerate(bounds):
            _close(got[f"{op}{i}"], ref[f"{op}{i}"], S, terms, dtype)


def test_resnet_layer_reference_is_fast():
    """§12 references vectorized: a resnet-like 2x64x64x64 layer, forward and backward."""
    rng = np.random.default_rng(0)
    x = rng.standard_normal((2, 64, 64, 64)).astype(np.float32)
    p = np.ones((1, 64, 1, 1), np.float32)
    start = time.perf_counter()
    y, m, v = _ref("batch_normalization_training", (x, p, p), 1e-5)
    _ref("batch_normalization_training_grad", (x, y, m, v, p), 1e-5)
    assert time.perf_counter() - start < 1.0


# -- generated C ---------------------------------------------------------------------------------
def _c_graph(dtype):
    """Every op at every kind of layout: NCHW, no reduced axis, all reduced, symbolic dims."""
    g = gradc.Graph("c")
    cases = [(("N", 3, 2, 2), (1, 3, 1, 1)), ((2, 3), (2, 3)), ((4,), (1,)),
             (("N", "C"), (1, "C"))]
    k = 0
    for i, (shape, pshape) in enumerate(cases):
        x, dy = g.input(f"x{i}", dtype, shape), g.input(f"d{i}", dtype, shape)
        p = g.input(f"p{i}", dtype, pshape)
        outs = list(ops.batch_normalization_training(x, p, p))
        outs += [ops.batch_normalization(x, p, p, p, p, epsilon=0.0)]
        outs += list(ops.batch_normalization_grad(x, dy, p, p, p))
        outs += list(ops.batch_normalization_training_grad(x, dy, p, p, p, epsilon=2.5))
        for v in outs:
            g.output(v, f"y{k}")
            k += 1
    return g


def test_generated_c_compiles_without_warnings(tmp_path):
    """-Wall -Wextra -Werror, as tests/test_c_kernels.py does for the other kernels."""
    for d in ("float16", "float32", "float64"):
        assert_c_compiles_cleanly(_c_graph(d), tmp_path)


def test_c_kernels_match_reference_with_symbolic_channels():
    g = _c_graph("float32")
    rng = np.random.default_rng(4)
    sizes = {"N": 3, "C": 5}
    feeds = {}
    for v in g.inputs:
        shape = tuple(sizes[d] if isinstance(d, str) else d for d in v.type.shape)
        a = rng.standard_normal(shape).astype(np.float32)
        feeds[v.name] = np.abs(a) + 0.5 if v.name.startswith("p") else a
    want = gradc.compile(g, target="reference")(**feeds)
    got = gradc.compile(g, target="c")(**feeds)
    for k in want:
        assert_bits(got[k], want[k], nan_payload=False)


@pytest.mark.parametrize("dtype", ["float32", "float64", "float16"])
def test_c_interleaved_groups_match_reference(dtype):
    """The C kernels sum WIDTH groups' chains together (backends/c/batch_norm.py): whole blocks,
    a tail of single groups, narrower blocks for few groups, two kept axes, symbolic channels --
    each sum still in its group's canonical order, so bit for bit the reference's. Values of
    mixed magnitude make any change of summation order show in the last bits."""
    assert cbn._width(19) == 8 and cbn._width(6) == 2 and cbn._width(1) == 1
    g = gradc.Graph("blocks")
    cases = [((3, 19, 5, 4), (1, 19, 1, 1)), ((2, 6, 7), (1, 6, 1)), ((2, 1, 9), (1, 1, 1)),
             ((2, 5, 3, 4), (1, 5, 3, 1)), (("N", "C", 3), (1, "C", 1))]
    k = 0
    for i, (shape, pshape) in enumerate(cases):
        x, dy = g.input(f"x{i}", dtype, shape), g.input(f"d{i}", dtype, shape)
        p = g.input(f"p{i}", dtype, pshape)
        outs = list(ops.batch_normalization_training(x, p, p))
        outs += [ops.batch_normalization(x, p, p, p, p)]
        outs += list(ops.batch_normalization_grad(x, dy, p, p, p))
        outs += list(ops.batch_normalization_training_grad(x, dy, p, p, p))
        for v in outs:
            g.output(v, f"y{k}")
            k += 1
    rng = np.random.default_rng(7)
    sizes = {"N": 3, "C": 21}
    feeds = {}
    for v in g.inputs:
        shape = tuple(sizes[d] if isinstance(d, str) else d for d in v.type.shape)
        a = rng.standard_normal(shape) * 10.0 ** rng.integers(-3, 4, shape)
        feeds[v.name] = (np.abs(a) + 0.5 if v.name.startswith("p") else a).astype(dtype)
    want = gradc.compile(g, target="reference")(**feeds)
    ex = gradc.compile(g, target="c")
    for w in (8, 2):   # blocks of 8 (19 and 21 symbolic channels) and of 2 (6 channels)
        assert f"gb * {w} + {w} <= " in ex.source
    assert "const int64_t gg = gb;" in ex.source   # 1 channel: one group per block
    got = ex(**feeds)
    for k in want:
        assert_bits(got[k], want[k], nan_payload=False)
