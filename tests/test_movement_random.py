"""join, split, transpose, pad, one_hot on random inputs: a slow loop oracle written from
SPEC-training §15 and §18.1, agreement of every target (symbolic batch dims, every dtype, NaN
payloads and -0.0), and the VJPs against finite differences and PyTorch autograd."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import gradc
from gradc import ops
from gradc.check import finite_differences, to_float64
from gradc.ir.ops.movement import MOVE_DTYPES, PAD_DTYPES
from helpers import assert_bits, run

DTYPES = [d.value for d in MOVE_DTYPES]
PADS = [d.value for d in PAD_DTYPES]


def random_array(rng, shape, dtype):
    """Random elements of any dtype; floats include -0.0, infinities and NaN payloads."""
    dtype = np.dtype(dtype)
    if dtype == np.bool_:
        return rng.integers(0, 2, shape).astype(bool)
    raw = rng.integers(0, 256, (*shape, dtype.itemsize), dtype=np.uint8)
    return np.ascontiguousarray(raw).view(dtype).reshape(shape)  # every bit pattern


# -- the oracle: SPEC's pseudocode, element by element ----------------------------------------

def oracle_join(inputs, axis):
    shape = list(inputs[0].shape)
    shape[axis] = sum(x.shape[axis] for x in inputs)
    y = np.empty(shape, inputs[0].dtype)
    for o in np.ndindex(*shape):
        j, k = o[axis], 0
        while j >= inputs[k].shape[axis]:
            j, k = j - inputs[k].shape[axis], k + 1
        y[o] = inputs[k][o[:axis] + (j,) + o[axis + 1:]]
    return y


def oracle_split(x, axis, sizes):
    out, start = [], 0
    for s in sizes:  # result k holds positions start .. start + s - 1
        shape = list(x.shape)
        shape[axis] = s
        y = np.empty(shape, x.dtype)
        for o in np.ndindex(*shape):
            y[o] = x[o[:axis] + (o[axis] + start,) + o[axis + 1:]]
        out.append(y)
        start += s
    return out


def oracle_transpose(x, perm):
    y = np.empty([x.shape[p] for p in perm], x.dtype)
    for o in np.ndindex(*y.shape):
        p = [0] * x.ndim
        for i, q in enumerate(perm):
            p[q] = o[i]
        y[o] = x[tuple(p)]
    return y


def oracle_pad(x, sp, ep, value):
    y = np.empty(tuple(n + a + b for n, a, b in zip(x.shape, sp, ep)), x.dtype)
    for o in np.ndindex(*y.shape):
        p = tuple(o[i] - sp[i] for i in range(x.ndim))
        y[o] = x[p] if all(0 <= p[i] < x.shape[i] for i in range(x.ndim)) else value
    return y


def oracle_one_hot(indices, values, axis, out_sizes):
    y = np.empty(out_sizes, values.dtype)
    depth = out_sizes[axis]
    for i in np.ndindex(*out_sizes):
        j = list(i)
        j[axis] = 0
        idx = int(indices[tuple(j)])
        if idx < 0:
            idx += depth
        y[i] = values[1] if idx == i[axis] else values[0]
    return y


def bits_equal(got, want):
    assert got.dtype == want.dtype and got.shape == want.shape
    assert got.tobytes() == want.tobytes()


@st.composite
def cases(draw):
    """(op, arrays, attrs) of one op on random small shapes and dtypes."""
    op = draw(st.sampled_from(["join", "split", "transpose", "pad", "one_hot"]))
    rank = draw(st.integers(1, 4))
    shape = [draw(st.integers(1, 3)) for _ in range(rank)]
    rng = np.random.default_rng(draw(st.integers(0, 2 ** 32 - 1)))
    axis = draw(st.integers(0, rank - 1))
    if op == "one_hot":
        idt = draw(st.sampled_from(["int64", "int32", "uint64", "uint32"]))
        depth = draw(st.integers(1, 4))
        shape[axis] = 1
        lo = -depth - 1 if idt.startswith("int") else 0
        idx = rng.integers(lo, depth + 2, shape).astype(idt)
        out = list(shape)
        out[axis] = depth
        vals = random_array(rng, (2,), draw(st.sampled_from(DTYPES)))
        return op, [idx, vals], {"axis": axis, "output_sizes": tuple(out)}
    dtype = draw(st.sampled_from(PADS if op == "pad" else DTYPES))
    x = random_array(rng, shape, dtype)
    if op == "join":
        more = []
        for _ in range(draw(st.integers(0, 2))):
            other = list(shape)
            other[axis] = draw(st.integers(1, 3))
            more.append(random_array(rng, other, dtype))
        return op, [x, *more], {"axis": axis - rank * draw(st.integers(0, 1))}
    if op == "split":
        cuts = sorted(draw(st.sets(st.integers(1, shape[axis] - 1))) if shape[axis] > 1
                      else set())
        bounds = [0, *cuts, shape[axis]]
        sizes = tuple(b - a for a, b in zip(bounds, bounds[1:]))
        return op, [x], {"axis": axis, "split_sizes": sizes}
    if op == "transpose":
        return op, [x], {"permutation": tuple(draw(st.permutations(range(rank))))}
    sp = tuple(draw(st.integers(0, 2)) for _ in range(rank))
    ep = tuple(draw(st.integers(0, 2)) for _ in range(rank))
    value = draw(st.sampled_from([0, 1, 7])) if dtype[0] in "iu" else \
        draw(st.sampled_from([0.0, -0.0, 2.5, float("inf")]))
    return op, [x], {"start_padding": sp, "end_padding": ep, "padding_value": value}


def oracle(op, arrays, attrs):
    if op == "join":
        return [oracle_join(arrays, attrs["axis"] % arrays[0].ndim)]
    if op == "split":
        return oracle_split(arrays[0], attrs["axis"], attrs["split_sizes"])
    if op == "transpose":
        return [oracle_transpose(arrays[0], attrs["permutation"])]
    if op == "pad":
        x = arrays[0]
        return [oracle_pad(x, attrs["start_padding"], attrs["end_padding"],
                           x.dtype.type(attrs["padding_value"]))]
    return [oracle_one_hot(*arrays, attrs["axis"], attrs["output_sizes"])]


def build(op, attrs, n):
    def fn(*vals):
        if op == "join":
            return ops.join(list(vals), **attrs)
        return getattr(ops, op)(*vals, **attrs)
    return fn


@settings(max_examples=50, deadline=None)
@given(cases())
def test_reference_matches_the_loop_oracle(case):
    op, arrays, attrs = case
    got = run(build(op, attrs, len(arrays)), *arrays)
    want = oracle(op, arrays, attrs)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        bits_equal(g, w)


@pytest.mark.parametrize("seed", range(4))
def test_every_target_agrees_on_random_inputs_with_a_symbolic_batch(seed):
    """One graph of all five ops per dtype pair, batch dim N bound at call time."""
    rng = np.random.default_rng(seed)
    dtype = ["float16", "int16", "uint64", "float32"][seed]
    vdtype = ["bool", "float64", "uint8", "float16"][seed]
    g = gradc.Graph("mv")
    a = g.input("a", dtype, ("N", 2, 3))
    b = g.input("b", dtype, ("N", 2, 1))
    i = g.input("i", "int32" if seed % 2 else "uint64", ("N", 1, 3))
    v = g.input("v", vdtype, (2,))
    j = ops.join([a, b, a], 2)
    s0, s1, s2 = ops.split(j, 2, (1, 4, 2))
    t = ops.transpose(s1, (2, 0, 1))
    p = ops.pad(t, (1, 0, 2), (2, 0, 0), padding_value=1)
    o = ops.one_hot(i, v, 1, ("N", 4, 3))
    for k, val in enumerate((j, s0, s2, p, o)):
        g.output(val, f"y{k}")
    n = 3
    idx = rng.integers(-5, 6, (n, 1, 3))
    feeds = {"a": random_array(rng, (n, 2, 3), dtype), "b": random_array(rng, (n, 2, 1), dtype),
             "i": idx.astype(i.type.dtype.numpy), "v": random_array(rng, (2,), vdtype)}
    want = gradc.compile(g, target="reference")(**feeds)
    for target in ("numpy", "c", "onnx"):
        got = gradc.compile(g, target=target)(**feeds)
        for k in want:
            assert_bits(got[k], want[k])


# -- gradients -------------------------------------------------------------------------------

def grad_graph():
    """A float32 graph through every op (one_hot through its values), one output."""
    g = gradc.Graph("fd")
    a = g.input("a", "float32", ("N", 2, 3))
    b = g.input("b", "float32", ("N", 2, 2))
    i = g.input("i", "int64", ("N", 1))
    v = g.input("v", "float32", (2,))
    j = ops.join([a, b, a], 2)
    _, mid, last = ops.split(j, 2, (2, 3, 3))  # the first part gets no cotangent
    t = ops.transpose(ops.mul(mid, last), (2, 0, 1))
    p = ops.pad(t, (1, 0, 0), (0, 0, 2), 0.5)
    o = ops.one_hot(i, v, 1, ("N", 3))
    g.output(p, "p")
    g.output(ops.mul(o, o), "o")
    return g


@pytest.mark.parametrize("seed", range(3))
def test_vjps_match_finite_differences(seed):
    for name, err, scale in finite_differences(grad_graph(), {"N": 2}, seed=seed, points=6):
        assert err <= 1e-6 * (1 + scale), (name, err)


def test_vjps_against_pytorch_autograd():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(7)
    n = 2
    feeds = {"a": rng.standard_normal((n, 2, 3)), "b": rng.standard_normal((n, 2, 2)),
             "i": np.array([[2], [-1]], np.int64), "v": rng.standard_normal(2)}
    cot = {"grad_p": rng.standard_normal((4, n, 4)), "grad_o": rng.standard_normal((n, 3))}
    t = gradc.grad(to_float64(grad_graph()))
    got = gradc.compile(t, target="reference")(**feeds, **cot)
    ta, tb, tv = (torch.tensor(feeds[k], requires_grad=True) for k in "abv")
    j = torch.cat([ta, tb, ta], 2)
    _, mid, last = torch.split(j, [2, 3, 3], 2)
    p = torch.nn.functional.pad((mid * last).permute(2, 0, 1), (0, 2, 0, 0, 1, 0), value=0.5)
    m = torch.nn.functional.one_hot(torch.tensor(feeds["i"][:, 0]) % 3, 3).double()
    o = tv[0] * (1 - m) + tv[1] * m
    (p * torch.tensor(cot["grad_p"])).sum().add((o * o * torch.tensor(cot["grad_o"])).sum()) \
        .backward()
    for k, tt in (("a", ta), ("b", tb), ("v", tv)):
        np.testing.assert_allclose(got[f"grad_{k}"], tt.grad.numpy(), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(got["p"], p.detach().numpy(), rtol=0, atol=0)


def test_gradients_on_every_target():
    t = gradc.grad(grad_graph())
    rng = np.random.default_rng(3)
    feeds = {"a": rng.standard_normal((2, 2, 3)).astype(np.float32),
             "b": rng.standard_normal((2, 2, 2)).astype(np.float32),
             "i": np.array([[0], [5]], np.int64), "v": np.float32([1.5, -2.0]),
             "grad_p": rng.standard_normal((4, 2, 4)).astype(np.float32),
             "grad_o": rng.standard_normal((2, 3)).astype(np.float32)}
    want = gradc.compile(t, target="reference")(**feeds)
    for target in ("numpy", "c", "onnx"):
        got = gradc.compile(t, target=target)(**feeds)
        for k in want:  # grad_v sums in reduce_sum's order: within §1.6 on onnx
            if target == "onnx" and k == "grad_v":
                np.testing.assert_allclose(got[k], want[k], rtol=1e-6)
            else:
                assert_bits(got[k], want[k])
