"""average_pooling and average_pooling_grad (SPEC-training.md §13): vectors, checks, oracle,
targets, gradients, PyTorch.

- §22.4's vectors on every target, exactly; §22.12's V-26 and V-27 and the rest of the
  checklists name their field;
- both references against §13's pseudocode run window by window, bit for bit, over strides,
  asymmetric padding, dilations, include_padding and ceil sizes; ``numpy``, ``c`` and ``onnx``
  bit for bit against the reference (the ONNX tap form is exact; AveragePool within §9.5);
- finite differences in float64, and PyTorch's avg_pool2d/3d with autograd.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest

import gradc
from gradc import ops
from gradc.check import finite_differences
from helpers import assert_bits, assert_c_compiles_cleanly, compile_for, cuda_targets

TARGETS = ("reference", "numpy", "c", "onnx") + cuda_targets()
F16, F32, F64 = np.float16, np.float32, np.float64


def _graph(x, batch=None, **f):
    g = gradc.Graph("ap")
    shape = x.shape if batch is None else (batch,) + x.shape[1:]
    g.output(ops.average_pooling(g.input("x", x.dtype.name, shape), **f), "y")
    return g


def _run(target, x, dy, **f):
    t = gradc.grad(_graph(x, **f))
    out = compile_for(t, target, passes=None)(x=x, grad_y=dy)
    return out["y"], out["grad_x"]


def _a(v, *shape):
    return np.array(v, F32).reshape(shape)


# -- §22.4 ---------------------------------------------------------------------------------

@pytest.mark.parametrize("target", TARGETS)
def test_t_ap_1(target):
    y, dx = _run(target, np.arange(1, 10, dtype=F32).reshape(1, 1, 3, 3),
                 _a([1, 2, 3, 4], 1, 1, 2, 2), window_size=(2, 2))
    assert_bits(y, _a([3, 4, 6, 7], 1, 1, 2, 2))
    assert_bits(dx, _a([0.25, 0.75, 0.5, 1, 2.5, 1.5, 0.75, 1.75, 1], 1, 1, 3, 3))


T_AP_2 = {
    False: ([1, 2.5, 4.5, 8.5, 10, 12, 18.5, 20, 22],
            [1, 1, 1, 1.5, 1.5, 2, 1.25, 1.25, 1.5, 1.5, 2, 1.25, 1.25, 1.5, 1.5,
             3.5, 2, 2, 2.25, 2.25, 3.5, 2, 2, 2.25, 2.25]),
    True: ([0.25, 1.25, 2.25, 4.25, 10, 12, 9.25, 20, 22],
           [0.25, 0.5, 0.5, 0.75, 0.75, 1, 1.25, 1.25, 1.5, 1.5, 1, 1.25, 1.25, 1.5, 1.5,
            1.75, 2, 2, 2.25, 2.25, 1.75, 2, 2, 2.25, 2.25]),
}


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("include", [False, True])
def test_t_ap_2_padding(target, include):
    y, dx = _run(target, np.arange(1, 26, dtype=F32).reshape(1, 1, 5, 5),
                 np.arange(1, 10, dtype=F32).reshape(1, 1, 3, 3), window_size=(2, 2),
                 strides=(2, 2), start_padding=(1, 1), end_padding=(1, 1),
                 include_padding=include)
    assert_bits(y, _a(T_AP_2[include][0], 1, 1, 3, 3))
    assert_bits(dx, _a(T_AP_2[include][1], 1, 1, 5, 5))


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("include", [False, True])
def test_t_ap_3_ceil_mode(target, include):
    y, dx = _run(target, np.arange(9, dtype=F32).reshape(1, 1, 3, 3),
                 _a([1, 2, 3, 4], 1, 1, 2, 2), window_size=(2, 2), strides=(2, 2),
                 output_sizes=(2, 2), include_padding=include)
    assert_bits(y, _a([2, 3.5, 6.5, 8], 1, 1, 2, 2))
    assert_bits(dx, _a([0.25, 0.25, 1, 0.25, 0.25, 1, 1.5, 1.5, 4], 1, 1, 3, 3))


T_AP_4 = {
    False: ([5, 5, 6, 6, 5, 5, 6, 6, 9, 9, 10, 10, 9, 9, 10, 10],
            [0.25, 0.75, 0.75, 0.25, 0.75, 2.25, 2.25, 0.75, 0.75, 2.25, 2.25, 0.75,
             0.25, 0.75, 0.75, 0.25]),
    True: ([1.25, 2.5, 3, 1.5, 2.5, 5, 6, 3, 4.5, 9, 10, 5, 2.25, 4.5, 5, 2.5],
           [0.25, 0.5, 0.5, 0.25, 0.5, 1, 1, 0.5, 0.5, 1, 1, 0.5, 0.25, 0.5, 0.5, 0.25]),
}


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("include", [False, True])
def test_t_ap_4_dilations(target, include):
    y, dx = _run(target, np.arange(16, dtype=F32).reshape(1, 1, 4, 4), np.ones((1, 1, 4, 4), F32),
                 window_size=(2, 2), dilations=(2, 2), start_padding=(1, 1),
                 end_padding=(1, 1), include_padding=include)
    assert_bits(y, _a(T_AP_4[include][0], 1, 1, 4, 4))
    assert_bits(dx, _a(T_AP_4[include][1], 1, 1, 4, 4))


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("include, row", [(False, [31.5, 33, 35, 36]),
                                          (True, [10.5, 16.5, 17.5, 9])])
def test_t_ap_5_ceil_mode_with_padding(target, include, row):
    y, _ = _run(target, np.arange(1, 37, dtype=F32).reshape(1, 1, 6, 6),
                np.ones((1, 1, 4, 4), F32), window_size=(3, 3), strides=(2, 2),
                start_padding=(1, 1), end_padding=(1, 1), output_sizes=(4, 4),
                include_padding=include)
    assert_bits(y[0, 0, 3], np.array(row, F32))


# -- §22.12 and the checklists -------------------------------------------------------------

def _x(shape, dtype="float32"):
    return gradc.Graph("v").input("x", dtype, shape)


@pytest.mark.parametrize("shape, kw, field", [
    ((1, 1, 4, 4), {"window_size": (2, 2), "output_sizes": (5, 5)}, r"output_sizes\[0\]"),  # V-26
    ((1, 1, 4), {"window_size": (2,)}, "input.rank"),
    ((1, 1, 4, 4), {"window_size": (2, 2), "dtype": "int32"}, "input.dtype"),
    ((1, 1, 4, 4), {"window_size": (2,)}, "window_size"),
    ((1, 1, 4, 4), {"window_size": (2, 0)}, r"window_size\[1\]"),
    ((1, 1, 4, 4), {"window_size": (2, 2), "strides": (0, 1)}, r"strides\[0\]"),
    ((1, 1, 4, 4), {"window_size": (2, 2), "dilations": (1, 0)}, r"dilations\[1\]"),
    ((1, 1, 4, 4), {"window_size": (2, 2), "start_padding": (-1, 0)}, r"start_padding\[0\]"),
    ((1, 1, 4, 4), {"window_size": (2, 2), "include_padding": 1}, "include_padding"),
])
def test_rejected_forward_arguments_name_their_field(shape, kw, field):
    dtype = kw.pop("dtype", "float32")
    with pytest.raises(gradc.VerifyError, match=rf"average_pooling: {field}:"):
        ops.average_pooling(_x(shape, dtype), **kw)


@pytest.mark.parametrize("shape, sizes, kw, field", [
    ((1, 1, 3, 3), (1, 2, 4, 4), {}, "output_sizes"),                           # V-27
    ((1, 1, 3, 3), (1, 1, 4), {}, "output_sizes"),
    ((1, 1, 3, 3), (1, 1, 4, 0), {}, r"output_sizes\[3\]"),
    ((1, 1, 3), (1, 1, 4), {}, "input_gradient.rank"),
    ((1, 1, 5, 3), (1, 1, 4, 4), {}, "input_gradient.shape"),                   # 5 > 3 + 1
    ((1, 1, 3, 3), (1, 1, 4, 4), {"include_padding": "no"}, "include_padding"),
])
def test_rejected_grad_arguments_name_their_field(shape, sizes, kw, field):
    with pytest.raises(gradc.VerifyError, match=rf"average_pooling_grad: {field}:"):
        ops.average_pooling_grad(_x(shape), sizes, window_size=(2, 2)[:len(shape) - 2], **kw)


def test_symbolic_batch_flows_through_both_ops():
    g = gradc.Graph("s")
    x = g.input("x", "float32", ("N", 3, 6, 6))
    y = ops.average_pooling(x, (3, 3), strides=(2, 2), output_sizes=(3, 3))
    assert y.type.shape == ("N", 3, 3, 3)
    dx = ops.average_pooling_grad(y, ("N", 3, 6, 6), (3, 3), strides=(2, 2))
    assert dx.type.shape == ("N", 3, 6, 6)


# -- loop oracle (§13's pseudocode) --------------------------------------------------------

def avg_window(spatial, o, w, s, sp, ep, d, include_padding):
    taps, count = [], 0
    for k in np.ndindex(*w):
        p = tuple(o[i] * s[i] - sp[i] + k[i] * d[i] for i in range(len(w)))
        inside = all(0 <= p[i] < spatial[i] for i in range(len(w)))
        padded = all(-sp[i] <= p[i] < spatial[i] + ep[i] for i in range(len(w)))
        if inside:
            taps.append(p)
        count += inside or (include_padding and padded)
    return taps, count


def oracle_forward(X, f, out):
    a = F64 if X.dtype == F64 else F32
    Y = np.empty(X.shape[:2] + tuple(out), X.dtype)
    for n, c, *o in np.ndindex(*Y.shape):
        taps, count = avg_window(X.shape[2:], o, f["window_size"], f["strides"],
                                 f["start_padding"], f["end_padding"], f["dilations"],
                                 f["include_padding"])
        total = a(0)
        for p in taps:
            total = a(total + a(X[(n, c) + p]))
        Y[(n, c, *o)] = a(total / a(count)) if count else a(0)
    return Y


def oracle_grad(dY, f, sizes):
    a = F64 if dY.dtype == F64 else F32
    acc = np.zeros(sizes, a)
    for n, c, *o in np.ndindex(*dY.shape):
        taps, count = avg_window(sizes[2:], o, f["window_size"], f["strides"],
                                 f["start_padding"], f["end_padding"], f["dilations"],
                                 f["include_padding"])
        for p in taps:
            acc[(n, c) + p] = a(acc[(n, c) + p] + a(a(dY[(n, c, *o)]) / a(count)))
    return acc.astype(dY.dtype)


def random_case(rng, dtype, max_nd=3):
    """(x, fields with output_sizes) over strides, padding, dilations, ceil sizes."""
    nd = int(rng.integers(2, max_nd + 1))
    spatial = [int(v) for v in rng.integers(2, 7 if nd == 2 else 5, nd)]
    w = [int(v) for v in rng.integers(1, 4, nd)]
    s = [int(v) for v in rng.integers(1, 4, nd)]
    d = [int(v) for v in rng.integers(1, 3, nd)]
    sp = [int(v) for v in rng.integers(0, 3, nd)]
    ep = [int(v) for v in rng.integers(0, 3, nd)]
    for i in range(nd):  # keep the window within the padded input
        while (w[i] - 1) * d[i] + 1 > spatial[i] + sp[i] + ep[i]:
            w[i] -= 1
    floor = [max(1, (spatial[i] + sp[i] + ep[i] - ((w[i] - 1) * d[i] + 1)) // s[i] + 1)
             for i in range(nd)]
    out = [f + int(rng.integers(0, 2)) for f in floor]
    x = (rng.standard_normal([2, 2] + spatial) * 4).astype(dtype)
    f = dict(window_size=tuple(w), strides=tuple(s), start_padding=tuple(sp),
             end_padding=tuple(ep), dilations=tuple(d), include_padding=bool(rng.integers(2)))
    return x, f, tuple(out)


@pytest.mark.parametrize("dtype", [F16, F32, F64])
def test_references_match_the_loop_oracle_bit_for_bit(dtype):
    rng = np.random.default_rng(21)
    for _ in range(12):
        x, f, out = random_case(rng, dtype)
        g = _graph(x, **f, output_sizes=out)
        got = gradc.compile(g, target="reference", passes=None)(x=x)["y"]
        assert_bits(got, oracle_forward(x, f, out))
        dy = rng.standard_normal(got.shape).astype(dtype)
        gg = gradc.Graph("apg")
        dv = gg.input("dy", dy.dtype.name, dy.shape)
        gg.output(ops.average_pooling_grad(dv, x.shape, **f), "dx")
        got = gradc.compile(gg, target="reference", passes=None)(dy=dy)["dx"]
        assert_bits(got, oracle_grad(dy, f, x.shape))


@pytest.mark.parametrize("dtype", [F16, F32, F64])
def test_targets_agree_bit_for_bit_with_a_symbolic_batch(dtype):
    rng = np.random.default_rng(22)
    for _ in range(3):
        x, f, out = random_case(rng, dtype)
        t = gradc.grad(_graph(x, batch="N", **f, output_sizes=out))
        assert t.outputs[-1].type.shape[0] == "N"
        dy = rng.standard_normal((2, 2) + out).astype(dtype)
        want = gradc.compile(t, target="reference", passes=None)(x=x, grad_y=dy)
        for target in ("numpy", "c", "onnx"):
            got = gradc.compile(t, target=target, passes=None)(x=x, grad_y=dy)
            for k in want:
                if target == "onnx" and k == "y":
                    np.testing.assert_allclose(got[k], want[k], rtol=2e-3 if dtype == F16
                                               else 1e-6, atol=1e-6)
                else:
                    assert_bits(got[k], want[k])


def test_huge_window_attributes_cost_nothing():
    x = np.arange(16, dtype=F32).reshape(1, 1, 4, 4)
    f = dict(window_size=(2 ** 40, 3), strides=(2 ** 41, 1), start_padding=(2 ** 39, 0),
             end_padding=(2 ** 39, 0))
    g = _graph(x, **f)
    want = gradc.compile(g, target="reference", passes=None)(x=x)["y"]
    assert_bits(want, oracle_forward_rows(x))
    for target in ("numpy", "c", "onnx"):
        assert_bits(gradc.compile(g, target=target, passes=None)(x=x)["y"], want)


def oracle_forward_rows(x):
    """The one window row of test_huge_window_attributes_cost_nothing: all 4 rows, 3 columns."""
    cols = [x[0, 0, :, j:j + 3].astype(F32) for j in range(2)]
    out = []
    for c in cols:
        total = F32(0)
        for r in range(4):
            for k in range(3):
                total = F32(total + c[r, k])
        out.append(F32(total / F32(12)))
    return np.array(out, F32).reshape(1, 1, 1, 2)


# -- gradients -----------------------------------------------------------------------------

@pytest.mark.parametrize("seed", range(4))
def test_vjps_match_finite_differences(seed):
    x, f, out = random_case(np.random.default_rng(300 + seed), F64, max_nd=2)
    for name, err, scale in finite_differences(_graph(x, batch="N", **f, output_sizes=out),
                                               {"N": 2}, seed=seed):
        assert err <= 1e-6 * (1 + scale), (name, err, scale, f)
    g = gradc.Graph("g")
    dv = g.input("dy", "float64", (2, 2) + out)
    g.output(ops.average_pooling_grad(dv, x.shape, **f), "dx")
    for name, err, scale in finite_differences(g, {}, seed=seed):
        assert err <= 1e-6 * (1 + scale), (name, err, scale, f)


TORCH_CASES = [  # (x shape, kernel, stride, padding, ceil_mode, count_include_pad)
    ((2, 3, 7, 7), 3, 2, 1, False, True), ((2, 3, 7, 7), 3, 2, 1, True, True),
    ((2, 3, 7, 7), 3, 2, 1, True, False), ((1, 2, 6, 5), (2, 3), (2, 1), (1, 0), False, False),
    ((1, 2, 5, 6), 2, 2, 1, True, True), ((1, 2, 4, 5, 6), 2, (1, 2, 2), (0, 1, 1), True, True),
]


@pytest.mark.parametrize("case", TORCH_CASES)
def test_forward_and_gradient_match_pytorch(case):
    torch = pytest.importorskip("torch")
    shape, k, s, p, ceil, cip = case
    nd = len(shape) - 2
    per = [v if isinstance(v, tuple) else (v,) * nd for v in (k, s, p)]
    rng = np.random.default_rng(31)
    x = rng.standard_normal(shape)
    pool = getattr(torch.nn.functional, f"avg_pool{nd}d")
    tx = torch.tensor(x, requires_grad=True)
    ty = pool(tx, k, s, p, ceil_mode=ceil, count_include_pad=cip)
    dy = rng.standard_normal(tuple(ty.shape))
    ty.backward(torch.tensor(dy))
    f = dict(window_size=per[0], strides=per[1], start_padding=per[2], end_padding=per[2],
             include_padding=cip, output_sizes=tuple(ty.shape[2:]))
    out = gradc.compile(gradc.grad(_graph(x, **f)), target="c", passes=None)(x=x, grad_y=dy)
    np.testing.assert_allclose(out["y"], ty.detach().numpy(), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(out["grad_x"], tx.grad.numpy(), rtol=1e-12, atol=1e-12)


def test_window_lying_wholly_in_padding_gives_zero_everywhere():
    x = np.full((1, 1, 2, 2), np.nan, F32)
    f = dict(window_size=(1, 1), strides=(3, 3), start_padding=(1, 1), end_padding=(3, 3))
    for target in TARGETS:
        for include in (False, True):
            y = compile_for(_graph(x, **f, include_padding=include), target,
                            passes=None)(x=x)["y"]
            assert_bits(y[0, 0, 0, 0], F32(0))


def test_small_field_combinations_on_c():
    """A sample of tiny fields, c against numpy (itself the reference's copy)."""
    rng = np.random.default_rng(41)
    x = rng.standard_normal((1, 1, 4, 3)).astype(F32)
    combos = [c for c in itertools.product((1, 2, 3), (1, 2), (1, 2), (0, 1))
              if (c[0] - 1) * c[2] + 1 <= 3 + 2 * c[3]]
    for i in rng.choice(len(combos), 5, replace=False):
        w, s, d, sp = combos[i]
        f = dict(window_size=(w, w), strides=(s, s), dilations=(d, d), start_padding=(sp, sp),
                 end_padding=(sp, 0), include_padding=bool(sp))
        g = gradc.grad(_graph(x, **f))
        dy = np.ones(g.inputs[-1].type.shape, F32)
        want = gradc.compile(g, target="numpy", passes=None)(x=x, grad_y=dy)
        got = gradc.compile(g, target="c", passes=None)(x=x, grad_y=dy)
        for k in want:
            assert_bits(got[k], want[k])


def test_generated_c_compiles_without_warnings(tmp_path):
    """-Wall -Wextra -Werror on gemm and average pooling kernels (dtypes, symbolic batch,
    include_padding, transposes, with and without c): users compile the C too."""


    for i, dtype in enumerate(("float16", "float32", "float64")):
        g = gradc.Graph(f"w{i}")
        x = g.input("x", dtype, ("N", 2, 5, 4))
        y = ops.average_pooling(x, (2, 3), (2, 1), (1, 0), (0, 1), (1, 2),
                                include_padding=bool(i % 2))
        a = g.input("a", dtype, ("N", 3, 4) if i else (3, 4))
        b = g.input("b", dtype, (1, 5, 4) if i else (5, 4))
        c = g.input("c", dtype, (1, 1, 5) if i else (1, 5)) if i != 1 else None
        g.output(y, "y")
        g.output(ops.gemm(a, b, c, trans_b=True, alpha=0.5, beta=2.0), "z")
        assert_c_compiles_cleanly(gradc.grad(g), tmp_path)


# -- float64 and large windows on the onnx target (issue 25, item 5) ----------------------

def test_float64_on_onnx_keeps_float64_and_the_reference_bits():
    """onnxruntime's AveragePool has no double kernel: float64 takes the exact tap form, also
    for the windows that float32 gives to AveragePool (unpadded 2x2, padded 3x3, ceil sizes)."""
    rng = np.random.default_rng(25)
    x = rng.standard_normal((2, 3, 6, 5))
    for f in (dict(window_size=(2, 2), strides=(2, 2)),
              dict(window_size=(3, 3), strides=(2, 2), start_padding=(1, 1),
                   end_padding=(1, 1), include_padding=True),
              dict(window_size=(2, 2), strides=(2, 2), output_sizes=(3, 3))):
        t = gradc.grad(_graph(x, **f))
        dy = rng.standard_normal(t.inputs[-1].type.shape)
        want = gradc.compile(t, target="reference", passes=None)(x=x, grad_y=dy)
        got = gradc.compile(t, target="onnx")(x=x, grad_y=dy)
        for k in want:
            assert got[k].dtype == np.float64
            assert_bits(got[k], want[k])


def test_float64_cnn_block_gradient_runs_on_onnx():
    """The issue's graph: a CNN block's gradient in float64 with average pooling, every
    target within `gradc check`'s rules."""
    from gradc.check import compare_targets
    rng = np.random.default_rng(26)
    g = gradc.Graph("block64")
    x = g.input("x", "float64", ("N", 2, 6, 6))
    w = g.parameter("w", rng.standard_normal((3, 2, 3, 3)))
    h = ops.relu(ops.convolution(x, w, None, start_padding=(1, 1), end_padding=(1, 1)))
    g.output(ops.reduce_sum(ops.average_pooling(h, (2, 2), (2, 2))), "loss")
    rows, ok = compare_targets(gradc.grad(g, "all"), ["onnx"], {"N": 2})
    assert ok, "\n".join(rows)


@pytest.mark.parametrize("dtype", [F32, F64])
def test_windows_beyond_max_taps_are_summed_one_axis_at_a_time(monkeypatch, dtype):
    """A window with more taps than the tap form writes (a global average over a large plane)
    goes through the separable form: forward and gradient within the summation tolerance,
    instead of an UnsupportedError (float64) or one node per tap."""
    from gradc.backends.onnx import lower_average_pooling as lower
    rng = np.random.default_rng(27)
    x = rng.standard_normal((1, 2, 5, 7)).astype(dtype)
    f = dict(window_size=(3, 3), strides=(2, 2), start_padding=(1, 0), end_padding=(1, 2),
             dilations=(1, 2), include_padding=False)  # not AveragePool's: pads, dilations
    t = gradc.grad(_graph(x, **f))
    per_tap = len(gradc.to_onnx(t).graph.node)
    monkeypatch.setattr(lower, "MAX_TAPS", 6)  # 3x3 windows have 9 taps, each axis 3
    model = gradc.to_onnx(t)
    assert len(model.graph.node) < per_tap  # the taps of each axis, not of the window
    dy = rng.standard_normal(t.inputs[-1].type.shape).astype(dtype)
    want = gradc.compile(t, target="reference", passes=None)(x=x, grad_y=dy)
    got = gradc.compile(t, target="onnx", passes=None)(x=x, grad_y=dy)
    tol = 1e-13 if dtype == F64 else 1e-5
    for k in want:
        assert got[k].dtype == dtype
        np.testing.assert_allclose(got[k], want[k], rtol=tol, atol=tol)
