"""Golden CUDA: the cuda target's source for a few graphs, compared as text.

The graphs are the C golden test's (one per kind of kernel: an element-wise group, a broadcast,
the three anchored gradients with a prologue and an epilogue, resampling), with the batch bound
to 2 (the CUDA program is generated for static shapes), optimized with the default passes and
lowered to CUDA (neither NVRTC nor a GPU is needed). The source must equal
``tests/golden/cuda/<case>.cu``, with the prelude replaced by one marker line; a mismatch prints
a unified diff, and ``GRADC_UPDATE_GOLDEN=1`` rewrites the files.
"""

from __future__ import annotations

import difflib
import os
from pathlib import Path

import pytest

import gradc
from gradc.backends.c.prelude import PRELUDE as C_PRELUDE
from gradc.backends.cuda import prelude
from gradc.backends.cuda.emit import generate
from gradc.ir.core import parameters_as_inputs

from test_c_golden import CASES

GOLDEN = Path(__file__).parent / "golden" / "cuda"
UPDATE = os.environ.get("GRADC_UPDATE_GOLDEN") == "1"
PRELUDE_MARK = "/* ... prelude.cuh and the C prelude's helpers (tests/test_cuda_golden.py) ... */\n"
NAMES = ("elementwise", "elementwise_broadcast", "max_pooling_grad_fused", "slice_grad_fused",
         "resample_grad_fused", "resample_linear")


def cuda_source(name: str) -> str:
    """The CUDA source of a case with its symbols bound (N=2, M=5)."""
    g = parameters_as_inputs(gradc.optimize(CASES[name]()).graph)
    return generate(g, {"N": 2, "M": 5}).source


@pytest.mark.parametrize("name", NAMES)
def test_golden_cuda(name):
    full = cuda_source(name)
    assert full.count(prelude.PRELUDE) == 1, "the program must copy the prelude once"
    src = full.replace(prelude.PRELUDE, PRELUDE_MARK)
    path = GOLDEN / f"{name}.cu"
    if UPDATE:
        GOLDEN.mkdir(parents=True, exist_ok=True)
        path.write_text(src)
    want = path.read_text()
    if src != want:
        diff = "".join(difflib.unified_diff(want.splitlines(keepends=True),
                                            src.splitlines(keepends=True),
                                            f"tests/golden/cuda/{name}.cu", "generated"))
        pytest.fail(f"generated CUDA changed (GRADC_UPDATE_GOLDEN=1 updates the file):\n{diff}",
                    pytrace=False)


def _gemm() -> gradc.Graph:
    g = gradc.Graph("gemm")
    a, b = g.input("a", "float32", (3, 40, 24)), g.input("b", "float32", (1, 24, 56))
    g.output(gradc.ops.gemm(a, b, g.input("c", "float32", (3, 1, 56)), alpha=0.5), "y")
    return g


def _convolution() -> gradc.Graph:
    g = gradc.Graph("convolution")
    x, w = g.input("x", "float16", (2, 8, 9, 9)), g.input("w", "float16", (16, 8, 3, 3))
    f = dict(strides=(2, 2), start_padding=(1, 1), end_padding=(1, 1))
    y = gradc.ops.convolution(x, w, g.input("b", "float16", (1, 16, 1, 1)), **f)
    g.output(y, "y")
    g.output(gradc.ops.convolution_filter_grad(x, g.input("dy", "float16", y.type.shape),
                                               (16, 8, 3, 3), **f), "dw")
    return g


PRODUCTS = {"gemm": _gemm, "convolution": _convolution}


@pytest.mark.parametrize("name", sorted(PRODUCTS))
def test_golden_cuda_products(name):
    """gemm (batched, broadcast, c) and a float16 convolution with its filter gradient: the
    tiled kernels' text, tile choices included."""
    src = generate(PRODUCTS[name](), {}).source.replace(prelude.PRELUDE, PRELUDE_MARK)
    path = GOLDEN / f"{name}.cu"
    if UPDATE:
        path.write_text(src)
    want = path.read_text()
    if src != want:
        diff = "".join(difflib.unified_diff(want.splitlines(keepends=True),
                                            src.splitlines(keepends=True),
                                            f"tests/golden/cuda/{name}.cu", "generated"))
        pytest.fail(f"generated CUDA changed (GRADC_UPDATE_GOLDEN=1 updates the file):\n{diff}",
                    pytrace=False)


def test_the_prelude_copies_the_c_helpers_verbatim():
    """The element-wise expressions call the C prelude's helpers; the CUDA prelude carries
    exactly that text (from its first helper to the comment after the last one)."""
    helpers = prelude.numeric_helpers()
    assert helpers in C_PRELUDE and helpers in prelude.PRELUDE
    for name in ("gc_h2f", "gc_f2h", "gc_h2d", "gc_d2h", "gc_cvt32", "gc_cvt64", "gc_f2u32",
                 "gc_f2u64", "gc_wrap_i8", "gc_wrap_i64", "gc_bits2f"):
        assert f" {name}(" in helpers, name
    with pytest.raises(RuntimeError, match="moved"):
        prelude.numeric_helpers("int x;")


def test_no_user_name_reaches_the_source():
    """Input and output names (here hostile ones) appear nowhere in the CUDA text."""
    g = gradc.Graph("evil*/ #include")
    x = g.input("x */ gcpwned(1); /*", "float32", (4,))
    g.output(gradc.ops.relu(x), "y\n#define gcpwned2")
    src = generate(g, {}).source
    assert "gcpwned" not in src and "evil" not in src


def test_huge_axes_are_refused_before_any_table_is_built():
    """A pooling or resampling axis whose geometry tables would be huge (a legal type of
    terabytes), or a backward convolution of a huge stride, is refused in milliseconds, not
    generated."""
    import time

    from gradc.errors import UnsupportedError

    for fn in (lambda x: gradc.ops.max_pooling(x, (1, 2), (1, 2)),
               lambda x: gradc.ops.resample(x, (1, 1, 1, 0.5), "linear")):
        g = gradc.Graph("t")
        g.output(fn(g.input("x", "float32", (1, 1, 1, 2 ** 40))), "y")
        start = time.perf_counter()
        with pytest.raises(UnsupportedError, match="baked into its source"):
            generate(g, {})
        assert time.perf_counter() - start < 1.0
    # a strided backward convolution's phases (stride x taps per axis): a stride of 2**30 took
    # the fuzzer's whole timeout building a list of every phase (seed 6262)
    g = gradc.Graph("t")
    x, w = g.input("x", "float32", (1, 1, 2, 2)), g.input("w", "float32", (1, 1, 2, 2))
    g.output(gradc.ops.convolution(x, w, direction="backward", strides=(2 ** 30, 3)), "y")
    start = time.perf_counter()
    with pytest.raises(UnsupportedError, match="stride phases times taps"):
        generate(g, {})
    assert time.perf_counter() - start < 1.0
