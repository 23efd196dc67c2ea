"""The C target agrees bit for bit with the reference target (SPEC.md §1.6).

Compiling costs ~0.1-0.3 s per graph, so most tests compile a few graphs with symbolic dims once
and let Hypothesis vary the data and the symbol values; the geometry tests (slice, pooling,
resample) compile one graph per example with a small example budget.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap

import numpy as np
import pytest
from hypothesis import assume, given, settings, strategies as st

import gradc
from gradc import ops
from gradc.errors import GradcError, InputError, UnsupportedError, VerifyError
from gradc.ir.fused import make_fused
from helpers import assert_bits

if shutil.which(os.environ.get("CC", "cc").split()[0]) is None:
    pytest.skip("no C compiler", allow_module_level=True)

FLOATS = ["float16", "float32", "float64"]
INTS = ["int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64"]
RELU = FLOATS + ["int8", "int16", "int32"]
FEW = settings(max_examples=12)
_COMPILED: dict[str, gradc.Executable] = {}


@pytest.fixture(scope="session")
def cache(tmp_path_factory: pytest.TempPathFactory) -> str:
    return str(tmp_path_factory.mktemp("gradc-cache"))


def c_compile(g: gradc.Graph, cache: str, key: str | None = None, **opts) -> gradc.Executable:
    """Compile for the C target, reusing executables by ``key``."""
    if key is not None and key in _COMPILED:
        return _COMPILED[key]
    ex = gradc.compile(g, target="c", passes=None, cache_dir=cache, **opts)
    if key is not None:
        _COMPILED[key] = ex
    return ex


def check(ex: gradc.Executable, feeds: dict, loose: set[str] = frozenset()) -> None:
    """Every output equals the reference bit for bit (``loose``: NaN payloads unspecified)."""
    with np.errstate(all="ignore"):
        want = gradc.compile(ex.graph, target="reference", passes=None)(**feeds)
    got = ex(**feeds)
    assert got.keys() == want.keys()
    for k in want:
        assert_bits(got[k], want[k], nan_payload=k not in loose)


def data(rng: np.random.Generator, dtype: str, shape: tuple, special: bool = True) -> np.ndarray:
    """Random values; floats mix normals, ties, +-0, +-inf, subnormals and NaN payloads."""
    dt = np.dtype(dtype)
    if dt == np.bool_:
        return np.asarray(rng.integers(0, 2, shape)).astype(bool)
    if dt.kind in "iu":
        info = np.iinfo(dt)
        return np.asarray(rng.integers(info.min, info.max, shape, dtype=dt, endpoint=True))
    a = np.asarray(rng.standard_normal(shape) * 3).astype(dt)
    a = np.where(rng.random(shape) < 0.2, dt.type(1), a)
    if special:
        u = np.dtype(f"u{dt.itemsize}")
        bits = rng.integers(0, np.iinfo(u).max, shape, dtype=u, endpoint=True).view(dt)
        pick = rng.random(shape)
        a = np.where(pick < 0.15, bits, a)
        specials = np.array([0.0, -0.0, np.inf, -np.inf, np.nan], dt)
        a = np.where(pick > 0.9, specials[rng.integers(0, 5, shape)], a)
    return np.array(a, dt).reshape(shape)


seeds = st.integers(0, 2 ** 32 - 1)
small = st.integers(1, 5)


# -- elementwise ops, one graph per dtype with symbolic dims --------------------------------------

def _bounds(dtype: str) -> tuple:
    return (-1.5, 2.0) if np.dtype(dtype).kind == "f" else (
        (2, 9) if dtype.startswith("u") else (-5, 7))


def elementwise_graph(dtype: str) -> gradc.Graph:
    g = gradc.Graph("ew")
    x = g.input("x", dtype, ("N", "M"))
    y = g.input("y", dtype, ("N", "M"))
    b = g.input("b", dtype, ("M",))
    s = g.input("s", dtype, ())
    lo, hi = _bounds(dtype)
    g.output(ops.clip(x, lo, hi), "clip")
    g.output(ops.clip(x, hi, lo), "clip_swapped")
    g.output(ops.clip_grad(x, y, lo, hi), "clip_grad")
    g.output(ops.add(x, b), "add")
    g.output(ops.sub(x, y), "sub")
    g.output(ops.mul(x, s), "mul")
    g.output(ops.mul(b, ops.reshape(b, ("M",))), "mul_same")
    g.output(ops.neg(x), "neg")
    g.output(ops.identity(x), "identity")
    g.output(ops.expand(ops.reshape(b, (1, "M")), x), "expand")
    if dtype in RELU:
        g.output(ops.relu(x), "relu")
        g.output(ops.relu_grad(x, y), "relu_grad")
    return g


@pytest.mark.parametrize("dtype", FLOATS + INTS)
@settings(max_examples=8)
@given(seed=seeds, n=small, m=small)
def test_elementwise_ops_are_bit_identical(cache, dtype, seed, n, m):
    rng = np.random.default_rng(seed)
    ex = c_compile(elementwise_graph(dtype), cache, f"ew-{dtype}")
    feeds = {"x": data(rng, dtype, (n, m)), "y": data(rng, dtype, (n, m)),
             "b": data(rng, dtype, (m,)), "s": data(rng, dtype, ())}
    check(ex, feeds, loose={"add", "sub", "mul", "mul_same"})


def test_integer_arithmetic_wraps(cache):
    ex = c_compile(elementwise_graph("int8"), cache, "ew-int8")
    x = np.array([[127, -128, 100]], np.int8)
    out = ex(x=x, y=np.array([[-1, 1, -100]], np.int8), b=np.array([1, -1, 100], np.int8),
             s=np.array(3, np.int8))
    assert_bits(out["add"], np.array([[-128, 127, -56]], np.int8))
    assert_bits(out["sub"], np.array([[-128, 127, -56]], np.int8))
    assert_bits(out["mul"], np.array([[125, -128, 44]], np.int8))
    assert_bits(out["neg"], np.array([[-127, -128, -100]], np.int8))


# -- casts and float16 conversions ----------------------------------------------------------------

ALL = FLOATS + INTS + ["bool"]


def cast_graph(src: str) -> gradc.Graph:
    g = gradc.Graph("cast")
    x = g.input("x", src, ("N",))
    xr = g.input("xr", src, ("N",))  # values every integer type holds (0..100)
    for dst in ALL:
        v = xr if np.dtype(dst).kind in "iu" and np.dtype(src).kind == "f" else x
        g.output(ops.cast(v, dst), f"to_{dst}")
    return g


@pytest.mark.parametrize("src", ALL)
@settings(max_examples=6)
@given(seed=seeds, n=st.integers(1, 64))
def test_casts_match_numpy_astype(cache, src, seed, n):
    rng = np.random.default_rng(seed)
    ex = c_compile(cast_graph(src), cache, f"cast-{src}")
    xr = rng.integers(0, 101, n).astype(src)
    if np.dtype(src).kind == "f":
        xr = xr + (rng.random(n) * 0.9).astype(src)
    check(ex, {"x": data(rng, src, (n,)), "xr": xr})


def test_float16_conversions_are_exact_on_every_pattern(cache):
    halves = np.arange(2 ** 16, dtype=np.uint16).view(np.float16)
    rng = np.random.default_rng(0)
    f32 = np.concatenate([rng.integers(0, 2 ** 32, 200_000, dtype=np.uint32),
                          np.arange(0x33000000 - 64, 0x33000000 + 64, dtype=np.uint32),
                          np.arange(0x477fe000 - 64, 0x477ff000 + 64, dtype=np.uint32),
                          np.arange(0x38800000 - 4096, 0x38800000 + 4096, dtype=np.uint32)])
    f64 = rng.integers(0, 2 ** 64, 200_000, dtype=np.uint64, endpoint=False)
    with np.errstate(all="ignore"):
        near = (f32.view(np.float32).astype(np.float64) * 1.0000001).view(np.uint64)
    f64 = np.concatenate([f64, near])
    for src, arr in (("float16", halves), ("float32", f32.view(np.float32)),
                     ("float64", f64.view(np.float64))):
        ex = c_compile(cast_graph(src), cache, f"cast-{src}")
        out = ex(x=arr, xr=np.zeros(arr.shape, arr.dtype))
        for dst in FLOATS:
            with np.errstate(all="ignore"):
                want = arr.astype(dst)
            assert_bits(out[f"to_{dst}"], want)


def test_float_to_int_out_of_range_matches_numpy_on_x86(cache):
    if os.uname().machine not in ("x86_64", "AMD64"):
        pytest.skip("out-of-range casts follow NumPy on x86-64")
    g = gradc.Graph("oor")
    x = g.input("x", "float64", ("N",))
    for dst in INTS:
        g.output(ops.cast(x, dst), dst)
    ex = c_compile(g, cache)
    v = np.array([np.nan, -1.0, -1.5, 1e20, 5e9, -5e9, 3e9, 2.0 ** 63 + 2.0 ** 40, 7e4, -7e4])
    out = ex(x=v)
    for dst in INTS:
        with np.errstate(all="ignore"):
            assert_bits(out[dst], v.astype(dst))


# -- reduce_sum, reshape, constant ----------------------------------------------------------------

@pytest.mark.parametrize("dtype", ["float16", "float32", "float64", "int8", "uint32", "int64"])
@settings(max_examples=6)
@given(seed=seeds, n=small, m=small)
def test_reduce_sum_keeps_the_canonical_order(cache, dtype, seed, n, m):
    g = gradc.Graph("rs")
    x = g.input("x", dtype, ("N", 3, "M"))
    for i, (axes, keep) in enumerate([((0,), False), ((1,), True), ((0, 2), False), ((), False),
                                      (None, False), ((2,), False), ((-1, 0), True)]):
        g.output(ops.reduce_sum(x, axes, keep), f"r{i}")
    ex = c_compile(g, cache, f"reduce-{dtype}")
    rng = np.random.default_rng(seed)
    x = data(rng, dtype, (n, 3, m), special=seed % 3 == 0)
    if np.dtype(dtype).kind == "f":
        with np.errstate(all="ignore"):
            x = (x * np.asarray(rng.random(x.shape) * 100, dtype)).astype(dtype)
    check(ex, {"x": x}, loose={f"r{i}" for i in range(7)})


@pytest.mark.parametrize("dtype", ["float16", "float32", "float64", "int32"])
def test_reduce_sum_interleaved_chains_keep_the_canonical_order(cache, dtype):
    """Sums whose innermost axes are reduced run CHAINS accumulators together (loops.py
    ``_interleaved``): whole blocks, a partial block, the block axis split between threads,
    kept axes on both sides of reduced ones, a symbolic block axis. Values of mixed magnitude
    make any change of order show in the last bits."""
    g = gradc.Graph("rsi")
    x = g.input("x", dtype, (2, "C", 3, 5))
    for i, axes in enumerate([(0, 2, 3), (2, 3), (3,), (0, 3), (1, 3)]):
        g.output(ops.reduce_sum(x, axes), f"r{i}")
    ex = c_compile(g, cache, f"reduce-chains-{dtype}")
    rng = np.random.default_rng(11)
    for c in (19, 8, 3, 70, 1203):   # 1203: over GC_PAR_MIN, the block axis split by thread
        v = data(rng, dtype, (2, c, 3, 5), special=False)
        if np.dtype(dtype).kind == "f":  # float16 elements past 65504 become infinities
            with np.errstate(over="ignore"):
                v = (v * 10.0 ** rng.integers(-4, 5, v.shape)).astype(dtype)
        check(ex, {"x": v})


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_linear_resample_with_identity_leading_axes(cache, dtype):
    """Static linear resamples whose leading axes are the identity sum only their nonzero-weight
    corners (resample.py ``_resample_identity_prefix``): exact while the input is finite and
    the sum is not -0. Checked bit for bit on ReLU-like zeros, a window of -0 (whose full sum is
    -0 only if every zero-weight term is -0 too), a lone -0 beside negatives, and inputs holding
    inf or NaN (every element then takes the full sum)."""
    g = gradc.Graph("rs-id")
    x = g.input("x", dtype, (2, 3, 5, 4))
    g.output(ops.resample(x, (1, 1, 2, 2), "linear"), "up")
    g.output(ops.resample(x, (1, 1, 1, 0.5), "linear"), "down")
    g.output(ops.resample(x, (1, 2, 1, 2), "linear"), "mixed")   # identity prefix of 1 axis
    ex = c_compile(g, cache, f"resample-identity-{dtype}")
    assert "nz |=" in ex.source
    rng = np.random.default_rng(5)
    for case in range(5):
        v = rng.standard_normal((2, 3, 5, 4)) * 10.0 ** rng.integers(-3, 4, (2, 3, 5, 4))
        v = np.maximum(v, 0) if case == 0 else v
        if case == 1:
            v[0, :, 1:3, 1:3] = -0.0   # -0 windows in image 0 only: the zero-weight terms of
            v[1, :, 1:3, 1:3] = 1.0    # the next image are +0, so the full sums are +0
        if case == 2:
            v[1] = -np.abs(v[1])
            v[0, 1, 2, 2] = -0.0
            v[1, 1, 2, 2] = -0.0
        if case == 3:
            v[1, 2, 3, 1] = np.inf
        if case == 4:
            v[0, 0, 0, 0] = np.nan
        check(ex, {"x": v.astype(dtype)})


def test_reduce_of_negative_zeros_is_negative_zero(cache):
    g = gradc.Graph("rz")
    x = g.input("x", "float32", (3, 2))
    g.output(ops.reduce_sum(x, (0,)), "y")
    out = c_compile(g, cache)(x=np.array([[-0.0, 1], [-0.0, -1], [-0.0, 0]], np.float32))
    assert_bits(out["y"], np.array([-0.0, 0.0], np.float32))


def test_constants_reshape_and_bool(cache):
    g = gradc.Graph("misc")
    x = g.input("x", "float32", ("N", 4))
    m = g.input("m", "bool", ("N", 4))
    c = ops.constant(np.array([1.5, -0.0, np.nan, 2 ** -140], np.float32), graph=g)
    g.output(ops.add(x, c), "add")
    g.output(c, "const")
    g.output(ops.reshape(ops.reshape(x, (2, "N", 2)), ("N", -1)), "flat")
    g.output(ops.reshape(ops.relu(x), ("N", 2, 2)), "reshaped")
    g.output(ops.identity(m), "m_copy")
    g.output(ops.cast(ops.reshape(m, (4, "N")), "float16"), "mf")
    ex = c_compile(g, cache)
    rng = np.random.default_rng(1)
    for n in (1, 3):
        check(ex, {"x": data(rng, "float32", (n, 4)), "m": data(rng, "bool", (n, 4))},
              loose={"add"})


# -- slice and slice_grad -------------------------------------------------------------------------

@st.composite
def windows(draw, zero_stride: bool):
    rank = draw(st.integers(1, 3))
    full, off, size, stride, out = [], [], [], [], []
    for _ in range(rank):
        n = draw(st.integers(1, 7))
        o = draw(st.integers(0, n - 1))
        s = draw(st.integers(1, n - o))
        st_ = draw(st.sampled_from([1, 2, 3, -1, -2] + ([0] if zero_stride else [])))
        cnt = 1 + (s - 1) // abs(st_) if st_ else draw(st.integers(1, 3))
        full.append(n), off.append(o), size.append(s), stride.append(st_)
        out.append(draw(st.integers(1, cnt)))
    return full, off, size, stride, out


@FEW
@given(seed=seeds, fwd=windows(True), bwd=windows(False), dtype=st.sampled_from(FLOATS + INTS))
def test_slice_and_slice_grad(cache, seed, fwd, bwd, dtype):
    g = gradc.Graph("sl")
    x = g.input("x", dtype, fwd[0])
    g.output(ops.slice(x, fwd[1], fwd[2], fwd[3], fwd[4]), "y")
    dy = g.input("dy", dtype, bwd[4])
    g.output(ops.slice_grad(dy, bwd[0], bwd[1], bwd[2], bwd[3]), "dx")
    rng = np.random.default_rng(seed)
    check(c_compile(g, cache), {"x": data(rng, dtype, tuple(fwd[0])),
                                "dy": data(rng, dtype, tuple(bwd[4]))})


def test_slice_grad_whole_symbolic_axes(cache):
    g = gradc.Graph("slsym")
    dy = g.input("dy", "float16", ("N", 3, "M"))
    g.output(ops.slice_grad(dy, ("N", 7, "M"), (0, 1, 0), ("N", 6, "M"), (1, 2, -1)), "dx")
    x = g.input("x", "float16", ("N", 9))
    g.output(ops.slice(x, (0, 1), ("N", 8), (-1, 3)), "y")
    ex = c_compile(g, cache)
    rng = np.random.default_rng(2)
    for n, m in ((1, 1), (3, 4)):
        check(ex, {"dy": data(rng, "float16", (n, 3, m)), "x": data(rng, "float16", (n, 9))})


# -- max pooling ----------------------------------------------------------------------------------

@st.composite
def pools(draw):
    nd = draw(st.sampled_from([2, 2, 2, 3]))
    spatial = [draw(st.integers(1, 7 if nd == 2 else 4)) for _ in range(nd)]
    w = [draw(st.integers(1, 3)) for _ in range(nd)]
    s = [draw(st.integers(1, 3)) for _ in range(nd)]
    sp = [draw(st.integers(0, 2)) for _ in range(nd)]
    ep = [draw(st.integers(0, 2)) for _ in range(nd)]
    d = [draw(st.integers(1, 2)) for _ in range(nd)]
    ceil = [draw(st.integers(0, 1)) for _ in range(nd)]
    return spatial, w, s, sp, ep, d, ceil


@FEW
@given(seed=seeds, p=pools(), dtype=st.sampled_from(FLOATS + ["int16", "uint8", "int64"]))
def test_max_pooling_and_grad(cache, seed, p, dtype):
    from gradc.ir.ops.pooling import pool_size
    spatial, w, s, sp, ep, d, ceil = p
    out = [pool_size(n, *a) + c for n, *a, c in zip(spatial, w, s, sp, ep, d, ceil)]
    g = gradc.Graph("pool")
    x = g.input("x", dtype, ("N", 2, *spatial))
    try:
        y, idx = ops.max_pooling(x, w, s, sp, ep, d, output_indices=True, output_sizes=out)
    except VerifyError:
        assume(False)
    g.output(y, "y"), g.output(idx, "i")
    if dtype in FLOATS:
        dy = g.input("dy", dtype, ("N", 2, *out))
        g.output(ops.max_pooling_grad(x, dy, w, s, sp, ep, d), "dx")
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 3))
    xv = data(rng, dtype, (n, 2, *spatial))
    if dtype in FLOATS and seed % 2:
        with np.errstate(invalid="ignore"):  # (NaN and infinities round to themselves)
            xv = np.round(xv).astype(dtype)  # many ties
    feeds = {"x": xv}
    if dtype in FLOATS:
        feeds["dy"] = data(rng, dtype, (n, 2, *out), special=seed % 3 == 0)
    check(c_compile(g, cache), feeds, loose={"dx"})


@FEW
@given(seed=seeds, p=pools(), dtype=st.sampled_from(["float32", "float64", "float16"]))
def test_max_pooling_without_indices_takes_the_maxima(cache, seed, p, dtype):
    """Without an indices output, float32/float64 windows keep the running maximum, not its
    index (pool.py ``_window_max``): the same bits as the argmax's element, on ties of +0 and
    -0 (the first wins), NaN and -inf planes (redone NaN-aware), and windows wholly in the
    padding (the lowest value)."""
    from gradc.ir.ops.pooling import pool_size
    spatial, w, s, sp, ep, d, ceil = p
    out = [pool_size(n, *a) + c for n, *a, c in zip(spatial, w, s, sp, ep, d, ceil)]
    g = gradc.Graph("pool_values")
    x = g.input("x", dtype, ("N", 2, *spatial))
    try:
        g.output(ops.max_pooling(x, w, s, sp, ep, d, output_sizes=out), "y")
    except VerifyError:
        assume(False)
    ex = c_compile(g, cache)
    rng = np.random.default_rng(seed)
    xv = data(rng, dtype, (int(rng.integers(1, 3)), 2, *spatial), special=seed % 3 == 0)
    if seed % 2:
        xv = (np.round(xv) * np.where(rng.integers(0, 2, xv.shape), 1, -1)).astype(dtype)
    if seed % 5 == 0:
        xv[0, 1] = -np.inf
    check(ex, {"x": xv})


def test_max_pooling_maxima_keep_the_first_of_equal_zeros(cache):
    """-0 then three +0 in one window gives -0, +0 then three -0 gives +0 (strict '>': the
    first of equal values wins)."""
    g = gradc.Graph("pool_zeros")
    x = g.input("x", "float32", (1, 1, 2, 4))
    g.output(ops.max_pooling(x, (2, 2), (2, 2)), "y")
    ex = c_compile(g, cache)
    assert "vm[ow] = bv;" in ex.source  # the maxima, not the argmax
    xv = np.array([[[[-0.0, 0.0, 0.0, -0.0], [0.0, 0.0, -0.0, -0.0]]]], np.float32)
    assert_bits(ex(x=xv)["y"], np.array([[[[-0.0, 0.0]]]], np.float32))


def test_max_pooling_grad_benchmark_geometry(cache):
    g = gradc.Graph("pool3")
    x = g.input("x", "float32", ("N", 3, 20, 21))
    dy = g.input("dy", "float32", ("N", 3, 10, 11))
    g.output(ops.max_pooling_grad(x, dy, (3, 3), (2, 2), (1, 1), (1, 1)), "dx")
    rng = np.random.default_rng(3)
    x = rng.integers(-3, 3, (2, 3, 20, 21)).astype(np.float32)  # ties everywhere
    check(c_compile(g, cache), {"x": x, "dy": data(rng, "float32", (2, 3, 10, 11), False)})


# -- resample -------------------------------------------------------------------------------------

@st.composite
def resamples(draw):
    rank = draw(st.integers(1, 4))
    shape = [draw(st.integers(1, 5)) for _ in range(rank)]
    scales = [draw(st.sampled_from([1.0, 1.0, 2.0, 0.5, 1.5, 3.0, 0.7])) for _ in range(rank)]
    ipo = [draw(st.sampled_from([0.5, 0.5, 0.0, 0.25])) for _ in range(rank)]
    opo = [draw(st.sampled_from([-0.5, -0.5, 0.0, 0.3])) for _ in range(rank)]
    mode = draw(st.sampled_from(["nearest", "linear"]))
    rounding = draw(st.sampled_from(["decreasing", "increasing"]))
    return shape, scales, ipo, opo, mode, rounding


@FEW
@given(seed=seeds, r=resamples(), dtype=st.sampled_from(FLOATS + ["int8", "uint8"]))
def test_resample_and_grad(cache, seed, r, dtype):
    shape, scales, ipo, opo, mode, rounding = r
    g = gradc.Graph("rs")
    x = g.input("x", dtype, shape)
    try:
        y = ops.resample(x, scales, mode, rounding, ipo, opo)
    except VerifyError:
        assume(False)
    g.output(y, "y")
    rng = np.random.default_rng(seed)
    feeds = {"x": data(rng, dtype, tuple(shape), special=dtype in FLOATS and seed % 2 == 0)}
    if dtype in FLOATS:
        dy = g.input("dy", dtype, y.type.shape)
        g.output(ops.resample_grad(dy, shape, scales, mode, rounding, ipo, opo), "dx")
        feeds["dy"] = data(rng, dtype, y.type.shape, special=seed % 3 == 0)
    check(c_compile(g, cache), feeds, loose={"y", "dx"})


def test_resample_grad_symbolic_planes_and_nonfinite(cache):
    g = gradc.Graph("rsg")
    dy = g.input("dy", "float32", ("N", "C", 12, 10))
    g.output(ops.resample_grad(dy, ("N", "C", 6, 5), (1, 1, 2, 2), "linear"), "dx")
    dy2 = g.input("dy2", "float64", (8, "M"))
    g.output(ops.resample_grad(dy2, (4, "M"), (2.0, 1.0), "linear", "decreasing",
                               (0.25, 0.0), (0.0, 0.0)), "dx2")
    dy3 = g.input("dy3", "float16", ("N", 10))  # scale 1 but shifted: not a plane split
    g.output(ops.resample_grad(dy3, ("N", 5), (1.0, 2.0), "linear", "decreasing",
                               (0.3, 0.5), (0.0, -0.5)), "dx3")
    ex = c_compile(g, cache)
    rng = np.random.default_rng(4)
    for bad in (False, True):
        a = data(rng, "float32", (2, 3, 12, 10), special=False)
        b = data(rng, "float64", (8, 3), special=False)
        c = data(rng, "float16", (2, 10), special=False)
        if bad:  # 0 * inf = NaN also reaches the next channel through weight-0 taps
            a[1, 1, 5, 3], b[2, 1], c[0, 0] = np.inf, np.nan, -np.inf
        check(ex, {"dy": a, "dy2": b, "dy3": c}, loose={"dx", "dx2", "dx3"})


# -- fused groups ---------------------------------------------------------------------------------

def _fused(g: gradc.Graph, args: list, body: gradc.Graph, kind: str, name: str) -> None:
    node = make_fused(g, args, body, kind)
    g.output(node.outputs[0], name)


def fused_graph(dtype: str) -> gradc.Graph:
    g = gradc.Graph("fused")
    x = g.input("x", dtype, ("N", 4, 6, 6))
    dy = g.input("dy", dtype, ("N", 4, 6, 6))
    dyp = g.input("dyp", dtype, ("N", 4, 3, 3))
    bias = g.input("bias", dtype, (1, 4, 1, 1))
    # elementwise: a chain of three gradients plus a broadcast operand, two outputs
    b = gradc.Graph("ew")
    bx, bdy, bb = (b.input(n, dtype, v.type.shape) for n, v in (("x", x), ("dy", dy),
                                                                 ("b", bias)))
    t = ops.relu_grad(bx, bdy)
    b.output(ops.relu_grad(bx, ops.clip_grad(bx, ops.mul(t, bb), -1.0, 1.0)), "o")
    b.output(ops.neg(t), "o2")
    node = make_fused(g, [x, dy, bias], b, "elementwise")
    g.output(node.outputs[0], "ew"), g.output(node.outputs[1], "ew2")
    # max_pooling_grad with a prologue and an epilogue (one broadcasting)
    b = gradc.Graph("mp")
    bx, bd, bq, bb = (b.input(n, dtype, v.type.shape) for n, v in (
        ("x", x), ("d", dyp), ("q", dyp), ("b", bias)))
    a = ops.max_pooling_grad(bx, ops.mul(bd, bq), (3, 3), (2, 2), (1, 1), (0, 0))
    b.output(ops.add(ops.relu_grad(bx, a), bb), "o")
    _fused(g, [x, dyp, dyp, bias], b, "max_pooling_grad", "mp")
    # slice_grad with prologue and epilogue
    b = gradc.Graph("sg")
    bd, bx = b.input("d", dtype, dyp.type.shape), b.input("x", dtype, x.type.shape)
    a = ops.slice_grad(ops.neg(bd), ("N", 4, 6, 6), (0, 0, 1, 0), ("N", 4, 5, 6), (1, 1, 2, 2))
    b.output(ops.sub(a, bx), "o")
    _fused(g, [dyp, x], b, "slice_grad", "sg")
    # resample_grad with prologue and epilogue
    b = gradc.Graph("rg")
    bd, bq, bb = (b.input(n, dtype, v.type.shape) for n, v in (("d", dy), ("q", dy),
                                                                ("b", bias)))
    a = ops.resample_grad(ops.relu_grad(bq, bd), ("N", 4, 3, 3), (1, 1, 2, 2), "linear")
    b.output(ops.mul(a, bb), "o")
    _fused(g, [dy, x, bias], b, "resample_grad", "rg")
    # an unknown kind runs node by node
    b = gradc.Graph("other")
    bx = b.input("x", dtype, x.type.shape)
    b.output(ops.reduce_sum(ops.relu(bx), (1,), True), "o")
    _fused(g, [x], b, "my_kind", "other")
    return g


@pytest.mark.parametrize("dtype", ["float32", "float16", "float64"])
@settings(max_examples=5)
@given(seed=seeds, n=st.integers(1, 3))
def test_fused_groups(cache, dtype, seed, n):
    ex = c_compile(fused_graph(dtype), cache, f"fused-{dtype}")
    rng = np.random.default_rng(seed)
    sp = seed % 2 == 0
    feeds = {"x": data(rng, dtype, (n, 4, 6, 6)), "dy": data(rng, dtype, (n, 4, 6, 6), sp),
             "dyp": data(rng, dtype, (n, 4, 3, 3), sp), "bias": data(rng, dtype, (1, 4, 1, 1))}
    check(ex, feeds, loose={"ew", "mp", "sg", "rg", "other"})


def test_without_openmp(cache):
    ex = c_compile(fused_graph("float32"), cache, openmp=False)
    assert "-fopenmp" not in ex.source and ex.source == c_compile(
        fused_graph("float32"), cache, "fused-float32").source
    rng = np.random.default_rng(9)
    feeds = {"x": data(rng, "float32", (2, 4, 6, 6)), "dy": data(rng, "float32", (2, 4, 6, 6)),
             "dyp": data(rng, "float32", (2, 4, 3, 3)), "bias": data(rng, "float32", (1, 4, 1, 1))}
    check(ex, feeds, loose={"ew", "mp", "sg", "rg", "other"})


def test_fused_chain_is_one_pass_without_intermediates(cache):
    g = gradc.Graph("chain")
    x, dy = g.input("x", "float32", ("N", 8)), g.input("dy", "float32", ("N", 8))
    b = gradc.Graph("body")
    bx, bd = b.input("x", "float32", ("N", 8)), b.input("dy", "float32", ("N", 8))
    b.output(ops.relu_grad(bx, ops.clip_grad(bx, ops.relu_grad(bx, bd), -1.0, 2.0)), "o")
    _fused(g, [x, dy], b, "elementwise", "dx")
    ex = c_compile(g, cache)
    head = "int gradc_entry(const int64_t *S, void *const *A, int nt) {"
    entry = ex.source[ex.source.index(head):]
    assert "gc_alloc" not in entry and ex.source.count("for (int64_t i = 0; i < n; i++)") == 1
    rng = np.random.default_rng(5)
    check(ex, {"x": data(rng, "float32", (5, 8)), "dy": data(rng, "float32", (5, 8))})


# -- symbols, options, errors ---------------------------------------------------------------------

def test_shapes_option_specializes_and_checks(cache):
    g = elementwise_graph("float32")
    ex = c_compile(g, cache, shapes={"N": 2})
    assert "S[0]" not in ex.source[ex.source.index("static int k0"):]
    rng = np.random.default_rng(6)
    check(ex, {"x": data(rng, "float32", (2, 3)), "y": data(rng, "float32", (2, 3)),
               "b": data(rng, "float32", (3,)), "s": data(rng, "float32", ())},
          loose={"add", "sub", "mul", "mul_same"})
    with pytest.raises(InputError):
        ex(x=np.zeros((3, 3), np.float32), y=np.zeros((3, 3), np.float32),
           b=np.zeros(3, np.float32), s=np.zeros((), np.float32))


def test_input_errors_never_reach_c(cache):
    ex = c_compile(elementwise_graph("float32"), cache, "ew-float32")
    ok = {"x": np.zeros((2, 3), np.float32), "y": np.zeros((2, 3), np.float32),
          "b": np.zeros(3, np.float32), "s": np.zeros((), np.float32)}
    bad = [{"x": np.zeros((2, 3), np.float64)}, {"x": np.zeros((2, 4), np.float32)},
           {"b": np.zeros(4, np.float32)}, {"x": np.zeros((3, 3), np.float32)},
           {"x": np.zeros((2, 6), np.float32)[:, ::2]}, {"x": np.zeros((3, 2), np.float32).T},
           {"x": [[0.0] * 3] * 2}, {"extra": np.zeros(1)}]
    for change in bad:
        with pytest.raises(InputError):
            ex(**(ok | change))
    feeds = dict(ok)
    del feeds["y"]
    with pytest.raises(InputError):
        ex(**feeds)
    assert set(ex(**ok)) == set(g.name for g in ex.graph.outputs)


def test_injection_payloads_in_names(cache):
    payloads = ['x"; system("rm -rf /"); //', "a\nb */ #include <stdio.h>",
                '__import__("os")', "*/ int main(){} /*", "#define float int"]
    g = gradc.Graph(payloads[0] + payloads[3])
    x = g.input(payloads[0], "float32", (payloads[1], 3))
    y = g.input(payloads[2], "float32", (payloads[1], 3))
    b = gradc.Graph(payloads[4])
    bx, by = b.input(payloads[3], "float32", x.type.shape), b.input("q", "float32", x.type.shape)
    b.output(ops.relu_grad(bx, by), payloads[4])
    node = make_fused(g, [x, y], b, kind=payloads[2])
    g.output(ops.add(node.outputs[0], x), payloads[3])
    g.output(ops.relu(y), payloads[4])
    ex = c_compile(g, cache)
    for p in payloads + ["stdio", "main(", "system(", "__import__", "float int"]:
        assert p not in ex.source
    rng = np.random.default_rng(7)
    check(ex, {payloads[0]: data(rng, "float32", (2, 3)),
               payloads[2]: data(rng, "float32", (2, 3))}, loose={payloads[3]})


def test_missing_compiler_is_a_clear_error(cache, tmp_path):
    g = gradc.Graph("nocc")
    g.output(ops.relu(g.input("x", "float32", (2,))), "y")
    with pytest.raises(GradcError, match="C compiler"):
        gradc.compile(g, target="c", passes=None, cc="/nonexistent/cc", cache_dir=str(tmp_path))


def test_bad_options(cache):
    g = gradc.Graph("opts")
    g.output(ops.relu(g.input("x", "float32", (2,))), "y")
    for opts in ({"threads": 0}, {"threads": "2"}, {"colour": 1}):
        with pytest.raises(GradcError):
            gradc.compile(g, target="c", passes=None, cache_dir=cache, **opts)


def test_every_registered_op_has_a_lowering():
    from gradc.backends.c.emit import EMITTERS, SPECIAL
    from gradc.ir.ops import REGISTRY
    assert set(REGISTRY) <= set(EMITTERS) | set(SPECIAL)


def test_unsupported_op_is_reported_before_output(cache, tmp_path, monkeypatch):
    from gradc.backends.c import emit as c_emit
    monkeypatch.delitem(c_emit.EMITTERS, "clip_grad")
    g = fused_graph("float32")
    with pytest.raises(UnsupportedError, match="clip_grad"):
        gradc.compile(g, target="c", passes=None, cache_dir=str(tmp_path / "c"))
    assert not (tmp_path / "c").exists()


def test_threads_and_cache_reuse(cache):
    g = gradc.Graph("thr")
    x, dy = g.input("x", "float32", (64, 1024)), g.input("dy", "float32", (64, 1024))
    g.output(ops.clip_grad(x, dy, -0.5, 0.5), "y")
    g.output(ops.reduce_sum(x, (0,)), "s")
    rng = np.random.default_rng(8)
    feeds = {"x": data(rng, "float32", (64, 1024), False), "dy": data(rng, "float32", (64, 1024))}
    results = [c_compile(g, cache, threads=t)(**feeds) for t in (1, 2, None)]
    for r in results[1:]:
        for k in r:
            assert_bits(r[k], results[0][k])
    libs = sorted(f for f in os.listdir(cache) if f.endswith(".so"))
    c_compile(g, cache, threads=2)
    assert sorted(f for f in os.listdir(cache) if f.endswith(".so")) == libs


def test_concurrent_compilation_of_one_graph(tmp_path):
    script = tmp_path / "build.py"
    script.write_text(textwrap.dedent("""
        import sys, numpy as np, gradc
        from gradc import ops
        g = gradc.Graph("conc")
        x = g.input("x", "float32", ("N", 5))
        g.output(ops.mul(ops.relu(x), x), "y")
        ex = gradc.compile(g, target="c", passes=None, cache_dir=sys.argv[1])
        v = np.arange(10, dtype=np.float32).reshape(2, 5) - 4
        assert np.array_equal(ex(x=v)["y"], np.where(v > 0, v, 0) * v)
        print("ok")
    """))
    cache_dir = str(tmp_path / "cache")
    procs = [subprocess.Popen([sys.executable, str(script), cache_dir], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for _ in range(2)]
    outs = [p.communicate(timeout=120) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outs
    assert all(o[0].strip() == "ok" for o in outs)
    files = os.listdir(cache_dir)
    assert len([f for f in files if f.endswith(".so")]) == 1
    assert not [f for f in files if f.startswith(".tmp")]


# -- random training graphs (tests/graphgen.py): unfused and default pipeline ---------------------

@settings(max_examples=8, deadline=None)
@given(st.integers(0, 2**32 - 1), st.integers(1, 12))
def test_random_training_graphs(cache, seed, n_ops):
    """Symbols bound at call time (no ``shapes``), with and without the default pipeline; every
    output bit-identical to the reference (NaN payloads of computed NaNs unspecified)."""
    from graphgen import make_graph

    case = make_graph(seed, n_ops)
    for passes in (None, "default"):
        ex = gradc.compile(case.graph, target="c", passes=passes, cache_dir=cache)
        with np.errstate(all="ignore"):
            want = gradc.compile(case.graph, target="reference", passes=None)(**case.feeds)
        got = ex(**case.feeds)
        assert got.keys() == want.keys()
        for k in want:
            assert_bits(got[k], want[k], nan_payload=False)


def test_clip_grad_condition_vectorizes_correctly(cache):
    """A generated graph (graphgen seed 944, 6 ops) on which GCC 12 -O3 -march=native
    miscompiled clip_grad's ``x <= lo || x >= hi`` in a vectorized 12 x 2 loop nest (fused with
    relu and a broadcast multiply): half the passing gradients came out 0. The condition is now
    written with ``|``; the C target must match the reference bit for bit."""
    from graphgen import make_graph

    case = make_graph(944, 6)
    want = gradc.compile(case.graph, target="reference", passes=None)(**case.feeds)
    got = gradc.compile(case.graph, target="c", cache_dir=cache)(**case.feeds)
    for k in want:
        assert_bits(got[k], want[k], nan_payload=False)


def test_input_addresses_are_reused_only_for_the_same_array(cache):
    """The runner keeps the previous call's input addresses (runtime.py ``_addresses``): a new
    array in the same position, even one equal in shape and values, a view of another array, or
    the same array updated in place, is read where it lies now."""
    g = gradc.Graph("addr")
    x = g.input("x", "float32", ("N", 3))
    g.output(ops.add(x, x), "y")
    ex = c_compile(g, cache)
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    assert_bits(ex(x=a)["y"], a + a)
    b = a + 10
    assert_bits(ex(x=b)["y"], b + b)
    a[:] = -1
    assert_bits(ex(x=a)["y"], a + a)
    big = np.arange(30, dtype=np.float32).reshape(10, 3)
    assert_bits(ex(x=big[4:6])["y"], big[4:6] * 2)
    assert_bits(ex(x=big)["y"], big * 2)
    assert_bits(ex(x=big[4:6])["y"], big[4:6] * 2)


@settings(max_examples=40, deadline=None)
@given(st.integers(0, 2 ** 32 - 1))
def test_hoisted_kernels_still_follow_what_they_read(seed):
    """``plan.hoist_sinks`` on random graphs of large and small (reduced) values with several
    outputs: every kernel still comes after the producers of what it reads, the fixed kernels
    keep their order, and the moved ones are exactly the sinks and the small ones."""
    from gradc.backends import plan as planning
    rng = np.random.default_rng(seed)
    g = gradc.Graph("dag")
    vals = [g.input(f"x{i}", "float32", (64, 32)) for i in range(2)]
    with g:
        for _ in range(int(rng.integers(3, 14))):
            a, b = (vals[int(k)] for k in rng.integers(0, len(vals), 2))
            kind = int(rng.integers(0, 3))
            if kind == 2 or a.type.shape != b.type.shape:
                vals.append(ops.reduce_sum(a, axes=(0,), keepdims=True))
            else:
                vals.append(ops.add(a, b) if kind == 0 else ops.mul(a, b))
    for i, v in enumerate(vals[2:]):
        if i == 0 or rng.random() < 0.3:
            g.output(v, f"y{i}")
    plan = planning.Plan(planning.Sizes({}))
    planning.flatten(g, plan)
    before = list(plan.nodes)
    planning.hoist_sinks(plan)
    assert sorted(map(id, plan.nodes)) == sorted(map(id, before))
    pos = {n: k for k, n in enumerate(plan.nodes)}
    for n in plan.nodes:
        for u in n.inputs:
            p = plan.resolve(u).producer
            assert p not in pos or pos[p] < pos[n]
    read = {plan.resolve(u) for n in before for u in n.inputs}
    moved = [n for n in before if not any(v in read for v in n.outputs)
             or sum(int(np.prod(v.type.shape)) for v in n.outputs) <= planning.SMALL_RESULTS]
    fixed = [n for n in before if n not in moved]
    assert [n for n in plan.nodes if n in fixed] == fixed


def test_elementwise_kernels_write_over_operands_that_die_there():
    """An elementwise kernel takes over the arena buffer of an operand of its type that no later
    kernel reads: relu over the product, add over the negation (the relu's result is read by
    the add too, so the negation cannot take it). A broadcast operand (other elements than the
    one being written) and an output's buffer are never taken over."""
    import re
    g = gradc.Graph("t")
    a = g.input("a", "float32", (4096,))
    b = g.input("b", "float32", (4096,))
    x = ops.mul(a, b)
    y = ops.relu(x)
    w = ops.add(ops.neg(y), y)
    g.output(ops.mul(w, a), "s")
    ex = gradc.compile(g, target="c", passes=None)
    calls = re.findall(r"rc = (k\d+)\(S, nt, (.*?)\);", ex.source)
    bufs = [re.findall(r"\b[AB]\[\d+\]", args) for _, args in calls]
    assert bufs == [["B[0]", "A[0]", "A[1]"], ["B[0]"], ["B[1]", "B[0]"], ["B[1]", "B[0]"],
                    ["A[2]", "B[1]", "A[0]"]]
    assert ex.arena_bytes == 2 * 4096 * 4
    rng = np.random.default_rng(0)
    feeds = {"a": rng.standard_normal(4096).astype(np.float32),
             "b": rng.standard_normal(4096).astype(np.float32)}
    assert_bits(ex(**feeds)["s"], gradc.compile(g, target="reference")(**feeds)["s"])

    g = gradc.Graph("t")
    a = g.input("a", "float32", (64, 64))
    r = ops.reduce_sum(a, axes=[1], keepdims=True)  # 64 x 1, read broadcast below
    e = ops.relu(r)
    g.output(ops.add(e, ops.expand(e, a)), "s")  # broadcast: e's buffer is not taken over
    g.output(r, "r")  # an output: relu does not write over it
    ex = gradc.compile(g, target="c", passes=None)
    want = gradc.compile(g, target="reference")(a=feeds["a"].reshape(64, 64))
    got = ex(a=feeds["a"].reshape(64, 64))
    for k in want:
        assert_bits(got[k], want[k])
