"""ONNX import of Concat, Split, Transpose, Pad, OneHot, Flatten, Squeeze and Unsqueeze
(SPEC-training §21): every opset form against onnxruntime, and the refused forms."""

from __future__ import annotations

import numpy as np
import pytest

import gradc

pytest.importorskip("onnxruntime")
from onnx import helper as oh  # noqa: E402

from movement_onnx_cases import F32, one_hot_case, pad_case, split_case  # noqa: E402
from helpers import assert_bits  # noqa: E402
from onnx_import_helpers import c64, cross_check, distinct, make, run_ort, unary  # noqa: E402


def ops_of(model):
    return [n.op for n in gradc.from_onnx(model).nodes]


@pytest.mark.parametrize("opset", [9, 11, 13])
def test_concat_of_inputs_and_a_constant(opset):
    nodes = [oh.make_node("Concat", ["a", "c", "b"], ["y"], axis=-2)]
    m = make(nodes, {"a": (F32, [2, 1, 3]), "b": (F32, [2, 2, 3])}, {"y": F32},
             {"c": np.full((2, 1, 3), 0.5, F32)}, opset)
    cross_check(m, {"a": distinct((2, 1, 3)), "b": distinct((2, 2, 3))})
    assert "join" in ops_of(m)


def test_concat_keeps_a_symbolic_batch():
    nodes = [oh.make_node("Concat", ["a", "b"], ["y"], axis=1)]
    m = make(nodes, {"a": (F32, ["N", 1]), "b": (F32, ["N", 2])}, {"y": F32})
    assert gradc.from_onnx(m).outputs[0].type.shape == ("N", 3)
    cross_check(m, {"a": distinct((3, 1)), "b": distinct((3, 2))})


@pytest.mark.parametrize("opset,sizes,outputs,attrs", [
    (11, [1, 4], 2, {}), (11, None, 5, {}), (13, [2, 3], 2, {}), (13, None, 5, {}),
    (18, [3, 2], 2, {}), (18, None, 2, {"num_outputs": 2}), (18, None, 3, {"num_outputs": 3}),
    (9, [4, 1], 2, {}),
])
def test_split_forms(opset, sizes, outputs, attrs):
    m, feeds = split_case(opset, sizes, outputs, **attrs)
    got = cross_check(m, feeds)
    assert [a.shape[1] for a in got.values()] == (sizes or [
        [1] * 5, [3, 2], [2, 2, 1]][[5, 2, 3].index(outputs)])


def test_split_refusals():
    x = {"x": (F32, ["N", 4])}
    m = make([oh.make_node("Split", ["x"], ["y", "z"], axis=0, num_outputs=2)], x,
             {"y": F32, "z": F32}, None, 18)
    with pytest.raises(gradc.UnsupportedError, match="Split node #0.*attribute axis.*symbolic"):
        gradc.from_onnx(m)
    m, _ = split_case(13, None, 2)  # 5 in two equal parts
    with pytest.raises(gradc.VerifyError, match="divides the axis size 5"):
        gradc.from_onnx(m)
    m, _ = split_case(13, [2, 2], 2)
    with pytest.raises(gradc.VerifyError, match="split: split_sizes: expected sizes that sum"):
        gradc.from_onnx(m)


@pytest.mark.parametrize("perm", [None, [1, 2, 0]])
def test_transpose(perm):
    attrs = {} if perm is None else {"perm": perm}
    m = unary("Transpose", ["N", 3, 4], attrs)
    cross_check(m, {"x": distinct((2, 3, 4))})


@pytest.mark.parametrize("opset,pads,axes", [
    (9, (1, 0, 2, 0, 2, 1), None), (11, (1, 0, 2, 0, 2, 1), None), (13, (0, 1, 0, 2, 0, 0), None),
    (18, (1, 2, 0, 3), (0, -1)), (19, (1, 0, 2, -1, 2, 1), None), (18, (-1, 0, -2, 0, 0, -1), None),
])
def test_pad_forms_and_negative_pads_crop(opset, pads, axes):
    m, feeds = pad_case(opset, pads, value=-0.0 if opset == 13 else 1.5, axes=axes)
    cross_check(m, feeds)
    names = ops_of(m)
    assert ("pad" in names) == any(p > 0 for p in pads)
    assert ("slice" in names) == any(p < 0 for p in pads)


def test_pad_of_integers():
    node = oh.make_node("Pad", ["x", "p", "v"], ["y"])
    m = make([node], {"x": (np.int8, [2, 3])}, {"y": np.int8},
             {"p": c64(1, 0, 0, 2), "v": np.int8(-7)}, 18)
    cross_check(m, {"x": np.arange(6, dtype=np.int8).reshape(2, 3)})


@pytest.mark.parametrize("mode", ["reflect", "edge", "wrap"])
def test_pad_modes_other_than_constant_are_refused(mode):
    m, _ = pad_case(18, (1, 0, 0, 0, 0, 0), mode=mode)
    with pytest.raises(gradc.UnsupportedError, match=f"Pad node #0.*attribute mode: '{mode}'"):
        gradc.from_onnx(m)


def test_pad_cropping_everything_is_refused():
    m, _ = pad_case(18, (0, 0, -2, 0, 0, -2))
    with pytest.raises(gradc.UnsupportedError, match="input pads: cropping axis 2"):
        gradc.from_onnx(m)


@pytest.mark.parametrize("axis", [-1, 0, 1, 2, -3])
@pytest.mark.parametrize("opset", [9, 11])
def test_one_hot_axes_and_opsets(axis, opset):
    m, feeds = one_hot_case(axis, opset)
    if opset == 9:
        feeds["i"] = np.abs(feeds["i"]) % 4  # opset 9 has no negative indices
    cross_check(m, feeds)
    assert "one_hot" in ops_of(m)


def test_one_hot_of_int32_indices_casts_to_int64():
    m, feeds = one_hot_case(1, 11, np.int32, depth=np.int32)
    cross_check(m, feeds)
    assert ops_of(m)[:3] == ["cast", "reshape", "constant"]


def test_one_hot_needs_constant_depth_and_values():
    node = oh.make_node("OneHot", ["i", "d", "v"], ["y"])
    m = make([node], {"i": (np.int64, [3]), "d": (np.int64, [])}, {"y": F32},
             {"v": np.array([0, 1], F32)}, 11)
    with pytest.raises(gradc.UnsupportedError, match="OneHot node #0.*input depth.*constant"):
        gradc.from_onnx(m)


@pytest.mark.parametrize("shape,axis", [((2, 3, 4), 0), ((2, 3, 4), 1), ((2, 3, 4), -1),
                                        ((2, 3, 4), 3), (("N", 3, 4), 1), (("N", 1, 4), 2)])
def test_flatten(shape, axis):
    m = unary("Flatten", list(shape), {"axis": axis}, opset=13)
    cross_check(m, {"x": distinct(tuple(2 if isinstance(d, str) else d for d in shape))})


def test_flatten_merging_a_symbol_is_refused():
    m = unary("Flatten", ["N", 3], {"axis": 2}, opset=13)
    with pytest.raises(gradc.UnsupportedError, match="Flatten 'n'.*attribute axis.*'N'"):
        gradc.from_onnx(m)


@pytest.mark.parametrize("opset", [11, 13])
def test_squeeze_and_unsqueeze_forms(opset):
    if opset < 13:
        sq = unary("Squeeze", ["N", 1, 3, 1], {"axes": [-1]}, opset=opset)
        un = unary("Unsqueeze", ["N", 3], {"axes": [0, 3]}, opset=opset)
    else:
        sq = unary("Squeeze", ["N", 1, 3, 1], extra=("a",), inits={"a": c64(-1)}, opset=opset)
        un = unary("Unsqueeze", ["N", 3], extra=("a",), inits={"a": c64(0, 3)}, opset=opset)
    cross_check(sq, {"x": distinct((2, 1, 3, 1))})
    cross_check(un, {"x": distinct((2, 3))})
    bare = unary("Squeeze", ["N", 1, 3, 1], opset=opset)  # the static 1s only
    assert gradc.from_onnx(bare).outputs[0].type.shape == ("N", 3)


def test_squeeze_refusals():
    m = unary("Squeeze", ["N", 3], extra=("a",), inits={"a": c64(0)}, opset=13)
    with pytest.raises(gradc.UnsupportedError, match="Squeeze 'n'.*input axes.*'N'"):
        gradc.from_onnx(m)
    m = unary("Squeeze", [2, 3], extra=("a",), inits={"a": c64(1)}, opset=13)
    with pytest.raises(gradc.VerifyError, match="axes: expected axes of size 1"):
        gradc.from_onnx(m)


def test_onnxruntime_pad_rewrites_float16_nan_payloads_so_the_target_concats():
    """docs/conformance.md: onnxruntime's float16 Pad quiets NaN payloads; gradc's onnx target
    pads float16 with Concat-ed slabs instead and keeps every bit."""
    x = np.array([0x7C45, 0x8000, 0x7E45], np.uint16).view(np.float16).reshape(1, 3)
    node = oh.make_node("Pad", ["x", "p", "v"], ["y"])
    m = make([node], {"x": (np.float16, [1, 3])}, {"y": np.float16},
             {"p": c64(0, 1, 0, 2), "v": np.float16(1.0)}, 18)
    ort_bits = run_ort(m, {"x": x})["y"].view(np.uint16)
    assert ort_bits[0, 1] != 0x7C45  # the payload onnxruntime changes
    want = gradc.compile(gradc.from_onnx(m), target="reference")(x=x)["y"]
    assert want.view(np.uint16)[0, 1:4].tolist() == [0x7C45, 0x8000, 0x7E45]
    assert_bits(gradc.compile(gradc.from_onnx(m), target="onnx")(x=x)["y"], want)


def test_pads_computed_by_a_transpose_of_constants_fold_at_import():
    """PyTorch's TorchScript exporter writes F.pad's pads as Reshape(Transpose(...)) of
    constants: the Transpose folds at import, so the pads are constants."""
    pairs = oh.make_tensor("c", 7, [4, 2], [0, 1, 2, 0, 0, 0, 1, 0])  # INT64 (begin, end) rows
    nodes = [oh.make_node("Constant", [], ["c"], value=pairs),
             oh.make_node("Transpose", ["c"], ["t"], perm=[1, 0]),
             oh.make_node("Reshape", ["t", "minus1"], ["p"]),
             oh.make_node("Pad", ["x", "p"], ["y"])]
    m = make(nodes, {"x": (F32, [1, 2, 2, 3])}, {"y": F32}, {"minus1": c64(-1)}, 13)
    cross_check(m, {"x": distinct((1, 2, 2, 3))})
    assert ops_of(m) == ["pad"]
