"""What the pipeline needs to run and compare graphs of SPEC-transformers.md §24-26.

- ``index_feeds``: the arrays of graph inputs that are ``gather``/``gather_grad`` indices, in
  range mostly (random feeds would be out of range nearly always, and the graph would never
  run past the check) and with one index out of range now and then (§26.3: then every target
  must raise the reference's ``InputError``, with the same message).
- ``floor_for``: the least magnitude the whole-graph tolerance (``fuzz.pipeline.close``: 64 ulps
  of the largest output, or of the floor) is taken relative to, so that it holds §25.4's
  absolute term of ``gelu``/``gelu_grad`` (``4·2⁻²³·(1 + |x|)``, times ``|dY|`` for the
  gradient, 2⁻⁵² in float64) and §24.4's bound of ``mean_variance_normalization`` and its
  gradient (``(n + k + 1)·ε·S + η``, ``S`` from error propagation), both computed from the
  values the nodes see in the reference's run. A target that is not bit for bit (``onnx``) is
  held to these; the whole-graph rule alone would raise false alarms where ``gelu`` of a
  negative input cancels, or where a group's mean is many standard deviations. The same
  floor holds a standard deviation computed op by op (``sqrt(mean((x - mean(x))²) + eps)``,
  an imported LayerNormalization's ``Mean``/``InvStdDev`` outputs) to ``variance_bound``.
"""

from __future__ import annotations

import random
from typing import Mapping, Sequence

import numpy as np

from gradc.errors import GradcError
from gradc.ir.core import Graph, Node
from gradc.ir.interpret import evaluate_node

GATHERS = frozenset({"gather", "gather_grad"})
NORMS = frozenset({"mean_variance_normalization", "mean_variance_normalization_grad"})
GELUS = frozenset({"gelu", "gelu_grad"})
ABS_EPS = {"float16": 2.0 ** -23, "float32": 2.0 ** -23, "float64": 2.0 ** -52}


def _size(node: Node, bind: Mapping[str, int]) -> int:
    axis = node.attrs["axis"]
    d = node.inputs[0].type.shape[axis] if node.op == "gather" else \
        node.attrs["output_sizes"][axis]
    return bind.get(d, 2) if isinstance(d, str) else int(d)


def index_feeds(g: Graph, feeds: dict[str, np.ndarray], bind: Mapping[str, int],
                rng: random.Random) -> None:
    """Give the graph inputs that are gather indices values in range (in place); now and then
    one value out of range (see the module docstring)."""
    inputs = {id(v): v for v in g.inputs}
    sizes: dict[str, int] = {}
    for n in g.nodes:
        if n.op in GATHERS and id(n.inputs[1]) in inputs:
            name = n.inputs[1].name
            sizes[name] = min(sizes.get(name, 1 << 62), _size(n, bind))
    if not sizes:
        return
    nrng = np.random.default_rng(rng.getrandbits(32))
    for name, size in sizes.items():
        a = feeds[name]
        if a.dtype.kind not in "iu":
            continue
        lo = -size if a.dtype.kind == "i" else 0
        feeds[name] = nrng.integers(lo, size, a.shape).astype(a.dtype)
    if rng.random() < 0.15:
        name = rng.choice(sorted(sizes))
        a, size = feeds[name], sizes[name]
        if a.dtype.kind in "iu" and a.size:
            info = np.iinfo(a.dtype)
            bad = [b for b in (size, size + 3, -size - 1, int(info.max), int(info.min))
                   if info.min <= b <= info.max and not -size <= b < size]
            if bad:
                a.reshape(-1)[rng.randrange(a.size)] = rng.choice(bad)


def node_inputs(g: Graph, feeds: Mapping[str, np.ndarray], bind: Mapping[str, int],
                ops: frozenset[str]) -> list[tuple[Node, list[np.ndarray]]]:
    """The reference's input arrays of each node whose op is in ``ops`` (the graph evaluated
    node by node up to the last such node)."""
    env: dict[int, np.ndarray] = {id(v): feeds[v.name] for v in g.inputs}
    for p in g.parameters:
        env[id(p)] = feeds[p.name] if p.name in feeds else p.value
    last = max((i for i, n in enumerate(g.nodes) if n.op in ops), default=-1)
    found = []
    with np.errstate(all="ignore"):
        for n in g.nodes[:last + 1]:
            args = [env[id(v)] for v in n.inputs]
            if n.op in ops:
                found.append((n, args))
            for v, a in zip(n.outputs, evaluate_node(n, args, bind)):
                env[id(v)] = np.asarray(a)
    return found


def _finite_max(a: np.ndarray) -> float:
    a = np.abs(np.asarray(a, np.float64))
    return float(a[np.isfinite(a)].max(initial=0.0))


def gelu_bound(node: Node, args: Sequence[np.ndarray]) -> float:
    """The largest absolute term of §25.4 over the node's elements."""
    x = np.asarray(args[0], np.float64)
    with np.errstate(all="ignore"):
        term = 1 + np.abs(x)
        if node.op == "gelu_grad":
            term = term * np.abs(np.asarray(args[1], np.float64))
    return 4 * ABS_EPS[node.inputs[0].type.dtype.value] * _finite_max(term)


def _groups(x: np.ndarray, axes: Sequence[int]) -> np.ndarray:
    kept = [i for i in range(x.ndim) if i not in axes]
    return np.transpose(x, list(axes) + kept).reshape(
        int(np.prod([x.shape[a] for a in axes])), -1)


def norm_bound(node: Node, args: Sequence[np.ndarray]) -> float:
    """The largest of §24.4's bounds over the node's results (from the inputs, in float64)."""
    a = node.attrs
    axes, um, uv = a["axes"], a["use_mean"], a["use_variance"]
    x = np.asarray(args[0], np.float64)
    dtype = node.inputs[0].type.dtype.value
    with np.errstate(all="ignore"):
        rows = _groups(x, axes)
        n = rows.shape[0]
        d = rows - rows.mean(axis=0) if um else rows
        mu = np.abs(rows).mean(axis=0) if um else 0.0
        sigma = np.sqrt((d * d).mean(axis=0) + float(np.float32(a["epsilon"]))) if uv else 1.0
        z = d / sigma
        spread = (1 + np.abs(z)) * (1 + mu / sigma)
        params = [np.asarray(p, np.float64) for p in args[1:] if p is not None]
        if node.op == "mean_variance_normalization":
            s = _finite_max(params[0]) if params else 1.0
            b = _finite_max(params[1]) if len(params) > 1 else 0.0
            big = _finite_max(spread) * s + b
            k, terms = 8, n
        else:
            dy = _groups(np.abs(np.asarray(args[1], np.float64)), axes) * _finite_max(args[2])
            gsum = dy + dy.mean(axis=0) + (1 + np.abs(z)) * (dy * (1 + np.abs(z))).mean(axis=0)
            m = x.size // max(1, np.asarray(args[2]).size)
            big = max(_finite_max(gsum * (1 + mu / sigma) / sigma),
                      _finite_max(dy * spread) * m)  # dX, dscale (and dbias below it)
            k, terms = 12, n + m
    if dtype == "float16":
        return 2.0 ** -9 * big + 2.0 ** -24
    eps = 2.0 ** -23 if dtype == "float32" else 2.0 ** -52
    return (terms + k + 1) * eps * big


def _variance_chains(g: Graph) -> list[tuple[Node, Node]]:
    """(the mean's ``reduce_mean``, the ``sqrt``) of each standard deviation computed as
    ``sqrt(reduce_mean(d * d) [+ eps])`` with ``d = x - reduce_mean(x)`` over the same axes:
    the statistics outputs of an imported ``LayerNormalization`` (``Mean``, ``InvStdDev``)
    and of decomposed layer norms."""
    found = []
    for n in g.nodes:
        if n.op != "sqrt":
            continue
        v = n.inputs[0].producer
        if v is not None and v.op == "add":
            v = next((u.producer for u in v.inputs if u.producer is not None
                      and u.producer.op == "reduce_mean"), None)
        if v is None or v.op != "reduce_mean":
            continue
        sq = v.inputs[0].producer
        if sq is None or sq.op != "mul" or sq.inputs[0] is not sq.inputs[1]:
            continue
        d = sq.inputs[0].producer
        m = d.inputs[1].producer if d is not None and d.op == "sub" else None
        if (m is not None and m.op == "reduce_mean" and m.inputs[0] is d.inputs[0]
                and list(m.attrs["axes"]) == list(v.attrs["axes"])):
            found.append((m, n))
    return found


def variance_bound(x: np.ndarray, axes: Sequence[int], eps: float, dtype: str) -> float:
    """A bound on the absolute error of ``sqrt(var + eps)`` and of its reciprocal where the
    target adds the mean and the variance in another order (each sum within SPEC-training
    §9.5: ``(n + 1)·ε·Σ|terms|``): the mean moves by ``δμ``, each difference ``x - μ`` by ``δμ
    + ε|d|``, the variance by ``δv``; ``sqrt(v + eps)`` by ``½·δv/(v + eps)`` relative, its
    reciprocal too; twice that, since the reference rounds as well. On a nearly constant group
    (``x - μ`` cancels) this is far more than 64 ulps of the output: the rounding of the mean
    dominates the difference (seed 16161's case: 0.0193 at an InvStdDev of 1938)."""
    e = ABS_EPS.get(dtype, 2.0 ** -23) if dtype != "float16" else 2.0 ** -10
    with np.errstate(all="ignore"):
        rows = _groups(np.asarray(x, np.float64), axes)
        n = rows.shape[0]
        mu = rows.mean(axis=0)
        dmu = (n + 1) * e * np.abs(rows).mean(axis=0)
        d = np.abs(rows - mu)
        dd = dmu + e * d
        v = (d * d).mean(axis=0)
        dv = (2 * d * dd + dd * dd).mean(axis=0) + (n + 2) * e * v
        base = v + eps
        rel = 0.5 * dv / base + 2 * e
        sd = np.sqrt(base)
        worst = np.maximum(sd, 1 / sd) * rel
    return 2 * _finite_max(worst)  # the target's error and the reference's own add up


def floor_for(g: Graph, feeds: Mapping[str, np.ndarray], bind: Mapping[str, int]) -> float:
    """The tolerance floor for ``fuzz.pipeline.close`` (0 without §24/§25.4 nodes): the largest
    §25.4 absolute term or §24.4 bound, over 64 ulps of the output dtype (so that ``close``'s
    ``64·ε·floor`` is at least that bound)."""
    ops = GELUS | NORMS
    chains = _variance_chains(g)
    if not chains and not any(n.op in ops for n in g.nodes):
        return 0.0
    worst = 0.0
    means = {id(m) for m, _ in chains}
    try:
        found = node_inputs(g, feeds, bind, ops | {"reduce_mean"})
    except GradcError:  # the reference refuses these feeds: nothing is compared
        return 0.0
    for node, args in found:
        eps = float(np.finfo(node.outputs[0].type.dtype.numpy).eps)
        if node.op == "reduce_mean":
            if id(node) not in means:
                continue
            sqrt = next(q for m, q in chains if m is node)
            add = sqrt.inputs[0].producer
            e = 0.0
            if add is not None and add.op == "add":  # the epsilon, where it is a constant
                c = next((u.producer for u in add.inputs if u.producer is not None
                          and u.producer.op == "constant"), None)
                if c is not None:
                    e = float(np.asarray(c.attrs["value"], np.float64).reshape(-1)[0])
            bound = variance_bound(args[0], node.attrs["axes"], e,
                                   node.inputs[0].type.dtype.value)
        elif node.op in GELUS:
            bound = gelu_bound(node, args)
        else:
            bound = norm_bound(node, args)
        worst = max(worst, bound / (64 * eps))
    return worst if np.isfinite(worst) else 0.0


__all__ = ["index_feeds", "floor_for", "node_inputs", "variance_bound", "GATHERS", "NORMS",
           "GELUS"]
