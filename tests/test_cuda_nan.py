"""NaN results of the cuda target's element-wise expressions: x86's, whatever NaN the GPU makes.

The reference (and the C target) run on x86: a NaN result is the first NaN operand quieted, or
the negative default NaN of an invalid operation; glibc's functions return their NaN argument
quieted. A GPU returns its canonical NaN (``gpu_smoke.sh``'s first run: 15 failures). The CUDA
dialect (``backends/cuda/scalar.py``) fixes NaN results up with the prelude's ``x86nan.cuh``, and
the host harness makes every floating-point NaN result the GPU's canonical one
(``host_gpunan.h``, its default mode), so:

- every exact expression of the dialect, on NaN payloads (quiet, signaling, negative),
  infinities and zeros, gives the reference's bits; the transcendental functions' NaNs are where
  the C target's are, and their numbers within §9.5's ulps of its (§9.5 leaves a
  transcendental's NaN payload open: NumPy and glibc differ, e.g. glibc's pow(-NaN, 3) flips the
  sign);
- with the C target's expressions put back (a missing fixup), the harness gives other bits for
  every exact op: the class of bug the GPU found is caught on the CPU.

Where both operands of ``add`` or ``mul`` are NaN, x86 returns the one the compiler put first,
which C does not fix: NumPy's float16 loops and its broadcast float64 loops return the rhs, the C
target either. The dialect returns the lhs; those positions are compared as "a NaN" only.
"""

from __future__ import annotations

import numpy as np
import pytest

import gradc
from gradc import ops
from gradc.backends.c.scalar import SCALAR
from gradc.backends.cuda import scalar as cuda_scalar

from helpers import assert_bits, compile_for, cuda_targets
from test_elementwise_math_support import assert_ulps, ulps

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")  # NumPy on NaN and inf
HARNESS = pytest.mark.skipif("cuda-host" not in cuda_targets(),
                             reason="no C++ compiler for the host harness")

# a: NaN payloads (quiet, negative, signaling), numbers, infinities and zeros; b pairs them so
# that every operation meets a NaN first or second, both, and an invalid case
BITS = {
    "float16": ([0x7E12, 0xFE04, 0x7C01, 0x3E00, 0x7C00, 0x0000, 0x8000, 0xC000, 0x7C00, 0x4200],
                [0x4500, 0x7F00, 0x4000, 0xFC05, 0x7C00, 0x7C00, 0x0000, 0x0000, 0xFC00, 0x8000]),
    "float32": ([0x7FC01234, 0xFFC00042, 0x7F800001, 0x3FC00000, 0x7F800000, 0, 0x80000000,
                 0xC0000000, 0x7F800000, 0x40400000],
                [0x40A00000, 0x7FD00000, 0x40000000, 0xFF812345, 0x7F800000, 0x7F800000, 0,
                 0, 0xFF800000, 0x80000000]),
    "float64": ([0x7FF8000000001234, 0xFFF8000000000042, 0x7FF0000000000001, 0x3FF8000000000000,
                 0x7FF0000000000000, 0, 0x8000000000000000, 0xC000000000000000,
                 0x7FF0000000000000, 0x4008000000000000],
                [0x4014000000000000, 0x7FFA000000000000, 0x4000000000000000, 0xFFF0000000012345,
                 0x7FF0000000000000, 0x7FF0000000000000, 0, 0, 0xFFF0000000000000,
                 0x8000000000000000]),
}
EXACT = ("add", "sub", "rsub", "mul", "div", "sqrt", "neg", "lrelu", "cast")
LIBM = ("exp", "log", "tanh", "erf", "sin", "cos", "pow", "sigmoid", "gelu", "gelu_t", "gg",
        "gg_t")
FIXED = ("add", "sub", "mul", "div", "sqrt", "neg", "cast", "leaky_relu", "pow", "sigmoid", "exp",
         "log", "tanh", "erf", "sin", "cos", "gelu", "gelu_grad")


def _feeds(dtype: str) -> dict[str, np.ndarray]:
    u = np.dtype(f"u{np.dtype(dtype).itemsize}")
    a, b = BITS[dtype]
    return {"a": np.array(a, u).view(dtype), "b": np.array(b, u).view(dtype)}


def _graph(dtype: str) -> gradc.Graph:
    g = gradc.Graph(f"nan_{dtype}")
    a, b = g.input("a", dtype, (10,)), g.input("b", dtype, (10,))
    other = "float64" if dtype == "float32" else "float32"
    outs = {"add": ops.add(a, b), "sub": ops.sub(a, b), "rsub": ops.sub(b, a),
            "mul": ops.mul(a, b), "div": ops.div(a, b), "sqrt": ops.sqrt(a), "neg": ops.neg(a),
            "lrelu": ops.leaky_relu(a, 0.25), "cast": ops.cast(a, other),
            "exp": ops.exp(a), "log": ops.log(a), "tanh": ops.tanh(a), "erf": ops.erf(a),
            "sin": ops.sin(a), "cos": ops.cos(a), "pow": ops.pow(a, 3.0),
            "sigmoid": ops.sigmoid(a), "gelu": ops.gelu(a), "gelu_t": ops.gelu(a, "tanh"),
            "gg": ops.gelu_grad(a, b), "gg_t": ops.gelu_grad(a, b, "tanh")}
    for k, v in outs.items():
        g.output(v, k)
    return g


def _run(dtype: str, cache: str, target: str = "cuda-host") -> tuple[dict, dict, dict]:
    g, feeds = _graph(dtype), _feeds(dtype)
    ref = gradc.compile(g, target="reference", passes=None)(**feeds)
    c = gradc.compile(g, target="c", passes=None, openmp=False)(**feeds)
    got = compile_for(g, target, passes=None, cache_dir=cache)(**feeds)
    return ref, c, got


def _both_nan(dtype: str) -> np.ndarray:
    f = _feeds(dtype)
    return np.isnan(f["a"]) & np.isnan(f["b"])


def _some_nan(got: np.ndarray, want: np.ndarray, where: np.ndarray) -> tuple[np.ndarray, ...]:
    """``got`` and ``want`` with a NaN that both have at ``where`` replaced by one pattern."""
    same = where & np.isnan(got) & np.isnan(want)
    return np.where(same, np.nan, got), np.where(same, np.nan, want)


@pytest.mark.parametrize("dtype", ["float16", "float32", "float64"])
@pytest.mark.parametrize("target", cuda_targets())
def test_nan_results_are_x86s(target, dtype, tmp_path):
    ref, c, got = _run(dtype, str(tmp_path), target)
    both = _both_nan(dtype)
    for k in EXACT:
        if k == "cast" and dtype == "float16":
            continue  # float16 -> float32 moves bits (no arithmetic, no fixup)
        g, w = got[k], ref[k]
        if k in ("add", "mul"):
            g, w = _some_nan(g, w, both)
        assert_bits(g, w)
    for k in LIBM:  # NaN where the C target has NaN; numbers within §9.5's ulps (the GPU's
        assert_ulps(got[k], c[k], ulps(dtype))  # functions, or a C build with FMA, differ)


@HARNESS
def test_the_harness_catches_a_missing_fixup(monkeypatch, tmp_path):
    """With C's expressions, the GPU NaN mode of the harness changes every exact op's NaNs
    (where one operand is NaN, or the operation is invalid)."""
    ref, _, _ = _run("float32", str(tmp_path))
    for op in FIXED:
        monkeypatch.setitem(cuda_scalar.CUDA_SCALAR, op, SCALAR[op])
    _, _, got = _run("float32", str(tmp_path))
    for k in EXACT:
        u = np.dtype(f"u{ref[k].itemsize}")
        assert (got[k].view(u) != ref[k].view(u)).any(), k
