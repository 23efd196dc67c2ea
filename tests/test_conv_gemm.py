"""The C target's convolution through packed gemm (backends/c/conv_gemm.py): still bit-identical.

The gemm path serves float32/float64 groups of at least ``MIN_ROWS`` output rows. It must give
the reference's bits on random fields (groups, strides, dilations, padding, both directions and
modes, 1-3 spatial axes), with the im2col buffer split into many chunks, on a symbolic batch,
and fall back to the direct loops when a factor that meets padding is NaN or
infinite (0 * inf would be NaN where the reference skips the term).
"""

from __future__ import annotations

import re

import numpy as np
import pytest

import gradc
from gradc import ops
from gradc.backends.c import conv_classes, conv_gemm
from helpers import assert_bits, assert_c_compiles_cleanly

import convolution_oracle as oracle

F32, F64 = np.float32, np.float64


@pytest.fixture(autouse=True)
def _no_tap_classes(monkeypatch):
    """These tests hold conv_gemm's paths; the tap classes that take small padded planes
    instead (conv_classes.py) have their own tests."""
    monkeypatch.setattr(conv_classes, "worth", lambda *a, **kw: False)


def _case(rng: np.random.Generator, dtype, max_nd: int = 3, unit: bool = False):
    nd = int(rng.integers(1, max_nd + 1)) if max_nd < 3 or not unit else 2
    g = int(rng.integers(1, 3))
    cig, cog = (int(v) for v in rng.integers(4, 11, 2))
    fwd = bool(rng.integers(2))
    k, s, d = ([int(v) for v in rng.integers(1, hi, nd)] for hi in (4, 3, 3))
    if unit:  # unit strides: the implicit path
        s = [1] * nd
    sp, ep = ([int(v) for v in rng.integers(0, 3, nd)] for _ in range(2))
    spatial = [int(v) for v in rng.integers(2, 9 if nd < 3 else 5, nd)]
    if fwd:
        op = [0] * nd
        spatial = [max(n, (k[i] - 1) * d[i] + 1 - sp[i] - ep[i]) for i, n in enumerate(spatial)]
        w = rng.standard_normal([g * cog, cig] + k)
    else:
        op = [int(rng.integers(0, max(s[i], d[i]))) for i in range(nd)]
        w = rng.standard_normal([g * cig, cog] + k)
        for i in range(nd):
            while oracle.conv_out_size(spatial[i], k[i], s[i], d[i], sp[i], ep[i], op[i],
                                       "backward") < 1:
                sp[i], ep[i], spatial[i] = max(0, sp[i] - 1), max(0, ep[i] - 1), spatial[i] + 1
    f = dict(mode=("cross_correlation", "convolution")[int(rng.integers(2))],
             direction="forward" if fwd else "backward", strides=s, dilations=d,
             start_padding=sp, end_padding=ep, output_padding=op, group_count=g)
    x = rng.standard_normal([int(rng.integers(1, 4)), g * cig] + spatial)
    b = rng.standard_normal([1, g * cog] + [1] * nd) if rng.integers(2) else None
    y = oracle.convolution(x, w, b, f["mode"], f["direction"], s, d, sp, ep, op, g)
    dy = rng.standard_normal(y.shape)
    return [a if a is None else a.astype(dtype) for a in (x, w, b, dy)], f


def _orient(monkeypatch, narrow):
    """Every product of fewer than ``narrow`` output channels transposed, on every path (1:
    none, 1000: all)."""
    monkeypatch.setattr(conv_gemm, "NARROW", narrow)
    monkeypatch.setattr(conv_gemm, "NARROW_PADDED", narrow)
    monkeypatch.setattr(conv_gemm, "NARROW_MIN_K", 0)


def _graph(x, w, b, dy, f, batch):
    g = gradc.Graph("cg")
    xv = g.input("x", x.dtype.name, (batch,) + x.shape[1:])
    wv = g.input("w", w.dtype.name, w.shape)
    bv = None if b is None else g.input("b", b.dtype.name, b.shape)
    dyv = g.input("dy", dy.dtype.name, (batch,) + dy.shape[1:])
    g.output(ops.convolution(xv, wv, bv, **f), "y")
    g.output(ops.convolution_filter_grad(xv, dyv, w.shape, **f), "dw")
    return g


def _check(g, feeds, gemm=True):
    from gradc.backends.c.emit import generate
    source = generate(g).source
    if gemm:
        assert re.search(r"gc_gemm_f(32|64)\(", source)  # the gemm path is taken
    want = gradc.compile(g, target="reference", passes=None)(**feeds)
    got = gradc.compile(g, target="c", passes=None)(**feeds)
    for name in want:
        assert_bits(got[name], want[name], nan_payload=False)
    return got


@pytest.mark.parametrize("dtype", [F32, F64])
@pytest.mark.parametrize("chunk", [conv_gemm.CHUNK, 64])
@pytest.mark.parametrize("narrow", [1, 1000])
@pytest.mark.parametrize("implicit", [False, True])
def test_gemm_path_is_bit_identical_to_the_reference(dtype, chunk, narrow, implicit,
                                                     monkeypatch):
    """Random fields; chunk 64 splits the columns into one row of the last axis per chunk;
    narrow 1 runs every product as ``W @ B``, 1000 every one transposed (``B^T @ W^T``);
    implicit: unit strides on two axes, read through zero borders (no im2col), else never."""
    monkeypatch.setattr(conv_gemm, "CHUNK", chunk)
    _orient(monkeypatch, narrow)
    if implicit:
        monkeypatch.setattr(conv_gemm, "WASTE", 1e9)
        monkeypatch.setattr(conv_gemm, "WASTE_BACKWARD", 1e9)
        monkeypatch.setattr(conv_gemm, "FG_PLANE", 0)
    else:
        monkeypatch.setattr(conv_gemm, "implicit_ok", lambda *a, **kw: False)
    rng = np.random.default_rng((7 if dtype is F32 else 8) + 10 * implicit)
    for i in range(6):
        (x, w, b, dy), f = _case(rng, dtype, unit=implicit)
        feeds = {"x": x, "w": w, "dy": dy} | ({} if b is None else {"b": b})
        _check(_graph(x, w, b, dy, f, "N" if i % 2 else x.shape[0]), feeds)


@pytest.mark.parametrize("narrow", [1, 1000])
@pytest.mark.parametrize("implicit", [False, True])
def test_wide_layer_with_many_panels_and_row_chunks(narrow, implicit, monkeypatch):
    """More than one packed row chunk (GC_MC = 256 rows), partial register tiles on both
    sides, k longer than a packed block (GC_KC = 128), and long filter-gradient sums; both
    orientations, with and without im2col."""
    _orient(monkeypatch, narrow)
    if not implicit:
        monkeypatch.setattr(conv_gemm, "implicit_ok", lambda *a, **kw: False)
    rng = np.random.default_rng(3)
    x = rng.standard_normal((2, 40, 9, 7)).astype(F32)
    w = rng.standard_normal((263, 40, 3, 3)).astype(F32)
    f = dict(start_padding=(1, 1), end_padding=(1, 1))
    monkeypatch.setattr(conv_gemm, "WASTE", 1e9)
    monkeypatch.setattr(conv_gemm, "WASTE_BACKWARD", 1e9)
    dy = rng.standard_normal((2, 263, 9, 7)).astype(F32)  # 3x3, padding 1: the input's plane
    _check(_graph(x, w, None, dy, f, 2), {"x": x, "w": w, "dy": dy})


@pytest.mark.parametrize("direction", ["forward", "backward"])
def test_non_finite_factor_falls_back_to_skipping_padding(direction):
    """An inf filter tap that meets only padding, and an inf cotangent where the filter
    gradient's tap reads padding: the reference skips those terms, so no NaN appears."""
    x = np.ones((1, 4, 3, 3), F32)
    w = np.ones((4, 4, 3, 3), F32)
    w[:, :, 0, 0] = np.inf  # forward: meets padding at the first output row and column
    f = dict(direction=direction, start_padding=(1, 1), end_padding=(1, 1))
    y = oracle.convolution(x.astype(F64), w.astype(F64), None, "cross_correlation", direction,
                           [1, 1], [1, 1], [1, 1], [1, 1], [0, 0], 1)
    dy = np.ones(y.shape, F32)
    dy[0, :, 0, 0] = np.inf
    got = _check(_graph(x, w, None, dy, f, 1), {"x": x, "w": w, "dy": dy})
    assert np.isfinite(got["y"]).any() and np.isfinite(got["dw"]).any()


def test_non_finite_factor_found_by_the_threads_of_a_large_check(monkeypatch):
    """The finite check of a large filter runs on the kernel's threads (``FINITE_PAR_MIN``):
    an inf in the first block, among many finite ones, still sends the convolution down the
    exact path (checked with the threshold at 1 and at its value: a 2**18-element filter)."""
    rng = np.random.default_rng(4)
    x = rng.standard_normal((1, 512, 2, 2)).astype(F32)
    w = rng.standard_normal((64, 512, 3, 3)).astype(F32)
    assert w.size >= conv_gemm.FINITE_PAR_MIN
    w[0, 0, 0, 0] = np.inf  # first block: a thread that overwrote the flag would lose it
    f = dict(start_padding=(1, 1), end_padding=(1, 1))
    dy = np.ones((1, 64, 2, 2), F32)
    for threshold in (1, conv_gemm.FINITE_PAR_MIN):
        monkeypatch.setattr(conv_gemm, "FINITE_PAR_MIN", threshold)
        got = _check(_graph(x, w, None, dy, f, 1), {"x": x, "w": w, "dy": dy})
        assert np.isfinite(got["y"][0, 0, 0, 0])  # the gemm path would give 0 * inf = NaN


def test_gemm_path_compiles_without_warnings(tmp_path):
    for i, direction in enumerate(["forward", "backward"]):
        g = gradc.Graph(f"wg{i}")
        x = g.input("x", "float32", ("N", 8, 6, 5))
        w = g.input("w", "float32", (8, 4, 2, 3))
        b = g.input("b", "float32", (1, 8, 1, 1)) if direction == "forward" else None
        g.output(ops.convolution(x, w, b, "convolution", direction, (2, 1), (1, 2), (1, 0),
                                 (0, 1), (1, 0) if direction == "backward" else None, 2), "y")
        assert_c_compiles_cleanly(gradc.grad(g), tmp_path)
    g = gradc.Graph("wg_depthwise")
    x = g.input("x", "float32", ("N", 6, 9, 9))
    w = g.input("w", "float32", (6, 1, 3, 3))
    g.output(ops.convolution(x, w, None, strides=(2, 1), start_padding=(1, 1),
                             end_padding=(1, 1), group_count=6), "y")
    assert_c_compiles_cleanly(gradc.grad(g), tmp_path)


@pytest.mark.parametrize("dtype", [F32, F64])
def test_depthwise_filter_gradient_keeps_each_taps_order(dtype):
    """Depthwise filter gradients (one channel per group, multiplier 1 or 2; strides,
    dilations, padding, both directions and modes): every tap's sum in one pass, still the
    reference's bits."""
    rng = np.random.default_rng(21 if dtype is F32 else 22)
    for i in range(8):
        c, mult = int(rng.integers(2, 6)), int(rng.integers(1, 3))
        fwd = bool(i % 2)
        k, s, d = ([int(v) for v in rng.integers(1, hi, 2)] for hi in (4, 3, 3))
        sp, ep = ([int(v) for v in rng.integers(0, 3, 2)] for _ in range(2))
        spatial = [int(v) for v in rng.integers(3, 9, 2)]
        spatial = [max(n, (k[j] - 1) * d[j] + 1) for j, n in enumerate(spatial)]
        if fwd:
            w = rng.standard_normal([c * mult, 1] + k)
            op = [0, 0]
        else:
            w = rng.standard_normal([c, mult] + k)
            op = [int(rng.integers(0, max(s[j], d[j]))) for j in range(2)]
        f = dict(mode=("cross_correlation", "convolution")[i % 4 // 2],
                 direction="forward" if fwd else "backward", strides=s, dilations=d,
                 start_padding=sp, end_padding=ep, output_padding=op, group_count=c)
        x = rng.standard_normal([2, c] + spatial)
        y = oracle.convolution(x, w, None, f["mode"], f["direction"], s, d, sp, ep, op, c)
        dy = rng.standard_normal(y.shape)
        x, w, dy = (v.astype(dtype) for v in (x, w, dy))
        _check(_graph(x, w, None, dy, f, "N"), {"x": x, "w": w, "dy": dy}, gemm=False)


@pytest.mark.parametrize("narrow", [1, 1000])
@pytest.mark.parametrize("direction", ["forward", "backward"])
def test_pointwise_convolution_reads_its_input_in_place(narrow, direction, monkeypatch):
    """1x1 filters without padding (mobilenet's pointwise layers): the implicit product reads
    the input where it lies (no bordered copy), rows through a table of (image, position)."""
    _orient(monkeypatch, narrow)
    rng = np.random.default_rng(31)
    x = rng.standard_normal((3, 80, 5, 7)).astype(F32)  # 40 channels per group: implicit
    w = rng.standard_normal((80, 18, 1, 1) if direction == "backward" else (36, 40, 1, 1))
    w = w.astype(F32)
    f = dict(direction=direction, group_count=2)
    y = oracle.convolution(x, w, None, "cross_correlation", direction, [1, 1], [1, 1], [0, 0],
                           [0, 0], [0, 0], 2)
    dy = rng.standard_normal(y.shape).astype(F32)
    _check(_graph(x, w, None, dy, f, "N"), {"x": x, "w": w, "dy": dy})


def test_padded_axis_shares_one_border_between_lines():
    """Shared borders: a line starts at the tensor's first element and ends with the zeros
    that the next line's reads before its start land on; two borders where that is no
    shorter, or where no read falls before the start."""
    assert conv_gemm._axis(7, 7, -1, 1) == (0, 8)  # 3x3, pad 1: 8 positions, not 9
    assert conv_gemm._axis(64, 64, -1, 1) == (0, 65)
    assert conv_gemm._axis(7, 7, -3, 3) == (0, 10)  # 7x7, pad 3
    assert conv_gemm._axis(7, 5, 0, 2) == (0, 7)  # no padding: nothing before the start
    assert conv_gemm._axis(9, 5, -1, 1) == (-1, 7)  # the tensor runs past the reads
    assert conv_gemm._axis(5, 4, -1, 1) == (-1, 6)  # shared would take max(6, 5): no shorter
    # padding wider than the filter reach (3x3, pad 3 on 2 rows: 6 outputs, every shift < 0):
    # the line holds the 6 outputs computed on it, not only the 2 + 3 the reads need
    assert conv_gemm._axis(2, 6, -3, -1) == (0, 6)


@pytest.mark.parametrize("hw", [2, 3, 4])
def test_implicit_path_with_padding_wider_than_the_filter(hw):
    """Every output row is computed and stored when the padding exceeds the filter's reach
    (the padded line used to end at the last read, leaving the last output rows unwritten)."""
    rng = np.random.default_rng(hw)
    x = rng.standard_normal((2, 32, hw, hw)).astype(F32)
    w = rng.standard_normal((32, 32, 3, 3)).astype(F32)
    g = gradc.Graph("wide_pad")
    xv, wv = g.input("x", "float32", x.shape), g.input("w", "float32", w.shape)
    g.output(ops.convolution(xv, wv, start_padding=(3, 3), end_padding=(3, 3)), "y")
    from gradc.backends.c.emit import generate
    assert "SHIFT[" in generate(g).source  # the implicit path
    _check(g, {"x": x, "w": w}, gemm=True)


@pytest.mark.parametrize("direction", ["forward", "backward"])
@pytest.mark.parametrize("batch", [3, "N"])
def test_shared_borders_read_the_zeros_of_the_previous_row_image_and_channel(direction, batch,
                                                                             monkeypatch):
    """Dilated rows with three-row borders and one-column borders, shared: reads above an image
    land in the previous image's zero rows (or the channel's gap), reads left of a row in the
    previous row's zero column. Both directions, the filter gradient too, several images and
    channels, one implicit product per group."""
    monkeypatch.setattr(conv_gemm, "WASTE", 1e9)
    monkeypatch.setattr(conv_gemm, "WASTE_BACKWARD", 1e9)
    monkeypatch.setattr(conv_gemm, "FG_PLANE", 0)
    rng = np.random.default_rng(41)
    x = rng.standard_normal((3, 12, 7, 6)).astype(F32)
    cw = (12, 6) if direction == "forward" else (12, 10)
    w = rng.standard_normal(cw + (3, 3)).astype(F32)
    f = dict(direction=direction, dilations=(3, 1), start_padding=(3, 1), end_padding=(2, 1),
             group_count=2)
    y = oracle.convolution(x, w, None, "cross_correlation", direction, [1, 1], [3, 1], [3, 1],
                           [2, 1], [0, 0], 2)
    assert y.shape[2:] == ((6, 6) if direction == "forward" else (8, 6))
    dy = rng.standard_normal(y.shape).astype(F32)
    g = _graph(x, w, None, dy, f, batch)
    from gradc.backends.c.emit import generate
    source = generate(g).source
    # the padded planes, forward: 10 rows (the 7 of x and 3 zeros, where reads reach 6 + 3; not
    # 6 + 6), 7 columns (not 8); backward, 11 rows (8 + 3, not 8 + 6); the lowest read, 3 rows
    # and a column before the plane, lies 22 elements back: past a gap of SKEW
    shared, full = (70, 96) if direction == "forward" else (77, 112)
    assert f"NB * {shared}" in source and f"NB * {full}" not in source
    _check(g, {"x": x, "w": w, "dy": dy})


@pytest.mark.parametrize("path", ["explicit", "implicit", "transposed", "direct", "nonfinite"])
@pytest.mark.parametrize("dtype", [F32, F64])
def test_relu_runs_as_the_convolutions_epilogue(path, dtype, monkeypatch):
    """conv (+ bias) -> relu: the relu kernel is gone, the convolution stores ``v > 0 ? v :
    +0`` on every path (im2col, implicit, transposed implicit, the direct loops of thin groups
    and of a non-finite filter, whose NaN sums become +0), bit for bit; a relu whose operand
    is read elsewhere too stays a kernel."""
    if path == "explicit":
        monkeypatch.setattr(conv_gemm, "implicit_ok", lambda *a, **kw: False)
    if path == "implicit":
        _orient(monkeypatch, 1)
    if path == "transposed":
        _orient(monkeypatch, 1000)
    rng = np.random.default_rng(51)
    co, groups = {"direct": (4, 4), "transposed": (16, 1)}.get(path, (40, 1))
    x = rng.standard_normal((2, 8, 9, 7)).astype(dtype)
    w = rng.standard_normal((co, 8 // groups, 3, 3)).astype(dtype)
    b = rng.standard_normal((1, co, 1, 1)).astype(dtype)
    if path == "nonfinite":
        w[0, 0, 0, 0] = np.inf
    x[0, 0, 0, :3] = [-0.0, np.nan, 0.0]
    g = gradc.Graph("cr")
    xv = g.input("x", x.dtype.name, x.shape)
    wv = g.input("w", w.dtype.name, w.shape)
    bv = g.input("b", b.dtype.name, b.shape)
    f = dict(start_padding=(1, 1), end_padding=(1, 1), group_count=groups)
    g.output(ops.relu(ops.convolution(xv, wv, bv, **f)), "y")
    y2 = ops.convolution(xv, wv, None, **f)  # read by the relu and by an output: no epilogue
    g.output(ops.relu(y2), "r2")
    g.output(y2, "y2")
    from gradc.backends.c.emit import generate
    prog = generate(g)
    assert sum("+ relu" in lab for lab in prog.kernels) == 1
    assert sum(lab.startswith("relu") for lab in prog.kernels) == 1
    feeds = {"x": x, "w": w, "b": b}
    want = gradc.compile(g, target="reference", passes=None)(**feeds)
    got = gradc.compile(g, target="c", passes=None)(**feeds)
    for name in want:
        assert_bits(got[name], want[name], nan_payload=False)
    if path == "nonfinite":
        assert np.isnan(want["y2"]).any() and not np.isnan(want["y"]).any()
