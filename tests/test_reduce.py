"""SPEC-training.md §14 on every target: the §22.5 vectors (values and gradients), the §22.12
rejected arguments, a slow loop oracle written from §14 against the reference, and cross-target
agreement on random data (NaN, ties, -0.0, float16, integers, symbolic batch dims)."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

import gradc
from gradc import ops
from helpers import assert_bits
from test_elementwise_math_support import TARGETS, graph, run_targets

nan = np.nan
RNG = np.random.default_rng(14)


def f32(*rows: object) -> np.ndarray:
    return np.array(rows, np.float32)


# -- §22.5 vectors -----------------------------------------------------------------------------

def test_t_rd_1_max_min_ties_nan_and_gradients():
    x = f32([3, 1, 3], [-1, 5, 5], [2, nan, 0], [nan, nan, -4])
    g = graph(lambda x: {"mx": ops.reduce_max(x, (1,)), "mn": ops.reduce_min(x, (1,)),
                         "all": ops.reduce_max(x)}, {"x": ("float32", (4, 3))})
    gg = gradc.grad(g, wrt=["x"])
    dy = f32(10, 20, 30, 40)
    feeds = {"x": x, "grad_mx": dy, "grad_mn": f32(0, 0, 0, 0), "grad_all": np.float32(0)}
    outs = run_targets(gg, feeds)
    for t, o in outs.items():
        assert_bits(o["mx"], f32(3, 5, 2, -4))
        assert_bits(o["mn"], f32(1, -1, 0, -4))
        assert_bits(o["all"], np.array(5, np.float32))
        assert_bits(o["grad_x"], f32([10, 0, 0], [0, 20, 0], [30, 0, 0], [0, 0, 40]))
    mn_grad = run_targets(graph(lambda x, d: {"y": ops.reduce_min_grad(x, d, (1,))},
                                {"x": ("float32", (4, 3)), "d": ("float32", (4,))}),
                          {"x": x, "d": dy})
    for o in mn_grad.values():
        assert_bits(o["y"], f32([0, 10, 0], [20, 0, 0], [0, 0, 30], [0, 0, 40]))


def test_t_rd_2_mean_and_gradient():
    x = f32([1, 2, 3, 6], [0.5, -0.5, 4, 8])
    g = graph(lambda x: {"m": ops.reduce_mean(x, (1,), True), "a": ops.reduce_mean(x)},
              {"x": ("float32", (2, 4))})
    gg = gradc.grad(g, wrt=["x"])
    outs = run_targets(gg, {"x": x, "grad_m": f32([2], [-4]), "grad_a": np.float32(0)})
    for o in outs.values():
        assert_bits(o["m"], f32([3], [3]))
        assert_bits(o["a"], np.array(3, np.float32))
        assert_bits(o["grad_x"], f32([0.5] * 4, [-1] * 4))


def test_element_count_values_and_dtypes():
    for dt, want in (("float32", 12), ("float16", 12), ("int64", 12), ("int32", 12),
                     ("float64", 12)):
        g = graph(lambda x: {"n": ops.element_count(x, (0, 2), dt), "all":
                             ops.element_count(x, None, dt)}, {"x": ("float32", (3, 5, 4))})
        for o in run_targets(g, {"x": np.zeros((3, 5, 4), np.float32)}).values():
            assert_bits(o["n"], np.array(want, dt))
            assert_bits(o["all"], np.array(60, dt))


def test_element_count_reads_symbolic_dims():
    g = graph(lambda x: {"n": ops.element_count(x, (0, 1), "float32")},
              {"x": ("float32", ("N", 3))})
    for o in run_targets(g, {"x": np.zeros((7, 3), np.float32)}).values():
        assert_bits(o["n"], np.array(21, np.float32))


def test_selection_copies_signed_zeros_and_first_tie():
    x = f32([0.0, -0.0], [-0.0, 0.0], [nan, -np.inf], [nan, nan])
    g = graph(lambda x: {"mx": ops.reduce_max(x, (1,)), "mn": ops.reduce_min(x, (1,))},
              {"x": ("float32", (4, 2))})
    for o in run_targets(g, {"x": x}).values():
        assert_bits(o["mx"], f32(0.0, -0.0, -np.inf, nan))
        assert_bits(o["mn"], f32(0.0, -0.0, -np.inf, nan))


# -- §22.12 rejected arguments -----------------------------------------------------------------

def _build(fn, *types):
    g = gradc.Graph("v")
    fn(*[g.input(f"x{i}", d, s) for i, (d, s) in enumerate(types)])


@pytest.mark.parametrize("fn,types,field", [
    (ops.reduce_mean, [("int32", (4,))], "reduce_mean: input.dtype"),                    # V-28
    (lambda x: ops.reduce_max(x, (1, -1)), [("float32", (2, 3))], r"reduce_max: axes\[1\]"),
    (lambda x: ops.reduce_min(x, (2,)), [("float32", (2, 3))], r"reduce_min: axes\[0\]"),
    (ops.reduce_max, [("bool", (2,))], "reduce_max: input.dtype"),
    (ops.reduce_mean, [("float32", (1,) * 9)], "reduce_mean: input.rank"),
    (lambda x: ops.reduce_mean(x, None, 1), [("float32", (2,))], "reduce_mean: keepdims"),
    (lambda x, d: ops.reduce_max_grad(x, d, (1,)), [("int32", (2, 3)), ("int32", (2,))],
     "reduce_max_grad: input.dtype"),
    (lambda x, d: ops.reduce_max_grad(x, d, (1,)), [("float32", (2, 3)), ("float64", (2,))],
     "reduce_max_grad: input_gradient.dtype"),
    (lambda x, d: ops.reduce_min_grad(x, d, (1,)), [("float32", (2, 3)), ("float32", (3,))],
     "reduce_min_grad: input_gradient.shape"),
    (lambda x: ops.element_count(x, None, "uint8"), [("float32", (2,))],
     "element_count: dtype"),
    (lambda x: ops.element_count(x, (0, 0)), [("float32", (2,))], r"element_count: axes\[1\]"),
])
def test_rejected_arguments_name_the_field(fn, types, field):
    with pytest.raises(gradc.VerifyError, match=f"^{field}: expected"):
        _build(fn, *types)


# -- a slow loop oracle written from §14 ---------------------------------------------------------

def _groups(shape, axes):
    kept = [i for i in range(len(shape)) if i not in axes]
    for base in itertools.product(*(range(shape[i]) for i in kept)):
        members = []
        for red in itertools.product(*(range(shape[a]) for a in axes)):
            idx = [0] * len(shape)
            for i, b in zip(kept, base):
                idx[i] = b
            for a, r in zip(axes, red):
                idx[a] = r
            members.append(tuple(idx))
        yield base, members


def _select(values, better):
    best = None
    for i, v in enumerate(values):
        if best is None or (v == v and (values[best] != values[best] or better(v, values[best]))):
            best = i
    return best


def _oracle(op, x, axes, dy=None):
    """The value of ``op`` per §14, one group at a time, in plain Python arithmetic."""
    shape = x.shape
    kshape = tuple(1 if i in axes else d for i, d in enumerate(shape))
    acc = np.float64 if x.dtype == np.float64 else np.float32
    if op.endswith("_grad"):
        out = np.zeros(shape, x.dtype)
        dyk = dy.reshape(kshape)
    else:
        out = np.zeros(kshape, x.dtype)
    for base, members in _groups(shape, axes):
        k = tuple(0 if i in axes else m for i, m in enumerate(members[0]))
        vals = [x[m] for m in members]
        if op == "reduce_mean":
            total = acc(vals[0])
            for v in vals[1:]:
                total = acc(total + acc(v))
            out[k] = x.dtype.type(acc(total / acc(len(vals))))
            continue
        better = (lambda u, v: u > v) if "max" in op else (lambda u, v: u < v)
        i = _select(vals, better)
        if op.endswith("_grad"):
            out[members[i]] = dyk[k]
        else:
            out[k] = vals[i]
    return out


def _random(dtype, shape):
    if np.dtype(dtype).kind in "iu":
        info = np.iinfo(dtype)
        return RNG.integers(max(info.min, -5), min(info.max, 5) + 1, shape).astype(dtype)
    x = RNG.integers(-4, 5, shape).astype(dtype) * dtype(0.5)  # ties
    x[RNG.random(shape) < 0.15] = np.nan
    x[RNG.random(shape) < 0.1] = -0.0
    x[RNG.random(shape) < 0.05] = -np.inf
    return x


CASES = [((3, 4, 5), (1,)), ((3, 4, 5), (0, 2)), ((2, 3, 2, 3), (1, 3)), ((6,), (0,)),
         ((2, 3, 4), (0, 1, 2)), ((4, 3), ())]


@pytest.mark.parametrize("shape,axes", CASES)
@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.float64, np.int8, np.uint16,
                                   np.int64, np.uint64])
def test_extremes_match_the_loop_oracle(shape, axes, dtype):
    x = _random(dtype, shape)
    for op in ("reduce_max", "reduce_min"):
        got = gradc.ir.ops.REGISTRY[op].reference({"axes": axes, "keepdims": True}, x)[0]
        assert_bits(got, _oracle(op, x, axes))
    if np.dtype(dtype).kind == "f":
        dy = RNG.standard_normal(_oracle("reduce_max", x, axes).shape).astype(dtype)
        for op in ("reduce_max_grad", "reduce_min_grad"):
            got = gradc.ir.ops.REGISTRY[op].reference({"axes": axes, "keepdims": True}, x, dy)[0]
            assert_bits(got, _oracle(op, x, axes, dy))


@pytest.mark.parametrize("shape,axes", CASES)
@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.float64])
def test_mean_matches_the_loop_oracle(shape, axes, dtype):
    x = RNG.standard_normal(shape).astype(dtype)
    got = gradc.ir.ops.REGISTRY["reduce_mean"].reference({"axes": axes, "keepdims": True}, x)[0]
    assert_bits(got, _oracle("reduce_mean", x, axes))


def test_the_oracle_can_fail():
    x = f32(1, 3, 3)
    assert _oracle("reduce_max_grad", x, (0,), f32(1)).tolist() == [0, 1, 0]
    assert _oracle("reduce_mean", f32(1, 2), (0,)).tolist() == [1.5]


# -- every target on random data -----------------------------------------------------------------

def _mean_bound(x, axes, dtype):
    """§9.5: (n + k + 1)·ε·S + η with S the mean of |x| (k = 1)."""
    n = int(np.prod([x.shape[a] for a in axes]))
    s = np.abs(x.astype(np.float64)).mean(axis=tuple(axes), keepdims=True)
    if dtype == np.float16:
        return 2.0 ** -9 * s + 2.0 ** -24
    eps, eta = (2.0 ** -23, 2.0 ** -126) if dtype == np.float32 else (2.0 ** -52, 2.0 ** -1022)
    return (n + 2) * eps * s + eta


@pytest.mark.parametrize("dtype", ["float32", "float16", "float64"])
def test_targets_agree_with_symbolic_batch(dtype):
    dt = np.dtype(dtype).type
    x = _random(dt, (5, 3, 4))
    x[np.isinf(x)] = 1.5
    xm = RNG.standard_normal((5, 3, 4)).astype(dt)
    g = graph(lambda x, xm: {
        "mx": ops.reduce_max(x, (0, 2)), "mn": ops.reduce_min(x, (1,), True),
        "mean": ops.reduce_mean(xm, (0, 2), True), "mean1": ops.reduce_mean(xm, (2,)),
        "n": ops.element_count(x, (0,), dtype)},
        {"x": (dtype, ("N", 3, 4)), "xm": (dtype, ("N", 3, 4))})
    gg = gradc.grad(g, wrt=["x", "xm"])
    feeds = {"x": x, "xm": xm, "grad_mx": RNG.standard_normal(3).astype(dt),
             "grad_mn": RNG.standard_normal((5, 1, 4)).astype(dt),
             "grad_mean": RNG.standard_normal((1, 3, 1)).astype(dt),
             "grad_mean1": RNG.standard_normal((5, 3)).astype(dt), "grad_n": dt(0)}
    outs = run_targets(gg, feeds)
    ref = outs["reference"]
    for t in TARGETS[1:]:
        for k in ("mx", "mn", "n", "grad_x"):
            assert_bits(outs[t][k], ref[k])
        for k in ("mean", "mean1", "grad_xm"):
            if t != "onnx":
                assert_bits(outs[t][k], ref[k])
        m = outs[t]["mean"].astype(np.float64)
        assert (np.abs(m - ref["mean"]) <= _mean_bound(xm, (0, 2), dt)).all()


@pytest.mark.parametrize("dtype", ["int8", "uint8", "int16", "uint16", "int32", "uint32",
                                   "int64", "uint64"])
def test_integer_extremes_on_every_target(dtype):
    info = np.iinfo(dtype)
    x = RNG.integers(info.min, info.max, (3, 4), dtype=dtype, endpoint=True)
    x[0, :2] = info.max
    x[1, 1:] = info.min
    g = graph(lambda x: {"mx": ops.reduce_max(x, (1,)), "mn": ops.reduce_min(x),
                         "k": ops.reduce_max(x, (0,), True)}, {"x": (dtype, (3, 4))})
    outs = run_targets(g, {"x": x})
    for o in outs.values():
        assert_bits(o["mx"], x.max(axis=1))
        assert_bits(o["mn"], np.array(x.min()))
        assert_bits(o["k"], x.max(axis=0, keepdims=True))


def test_rank0_and_empty_axes():
    g = graph(lambda x, v: {"a": ops.reduce_max(x), "b": ops.reduce_mean(x),
                            "c": ops.reduce_min(v, ()), "d": ops.reduce_mean(v, ())},
              {"x": ("float32", ()), "v": ("float32", (3,))})
    v = f32(1, -0.0, nan)
    for o in run_targets(g, {"x": np.float32(-2.5), "v": v}).values():
        assert_bits(o["a"], np.array(-2.5, np.float32))
        assert_bits(o["b"], np.array(-2.5, np.float32))
        assert_bits(o["c"], v)
        assert_bits(o["d"], v, nan_payload=False)
