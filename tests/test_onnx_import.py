"""ONNX import (SPEC.md §7): each feature against onnxruntime, and exact structure.

Errors and unsupported features: test_onnx_import_errors.py.

Cross-checks use inputs without ties, NaN or -0 (where ONNX Runtime's documented behaviour differs
from SPEC.md's choices). Places where onnxruntime disagrees with the ONNX spec or with SPEC.md:
- MaxPool SAME with dilation: onnxruntime leaves the dilation out of the padding (§7.4 note), so
  it is tested structurally only.
- int8/uint8 linear Resize: onnxruntime truncates, gradc rounds half away from zero (§6.2), so
  integer Resize is cross-checked in nearest mode only.
- MaxPool SAME with a stride above the window: ONNX's total padding goes negative; SPEC.md
  clamps it to 0, onnxruntime shifts the windows by the negative padding.
- MaxPool ceil_mode=1 with auto_pad VALID: onnxruntime rounds the size up; ONNX and SPEC.md
  keep the floor size.
- Slice with a negative step and end 2^31-1 or 2^63-1: onnxruntime reads that end as "past the
  beginning"; ONNX (and SPEC.md §7.3) clamp it to n-1.
- Resize leaves an axis alone in onnxruntime when its output size equals its input size, even
  where ONNX maps it (tf_crop_and_resize with a cropping roi, tf_half_pixel_for_nn); the ONNX
  reference evaluator agrees with gradc there.
- Resize align_corners with a scale that is not exact in float32: onnxruntime computes
  o*(in-1)/(out-1), gradc o/f32((out-1)/(in-1)) (SPEC.md §7.5 note), so the tests use exact
  ratios.
"""

from __future__ import annotations

import numpy as np
import pytest

import gradc

onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")
from onnx import TensorProto as TP  # noqa: E402
from onnx import helper as oh  # noqa: E402
from onnx import numpy_helper  # noqa: E402

from helpers import assert_bits  # noqa: E402
from onnx_import_helpers import (  # noqa: E402
    RNG, c64, cross_check, distinct, make, only_node, resize_model, run_gradc, run_ort, unary,
)


# -- elementwise and structural ops ----------------------------------------------------------

@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.float64, np.int8, np.int32])
def test_relu(dtype):
    m = unary("Relu", [2, 3, 4], dtype=dtype)
    cross_check(m, {"x": distinct((2, 3, 4), dtype)})


def test_relu_of_a_scalar_reshapes_around_gradc_relu():
    m = unary("Relu", [], dtype=np.float32)
    for v in (-2.5, 3.5):
        cross_check(m, {"x": np.array(v, np.float32)})


CLIP_CASES = [  # (opset, attrs, bounds as (min, max) inputs or None to leave out)
    (10, {"min": -1.5, "max": 2.25}, None),
    (10, {"min": 0.5}, None),
    (10, {}, None),
    (13, {}, (-1.5, 2.25)),
    (13, {}, (0.75, None)),
    (13, {}, (None, -0.75)),
    (13, {}, (None, None)),
    (13, {}, (2.0, 1.0)),  # min > max: everything becomes max
    (11, {}, (-3.0, 3.0)),
]


@pytest.mark.parametrize("opset,attrs,bounds", CLIP_CASES)
def test_clip(opset, attrs, bounds):
    extra, inits = [], {}
    for name, v in zip(("lo", "hi"), bounds or ()):
        extra.append("" if v is None else name)
        if v is not None:
            inits[name] = np.array(v, np.float32)
    m = unary("Clip", [3, 5], attrs, extra, inits, opset)
    cross_check(m, {"x": distinct((3, 5)) / 4})


def test_clip_missing_bounds_are_the_dtype_limits_and_min_gt_max_sets_min_to_max():
    g = gradc.from_onnx(unary("Clip", [4], dtype=np.float16, opset=13))
    assert dict(only_node(g, "clip").attrs) == {"min": -65504.0, "max": 65504.0}
    m = unary("Clip", [4], {}, ["lo", "hi"], {"lo": np.array(5, np.int8),
                                              "hi": np.array(-3, np.int8)}, 13, np.int8)
    assert dict(only_node(gradc.from_onnx(m), "clip").attrs) == {"min": -3, "max": -3}
    cross_check(m, {"x": distinct((4,), np.int8)})


def test_clip_int8_with_constant_node_bounds():
    nodes = [oh.make_node("Constant", [], ["lo"], value=numpy_helper.from_array(
                 np.array(-5, np.int8))),
             oh.make_node("Constant", [], ["hi"], value=numpy_helper.from_array(
                 np.array(7, np.int8))),
             oh.make_node("Clip", ["x", "lo", "hi"], ["y"])]
    m = make(nodes, {"x": (np.int8, [16])}, {"y": np.int8})
    cross_check(m, {"x": distinct((16,), np.int8)})


@pytest.mark.parametrize("op", ["Add", "Sub", "Mul"])
@pytest.mark.parametrize("shapes", [([2, 3, 4], [4]), ([2, 1, 4], [3, 1]), ([], [2, 3])])
def test_binary_broadcasting(op, shapes):
    a, b = shapes
    m = make([oh.make_node(op, ["a", "b"], ["y"])],
             {"a": (np.float32, a), "b": (np.float32, b)}, {"y": np.float32})
    cross_check(m, {"a": distinct(a) / 8, "b": distinct(b) / 8})


def test_binary_with_initializer_and_int32_wraps():
    m = make([oh.make_node("Mul", ["x", "w"], ["p"]), oh.make_node("Add", ["p", "w"], ["q"]),
              oh.make_node("Neg", ["q"], ["y"])],
             {"x": (np.int32, [2, 3])}, {"y": np.int32},
             {"w": np.array([[2 ** 30, -7, 3]], np.int32)})
    x = np.array([[3, 5, -2], [7, 1, 2 ** 20]], np.int32)
    cross_check(m, {"x": x})
    g = gradc.from_onnx(m)
    assert [n.op for n in g.nodes] == ["constant", "mul", "add", "neg"]
    assert g.nodes[0].outputs[0].name == "w"


CONSTANTS = [
    ("value", numpy_helper.from_array(np.array([[1.5, -2.0, 3.0]], np.float32)), np.float32),
    ("value_float", 2.5, np.float32),
    ("value_floats", [1.0, -1.0, 0.5], np.float32),
    ("value_int", 7, np.int64),
    ("value_ints", [1, -2, 3], np.int64),
]


@pytest.mark.parametrize("attr,val,dtype", CONSTANTS)
def test_constant_node_variants(attr, val, dtype):
    m = make([oh.make_node("Constant", [], ["c"], **{attr: val}),
              oh.make_node("Add", ["x", "c"], ["y"])],
             {"x": (dtype, [2, 3])}, {"y": dtype})
    cross_check(m, {"x": distinct((2, 3), dtype)})


def test_identity_is_an_alias_that_still_names_its_graph_output():
    m = make([oh.make_node("Relu", ["x"], ["r"]), oh.make_node("Identity", ["r"], ["z"]),
              oh.make_node("Identity", ["z"], ["w"])],
             {"x": (np.float32, [3])}, {"w": np.float32, "r": np.float32})
    g = gradc.from_onnx(m)
    assert [v.name for v in g.outputs] == ["w", "r"]
    assert [n.op for n in g.nodes] == ["relu", "identity"]
    cross_check(m, {"x": distinct((3,))})


def test_graph_output_that_is_an_initializer_or_a_constant():
    m = make([oh.make_node("Constant", [], ["c"], value_floats=[1.0, 2.0]),
              oh.make_node("Identity", ["w"], ["wi"])],
             {}, {"c": np.float32, "wi": np.float32}, {"w": np.array([3.0], np.float32)})
    cross_check(m, {})


RESHAPES = [([2, 3, 4], [0, -1]), ([2, 3, 4], [-1]), ([2, 3, 4], [4, 0, 2]),
            ([2, 3, 4], [0, 0, 2, 2]), ([6], [2, -1, 1])]


@pytest.mark.parametrize("shape,target", RESHAPES)
def test_reshape(shape, target):
    m = unary("Reshape", shape, extra=["s"], inits={"s": np.array(target, np.int64)})
    cross_check(m, {"x": distinct(shape)})


def test_reshape_keeps_a_symbolic_batch_dim():
    for target, want in [([0, -1], ("N", 12)), ([-1, 12], ("N", 12)), ([0, 3, 2, 2], None)]:
        m = unary("Reshape", ["N", 3, 4], extra=["s"], inits={"s": np.array(target, np.int64)})
        g = gradc.from_onnx(m)
        if want:
            assert g.outputs[0].type.shape == want
        for n in (1, 3):
            cross_check(m, {"x": distinct((n, 3, 4))})


def test_reshape_1_takes_its_shape_as_an_attribute():
    node = oh.make_node("Reshape", ["x"], ["y"], shape=[2, 0, -1])
    m = make([node], {"x": (np.float32, [3, 4, 2])}, {"y": np.float32}, opset=6)
    m.opset_import[0].version = 4  # Reshape-1 (onnxruntime does not load opset 4: import only)
    g = gradc.from_onnx(m)
    assert g.outputs[0].type.shape == (2, 4, 3)
    x = distinct((3, 4, 2))
    assert_bits(gradc.compile(g, target="reference", passes=None)(x=x)["y"], x.reshape(2, 4, 3))


@pytest.mark.parametrize("src,to", [(np.float32, TP.INT32), (np.int64, TP.FLOAT),
                                    (np.float32, TP.FLOAT16), (np.uint8, TP.INT8)])
def test_cast(src, to):
    out = {TP.INT32: np.int32, TP.FLOAT: np.float32, TP.FLOAT16: np.float16,
           TP.INT8: np.int8}[to]
    m = unary("Cast", [2, 5], {"to": to}, dtype=src, out_dtypes=[out])
    x = distinct((2, 5), src) if np.dtype(src).kind != "u" else np.arange(10, dtype=src)
    cross_check(m, {"x": x.reshape(2, 5) if src != np.uint8 else (x * 20).reshape(2, 5)})


REDUCES = [  # (opset, axes, keepdims, noop)
    (11, [1], 1, None), (11, [-1, 0], 0, None), (11, None, 1, None), (11, None, 0, None),
    (13, [1], 0, None), (13, [-2], 1, None), (13, None, 1, 0), (13, None, 0, 0),
    (13, None, 1, 1), (13, [], 0, 1), (13, [], 1, 0),
]


@pytest.mark.parametrize("opset,axes,keepdims,noop", REDUCES)
def test_reduce_sum(opset, axes, keepdims, noop):
    attrs = {"keepdims": keepdims}
    extra, inits = [], {}
    if opset < 13 and axes is not None:
        attrs["axes"] = axes
    elif axes is not None:
        extra, inits = ["axes"], {"axes": np.array(axes, np.int64)}
    if noop is not None:
        attrs["noop_with_empty_axes"] = noop
    m = unary("ReduceSum", [2, 3, 4], attrs, extra, inits, opset)
    x = distinct((2, 3, 4)) / 4  # dyadic: every partial sum is exact in float32
    cross_check(m, {"x": x})
    if noop:
        assert [n.op for n in gradc.from_onnx(m).nodes] == ["identity"]


# -- symbolic dims and names -------------------------------------------------------------------

def test_dim_param_and_unnamed_dims_become_symbols():
    x = oh.make_tensor_value_info("x", TP.FLOAT, ["N", 3, None])
    y = oh.make_tensor_value_info("y", TP.FLOAT, None)
    m = oh.make_model(oh.make_graph([oh.make_node("Relu", ["x"], ["y"])], "", [x], [y]),
                      opset_imports=[oh.make_opsetid("", 18)])
    m.ir_version = 8
    g = gradc.from_onnx(m)
    assert g.name == "main"
    assert g.inputs[0].type.shape == ("N", 3, "unk__0")
    for n, w in ((1, 2), (4, 5)):
        cross_check(m, {"x": distinct((n, 3, w))})


def test_odd_value_names_survive_and_print_round_trips():
    nodes = [oh.make_node("Relu", ["in:0"], ["a b/c"]), oh.make_node("Neg", ["a b/c"], ["%out"])]
    m = make(nodes, {"in:0": (np.float32, [2])}, {"%out": np.float32}, name="my graph")
    g = gradc.from_onnx(m)
    assert g.name == "my graph"
    assert [v.name for v in g.values()] == ["in:0", "a b/c", "%out"]
    assert gradc.parse(str(g)) == g
    cross_check(m, {"in:0": np.array([1.5, -2.5], np.float32)})


def test_initializer_that_is_also_a_graph_input_is_a_constant():
    w = numpy_helper.from_array(np.array([2.0, 3.0], np.float32), "w")
    ins = [oh.make_tensor_value_info(k, TP.FLOAT, [2]) for k in ("x", "w")]
    m = oh.make_model(oh.make_graph([oh.make_node("Mul", ["x", "w"], ["y"])], "g", ins,
                                    [oh.make_tensor_value_info("y", TP.FLOAT, None)], [w]),
                      opset_imports=[oh.make_opsetid("", 13)])
    m.ir_version = 7
    g = gradc.from_onnx(m)
    assert [v.name for v in g.inputs] == ["x"]
    cross_check(m, {"x": np.array([1.5, -1.0], np.float32)})


def test_from_bytes_and_path(tmp_path):
    m = unary("Relu", [3])
    p = tmp_path / "m.onnx"
    p.write_bytes(m.SerializeToString())
    assert gradc.from_onnx(str(p)) == gradc.from_onnx(m.SerializeToString()) == \
        gradc.from_onnx(p) == gradc.from_onnx(m)


# -- Slice ----------------------------------------------------------------------------------------

SLICES = [  # (starts, ends, axes, steps) on a [5, 6, 7] input
    ([1], [4], [0], None),
    ([0, 1], [5, -1], [0, 2], [2, 3]),
    ([-1], [-100], [1], [-1]),
    ([5], [0], [2], [-2]),
    ([-2, 4], [-7, -9], [-1, 0], [-2, -3]),
    ([-100, 2], [100, 3], [0, 1], None),
    ([10], [-10], [2], [-3]),
    ([2], [2 ** 63 - 1], [2], [1]),
    ([-(2 ** 63)], [-(2 ** 63)], [0], [-1]),  # clamps to [-1, ...]: count 0 -> see errors
]


@pytest.mark.parametrize("starts,ends,axes,steps", SLICES[:-1])
def test_slice(starts, ends, axes, steps):
    names = ["starts", "ends", "axes"] + (["steps"] if steps else [])
    inits = {k: c64(*v) for k, v in zip(names, (starts, ends, axes, steps))}
    m = unary("Slice", [5, 6, 7], extra=names, inits=inits)
    cross_check(m, {"x": distinct((5, 6, 7))})


def test_slice_step_minus_2_maps_to_the_expected_window_fields():
    # axis 1 (size 6): start 5, end 0, step -2 -> elements 5, 3, 1: window [1, 5], copy from 5
    inits = {"s": c64(5), "e": c64(0), "a": c64(1), "t": c64(-2)}
    g = gradc.from_onnx(unary("Slice", [2, 6], extra=["s", "e", "a", "t"], inits=inits))
    assert dict(only_node(g, "slice").attrs) == {
        "input_window_offsets": (0, 1), "input_window_sizes": (2, 5),
        "input_window_strides": (1, -2), "output_sizes": (2, 3)}


def test_slice_1_attributes():
    m = unary("Slice", [4, 5], {"starts": [1, -3], "ends": [3, 1000], "axes": [0, -1]},
              opset=9)
    cross_check(m, {"x": distinct((4, 5))})
    m = unary("Slice", [4, 5], {"starts": [1], "ends": [3]}, opset=9)
    cross_check(m, {"x": distinct((4, 5))})


def test_slice_whole_symbolic_axis_and_int_starts():
    inits = {"s": np.array([0, 1], np.int32), "e": np.array([2 ** 31 - 1, 3], np.int32),
             "a": np.array([0, 1], np.int32)}
    m = unary("Slice", ["N", 4], extra=["s", "e", "a"], inits=inits, dtype=np.int8)
    assert gradc.from_onnx(m).outputs[0].type.shape == ("N", 2)
    for n in (1, 3):
        cross_check(m, {"x": distinct((n, 4), np.int8)})


# -- MaxPool ------------------------------------------------------------------------------------

POOLS = [  # (input shape, attrs)
    ([2, 3, 7, 8], {"kernel_shape": [2, 2], "strides": [2, 2]}),
    ([1, 2, 7, 8], {"kernel_shape": [3, 2], "pads": [1, 0, 1, 1]}),
    ([1, 2, 9, 9], {"kernel_shape": [2, 3], "dilations": [2, 2], "strides": [1, 2]}),
    ([1, 2, 7, 8], {"kernel_shape": [2, 2], "strides": [2, 2], "ceil_mode": 1}),
    ([1, 2, 7, 7], {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1],
                    "ceil_mode": 1}),
    ([1, 1, 10, 9], {"kernel_shape": [3, 2], "strides": [3, 2], "dilations": [2, 1],
                     "ceil_mode": 1}),
    ([1, 2, 7, 8], {"kernel_shape": [3, 3], "strides": [2, 3], "auto_pad": "VALID"}),
    ([1, 2, 7, 8], {"kernel_shape": [3, 2], "strides": [2, 3], "auto_pad": "SAME_UPPER"}),
    ([1, 2, 7, 8], {"kernel_shape": [4, 2], "strides": [2, 3], "auto_pad": "SAME_LOWER"}),
    ([1, 2, 4, 5, 6], {"kernel_shape": [2, 2, 3], "strides": [1, 2, 2], "pads": [0, 1, 1] * 2}),
]


@pytest.mark.parametrize("shape,attrs", POOLS)
@pytest.mark.parametrize("indices", [False, True])
def test_maxpool(shape, attrs, indices):
    m = unary("MaxPool", shape, attrs, out_dtypes=[np.float32] + [np.int64] * indices)
    cross_check(m, {"x": distinct(shape)})


@pytest.mark.parametrize("dtype", [np.int8, np.uint8, np.float16, np.float64])
def test_maxpool_other_dtypes(dtype):
    m = unary("MaxPool", [1, 2, 5, 5], {"kernel_shape": [2, 2], "pads": [1, 1, 0, 0]},
              dtype=dtype)
    x = distinct((1, 2, 5, 5), dtype) if dtype != np.uint8 else \
        RNG.permutation(50).astype(np.uint8).reshape(1, 2, 5, 5)
    cross_check(m, {"x": x})


@pytest.mark.parametrize("auto_pad,want", [("SAME_UPPER", ((2, 1), (2, 2))),
                                           ("SAME_LOWER", ((2, 2), (2, 1)))])
def test_maxpool_same_with_dilation_follows_onnx_formula(auto_pad, want):
    # in (7, 8), kernel (3, 2), strides (2, 1), dilations (2, 3): out = ceil(in/s) = (4, 8);
    # total = max(0, (out-1)*s + (w-1)*d + 1 - in) = (4, 3). Not checked against onnxruntime
    # (SPEC.md §7.4: it leaves the dilation out).
    m = unary("MaxPool", [1, 1, 7, 8], {"kernel_shape": [3, 2], "strides": [2, 1],
                                        "dilations": [2, 3], "auto_pad": auto_pad})
    node = only_node(gradc.from_onnx(m), "max_pooling")
    assert (node.attrs["start_padding"], node.attrs["end_padding"]) == want
    assert node.outputs[0].type.shape == (1, 1, 4, 8)


def test_maxpool_ceil_mode_drops_a_window_that_starts_in_the_end_padding():
    # in 3, kernel 2, stride 2, pads 1/1: ceil gives 3 windows, the last one starts at 4 >= 3+1.
    m = unary("MaxPool", [1, 1, 3, 3], {"kernel_shape": [2, 2], "strides": [2, 2],
                                        "pads": [1, 1, 1, 1], "ceil_mode": 1})
    assert only_node(gradc.from_onnx(m), "max_pooling").attrs["output_sizes"] == (2, 2)
    cross_check(m, {"x": distinct((1, 1, 3, 3))})


def test_maxpool_symbolic_batch():
    m = unary("MaxPool", ["N", 2, 6, 6], {"kernel_shape": [2, 2], "strides": [2, 2]},
              out_dtypes=[np.float32, np.int64])
    for n in (1, 2):
        cross_check(m, {"x": distinct((n, 2, 6, 6))})


# -- Resize ---------------------------------------------------------------------------------------

COORDS = ["half_pixel", "pytorch_half_pixel", "asymmetric"]
NEAREST = ["round_prefer_floor", "round_prefer_ceil", "floor", "ceil"]
RESIZE_SIZES = [  # (input shape, scales or None, sizes or None): coordinates exact in float32
    ([1, 2, 4, 5], [1, 1, 2, 3], None),
    ([1, 1, 6, 8], [1, 1, 0.5, 0.25], None),
    ([2, 1, 4, 3], None, [2, 1, 7, 5]),
    ([1, 1, 5, 4], None, [1, 1, 9, 1]),
]
ALIGN_SIZES = [  # align_corners: (out-1)/(in-1) a power of two, or in/out 1
    ([1, 2, 5, 9], None, [1, 2, 9, 3]),
    ([1, 1, 3, 5], None, [1, 1, 5, 1]),
    ([2, 1, 1, 4], None, [2, 1, 3, 7]),
]
TF_NN_SIZES = [  # tf_half_pixel_for_nn: every axis resized or of size 1 (see test docstring)
    ([1, 1, 4, 5], [1, 1, 2, 3], None),
    ([1, 1, 6, 8], [1, 1, 0.5, 0.25], None),
]


RESIZE_CASES = ([(c, *k) for c in COORDS for k in RESIZE_SIZES]
                + [("align_corners", *k) for k in ALIGN_SIZES])


@pytest.mark.parametrize("coord,shape,scales,sizes", RESIZE_CASES)
@pytest.mark.parametrize("nearest", NEAREST)
def test_resize_nearest(coord, shape, scales, sizes, nearest):
    m = resize_model(shape, scales, sizes, mode="nearest", nearest_mode=nearest,
                     coordinate_transformation_mode=coord)
    cross_check(m, {"x": distinct(shape)})


@pytest.mark.parametrize("coord,shape,scales,sizes", RESIZE_CASES + [
    ("tf_half_pixel_for_nn", *k) for k in TF_NN_SIZES])
def test_resize_linear(coord, shape, scales, sizes):
    """tf_half_pixel_for_nn maps an axis of scale 1 to o + 0.5 (ONNX's formula, SPEC.md §7.5),
    which onnxruntime skips (it leaves scale-1 axes untouched), hence TF_NN_SIZES."""
    m = resize_model(shape, scales, sizes, mode="linear", coordinate_transformation_mode=coord)
    cross_check(m, {"x": distinct(shape)}, exact=False)


@pytest.mark.parametrize("nearest", NEAREST)
def test_resize_tf_half_pixel_for_nn_opset_11(nearest):
    m = resize_model([1, 1, 3, 4], [1, 1, 2, 1.5], None, opset=11, roi=[],
                     coordinate_transformation_mode="tf_half_pixel_for_nn", nearest_mode=nearest)
    cross_check(m, {"x": distinct((1, 1, 3, 4))})


@pytest.mark.parametrize("mode", ["nearest", "linear"])
@pytest.mark.parametrize("shape,roi,sizes", [
    ([5, 9], [0.25, 0.5, 0.75, 1], [6, 7]),  # 2-D: onnxruntime's linear refuses this in 4-D
    ([1, 2, 5, 9], [0, 0, 0, 0.25, 1, 1, 1, 0.75], [1, 2, 9, 3]),
])
def test_resize_tf_crop_and_resize(mode, shape, roi, sizes):
    m = resize_model(shape, None, sizes, roi=roi, mode=mode,
                     coordinate_transformation_mode="tf_crop_and_resize")
    cross_check(m, {"x": distinct(shape)}, exact=mode == "nearest")


@pytest.mark.parametrize("mode", ["nearest", "linear"])
@pytest.mark.parametrize("shape,sizes", [([1, 1, 5, 6], [1, 1, 1, 11]),
                                         ([1, 1, 1, 4], [1, 1, 3, 7])])
def test_resize_tf_crop_and_resize_full_roi_with_size_1(mode, shape, sizes):
    # roi [0, 1]: output size 1 samples the centre (in-1)/2; input size 1 clamps to 0 (ONNX).
    m = resize_model(shape, None, sizes, roi=[0] * 4 + [1] * 4, mode=mode,
                     coordinate_transformation_mode="tf_crop_and_resize")
    cross_check(m, {"x": distinct(shape)}, exact=mode == "nearest")


def test_resize_tf_crop_and_resize_of_equal_size_follows_onnx_not_onnxruntime():
    # onnxruntime leaves an axis whose output size equals its input size untouched, even when
    # its roi crops it; ONNX (and its reference evaluator) map o to start*(in-1) + o*(...).
    from onnx.reference import ReferenceEvaluator
    m = resize_model([1, 1, 5, 9], None, [1, 1, 5, 7], roi=[0, 0, 0.25, 0.5, 1, 1, 0.75, 1],
                     coordinate_transformation_mode="tf_crop_and_resize")
    x = distinct((1, 1, 5, 9))
    want = ReferenceEvaluator(m).run(None, {"x": x})[0]
    assert_bits(run_gradc(m, {"x": x})["y"], want)
    assert_bits(want[0, 0, :, 0], x[0, 0, [1, 1, 2, 2, 3], 4])


def test_resize_tf_crop_and_resize_with_scales_ignores_roi_for_the_size():
    m = resize_model([1, 1, 5, 5], [1, 1, 2, 2], None, roi=[0, 0, 0.25, 0.25, 1, 1, 0.75, 0.75],
                     coordinate_transformation_mode="tf_crop_and_resize")
    assert cross_check(m, {"x": distinct((1, 1, 5, 5))})["y"].shape == (1, 1, 10, 10)


def test_resize_axes_and_constant_node_scales():
    scales = oh.make_tensor("v", TP.FLOAT, [2], [3.0, 2.0])
    nodes = [oh.make_node("Constant", [], ["sc"], value=scales),
             oh.make_node("Resize", ["x", "", "sc"], ["y"], axes=[-1, 2], mode="linear")]
    m = make(nodes, {"x": (np.float32, ["N", 2, 3, 4])}, {"y": np.float32})
    g = gradc.from_onnx(m)
    assert g.outputs[0].type.shape == ("N", 2, 6, 12)
    for n in (1, 2):
        cross_check(m, {"x": distinct((n, 2, 3, 4))}, exact=False)


@pytest.mark.parametrize("dtype", [np.uint8, np.int8, np.float16])
def test_resize_nearest_small_dtypes(dtype):
    m = resize_model([1, 1, 4, 4], [1, 1, 1.5, 0.5], None, dtype=dtype,
                     nearest_mode="round_prefer_ceil")
    x = RNG.permutation(16).astype(dtype).reshape(1, 1, 4, 4)
    cross_check(m, {"x": x})


def test_resize_pytorch_half_pixel_with_output_size_1_uses_the_table_values():
    m = resize_model([1, 1, 4, 6], None, [1, 1, 1, 3], mode="nearest",
                     coordinate_transformation_mode="pytorch_half_pixel", nearest_mode="floor")
    a = only_node(gradc.from_onnx(m), "resample").attrs
    huge = float(np.finfo(np.float32).max)
    assert a["scales"] == (huge, huge, huge, 0.5)  # out == 1 on N, C and H
    assert a["input_pixel_offsets"] == (0.0, 0.0, 0.0, 0.5)
    assert a["output_pixel_offsets"] == (0.0, 0.0, 0.0, -0.5)
    assert a["rounding_direction"] == "decreasing"
    cross_check(m, {"x": distinct((1, 1, 4, 6))})


def test_resize_field_mapping_of_each_coordinate_and_nearest_mode():
    def fields(coord, nearest="floor", shape=(1, 1, 3, 5), sizes=(1, 1, 6, 5)):
        m = resize_model(list(shape), None, list(sizes), coordinate_transformation_mode=coord,
                         nearest_mode=nearest)
        a = only_node(gradc.from_onnx(m), "resample").attrs
        return (a["scales"][2], a["input_pixel_offsets"][2], a["output_pixel_offsets"][2],
                a["rounding_direction"])
    assert fields("half_pixel") == (2.0, 0.5, -0.5, "decreasing")
    assert fields("asymmetric", "ceil") == (2.0, 0.0, 0.0, "increasing")
    assert fields("tf_half_pixel_for_nn", "round_prefer_ceil") == (2.0, -0.5, -0.5, "decreasing")
    assert fields("align_corners", "round_prefer_floor") == (2.5, 0.5, 0.0, "increasing")
    assert fields("half_pixel", sizes=(1, 1, 7, 5))[0] == float(np.float32(7 / 3))
    assert fields("align_corners", shape=(1, 1, 1, 5))[0] == float(np.finfo(np.float32).max)


# -- the bundled example model ------------------------------------------------------------------

def test_example_model_imports_and_runs():
    from gradc.examples import build_example_model
    m = build_example_model()
    onnx.checker.check_model(m, full_check=True)
    g = gradc.from_onnx(m)
    assert g.name == "example_cnn"
    assert [n.op for n in g.nodes if n.op != "constant"] == [
        "mul", "relu", "max_pooling", "clip", "slice", "resample", "add", "reduce_sum"]
    assert g.inputs[0].type.shape == ("N", 3, 16, 16) and g.outputs[0].type.shape == ("N",)
    for n in (1, 3):
        x = RNG.standard_normal((n, 3, 16, 16)).astype(np.float32)
        got = cross_check(m, {"x": x}, exact=False, rtol=1e-5, atol=1e-4)
        assert got["loss"].shape == (n,)
    t = gradc.grad(g)
    assert [v.name for v in t.outputs] == ["loss", "grad_x"]


# -- randomized cross-checks against onnxruntime --------------------------------------------

from hypothesis import assume, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

BOUNDS = st.one_of(st.integers(-9, 9), st.sampled_from([2 ** 63 - 1, -(2 ** 63), 2 ** 31 - 1]))


@st.composite
def slice_cases(draw):
    shape = draw(st.lists(st.integers(1, 6), min_size=1, max_size=3))
    axes = draw(st.lists(st.integers(-len(shape), len(shape) - 1), min_size=1,
                         max_size=len(shape), unique_by=lambda a: a % len(shape)))
    k = len(axes)
    starts = draw(st.lists(BOUNDS, min_size=k, max_size=k))
    ends = draw(st.lists(BOUNDS, min_size=k, max_size=k))
    steps = draw(st.lists(st.sampled_from([-3, -2, -1, 1, 2, 3]), min_size=k, max_size=k))
    return shape, starts, ends, axes, steps


@settings(max_examples=40)
@given(slice_cases())
def test_random_slices_match_onnxruntime(case):
    # (NumPy is no oracle here: for a negative step it empties a start below -n, where ONNX
    # clamps it to 0.)
    shape, starts, ends, axes, steps = case
    assume(not any(t < 0 and e in (2 ** 31 - 1, 2 ** 63 - 1) for e, t in zip(ends, steps)))
    inits = {k: c64(*v) for k, v in zip(("s", "e", "a", "t"), (starts, ends, axes, steps))}
    m = unary("Slice", shape, extra=["s", "e", "a", "t"], inits=inits)
    x = distinct(shape)
    if run_ort(m, {"x": x})["y"].size == 0:
        with pytest.raises(gradc.UnsupportedError, match="select nothing"):
            gradc.from_onnx(m)
        return
    cross_check(m, {"x": x})


@st.composite
def pool_cases(draw):
    nd = draw(st.integers(2, 2))
    auto_pad = draw(st.sampled_from(["NOTSET", "NOTSET", "VALID", "SAME_UPPER", "SAME_LOWER"]))
    w = draw(st.lists(st.integers(1, 3), min_size=nd, max_size=nd))
    s = draw(st.lists(st.integers(1, 3), min_size=nd, max_size=nd))
    d = draw(st.lists(st.integers(1, 2), min_size=nd, max_size=nd)) if auto_pad == "NOTSET" \
        else [1] * nd  # onnxruntime leaves the dilation out of SAME (SPEC.md §7.4)
    ext = [(wi - 1) * di + 1 for wi, di in zip(w, d)]
    size = [draw(st.integers(e, e + 5)) for e in ext]
    attrs = {"kernel_shape": w, "strides": s, "dilations": d, "auto_pad": auto_pad,
             "ceil_mode": draw(st.integers(0, 1)) if auto_pad == "NOTSET" else 0}
    if auto_pad == "NOTSET":
        attrs["pads"] = [draw(st.integers(0, wi - 1)) for wi in w + w]
    return [1, 2] + size, attrs


def _same_total_is_negative(shape, attrs):
    """SAME with a stride above the window: ONNX's total padding formula goes negative.

    SPEC.md §7.4 clamps it to 0; onnxruntime keeps the negative value and shifts the windows.
    """
    if not attrs["auto_pad"].startswith("SAME"):
        return False
    return any((-(-n // s) - 1) * s + w < n for n, s, w in
               zip(shape[2:], attrs["strides"], attrs["kernel_shape"]))


@settings(max_examples=40)
@given(pool_cases())
def test_random_maxpools_match_onnxruntime(case):
    shape, attrs = case
    assume(not _same_total_is_negative(shape, attrs))
    m = unary("MaxPool", shape, attrs, out_dtypes=[np.float32, np.int64])
    cross_check(m, {"x": distinct(shape)})


def test_onnxruntime_disagreements_follow_spec():
    # Slice: step -1 from 2 to end 2^63-1: ONNX clamps the end to n-1 = 3, which selects nothing.
    m = unary("Slice", [4], extra=["s", "e", "a", "t"],
              inits={"s": c64(2), "e": c64(2 ** 63 - 1), "a": c64(0), "t": c64(-1)})
    with pytest.raises(gradc.UnsupportedError, match="select nothing"):
        gradc.from_onnx(m)
    # MaxPool VALID with ceil_mode: the floor size (1), not onnxruntime's 2.
    m = unary("MaxPool", [1, 1, 3, 1], {"kernel_shape": [2, 1], "strides": [2, 1],
                                        "auto_pad": "VALID", "ceil_mode": 1})
    assert gradc.from_onnx(m).outputs[0].type.shape == (1, 1, 1, 1)
    # MaxPool SAME_UPPER, window 1, stride 3 on 3: total padding max(0, -2) = 0 -> element 0.
    m = unary("MaxPool", [1, 1, 1, 3], {"kernel_shape": [1, 1], "strides": [1, 3],
                                        "auto_pad": "SAME_UPPER"})
    node = only_node(gradc.from_onnx(m), "max_pooling")
    assert node.attrs["start_padding"] == node.attrs["end_padding"] == (0, 0)
    x = distinct((1, 1, 1, 3))
    assert_bits(run_gradc(m, {"x": x})["y"], x[..., :1])


def test_bundled_example_file_is_the_built_model():
    """examples/cnn.onnx (used by the README's main command) is exactly build_example_model()."""
    from pathlib import Path
    from gradc.examples import build_example_model
    path = Path(__file__).resolve().parent.parent / "examples" / "cnn.onnx"
    assert path.read_bytes() == build_example_model().SerializeToString(), (
        "examples/cnn.onnx is stale: regenerate it with "
        "`python -m gradc.examples examples/cnn.onnx`")
    assert str(gradc.examples.example("cnn")) == str(gradc.from_onnx(str(path)))
