"""The C target's fast paths agree bit for bit with the reference target.

Kernels switch to other code above a size (streaming stores once a kernel moves GC_STREAM_MIN =
16 MiB or more, read + written) or for a geometry (2x2 stride-2 pooling windows that tile a
float32 plane, with SSE2).
The random tests of test_c_target.py rarely reach them, so these tests aim at each switch:
outputs just above and below the size, unaligned element counts (a tail after the last
streamed block), several outputs of different widths, odd window counts per row, ties, NaN
planes (redone by the NaN-aware pass), and fused prologues and epilogues.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import gradc
from helpers import assert_c_compiles_cleanly
from gradc import ops
from gradc.ir.fused import make_fused
from test_c_target import c_compile, check, data

STREAM_MIN = 16 << 20  # bytes moved by a kernel, GC_STREAM_MIN in backends/c/prelude.h
MIXED = 4 + 4 + 2 + 4 + 2 + 8  # bytes per element moved by _mixed_outputs_graph


@pytest.fixture(scope="module")
def cache(tmp_path_factory: pytest.TempPathFactory) -> str:
    return str(tmp_path_factory.mktemp("gradc-kernels"))


def _mixed_outputs_graph() -> gradc.Graph:
    """One fused elementwise group with float32, float16 and float64 outputs."""
    g = gradc.Graph("streamed")
    x = g.input("x", "float32", ("N",))
    dy = g.input("dy", "float32", ("N",))
    h = g.input("h", "float16", ("N",))
    b = gradc.Graph("ew")
    bx, bdy, bh = b.input("x", "float32", ("N",)), b.input("dy", "float32", ("N",)), \
        b.input("h", "float16", ("N",))
    r = ops.relu_grad(bx, bdy)
    b.output(ops.clip_grad(bx, r, -1.0, 2.0), "o32")
    b.output(ops.relu_grad(bh, ops.neg(bh)), "o16")
    b.output(ops.cast(r, "float64"), "o64")
    node = make_fused(g, [x, dy, h], b, "elementwise")
    for v, name in zip(node.outputs, ("o32", "o16", "o64")):
        g.output(v, name)
    return g


@pytest.mark.parametrize("n", [STREAM_MIN // MIXED + 37, STREAM_MIN // MIXED - 1, 1000])
def test_elementwise_streamed_and_plain(cache, n):
    ex = c_compile(_mixed_outputs_graph(), cache, "streamed-mixed")
    assert "gc_stream(" in ex.source
    rng = np.random.default_rng(n)
    feeds = {"x": data(rng, "float32", (n,)), "dy": data(rng, "float32", (n,)),
             "h": data(rng, "float16", (n,))}
    check(ex, feeds)


def test_elementwise_streams_into_unaligned_outputs_too(cache):
    """The C entry accepts any output pointer: a 4-byte aligned one takes the plain loop."""
    import ctypes
    big = STREAM_MIN // 12 + 37  # x, dy and dx: 12 bytes per element
    g = gradc.Graph("relu_grad_big")
    x, dy = g.input("x", "float32", (big,)), g.input("dy", "float32", (big,))
    g.output(ops.relu_grad(x, dy), "dx")
    ex = c_compile(g, cache)
    rng = np.random.default_rng(0)
    xv, dyv = data(rng, "float32", (big,)), data(rng, "float32", (big,))
    want = ex(x=xv, dy=dyv)["dx"]
    lib = ex._runner.lib  # the loaded library; call gradc_entry with an offset output
    raw = np.full(big + 1, 7, np.float32)
    out = raw[1:] if raw[1:].ctypes.data % 16 else raw[:-1]
    ptrs = (ctypes.c_void_p * 3)(xv.ctypes.data, dyv.ctypes.data, out.ctypes.data)
    assert lib.gradc_entry(np.zeros(1, np.int64).ctypes.data, ptrs, 2) == 0
    np.testing.assert_array_equal(out.view(np.uint32), want.view(np.uint32))


@pytest.mark.parametrize("offset", [0, 16, 32, 48])
def test_streamed_outputs_at_every_16_byte_offset_of_a_line(cache, offset):
    """gc_stream writes a block that starts a cache line with whole-line stores (64 or 32 bytes
    per store with AVX-512 or AVX) and any other block in 16-byte pieces: every byte lands, for
    outputs 0, 16, 32 or 48 bytes past a line boundary, and nothing is written outside."""
    import ctypes
    big = STREAM_MIN // 12 + 37
    g = gradc.Graph("relu_grad_big")
    x, dy = g.input("x", "float32", (big,)), g.input("dy", "float32", (big,))
    g.output(ops.relu_grad(x, dy), "dx")
    ex = c_compile(g, cache)
    rng = np.random.default_rng(offset)
    xv, dyv = data(rng, "float32", (big,)), data(rng, "float32", (big,))
    want = ex(x=xv, dy=dyv)["dx"]
    raw = np.full(big + 64, 7, np.float32)
    start = (-raw.ctypes.data % 64 + offset) // 4
    out = raw[start:start + big]
    assert out.ctypes.data % 64 == offset
    ptrs = (ctypes.c_void_p * 3)(xv.ctypes.data, dyv.ctypes.data, out.ctypes.data)
    assert ex._runner.lib.gradc_entry(np.zeros(1, np.int64).ctypes.data, ptrs, 2) == 0
    np.testing.assert_array_equal(out.view(np.uint32), want.view(np.uint32))
    assert (raw[:start] == 7).all() and (raw[start + big:] == 7).all()


def _pool_graph(spatial: tuple, epilogue: bool, prologue: bool) -> gradc.Graph:
    h, w = spatial
    g = gradc.Graph("pool2x2")
    x = g.input("x", "float32", ("N", "C", h, w))
    dy = g.input("dy", "float32", ("N", "C", h // 2, w // 2))
    if not (epilogue or prologue):
        g.output(ops.max_pooling_grad(x, dy, (2, 2), (2, 2)), "dx")
        return g
    b = gradc.Graph("mp")
    bx, bdy = b.input("x", "float32", x.type.shape), b.input("dy", "float32", dy.type.shape)
    d = ops.clip_grad(bdy, bdy, -1.0, 1.0) if prologue else bdy
    a = ops.max_pooling_grad(bx, d, (2, 2), (2, 2))
    b.output(ops.relu_grad(bx, a) if epilogue else a, "o")
    node = make_fused(g, [x, dy], b, "max_pooling_grad")
    g.output(node.outputs[0], "dx")
    return g


@settings(max_examples=10, deadline=None)
@given(seed=st.integers(0, 2 ** 32 - 1), hw=st.sampled_from([(2, 2), (4, 6), (6, 14), (8, 10)]),
       fuse=st.sampled_from([(False, False), (True, False), (False, True), (True, True)]))
def test_max_pooling_grad_2x2_tiles(cache, seed, hw, fuse):
    """Odd and even window counts per row, ties, NaN and inf candidates, fused ops."""
    ex = c_compile(_pool_graph(hw, *fuse), cache, f"pool2x2-{hw}-{fuse}")
    assert "_mm_cmpgt_ps" in ex.source
    rng = np.random.default_rng(seed)
    n, c = int(rng.integers(1, 3)), int(rng.integers(1, 4))
    x = data(rng, "float32", (n, c, *hw), special=seed % 3 == 0)
    if seed % 2:
        x = np.round(x / 2)  # ties in most windows
    check(ex, {"x": x, "dy": data(rng, "float32", (n, c, hw[0] // 2, hw[1] // 2))})


@pytest.mark.parametrize("width", [54, 58])
def test_max_pooling_grad_2x2_streamed_rows_of_any_even_width(cache, width):
    """W = 2 mod 4: every other dX row is 8 bytes off a 16-byte boundary (no streaming there)."""
    rng = np.random.default_rng(width)
    x = rng.standard_normal((2, 400, 54, width)).astype(np.float32)
    dy = rng.standard_normal((2, 400, 27, width // 2)).astype(np.float32)
    assert 2 * x.nbytes + dy.nbytes > STREAM_MIN
    check(c_compile(_pool_graph((54, width), False, False), cache), {"x": x, "dy": dy})


@pytest.mark.parametrize("fuse", [(False, False), (True, True)])
def test_max_pooling_grad_streamed(cache, fuse):
    """Outputs above the streaming size, with a NaN plane among them, for both pool paths."""
    rng = np.random.default_rng(7)
    x = np.round(rng.standard_normal((2, 400, 56, 56)).astype(np.float32))
    x[1, 17, 3, 5] = np.nan
    x[0, 3, 0, 0] = -np.inf
    dy = rng.standard_normal((2, 400, 28, 28)).astype(np.float32)
    assert 2 * x.nbytes + dy.nbytes > STREAM_MIN
    check(c_compile(_pool_graph((56, 56), *fuse), cache), {"x": x, "dy": dy})
    g = gradc.Graph("pool3x3")
    gx = g.input("x", "float32", ("N", 400, 56, 56))
    gdy = g.input("dy", "float32", ("N", 400, 28, 28))
    g.output(ops.max_pooling_grad(gx, gdy, (3, 3), (2, 2), (1, 1), (0, 0)), "dx")
    ex = c_compile(g, cache)
    assert "gc_stream(" in ex.source
    check(ex, {"x": x, "dy": dy})


@pytest.mark.parametrize("mode", ["nearest", "linear"])
def test_resample_grad_streamed(cache, mode):
    """A 2x upsample's gradient above the streaming size; an inf sends it to the general path."""
    g = gradc.Graph("rsg")
    dy = g.input("dy", "float32", ("N", 600, 56, 56))
    g.output(ops.resample_grad(dy, ("N", 600, 28, 28), (1, 1, 2, 2), mode), "dx")
    ex = c_compile(g, cache)
    assert "gc_stream(" in ex.source
    rng = np.random.default_rng(11)
    v = rng.standard_normal((2, 600, 56, 56)).astype(np.float32)
    assert v.nbytes * 5 // 4 > STREAM_MIN
    check(ex, {"dy": v})
    v[1, 500, 7, 9] = np.inf
    check(ex, {"dy": v})


@st.composite
def _pools_2d(draw):
    """Overlapping, gapped, padded and ceil-mode 2-D windows (the separable pass)."""
    spatial = [draw(st.integers(1, 9)) for _ in range(2)]
    w = [draw(st.integers(1, 4)) for _ in range(2)]
    s = [draw(st.integers(1, 3)) for _ in range(2)]
    sp = [draw(st.integers(0, min(2, w[a] - 1))) for a in range(2)]
    ep = [draw(st.integers(0, min(2, w[a] - 1))) for a in range(2)]
    d = [draw(st.integers(1, 2)) for _ in range(2)]
    ceil = [draw(st.integers(0, 1)) for _ in range(2)]
    return spatial, w, s, sp, ep, d, ceil


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 2 ** 32 - 1), p=_pools_2d(),
       dtype=st.sampled_from(["float32", "float32", "float16", "float64"]))
def test_max_pooling_grad_separable(cache, seed, p, dtype):
    """Row maxima then column maxima: ties, -inf and NaN planes (redone), empty windows."""
    from hypothesis import assume

    from gradc.errors import VerifyError
    from gradc.ir.ops.pooling import pool_size
    spatial, w, s, sp, ep, d, ceil = p
    out = [pool_size(n, *a) + c for n, *a, c in zip(spatial, w, s, sp, ep, d, ceil)]
    assume(all(o >= 1 for o in out))
    g = gradc.Graph("sep")
    x = g.input("x", dtype, ("N", 3, *spatial))
    dy = g.input("dy", dtype, ("N", 3, *out))
    try:
        g.output(ops.max_pooling_grad(x, dy, w, s, sp, ep, d), "dx")
    except VerifyError:
        assume(False)
    ex = c_compile(g, cache)
    tiled = all(a == 0 and b == 0 and dd == 1 and ss == ww and n % ww == 0 and o == n // ww
                for a, b, dd, ss, ww, n, o in zip(sp, ep, d, s, w, spatial, out))
    assert tiled or "-INFINITY" in ex.source
    rng = np.random.default_rng(seed)
    xv = data(rng, dtype, (2, 3, *spatial), special=seed % 3 == 0)
    if seed % 2:
        xv = np.round(xv / 2).astype(dtype)  # ties
    if seed % 5 == 0:
        xv[0, 1] = -np.inf  # a plane of -inf: every window ties at -inf
    # overlapping windows add inf + -inf: that NaN's sign and payload are unspecified (loose)
    check(ex, {"x": xv, "dy": data(rng, dtype, (2, 3, *out), special=seed % 4 == 0)},
          loose={"dx"})


def test_generated_c_compiles_without_warnings(tmp_path):
    """-Wall -Wextra -Werror on the programs of every kind of kernel (users compile it too)."""
    import sys
    from pathlib import Path

    from gradc.examples import build_example_model
    from test_c_target import FLOATS, INTS, elementwise_graph, fused_graph
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
    from kernel_cases import case_builders

    train = gradc.grad(gradc.from_onnx(build_example_model()))
    graphs = [fused_graph(d) for d in FLOATS] + [elementwise_graph(d) for d in FLOATS + INTS]
    graphs += [train, gradc.optimize(train).graph, _mixed_outputs_graph(),
               _pool_graph((6, 14), True, True)]
    graphs += [build().graph for build in case_builders(0).values()]
    for i, g in enumerate(graphs):
        assert_c_compiles_cleanly(g, tmp_path)


@pytest.mark.parametrize("opts", [{"cc": "cc -U__SSE2__"}, {"openmp": False}],
                         ids=["without-sse2", "without-openmp"])
def test_portable_fallbacks(cache, opts):
    """Without SSE2 (as on non-x86 machines) the plain loops run; without OpenMP one thread."""
    import os
    if "cc" in opts:
        opts = {"cc": os.environ.get("CC", "cc") + " -U__SSE2__"}
    rng = np.random.default_rng(5)
    ex = c_compile(_mixed_outputs_graph(), cache, **opts)
    n = STREAM_MIN // MIXED + 37
    check(ex, {"x": data(rng, "float32", (n,)), "dy": data(rng, "float32", (n,)),
               "h": data(rng, "float16", (n,))})
    x = np.round(rng.standard_normal((2, 400, 56, 56)).astype(np.float32))
    x[1, 5, 7, 7] = np.nan
    dy = rng.standard_normal((2, 400, 28, 28)).astype(np.float32)
    for fuse in ((False, False), (True, True)):
        check(c_compile(_pool_graph((56, 56), *fuse), cache, **opts), {"x": x, "dy": dy})


@pytest.mark.parametrize("to", ["float64", "float16", "int8"])
def test_streamed_epilogue_that_changes_the_dtype(to):
    """A cast after the gradient is fused into its epilogue (default passes): the streamed
    block holds the cast's type, not the anchor's, for each anchored kernel."""
    rng = np.random.default_rng(3)
    g = gradc.Graph("cast_after")
    x = g.input("x", "float32", ("N", 360, 56, 56))
    dy2 = g.input("dy2", "float32", ("N", 360, 28, 28))
    dy3 = g.input("dy3", "float32", ("N", 360, 28, 28))
    g.output(ops.cast(ops.max_pooling_grad(x, dy2, (2, 2), (2, 2)), to), "tiled")
    g.output(ops.cast(ops.max_pooling_grad(x, dy3, (3, 3), (2, 2), (1, 1), (0, 0)), to), "sep")
    up = g.input("up", "float32", ("N", 360, 56, 56))
    g.output(ops.cast(ops.resample_grad(up, ("N", 360, 28, 28), (1, 1, 2, 2), "linear"), to),
             "rs")
    ex = gradc.compile(g, target="c")
    assert ex.source.count("gc_stream(") >= 3 and "fused" in ex.source
    feeds = {"x": rng.standard_normal((4, 360, 56, 56)).astype(np.float32) * 50,
             "dy2": rng.standard_normal((4, 360, 28, 28)).astype(np.float32) * 50,
             "dy3": rng.standard_normal((4, 360, 28, 28)).astype(np.float32) * 50,
             "up": rng.standard_normal((4, 360, 56, 56)).astype(np.float32) * 50}
    assert feeds["x"].nbytes > STREAM_MIN and feeds["up"].nbytes > STREAM_MIN
    check(ex, feeds)
