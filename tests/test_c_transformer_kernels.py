"""The C target's kernels for transformer steps: shared kernel functions, and the fused groups
of products (each compared bit for bit with the reference target)."""

from __future__ import annotations

import os
import re
import shutil

import numpy as np
import pytest

import gradc
from gradc import ops
from gradc.backends.c.emit import generate
from helpers import assert_bits

if shutil.which(os.environ.get("CC", "cc").split()[0]) is None:
    pytest.skip("no C compiler", allow_module_level=True)

F32 = np.float32


@pytest.fixture(scope="module")
def cache(tmp_path_factory: pytest.TempPathFactory) -> str:
    return str(tmp_path_factory.mktemp("gradc-cache"))


def layers(depth: int) -> gradc.Graph:
    """``depth`` identical residual layers ``x + relu(x @ w_i^T)`` (distinct weights)."""
    r = np.random.default_rng(0)
    g = gradc.Graph("layers")
    x = g.input("x", "float32", (6, 24))
    with g:
        for i in range(depth):
            w = g.parameter(f"w{i}", (r.standard_normal((24, 24)) * 0.2).astype(F32))
            x = ops.add(x, ops.relu(ops.gemm(x, w, trans_b=True)))
    g.output(x, "y")
    return g


def test_identical_layers_share_their_kernel_functions(cache: str) -> None:
    """The kernels of identical layers have the same text: one C function each, called once
    per layer, so the program grows by calls, not functions, with depth; the profile still
    has a row per call, and the results are the reference's bits."""
    counts = []
    for depth in (3, 5):
        s = gradc.training_step(layers(depth), gradc.optim.AdamW(1e-2), loss="cross_entropy")
        prog = generate(gradc.optimize(s).graph)
        defined = set(re.findall(r"^static int (k\d+)\(", prog.source, re.M))
        called = re.findall(r"rc = (k\d+)\(", prog.source)
        assert set(called) == defined
        counts.append((len(defined), len(called)))
        assert len(prog.kernels) == len(called)
    (f3, c3), (f5, c5) = counts
    assert f5 == f3 and c5 > c3  # the first and last layers differ from the middle ones
    s = gradc.training_step(layers(5), gradc.optim.AdamW(1e-2), loss="cross_entropy")
    r = np.random.default_rng(1)
    feeds = {"x": r.standard_normal((6, 24)).astype(F32), "labels": np.arange(6) % 24,
             "step": np.array([1])}
    exe = gradc.compile(s, "c", profile=True, cache_dir=cache)
    got = exe(**feeds)
    want = gradc.compile(s, "reference")(**feeds)
    for k in want:
        assert_bits(got[k], want[k])
    assert len(exe.profile()) == c5


# (M, N, K) around gc_mm's tile (8 rows x 32 float32 / 16 float64 columns), its chunks of 128
# rows and 256 columns and its k blocks of 256, with 1s and primes (products of fewer than 32
# steps, and 2-D products of fewer than 16 rows against more columns, take gemm.py's kernels)
MM_SHAPES = [(16, 1, 33), (17, 33, 40), (40, 32, 256), (41, 31, 257), (129, 257, 32),
             (24, 64, 513), (136, 40, 300), (16, 300, 45)]


def _products(dtype: type, seed: int) -> tuple[gradc.Graph, dict[str, np.ndarray]]:
    """Plain products (alpha 1, no c) of every flag pair and batch form: none, b shared (a
    linear layer: one product of batch * M rows), a shared, both batched, and a batch of 2 x 3
    where each operand broadcasts on one axis; -0 products, an infinity and a NaN among them."""
    r = np.random.default_rng(seed)
    g = gradc.Graph("products")
    feeds = {}
    forms = [([], []), ([3], [1]), ([1], [2]), ([2], [2]), ([2, 1], [1, 3])]
    for i, (m, n, k) in enumerate(MM_SHAPES):
        for j, (ab, bb) in enumerate(forms):
            ta, tb = bool((i + j) & 1), bool((i + j) & 2)
            a = r.standard_normal(ab + ([k, m] if ta else [m, k])).astype(dtype)
            b = r.standard_normal(bb + ([n, k] if tb else [k, n])).astype(dtype)
            if (i + j) % 5 == 1:
                a.flat[: a.size // 3] = -0.0
            if (i + j) % 7 == 2:
                a.flat[-1], b.flat[0] = np.inf, np.nan
            name = f"{i}_{j}"
            av, bv = g.input("a" + name, a.dtype.name, a.shape), g.input("b" + name, b.dtype.name,
                                                                         b.shape)
            feeds["a" + name], feeds["b" + name] = a, b
            g.output(ops.gemm(av, bv, trans_a=ta, trans_b=tb), "y" + name)
    return g, feeds


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_packed_products_equal_the_reference(dtype: type, cache: str) -> None:
    """gc_mm (mm.h) keeps gemm's canonical order: bit for bit (NaN payloads aside)."""
    g, feeds = _products(dtype, 0)
    kernels = generate(g).source.split("\nstatic int k")[1:]
    assert kernels and all("gc_mm_f" in f for f in kernels)  # every product takes it
    got = gradc.compile(g, "c", passes=None, cache_dir=cache, threads=2)(**feeds)
    want = gradc.compile(g, "reference", passes=None)(**feeds)
    for k in want:
        assert_bits(got[k], want[k], nan_payload=False)


def _weight_gradients(dtype: type) -> tuple[gradc.Graph, dict[str, np.ndarray]]:
    """reduce_sum(gemm(a, dy), batch axes) of every flag pair, batches of 1 to 3 axes, k
    segments around the tile and block sizes; -0 sums, an infinity and a NaN among them."""
    r = np.random.default_rng(1)
    g = gradc.Graph("weight_gradients")
    feeds = {}
    cases = [([4], 9, 33, 37), ([2, 3], 17, 40, 128), ([3], 8, 32, 257), ([1], 12, 5, 32),
             ([2, 1, 2], 33, 65, 300)]
    for i, (batch, m, n, k) in enumerate(cases):
        ta, tb = bool(i & 1), bool(i & 2)
        a = r.standard_normal(batch + ([k, m] if ta else [m, k])).astype(dtype)
        b = r.standard_normal(batch + ([n, k] if tb else [k, n])).astype(dtype)
        if i == 1:
            a[0] = -0.0  # a whole batch of -0 products: its sum is +0
        if i == 2:
            a.flat[0], b.flat[-1] = np.inf, np.nan
        av, bv = g.input(f"a{i}", a.dtype.name, a.shape), g.input(f"b{i}", b.dtype.name, b.shape)
        feeds[f"a{i}"], feeds[f"b{i}"] = a, b
        with g:
            p = ops.gemm(av, bv, trans_a=ta, trans_b=tb)
            s = ops.reduce_sum(p, tuple(range(len(batch))), keepdims=i % 2 == 0)
        g.output(s, f"dw{i}")
    return g, feeds


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_batched_product_summed_over_its_batch_is_one_kernel(dtype: type, cache: str) -> None:
    """The C target fuses reduce_sum(gemm, batch axes) (groups.product_sums): one kernel per
    pair, no batched intermediate, and reduce_sum's order of the per-batch sums, bit for bit."""
    g, feeds = _weight_gradients(dtype)
    prog = generate(g)
    assert sum("gemm_reduce" in label for label in prog.kernels) == len(g.outputs)
    assert not any(label.startswith(("gemm ", "reduce_sum")) for label in prog.kernels)
    got = gradc.compile(g, "c", passes=None, cache_dir=cache, threads=2)(**feeds)
    want = gradc.compile(g, "reference", passes=None)(**feeds)
    for k in want:
        assert_bits(got[k], want[k], nan_payload=False)


def _attention(form: str, shape: tuple[int, int, int, int, int], tk: bool, tv: bool,
               seed: int, with_p: bool = True) -> tuple[gradc.Graph, dict[str, np.ndarray]]:
    """softmax(Q K^T * scale + mask) V as the exporters write it (``form``: an additive -inf
    mask; ``where(mask, -inf, S)``; the same guarded by ``where(is_nan(P), 0, P)``; an additive
    finfo.min mask), over (batch, heads, T queries, L keys, D) with K stored (L, D) or (D, L)
    and V (L, D) or (D, L). The mask has a fully masked query row; Q, K and V hold an infinity
    and a NaN in some rows; the probabilities are returned as well (but under finfo.min)."""
    b, h, t, l_, d = shape
    r = np.random.default_rng(seed)
    g = gradc.Graph("attention")
    q = r.standard_normal((b, h, t, d)).astype(F32)
    k = r.standard_normal((b, h, l_, d) if not tk else (b, h, d, l_)).astype(F32)
    v = r.standard_normal((b, h, l_, d + 3) if not tv else (b, h, d + 3, l_)).astype(F32)
    q[0, 0, 1, 0], k.flat[5], v.flat[7] = np.inf, np.nan, -np.inf
    allowed = np.tril(np.ones((t, l_), bool), k=l_ - t)
    allowed[2] = False  # a fully masked query row
    qv = g.input("q", "float32", q.shape)
    kv = g.input("k", "float32", k.shape)
    vv = g.input("v", "float32", v.shape)
    with g:
        s = ops.mul(ops.gemm(qv, kv, trans_b=not tk), ops.constant(np.float32(d ** -0.5)))
        if form in ("where", "guarded"):
            m = ops.constant(~allowed.reshape(1, 1, t, l_))
            s = ops.where(m, ops.constant(np.float32(-np.inf)), s)
        else:
            low = np.float32(-np.inf) if form == "additive" else np.finfo(F32).min
            s = ops.add(s, ops.constant(np.where(allowed, F32(0), low).reshape(1, 1, t, l_)))
        p = ops.softmax(s, (3,))
        if form == "guarded":
            p = ops.where(ops.is_nan(p), ops.constant(np.float32(0)), p)
        o = ops.gemm(p, vv, trans_b=tv)
    if with_p and form != "finfo_min":  # (there the probabilities stay inside the kernel)
        g.output(p, "p")
    g.output(o, "o")
    return g, {"q": q, "k": k, "v": v}


@pytest.mark.parametrize("form", ["additive", "where", "guarded", "finfo_min"])
@pytest.mark.parametrize("shape,tk,tv", [((2, 3, 13, 13, 7), False, False),
                                         ((1, 2, 9, 40, 16), True, True),
                                         ((2, 1, 17, 33, 64), False, True)])
def test_attention_is_one_kernel_bit_for_bit(form: str, shape: tuple[int, int, int, int, int],
                                             tk: bool, tv: bool, cache: str) -> None:
    """The C target fuses gemm -> scale -> mask -> softmax [-> guard] -> gemm into one kernel
    (backends/c/attention.py) whose probabilities and outputs are the reference's bits: fully
    masked rows (NaN unguarded, 0 guarded, the mean of V under finfo.min), infinities and NaNs
    in Q, K and V, rows and keys that are not multiples of the tiles."""
    g, feeds = _attention(form, shape, tk, tv, seed=sum(shape))
    prog = generate(gradc.optimize(g).graph)
    assert sum("fused attention" in label for label in prog.kernels) == 1, prog.kernels
    assert not any(label.startswith(("softmax", "gemm")) for label in prog.kernels)
    got = gradc.compile(g, "c", cache_dir=cache, threads=2)(**feeds)
    want = gradc.compile(g, "reference")(**feeds)
    for k in want:
        assert_bits(got[k], want[k], nan_payload=False)
    if form == "guarded":
        assert (want["p"][:, :, 2] == 0).all()


@pytest.mark.parametrize("ignore_index,specials", [(None, False), (3, False), (None, True)])
def test_token_cross_entropy_runs_row_by_row(ignore_index: int | None, specials: bool,
                                             cache: str) -> None:
    """Token-level cross-entropy's kernels over the logits (log_softmax, the labels' one-hot,
    the sums over the class axis, and the gradient's) become row kernels (rows.py) whose
    results are the reference's bits: 3 x 5 rows of 37 classes (blocks of 8 rows and a rest),
    an ignored label, or logits with an infinity and a NaN (which make the loss NaN)."""
    r = np.random.default_rng(2)
    g = gradc.Graph("lm")
    x = g.input("x", "float32", (3, 5, 6))
    w = g.parameter("w", (r.standard_normal((6, 37)) * 0.5).astype(F32))
    with g:
        logits = ops.gemm(x, ops.reshape(w, (1, 6, 37)))
    g.output(logits, "logits")
    s = gradc.training_step(g, gradc.optim.AdamW(1e-2), loss="cross_entropy", class_axis=2,
                            ignore_index=ignore_index)
    prog = generate(gradc.optimize(s).graph)
    rows = [label for label in prog.kernels if label.startswith("fused rows")]
    assert len(rows) == 2 and "log_softmax" in rows[0] and "one_hot" in rows[0], prog.kernels
    assert not any(label.startswith(("log_softmax", "one_hot")) for label in prog.kernels)
    xs = r.standard_normal((3, 5, 6)).astype(F32)
    if specials:
        xs[1, 2, 0], xs[2, 4, 3] = np.inf, np.nan
    feeds = {"x": xs, "labels": r.integers(0, 37, (3, 5)), "step": np.array([1])}
    feeds["labels"][0, 0] = 3
    got = gradc.compile(s, "c", cache_dir=cache, threads=2)(**feeds)
    want = gradc.compile(s, "reference")(**feeds)
    for k in want:
        assert_bits(got[k], want[k], nan_payload=False)


@pytest.mark.parametrize("form", ["additive", "where"])
@pytest.mark.parametrize("shape,tk,tv", [((2, 3, 13, 13, 7), False, False),
                                         ((1, 2, 9, 40, 16), False, True)])
def test_attention_gradient_is_one_kernel_bit_for_bit(form: str, shape: tuple[int, int, int,
                                                                             int, int],
                                                      tk: bool, tv: bool, cache: str) -> None:
    """gradc.grad of the attention graphs above: dP, softmax's VJP, the mask's, the scale and
    the three products become one kernel (attention_grad.py) whose dQ, dK and dV are the
    reference's bits, fully masked rows, infinities and NaNs included; V stored transposed,
    dV's product stays apart. (The guarded form's gradient reads the guard's mask between dP
    and softmax's VJP, and K stored transposed makes dK^T with dS second: both keep their own
    kernels.)"""
    g, feeds = _attention(form, shape, tk, tv, seed=sum(shape) + 1, with_p=False)
    dg = gradc.grad(g, wrt=["q", "k", "v"])
    r = np.random.default_rng(5)
    for v in dg.inputs:
        if v.name not in feeds:
            feeds[v.name] = r.standard_normal(v.type.shape).astype(F32)
    prog = generate(gradc.optimize(dg).graph)
    assert sum("fused attention_grad" in label for label in prog.kernels) == 1, prog.kernels
    assert sum("fused attention (" in label for label in prog.kernels) == 1, prog.kernels
    got = gradc.compile(dg, "c", cache_dir=cache, threads=2)(**feeds)
    want = gradc.compile(dg, "reference")(**feeds)
    for k in want:
        assert_bits(got[k], want[k], nan_payload=False)
