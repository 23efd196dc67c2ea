"""Built-in sample graphs for the command line (``example:NAME``) and the documentation."""

from __future__ import annotations

from typing import Callable

from gradc.errors import GradcError
from gradc.ir.core import Graph, Value
from gradc import ops


def pool_step() -> Graph:
    """The max-pooling gradient of API.md's example."""
    g = Graph("pool_step")
    x = g.input("x", "float32", ("N", 64, 56, 56))
    dy = g.input("dy", "float32", ("N", 64, 28, 28))
    g.output(ops.max_pooling_grad(x, dy, window_size=(2, 2), strides=(2, 2)), "dx")
    return g


def forward() -> Graph:
    """A small forward network that uses all five forward operators."""
    g = Graph("forward")
    x = g.input("x", "float32", ("N", 3, 16, 16))
    w = g.input("w", "float32", (1, 3, 1, 1))
    h = ops.relu(ops.mul(x, w))
    pooled = ops.max_pooling(h, (3, 3), (2, 2), (1, 1), (1, 1))
    assert isinstance(pooled, Value)  # one result: no output_indices
    h = ops.clip(pooled, 0.0, 6.0)
    h = ops.slice(h, (0, 0, 0, 0), ("N", 3, 8, 8), (1, 1, -1, 2))
    h = ops.resample(h, (1, 1, 2, 2), "linear")
    g.output(ops.reduce_sum(h), "loss")
    return g


def train_step() -> Graph:
    """The training (VJP) graph of ``forward``."""
    from gradc.api import grad
    return grad(forward())


def cnn() -> Graph:
    """The bundled ONNX model (examples/cnn.onnx) imported: all five forward ops, batch dim N."""
    from gradc.api import from_onnx
    from gradc.examples import build_example_model
    return from_onnx(build_example_model())


SAMPLES: dict[str, Callable[[], Graph]] = {
    "pool_step": pool_step, "forward": forward, "train_step": train_step, "cnn": cnn,
}


def sample(name: str) -> Graph:
    """A built-in sample graph by name."""
    if name not in SAMPLES:
        raise GradcError(f"example:{name}: no such built-in example (have: "
                         f"{', '.join(sorted(SAMPLES))})")
    return SAMPLES[name]()
