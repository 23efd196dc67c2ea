"""ONNX import errors: unsupported features listed at once, rejected arguments, bad models.

Every error is a GradcError subclass whose message names the ONNX node and the attribute.
"""

from __future__ import annotations

import numpy as np
import pytest

import gradc

onnx = pytest.importorskip("onnx")
from onnx import TensorProto as TP  # noqa: E402
from onnx import helper as oh  # noqa: E402
from onnx import numpy_helper  # noqa: E402

from helpers import assert_bits  # noqa: E402
from onnx_import_helpers import c64, distinct, make, unary  # noqa: E402


# -- unsupported features: all listed in one UnsupportedError ---------------------------------

def _problem_model():
    x = oh.make_tensor_value_info("x", TP.FLOAT, [1, 2, 4, 4])
    lo = oh.make_tensor_value_info("lo", TP.FLOAT, [])
    st = oh.make_tensor_value_info("st", TP.INT64, [1])
    i64 = oh.make_tensor_value_info("xi", TP.INT64, [4])
    sc = numpy_helper.from_array(np.array([1, 1, 2, 2], np.float32), "sc")
    ends = numpy_helper.from_array(c64(3), "ends")
    nodes = [
        oh.make_node("LpPool", ["x"], ["conv_out"], name="conv1", kernel_shape=[2, 2]),
        oh.make_node("Resize", ["x", "", "sc"], ["r1"], name="cubic_resize", mode="cubic"),
        oh.make_node("Resize", ["x", "", "sc"], ["r2"], name="aa_resize", antialias=1,
                     exclude_outside=1, coordinate_transformation_mode="half_pixel_symmetric"),
        oh.make_node("MaxPool", ["x"], ["p", "pi"], name="pool_cm", kernel_shape=[2, 2],
                     storage_order=1),
        oh.make_node("Slice", ["x", "st", "ends"], ["s"], name="dyn_slice"),
        oh.make_node("Clip", ["x", "lo"], ["c"], name="dyn_clip"),
        oh.make_node("Cast", ["x"], ["bf"], name="to_bf16", to=TP.BFLOAT16),
        oh.make_node("Relu", ["xi"], ["ri"], name="int64_relu"),
        oh.make_node("MyOp", ["x"], ["custom"], name="custom_op", domain="com.example"),
        oh.make_node("Relu", ["conv_out"], ["after_conv"], name="after_conv"),
    ]
    outs = ["conv_out", "r1", "r2", "p", "pi", "s", "c", "bf", "ri", "custom", "after_conv"]
    g = oh.make_graph(nodes, "problems", [x, lo, st, i64],
                      [oh.make_tensor_value_info(o, TP.FLOAT, None) for o in outs], [sc, ends])
    m = oh.make_model(g, opset_imports=[oh.make_opsetid("", 19), oh.make_opsetid("com.example", 1)])
    m.ir_version = 9
    return m


def test_every_unsupported_op_and_attribute_is_listed_at_once():
    with pytest.raises(gradc.UnsupportedError) as info:
        gradc.from_onnx(_problem_model())
    msg = str(info.value)
    first = msg.splitlines()[0]  # more than one node refused: grouped by op type (issue 11)
    assert "Resize (2 nodes, first 'cubic_resize')" in first and "MaxPool (1 node" in first
    expected = [  # (node, what the message names)
        ("conv1", "op LpPool"), ("cubic_resize", "attribute mode: 'cubic'"),
        ("aa_resize", "attribute antialias"), ("aa_resize", "attribute exclude_outside"),
        ("aa_resize", "'half_pixel_symmetric'"), ("pool_cm", "attribute storage_order"),
        ("dyn_slice", "input starts ('st') must be a constant"),
        ("dyn_clip", "input min ('lo') must be a constant"),
        ("to_bf16", "attribute to: element type BFLOAT16"),
        ("int64_relu", "dtype int64"),
        ("custom_op", "domain com.example is not supported (export with the standard opset)"),
    ]
    for node, what in expected:
        assert any(f"'{node}'" in p and what in p for p in info.value.problems), (node, what)
        assert what in msg
    assert len(info.value.problems) == len(expected)  # after_conv only depends on a problem


@pytest.mark.parametrize("build,node,what", [
    (lambda: unary("Relu", [2, 3], dtype=np.int64), "'n'", "dtype int64"),
    (lambda: unary("MaxPool", [4, 4], {"kernel_shape": [2]}), "'n'", "rank 2"),  # 3: 1-D
    (lambda: unary("Resize", [1, 1, 1, 2, 2], extra=["", "s"],
                   inits={"s": np.ones(5, np.float32)}), "'n'", "rank 5"),
    (lambda: unary("Slice", [4], extra=["s", "e"], inits={"s": c64(3), "e": c64(1)}), "'n'",
     "select nothing"),
    (lambda: unary("Slice", ["N", 4], extra=["s", "e"], inits={"s": c64(1), "e": c64(5)}),
     "'n'", "symbolic size 'N'"),
    (lambda: unary("Reshape", ["N", 3], extra=["s"], inits={"s": c64(-1)}), "'n'",
     "symbolic dim 'N'"),
    (lambda: unary("Reshape", [2, 3], {"allowzero": 1}, ["s"], {"s": c64(0, 6)}), "'n'",
     "allowzero"),
    (lambda: unary("Resize", ["N", 1, 2], extra=["", "s"],
                   inits={"s": np.array([2, 1, 1], np.float32)}), "'n'", "scale 1"),
    (lambda: unary("Resize", ["N", 1, 2], extra=["", "", "z"], inits={"z": c64(2, 1, 4)}),
     "'n'", "sizes needs a static input size"),
    (lambda: unary("Resize", [1, 4], {"coordinate_transformation_mode": "tf_crop_and_resize"},
                   ["roi", "", "z"], {"roi": np.array([0, 0.5, 1, 1.5], np.float32),
                                      "z": c64(1, 3)}), "'n'", "0 <= start < end <= 1"),
    (lambda: unary("Resize", [1, 4], {"coordinate_transformation_mode": "tf_crop_and_resize"},
                   ["", "", "z"], {"z": c64(1, 3)}), "'n'", "input roi"),
    (lambda: unary("Resize", [2, 4], {"coordinate_transformation_mode": "tf_crop_and_resize"},
                   ["roi", "", "z"], {"roi": np.array([0, 0.25, 1, 1], np.float32),
                                      "z": c64(2, 1)}), "'n'", "needs both > 1"),
    (lambda: unary("Resize", [1, 4], {"keep_aspect_ratio_policy": "not_larger"},
                   ["", "", "z"], {"z": c64(1, 3)}), "'n'", "keep_aspect_ratio_policy"),
    (lambda: unary("Resize", [1, 4], {"nearest_mode": "banker"}, ["", "s"],
                   {"s": np.array([1, 2], np.float32)}), "'n'", "nearest_mode"),
    (lambda: unary("Resize", [1, 4], extra=["s"], inits={"s": np.array([1, 2], np.float32)},
                   opset=10), "'n'", "Resize-10"),
    (lambda: unary("Upsample", [1, 4], extra=["s"], inits={"s": np.array([1, 2], np.float32)},
                   opset=9), "'n'", "op Upsample"),
    (lambda: make([oh.make_node("Constant", [], ["y"], value_string="hi", name="k")], {},
                  {"y": np.float32}), "'k'", "value_string"),
    (lambda: unary("Relu", [0, 3]), "'x'", "shape[0] is 0"),
    (lambda: make([], {"x": (np.float32, [2])}, {"x": np.float32}), "'x'",
     "is the graph input"),
    (lambda: make([oh.make_node("Constant", [], ["c"], value=numpy_helper.from_array(
        np.zeros((2, 0), np.float32)))], {}, {"c": np.float32}), "'c'", "empty tensor"),
])
def test_unsupported_feature_names_node_and_attribute(build, node, what):
    with pytest.raises(gradc.UnsupportedError) as info:
        gradc.from_onnx(build())
    assert node in str(info.value) and what in str(info.value), str(info.value)


def test_unsupported_graph_input_types():
    ins = [oh.make_tensor_value_info("s", TP.STRING, [2]),
           oh.make_tensor_value_info("b", TP.BFLOAT16, [2]),
           oh.make_tensor_value_info("r", TP.FLOAT, None)]
    m = oh.make_model(oh.make_graph([], "g", ins, []), opset_imports=[oh.make_opsetid("", 18)])
    with pytest.raises(gradc.UnsupportedError) as info:
        gradc.from_onnx(m)
    assert [p.split(":")[0] for p in info.value.problems] == \
        ["graph input 's'", "graph input 'b'", "graph input 'r'"]
    assert "STRING" in str(info.value) and "BFLOAT16" in str(info.value)
    assert "rank is unknown" in str(info.value)


# -- arguments gradc rejects: VerifyError naming the ONNX node -------------------------------

@pytest.mark.parametrize("build,what", [
    (lambda: unary("Slice", [4], extra=["s", "e", "a", "t"],
                   inits={"s": c64(0), "e": c64(4), "a": c64(0), "t": c64(0)}),
     "steps[0]: expected a non-zero integer, got 0"),
    (lambda: unary("Slice", [4], extra=["s", "e", "a"],
                   inits={"s": c64(0), "e": c64(4), "a": c64(1)}), "axes[0]"),
    (lambda: unary("Slice", [4], extra=["s", "e"], inits={"s": c64(0, 1), "e": c64(4)}),
     "the same length"),
    (lambda: make([oh.make_node("Add", ["a", "b"], ["y"], name="n")],
                  {"a": (np.float32, [2, 3]), "b": (np.float32, [4])}, {"y": np.float32}),
     "add: rhs.shape"),
    (lambda: make([oh.make_node("Add", ["a", "b"], ["y"], name="n")],
                  {"a": (np.float32, [2]), "b": (np.float64, [2])}, {"y": np.float32}),
     "add: rhs.dtype"),
    (lambda: unary("MaxPool", [1, 1, 4, 4], {"kernel_shape": [2]}), "kernel_shape: expected 2"),
    (lambda: unary("MaxPool", [1, 1, 4, 4], {"kernel_shape": [2, 0]}),
     "max_pooling: window_size[1]"),
    (lambda: unary("MaxPool", [1, 1, 4, 4], {"kernel_shape": [2.0, 2.0]}),
     "kernel_shape: expected ints, got floats"),
    (lambda: unary("MaxPool", [1, 1, 4, 4]), "kernel_shape"),
    (lambda: unary("Clip", [3], {}, ["lo"], {"lo": np.array(-200, np.int32)}, 13, np.int8),
     "clip: min"),
    (lambda: unary("Clip", [3], {}, ["lo"], {"lo": np.array([1, 2], np.float32)}, 13),
     "input min: expected a scalar"),
    (lambda: unary("Resize", [1, 4], extra=["", "s", "z"],
                   inits={"s": np.array([1, 2], np.float32), "z": c64(1, 8)}),
     "exactly one of them, got both"),
    (lambda: unary("Resize", [1, 4], extra=["", "s"], inits={"s": np.array([1, 0], np.float32)}),
     "scales[1]: expected a finite scale > 0"),
    (lambda: unary("Resize", [1, 4], extra=["", "s"], inits={"s": np.array([1, 0.1], np.float32)}),
     "output size >= 1"),
    (lambda: unary("Resize", [1, 4], extra=["", "s"], inits={"s": np.array([2], np.float32)}),
     "scales: expected 2 values"),
    (lambda: unary("Reshape", [2, 3], extra=["s"], inits={"s": c64(4, -1)}), "reshape: shape"),
    (lambda: unary("Reshape", [2, 3], extra=["s"], inits={"s": c64(2, 0, 0)}), "shape[2]"),
    (lambda: unary("ReduceSum", [2, 3], extra=["a"], inits={"a": c64(2)}), "axes[0]"),
    (lambda: make([oh.make_node("Relu", [], ["y"], name="n")], {}, {"y": np.float32}),
     "input X: expected a value"),
])
def test_rejected_arguments_raise_verify_error_naming_the_node(build, what):
    with pytest.raises(gradc.VerifyError) as info:
        gradc.from_onnx(build())
    msg = str(info.value)
    assert msg.startswith(("Slice 'n'", "Add 'n'", "MaxPool 'n'", "Clip 'n'", "Resize 'n'",
                           "Reshape 'n'", "ReduceSum 'n'", "Relu 'n'")), msg
    assert what in msg, msg


# -- malformed models and inputs -----------------------------------------------------------------

def _cyclic():
    return make([oh.make_node("Relu", ["b"], ["a"], name="r1"),
                 oh.make_node("Neg", ["a"], ["b"], name="r2")],
                {"x": (np.float32, [2])}, {"a": np.float32})


@pytest.mark.parametrize("build,error,what", [
    (_cyclic, gradc.VerifyError, "cycle"),
    (lambda: make([oh.make_node("Relu", ["nope"], ["y"], name="r")], {"x": (np.float32, [2])},
                  {"y": np.float32}), gradc.VerifyError, "Relu 'r': input 'nope' is not defined"),
    (lambda: make([oh.make_node("Relu", ["x"], ["y"], name="r1"),
                   oh.make_node("Neg", ["x"], ["y"], name="r2")], {"x": (np.float32, [2])},
                  {"y": np.float32}), gradc.VerifyError, "Neg 'r2': output 'y' is defined twice"),
    (lambda: make([oh.make_node("Relu", ["x"], ["x"], name="r")], {"x": (np.float32, [2])},
                  {"x": np.float32}), gradc.VerifyError, "output 'x' is defined twice"),
    (lambda: make([oh.make_node("Relu", ["x"], ["y"])], {"x": (np.float32, [2])},
                  {"z": np.float32}), gradc.VerifyError, "graph output 'z' is not defined"),
])
def test_malformed_graphs(build, error, what):
    with pytest.raises(error) as info:
        gradc.from_onnx(build())
    assert what in str(info.value)


def test_duplicate_graph_output_names():
    m = unary("Relu", [2])
    m.graph.output.append(m.graph.output[0])
    with pytest.raises(gradc.VerifyError, match="graph output 'y' is listed twice"):
        gradc.from_onnx(m)


def test_topologically_unsorted_nodes_are_sorted():
    m = make([oh.make_node("Neg", ["a"], ["y"]), oh.make_node("Relu", ["x"], ["a"])],
             {"x": (np.float32, [2])}, {"y": np.float32})
    assert [n.op for n in gradc.from_onnx(m).nodes] == ["relu", "neg"]


def test_bad_sources(tmp_path):
    with pytest.raises(gradc.GradcError, match="no such file"):
        gradc.from_onnx(str(tmp_path / "missing.onnx"))
    with pytest.raises(gradc.GradcError, match="is a directory"):
        gradc.from_onnx(tmp_path)
    for bad in (42, None, oh.make_graph([], "g", [], []), {"graph": 1}):
        with pytest.raises(gradc.VerifyError, match="model_or_path: expected an onnx.ModelProto"):
            gradc.from_onnx(bad)
    for data in (b"", b"\xff\xff\xff\xff garbage", b"\x0a\x05abc"):
        with pytest.raises(gradc.ParseError):
            gradc.from_onnx(data)
    p = tmp_path / "bad.onnx"
    p.write_bytes(b"\x08\x07\x12\x99\x99")
    with pytest.raises(gradc.ParseError, match="bad.onnx"):
        gradc.from_onnx(p)


def test_truncated_and_corrupted_bytes_only_raise_gradc_errors():
    from gradc.examples import build_example_model
    data = build_example_model().SerializeToString()
    rng = np.random.default_rng(7)
    cuts = list(range(0, len(data), max(1, len(data) // 60)))
    flips = []
    for _ in range(120):
        b = bytearray(data)
        for i in rng.integers(0, len(b), size=int(rng.integers(1, 4))):
            b[i] = int(rng.integers(0, 256))
        flips.append(bytes(b))
    for blob in [data[:c] for c in cuts] + flips:
        try:
            gradc.from_onnx(blob)
        except gradc.GradcError as e:
            assert str(e)


def test_external_data_is_read_from_a_path_but_never_from_bytes(tmp_path):
    from onnx.external_data_helper import convert_model_to_external_data
    m = make([oh.make_node("Mul", ["x", "w"], ["y"])], {"x": (np.float32, [64])},
             {"y": np.float32}, {"w": np.arange(64, dtype=np.float32)})
    convert_model_to_external_data(m, location="w.bin", size_threshold=0)
    onnx.save_model(m, str(tmp_path / "m.onnx"))
    x = distinct((64,))
    g = gradc.from_onnx(tmp_path / "m.onnx")
    y = gradc.compile(g, target="reference", passes=None)(x=x)["y"]
    assert_bits(y, x * np.arange(64, dtype=np.float32))
    with pytest.raises(gradc.VerifyError, match="initializer .w.: its data is stored in an"):
        gradc.from_onnx(onnx.load_model(str(tmp_path / "m.onnx"), load_external_data=False))
    (tmp_path / "w.bin").unlink()
    with pytest.raises(gradc.ParseError, match="m.onnx"):
        gradc.from_onnx(tmp_path / "m.onnx")
