"""The C target's transcendental functions (``backends/c/transcend.h``) against the reference:
special values per op and dtype, every float16 value, random float32 and float64 values, softmax
rows, and the property that makes them worth having: the loops that call them vectorize.

The reference evaluates in float64 and rounds once; transcend.h evaluates in double to about a
double ulp and rounds once, so float16 and float32 results are the reference's bit for bit
(they differ only where the exact value lies within ~1e-16 relative of a rounding boundary:
about 1e-8 of random values, none in these samples); float64 results are within SPEC-training
§9.5's 4 ulps (SPEC-transformers §25.4 for gelu), and exact where the reference's value is 0,
±1, ±inf or NaN. benchmarks/bench_transcendental.py measures the same on 10^7 values.
"""

from __future__ import annotations

import math
import os
import re
import subprocess

import numpy as np
import pytest

import gradc
from gradc import ops
from gradc.backends.c import build
from gradc.backends.c.prelude import PRELUDE

UNARY = {
    "exp": ops.exp, "log": ops.log, "tanh": ops.tanh, "sigmoid": ops.sigmoid, "erf": ops.erf,
    "sin": ops.sin, "cos": ops.cos, "gelu": lambda x: ops.gelu(x, "none"),
    "gelu_tanh": lambda x: ops.gelu(x, "tanh"),
    **{f"pow{e:g}": (lambda e: lambda x: ops.pow(x, e))(e)
       for e in (0.0, 1.0, 2.0, 3.0, -1.0, -2.0, 0.5, -0.5, -2.5)},
}
GRADS = {"gelu_grad": "none", "gelu_grad_tanh": "tanh"}
F64_SPECIALS = [
    0.0, -0.0, np.inf, -np.inf, np.nan, 1.0, -1.0, 0.5, -0.5, 2.0, 3.0, -8.0, 5e-324, -5e-324,
    1e-310, -1e-310, 2.2250738585072014e-308, 1e-300, 1e-20, -1e-20, 3e-9, 0.625, -0.625,
    0.6250000000000001, 0.9999999999999999, 1.0000000000000002, 709.782712893384,
    709.7827128933841, 710.0, -708.3964185322641, -708.4, -745.1332191019411, -745.14, -746.0,
    27.5, -27.5, 38.0, -38.0, 40.0, -40.0, 6.0, -6.0, 88.72283, 88.7229, -103.97208, -104.0,
    1048575.9999999999, 1048576.0, -1048576.5, 1e22, 1e300, -1e300, 1.7976931348623157e308,
    -1.7976931348623157e308, math.pi, -math.pi / 2, 3 * math.pi / 4, 1e6 * math.pi,
]


def _graph(dtype: str, n: int) -> gradc.Graph:
    g = gradc.Graph(f"transcendental_{dtype}")
    x, d = g.input("x", dtype, (n,)), g.input("d", dtype, (n,))
    for k, f in UNARY.items():
        g.output(f(x), k)
    for k, mode in GRADS.items():
        g.output(ops.gelu_grad(x, d, mode), k)
    return g


def _values(dtype: str, n: int, seed: int) -> np.ndarray:
    """The special values, then normals at several scales and random finite bit patterns."""
    dt = np.dtype(dtype)
    rng = np.random.default_rng(seed)
    k = (n - len(F64_SPECIALS)) // 2
    scales = np.array([0.01, 1, 4, 12, 40, 120, 1e4])[rng.integers(0, 7, k)]
    ubits = np.dtype(f"u{dt.itemsize}")
    raw = rng.integers(0, np.iinfo(ubits).max, n - len(F64_SPECIALS) - k, dtype=ubits,
                       endpoint=True).view(dt)
    raw[~np.isfinite(raw)] = 0.25
    with np.errstate(over="ignore"):
        return np.concatenate([np.array(F64_SPECIALS).astype(dt),
                               (rng.standard_normal(k) * scales).astype(dt), raw])


def _run(dtype: str, x: np.ndarray) -> tuple[dict, dict, np.ndarray]:
    d = np.random.default_rng(7).standard_normal(len(x)).astype(dtype)
    g = _graph(dtype, len(x))
    ref = gradc.compile(g, target="reference", passes=None)(x=x, d=d)
    got = gradc.compile(g, target="c")(x=x, d=d)
    return ref, got, d


def _c_pow_semantics(name: str, x: np.ndarray, ref: np.ndarray) -> np.ndarray:
    """SPEC-training §16.2: pow is C's pow. NumPy's ``power`` takes x ** 0.5 as sqrt (its
    scalar fast path), so the reference gives -0 at -0 and NaN at -inf where C's pow gives +0
    and +inf; the C target follows C (as ONNX Runtime does). Those two points corrected."""
    if name != "pow0.5":
        return ref
    ref = ref.copy()
    ref[(x == 0) & np.signbit(x)] = 0.0
    ref[x == -np.inf] = np.inf
    return ref


def _same_bits(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    bits = np.dtype(f"u{a.dtype.itemsize}")
    return (a.view(bits) == b.view(bits)) | (np.isnan(a) & np.isnan(b))


@pytest.mark.parametrize("dtype,n", [("float16", 1 << 16), ("float32", 30000)])
def test_float16_and_float32_are_the_references_bits(dtype, n):
    """Every float16 value (the specials among them) and 30,000 float32 values: bit for bit."""
    x = (np.arange(n, dtype=np.uint16).view(np.float16) if dtype == "float16"
         else _values(dtype, n, 3))
    ref, got, _ = _run(dtype, x)
    for k in ref:
        want = _c_pow_semantics(k, x, ref[k])
        same = _same_bits(got[k], want)
        bad = np.flatnonzero(~same)[:5]
        assert same.all(), f"{k} {dtype}: x={x[bad]} got={got[k][bad]} want={want[bad]}"


def _tolerance(name: str, x: np.ndarray, d: np.ndarray, ref: np.ndarray) -> np.ndarray:
    """§9.5's 4 ulps of the reference; §25.4 adds 4·2⁻⁵²·(1 + |x|) (times |dY|) for gelu."""
    tol = 4 * np.spacing(np.abs(ref))
    if name.startswith("gelu"):
        term = 4 * 2.0 ** -52 * (1 + np.abs(x))
        tol = tol + (term * np.abs(d) if "grad" in name else term)
    return tol


def test_float64_within_tolerance_with_the_references_nans_infinities_and_zero_signs():
    """§9.5: NaN matches NaN, ±inf match exactly, a zero has the reference's sign; every other
    value within the op's tolerance (its saturation at ±1 included: glibc's tanh(19.02) is 1,
    the correctly rounded value 1 - 2^-53, which transcend.h gives)."""
    x = _values("float64", 30000, 4)
    ref, got, d = _run("float64", x)
    for k in ref:
        want, have = _c_pow_semantics(k, x, ref[k]), got[k]
        special = np.isnan(want) | np.isinf(want) | np.isnan(have) | np.isinf(have)
        zeros = (want == 0) & (have == 0)
        same = _same_bits(have, want)
        bad = np.flatnonzero((special | zeros) & ~same)[:5]
        assert not bad.size, f"{k}: x={x[bad]} got={have[bad]} want={want[bad]}"
        with np.errstate(all="ignore"):
            over = np.abs(have - want) > _tolerance(k, x, d, want)
        bad = np.flatnonzero(~special & over)[:5]
        assert not bad.size, f"{k}: x={x[bad]} got={have[bad]} want={want[bad]}"


def test_special_values_as_the_reference_gives_them():
    """The spec's special values spelled out (float32, the C target): ±0, ±inf, NaN, a
    subnormal, overflow to inf and underflow to 0; the finite values of the remaining columns
    are C's double functions rounded once (``m``)."""
    x = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1e-45, -1e-45, 89.0, -104.0, 3e38],
                 np.float32)
    _, got, _ = _run("float32", x)
    nan, inf = np.nan, np.inf

    def m(fn, i):
        return fn(float(x[i]))

    def check(name, want):
        w = np.array(want, np.float32)
        assert _same_bits(got[name], w).all(), (name, got[name], w)

    check("exp", [1, 1, inf, 0, nan, 1, 1, inf, 0, inf])
    check("log", [-inf, -inf, inf, nan, nan, m(math.log, 5), nan, m(math.log, 7), nan,
                  m(math.log, 9)])
    check("tanh", [0.0, -0.0, 1, -1, nan, 1e-45, -1e-45, 1, -1, 1])
    check("sigmoid", [0.5, 0.5, 1, 0, nan, 0.5, 0.5, 1, m(lambda v: 1 / (1 + math.exp(-v)), 8),
                      1])
    check("erf", [0.0, -0.0, 1, -1, nan, m(math.erf, 5), m(math.erf, 6), 1, -1, 1])
    check("sin", [0.0, -0.0, nan, nan, nan, 1e-45, -1e-45, m(math.sin, 7), m(math.sin, 8),
                  m(math.sin, 9)])
    check("cos", [1, 1, nan, nan, nan, 1, 1, m(math.cos, 7), m(math.cos, 8), m(math.cos, 9)])
    check("gelu", [0.0, -0.0, inf, nan, nan, m(lambda v: v * 0.5 * math.erfc(-v / 2 ** 0.5), 5),
                   m(lambda v: v * 0.5 * math.erfc(-v / 2 ** 0.5), 6), 89, -0.0, 3e38])
    check("pow0.5", [0.0, 0.0, inf, inf, nan, m(math.sqrt, 5), nan, m(math.sqrt, 7), nan,
                     m(math.sqrt, 9)])
    check("pow-1", [inf, -inf, 0.0, -0.0, nan, inf, -inf, 1 / 89, -1 / 104, m(lambda v: 1 / v, 9)])
    check("pow0", [1] * 10)
    check("pow2", [0.0, 0.0, inf, inf, nan, 0.0, 0.0, 89.0 ** 2, 104.0 ** 2, inf])
    for k in GRADS:  # ±inf and NaN: NaN; dY·0.5 at ±0
        assert np.isnan(got[k][2:5]).all()
def _softmax_rows(dtype: str) -> np.ndarray:
    """Rows that exercise the max (zeros of both signs first, NaN, -inf, +inf) and the sum."""
    rng = np.random.default_rng(5)
    x = (rng.standard_normal((12, 37)) * 6).astype(dtype)
    x[0] = 0
    x[0, :2] = [-0.0, 0.0]
    x[1] = np.nan
    x[2] = -np.inf
    x[3, :4] = [np.nan, -np.inf, np.inf, 1]
    x[4, 5:] = -np.inf
    x[5] = np.linspace(-30, 30, 37)
    x[6, 0] = np.nan
    x[7] = [0.0] + [-17.0] * 36  # terms far below the first: the canonical order shows
    return x


@pytest.mark.parametrize("dtype", ["float32", "float64", "float16"])
@pytest.mark.parametrize("log", [False, True])
@pytest.mark.parametrize("axes", [(1,), (0,)])
def test_softmax_rows(dtype, log, axes):
    """Trailing axes take the row kernel (float32/float64), others the general loop; float32
    and float16 bit for bit, float64 within §17.1's bound (exp to a double ulp, canonical sum)."""
    g = gradc.Graph("softmax")
    x = g.input("x", dtype, (12, 37))
    g.output((ops.log_softmax if log else ops.softmax)(x, axes), "y")
    xv = _softmax_rows(dtype)
    ref = gradc.compile(g, target="reference")(x=xv)["y"]
    got = gradc.compile(g, target="c")(x=xv)["y"]
    if dtype != "float64":
        assert _same_bits(got, ref).all(), (got[~_same_bits(got, ref)], ref[~_same_bits(got, ref)])
        return
    exact = np.isnan(ref) | np.isinf(ref) | (ref == 0)
    assert _same_bits(got, ref)[exact].all()
    # §17.1's bound: ε (2n + 12 + |x - max|) |y|, or ε (2n + 12 + 2 |x - max| + 5 log T)
    n, eps = xv.shape[axes[0]], 2.0 ** -52
    with np.errstate(all="ignore"):
        mx = np.max(np.where(np.isnan(xv), -np.inf, xv), axis=axes[0], keepdims=True)
        sh = np.abs(xv - mx)
        t = np.log(np.sum(np.exp(xv - mx), axis=axes[0], keepdims=True))
        tol = eps * ((2 * n + 12 + 2 * sh + 5 * t) if log else (2 * n + 12 + sh) * np.abs(ref))
        assert (np.abs(got - ref)[~exact] <= tol[~exact] + 2.0 ** -1022).all()


VECTORIZED = ["exp", "log", "tanh", "sigmoid", "erf", "erfc", "sin", "cos", "gelu_none",
              "gelu_tanh", "gelu_none_slope", "gelu_tanh_slope", "pow_3", "pow_h"]


def _loops() -> tuple[str, dict[int, str]]:
    """A C file of one loop per function and data type, and the loops by line."""
    text, where = PRELUDE, {}
    for f in VECTORIZED:
        for t in ("float", "double"):
            where[text.count("\n") + 1] = f"{f} on {t}"
            text += (f"void v_{f}_{t}(int64_t n, const {t} *restrict x, {t} *restrict y) {{ "
                     f"for (int64_t i = 0; i < n; i++) y[i] = ({t})gc_{f}((double)x[i]); }}\n")
    return text, where


def test_loops_calling_them_vectorize(tmp_path):
    """Each function's loop is vectorized by GCC with the C target's flags (where libm's
    scalar calls kept it scalar; a select written as a conditional expression did too: GCC
    sank a float -> double conversion into the branch and gave up on the loop)."""
    tc = build.toolchain(os.environ.get("CC", "cc"), str(tmp_path))
    gcc = "Free Software Foundation" in tc.version and "clang" not in tc.version.lower()
    if not gcc or "-march=native" not in tc.flags:
        pytest.skip("the report checked is GCC's, with -march=native")
    text, where = _loops()
    c = tmp_path / "v.c"
    c.write_text(text)
    r = subprocess.run([*tc.argv, *build.BASE_FLAGS, *tc.flags, "-fopt-info-vec-optimized",
                        "-o", str(tmp_path / "v.so"), str(c)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-2000:]
    done = {int(m) for m in re.findall(r"v\.c:(\d+):\d+: optimized: loop vectorized", r.stderr)}
    missed = [what for line, what in where.items() if line not in done]
    assert not missed, f"not vectorized: {missed}"
