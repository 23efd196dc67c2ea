"""gemm and convolution on the cuda target (backends/cuda/tiled.py): every tile, bit for bit.

The tile of each product is chosen at compile time from its shape; these tests force every tile
the kernel can take (``tiling.tiles``, and the direct kernel) onto products whose M, N and K
leave partial tiles on every edge, with NaN, infinities and -0.0 in the data, and compare the
results with the reference bit for bit (NaN payloads of sums aside, SPEC.md §1.6). They run on
the host harness (``cuda-host``) and, with ``GRADC_TEST_CUDA``, on the GPU. NVRTC compiles every
tile shape of each dtype (skipped without ``cuda-bindings`` and ``nvidia-cuda-nvrtc``).
"""

from __future__ import annotations

import itertools
from typing import Iterator

import numpy as np
import pytest

import gradc
from gradc import ops
from gradc.backends.c.ctypes_map import ctype
from gradc.backends.cuda import build, tiling
from gradc.backends.cuda.emit import generate
from gradc.ir.types import DType

from helpers import assert_bits, compile_for, cuda_targets, with_specials

pytestmark = pytest.mark.skipif(not cuda_targets(), reason="no C++ compiler for the harness")

PADDED = dict(start_padding=(1, 0), end_padding=(1, 2))
STRIDED = dict(direction="backward", strides=(2, 1), dilations=(1, 2), start_padding=(0, 1),
               end_padding=(1, 0), output_padding=(1, 0), group_count=2, mode="convolution")


def _products(dtype: str) -> tuple[gradc.Graph, dict[str, np.ndarray]]:
    """Four products: a batched, broadcast, transposed gemm with c; a padded forward
    convolution, the filter gradient of a strided, dilated, grouped, mirrored backward one,
    and that backward convolution (M, N, K odd, so every tile is partial)."""
    rng = np.random.default_rng(28)
    g = gradc.Graph(f"products_{dtype}")
    shapes = {"a": (2, 1, 21, 37), "b": (1, 3, 45, 21), "c": (2, 1, 37, 1),
              "x": (2, 3, 7, 6), "w": (5, 3, 3, 3), "xt": (3, 4, 5, 4), "wt": (4, 3, 2, 3)}
    v = {k: g.input(k, dtype, s) for k, s in shapes.items()}
    y = ops.convolution(v["xt"], v["wt"], **STRIDED)
    dy = g.input("dy", dtype, y.type.shape)
    g.output(ops.gemm(v["a"], v["b"], v["c"], trans_a=True, trans_b=True, alpha=1.5,
                      beta=-1.0), "mm")
    g.output(ops.convolution(v["x"], v["w"], **PADDED), "cv")
    g.output(ops.convolution_filter_grad(v["xt"], dy, (4, 3, 2, 3), **STRIDED), "fg")
    g.output(y, "ct")
    feeds = {k: with_specials(rng, dtype, s) for k, s in shapes.items()}
    feeds["dy"] = with_specials(rng, dtype, tuple(int(d) for d in y.type.shape))
    return g, feeds


def _features(t: tiling.Tile) -> set[tuple[str, object]]:
    """What changes a tiled kernel's text: the per-thread block, the computing threads' grid,
    the chunk depth, and whether the staging slots of A or B fill the block."""
    return {("block", (t.tm, t.tn)), ("grid", (t.bm // t.tm, t.tx)), ("bk", t.bk),
            ("partial A", t.bm * t.bk % 256 != 0), ("partial B", t.bn * t.bk % 256 != 0)}


def _rounds(acc: str) -> list[list[tiling.Tile]]:
    """Tiles of an accumulator type that together show every feature (greedy), and the direct
    kernel, four per round."""
    left = set().union(*(_features(t) for t in tiling.tiles(acc)))
    chosen = [tiling.DIRECT]
    while left:
        best = max(tiling.tiles(acc), key=lambda t: len(_features(t) & left))
        chosen.append(best)
        left -= _features(best)
    return [chosen[i:i + 4] for i in range(0, len(chosen), 4)]


ROUNDS = [("float32", i) for i in range(len(_rounds("float")))] + \
    [("float64", i) for i in range(len(_rounds("double")))] + [("float16", 0), ("float16", 3)]


@pytest.fixture
def forced(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[tiling.Tile]]:
    """The tiles the next products take, in order (the cost model is set aside)."""
    queue: list[tiling.Tile] = []
    monkeypatch.setattr(tiling, "choose", lambda p: queue.pop(0))
    yield queue


@pytest.mark.parametrize("dtype, round_", ROUNDS)
@pytest.mark.parametrize("target", cuda_targets())
def test_every_tile_matches_the_reference(dtype, round_, target, forced, tmp_path_factory):
    g, feeds = _products(dtype)
    want = gradc.compile(g, target="reference")(**feeds)
    tiles = _rounds("double" if dtype == "float64" else "float")[round_]
    forced.extend(itertools.islice(itertools.cycle(tiles), 4))
    got = compile_for(g, target, cache_dir=str(tmp_path_factory.getbasetemp() / "cache"))(
        **feeds)
    assert not forced, "every product took a forced tile"
    for k in want:
        assert_bits(np.asarray(got[k]), want[k], nan_payload=False)


@pytest.mark.parametrize("direction", ["forward", "backward"])
@pytest.mark.parametrize("target", cuda_targets())
def test_an_infinite_filter_tap_over_padding_is_skipped(direction, target, tmp_path_factory):
    """A tap whose input position is padding adds nothing, even where the filter is infinite
    (0 * inf would be NaN): the outputs at the border stay finite, as in the reference."""
    x = np.ones((1, 16, 5, 5), np.float32)
    w = np.ones((16, 16, 3, 3), np.float32)
    w[:, :, 0, 0] = np.inf  # the first tap: padding for the first output row and column
    g = gradc.Graph("inf_tap")
    f = dict(start_padding=(1, 1), end_padding=(1, 1), direction=direction)
    g.output(ops.convolution(g.input("x", "float32", x.shape), g.input("w", "float32", w.shape),
                             **f), "y")
    want = gradc.compile(g, target="reference")(x=x, w=w)["y"]
    got = compile_for(g, target, cache_dir=str(tmp_path_factory.getbasetemp() / "cache"))(
        x=x, w=w)["y"]
    assert np.isfinite(want).any() and np.isinf(want).any()
    assert_bits(np.asarray(got), want)


def _source(g: gradc.Graph) -> str:
    return generate(gradc.optimize(g).graph, {}).source


# (filter, strides, dilations, start padding): phases that no tap reaches -- a 1x1 filter at
# stride 2 (three of four phases), a 2x1 filter at stride (3, 2), dilated by 2 on the first axis
DEAD = [((1, 1), (2, 2), (1, 1), (0, 0)), ((2, 1), (3, 2), (2, 1), (1, 0))]


@pytest.mark.parametrize("dtype", ["float32", "float64", "float16"])
@pytest.mark.parametrize("sums", ["canonical", "split"])
@pytest.mark.parametrize("target", cuda_targets())
def test_phases_without_taps_store_zero_and_the_bias(dtype, sums, target, tmp_path_factory):
    """A strided input gradient whose stride passes the filter's extent has output phases that
    no tap reaches: their outputs are +0 plus the bias (a -0.0 bias gives +0), stored by a
    launch of their own, and the product sums the other phases only. Bit for bit against the
    reference in the canonical mode; the split mode's fused sums within a few roundings, its
    dead phases exactly."""
    rng = np.random.default_rng(7)
    for ks, st, dil, sp in DEAD:
        g = gradc.Graph("dead_phases")
        xs, ws = (2, 4, 5, 4), (4, 3, *ks)
        f = dict(direction="backward", strides=st, dilations=dil, start_padding=sp,
                 end_padding=(0, 0), output_padding=(st[0] - 1, st[1] - 1))
        y = ops.convolution(g.input("x", dtype, xs), g.input("w", dtype, ws),
                            g.input("b", dtype, (1, 3, 1, 1)), **f)
        g.output(y, "y")
        feeds = {"x": with_specials(rng, dtype, xs), "w": rng.standard_normal(ws).astype(dtype),
                 "b": np.array([1.5, -0.0, np.inf], dtype).reshape(1, 3, 1, 1)}
        want = gradc.compile(g, target="reference")(**feeds)["y"]
        ex = compile_for(g, target, cache_dir=str(tmp_path_factory.getbasetemp() / "cache"),
                         sums=sums)
        got = np.asarray(ex(**feeds)["y"])
        if sums == "canonical":
            assert_bits(got, want, nan_payload=False)
        else:  # fused terms (sums="split"): within a few roundings of the reference
            tol = 1e-2 if dtype == "float16" else 1e-5
            np.testing.assert_allclose(got, want, rtol=tol, atol=tol)
        # the dead phases: bias 1.5 -> 1.5, -0.0 -> +0, inf -> inf; every one of them stored
        dead = np.ones(want.shape[2:], bool)
        for h in range(want.shape[2]):
            for w_ in range(want.shape[3]):
                dead[h, w_] = not any((h + sp[0] - i * dil[0]) % st[0] == 0 and
                                      (w_ + sp[1] - j * dil[1]) % st[1] == 0
                                      for i in range(ks[0]) for j in range(ks[1]))
        assert dead.any() and not dead.all()
        cut = got[:, :, dead]
        assert (cut[:, 0] == 1.5).all() and np.isposinf(cut[:, 2]).all()
        assert (cut[:, 1] == 0).all() and not np.signbit(cut[:, 1]).any()
        live_phases = len({((h + sp[0]) % st[0], (w_ + sp[1]) % st[1])
                           for h in range(want.shape[2]) for w_ in range(want.shape[3])
                           if not dead[h, w_]})
        src = _source(g)
        assert f"/* {live_phases} x (3 x " in src, "the product runs over the live phases only"


def test_a_layer_without_skipped_terms_has_no_masked_path():
    """1x1 without padding reads every term: no masks, no non-finite check; 3x3 padded has
    both."""
    g = gradc.Graph("plain")
    x = g.input("x", "float32", (2, 8, 6, 6))
    g.output(ops.convolution(x, g.input("w", "float32", (8, 8, 1, 1))), "y")
    assert "gc_bad" not in _source(g)
    g = gradc.Graph("padded")
    x = g.input("x", "float32", (2, 8, 6, 6))
    g.output(ops.convolution(x, g.input("w", "float32", (8, 8, 3, 3)), **PADDED), "y")
    assert "gc_bad" in _source(g)


def _product(m: int, n: int, k: int, acc: str = "float") -> tiling.Product:
    t = ctype(DType.float32 if acc == "float" else DType.float64)
    op = tiling.Operand("p", t, "k", lambda tag, r: [], lambda tag, kk: ([], "0", None))
    return tiling.Product(1, m, n, k, op, op, acc, lambda: [], lambda m_, n_, s: [])


def test_the_tile_choice_follows_the_shape():
    assert tiling.choose(_product(2, 500, 500)) == tiling.DIRECT  # a side of two rows
    big = tiling.choose(_product(4096, 4096, 4096))
    assert (big.tm, big.tn) == (8, 8)  # large products: the most work per fragment read
    small = tiling.choose(_product(512, 32, 4608))
    assert small.tm * small.tn <= 2  # few outputs, long sums: every output its own thread
    few = tiling.choose(_product(16, 144, 32768))
    assert few.threads < 256  # the sums' chains set the time: few warps compute, all stage
    for acc in ("float", "double"):
        for t in tiling.tiles(acc):
            assert t.threads in (32, 64, 128, 256) and t.threads * t.tm * t.tn == t.bm * t.bn, t
            assert t.bm <= 128 and t.bn <= 128 and 256 % t.bk == 0, t


def _conv_products(monkeypatch, make) -> list[tiling.Product]:
    """The products ``generate`` states for the graph ``make()`` under sums="split"."""
    seen: list[tiling.Product] = []
    choose_split = tiling.choose_split
    monkeypatch.setattr(tiling, "choose_split", lambda p: (seen.append(p), choose_split(p))[1])
    generate(gradc.optimize(make(), passes=None).graph, {}, sums="split")
    return seen


def test_the_split_policy_takes_the_tiles_measured_fastest(monkeypatch):
    """The H200 sweep's findings (benchmarks/results/gpu_h200.md, fourth session): resnet18's
    128x128x3x3 filter gradient at batch 64 (128 x 1152 sums of 4096 terms) ran 2.8x faster
    split 32 ways on 4x4 sums per thread than on the 1x1 tile the old model took; and an
    implicit GEMM's 8x8 tile (169 registers, one block per SM) lost to 8x4 on every layer."""
    def wgrad() -> gradc.Graph:
        g = gradc.Graph("wgrad")
        x = g.input("x", "float32", (64, 128, 8, 8))
        dy = g.input("dy", "float32", (64, 128, 8, 8))
        g.output(ops.convolution_filter_grad(x, dy, (128, 128, 3, 3), start_padding=(1, 1),
                                             end_padding=(1, 1)), "dw")
        return g

    def fwd() -> gradc.Graph:
        g = gradc.Graph("fwd")
        x = g.input("x", "float32", (64, 256, 4, 4))
        g.output(ops.convolution(x, g.input("w", "float32", (256, 256, 3, 3)),
                                 start_padding=(1, 1), end_padding=(1, 1)), "y")
        return g
    (p,) = _conv_products(monkeypatch, wgrad)
    assert (p.m, p.n, p.k) == (128, 1152, 4096)
    tile, parts = tiling.choose_split(p)
    assert parts > 1 and tile.tm * tile.tn >= 16, (tile, parts)
    (p,) = _conv_products(monkeypatch, fwd)
    assert p.b.cost > tiling.IMPLICIT_COST
    tile, parts = tiling.choose_split(p)
    assert tile.tm * tile.tn == 32, tile  # 8x4 or 4x8, not 8x8
    assert tiling.choose(_product(4096, 4096, 4096)).tm == 8  # a plain gemm keeps 8x8


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_nvrtc_compiles_every_fragment_shape(dtype, nvrtc_cache, forced):
    """One program with a tile of every per-thread block (TM x TN: the fragments' vector
    types and loads) and count of computing threads, the one of most shared memory and staging
    slots of each, gemm and masked convolutions in turn, and the direct kernel, through NVRTC
    (float16 differs only in its loads and stores: cuda_cases' programs compile it)."""
    acc = "double" if dtype == "float64" else "float"
    shapes: dict[tuple[int, int, int], tiling.Tile] = {}
    for t in sorted(tiling.tiles(acc), key=lambda t: (tiling.shared_bytes(t, acc),
                                                     (t.bm + t.bn) * t.bk)):
        shapes[(t.tm, t.tn, t.threads)] = t  # the largest last
    tiles = [tiling.DIRECT, *shapes.values()]
    g = gradc.Graph(f"all_tiles_{dtype}")
    a = g.input("a", dtype, (21, 37))
    b = g.input("b", dtype, (37, 45))
    x = g.input("x", dtype, (2, 3, 7, 6))
    w = g.input("w", dtype, (5, 3, 3, 3))
    for i, t in enumerate(tiles):
        if i % 2:
            g.output(ops.gemm(a, b), f"mm{i}")
        else:
            g.output(ops.convolution(x, w, **PADDED), f"cv{i}")
        forced.append(t)
    source = generate(g, {}).source  # not optimized: the identical products stay apart
    assert not forced and "atomic" not in source.lower()
    assert build.compile_cubin(source, build.DEFAULT_ARCH, nvrtc_cache)[:4] == b"\x7fELF"


def test_every_tile_fits_the_static_shared_memory_of_a_block():
    for acc in ("float", "double"):
        for t in tiling.tiles(acc):
            assert tiling.shared_bytes(t, acc) <= 48 * 1024, (acc, t)


def _conv_net() -> gradc.Graph:
    """Two convolutions (the second strided: its input gradient runs in phases) with biases
    and relu, then a classifier gemm (trans_b, broadcast c): every product of a training step,
    the input gradient of the first convolution aside (x is no parameter)."""
    rng = np.random.default_rng(7)
    g = gradc.Graph("conv_net")
    x = g.input("x", "float32", (4, 3, 8, 8))

    def param(name: str, shape: tuple[int, ...]) -> gradc.Value:
        return g.add_parameter(name, (rng.standard_normal(shape) * 0.3).astype(np.float32))
    pad = dict(start_padding=(1, 1), end_padding=(1, 1))
    with g:
        h = ops.relu(ops.convolution(x, param("w1", (8, 3, 3, 3)), param("b1", (1, 8, 1, 1)),
                                     **pad))
        h = ops.relu(ops.convolution(h, param("w2", (8, 8, 3, 3)), param("b2", (1, 8, 1, 1)),
                                     strides=(2, 2), **pad))
        h = ops.reshape(h, (4, 128))
        g.output(ops.gemm(h, param("fc", (5, 128)), param("fb", (1, 5)), trans_b=True), "y")
    return g


@pytest.mark.parametrize("target", cuda_targets())
def test_a_training_step_with_products_equals_the_c_target(target, tmp_path_factory):
    """Three steps of a Trainer (SGD with momentum) on the cuda target: the losses and every
    parameter are the C target's bits (on the GPU: within float32 rounding of them)."""
    opt = gradc.optim.SGD(0.05, momentum=0.9)
    extra = {"runtime": "host"} if target == "cuda-host" else {}
    tc = gradc.Trainer(_conv_net(), opt, loss="cross_entropy", target="c")
    tg = gradc.Trainer(_conv_net(), opt, loss="cross_entropy", target="cuda",
                       cache_dir=str(tmp_path_factory.getbasetemp() / "cache"), **extra)
    rng = np.random.default_rng(3)
    for _ in range(3):
        batch = {"x": rng.standard_normal((4, 3, 8, 8), dtype=np.float32),
                 "labels": rng.integers(0, 5, 4)}
        lc, lg = tc.step(**batch), tg.step(**batch)
        assert lc == lg if target == "cuda-host" else abs(lc - lg) <= 1e-6 * abs(lc)
    for name, want in tc.state_dict().items():
        got = tg.state_dict()[name]
        if target == "cuda-host":
            assert_bits(got, want)
        else:
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
