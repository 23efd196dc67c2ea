"""The direct convolutions of few output channels on the cuda target (backends/cuda/stencil.py
and, for the filter gradient under ``sums="split"``, stencil_grad.py).

Layers of every geometry the kernel takes (forward and backward, mirrored, dilated, grouped,
uneven padding, tiles and channel chunks cut by the edges, 2 to 32 channels, float16/32/64)
run with each of several forced tiles, NaN, infinities and -0.0 in the input and the filter,
and are compared with the reference bit for bit; under ``sums="split"`` (one fused multiply-add
a term) within the bound. They run on the host harness (``cuda-host``) and, with
``GRADC_TEST_CUDA``, on the GPU; NVRTC compiles the kernel's variants where it is installed.
"""

from __future__ import annotations

import dataclasses
import re

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

import gradc
from gradc import ops
from gradc.backends.cuda import build, stencil, stencil_grad
from gradc.backends.cuda.emit import generate

from helpers import assert_bits, compile_for, cuda_targets, with_specials

pytestmark = pytest.mark.skipif(not cuda_targets(), reason="no C++ compiler for the harness")

SAME = dict(start_padding=(1, 1), end_padding=(1, 1))
# (input shape, filter shape, attributes, forced (TM, TN) tiles): each layer under the given
# tiles (None: the kernel's own choice)
LAYERS = [
    ((2, 5, 16, 16), (16, 5, 3, 3), SAME, [None, (4, 4), (2, 8)]),
    ((2, 6, 13, 19), (12, 6, 3, 3), SAME, [(4, 4), (8, 4), (4, 8)]),
    ((1, 7, 11, 21), (5, 7, 3, 2), dict(start_padding=(2, 0), end_padding=(0, 1),
                                        dilations=(2, 3), mode="convolution"), [(2, 4), (8, 8)]),
    ((2, 6, 13, 19), (6, 3, 3, 3), dict(direction="backward", **SAME), [(3, 4), (1, 8)]),
    ((2, 6, 13, 19), (6, 4, 3, 3), dict(direction="backward", group_count=2,
                                        start_padding=(0, 2), end_padding=(2, 1),
                                        mode="convolution"), [(4, 8), (2, 4)]),
    ((2, 4, 9, 12), (16, 2, 3, 3), dict(group_count=2, **SAME), [(4, 4)]),
    ((1, 3, 10, 9), (32, 3, 5, 5), dict(start_padding=(2, 2), end_padding=(2, 2)), [(8, 4)]),
    # first layers with strides: squeezenet1_0's 7x7 stride 2 (100 channels in chunks),
    # resnet18's (padding 3, mirrored), and a 3x3 of strides (2, 3) and dilations (1, 2)
    ((1, 3, 27, 27), (100, 3, 7, 7), dict(strides=(2, 2)), [(8, 4), (4, 8), (2, 4)]),
    ((2, 3, 20, 20), (16, 3, 7, 7), dict(strides=(2, 2), start_padding=(3, 3),
                                         end_padding=(3, 3), mode="convolution"),
     [(4, 4), (2, 8)]),
    ((2, 2, 17, 26), (12, 2, 3, 3), dict(strides=(2, 3), dilations=(1, 2), start_padding=(1, 0),
                                         end_padding=(0, 2)), [(4, 8), (8, 4)]),
]
CASES = [(i, tile) for i, (_, _, _, tiles) in enumerate(LAYERS) for tile in tiles]


def _layer(i: int, dtype: str, bias: bool = False, relu: bool = False
           ) -> tuple[gradc.Graph, dict[str, np.ndarray]]:
    xs, ws, attrs, _ = LAYERS[i]
    rng = np.random.default_rng(100 + i)
    g = gradc.Graph(f"stencil{i}_{dtype}")
    x, w = g.input("x", dtype, xs), g.input("w", dtype, ws)
    feeds = {"x": with_specials(rng, dtype, xs), "w": with_specials(rng, dtype, ws)}
    y = ops.convolution(x, w, **attrs)
    if bias:
        shape = (1, int(y.type.shape[1]), 1, 1)
        y = ops.convolution(x, w, g.input("b", dtype, shape), **attrs)
        feeds["b"] = rng.standard_normal(shape).astype(dtype)
    g.output(ops.relu(y) if relu else y, "y")
    return g, feeds


@pytest.fixture
def force(monkeypatch: pytest.MonkeyPatch):
    """Force the next layers' tile: ``force((tm, tn))``; None keeps the kernel's choice. Every
    layer must take the kernel."""
    taken: list[stencil.Plan] = []
    real = stencil.plan
    monkeypatch.setattr(stencil, "MIN_TAKEN", 1)  # these layers are small

    def set_(tile: tuple[int, int] | None) -> list[stencil.Plan]:
        def forced(geo: stencil.Geometry, acc: str) -> stencil.Plan | None:
            p = real(geo, acc) if tile is None else stencil._make(geo, *tile, acc)
            assert p is not None
            taken.append(p)
            return p
        monkeypatch.setattr(stencil, "plan", forced)
        return taken
    return set_


def _run(g: gradc.Graph, feeds: dict[str, np.ndarray], target: str, tmp, **opts):
    return compile_for(g, target, cache_dir=str(tmp.getbasetemp() / "cache"), **opts)(**feeds)


@pytest.mark.parametrize("case", CASES, ids=[f"{i}-{t}" for i, t in CASES])
@pytest.mark.parametrize("target", cuda_targets())
def test_every_layer_and_tile_matches_the_reference(case, target, force, tmp_path_factory):
    i, tile = case
    g, feeds = _layer(i, "float32")
    taken = force(tile)
    want = gradc.compile(g, target="reference")(**feeds)["y"]
    got = _run(g, feeds, target, tmp_path_factory)["y"]
    assert taken, "the layer took the direct convolution"
    assert_bits(np.asarray(got), want, nan_payload=False)


@pytest.mark.parametrize("dtype, tile", [("float16", (4, 8)), ("float64", (4, 2)),
                                         ("float64", (2, 4))])
@pytest.mark.parametrize("target", cuda_targets())
def test_other_dtypes_with_bias_and_relu(dtype, tile, target, force, tmp_path_factory):
    g, feeds = _layer(0, dtype, bias=True, relu=dtype != "float16")
    force(tile)
    want = gradc.compile(g, target="reference")(**feeds)["y"]
    assert_bits(np.asarray(_run(g, feeds, target, tmp_path_factory)["y"]), want,
                nan_payload=False)


@pytest.mark.parametrize("direction", ["forward", "backward"])
@pytest.mark.parametrize("target", cuda_targets())
def test_an_infinite_filter_tap_over_padding_is_skipped(direction, target, force,
                                                        tmp_path_factory):
    """A term whose input position is padding is not added even where the filter value is
    infinite (staged as 0 it would add NaN): the chunk's flag sends it through the masked
    multiplication, and the border outputs stay finite, as in the reference."""
    x = np.ones((1, 8, 12, 16), np.float32)
    w = np.ones((8, 8, 3, 3), np.float32)
    w[:, 5, 0, 0] = np.inf  # a channel of the third chunk (chunks of 2 channels, below)
    g = gradc.Graph("inf_tap")
    g.output(ops.convolution(g.input("x", "float32", x.shape), g.input("w", "float32", w.shape),
                             direction=direction, **SAME), "y")
    taken = force((4, 4))
    want = gradc.compile(g, target="reference")(x=x, w=w)["y"]
    got = _run(g, {"x": x, "w": w}, target, tmp_path_factory)["y"]
    assert taken and np.isfinite(want).any() and np.isinf(want).any()
    assert_bits(np.asarray(got), want)


@pytest.mark.parametrize("target", cuda_targets())
def test_split_sums_are_fused_and_within_the_bound(target, monkeypatch, tmp_path_factory):
    """Under ``sums="split"`` each term is one fused multiply-add (reordered, not bit-exact):
    the results lie within the summation bound of the reference's."""
    monkeypatch.setattr(stencil, "MIN_TAKEN", 1)
    rng = np.random.default_rng(5)
    x = rng.standard_normal((2, 16, 16, 32)).astype(np.float32)
    w = rng.standard_normal((16, 16, 3, 3)).astype(np.float32)
    g = gradc.Graph("split")
    g.output(ops.convolution(g.input("x", "float32", x.shape),
                             g.input("w", "float32", w.shape), **SAME), "y")
    assert "direct convolution" in generate(gradc.optimize(g).graph, {}, sums="split").source
    want = gradc.compile(g, target="reference")(x=x, w=w)["y"].astype(np.float64)
    got = np.asarray(_run(g, {"x": x, "w": w}, target, tmp_path_factory, sums="split")["y"])
    # each output: 144 terms, every product exact in float64: |error| <= 144 * eps * sum |terms|
    absum = gradc.compile(g, target="reference")(x=np.abs(x), w=np.abs(w))["y"]
    bound = 2 * 144 * np.finfo(np.float32).eps * absum.astype(np.float64)
    assert (np.abs(got - want) <= bound).all()


def _geo(cog: int, outs: tuple[int, int], ks: tuple[int, int] = (3, 3)) -> stencil.Geometry:
    return stencil.Geometry(64, 1, 64, cog, 64, outs, outs, ks, (1, 1), (1, 1))


def test_the_kernel_takes_small_layers_and_first_layers():
    """UNet-like layers of 16 and 32 channels, resnet18's 64-channel ones at batch 64 and the
    7x7 stride-2 first layers of squeezenet1_0 (96 channels in 3 chunks) and resnet18 take it;
    1x1 filters, more than 64 channels (128 for a first layer), rows under 8, tiles mostly past
    the edges, fewer than ``MIN_TAKEN`` tiles (resnet18's at batch 8) and strided layers of 8
    input channels or more or of fewer than 25 taps (mobilenet_v2's first) do not."""
    first = stencil.Geometry(64, 1, 3, 96, 3, (64, 64), (29, 29), (7, 7), (1, 1), (0, 0), (2, 2))
    assert str(stencil.plan(first, "float")) == "32x8x32/8x4 by 1 (3 chunks of channels)"
    resnet = dataclasses.replace(first, cog=64, outs=(32, 32), pad=(3, 3))
    assert str(stencil.plan(resnet, "float")) == "64x4x32/8x4 by 1"
    assert stencil.plan(dataclasses.replace(first, cog=200), "float") is None
    assert stencil.plan(dataclasses.replace(first, cig=8, ci_all=8), "float") is None
    mobilenet = dataclasses.replace(resnet, cog=32, ks=(3, 3), pad=(1, 1))
    assert stencil.plan(mobilenet, "float") is None
    assert stencil.plan(dataclasses.replace(mobilenet, s=(1, 1)), "float") is not None
    assert stencil.plan(_geo(16, (64, 64)), "float") is not None
    assert stencil.plan(_geo(32, (32, 32)), "float") is not None
    assert str(stencil.plan(_geo(64, (16, 16)), "float")) == "64x8x16/8x4 by 4"
    assert stencil.plan(dataclasses.replace(_geo(64, (16, 16)), nb=8), "float") is None
    assert stencil.plan(_geo(16, (64, 64), (1, 1)), "float") is None
    assert stencil.plan(_geo(96, (64, 64)), "float") is None
    assert stencil.plan(_geo(16, (4, 4)), "float") is None
    # the tiles measured fastest on the H200 (stencil.MIN_TILES)
    assert str(stencil.plan(_geo(16, (64, 64)), "float")) == "16x4x64/4x4 by 4"
    assert str(stencil.plan(_geo(32, (32, 32)), "float")) == "32x8x32/8x4 by 4"


def test_strided_and_3d_convolutions_keep_the_implicit_gemm():
    g = gradc.Graph("kept")
    x = g.input("x", "float32", (2, 8, 16, 16))
    w = g.input("w", "float32", (16, 8, 3, 3))
    g.output(ops.convolution(x, w, strides=(2, 2), **SAME), "s2")
    x3 = g.input("x3", "float32", (2, 4, 8, 8, 8))
    w3 = g.input("w3", "float32", (8, 4, 3, 3, 3))
    g.output(ops.convolution(x3, w3, start_padding=(1, 1, 1), end_padding=(1, 1, 1)), "c3")
    source = generate(gradc.optimize(g).graph, {}).source
    assert "direct convolution" not in source
    assert len(re.findall(r"sums of \d+ terms; tile \d+x", source)) == 2


@pytest.mark.parametrize("dtype", ["float32", "float64", "float16"])
def test_nvrtc_compiles_the_kernels_variants(dtype, nvrtc_cache, force):
    """Every layer above (vector and scalar filter loads, partial staging slots, several
    chunks), fused and not, through NVRTC."""
    force((4, 2) if dtype == "float64" else (4, 4))
    g = gradc.Graph(f"stencils_{dtype}")
    for i, (xs, ws, attrs, _) in enumerate(LAYERS):
        y = ops.convolution(g.input(f"x{i}", dtype, xs), g.input(f"w{i}", dtype, ws), **attrs)
        g.output(y, f"y{i}")
    for sums in ("canonical", "split"):
        source = generate(g, {}, sums=sums).source
        assert source.count("direct convolution") == len(LAYERS)
        assert build.compile_cubin(source, build.DEFAULT_ARCH, nvrtc_cache)[:4] == b"\x7fELF"


# -- the filter gradient (stencil_grad.py, sums="split") ---------------------------------------

# (X shape, dY shape, dW shape, attributes)
GRADS = [
    ((2, 16, 16, 16), (2, 16, 16, 16), (16, 16, 3, 3), SAME),
    ((3, 24, 12, 20), (3, 12, 12, 20), (12, 24, 3, 3), SAME),
    ((3, 32, 12, 20), (3, 10, 12, 20), (10, 16, 3, 3), dict(group_count=2, mode="convolution",
                                                            **SAME)),
    ((2, 16, 13, 20), (2, 5, 12, 16), (5, 16, 3, 3), dict(dilations=(2, 3), start_padding=(1, 0),
                                                          end_padding=(2, 2), mode="convolution")),
    ((2, 8, 16, 16), (2, 32, 16, 16), (32, 8, 3, 3), SAME),
    # first layers (fewer than 8 input channels): squeezenet1_0's 7x7 stride 2 (rows of 11
    # positions, parts of 6 and 5 rows, the last chunk of one row, 100 channels of dY in three
    # blocks), resnet18's (stride 2, padding 3, mirrored, filter rows a thread each),
    # mobilenet_v2's 3x3 stride 2, one input channel, and groups with dilations and strides
    ((1, 3, 27, 27), (1, 100, 11, 11), (100, 3, 7, 7), dict(strides=(2, 2))),
    ((2, 3, 32, 32), (2, 16, 16, 16), (16, 3, 7, 7), dict(strides=(2, 2), start_padding=(3, 3),
                                                          end_padding=(2, 2),
                                                          mode="convolution")),
    ((2, 3, 32, 32), (2, 32, 16, 16), (32, 3, 3, 3), dict(strides=(2, 2), start_padding=(1, 1),
                                                          end_padding=(0, 0))),
    ((2, 1, 12, 13), (2, 48, 12, 13), (48, 1, 3, 3), dict(mode="convolution", **SAME)),
    ((2, 4, 21, 21), (2, 80, 9, 10), (80, 2, 3, 3), dict(group_count=2, strides=(2, 2),
                                                         dilations=(2, 2), start_padding=(1, 0),
                                                         end_padding=(0, 2))),
]


@pytest.fixture
def small_grid(monkeypatch: pytest.MonkeyPatch) -> None:
    """Blocks enough for these small layers at 4 (several parts an image, several chunks a
    part), where the kernel wants 3 a multiprocessor; and first layers of any intensity (the
    3x3 ones are below the speed rule's, their code paths are not)."""
    monkeypatch.setattr(stencil_grad, "MIN_BLOCKS", 4)
    monkeypatch.setattr(stencil_grad, "MIN_INTENSITY", 0)


def _grad(i: int, dtype: str, special: bool) -> tuple[gradc.Graph, dict[str, np.ndarray]]:
    xs, dys, ws, attrs = GRADS[i]
    rng = np.random.default_rng(200 + i)
    g = gradc.Graph(f"stencil_grad{i}_{dtype}")
    g.output(ops.convolution_filter_grad(g.input("x", dtype, xs), g.input("dy", dtype, dys), ws,
                                         **attrs), "dw")
    feeds = {"x": rng.standard_normal(xs).astype(dtype),
             "dy": rng.standard_normal(dys).astype(dtype)}
    if special:  # an infinity in dY's first row (where the first filter row meets the
        # padding) and a NaN in another channel (their chunks take the masked path), and an
        # infinity in X
        plane = dys[2] * dys[3]
        feeds["dy"].reshape(-1)[[5, 3 * plane + 77]] = [np.inf, np.nan]
        feeds["x"].reshape(-1)[3] = -np.inf
    return g, feeds


@pytest.mark.parametrize("special", [False, True])
@pytest.mark.parametrize("i", range(len(GRADS)))
@pytest.mark.parametrize("target", cuda_targets())
def test_the_filter_gradient_is_within_the_bound(i, special, target, small_grid,
                                                 tmp_path_factory):
    """Every output within the split bound of the reference's (each part and the parts' sum:
    ``2 n eps sum |terms|``), the same non-finite values where the reference has them (a
    padded position's term is skipped even where dY is infinite), and the kernel taken."""
    g, feeds = _grad(i, "float32", special)
    assert "direct filter gradient" in generate(gradc.optimize(g).graph, {}, sums="split").source
    ref = gradc.compile(g, target="reference")
    want = ref(**feeds)["dw"].astype(np.float64)
    got = np.asarray(_run(g, feeds, target, tmp_path_factory, sums="split")["dw"], np.float64)
    absum = ref(**{k: np.abs(v) for k, v in feeds.items()})["dw"].astype(np.float64)
    terms = np.prod(GRADS[i][1]) // GRADS[i][1][1]
    bound = 2 * terms * np.finfo(np.float32).eps * absum
    finite = np.isfinite(want)
    assert (np.isnan(got) == np.isnan(want)).all()
    assert (got[~finite & ~np.isnan(want)] == want[~finite & ~np.isnan(want)]).all()
    assert (np.abs(got[finite] - want[finite]) <= bound[finite]).all()
    assert special == bool((~finite).any())


@pytest.mark.parametrize("target", cuda_targets())
def test_the_filter_gradient_of_float16_data(target, small_grid, tmp_path_factory):
    g, feeds = _grad(0, "float16", False)
    want = gradc.compile(g, target="reference")(**feeds)["dw"].astype(np.float64)
    got = np.asarray(_run(g, feeds, target, tmp_path_factory, sums="split")["dw"], np.float64)
    # the float32 sums round once to float16: within a float16 ulp and the sum's bound
    assert np.allclose(got, want, rtol=2e-3, atol=2e-2)


def test_the_filter_gradient_keeps_the_implicit_gemm_where_it_must():
    """The canonical order, float64, a backward convolution's filter gradient, rows not a
    multiple of 4 or strides (8 input channels or more), more than 32 channels of dY, layers
    whose parts of 64 positions leave SMs idle, and first layers of few products per staged
    element, too many channels of dY, too wide a filter or too few threads keep the tiled
    kernel; the first layers of squeezenet1_0 and resnet18 at batch 64 take it."""
    geo = stencil_grad.Geometry(64, 1, 16, 16, (64, 64), (64, 64), (3, 3), (1, 1), (1, 1),
                                False)
    plan = stencil_grad.plan
    assert plan(geo, "float") is not None
    assert plan(geo, "double") is None
    assert plan(dataclasses.replace(geo, outs=(64, 62)), "float") is None
    assert plan(dataclasses.replace(geo, s=(2, 1)), "float") is None
    assert plan(dataclasses.replace(geo, m=64), "float") is None
    assert plan(dataclasses.replace(geo, m=32, c=32, outs=(16, 16)), "float") is None
    assert str(plan(geo, "float")) == "16x16 a block, parts of 8 rows by 2"
    first = stencil_grad.Geometry(64, 1, 96, 3, (64, 64), (29, 29), (7, 7), (1, 1), (0, 0),
                                  False, (2, 2))
    assert str(plan(first, "float")) == ("48x3 a block, filter rows in 7 groups, 2 blocks of "
                                         "channels, parts of 8 rows by 2")
    resnet = dataclasses.replace(first, m=64, outs=(32, 32), sp=(3, 3))
    assert str(plan(resnet, "float")) == ("32x3 a block, filter rows in 7 groups, 2 blocks of "
                                          "channels, parts of 8 rows by 2")
    assert plan(dataclasses.replace(first, m=200), "float") is None  # MAX_M
    assert plan(dataclasses.replace(first, ks=(11, 11)), "float") is None  # 44 sums a thread
    assert plan(dataclasses.replace(first, m=4, c=1), "float") is None  # 7 threads
    assert plan(dataclasses.replace(first, nb=2), "float") is None  # 8 blocks of 29 rows
    unet = dataclasses.replace(geo, c=3)  # 19 products per staged element
    assert plan(unet, "float") is None
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(stencil_grad, "MIN_INTENSITY", 0)
        assert str(plan(unet, "float")) == ("16x3 a block, filter rows in 3 groups, parts of 8 "
                                            "rows by 2")
    g, _ = _grad(0, "float32", False)
    assert "direct filter gradient" not in generate(gradc.optimize(g).graph, {}).source
    b = gradc.Graph("backward")
    b.output(ops.convolution_filter_grad(b.input("x", "float32", (2, 16, 16, 16)),
                                         b.input("dy", "float32", (2, 16, 16, 16)),
                                         (16, 16, 3, 3), direction="backward", **SAME), "dw")
    assert "direct filter gradient" not in generate(gradc.optimize(b).graph, {},
                                                     sums="split").source


def test_nvrtc_compiles_the_filter_gradients(nvrtc_cache, small_grid):
    g = gradc.Graph("stencil_grads")
    for i, (xs, dys, ws, attrs) in enumerate(GRADS):
        g.output(ops.convolution_filter_grad(g.input(f"x{i}", "float32", xs),
                                             g.input(f"dy{i}", "float32", dys), ws, **attrs),
                 f"dw{i}")
    source = generate(g, {}, sums="split").source
    assert source.count("direct filter gradient") == len(GRADS)
    assert build.compile_cubin(source, build.DEFAULT_ARCH, nvrtc_cache)[:4] == b"\x7fELF"


# -- random layers against the reference --------------------------------------------------------

@st.composite
def _random_layer(draw):
    """A layer the direct convolution takes (rows of 8 outputs or more), forced onto a random
    tile: its geometry, attributes and (TM, TN)."""
    direction = draw(st.sampled_from(["forward", "backward"]))
    groups = draw(st.sampled_from([1, 2]))
    # up to 40 output channels a group: more than 8 groups of TM take chunks (a first layer)
    cig, cog = draw(st.integers(1, 4)) * groups, draw(st.integers(2, 40)) * groups
    ks = (draw(st.integers(2, 3)), draw(st.integers(1, 3)) + 1)
    d = (draw(st.integers(1, 2)), draw(st.integers(1, 2)))
    sp = (draw(st.integers(0, 2)), draw(st.integers(0, 2)))
    ep = (draw(st.integers(0, 2)), draw(st.integers(0, 2)))
    ext = [(k - 1) * dd + 1 for k, dd in zip(ks, d)]
    strides = (1, 1)
    if direction == "forward":  # output = (input + pads - extent) / stride + 1, rounded down
        strides = (draw(st.integers(1, 3)), draw(st.integers(1, 3)))
        outs = (draw(st.integers(2, 9)), draw(st.integers(8, 20)))
        ins = tuple((o - 1) * ss + x - s - e + draw(st.integers(0, ss - 1))
                    for o, s, e, x, ss in zip(outs, sp, ep, ext, strides))
        xs, ws = (1, cig, *ins), (cog, cig // groups, *ks)
    else:  # output = input - 1 + extent - pads
        ins = (draw(st.integers(2, 9)), draw(st.integers(8, 20)))
        outs = tuple(i - 1 + x - s - e for i, s, e, x in zip(ins, sp, ep, ext))
        xs, ws = (1, cig, *ins), (cig, cog // groups, *ks)
    assume(min(ins) >= 1 and outs[1] >= 8 and outs[0] >= 2)
    attrs = dict(direction=direction, group_count=groups, dilations=d, start_padding=sp,
                 end_padding=ep, strides=strides,
                 mode=draw(st.sampled_from(["convolution", "cross_correlation"])))
    tile = draw(st.sampled_from([(1, 4), (2, 8), (3, 4), (4, 4), (4, 8), (8, 4)]))
    return xs, ws, attrs, tile


@settings(max_examples=30, deadline=None)
@given(layer=_random_layer(), seed=st.integers(0, 2**31 - 1))
def test_random_layers_match_the_reference(layer, seed, tmp_path_factory):
    """Random layers (directions, groups, filters of 2-4 taps a side, dilations, uneven
    padding, forward strides, output channels in chunks), random forced tiles, NaN and
    infinities in both operands: the host harness against the reference, bit for bit."""
    if "cuda-host" not in cuda_targets():
        pytest.skip("the host harness needs a C++ compiler")
    xs, ws, attrs, tile = layer
    rng = np.random.default_rng(seed)
    g = gradc.Graph("random_stencil")
    g.output(ops.convolution(g.input("x", "float32", xs), g.input("w", "float32", ws),
                             **attrs), "y")
    feeds = {"x": with_specials(rng, "float32", xs), "w": with_specials(rng, "float32", ws)}
    with pytest.MonkeyPatch.context() as mp:
        plans: list[stencil.Plan | None] = []
        mp.setattr(stencil, "plan",
                   lambda geo, acc: plans.append(stencil._make(geo, *tile, acc)) or plans[-1])
        source = generate(gradc.optimize(g).graph, {}).source
        # a strided layer's patch under a tall tile can outgrow shared memory
        assume(plans[-1] is not None or attrs["strides"] == (1, 1))
        assert "direct convolution" in source
        got = _run(g, feeds, "cuda-host", tmp_path_factory)["y"]
    want = gradc.compile(g, target="reference")(**feeds)["y"]
    assert_bits(np.asarray(got), want, nan_payload=False)


@st.composite
def _random_grad(draw):
    """A forward layer whose filter gradient the direct kernel takes: X, dY and dW shapes and
    the attributes."""
    groups = draw(st.sampled_from([1, 2]))
    d = (draw(st.integers(1, 2)), draw(st.integers(1, 2)))
    sp = (draw(st.integers(0, 2)), draw(st.integers(0, 2)))
    ep = (draw(st.integers(0, 2)), draw(st.integers(0, 2)))
    if draw(st.booleans()):  # 8 input channels or more: unit strides, rows of fours
        m = draw(st.integers(2, 32))
        c = draw(st.sampled_from([8, 12, 16, 24, 32]))
        assume(-(-m // 4) * c >= 32)
        ks = (draw(st.integers(2, 3)), draw(st.integers(2, 4)))
        s = (1, 1)
        outs = (draw(st.integers(1, 8)), 4 * draw(st.integers(2, 5)))
    else:  # a first layer: any strides and rows, filters up to 7x7, chunks of dY's channels
        m = draw(st.integers(2, 100))
        c = draw(st.integers(1, 7))
        ks = (draw(st.integers(2, 7)), draw(st.integers(2, 7)))
        s = (draw(st.integers(1, 3)), draw(st.integers(1, 3)))
        outs = (draw(st.integers(1, 8)), draw(st.integers(8, 19)))
    # the smallest input of these outputs, and up to a stride less one more
    ins = tuple((o - 1) * ss + (k - 1) * dd + 1 - a - b + draw(st.integers(0, ss - 1))
                for o, ss, k, dd, a, b in zip(outs, s, ks, d, sp, ep))
    assume(min(ins) >= 1)
    nb = draw(st.integers(1, 2))
    geo = stencil_grad.Geometry(nb, groups, m, c, ins, outs, ks, d, sp, False, s)
    assume(stencil_grad.fits(geo, "float"))
    attrs = dict(group_count=groups, dilations=d, start_padding=sp, end_padding=ep, strides=s,
                 mode=draw(st.sampled_from(["convolution", "cross_correlation"])))
    return ((nb, c * groups, *ins), (nb, m * groups, *outs), (m * groups, c, *ks), attrs)


@settings(max_examples=25, deadline=None)
@given(layer=_random_grad(), seed=st.integers(0, 2**31 - 1))
def test_random_filter_gradients_are_within_the_bound(layer, seed, tmp_path_factory):
    """Random layers' filter gradients under ``sums="split"`` (parts of random lengths): the
    host harness within the split bound of the reference, the same non-finite values."""
    if "cuda-host" not in cuda_targets():
        pytest.skip("the host harness needs a C++ compiler")
    xs, dys, ws, attrs = layer
    rng = np.random.default_rng(seed)
    g = gradc.Graph("random_stencil_grad")
    g.output(ops.convolution_filter_grad(g.input("x", "float32", xs),
                                         g.input("dy", "float32", dys), ws, **attrs), "dw")
    feeds = {"x": rng.standard_normal(xs).astype(np.float32),
             "dy": with_specials(rng, "float32", dys)}
    with pytest.MonkeyPatch.context() as mp:
        # parts of a random number of rows: at most as many blocks as rows of outputs
        rows = attrs["group_count"] * dys[0] * dys[2]
        mp.setattr(stencil_grad, "MIN_BLOCKS", int(rng.integers(1, rows + 1)))
        mp.setattr(stencil_grad, "MIN_PART", 8)
        mp.setattr(stencil_grad, "MIN_INTENSITY", 0)
        assert "direct filter gradient" in generate(gradc.optimize(g).graph, {},
                                                     sums="split").source
        got = np.asarray(_run(g, feeds, "cuda-host", tmp_path_factory, sums="split")["dw"],
                         np.float64)
    ref = gradc.compile(g, target="reference")
    want = ref(**feeds)["dw"].astype(np.float64)
    absum = ref(**{k: np.abs(v) for k, v in feeds.items()})["dw"].astype(np.float64)
    bound = 2 * (np.prod(dys) // dys[1]) * np.finfo(np.float32).eps * absum
    finite = np.isfinite(want)
    assert (np.isnan(got) == np.isnan(want)).all()
    assert (got[~finite & ~np.isnan(want)] == want[~finite & ~np.isnan(want)]).all()
    assert (np.abs(got[finite] - want[finite]) <= bound[finite]).all()
