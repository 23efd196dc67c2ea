"""The "numpy" target: generated modules agree bit for bit with the reference target.

Covers every op and dtype (Hypothesis, raw-byte comparison), hand-built fused groups, symbolic
dims bound at call time, the golden source of one small graph (GRADC_UPDATE_GOLDEN=1 rewrites
tests/golden/*.py), names carrying code-injection payloads, and importing the source on its own.
"""

from __future__ import annotations

import ast
import importlib.util
import io
import os
import re
import sys
import tokenize
from pathlib import Path
from typing import Any, Callable

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import gradc
from gradc import ops
from gradc.backends.numpy.emit import EMITTERS
from gradc.ir.fused import make_fused
from gradc.ir.ops.registry import REGISTRY

GOLDEN = Path(__file__).parent / "golden"
FLOATS = ["float16", "float32", "float64"]
INTS = ["int64", "int32", "int16", "int8", "uint64", "uint32", "uint16", "uint8"]
SETTINGS = settings(max_examples=30, deadline=None)

# NaNs with payloads (quiet, negative, signaling), -0.0, +-inf, the largest and a subnormal.
SPECIAL_BITS = {
    "float16": [0x7E01, 0xFE03, 0x7C05, 0x8000, 0x7C00, 0xFC00, 0x7BFF, 0x0001],
    "float32": [0x7FC00123, 0xFFC00042, 0x7F800077, 0x80000000, 0x7F800000, 0xFF800000,
                0x7F7FFFFF, 0x00000001],
    "float64": [0x7FF8000000000ABC, 0xFFF8000000000001, 0x7FF0000000000123,
                0x8000000000000000, 0x7FF0000000000000, 0xFFF0000000000000, 0x1],
}
UINT = {2: np.uint16, 4: np.uint32, 8: np.uint64}


# -- data and comparison --------------------------------------------------------------------
def make_array(seed: int, dtype: str, shape: tuple, special: bool = True,
               ties: bool = True) -> np.ndarray:
    """Random data: small integers (ties), fractions, and for floats the special values."""
    rng = np.random.default_rng(seed)
    dt = np.dtype(dtype)
    if dt.kind == "f":
        a = rng.integers(-4, 5, size=shape).astype(np.float64)
        if not ties:
            a = a + rng.random(shape)
        a = a.astype(dt)
        if special and a.size:
            flat = a.reshape(-1).view(UINT[dt.itemsize])
            picks = rng.random(flat.size) < 0.2
            flat[picks] = rng.choice(np.array(SPECIAL_BITS[dtype], flat.dtype), picks.sum())
        return a
    if dt == np.bool_:
        return rng.random(shape) < 0.5
    info = np.iinfo(dt)
    a = rng.integers(max(info.min, -100), min(info.max, 100), size=shape, endpoint=True)
    a = a.astype(dt)
    if special and a.size:
        flat = a.reshape(-1)
        picks = rng.random(flat.size) < 0.2
        flat[picks] = rng.choice(np.array([info.min, info.max, 0], dt), picks.sum())
    return a


def assert_same(got: dict, want: dict) -> None:
    """Same output names, dtypes, shapes and raw bytes (NaN payloads and -0.0 included)."""
    assert list(got) == list(want)
    for k in want:
        g, w = got[k], want[k]
        assert isinstance(g, np.ndarray), (k, type(g))
        assert g.dtype == w.dtype and g.shape == w.shape, (k, g.dtype, g.shape, w.dtype, w.shape)
        assert g.tobytes() == w.tobytes(), f"{k}: got\n{g}\nwant\n{w}"


def compare(g: gradc.Graph, feeds: dict[str, np.ndarray], passes: Any = None,
            shapes: dict | None = None) -> gradc.Executable:
    """Run ``g`` on both targets; outputs must match bit for bit and feeds stay untouched."""
    ex = gradc.compile(g, target="numpy", passes=passes, shapes=shapes)
    ref = gradc.compile(g, target="reference", passes=passes, shapes=shapes)
    before = {k: v.copy() for k, v in feeds.items()}
    got = ex(**feeds)
    for k, v in feeds.items():
        assert v.tobytes() == before[k].tobytes(), f"input {k!r} was modified"
        for o in got.values():
            assert not np.shares_memory(o, v), f"an output aliases input {k!r}"
    assert_same(got, ref(**feeds))
    return ex


def check_op(fn: Callable, *arrays: np.ndarray) -> gradc.Executable:
    """Graph with inputs x0.. and outputs y0.. = fn(inputs); compare the two targets."""
    g = gradc.Graph("t")
    vals = [g.input(f"x{i}", a.dtype.name, a.shape) for i, a in enumerate(arrays)]
    out = fn(*vals)
    for i, v in enumerate(out if isinstance(out, tuple) else (out,)):
        g.output(v, f"y{i}")
    return compare(g, {f"x{i}": a for i, a in enumerate(arrays)})


seeds = st.integers(0, 2**32 - 1)
shapes = st.lists(st.integers(1, 4), min_size=1, max_size=4).map(tuple)


# -- every op, every dtype ------------------------------------------------------------------
def test_every_registered_op_has_an_emitter():
    assert set(REGISTRY) <= set(EMITTERS)


@SETTINGS
@given(st.sampled_from(FLOATS + ["int32", "int16", "int8"]), shapes, seeds)
def test_relu_and_relu_grad(dtype, shape, seed):
    x, dy = make_array(seed, dtype, shape), make_array(seed + 1, dtype, shape)
    check_op(lambda a, b: (ops.relu(a), ops.relu_grad(a, b), ops.relu(ops.neg(a))), x, dy)
    # a fresh temporary is zeroed in place
    ex = check_op(lambda a, b: ops.relu_grad(a, ops.relu_grad(b, ops.neg(b))), x, dy)
    assert re.search(r"_keep\(\w+ > 0, (\w+), out=\1\)", ex.source)


@SETTINGS
@given(st.sampled_from(FLOATS + INTS), shapes, seeds, st.data())
def test_clip_and_clip_grad(dtype, shape, seed, data):
    x, dy = make_array(seed, dtype, shape), make_array(seed + 1, dtype, shape)
    if dtype in FLOATS:
        bound = st.sampled_from([-2.0, -0.0, 0.0, 1.0, 3.5, 1e-30, np.inf, -np.inf, 7e4])
    else:
        info = np.iinfo(dtype)
        bound = st.sampled_from([info.min, info.max, 0]) | st.integers(max(info.min, -5),
                                                                        min(info.max, 5))
    mn, mx = data.draw(bound), data.draw(bound)
    check_op(lambda a, b: (ops.clip(a, mn, mx), ops.clip_grad(a, b, mn, mx),
                           ops.clip(ops.identity(ops.clip(a, mx, mn)), mn, mx),
                           ops.clip_grad(a, ops.clip_grad(b, a, mn, mx), mn, mx)), x, dy)


@st.composite
def broadcast_pair(draw):
    shape = draw(shapes)
    other = list(shape[draw(st.integers(0, len(shape))):])
    for i in range(len(other)):
        if draw(st.booleans()):
            other[i] = 1
    return (shape, tuple(other)) if draw(st.booleans()) else (tuple(other), shape)


@SETTINGS
@given(st.sampled_from(FLOATS + INTS), broadcast_pair(), seeds)
def test_add_sub_mul_neg_with_broadcasting(dtype, pair, seed):
    a, b = make_array(seed, dtype, pair[0]), make_array(seed + 1, dtype, pair[1])
    ex = check_op(lambda p, q: (ops.add(p, q), ops.sub(p, q), ops.mul(p, q), ops.neg(p),
                                ops.mul(ops.sub(ops.add(p, q), q), ops.neg(q))), a, b)
    assert "out=" in ex.source


@SETTINGS
@given(st.sampled_from(FLOATS + INTS), seeds)
def test_rank_0_values(dtype, seed):
    a, b = make_array(seed, dtype, ()), make_array(seed + 1, dtype, ())
    check_op(lambda p, q: (ops.add(p, q), ops.neg(ops.mul(p, q)), ops.identity(p),
                           ops.reduce_sum(ops.sub(p, q))), a, b)


@SETTINGS
@given(st.sampled_from(FLOATS + INTS + ["bool"]), st.sampled_from(FLOATS + INTS + ["bool"]),
       shapes, seeds)
def test_cast_identity_expand_reshape(src, dst, shape, seed):
    # float -> integer is defined only for in-range values (math.py), so no specials there
    x = make_array(seed, src, shape, special=np.dtype(dst).kind == "f" or src == "bool")
    like = np.zeros((2,) + shape, np.float32)
    check_op(lambda a, b: (ops.cast(a, dst), ops.identity(a), ops.expand(a, b),
                           ops.reshape(a, (-1,)), ops.reshape(ops.cast(a, dst), shape[::-1])),
             x, like)


@SETTINGS
@given(st.sampled_from(FLOATS + INTS + ["bool"]), st.lists(st.integers(1, 5), max_size=3),
       seeds)
def test_constants_are_exact(dtype, shape, seed):
    c = make_array(seed, dtype, tuple(shape))
    g = gradc.Graph("consts")
    x = g.input("x", dtype, c.shape)
    g.output(ops.constant(c, graph=g), "c")
    g.output(ops.identity(x) if dtype == "bool" else ops.add(x, ops.constant(c, graph=g)), "y")
    ex = compare(g, {"x": make_array(seed + 1, dtype, c.shape)})
    out = ex(x=c)
    assert out["c"].tobytes() == c.tobytes()
    out["c"][...] = 0  # the caller owns its outputs: the next call is unaffected
    assert ex(x=c)["c"].tobytes() == c.tobytes()


def test_graph_without_inputs_or_statements():
    g = gradc.Graph("only_constants")
    g.output(ops.constant(np.array([1.5, -0.0], np.float16), graph=g), "c")
    g.output(ops.constant(np.arange(20, dtype=np.uint8), graph=g), "d")
    compare(g, {})


@SETTINGS
@given(st.sampled_from(FLOATS + ["int64", "int32", "uint8", "int8"]), shapes, seeds, st.data())
def test_reduce_sum(dtype, shape, seed, data):
    x = make_array(seed, dtype, shape, special=data.draw(st.booleans()), ties=False)
    axes = data.draw(st.sets(st.integers(0, len(shape) - 1)))
    keep = data.draw(st.booleans())
    check_op(lambda a: (ops.reduce_sum(a, sorted(axes), keep), ops.reduce_sum(a)), x)


@st.composite
def windows(draw, shape, zero_ok):
    off, size, stride, out = [], [], [], []
    for n in shape:
        o = draw(st.integers(0, n - 1))
        s = draw(st.integers(1, n - o))
        t = draw(st.sampled_from([-3, -2, -1, 1, 2, 3] + ([0] if zero_ok else [])))
        hi = 3 if t == 0 else 1 + (s - 1) // abs(t)
        off.append(o), size.append(s), stride.append(t), out.append(draw(st.integers(1, hi)))
    return tuple(off), tuple(size), tuple(stride), tuple(out)


@SETTINGS
@given(st.sampled_from(FLOATS + INTS), shapes, seeds, st.data())
def test_slice_and_slice_grad(dtype, shape, seed, data):
    off, size, stride, out = data.draw(windows(shape, zero_ok=True))
    x = make_array(seed, dtype, shape)
    check_op(lambda a: (ops.slice(a, off, size, stride, out),
                        ops.neg(ops.slice(ops.neg(a), off, size, stride, out))), x)
    off, size, stride, out = data.draw(windows(shape, zero_ok=False))
    dy = make_array(seed + 1, dtype, out)
    check_op(lambda a: ops.slice_grad(a, shape, off, size, stride), dy)


@pytest.mark.parametrize("dtype", ["float32", "int32"])
def test_negative_stride_views_are_not_written_in_place(dtype):
    # NumPy 2.4 gets np.negative(v, out=v) wrong for such views; the target must not do that.
    x = np.array([[0, 1], [2, 3], [4, 5]], dtype).reshape(1, 1, 3, 2)
    ex = check_op(lambda a: ops.neg(ops.slice(ops.neg(a), (0, 0, 0, 0), (1, 1, 3, 1),
                                              (-3, -3, -2, -3), (1, 1, 2, 1))), x)
    assert "out=" not in ex.source


@st.composite
def pool_case(draw, dtypes):
    nd = draw(st.sampled_from([2, 2, 3]))
    spatial = tuple(draw(st.integers(1, 5 if nd == 2 else 3)) for _ in range(nd))
    shape = (draw(st.integers(1, 2)), draw(st.integers(1, 2))) + spatial
    p = {k: tuple(draw(st.integers(lo, hi)) for _ in range(nd)) for k, lo, hi in [
        ("window_size", 1, 3), ("strides", 1, 3), ("start_padding", 0, 2),
        ("end_padding", 0, 2), ("dilations", 1, 2)]}
    floor = [max(1, (n + sp + ep - ((w - 1) * d + 1)) // s + 1) for n, w, s, sp, ep, d in
             zip(spatial, *(p[k] for k in ("window_size", "strides", "start_padding",
                                           "end_padding", "dilations")))]
    out = tuple(draw(st.integers(1, f + 1)) for f in floor)
    return draw(st.sampled_from(dtypes)), shape, p, out


@SETTINGS
@given(pool_case(FLOATS + INTS), seeds)
def test_max_pooling(case, seed):
    dtype, shape, p, out = case
    x = make_array(seed, dtype, shape)
    check_op(lambda a: ops.max_pooling(a, **p, output_indices=True, output_sizes=out)
             + (ops.max_pooling(a, **p),), x)


@SETTINGS
@given(pool_case(FLOATS), seeds, st.booleans())
def test_max_pooling_grad(case, seed, ties):
    dtype, shape, p, out = case
    x = make_array(seed, dtype, shape)
    dy = make_array(seed + 1, dtype, shape[:2] + out, ties=ties)
    check_op(lambda a, b: ops.max_pooling_grad(a, b, **p), x, dy)


SCALES = [0.25, 0.5, 0.7, 1.0, 1.5, 2.0, 2.5, 3.0, 1 / 3]


@st.composite
def resample_case(draw, dtypes):
    rank = draw(st.integers(1, 4))
    size = st.integers(1, 4 if rank <= 2 else 3)
    offsets = st.sampled_from([0.0, 0.5, -0.5, 0.25, 1.0, -1.3, 0.7])
    return (draw(st.sampled_from(dtypes)), tuple(draw(size) for _ in range(rank)),
            tuple(draw(size) for _ in range(rank)), dict(
                scales=tuple(draw(st.sampled_from(SCALES)) for _ in range(rank)),
                interpolation_mode=draw(st.sampled_from(["nearest", "linear"])),
                rounding_direction=draw(st.sampled_from(["decreasing", "increasing"])),
                input_pixel_offsets=tuple(draw(offsets) for _ in range(rank)),
                output_pixel_offsets=tuple(draw(offsets) for _ in range(rank))))


@SETTINGS
@given(resample_case(FLOATS + ["int8", "uint8"]), seeds, st.booleans())
def test_resample(case, seed, ties):
    dtype, shape, out, f = case
    x = make_array(seed, dtype, shape, ties=ties)
    check_op(lambda a: ops.resample(a, output_sizes=out, **f), x)


@SETTINGS
@given(resample_case(FLOATS), seeds, st.booleans())
def test_resample_grad(case, seed, special):
    dtype, shape, out, f = case
    dy = make_array(seed, dtype, out, special=special, ties=False)
    check_op(lambda a: ops.resample_grad(a, shape, **f), dy)


# -- fused groups (built by hand, following gradc.ir.fused) ---------------------------------
def fused(g: gradc.Graph, args: list, kind: str, fn: Callable) -> tuple:
    """A fused node of ``kind`` whose body computes ``fn`` of fresh body inputs."""
    body = gradc.Graph(f"{kind}_body")
    ins = [body.input(f"a{i}", a.type.dtype, a.type.shape) for i, a in enumerate(args)]
    outs = fn(*ins)
    for i, o in enumerate(outs if isinstance(outs, tuple) else (outs,)):
        body.output(o, f"r{i}")
    return make_fused(g, args, body, kind).outputs


@SETTINGS
@given(st.sampled_from(FLOATS), seeds)
def test_fused_elementwise_chain(dtype, seed):
    g = gradc.Graph("chain")
    x = g.input("x", dtype, ("N", 4))
    b = g.input("b", dtype, (4,))
    (y,) = fused(g, [x, b], "elementwise", lambda p, q: ops.neg(ops.clip(ops.relu(
        ops.add(ops.mul(p, q), p)), -1.0, 2.5)))
    (u, v) = fused(g, [y, x], "elementwise", lambda p, q: (
        ops.relu_grad(q, ops.sub(p, q)), ops.clip_grad(p, ops.mul(q, q), 0.0, 1.0)))
    g.output(y, "y"), g.output(u, "u"), g.output(v, "v")
    feeds = {"x": make_array(seed, dtype, (3, 4)), "b": make_array(seed + 1, dtype, (4,))}
    ex = compare(g, feeds)
    src = ex.source
    assert "out=" in src and "np.copyto(" in src and "_keep(" in src and "# fused group" in src


@SETTINGS
@given(st.sampled_from(FLOATS), seeds, st.data())
def test_fused_max_pooling_grad_with_prologue_and_epilogue(dtype, seed, data):
    p = dict(window_size=(2, 2), strides=data.draw(st.sampled_from([(1, 1), (2, 2)])))
    xs, ys = (1, 2, 5, 5), (1, 2) + ((4, 4) if p["strides"] == (1, 1) else (2, 2))
    g = gradc.Graph("pool_fused")
    x, r, dy, c = (g.input(n, dtype, s) for n, s in [("x", xs), ("r", ys), ("dy", ys),
                                                    ("c", xs)])
    (dx,) = fused(g, [x, r, dy, c], "max_pooling_grad", lambda a, b, d, e: ops.clip_grad(
        e, ops.max_pooling_grad(a, ops.relu_grad(b, d), **p), -1.0, 2.0))
    g.output(dx, "dx")
    feeds = {n: make_array(seed + i, dtype, s) for i, (n, s) in
             enumerate([("x", xs), ("r", ys), ("dy", ys), ("c", xs)])}
    ex = compare(g, feeds)
    assert "_max_pooling_grad(" in ex.source
    assert re.search(r"_keep\(~\(\(c <= [^,]+, (\w+), out=\1\)", ex.source)  # in place


@SETTINGS
@given(st.sampled_from(FLOATS), seeds)
def test_fused_slice_grad_and_resample_grad(dtype, seed):
    g = gradc.Graph("anchors")
    dy = g.input("dy", dtype, ("N", 2, 3))
    s = g.input("s", dtype, (3,))
    m = g.input("m", dtype, ("N", 4, 6))
    (a,) = fused(g, [dy, s, m], "slice_grad", lambda d, t, k: ops.add(ops.slice_grad(
        ops.mul(d, t), ("N", 4, 6), (0, 1, 0), ("N", 3, 5), (1, -2, 2)), k))
    (b,) = fused(g, [dy, m], "resample_grad", lambda d, k: ops.relu_grad(k, ops.resample_grad(
        ops.neg(d), ("N", 4, 6), (1.0, 2.0, 2.0), "linear")))
    g.output(a, "a"), g.output(b, "b")
    for n in (1, 3):
        compare(g, {"dy": make_array(seed, dtype, (n, 2, 3)), "s": make_array(seed, dtype, (3,)),
                    "m": make_array(seed + 1, dtype, (n, 4, 6))})


def test_fused_output_of_a_body_input_and_shared_outputs():
    g = gradc.Graph("aliases")
    x = g.input("x", "float32", (3,))
    p, q = fused(g, [x], "group", lambda a: (ops.identity(a), ops.relu(a)))
    g.output(p, "p"), g.output(q, "q"), g.output(q, "q2"), g.output(x, "x_again")
    compare(g, {"x": np.array([-1.0, 0.0, 2.0], np.float32)})


# -- random graphs (tests/graphgen.py), with and without the fusion passes ------------------
@settings(max_examples=15, deadline=None)
@given(st.integers(0, 2**32 - 1), st.integers(1, 12))
def test_random_training_graphs(seed, n_ops):
    from graphgen import make_graph
    from gradc.passes.manager import PASSES

    case = make_graph(seed, n_ops)
    compare(case.graph, case.feeds, shapes=case.shapes)
    compare(case.graph, case.feeds, passes="default")  # symbols bound at call time
    fusion = [p for p in ("fuse-elementwise", "fuse-gradients") if p in PASSES]
    if fusion:
        compare(case.graph, case.feeds, passes=fusion, shapes=case.shapes)


# -- symbolic dims --------------------------------------------------------------------------
def test_symbolic_dims_are_bound_at_call_time():
    g = gradc.Graph("sym")
    x = g.input("x", "float32", ("N", "C", 4))
    w = g.input("w", "float32", ("C", 1))
    h = ops.relu(ops.mul(x, w))
    h = ops.slice(h, (0, 0, 1), ("N", "C", 3), (1, -1, 2))
    h = ops.resample(ops.reshape(h, ("C", "N", 2)), (1.0, 1.0, 2.0))
    g.output(h, "h")
    g.output(ops.slice_grad(ops.reshape(h, ("N", "C", 4)), ("N", "C", 9), (0, 0, 1),
                            ("N", "C", 8), (1, 1, 2)), "back")
    ex = gradc.compile(g, target="numpy", passes=None)
    assert "N = x.shape[0]" in ex.source and "C = x.shape[1]" in ex.source
    for n, c in [(1, 1), (2, 3), (5, 2)]:
        compare(g, {"x": make_array(n, "float32", (n, c, 4)),
                    "w": make_array(c, "float32", (c, 1))})
    compare(g, {"x": make_array(0, "float32", (2, 3, 4)), "w": make_array(1, "float32", (3, 1))},
            shapes={"N": 2})
    with pytest.raises(gradc.InputError):
        gradc.compile(g, target="numpy", passes=None, shapes={"N": 2})(
            x=np.zeros((3, 3, 4), np.float32), w=np.zeros((3, 1), np.float32))


# -- golden source --------------------------------------------------------------------------
def small_graph() -> gradc.Graph:
    g = gradc.Graph("small_step")
    x = g.input("x", "float32", ("N", 4))
    dy = g.input("dy", "float32", ("N", 2))
    bits = np.array([0x3F000000, 0x80000000, 0x7FC00001, 0x40400000], np.uint32)
    (h,) = fused(g, [x, ops.constant(bits.view(np.float32), graph=g)], "elementwise",
                 lambda a, c: ops.clip(ops.relu(ops.add(ops.mul(a, a), c)), 0.0, 6.0))
    g.output(ops.slice(h, (0, 0), ("N", 4), (1, -2)), "y")
    (dx,) = fused(g, [dy, x], "slice_grad", lambda d, a: ops.relu_grad(a, ops.slice_grad(
        d, ("N", 4), (0, 0), ("N", 4), (1, -2))))
    g.output(dx, "dx")
    return g


def test_golden_source():
    g = small_graph()
    src = gradc.compile(g, target="numpy", passes=None).source
    path = GOLDEN / "numpy_small_step.py"
    if os.environ.get("GRADC_UPDATE_GOLDEN") == "1":
        GOLDEN.mkdir(exist_ok=True)
        path.write_text(src)
    assert src == path.read_text(), "generated source changed (GRADC_UPDATE_GOLDEN=1 updates)"
    feeds = {"x": make_array(1, "float32", (3, 4)), "dy": make_array(2, "float32", (3, 2))}
    compare(g, feeds)


# -- injection ------------------------------------------------------------------------------
PAYLOADS = [
    '__import__("os").system("echo pwned")',
    "'); __import__('os').system('echo pwned'); ('",
    '"""\n__import__("os").system("echo pwned")\n"""',
    "x\nimport os; os.system('echo pwned')  # \\",
    "\r\n#\x00\x0c\u2028\u00e9\\N{BULLET}\\x41{0}{{}}%s",
    "coding: utf-7 +AAo-__import__('os').system('echo pwned')",
]


def test_names_with_injection_payloads_compile_run_and_execute_nothing(tmp_path, monkeypatch):
    calls = []
    monkeypatch.setattr(os, "system", lambda *a: calls.append(a) or 0)
    canary = tmp_path / "pwned"
    touch = f'__import__("pathlib").Path({str(canary)!r}).touch()'
    names = PAYLOADS + [touch, "class", "np", "ENTRY", "_product", "len", "a-b", "a_b", "0"]
    g = gradc.Graph(names[2] + names[5])
    sym = names[1]
    ins = [g.input(n, "float32", (sym, 2)) for n in names]
    acc = ins[0]
    for i, v in enumerate(ins[1:]):
        acc = ops.add(acc, v)
        g.output(ops.relu(acc), f"{names[-1 - i]}\"'\n out {i}")
    feeds = {n: make_array(i, "float32", (3, 2)) for i, n in enumerate(names)}
    ex = compare(g, feeds)
    assert list(ex(**feeds)) == [v.name for v in g.outputs]
    src = ex.source
    bad = {"__import__", "os", "system", "pathlib", "Path", "touch", "eval", "exec", "open"}
    for tok in tokenize.generate_tokens(io.StringIO(src).readline):
        assert tok.type != tokenize.NAME or tok.string not in bad, tok  # payloads stay data
    assert src.isascii() and "coding" not in "\n".join(src.splitlines()[:2])
    mod = import_source(src, tmp_path / "injected.py")
    assert mod.INPUT_NAMES == tuple(names) and mod.GRAPH_NAME == g.name
    got = mod.ENTRY(*(feeds[n] for n in names))
    assert_same(got, ex(**feeds))
    assert not calls and not canary.exists()


# -- standalone module ----------------------------------------------------------------------
def import_source(src: str, path: Path) -> Any:
    """Import ``src`` from a file while gradc cannot be imported."""
    path.write_text(src, encoding="utf-8")
    spec = importlib.util.spec_from_file_location(f"gen_{path.stem}", path)
    mod = importlib.util.module_from_spec(spec)
    real = sys.modules["gradc"]
    sys.modules["gradc"] = None  # type: ignore[assignment]  # any `import gradc` fails
    try:
        spec.loader.exec_module(mod)
    finally:
        sys.modules["gradc"] = real
    return mod


def test_source_imports_on_its_own(tmp_path):
    g = gradc.examples.train_step()
    ex = gradc.compile(g, target="numpy", passes=None)
    tree = ast.parse(ex.source)
    imports = [n for n in ast.walk(tree) if isinstance(n, (ast.Import, ast.ImportFrom))]
    assert [ast.unparse(n) for n in imports] == ["import numpy as np"]
    mod = import_source(ex.source, tmp_path / "train_step.py")
    feeds = {v.name: make_array(i, v.type.dtype.value, tuple(2 if isinstance(d, str) else d
                                                             for d in v.type.shape), ties=False)
             for i, v in enumerate(g.inputs)}
    want = gradc.compile(g, target="reference", passes=None)(**feeds)
    assert_same(mod.forward_grad(*feeds.values()), want)
    assert_same(mod.ENTRY(**feeds), want)
    assert mod.OUTPUT_NAMES == tuple(want)


def test_unknown_option_is_rejected():
    g = gradc.examples.pool_step()
    with pytest.raises(gradc.VerifyError, match="no such option"):
        gradc.compile(g, target="numpy", passes=None, bogus=1)
