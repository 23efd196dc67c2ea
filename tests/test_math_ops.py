"""Arithmetic and structural ops: NumPy semantics for one dtype (see ir/ops/math.py)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, strategies as st

import gradc
from gradc import ops
from gradc.ir.ops import REGISTRY
from helpers import assert_bits, run


def test_integer_overflow_wraps():
    a = np.array([127, -128, 100], np.int8)
    b = np.array([1, -1, 100], np.int8)
    assert_bits(run(ops.add, a, b)[0], np.array([-128, 127, -56], np.int8))
    assert_bits(run(ops.sub, a, b)[0], np.array([126, -127, 0], np.int8))
    assert_bits(run(ops.mul, a, b)[0], np.array([127, -128, 16], np.int8))
    assert_bits(run(ops.neg, np.array([1, 0], np.uint8))[0], np.array([255, 0], np.uint8))
    assert_bits(run(ops.neg, np.array([-128], np.int8))[0], np.array([-128], np.int8))


def test_float16_arithmetic_rounds_once():
    a = np.array([2048, 0.1, 65504], np.float16)
    b = np.array([1, 0.2, 65504], np.float16)
    with np.errstate(over="ignore"):
        want = (a.astype(np.float32) + b.astype(np.float32)).astype(np.float16)
    assert_bits(run(ops.add, a, b)[0], want)


@given(st.sampled_from(["float32", "float64", "int32", "uint8", "int64"]),
       st.lists(st.integers(1, 3), min_size=0, max_size=3),
       st.lists(st.booleans(), min_size=3, max_size=3), st.integers(0, 2**31))
def test_broadcasting_matches_numpy(dtype, shape, ones, seed):
    rng = np.random.default_rng(seed)
    shape_b = [1 if o else n for n, o in zip(shape, ones)][: len(shape)]
    a = (rng.standard_normal(shape) * 50).astype(dtype)
    b = (rng.standard_normal(shape_b[1:] if shape_b else shape_b) * 50).astype(dtype)
    for op, f in ((ops.add, np.add), (ops.sub, np.subtract), (ops.mul, np.multiply)):
        with np.errstate(all="ignore"):
            want = np.asarray(f(a, b), dtype=dtype)
        assert_bits(run(op, a, b)[0], want)


def test_python_scalar_operand_becomes_constant_of_same_dtype():
    x = np.array([1.5, -2.0], np.float32)
    assert_bits(run(lambda v: ops.mul(v, 2), x)[0], np.array([3.0, -4.0], np.float32))
    assert_bits(run(lambda v: ops.sub(1, v), x)[0], np.array([-0.5, 3.0], np.float32))


def test_reduce_sum_and_reshape_and_cast():
    x = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    assert_bits(run(lambda v: ops.reduce_sum(v, (0, 2)), x)[0], x.sum(axis=(0, 2)))
    assert_bits(run(lambda v: ops.reduce_sum(v, (-1,), True), x)[0], x.sum(-1, keepdims=True))
    assert_bits(run(lambda v: ops.reduce_sum(v), x)[0], np.array(x.sum(), np.float32))
    assert_bits(run(lambda v: ops.reduce_sum(v, ()), x)[0], x)
    assert_bits(run(lambda v: ops.reshape(v, (4, -1)), x)[0], x.reshape(4, 6))
    assert_bits(run(lambda v: ops.cast(v, "int8"), x)[0], x.astype(np.int8))
    u = np.array([250, 10], np.uint8)
    assert_bits(run(lambda v: ops.reduce_sum(v), u)[0], np.array(4, np.uint8))  # wraps


def test_symbolic_reshape_binds_at_run_time():
    g = gradc.Graph("r")
    x = g.input("x", "float32", ("N", 6))
    g.output(ops.reshape(x, ("N", 2, 3)), "y")
    ex = gradc.compile(g, target="reference")
    v = np.arange(12, dtype=np.float32).reshape(2, 6)
    assert_bits(ex(x=v)["y"], v.reshape(2, 2, 3))


def test_input_errors_name_the_input():
    g = gradc.Graph("r")
    x = g.input("x", "float32", ("N", 6))
    y = g.input("y", "float32", ("N", 1))
    g.output(ops.add(x, y), "z")
    ex = gradc.compile(g, target="reference")
    good = dict(x=np.zeros((2, 6), np.float32), y=np.zeros((2, 1), np.float32))
    ex(**good)
    bad = [
        (dict(good, x=np.zeros((2, 6), np.float64)),
         "input 'x': expected dtype float32, got float64"),
        (dict(good, y=np.zeros((3, 1), np.float32)), "input 'y': expected shape (N, 1) with N=2"),
        (dict(good, x=np.zeros((2, 5), np.float32)), "input 'x': expected shape (N, 6)"),
        ({"x": good["x"]}, "input 'y': missing"),
        (dict(good, w=good["x"]), "unexpected input 'w'"),
        (dict(good, x=[[0.0] * 6] * 2), "input 'x': expected a numpy.ndarray"),
    ]
    for feeds, msg in bad:
        with pytest.raises(gradc.InputError) as e:
            ex(**feeds)
        assert str(e.value).startswith(msg), str(e.value)
    ex2 = gradc.compile(g, target="reference", shapes={"N": 3})
    with pytest.raises(gradc.InputError, match="N=3"):
        ex2(**good)


def test_every_registered_op_has_all_its_parts():
    """DESIGN.md: adding an op means a definition with infer, reference and vjp."""
    from gradc.ir.ops.registry import OpDef
    for name, d in REGISTRY.items():
        assert type(d).infer is not OpDef.infer, name
        has_ref = type(d).reference is not OpDef.reference or hasattr(d, "evaluate")
        assert has_ref, name
        assert type(d).vjp is not OpDef.vjp, f"{name} has no vjp rule"
        assert d.__doc__ and d.__doc__.strip(), name
