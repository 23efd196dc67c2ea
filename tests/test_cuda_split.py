"""The cuda target's ``sums="split"``: long sums into few outputs added in a fixed tree, held to
SPEC-training.md §9.5's bound (``summing_bound.py``), reproducible, reported as not bit-exact.

The kernels run on the CPU through the host harness (``runtime="host"``), as CI runs the target;
``small_splits`` lowers the thresholds so that small shapes split (several parts per group, and
one part per group), and ``forced_parts`` splits every product along K. NVRTC compiles every
split variant (skipped without it). The canonical mode stays the default and bit-exact
(``test_cuda_kernels.py``); a reduction that fills the GPU keeps the canonical order under split
too, while products add each term with a fused multiply-add (bit for bit a slow exact FMA chain).
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import gradc
from gradc import ops
from gradc.backends.cuda import build, rt, split, tiling
from gradc.backends.cuda.emit import generate
from gradc.errors import GradcError, UnsupportedError

from cuda_cases import CASES
from helpers import assert_bits, cuda_targets
from summing_bound import (assert_within, batch_norm_bounds, gemm_bound,
                           product_bound, reduce_bound)

pytestmark = pytest.mark.skipif("cuda-host" not in cuda_targets() and "cuda" not in
                                cuda_targets(), reason="no C++ compiler for the harness")
FLOATS = ("float16", "float32", "float64")


def _target() -> str:
    return "cuda" if "cuda" in cuda_targets() and "cuda-host" not in cuda_targets() else \
        "cuda-host"


def _compile(g: gradc.Graph, cache: str, **opts) -> gradc.Executable:
    runtime = {"runtime": "host"} if _target() == "cuda-host" else {}
    return gradc.compile(g, target="cuda", cache_dir=cache, **runtime, **opts)


@pytest.fixture
def cache(tmp_path_factory) -> str:
    return str(tmp_path_factory.getbasetemp() / "split-cache")


@pytest.fixture
def small_splits(monkeypatch):
    """Thresholds that split the sums of small test shapes."""
    monkeypatch.setattr(split, "MIN_TERMS", 8)
    monkeypatch.setattr(split, "MIN_PART", 16)
    monkeypatch.setattr(split, "TARGET_BLOCKS", 8)


def _graph(name: str, inputs: dict, fn) -> gradc.Graph:
    g = gradc.Graph(name)
    vals = {k: g.input(k, d, s) for k, (d, s) in inputs.items()}
    for k, v in fn(**vals).items():
        g.output(v, k)
    return g


# -- reductions --------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", FLOATS)
def test_reductions_split_within_the_bound(dtype, cache, small_splits):
    rng = np.random.default_rng(1)
    x = (rng.standard_normal((3, 4, 37)) * 10).astype(dtype)
    x[1, 2, 5] = np.nan
    x[2, 0, 7] = np.inf
    g = _graph("red", {"x": (dtype, x.shape)}, lambda x: {
        "s02": ops.reduce_sum(x, (0, 2)),  # 4 groups: 2 parts each
        "s2": ops.reduce_sum(x, (2,), True),  # 12 groups: one part each
        "sall": ops.reduce_sum(x),  # one group: 8 parts
        "m02": ops.reduce_mean(x, (0, 2)), "m1": ops.reduce_mean(x, (1, 2))})
    ex = _compile(g, cache, sums="split")
    assert not ex.exact
    assert len(ex._runner.program.reordered) == 5
    got = ex(x=x)
    want = gradc.compile(g, target="reference")(x=x)
    for name, axes, mean, keep in (("s02", (0, 2), False, False), ("s2", (2,), False, True),
                                   ("sall", None, False, False), ("m02", (0, 2), True, False),
                                   ("m1", (1, 2), True, False)):
        assert_within(got[name], want[name], reduce_bound(x, axes, mean, keep), name)


def test_split_sums_of_exact_partial_sums_and_negative_zeros_are_exact(cache, small_splits):
    """§9.5: data whose partial sums are exact give the reference's result in any order; a
    sum of -0.0 terms is -0.0 (every thread starts at -0.0, as the canonical sum does)."""
    x = np.arange(-300, 300, dtype=np.float32).reshape(2, 300) / 4
    z = np.full((2, 300), -0.0, np.float32)
    g = _graph("ex", {"x": ("float32", x.shape), "z": ("float32", z.shape)},
               lambda x, z: {"s": ops.reduce_sum(x, (1,)), "a": ops.reduce_sum(x),
                             "zs": ops.reduce_sum(z, (1,)), "za": ops.reduce_sum(z)})
    ex = _compile(g, cache, sums="split")
    assert not ex.exact
    got = ex(x=x, z=z)
    want = gradc.compile(g, target="reference")(x=x, z=z)
    for k in want:
        assert_bits(got[k], want[k])


def test_integer_sums_and_sums_that_fill_the_gpu_stay_canonical(cache):
    """Integer sums wrap (every order gives their bits) and keep the canonical kernel; a sum
    into many outputs fills the GPU with canonical chains: bit-exact under split too."""
    rng = np.random.default_rng(2)
    xi = rng.integers(-100, 100, (3, 2000)).astype(np.int32)
    xf = rng.standard_normal((split.FILL_GROUPS, split.MIN_TERMS)).astype(np.float32)
    g = _graph("canon", {"xi": ("int32", xi.shape), "xf": ("float32", xf.shape)},
               lambda xi, xf: {"si": ops.reduce_sum(xi, (1,)), "sf": ops.reduce_sum(xf, (1,)),
                               "few": ops.reduce_sum(xf, (0,))})
    program = generate(gradc.optimize(g).graph, {}, sums="split")
    assert program.reordered == [f"reduce_sum -> float32[{split.MIN_TERMS}]"]  # "few" only
    ex = _compile(g, cache, sums="split")
    got = ex(xi=xi, xf=xf)
    want = gradc.compile(g, target="reference")(xi=xi, xf=xf)
    for k in ("si", "sf"):
        assert_bits(got[k], want[k])


# -- batch normalization -----------------------------------------------------------------------

BN_SHAPES = (((3, 4, 5, 6), (1, 4, 1, 1)), ((2, 3, 40, 30), (1, 3, 1, 1)),
             ((3, 4, 5, 2), (1, 4, 1, 2)), ((2, 8, 5, 6), (1, 8, 1, 1)))


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("shapes", BN_SHAPES, ids=["parts", "long", "kept_axes", "one_part"])
def test_batch_norm_split_within_the_bound(dtype, shapes, cache, small_splits):
    """The three summing ops, each on inputs of its own (the gradients on the reference's
    statistics), against the reference within §12's bounds."""
    shape, pshape = shapes
    rng = np.random.default_rng(3)
    a = {"x": (rng.standard_normal(shape) * 3 + 1).astype(dtype),
         "dy": rng.standard_normal(shape).astype(dtype),
         "scale": rng.standard_normal(pshape).astype(dtype),
         "bias": rng.standard_normal(pshape).astype(dtype)}
    eps = 1e-3
    _, mean, var = (np.asarray(v) for v in gradc.compile(_graph(
        "stats", {k: (dtype, a[k].shape) for k in ("x", "scale", "bias")},
        lambda x, scale, bias: dict(zip(("y", "m", "v"), ops.batch_normalization_training(
            x, scale, bias, eps)))), target="reference")(
        x=a["x"], scale=a["scale"], bias=a["bias"]).values())
    a |= {"mean": mean, "var": np.abs(var).astype(dtype)}
    g = _graph("bn", {k: (dtype, v.shape) for k, v in a.items()},
               lambda x, dy, scale, bias, mean, var: {
                   **dict(zip(("y", "m", "v"),
                              ops.batch_normalization_training(x, scale, bias, eps))),
                   **dict(zip(("tdx", "tds", "tdb"), ops.batch_normalization_training_grad(
                       x, dy, mean, var, scale, eps))),
                   **dict(zip(("gdx", "gds", "gdb"), ops.batch_normalization_grad(
                       x, dy, mean, var, scale, eps)))})
    ex = _compile(g, cache, sums="split")
    program = ex._runner.program
    assert not ex.exact and len(program.reordered) == 3
    p = split.parts(int(np.prod(pshape)), int(np.prod(shape)) // int(np.prod(pshape)))
    assert len(program.launches) == (3 if p == 1 else 7)  # one launch per op with one part
    got = ex(**a)
    want = gradc.compile(g, target="reference")(**a)
    e32 = float(np.float32(eps))
    for op, names in (("batch_normalization_training", ("y", "m", "v")),
                      ("batch_normalization_training_grad", ("tdx", "tds", "tdb")),
                      ("batch_normalization_grad", ("gdx", "gds", "gdb"))):
        for name, tol in zip(names, batch_norm_bounds(op, a, e32)):
            assert_within(got[name], want[name], tol.reshape(want[name].shape)
                          if tol.size == want[name].size else tol, f"{op} {name}")
    assert_bits(got["gdx"], want["gdx"], nan_payload=False)  # element-wise: exact


def test_batch_norm_of_a_unet_layer_splits_with_the_default_thresholds(cache):
    """8 x 16 x 64 x 64 (16 channels of 32768 members, the UNet's first layers at batch 8):
    the default policy splits every sum of the training op and its gradient."""
    rng = np.random.default_rng(4)
    shape, pshape = (8, 16, 64, 64), (1, 16, 1, 1)
    a = {"x": rng.standard_normal(shape).astype(np.float32),
         "dy": rng.standard_normal(shape).astype(np.float32),
         "scale": rng.standard_normal(pshape).astype(np.float32),
         "bias": rng.standard_normal(pshape).astype(np.float32)}

    def fn(x, dy, scale, bias):
        y, m, v = ops.batch_normalization_training(x, scale, bias, 1e-5)
        dx, ds, db = ops.batch_normalization_training_grad(x, dy, m, v, scale, 1e-5)
        return {"y": y, "m": m, "v": v, "dx": dx, "ds": ds, "db": db}
    g = _graph("unet_bn", {k: ("float32", v.shape) for k, v in a.items()}, fn)
    program = generate(gradc.optimize(g).graph, {}, sums="split")
    assert len(program.reordered) == 2
    assert len(program.launches) == 5  # 3 + 2 launches
    got = _compile(g, cache, sums="split")(**a)
    want = gradc.compile(g, target="reference")(**a)
    b = batch_norm_bounds("batch_normalization_training", a, float(np.float32(1e-5)))
    for name, tol in zip(("y", "m", "v"), b):
        assert_within(got[name], want[name], tol, name)
    # the gradient ran on the split statistics: the reference's gradient on those
    rerun = {**a, "mean": got["m"], "var": got["v"]}
    ref = gradc.compile(_graph("g", {k: ("float32", v.shape) for k, v in rerun.items()},
                               lambda x, dy, scale, bias, mean, var: dict(zip(
                                   ("dx", "ds", "db"), ops.batch_normalization_training_grad(
                                       x, dy, mean, var, scale, 1e-5)))),
                        target="reference")(**rerun)
    tb = batch_norm_bounds("batch_normalization_training_grad", rerun, float(np.float32(1e-5)))
    for name, tol in zip(("dx", "ds", "db"), tb):
        assert_within(got[name], ref[name], tol, name)


# -- products ----------------------------------------------------------------------------------

def _long_products(dtype: str) -> tuple[gradc.Graph, dict[str, np.ndarray], set[str]]:
    """Convolutions (padding: masked terms; a strided transposed one: phases; depthwise: the
    direct kernel), filter gradients and gemms whose sums span several chunks of K; the
    names of the outputs with a bias."""
    rng = np.random.default_rng(5)
    shapes = {"x": (3, 6, 9, 8), "w": (5, 6, 3, 3), "b": (1, 5, 1, 1),
              "wt": (6, 4, 2, 2), "wd": (6, 1, 3, 3), "a": (7, 300), "bm": (300, 9)}
    fwd = dict(start_padding=(1, 1), end_padding=(1, 0))
    bwd = dict(direction="backward", strides=(2, 2), start_padding=(1, 0))
    dep = dict(start_padding=(1, 1), end_padding=(1, 1), group_count=6)
    probe = _graph("p", {k: (dtype, s) for k, s in shapes.items()},
                   lambda x, w, b, wt, wd, a, bm: {
                       "f": ops.convolution(x, w, b, **fwd),
                       "t": ops.convolution(x, wt, None, **bwd),
                       "d": ops.convolution(x, wd, None, **dep)})
    for k, v in zip(("dy", "dyt", "dyd"), probe.outputs):
        shapes[k] = tuple(int(d) for d in v.type.shape)

    def fn(x, w, b, wt, wd, a, bm, dy, dyt, dyd):
        return {"cv": ops.convolution(x, w, b, **fwd), "ct": ops.convolution(x, wt, None, **bwd),
                "cd": ops.convolution(x, wd, None, **dep),
                "fg": ops.convolution_filter_grad(x, dy, shapes["w"], **fwd),
                "ft": ops.convolution_filter_grad(x, dyt, shapes["wt"], **bwd),
                "fd": ops.convolution_filter_grad(x, dyd, shapes["wd"], **dep),
                "mm": ops.gemm(a, bm), "mt": ops.gemm(bm, a, trans_a=True, trans_b=True)}
    g = _graph(f"long_{dtype}", {k: (dtype, s) for k, s in shapes.items()}, fn)
    feeds = {k: rng.standard_normal(s).astype(dtype) for k, s in shapes.items()}
    feeds["x"][0, 1, 2, 3] = np.nan
    feeds["w"][1, 0, 0, 0] = np.inf  # the masked path of its chunks
    return g, feeds, {"cv"}


@pytest.fixture(params=["tiled", "direct"])
def forced_parts(request, monkeypatch):
    """Every product split into 3 parts along K (or fewer when K is short), with the tile the
    canonical policy picks, or with the direct kernel."""
    choose = tiling.choose

    def forced(p):
        t = choose(p) if request.param == "tiled" else tiling.DIRECT
        return t, min(3, tiling.cdiv(p.k, t.bk))
    monkeypatch.setattr(tiling, "choose_split", forced)
    return request.param


@pytest.mark.parametrize("dtype", FLOATS)
def test_products_split_along_k_within_the_bound(dtype, cache, forced_parts):
    g, feeds, biased = _long_products(dtype)
    ex = _compile(g, cache, sums="split")
    assert not ex.exact
    got = ex(**feeds)
    ref = gradc.compile(g, target="reference")
    want = ref(**feeds)
    tols = product_bound(lambda **f: ref(**f), feeds, 0, ("b",))
    biased_tols = product_bound(lambda **f: ref(**f), feeds, 1, ("b",))  # k = 1: the bias
    tols |= {k: biased_tols[k] for k in biased}
    tols["mm"] = gemm_bound(feeds["a"], feeds["bm"], None, 1.0, 0.0)
    tols["mt"] = gemm_bound(feeds["bm"], feeds["a"], None, 1.0, 0.0, True, True)
    for k in want:
        tol = tols[k]
        assert_within(got[k], want[k], tol, k)


def _fma_round(x, dtype) -> float:
    """The exact rational ``x`` rounded to nearest (ties to even) in ``dtype``: Python's float()
    rounds to float64 correctly; float32 checks its neighbours, double rounding being one ulp
    off at most."""
    from fractions import Fraction
    r = np.float64(float(x))
    if dtype == np.float64:
        return r
    c = np.float32(r)
    best = None
    for v in (np.nextafter(c, np.float32(-np.inf)), c, np.nextafter(c, np.float32(np.inf))):
        d = abs(Fraction(float(v)) - x)
        even = int(v.view(np.uint32)) % 2 == 0
        if best is None or d < best[0] or (d == best[0] and even):
            best = (d, v)
    return best[1]


def _fma_gemm(a: np.ndarray, b: np.ndarray, length: int) -> np.ndarray:
    """``a @ b`` as the split kernels sum it: each part of ``length`` terms a chain of fused
    multiply-adds from +0 (one rounding per term), then the parts added in order from +0."""
    from fractions import Fraction
    m, k = a.shape
    out = np.zeros((m, b.shape[1]), a.dtype)
    for i in range(m):
        for j in range(b.shape[1]):
            total = a.dtype.type(0)
            for lo in range(0, k, length):
                s = a.dtype.type(0)
                for kk in range(lo, min(k, lo + length)):
                    s = _fma_round(Fraction(float(a[i, kk])) * Fraction(float(b[kk, j]))
                                   + Fraction(float(s)), a.dtype)
                total = a.dtype.type(total + s)
            out[i, j] = total
    return out


@pytest.mark.parametrize("dtype", ("float32", "float64"))
@pytest.mark.parametrize("tile,parts", [("tiled", 1), ("tiled", 2), ("direct", 1),
                                        ("direct", 3)])
def test_split_products_add_each_term_with_one_fused_multiply_add(dtype, tile, parts, cache,
                                                                  monkeypatch):
    """Under sums="split" a product's terms are fused multiply-adds (one rounding each, within
    §9.5's bound): the host harness gives a slow exact-arithmetic FMA chain's bits (an FMA is
    correctly rounded, so the GPU gives them too), split or not; the canonical mode keeps two
    roundings per term and the reference's bits."""
    choose = tiling.choose
    made = {}

    def forced(p):
        t = choose(p) if tile == "tiled" else tiling.DIRECT
        made["length"] = tiling.cdiv(tiling.cdiv(p.k, parts), t.bk) * t.bk
        return t, parts
    monkeypatch.setattr(tiling, "choose_split", forced)
    rng = np.random.default_rng(7)
    a = rng.standard_normal((5, 37)).astype(dtype)
    b = rng.standard_normal((37, 6)).astype(dtype)
    g = _graph("fma", {"a": (dtype, a.shape), "b": (dtype, b.shape)},
               lambda a, b: {"y": ops.gemm(a, b)})
    ex = _compile(g, cache, sums="split")
    assert not ex.exact and ("fmaf(" if dtype == "float32" else "fma(") in ex.source
    got = ex(a=a, b=b)["y"]
    assert_bits(got, _fma_gemm(a, b, made["length"] if parts > 1 else 37))
    assert_bits(_compile(g, cache)(a=a, b=b)["y"],
                gradc.compile(g, target="reference")(a=a, b=b)["y"])
    assert not np.array_equal(got, gradc.compile(g, target="reference")(a=a, b=b)["y"])


def test_the_split_policy_keeps_short_sums_canonical():
    """choose_split splits only long sums into few outputs, into whole chunks of its tile."""
    from gradc.backends.c.ctypes_map import ctype
    from gradc.ir.types import DType

    t = ctype(DType.float32)
    op = tiling.Operand("p", t, "k", lambda a, b: [], lambda a, b: ([], "0", None), 3.0)

    def product(m: int, n: int, k: int) -> tiling.Product:
        return tiling.Product(1, m, n, k, op, op, "float", lambda: [], lambda a, b, c: [])
    assert tiling.choose_split(product(512, 4096, 64))[1] == 1  # short sums, many outputs
    tile, parts = tiling.choose_split(product(16, 144, 32768))  # a UNet filter gradient
    assert parts > 1
    assert tiling.cdiv(32768, parts) <= tiling.cdiv(tiling.cdiv(32768, parts), tile.bk) * tile.bk


# -- the whole program -------------------------------------------------------------------------

def test_split_programs_are_reproducible_and_free_of_atomics(cache, small_splits):
    """Two compilations give the same source, two runs the same bits; no atomic anywhere."""
    g, feeds = CASES["batch_norm_chunks_float32"]()
    s1 = generate(gradc.optimize(g).graph, {}, sums="split").source
    s2 = generate(gradc.optimize(g).graph, {}, sums="split").source
    assert s1 == s2 and "atomic" not in s1.lower()
    ex = _compile(g, cache, sums="split")
    a, b = ex(**feeds), ex(**feeds)
    for k in a:
        assert_bits(a[k], b[k])


def test_canonical_stays_the_default_and_exact(cache, small_splits):
    g, feeds = CASES["batch_norm_chunks_float32"]()
    ex = _compile(g, cache)
    assert ex.exact and ex._runner.program.reordered == []
    got, want = ex(**feeds), gradc.compile(g, target="reference")(**feeds)
    for k in want:
        assert_bits(got[k], want[k], nan_payload=False)


def test_the_sums_option_is_checked():
    g = _graph("o", {"x": ("float32", (4,))}, lambda x: {"y": ops.reduce_sum(x)})
    for bad in ("fast", 1, None):
        with pytest.raises(GradcError, match="sums"):
            gradc.compile(g, target="cuda", runtime="host", sums=bad)


def test_gradc_check_holds_split_programs_to_the_tolerance(cache, small_splits, monkeypatch):
    """compare_targets asks the executable (``exact``), not the target, whether bits must
    match: a split program passes on the tolerance."""
    from gradc import check

    real = gradc.compile

    def split_compile(graph, target="c", **kw):
        if target == "cuda":
            kw |= {"runtime": "host", "sums": "split", "cache_dir": cache}
        return real(graph, target=target, **kw)
    monkeypatch.setattr(check, "compile", split_compile)
    g = _graph("chk", {"x": ("float32", (3, 200))}, lambda x: {"s": ops.reduce_sum(x, (1,))})
    rows, ok = check.compare_targets(g, ["cuda"], {})
    assert ok and "bit-exact" not in "\n".join(rows)


@pytest.mark.parametrize("which", ["reduce_bn", "products_tiled", "products_direct"])
def test_nvrtc_compiles_every_split_variant(which, tmp_path, small_splits, monkeypatch):
    try:
        rt.nvrtc_version()
    except UnsupportedError as e:
        pytest.skip(str(e))
    if which == "reduce_bn":
        monkeypatch.setattr(split, "ROW_MIN", 4)
        monkeypatch.setattr(split, "TARGET_THREADS", 64)
        graphs = [CASES[name]()[0] for name in ("batch_norm_chunks_float32",
                                                 "reductions_float16", "normalization_float64")]
    else:
        choose = tiling.choose
        monkeypatch.setattr(tiling, "choose_split", lambda p: (
            (choose(p) if which == "products_tiled" else tiling.DIRECT), 3))
        graphs = [_long_products(d)[0] for d in FLOATS]
    for gr in graphs:
        program = generate(gradc.optimize(gr).graph, {}, sums="split")
        assert program.reordered
        cubin = build.compile_cubin(program.source, build.DEFAULT_ARCH, str(tmp_path))
        assert cubin[:4] == b"\x7fELF"


# -- layer normalization's parameter gradients -------------------------------------------------

@pytest.mark.parametrize("dtype", FLOATS)
def test_normalization_parameter_gradients_split_within_the_bound(dtype, cache, monkeypatch):
    """mean_variance_normalization_grad's dscale and dbias (long sums into few scale elements)
    cut into ranges of rows (``split.thread_parts``), within SPEC-transformers §24.4's bound;
    dX keeps the canonical order (bit-exact)."""
    from normalization_bound import assert_within as within, backward_bounds

    monkeypatch.setattr(split, "MIN_TERMS", 8)
    monkeypatch.setattr(split, "ROW_MIN", 4)
    monkeypatch.setattr(split, "TARGET_THREADS", 64)
    rng = np.random.default_rng(6)
    cases = {"ln": ((37, 6), (6,), {}), "axes": ((5, 4, 9), (4, 1), {"axes": (0, 2)}),
             "rms": ((3, 11, 8), (8,), {"use_mean": False})}
    feeds, kws = {}, {}
    for key, (shape, pshape, kw) in cases.items():
        feeds[f"x_{key}"] = (rng.standard_normal(shape) * 2 + 0.5).astype(dtype)
        feeds[f"dy_{key}"] = rng.standard_normal(shape).astype(dtype)
        feeds[f"s_{key}"] = rng.standard_normal(pshape).astype(dtype)
        kws[key] = kw
    g = gradc.Graph("mvn")
    vals = {k: g.input(k, dtype, v.shape) for k, v in feeds.items()}
    for key in cases:
        for name, v in zip(("dx", "ds", "db"), ops.mean_variance_normalization_grad(
                vals[f"x_{key}"], vals[f"dy_{key}"], vals[f"s_{key}"], **kws[key])):
            g.output(v, f"{name}_{key}")
    ex = _compile(g, cache, sums="split")
    assert len(ex._runner.program.reordered) == 3
    got = ex(**feeds)
    want = gradc.compile(g, target="reference")(**feeds)
    for key, (shape, pshape, kw) in cases.items():
        axes = kw.get("axes", (len(shape) - 1,))
        _, bs, bb = backward_bounds(feeds[f"x_{key}"], feeds[f"dy_{key}"], feeds[f"s_{key}"],
                                    axes, kw.get("use_mean", True), True)
        assert_bits(got[f"dx_{key}"], want[f"dx_{key}"])
        within(got[f"ds_{key}"], want[f"ds_{key}"], bs, f"ds_{key}")
        within(got[f"db_{key}"], want[f"db_{key}"], bb, f"db_{key}")


# -- a whole training step ---------------------------------------------------------------------

@pytest.mark.parametrize("name", ["unet", "resnet18"])
def test_real_models_train_under_split_sums_as_on_the_c_target(name, cache, small_splits,
                                                                 monkeypatch):
    """Two SGD steps of a small real model with every kind of split in its step (batch-norm
    ops, bias and loss sums, products split along K), against the C target (canonical): the
    losses and the parameters agree to float32 rounding of the sums, and the executable says
    that it reordered sums."""
    torch = pytest.importorskip("torch")
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import real_models as rm  # noqa: E402  (needs torch)

    choose = tiling.choose
    monkeypatch.setattr(tiling, "choose_split", lambda p: (
        choose(p), min(2, tiling.cdiv(p.k, choose(p).bk))))
    # batch and size where the step is well conditioned: at batch 2, resnet18's last batch
    # norms normalize 2 values, and 1e-7 changes of its input move its loss by 1e-4
    batch, size = {"unet": (2, 16), "resnet18": (4, 32)}[name]
    model, shape = rm.make(name, 16, seed=0, size=size)
    gen = torch.Generator().manual_seed(3)
    xs = [torch.randn(batch, *shape, generator=gen) for _ in range(2)]
    labels = [rm.labels_for(name, model, x, seed=i) for i, x in enumerate(xs)]
    g = gradc.from_onnx(rm.export(model, "ts_train", xs[0], labels[0]))
    opt = gradc.optim.SGD(0.05)
    tc = gradc.Trainer(g, opt, loss="cross_entropy", target="c")
    runtime = {"runtime": "host"} if _target() == "cuda-host" else {}
    tg = gradc.Trainer(g, opt, loss="cross_entropy", target="cuda", cache_dir=cache,
                       sums="split", **runtime)
    assert not tg.executable.exact
    for x, lab in zip(xs, labels):
        batch = {"x": x.numpy(), "labels": lab.numpy()}
        lc, lg = tc.step(**batch), tg.step(**batch)
        assert abs(lc - lg) <= 1e-5 * abs(lc), (lc, lg)
    # each parameter's change over the steps, within 0.5% of the change's largest element
    # (the backward sums cancel: a gradient's rounding error is relative to the sum of its
    # terms' magnitudes, far above the gradient's own; after one step the changes agree to
    # 4e-5, and a wrong split would be off by its whole size)
    want, got = tc.state_dict(), tg.state_dict()
    start = {p.name: p.value for p in g.parameters}
    for k in want:
        if k not in start or want[k].dtype.kind != "f":
            continue
        dw, dg = want[k] - start[k], got[k] - start[k]
        tol = 5e-3 * float(np.abs(dw).max(initial=0.0)) + 1e-7
        assert float(np.abs(dg - dw).max(initial=0.0)) <= tol, k


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(1, 7), min_size=1, max_size=5), st.data())
def test_decompose_gives_every_member_its_offset(sizes, data):
    """``split.decompose`` (the offset of a split sum's member, its axes merged where they lie
    contiguously) against a loop over the box, for the sub-boxes of a row-major array: every
    choice of axes, with and without the 32-bit form (a stride that passes 2**31)."""
    full = [n + data.draw(st.integers(0, 2)) for n in sizes]  # the array the box lies in
    strides = [1] * len(full)
    for a in range(len(full) - 2, -1, -1):
        strides[a] = strides[a + 1] * full[a + 1]
    if data.draw(st.booleans()):  # a huge outer stride: the 64-bit form
        strides = [s * (1 << 29) if a == 0 else s for a, s in enumerate(strides)]
    expr = split.decompose("j", sizes, strides)
    if expr != "0":  # (a box of one element)
        reach = sum((n - 1) * s for n, s in zip(sizes, strides))
        assert ("(unsigned)" in expr) == (reach < 1 << 31), expr
    py = expr.replace("(unsigned)", "").replace("/", "//")
    for j, idx in enumerate(itertools.product(*(range(n) for n in sizes))):
        want = sum(i * s for i, s in zip(idx, strides))
        assert eval(py, {"j": j}) == want, (sizes, strides, expr, j)  # noqa: S307


def test_decompose_merges_the_axes_that_lie_contiguously():
    """A bias gradient's members (images, then rows and columns of one channel): the rows and
    columns are one run of memory, so one division and one remainder, in 32 bits."""
    assert split.decompose("j", [64, 15, 15], [14400, 15, 1]) == \
        "(((unsigned)(j)) / 225) * 14400 + (((unsigned)(j))) % 225"
    assert split.decompose("g", [1, 8, 1], [64, 8, 8]) == "(((unsigned)(g))) * 8"
