"""The C target's convolution by tap classes (backends/c/conv_classes.py): bit-identical.

Small padded planes: the output positions are split by the taps that land inside the input and
each class is one product over its own taps, with no product of padding. It must give the
reference's bits on random fields (forced onto every convolution the classes can take: forward
at any stride, backward at unit strides), for non-finite factors without any check (no padding
product, so nothing to fall back from), on positions that no tap reaches, through the relu
epilogue, and it must be chosen for resnet18's small layers only.
"""

from __future__ import annotations

import numpy as np
import pytest

import gradc
from gradc import ops
from gradc.backends.c import conv_classes
from gradc.backends.c.emit import generate
from helpers import assert_bits

from test_conv_gemm import _case, _graph

F32, F64 = np.float32, np.float64


def _forced(monkeypatch):
    monkeypatch.setattr(conv_classes, "worth", lambda *a, **kw: True)


def _bits(g, feeds):
    want = gradc.compile(g, target="reference", passes=None)(**feeds)
    got = gradc.compile(g, target="c", passes=None)(**feeds)
    for name in want:
        assert_bits(got[name], want[name], nan_payload=False)


def _conv(x, w, b=None, relu=False, **f):
    g = gradc.Graph("cls")
    xv = g.input("x", x.dtype.name, x.shape)
    wv = g.input("w", w.dtype.name, w.shape)
    bv = None if b is None else g.input("b", b.dtype.name, b.shape)
    y = ops.convolution(xv, wv, bv, **f)
    g.output(ops.relu(y) if relu else y, "y")
    return g, {"x": x, "w": w} | ({} if b is None else {"b": b})


def test_classes_of_a_3x3_filter_on_2x2_and_4x4_planes():
    """2x2, pad 1: four classes of one position, each reading 4 of the 9 taps; 4x4: nine
    classes (corners, edges, the 2x2 interior with all 9 taps). Taps in the reference's order:
    row-major forward, reversed backward; offsets relative to each position's lowest read."""
    one = [(1, 1, 1)] * 2
    cls = conv_classes.plan([2, 2], [2, 2], [3, 3], one, True)
    assert [len(c.positions) for c in cls] == [1, 1, 1, 1]
    assert [tn for tn, _ in cls[0].taps] == [4, 5, 7, 8]  # output (0, 0): the lower right taps
    assert cls[0].positions == [(0, 0)] and [r for _, r in cls[0].taps] == [0, 1, 2, 3]
    assert [tn for tn, _ in cls[3].taps] == [0, 1, 3, 4]  # output (1, 1): the upper left
    back = conv_classes.plan([2, 2], [2, 2], [3, 3], one, False)
    # backward, output (0, 0) receives tap k from input 1 - k: the upper left taps, reversed
    assert [tn for tn, _ in back[0].taps] == [4, 3, 1, 0]
    four = conv_classes.plan([4, 4], [4, 4], [3, 3], one, True)
    assert len(four) == 9 and [len(c.positions) for c in four] == [1, 2, 1, 2, 4, 2, 1, 2, 1]
    assert len(four[4].taps) == 9 and four[4].positions[0] == (0, 5)
    assert conv_classes.plan([4, 4], [2, 2], [3, 3], [(2, 1, 1)] * 2, False) is None  # strided
    assert conv_classes.plan([9, 9], [9, 9], [7, 7], [(1, 1, 3)] * 2, True) is None  # 49 classes


def test_chosen_where_padding_products_are_a_quarter_or_more():
    """resnet18's 3x3 layers at 2x2 (5/9 of an im2col product is padding) and 4x4 (31%), a
    3x3 plane (40%); 7x7 planes (18%) and 8x8 (16%) with 128 filter rows or more; not larger
    planes, unpadded layers or narrow filters."""
    def worth(hw, cog, pad=1, s=1):
        out = (hw + 2 * pad - 3) // s + 1
        cls = conv_classes.plan([hw, hw], [out, out], [3, 3], [(s, 1, pad)] * 2, True)
        return conv_classes.worth(cls, [hw, hw], [out, out], [3, 3], cog)
    assert worth(2, 512) and worth(4, 256) and worth(3, 256) and worth(4, 512, s=2)
    assert worth(2, 64) and worth(4, 32)
    # 7x7 and 8x8 planes (16-18%): with WIDE filter rows only
    assert worth(7, 256) and worth(8, 128) and not worth(7, 64) and not worth(8, 32)
    assert not worth(4, 256, pad=0) and not worth(9, 256) and not worth(16, 256)
    assert not worth(2, 16)  # fewer than NARROW filter rows


@pytest.mark.parametrize("dtype", [F32, F64])
def test_forced_onto_random_fields_is_bit_identical(dtype, monkeypatch):
    """Every convolution that has classes takes them: random groups, strides, dilations,
    paddings, both modes and directions, 1-3 spatial axes, bias, symbolic batch."""
    _forced(monkeypatch)
    rng = np.random.default_rng(61 if dtype is F32 else 62)
    taken = 0
    for i in range(10):
        (x, w, b, dy), f = _case(rng, dtype)
        g = _graph(x, w, b, dy, f, "N" if i % 2 else x.shape[0])
        taken += "static const int64_t REL[" in generate(g).source
        _bits(g, {"x": x, "w": w, "dy": dy} | ({} if b is None else {"b": b}))
    assert taken >= 4


@pytest.mark.parametrize("direction", ["forward", "backward"])
@pytest.mark.parametrize("dtype", [F32, F64])
def test_resnet_sized_layers_with_half_and_full_width_columns(direction, dtype, monkeypatch):
    """2x2 planes at batch 8 (float32: 8 columns a class, the half-width gemm; float64: 4
    lanes, so full width), batch 3 and 12 (partial vectors), 4x4 planes (columns up to 48),
    more filter rows than one block, bias and mode convolution."""
    rng = np.random.default_rng(63)
    for n, hw, co in [(8, 2, 72), (3, 2, 40), (12, 4, 36)]:
        x = rng.standard_normal((n, 40, hw, hw)).astype(dtype)
        shape = (co, 40, 3, 3) if direction == "forward" else (40, co, 3, 3)
        w = rng.standard_normal(shape).astype(dtype)
        b = rng.standard_normal((1, co, 1, 1)).astype(dtype)
        g, feeds = _conv(x, w, b, direction=direction, mode="convolution",
                         start_padding=(1, 1), end_padding=(1, 1))
        source = generate(g).source
        assert "static const int64_t REL[" in source and "nonfinite" not in source
        _bits(g, feeds)


@pytest.mark.parametrize("direction", ["forward", "backward"])
def test_non_finite_factors_need_no_check(direction):
    """inf filter taps that meet only padding and a NaN input: the classes add no product of
    padding, so no NaN appears where the reference has none, without a finite check."""
    rng = np.random.default_rng(64)
    x = rng.standard_normal((8, 40, 2, 2)).astype(F32)
    x[1, 3, 0, 1] = np.nan
    w = rng.standard_normal((40, 40, 3, 3)).astype(F32)
    w[:, :, 0, :] = np.inf  # the top row of taps: padding at output row 0 (forward)
    w[5, 7, 2, 2] = -np.inf
    g, feeds = _conv(x, w, direction=direction, start_padding=(1, 1), end_padding=(1, 1))
    assert "nonfinite" not in generate(g).source
    _bits(g, feeds)


def test_positions_no_tap_reaches_get_the_bias():
    """Padding 3 around 2 positions with a 3-tap filter (1-D): the first and last of the 6
    outputs read only padding, so their sums are empty (+0, then the bias)."""
    rng = np.random.default_rng(65)
    x = rng.standard_normal((4, 32, 2)).astype(F32)
    w = rng.standard_normal((48, 32, 3)).astype(F32)
    b = rng.standard_normal((1, 48, 1)).astype(F32)
    cls = conv_classes.plan([2], [6], [3], [(1, 1, 3)], True)
    assert cls is not None and [len(c.taps) for c in cls] == [0, 1, 2, 2, 1, 0]
    g, feeds = _conv(x, w, b, start_padding=(3,), end_padding=(3,))
    assert "static const int64_t REL[" in generate(g).source
    _bits(g, feeds)


@pytest.mark.parametrize("dtype", [F32, F64])
def test_relu_epilogue_on_tap_classes(dtype):
    """conv + bias -> relu on a 2x2 plane: the classes store ``v > 0 ? v : +0``."""
    rng = np.random.default_rng(66)
    x = rng.standard_normal((8, 40, 2, 2)).astype(dtype)
    w = rng.standard_normal((64, 40, 3, 3)).astype(dtype)
    b = rng.standard_normal((1, 64, 1, 1)).astype(dtype)
    g, feeds = _conv(x, w, b, relu=True, start_padding=(1, 1), end_padding=(1, 1))
    prog = generate(g)
    assert any("+ relu" in lab for lab in prog.kernels)
    assert "static const int64_t REL[" in prog.source
    _bits(g, feeds)


def test_many_groups_share_the_buffers(monkeypatch):
    """Groups run one after another through the same packed columns and product buffer."""
    _forced(monkeypatch)
    rng = np.random.default_rng(67)
    x = rng.standard_normal((5, 3 * 12, 4, 3)).astype(F32)
    w = rng.standard_normal((3 * 20, 12, 3, 3)).astype(F32)
    g, feeds = _conv(x, w, group_count=3, start_padding=(1, 1), end_padding=(1, 1))
    _bits(g, feeds)
