"""The C kernels of §14 and §17: warning-free generated C for every dtype (symbolic dims, rank
0, empty and full axes), and the kernels against the reference bit for bit."""

from __future__ import annotations


import numpy as np
import pytest

import gradc
from gradc import ops
from gradc.ir.types import NUMERIC
from helpers import assert_bits, assert_c_compiles_cleanly

FLOATS = ("float16", "float32", "float64")


def reduce_graph(dtype: str) -> gradc.Graph:
    """Every kernel of this family that takes ``dtype``, on symbolic and static shapes."""
    g = gradc.Graph(f"rd_{dtype}")
    a = g.input("a", dtype, ("N", 2, 3))
    s = g.input("s", dtype, ())
    outs = [ops.reduce_max(a, (0, 2)), ops.reduce_min(a, (1,), True), ops.reduce_max(s),
            ops.reduce_min(a, ()), ops.element_count(a, (0, 1), "int32")]
    if dtype in FLOATS:
        d = g.input("d", dtype, (2,))
        outs += [ops.reduce_mean(a, (0, 2)), ops.reduce_mean(a), ops.reduce_mean(s),
                 ops.reduce_max_grad(a, ops.reshape(ops.reduce_max(a, (0, 2)), (2,)), (0, 2)),
                 ops.reduce_min_grad(a, ops.add(ops.reduce_min(a, (0, 2)), d), (0, 2)),
                 ops.softmax(a, (1,)), ops.log_softmax(a, (0, 2)), ops.softmax(a, (0, 1, 2)),
                 ops.element_count(a, None, dtype)]
    for k, v in enumerate(outs):
        g.output(v, f"y{k}")
    return g


def test_generated_c_compiles_without_warnings(tmp_path):
    """-Wall -Wextra -Werror, as tests/test_c_kernels.py does for the other kernels."""
    for d in NUMERIC:
        assert_c_compiles_cleanly(reduce_graph(d.value), tmp_path)


@pytest.mark.parametrize("dtype", ["float16", "float32", "int8", "uint64"])
def test_the_kernels_match_the_reference(dtype):
    rng = np.random.default_rng(8)
    g = reduce_graph(dtype)
    feeds = {}
    for v in g.inputs:
        shape = tuple(4 if isinstance(x, str) else x for x in v.type.shape)
        if dtype in FLOATS:
            a = rng.integers(-3, 4, shape).astype(dtype)
            if shape:
                a[rng.random(shape) < 0.2] = np.nan
        else:
            a = rng.integers(0, 200, shape).astype(dtype)
        feeds[v.name] = np.asarray(a)
    want = gradc.compile(g, target="reference")(**feeds)
    got = gradc.compile(g, target="c")(**feeds)
    for k in want:
        assert_bits(got[k], want[k], nan_payload=False)
