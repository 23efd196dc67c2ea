"""Values made without a graph (issue 25): ``ops.constant(array)`` outside ``with graph:``, and
any op applied only to such values, belong to the graph of their first user; a value of one
graph used in another is a ``VerifyError`` naming the operand.

The builders are checked all at once through ``dtype_cases``: every op's case built with its
first operand a graph input and every other operand a graph-less constant, and again with every
operand a constant (the whole computation graph-less until ``Graph.output`` adopts it), must
verify and compute what the same case computes from graph inputs, bit for bit.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import gradc
from gradc import ops
from gradc.ir.core import Value
from gradc.ir.types import DType
from gradc.ir.verify import verify

from dtype_cases import CASES, op_dtypes, random_feed


def _build(op: str, dtype: str, mode: str) -> tuple[gradc.Graph, dict[str, np.ndarray]]:
    """The case as a graph: operands as inputs ("inputs"), the first an input and the rest
    constants ("first"), or all constants ("none")."""
    g = gradc.Graph(f"{op}_{mode}")
    rng = np.random.default_rng(7)
    feeds: dict[str, np.ndarray] = {}

    def inp(d: Any, shape: tuple[int, ...], low: float | None = None,
            high: float | None = None) -> Value:
        a = random_feed(rng, DType.of(d).value, shape, low, high)
        if mode == "inputs" or (mode == "first" and not feeds):
            name = f"i{len(feeds)}"
            feeds[name] = a
            return g.input(name, DType.of(d), shape)
        feeds[f"c{len(feeds)}"] = a  # keeps the draws in step with the other modes
        return ops.constant(a)

    for k, v in enumerate(CASES[op](dtype, inp)):
        g.output(v, f"o{k}")
    return g, {k: a for k, a in feeds.items() if k.startswith("i")}


CASE_OPS = sorted(CASES)


@pytest.mark.parametrize("op", CASE_OPS)
def test_every_builder_adopts_graphless_operands(op):
    for dtype in {op_dtypes(op)[0].value, op_dtypes(op)[-1].value}:
        g, feeds = _build(op, dtype, "inputs")
        want = gradc.compile(g, target="reference", passes=None)(**feeds)
        for mode in ("first", "none"):
            h, h_feeds = _build(op, dtype, mode)
            verify(h)
            assert all(v.graph is h for n in h.nodes for v in n.outputs)
            got = gradc.compile(h, target="reference", passes=None)(**h_feeds)
            for k in want:
                np.testing.assert_array_equal(got[k], want[k], err_msg=f"{op} {dtype} {mode}")


def test_negative_log_likelihood_with_constant_weights():
    """The issue's graph: the weights reach the loss through a reshape of the constant, an op
    whose only operand had no graph either."""
    w = np.array([1.0, 2.0, 0.5], np.float32)
    z = np.log(np.array([[0.2, 0.3, 0.5], [0.1, 0.8, 0.1]], np.float32))
    labels = np.array([2, 1], np.int64)
    g = gradc.Graph("nll")
    zv = g.input("z", "float32", (2, 3))
    lv = g.input("labels", "int64", (2,))
    g.output(ops.negative_log_likelihood(zv, lv, weights=ops.constant(w)), "loss")
    verify(g)
    got = gradc.compile(g, target="reference")(z=z, labels=labels)["loss"]
    want = -(z[0, 2] * w[2] + z[1, 1] * w[1]) / (w[2] + w[1])
    np.testing.assert_allclose(got, want, rtol=1e-6)
    for target in ("numpy", "c", "onnx"):
        np.testing.assert_allclose(gradc.compile(g, target=target)(z=z, labels=labels)["loss"],
                                   got, rtol=1e-6)


def _composites(x: Value, c: Any) -> list[Value]:
    """Every training composite with ``x`` from the graph and its other tensors ``c(array)``."""
    f32 = np.float32
    labels = c(np.array([0, 2], np.int64))
    w = c(np.array([1.0, 2.0, 0.5], f32))
    step = c(np.array([1], np.int64))
    m, v = c(np.zeros((2, 3), f32)), c(np.full((2, 3), 0.25, f32))
    grad = c(np.ones((2, 3), f32))
    state = c(np.array([0, 0, 0, 0, 1, 2], np.uint32))
    out = [ops.negative_log_likelihood(x, labels, w), ops.softmax_cross_entropy(x, labels, w),
           ops.mean_squared_error(x, c(np.zeros((2, 3), f32)))]
    out += [r for r in ops.sgd(x, grad, 0.1, m, step, momentum=0.9) if r is not None]
    out += list(ops.adam(x, m, v, grad, step, 0.1)) + list(ops.adamw(x, m, v, grad, step, 0.1))
    out += list(ops.dropout(x, state, 0.5))
    return out


def test_every_composite_adopts_graphless_operands():
    xs = np.array([[0.5, -1.0, 2.0], [1.5, 0.25, -0.5]], np.float32)
    results = []
    for graphless in (False, True):
        g = gradc.Graph("comp")
        x = g.input("x", "float32", (2, 3))
        made: list[np.ndarray] = []

        def c(a: np.ndarray) -> Value:
            made.append(a)
            return ops.constant(a) if graphless else g.parameter(f"p{len(made)}", a)

        for k, v in enumerate(_composites(x, c)):
            g.output(v, f"o{k}")
        verify(g)
        results.append(gradc.compile(g, target="reference", passes=None)(x=xs))
    for k in results[0]:
        np.testing.assert_array_equal(results[1][k], results[0][k], err_msg=k)


def _two_graphs() -> tuple[Value, Value]:
    g, h = gradc.Graph("g"), gradc.Graph("h")
    return g.input("x", "float32", (2, 3)), h.input("y", "float32", (2, 3))


@pytest.mark.parametrize("build, needle", [
    (lambda x, y: ops.add(x, y), "add: operand 1 (rhs): expected a value of graph 'g'"),
    (lambda x, y: ops.gemm(x, ops.transpose(y, (1, 0)), None),
     "gemm: operand 1 (b): expected a value of graph 'g'"),
    (lambda x, y: ops.join([x, x, y], 0), "join: operand 2 (inputs[2]): expected a value of "
                                          "graph 'g'"),
    (lambda x, y: ops.where(ops.greater(y, 0.0), x, x),
     "where: operand 1 (a): expected a value of graph 'h'"),
    (lambda x, y: ops.mean_squared_error(x, y),
     "mean_squared_error: target: expected a value of graph 'g' (that of input), got %y of "
     "graph 'h'"),
    (lambda x, y: ops.negative_log_likelihood(
        x, x.graph.input("l", "int64", (2,)), ops.reshape(ops.reduce_sum(y, (0,)), (3,))),
     "negative_log_likelihood: weights: expected a value of graph 'g'"),
    (lambda x, y: x.graph.output(y), "output: value: expected a value of graph 'g', got "
                                     "Value(%y: f32[2,3]) of graph 'h'"),
])
def test_a_value_of_another_graph_is_refused_naming_the_operand(build, needle):
    x, y = _two_graphs()
    with pytest.raises(gradc.VerifyError) as e:
        build(x, y)
    assert needle in str(e.value)


def test_a_graphless_value_joins_one_graph_only():
    x, y = _two_graphs()
    c = ops.constant(np.float32(2.0))
    r = ops.neg(c)  # built on c before c has a graph: no graph either
    ops.add(x, c)  # c joins g
    with pytest.raises(gradc.VerifyError, match=r"add: operand 1 \(rhs\): expected a value of "
                                                r"graph 'h'.*of graph 'g'"):
        ops.add(y, c)
    with pytest.raises(gradc.VerifyError, match=r"computed from %\S+ of graph 'g'"):
        ops.add(y, r)  # r would join h, but it is computed from c, now of g
    s = ops.add(x, r)  # in g it is fine: neg joins g once
    assert [n.op for n in x.graph.nodes] == ["constant", "add", "neg", "add"]
    assert s.graph is x.graph
    verify(x.graph)
