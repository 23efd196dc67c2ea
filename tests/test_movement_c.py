"""The C kernels of join, split, transpose, pad and one_hot: warning-free generated C for every
dtype and shape kind (symbolic dims, rank 1, axis 0 and last)."""

from __future__ import annotations


import numpy as np

import gradc
from gradc import ops
from gradc.ir.ops.movement import MOVE_DTYPES, ONE_HOT_INDICES, PAD_DTYPES
from helpers import assert_bits, assert_c_compiles_cleanly
from test_movement_random import random_array


def movement_graph(dtype: str) -> gradc.Graph:
    """Every movement kernel of one dtype, on symbolic and static shapes of ranks 1 to 4."""
    g = gradc.Graph(f"mv_{dtype}")
    a = g.input("a", dtype, ("N", 2, 3))
    b = g.input("b", dtype, ("N", 2, 1))
    c = g.input("c", dtype, (5,))
    outs = [ops.join([a, b], 2), ops.join([c, c, c], 0), ops.join([a], 0)]
    outs += list(ops.split(c, 0, (1, 4))) + list(ops.split(a, 1, (1, 1)))
    outs += [ops.transpose(a, (2, 0, 1)), ops.transpose(c, (0,))]
    if dtype in {d.value for d in PAD_DTYPES}:
        outs += [ops.pad(c, (2,), (0,), 1), ops.pad(a, (0, 1, 0), (0, 0, 2), 1),
                 ops.pad(b, (0, 0, 0), (0, 0, 0))]
    for idt in ONE_HOT_INDICES:
        i = g.input(f"i_{idt.value}", idt.value, ("N", 1, 3))
        v = g.input(f"v_{idt.value}", dtype, (2,))
        outs += [ops.one_hot(i, v, 1, ("N", 4, 3)), ops.one_hot(
            ops.reshape(c, (5, 1)) if dtype == idt.value else ops.reshape(i, ("N", 3, 1)),
            v, 1 if dtype == idt.value else 2, (5, 2) if dtype == idt.value else ("N", 3, 2))]
    for k, v in enumerate(outs):
        g.output(v, f"y{k}")
    return g


def test_generated_c_compiles_without_warnings(tmp_path):
    """-Wall -Wextra -Werror, as tests/test_c_kernels.py does for the other kernels."""
    for d in MOVE_DTYPES:
        assert_c_compiles_cleanly(movement_graph(d.value), tmp_path)


def test_the_kernels_match_the_reference():
    """The same graphs run in C and by the reference, bit for bit (random bit patterns)."""
    rng = np.random.default_rng(5)
    for dtype in ("float16", "uint64", "bool", "int8"):
        g = movement_graph(dtype)
        feeds = {}
        for v in g.inputs:
            shape = tuple(3 if isinstance(d, str) else d for d in v.type.shape)
            if v.name.startswith("i_"):
                feeds[v.name] = rng.integers(0, 6, shape).astype(v.type.dtype.numpy)
            else:
                feeds[v.name] = random_array(rng, shape, v.type.dtype.numpy)
        if dtype == "uint64":
            feeds["c"] = rng.integers(0, 3, (5,)).astype(np.uint64)  # indices of a one_hot
        want = gradc.compile(g, target="reference")(**feeds)
        got = gradc.compile(g, target="c")(**feeds)
        for k in want:
            assert_bits(got[k], want[k])
