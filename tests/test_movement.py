"""join, split, transpose, pad, one_hot: SPEC-training §22.6/§22.9 vectors on every target, the
§22.12 rejected arguments, and the IR around the variadic join and the tuple-valued split."""

from __future__ import annotations

import re

import numpy as np
import pytest

import gradc
from gradc import ops
from helpers import assert_bits, compile_for, cuda_targets, f32, run

TARGETS = ("reference", "numpy", "c", "onnx") + cuda_targets()


def run_all(fn, *arrays):
    """Run ``fn`` on every target; the outputs of each (one C build per call)."""
    return {t: run(fn, *arrays, target=t) for t in TARGETS}


def check_everywhere(fn, arrays, wants):
    for target, outs in run_all(fn, *arrays).items():
        assert len(outs) == len(wants), target
        for got, want in zip(outs, wants):
            assert_bits(got, want)


# -- §22.6 ----------------------------------------------------------------------------------

def test_t_jn_1_join_and_split_back():
    a = f32(1, 2, 3, 4, 5, 6).reshape(1, 1, 2, 3)
    b = f32(*range(7, 15)).reshape(1, 1, 2, 4)
    joined = np.array([[[[1, 2, 3, 7, 8, 9, 10], [4, 5, 6, 11, 12, 13, 14]]]], np.float32)

    def fn(x, y):
        j = ops.join([x, y], 3)
        return (j,) + ops.split(j, 3, (3, 4))
    check_everywhere(fn, (a, b), (joined, a, b))


def test_t_tr_1_transpose_and_inverse():
    x = np.arange(12, dtype=np.float32).reshape(2, 3, 2)
    want = np.array([[[0, 2, 4], [6, 8, 10]], [[1, 3, 5], [7, 9, 11]]], np.float32)

    def fn(v):
        t = ops.transpose(v, (2, 0, 1))
        return t, ops.transpose(t, (1, 2, 0))
    check_everywhere(fn, (x,), (want, x))


def test_t_pd_1_pad_and_its_gradient():
    x = f32(1, 2, 3, 4, 5, 6, 7, 8, 1, 2, 3, 4, 5, 6, 7, 8).reshape(1, 1, 4, 4)
    want = np.full((1, 1, 8, 10), 9, np.float32)
    for r in range(4):
        want[0, 0, 1 + r, 2:6] = x[0, 0, r]
    check_everywhere(lambda v: ops.pad(v, (0, 0, 1, 2), (0, 0, 3, 4), 9), (x,), (want,))
    g = gradc.Graph("pd")
    v = g.input("x", "float32", (1, 1, 4, 4))
    g.output(ops.pad(v, (0, 0, 1, 2), (0, 0, 3, 4), 9), "y")
    t = gradc.grad(g)
    dy = np.arange(80, dtype=np.float32).reshape(1, 1, 8, 10)
    dx = np.array([[12, 13, 14, 15], [22, 23, 24, 25], [32, 33, 34, 35], [42, 43, 44, 45]],
                  np.float32).reshape(1, 1, 4, 4)
    for target in TARGETS:
        assert_bits(compile_for(t, target)(x=x, grad_y=dy)["grad_x"], dx)


# -- §22.9 one-hot ----------------------------------------------------------------------------

ONE_HOT = [
    (np.array([0, 3, 2]).reshape(1, 1, 3, 1), [0, 1], 3, (1, 1, 3, 4),
     [[1, 0, 0, 0], [0, 0, 0, 1], [0, 0, 1, 0]]),
    (np.array([0, 2, 1, 0]).reshape(1, 1, 1, 4), [0, 1], 2, (1, 1, 3, 4),
     [[1, 0, 0, 1], [0, 0, 1, 0], [0, 1, 0, 0]]),
    (np.array([0, 3, 2]).reshape(1, 1, 3, 1), [4, 2], 3, (1, 1, 3, 4),
     [[2, 4, 4, 4], [4, 4, 4, 2], [4, 4, 2, 4]]),
    (np.array([-3, 100, 3]).reshape(1, 1, 3, 1), [0, 1], 3, (1, 1, 3, 4),
     [[0, 1, 0, 0], [0, 0, 0, 0], [0, 0, 0, 1]]),
]


@pytest.mark.parametrize("k", range(4), ids=lambda k: f"T-OH-{k + 1}")
def test_t_oh_vectors(k):
    idx, values, axis, sizes, want = ONE_HOT[k]
    idx = idx.astype(np.int32)
    want = np.array(want, np.float32).reshape(sizes)
    check_everywhere(lambda i, v: ops.one_hot(i, v, axis, sizes), (idx, f32(*values)), (want,))


def test_one_hot_keeps_value_bits_and_other_dtypes():
    nan = np.array([0x7FA00001], np.uint32).view(np.float32)[0]  # a signalling NaN payload
    vals = np.array([-0.0, nan], np.float32)
    idx = np.array([[1], [0], [2 ** 64 - 1]], np.uint64)  # beyond int64: no position matches
    want = np.empty((3, 2), np.float32)
    want[:] = -0.0
    want[0, 1] = want[1, 0] = nan
    check_everywhere(lambda i, v: ops.one_hot(i, v, 1, (3, 2)), (idx, vals), (want,))
    mask = np.array([[False, True], [True, False], [False, False]])
    check_everywhere(lambda i, v: ops.one_hot(i, v, 1, (3, 2)),
                     (idx.astype(np.uint32), np.array([False, True])), (mask,))


# -- exactness: -0.0, NaN payloads, every dtype ------------------------------------------------

def test_movement_copies_bits():
    bits = np.array([0x80000000, 0x7FC12345, 0x7F812345, 0xFF800001, 1, 0x3F800000],
                    np.uint32)
    x = bits.view(np.float32).reshape(2, 3)

    def fn(v):
        j = ops.join([v, v], 0)
        a, b = ops.split(j, 1, (1, 2))
        return j, a, b, ops.transpose(j, (1, 0)), ops.pad(v, (1, 0), (0, 2), -0.0)
    ref = run(fn, x)
    assert_bits(ref[0][:2], x)
    assert_bits(ref[4][1, 0], np.float32(-0.0))
    for target in TARGETS[1:]:
        for got, want in zip(run(fn, x, target=target), ref):
            assert_bits(got, want)


# -- §22.12 rejected arguments ---------------------------------------------------------------

def _val(g, name, dtype, shape):
    return g.input(name, dtype, shape)


def _g():
    return gradc.Graph("v")


def v30():
    g = _g()
    ops.join([_val(g, "a", "float32", (1, 2, 3)), _val(g, "b", "float32", (1, 3, 4))], axis=2)


def v31():
    ops.split(_val(_g(), "x", "float32", (2, 5)), axis=1, split_sizes=(2, 2))


def v32():
    ops.transpose(_val(_g(), "x", "float32", (2, 3)), permutation=(0, 0))


def v33():
    ops.pad(_val(_g(), "x", "float32", (2, 2)), (1, 1), (0, 0), padding_mode="reflection")


def v38():
    g = _g()
    ops.one_hot(_val(g, "i", "float32", (1, 3, 1)), _val(g, "v", "float32", (2,)), axis=2,
                output_sizes=(1, 3, 4))


def _join_of(*specs, axis=0):
    g = _g()
    return lambda: ops.join([_val(g, f"x{i}", d, s) for i, (d, s) in enumerate(specs)], axis)


def _one_hot(idx=("int32", (2, 1)), vals=("float32", (2,)), axis=1, sizes=(2, 3)):
    g = _g()
    return lambda: ops.one_hot(_val(g, "i", *idx), _val(g, "v", *vals), axis, sizes)


REJECTED = [
    ("V-30", v30, "join", "inputs[1].shape"),
    ("V-31", v31, "split", "split_sizes"),
    ("V-32", v32, "transpose", "permutation"),
    ("V-33", v33, "pad", "padding_mode"),
    ("V-38", v38, "one_hot", "indices.dtype"),
    ("join-empty", lambda: ops.join([], 0), "join", "inputs"),
    ("join-not-a-list", lambda: ops.join(_val(_g(), "x", "float32", (2,)), 0), "join", "inputs"),
    ("join-dtype", _join_of(("float32", (2,)), ("float16", (2,))), "join", "inputs[1].dtype"),
    ("join-rank", _join_of(("float32", (2,)), ("float32", (2, 1))), "join", "inputs[1].rank"),
    ("join-rank0", _join_of(("float32", ())), "join", "inputs[0].rank"),
    ("join-axis", _join_of(("float32", (2,)), ("float32", (2,)), axis=1), "join", "axis"),
    ("join-symbolic", _join_of(("float32", ("N",)), ("float32", (2,))), "join",
     "inputs[0].shape[0]"),
    ("split-axis", lambda: ops.split(_val(_g(), "x", "int8", (2,)), -2, (2,)), "split", "axis"),
    ("split-size-0", lambda: ops.split(_val(_g(), "x", "int8", (2,)), 0, (2, 0)), "split",
     "split_sizes[1]"),
    ("split-symbolic", lambda: ops.split(_val(_g(), "x", "int8", ("N",)), 0, (2,)), "split",
     "split_sizes"),
    ("transpose-length", lambda: ops.transpose(_val(_g(), "x", "bool", (2, 3)), (0,)),
     "transpose", "permutation"),
    ("pad-bool", lambda: ops.pad(_val(_g(), "x", "bool", (2,)), (1,), (1,)), "pad", "input.dtype"),
    ("pad-length", lambda: ops.pad(_val(_g(), "x", "int8", (2,)), (1, 1), (1,)), "pad",
     "start_padding"),
    ("pad-negative", lambda: ops.pad(_val(_g(), "x", "int8", (2,)), (1,), (-1,)), "pad",
     "end_padding[0]"),
    ("pad-value", lambda: ops.pad(_val(_g(), "x", "int8", (2,)), (1,), (1,), 300), "pad",
     "padding_value"),
    ("pad-nan", lambda: ops.pad(_val(_g(), "x", "float32", (2,)), (1,), (1,), float("nan")),
     "pad", "padding_value"),
    ("pad-symbolic", lambda: ops.pad(_val(_g(), "x", "int8", (2, "N")), (0, 0), (1, 1)), "pad",
     "end_padding[1]"),
    ("one_hot-values-dtype", _one_hot(vals=("float32", (3,))), "one_hot", "values.shape"),
    ("one_hot-rank", _one_hot(idx=("int32", (1,) * 9)), "one_hot", "indices.rank"),
    ("one_hot-axis", _one_hot(axis=2), "one_hot", "axis"),
    ("one_hot-size-1", _one_hot(idx=("int32", (2, 2))), "one_hot", "indices.shape"),
    ("one_hot-sizes", _one_hot(sizes=(3, 3)), "one_hot", "output_sizes[0]"),
    ("one_hot-depth", _one_hot(sizes=(2, "D")), "one_hot", "output_sizes[1]"),
    ("one_hot-length", _one_hot(sizes=(2, 3, 1)), "one_hot", "output_sizes"),
]


@pytest.mark.parametrize("case", REJECTED, ids=[c[0] for c in REJECTED])
def test_rejected_arguments_name_the_field(case):
    _, build, op, field = case
    with pytest.raises(gradc.VerifyError, match=rf"^{op}: {re.escape(field)}: expected "):
        build()


# -- the IR: variadic operand, tuple results, symbolic dims, text round trip --------------------

def test_split_returns_a_tuple_even_of_one():
    g = _g()
    parts = ops.split(_val(g, "x", "float32", (2, 3)), 1, (3,))
    assert isinstance(parts, tuple) and len(parts) == 1 and parts[0].type.shape == (2, 3)


def test_symbolic_batch_dims_flow_and_the_text_round_trips():
    g = gradc.Graph("sym")
    a, b = _val(g, "a", "float32", ("N", 2)), _val(g, "b", "float32", ("N", 3))
    i = _val(g, "i", "int64", ("N", 1))
    j = ops.join([a, b, a], axis=-1)
    assert j.type.shape == ("N", 7)
    assert ops.join([a], 0).type.shape == ("N", 2)  # one input: a symbolic axis passes
    s = ops.split(j, 1, (4, 3))
    t = ops.transpose(s[1], (1, 0))
    p = ops.pad(t, (1, 0), (2, 0), padding_value=-0.0)
    o = ops.one_hot(i, ops.constant(np.array([0, 1], np.int8)), 1, ("N", 5))
    assert (t.type.shape, p.type.shape, o.type.shape) == ((3, "N"), (6, "N"), ("N", 5))
    for k, v in enumerate((j, s[0], p, o)):
        g.output(v, f"y{k}")
    text = str(g)
    assert "join(%a, %b, %a) {axis = 1}" in text
    back = gradc.parse(text)
    assert back == g and str(back) == text
    feeds = {"a": f32(1, 2).reshape(1, 2), "b": f32(3, 4, 5).reshape(1, 3),
             "i": np.array([[4]], np.int64)}
    want = gradc.compile(g, target="reference")(**feeds)
    for target in TARGETS[1:]:
        got = compile_for(g, target)(**feeds)
        for k in want:
            assert_bits(got[k], want[k])


def test_results_are_new_arrays_that_in_place_steps_cannot_change():
    """split and transpose give new arrays even where NumPy could view their input: the NumPy
    target negates ``h`` in place after the split, which must not reach the parts."""
    g = gradc.Graph("alias")
    x = g.input("x", "float32", (2, 3))
    h = ops.add(x, x)
    first, _ = ops.split(h, 0, (1, 1))
    h2 = ops.mul(x, x)
    moved = ops.transpose(ops.reshape(h2, (2, 1, 3)), (1, 0, 2))  # a contiguous view
    for k, v in enumerate((first, ops.neg(h), moved, ops.neg(h2))):
        g.output(v, f"y{k}")
    xv = np.arange(6, dtype=np.float32).reshape(2, 3)
    for target in TARGETS:
        out = compile_for(g, target, passes=None)(x=xv)
        assert_bits(out["y0"], 2 * xv[:1])
        assert_bits(out["y2"], (xv * xv).reshape(1, 2, 3))


def test_padding_values_convert_like_clip_bounds_on_every_target():
    """±inf, a float32 subnormal, a value that rounds to float16's max or inf, -0.0, ints."""
    values = [float("inf"), float("-inf"), 1e-40, 65519.0, 65520.0, -0.0]
    for dtype in ("float16", "float32", "float64", "uint64", "int8"):
        vals = values if dtype.startswith("float") else [0, 7, 2 ** 64 - 1 if dtype[0] == "u"
                                                         else -128]
        x = np.ones((2, 2), dtype)

        def fn(v):
            return tuple(ops.pad(v, (1, 0), (0, 1), p) for p in vals)
        ref = run(fn, x)
        with np.errstate(over="ignore"):  # 65520 rounds to float16's inf, as SPEC §1.3 says
            for got, p in zip(ref, vals):
                assert_bits(got[0, :1], np.array([p], dtype))
        for target in TARGETS[1:]:
            for got, want in zip(run(fn, x, target=target), ref):
                assert_bits(got, want)


def test_one_hot_negative_indices_count_from_the_end():
    for dtype in ("int64", "int32"):
        idx = np.array([-1, -4, -5, 3, 4], dtype).reshape(5, 1)
        want = np.zeros((5, 4), np.int8)
        want[0, 3] = want[1, 0] = want[3, 3] = 1
        check_everywhere(lambda i, v: ops.one_hot(i, v, 1, (5, 4)),
                         (idx, np.array([0, 1], np.int8)), (want,))
