"""The relu-mask-from-output pass: relu_grad reads relu(x) instead of x where x then dies.

Exact (relu(x) > 0 exactly where x > 0, NaN and both zeros included), applied only where x's
other readers are relus and relu_grad masks, and it lets a training step's C arena shrink.
"""

from __future__ import annotations

import numpy as np
import pytest

import gradc
from gradc import ops
from gradc.passes import default_pipeline, optimize
from helpers import assert_bits

SPECIAL = np.array([0.0, -0.0, np.nan, -np.nan, np.inf, -np.inf, 1e-45, -1e-45, 2.5, -2.5],
                   np.float32)


def _masks(g: gradc.Graph) -> list[str]:
    """The name of each relu_grad's mask operand."""
    return [n.inputs[0].name for n in g.nodes if n.op == "relu_grad"]


def _step_graph(extra_reader: bool = False, x_out: bool = False) -> gradc.Graph:
    g = gradc.Graph("rm")
    a = g.input("a", "float32", (10,))
    b = g.input("b", "float32", (10,))
    dy = g.input("dy", "float32", (10,))
    x = ops.add(a, b)
    g.rename(x, "x")
    r = ops.relu(x)
    g.rename(r, "r")
    g.output(ops.mul(r, b), "y")
    g.output(ops.relu_grad(x, dy), "dx")
    if extra_reader:
        g.output(ops.neg(x), "nx")
    if x_out:
        g.output(x, "xo")
    return g


def test_relu_grad_reads_the_relu_result_and_keeps_every_bit():
    g = _step_graph()
    out = optimize(g, ["relu-mask-from-output"])
    assert _masks(g) == ["x"] and _masks(out.graph) == ["r"]
    assert out.report[0].changed and out.report[0].stats["masks-moved"] == 1
    rng = np.random.default_rng(0)
    for a in (SPECIAL, -SPECIAL, rng.standard_normal(10).astype(np.float32)):
        feeds = {"a": a, "b": np.zeros(10, np.float32) if a is SPECIAL else
                 rng.standard_normal(10).astype(np.float32),
                 "dy": rng.standard_normal(10).astype(np.float32)}
        want = gradc.compile(g, target="reference", passes=None)(**feeds)
        for target in ("reference", "numpy", "c"):
            got = gradc.compile(out.graph, target=target, passes=None)(**feeds)
            for name in want:
                assert_bits(got[name], want[name])


@pytest.mark.parametrize("case", ["another reader", "graph output", "graph input", "relu after",
                                  "mask is dy"])
def test_left_alone_where_x_would_stay_alive(case):
    if case == "another reader":
        g = _step_graph(extra_reader=True)
    elif case == "graph output":
        g = _step_graph(x_out=True)
    else:
        g = gradc.Graph("rm")
        x0 = g.input("x", "float32", (4,))
        dy = g.input("dy", "float32", (4,))
        x = x0 if case == "graph input" else ops.neg(x0)
        if case == "relu after":  # the relu comes after the relu_grad: it cannot feed it
            g.output(ops.relu_grad(x, dy), "dx")
            g.output(ops.relu(x), "r")
        elif case == "graph input":  # x costs nothing to keep; r would then be kept too
            g.output(ops.neg(ops.relu(x)), "nr")
            g.output(ops.relu_grad(x, dy), "dx")
        else:  # x is the relu_grad's gradient operand too
            g.output(ops.relu(x), "r")
            g.output(ops.relu_grad(x, x), "dx")
    out = optimize(g, ["relu-mask-from-output"])
    assert not out.report[0].changed and _masks(out.graph) == _masks(g)


def test_every_relu_grad_of_x_moves_and_canonicalize_undoes_it():
    g = gradc.Graph("rm")
    x = g.input("x", "float32", (4,))
    dy = g.input("dy", "float32", (4,))
    h = ops.neg(x)
    r = ops.relu(h)
    g.output(r, "r")
    g.output(ops.relu_grad(h, dy), "d1")
    g.output(ops.relu_grad(h, ops.neg(dy)), "d2")
    moved = optimize(g, ["relu-mask-from-output"]).graph
    assert _masks(moved) == [r.name, r.name]
    back = optimize(moved, ["canonicalize"]).graph
    assert all(m != r.name for m in _masks(back))


def test_a_training_step_keeps_less_in_its_arena():
    """Three conv -> relu layers: the convolutions' results (16 KiB each) are no longer kept
    for the backward pass; the relus' results are (the next filter gradient reads them). At the
    turn from forward to backward two fewer tensors are alive."""
    g = gradc.Graph("net")
    h = g.input("x", "float32", (2, 8, 16, 16))
    pad = dict(start_padding=(1, 1), end_padding=(1, 1))
    for i in range(3):
        w = g.parameter(f"w{i}", np.full((8, 8, 3, 3), 0.1, np.float32))
        h = ops.relu(ops.convolution(h, w, **pad))
    g.output(ops.reduce_sum(h, axes=[0, 1, 2, 3]), "loss")
    sizes = {}
    for name, passes in (("with", "default"),
                         ("without", [p for p in default_pipeline()
                                      if p != "relu-mask-from-output"])):
        train = gradc.grad(g, wrt="parameters")
        sizes[name] = gradc.compile(train, target="c", passes=passes).arena_bytes
    assert sizes["with"] <= sizes["without"] - 2 * 2 * 8 * 16 * 16 * 4
