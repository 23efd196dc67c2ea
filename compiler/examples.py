"""The built-in examples: graphs usable as ``example:NAME`` and the bundled ONNX model.

``EXAMPLES`` maps a name to a function that builds the graph (``gradc examples`` lists them);
``build_example_model`` builds the forward ONNX model that ships as ``examples/cnn.onnx``
(``python -m gradc.examples OUT.onnx`` writes it), in code so no binary file is needed.
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np
from onnx import TensorProto, helper, numpy_helper

from gradc.autodiff import grad
from gradc.backends.onnx.importer import from_onnx
from gradc.errors import GradcError
from gradc.ir import builders as ops
from gradc.ir.core import Graph, Value

__all__ = ["EXAMPLES", "example", "build_example_model"]


def build_example_model() -> Any:
    """A small CNN-like forward model (opset 18, batch dim "N") using all five forward ops.

    ``x[N,3,16,16] * w -> Relu -> MaxPool 3x3/2 pad 1 -> Clip(0, 6) -> Slice (rows 1..6, every
    other column from the end) -> Resize linear 2x half_pixel -> + b -> ReduceSum`` gives the
    per-sample loss ``loss[N]``.
    """
    rng = np.random.default_rng(0)
    inits = [
        numpy_helper.from_array(rng.uniform(0.5, 2.0, (1, 3, 1, 1)).astype(np.float32), "w"),
        numpy_helper.from_array(rng.uniform(-1.0, 1.0, (1, 3, 1, 1)).astype(np.float32), "b"),
        numpy_helper.from_array(np.array(0.0, np.float32), "clip_min"),
        numpy_helper.from_array(np.array(6.0, np.float32), "clip_max"),
        numpy_helper.from_array(np.array([1, -1], np.int64), "starts"),
        numpy_helper.from_array(np.array([7, -100], np.int64), "ends"),
        numpy_helper.from_array(np.array([2, 3], np.int64), "axes"),
        numpy_helper.from_array(np.array([1, -2], np.int64), "steps"),
        numpy_helper.from_array(np.array([1, 2, 3], np.int64), "sum_axes"),
    ]
    scales = helper.make_tensor("scales_value", TensorProto.FLOAT, [4], [1, 1, 2, 2])
    nodes = [
        helper.make_node("Mul", ["x", "w"], ["scaled"], name="scale"),
        helper.make_node("Relu", ["scaled"], ["act"], name="relu"),
        helper.make_node("MaxPool", ["act"], ["pooled"], name="pool", kernel_shape=[3, 3],
                         strides=[2, 2], pads=[1, 1, 1, 1]),
        helper.make_node("Clip", ["pooled", "clip_min", "clip_max"], ["clipped"], name="relu6"),
        helper.make_node("Slice", ["clipped", "starts", "ends", "axes", "steps"], ["cropped"],
                         name="crop"),
        helper.make_node("Constant", [], ["scales"], name="scales_const", value=scales),
        helper.make_node("Resize", ["cropped", "", "scales"], ["upsampled"], name="upsample",
                         mode="linear", coordinate_transformation_mode="half_pixel"),
        helper.make_node("Add", ["upsampled", "b"], ["biased"], name="bias"),
        helper.make_node("ReduceSum", ["biased", "sum_axes"], ["loss"], name="loss", keepdims=0),
    ]
    graph = helper.make_graph(
        nodes, "example_cnn",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, 16, 16])],
        [helper.make_tensor_value_info("loss", TensorProto.FLOAT, ["N"])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)],
                              producer_name="gradc.examples")
    model.ir_version = 8
    return model



def pool_step() -> Graph:
    """The max-pooling gradient of the README's Python example."""
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
    return grad(forward())


def cnn() -> Graph:
    """The bundled ONNX model (examples/cnn.onnx) imported: all five forward ops, batch dim N."""
    return from_onnx(build_example_model())


EXAMPLES: dict[str, Callable[[], Graph]] = {
    "pool_step": pool_step, "forward": forward, "train_step": train_step, "cnn": cnn,
}


def example(name: str) -> Graph:
    """A built-in example graph by name."""
    if name not in EXAMPLES:
        raise GradcError(f"example:{name}: no such built-in example (have: "
                         f"{', '.join(sorted(EXAMPLES))})")
    return EXAMPLES[name]()


if __name__ == "__main__":  # python -m gradc.examples OUT.onnx: write the bundled model
    import sys

    if len(sys.argv) != 2:
        sys.exit("usage: python -m gradc.examples OUT.onnx")
    with open(sys.argv[1], "wb") as f:
        f.write(build_example_model().SerializeToString())
