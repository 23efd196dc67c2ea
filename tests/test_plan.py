"""The shared schedule and memory plan (``gradc.backends.plan``) on its own.

The C target's golden files and its real-model sources pin what the plan decides for C; here
the arena's one invariant (buffers live at one step never share a byte) and the buffers of a
small graph are checked directly, for every compiled target that uses the plan.
"""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

import gradc
from gradc import ops
from gradc.backends import plan as planning


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 20), st.integers(0, 8), st.integers(1, 5000)),
                min_size=1, max_size=30))
def test_arena_never_overlaps_buffers_that_live_together(spans):
    lives = {f"b{k}": (s, s + d, z) for k, (s, d, z) in enumerate(spans)}
    offsets, total = planning.plan_arena(lives)
    assert set(offsets) == set(lives)
    for a, (s1, e1, z1) in lives.items():
        assert offsets[a] % planning.ALIGN == 0 and offsets[a] + z1 <= total
        for b, (s2, e2, z2) in lives.items():
            if a < b and s1 <= e2 and s2 <= e1:  # alive at one step
                assert offsets[a] + z1 <= offsets[b] or offsets[b] + z2 <= offsets[a], (a, b)
    peak = max(sum(-(-z // 64) * 64 for s, e, z in lives.values() if s <= t <= e)
               for t in range(30))
    assert total >= peak


class _Elementwise:
    """Kernel traits of a target whose elementwise ops load before they store."""

    def elementwise(self, n):
        return n.op in ("relu", "add", "neg", "mul")

    def reads_all_first(self, n, out):
        return False


def test_buffers_views_take_over_and_lifetimes():
    """relu takes over its dying product's temporary; the reshape is a view; the add cannot
    take the relu's (read again by the mul), so it gets a new one."""
    g = gradc.Graph("t")
    a, b = g.input("a", "float32", (64,)), g.input("b", "float32", (64,))
    x = ops.mul(a, b)
    y = ops.relu(x)
    r = ops.reshape(y, (8, 8))
    w = ops.add(r, ops.constant(np.ones((8, 8), np.float32)))
    g.output(ops.mul(w, ops.reshape(y, (8, 8))), "s")
    plan = planning.Plan(planning.Sizes({}))
    planning.flatten(g, plan)
    mem = planning.assign_buffers(g, plan, {}, _Elementwise())
    buf = mem.buffers
    assert buf[x] == buf[y] == buf[r] == planning.Buffer("temp", 0)
    assert buf[w] == planning.Buffer("temp", 1)
    assert buf[g.outputs[0]] == planning.Buffer("output", 0)
    assert len(mem.owners) == 2 and mem.static_sizes() and mem.sizes == [256, 256]
    assert plan.nodes[0].op == "mul" and mem.first[0] == 0
    assert mem.last[0] == len(plan.nodes) - 1  # the last mul reads y's reshape
    assert {n.op for n in mem.views} == {"reshape"}


def test_symbolic_sizes_are_equal_only_when_written_alike():
    sizes = planning.Sizes({"M": 4})
    g = gradc.Graph("t")
    u = g.input("u", "float32", ("N", 16))
    v = g.input("v", "float32", (16, "N"))
    w = g.input("w", "float32", ("M", "N"))
    assert planning.buffer_bytes(sizes, u) == planning.buffer_bytes(sizes, v) == (16, ("N",), 4)
    assert planning.buffer_bytes(sizes, w) == (4, ("N",), 4)


def test_sinks_last_moves_only_the_kernels_nobody_reads():
    """The kernels whose results only leave the program (two updates and y) go last, in their
    order; the kernel that another reads (x) stays first."""
    g = gradc.Graph("s")
    a, b = g.input("a", "float32", (4,)), g.input("b", "float32", (4,))
    u1 = ops.neg(a)  # an update: read by no kernel
    x = ops.relu(b)
    u2 = ops.neg(b)
    y = ops.add(x, x)
    for name, v in (("u1", u1), ("u2", u2), ("y", y)):
        g.output(v, name)
    plan = planning.Plan(planning.Sizes({}))
    planning.flatten(g, plan)
    planning.sinks_last(plan)
    assert [n.outputs[0] for n in plan.nodes] == [x, u1, u2, y]


def test_fold_output_reshapes_writes_the_producer_into_the_output():
    """reshape(neg(a)) as an output: no reshape kernel, neg's result is the output's buffer;
    a reshape of an input stays a kernel (nothing produces it)."""
    g = gradc.Graph("f")
    a = g.input("a", "float32", (2, 3))
    n = ops.neg(a)
    g.output(ops.reshape(n, (6,)), "r")
    g.output(ops.reshape(a, (3, 2)), "c")
    plan = planning.Plan(planning.Sizes({}))
    planning.flatten(g, plan)
    planning.fold_output_reshapes(g, plan)
    assert [x.op for x in plan.nodes] == ["neg", "reshape"]
    assert plan.resolve(g.outputs[0]) is n
    mem = planning.assign_buffers(g, plan, {}, _Elementwise())
    assert mem.buffers[n] == planning.Buffer("output", 0)
