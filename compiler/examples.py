"""Bundled example models (ONNX), built in code so that no binary file ships with gradc."""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["build_example_model"]


def build_example_model() -> Any:
    """A small CNN-like forward model (opset 18, batch dim "N") using all five forward ops.

    ``x[N,3,16,16] * w -> Relu -> MaxPool 3x3/2 pad 1 -> Clip(0, 6) -> Slice (rows 1..6, every
    other column from the end) -> Resize linear 2x half_pixel -> + b -> ReduceSum`` gives the
    per-sample loss ``loss[N]``.
    """
    from onnx import TensorProto, helper, numpy_helper

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


if __name__ == "__main__":  # python -m gradc.examples OUT.onnx: write the bundled model
    import sys

    if len(sys.argv) != 2:
        sys.exit("usage: python -m gradc.examples OUT.onnx")
    with open(sys.argv[1], "wb") as f:
        f.write(build_example_model().SerializeToString())
