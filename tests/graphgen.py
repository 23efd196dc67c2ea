"""Random training graphs for property tests (reusable by every engineer).

    from graphgen import make_graph, training_graphs
    case = make_graph(seed=3, n_ops=20)          # GenGraph: .graph, .feeds, .shapes
    @given(training_graphs())                    # a Hypothesis strategy of GenGraph
    def test_x(case): ...

Graphs mix what gradients of real networks contain: chains and trees of relu_grad / clip_grad /
add / mul / neg, max_pooling_grad, slice_grad and resample_grad with elementwise producers and
consumers, forward ops that move values between the shapes, values read several times, several
outputs, duplicated nodes, constant subexpressions, and the degenerate windows and masks the
canonicalization rules look for. Feeds hold special values: +-0.0, +-inf, NaNs with payloads.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

import gradc
from gradc import ops

POOL = dict(window_size=(2, 2), strides=(2, 2))
POOL3 = dict(window_size=(3, 3), strides=(1, 1), start_padding=(1, 1), end_padding=(1, 1))
WINDOW = dict(input_window_offsets=(0, 0, 0, 1), input_window_sizes=("N", 3, 4, 3),
              input_window_strides=(1, 1, 2, -2))
HALF = dict(scales=(1.0, 1.0, 0.5, 0.5))


@dataclass
class GenGraph:
    """A generated graph with input arrays (``feeds``) and symbol values (``shapes``)."""

    graph: gradc.Graph
    feeds: dict[str, np.ndarray]
    shapes: dict[str, int] = field(default_factory=dict)

    def run(self, passes: Any = None) -> dict[str, np.ndarray]:
        """Run on the reference target after the given passes."""
        ex = gradc.compile(self.graph, target="reference", passes=passes, shapes=self.shapes)
        return ex(**self.feeds)


def random_array(rng: np.random.Generator, shape: tuple[int, ...], dtype: Any) -> np.ndarray:
    """Small dyadic values with about 15% special ones (+-0, +-inf, NaN with payloads)."""
    dtype = np.dtype(dtype)
    if dtype.kind != "f":
        return np.asarray(rng.integers(-5, 6, size=shape), dtype)
    a = np.asarray(rng.integers(-8, 9, size=shape) / 4.0, dtype)
    special = np.array([0.0, -0.0, np.inf, -np.inf, np.nan], dtype)
    pick = rng.random(shape) < 0.15
    a[pick] = rng.choice(special, size=int(pick.sum()))
    bits = a.view(f"u{dtype.itemsize}")
    nan = np.isnan(a) & (rng.random(shape) < 0.5)
    payload = rng.integers(1, 64, size=shape).astype(bits.dtype)
    bits[nan] = (bits[nan] | payload[nan]) ^ (rng.integers(0, 2, size=shape).astype(bits.dtype)
                                              << (8 * dtype.itemsize - 1))[nan]
    return a


class _Builder:
    """Grows one graph: values by shape class A (N,3,4,4), B (N,3,2,2), C (N,3,4,4) windows."""

    def __init__(self, rng: random.Random, dtype: str, symbolic: bool) -> None:
        self.rng = rng
        self.dtype = dtype
        n = "N" if symbolic else 2
        self.shape = {"A": (n, 3, 4, 4), "B": (n, 3, 2, 2)}
        self.g = gradc.Graph("gen")
        self.pool: dict[str, list[gradc.Value]] = {"A": [], "B": []}
        for cls in ("A", "A", "A", "B", "B"):
            v = self.g.input(f"in{len(self.g.inputs)}", dtype, self.shape[cls])
            self.pool[cls].append(v)
        if not symbolic:
            self.shape["A"] = (2, 3, 4, 4)
        self.window = dict(WINDOW, input_window_sizes=(n, 3, 4, 3))

    def pick(self, cls: str) -> gradc.Value:
        vals = self.pool[cls]
        return vals[-1] if self.rng.random() < 0.4 else self.rng.choice(vals)

    def add(self, cls: str, v: gradc.Value) -> None:
        self.pool[cls].append(v)

    # -- steps: each adds one or a few nodes ---------------------------------------------
    def elementwise(self, cls: str) -> None:
        a, b = self.pick(cls), self.pick(cls)
        lo, hi = self.rng.choice([(0.0, 6.0), (-1.0, 1.0), (0.5, 0.25), (-np.inf, 2.0)])
        choices: list[Callable[[], gradc.Value]] = [
            lambda: ops.relu_grad(a, b), lambda: ops.clip_grad(a, b, lo, hi),
            lambda: ops.add(a, b), lambda: ops.mul(a, b), lambda: ops.neg(a),
            lambda: ops.relu(a), lambda: ops.clip(a, lo, hi), lambda: ops.sub(a, b),
            lambda: ops.add(a, 0.0), lambda: ops.mul(a, 0.5),
        ]
        self.add(cls, self.rng.choice(choices)())

    def mask_pattern(self, cls: str) -> None:
        z, dy = self.pick(cls), self.pick(cls)
        r = ops.relu(z)
        kind = self.rng.randrange(5)
        if kind == 0:
            v = ops.relu_grad(r, dy)
        elif kind == 1:
            v = ops.relu_grad(z, ops.relu_grad(z, dy))
        elif kind == 2:
            v = ops.relu_grad(z, ops.clip_grad(r, dy, self.rng.choice([0.0, -1.0]), 6.0))
        elif kind == 3:
            v = ops.clip_grad(r, ops.relu_grad(z, dy), self.rng.choice([0.5, -2.0]), 6.0)
        else:
            v = ops.clip_grad(z, ops.clip_grad(z, dy, -1.0, 3.0), 0.0, 6.0)
        self.add(cls, v)

    def anchor(self) -> None:
        k = self.rng.randrange(6)
        if k == 0:
            v = ops.max_pooling_grad(self.pick("A"), self.pick("B"), **POOL)
        elif k == 1:
            v = ops.max_pooling_grad(self.pick("A"), self.pick("A"), **POOL3)
        elif k == 2:
            v = ops.slice_grad(self.pick("B"), self.shape_of("A"), **self.window)
        elif k == 3:
            mode = self.rng.choice(["nearest", "linear"])
            v = ops.resample_grad(self.pick("B"), self.shape_of("A"), interpolation_mode=mode,
                                  **HALF)
        elif k == 4:
            a = self.pick("A")
            v = ops.slice_grad(a, a.type.shape, (0, 0, 0, 0), a.type.shape, (1, 1, 1, 1))
        else:
            v = ops.resample_grad(self.pick("A"), self.shape_of("A"), scales=(1.0,) * 4)
        self.add("A", v)

    def forward(self) -> None:
        a = self.pick("A")
        k = self.rng.randrange(3)
        if k == 0:
            v = ops.max_pooling(a, **POOL)
        elif k == 1:
            v = ops.slice(a, **self.window)
        else:
            v = ops.resample(a, **HALF)
        self.add("B", v)

    def constants(self, cls: str) -> None:
        v = self.pick(cls)
        last = v.type.shape[-1]
        c = ops.constant(np.linspace(-1.0, 1.0, last).astype(self.dtype))
        if self.rng.random() < 0.5:
            c = ops.relu(ops.neg(c))
        else:
            c = ops.add(c, ops.constant(np.array(0.5, self.dtype)))
        self.add(cls, ops.mul(v, c))

    def duplicate(self) -> None:
        nodes = [n for n in self.g.nodes if n.op not in ("constant",) and len(n.outputs) == 1]
        if not nodes:
            return
        n = self.rng.choice(nodes)
        v = gradc.ir.ops.registry.make_node(n.op, list(n.inputs), dict(n.attrs))
        for cls in ("A", "B"):
            if v.type.shape == self.shape_of(cls):
                self.add(cls, v)

    def shape_of(self, cls: str) -> tuple:
        return self.pool[cls][0].type.shape


def make_graph(seed: int, n_ops: int = 12, dtype: str | None = None,
               symbolic: bool | None = None) -> GenGraph:
    """A random training graph with ``n_ops`` steps and feeds for it (deterministic in seed)."""
    rng = random.Random(seed)
    dtype = dtype or rng.choice(["float32", "float32", "float16", "float64"])
    symbolic = rng.random() < 0.3 if symbolic is None else symbolic
    b = _Builder(rng, dtype, symbolic)
    steps = ["ew_A", "ew_A", "ew_B", "mask_A", "mask_B", "anchor", "anchor", "forward",
             "const", "dup"]
    with b.g:
        for _ in range(n_ops):
            _step(b, rng, rng.choice(steps))
        _outputs(b, rng)
    nrng = np.random.default_rng(seed)
    shapes = {"N": 2} if symbolic else {}
    feeds = {v.name: random_array(nrng, tuple(shapes.get(d, d) for d in v.type.shape), dtype)
             for v in b.g.inputs}
    return GenGraph(b.g, feeds, shapes)


def _step(b: _Builder, rng: random.Random, s: str) -> None:
    if s.startswith("ew_"):
        b.elementwise(s[-1])
    elif s.startswith("mask_"):
        b.mask_pattern(s[-1])
    elif s == "anchor":
        b.anchor()
    elif s == "forward":
        b.forward()
    elif s == "const":
        b.constants(rng.choice("AB"))
    else:
        b.duplicate()


def _outputs(b: _Builder, rng: random.Random) -> None:
    made = [v for n in b.g.nodes for v in n.outputs]
    b.g.output(made[-1] if made else b.pool["A"][0], "out")
    for i, v in enumerate(rng.sample(made, min(len(made), rng.randrange(0, 3)))):
        b.g.output(v, f"extra{i}")
    if rng.random() < 0.1:
        b.g.output(b.pool["A"][0], "passthrough")


def training_graphs(min_ops: int = 1, max_ops: int = 16) -> Any:
    """A Hypothesis strategy of ``GenGraph`` (seed and size drawn, so failures shrink)."""
    from hypothesis import strategies as st

    return st.builds(make_graph, seed=st.integers(0, 2**32 - 1),
                     n_ops=st.integers(min_ops, max_ops))
