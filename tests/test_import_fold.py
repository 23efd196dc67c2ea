"""Folding at import (``import_fold``, ``import_shape``; SPEC-transformers §28.1-§28.2), in
hand-built models: partially known shapes, symbols that travel or are refused with §28's
message, the folders' ONNX semantics against onnxruntime, Trilu both ways, and expands to
symbolic shapes that no value has exactly. PyTorch's own exports: test_import_partial_shapes.py.
"""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto as TP
from onnx import helper as oh

import gradc
from helpers import assert_bits
from onnx_import_helpers import ELEM, c64, cross_check, distinct, make, run_ort

F32 = np.float32


def _ops(model) -> list[str]:
    return [n.op for n in gradc.from_onnx(model).nodes]


def _agrees(model, feeds: dict, batches=(1, 3)) -> gradc.Graph:
    """gradc's reference target against onnxruntime, the batch axis at each size."""
    g = gradc.from_onnx(model)
    for n in batches:
        f = {k: v[:n] if v.ndim else v for k, v in feeds.items()}
        got = gradc.compile(g, target="reference")(**f)
        for name, want in run_ort(model, f).items():
            np.testing.assert_allclose(got[name], want, rtol=1e-6, err_msg=name)
    return g


# -- partially known shapes ----------------------------------------------------------------

def _heads_model(div_by: str = "four") -> object:
    """y = Relu(x) of (N, 8, 32); Reshape(y, [B, T, 4, C // 4]) from Shape(y)."""
    nodes = [oh.make_node("Relu", ["x"], ["y0"]),
             oh.make_node("Shape", ["y0"], ["s"])]
    for i, name in enumerate("BTC"):
        nodes += [oh.make_node("Gather", ["s", f"i{i}"], [name], axis=0)]
    nodes += [oh.make_node("Div", ["C", div_by], ["hd"], name="div"),
              oh.make_node("Unsqueeze", ["B", "ax"], ["b1"]),
              oh.make_node("Unsqueeze", ["T", "ax"], ["t1"]),
              oh.make_node("Unsqueeze", ["hd", "ax"], ["h1"]),
              oh.make_node("Concat", ["b1", "t1", "four1", "h1"], ["shape"], axis=0),
              oh.make_node("Reshape", ["y0", "shape"], ["y"], name="reshape")]
    inits = {"i0": np.array(0, np.int64), "i1": np.array(1, np.int64),
             "i2": np.array(2, np.int64), "four": np.array(4, np.int64), "four1": c64(4),
             "ax": c64(0)}
    return make(nodes, {"x": (F32, ["N", 8, 32])}, {"y": F32}, inits)


def test_the_static_elements_of_a_partly_symbolic_shape_are_known():
    """The issue's case without PyTorch: C // 4 of an intermediate's shape folds to 8."""
    g = _agrees(_heads_model(), {"x": distinct((3, 8, 32))})
    assert g.outputs[0].type.shape == ("N", 8, 4, 8)


def test_a_slice_of_a_shape_is_known_where_its_elements_are():
    nodes = [oh.make_node("Neg", ["x"], ["y0"]), oh.make_node("Shape", ["y0"], ["s"]),
             oh.make_node("Slice", ["s", "one", "three"], ["tc"]),
             oh.make_node("ReduceProd", ["tc"], ["n"], keepdims=1),
             oh.make_node("Concat", ["minus1", "n"], ["shape"], axis=0),
             oh.make_node("Reshape", ["y0", "shape"], ["y"])]
    m = make(nodes, {"x": (F32, ["N", 3, 5])}, {"y": F32},
             {"one": c64(1), "three": c64(3), "minus1": c64(-1)})
    assert _agrees(m, {"x": distinct((3, 3, 5))}).outputs[0].type.shape == ("N", 15)


@pytest.mark.parametrize("op,k", [("Mul", 1), ("Add", 0), ("Sub", 0), ("Div", 1)])
def test_arithmetic_that_leaves_a_symbol_keeps_it(op, k):
    nodes = [oh.make_node("Shape", ["x"], ["s"]), oh.make_node("Gather", ["s", "z"], ["n"]),
             oh.make_node(op, ["n", "k"], ["n2"]),
             oh.make_node("Unsqueeze", ["n2", "ax"], ["n1"]),
             oh.make_node("Concat", ["n1", "six"], ["shape"], axis=0),
             oh.make_node("Reshape", ["x", "shape"], ["y"])]
    m = make(nodes, {"x": (F32, ["N", 2, 3])}, {"y": F32},
             {"z": np.array(0, np.int64), "k": np.array(k, np.int64), "ax": c64(0),
              "six": c64(6)})
    assert _agrees(m, {"x": distinct((3, 2, 3))}).outputs[0].type.shape == ("N", 6)


def test_arithmetic_needing_a_symbols_value_is_refused_with_section_28s_message():
    nodes = [oh.make_node("Shape", ["x"], ["s"]), oh.make_node("Gather", ["s", "z"], ["n"]),
             oh.make_node("Mul", ["n", "k"], ["n2"], name="/Mul"),
             oh.make_node("Unsqueeze", ["n2", "ax"], ["shape"]),
             oh.make_node("Reshape", ["x", "shape"], ["y"])]
    m = make(nodes, {"x": (F32, ["N", 2])}, {"y": F32},
             {"z": np.array(0, np.int64), "k": np.array(2, np.int64), "ax": c64(0)})
    with pytest.raises(gradc.UnsupportedError) as info:
        gradc.from_onnx(m)
    assert str(info.value) == (
        "ONNX graph 't': 1 unsupported feature: Mul '/Mul': input A depends on the symbolic dim "
        "'N' (gradc has no run-time shapes; export with a fixed size for 'N')")


def test_range_of_a_symbolic_length_is_refused_with_section_28s_message():
    nodes = [oh.make_node("Shape", ["x"], ["s"]), oh.make_node("Gather", ["s", "one"], ["t"]),
             oh.make_node("Range", ["zero", "t", "one"], ["pos"], name="/transformer/Range"),
             oh.make_node("Cast", ["pos"], ["pf"], to=TP.FLOAT),
             oh.make_node("Add", ["x", "pf"], ["y"])]
    m = make(nodes, {"x": (F32, [2, "seq"])}, {"y": F32},
             {"zero": np.array(0, np.int64), "one": np.array(1, np.int64)}, name="gpt2")
    with pytest.raises(gradc.UnsupportedError) as info:
        gradc.from_onnx(m)
    assert str(info.value) == (
        "ONNX graph 'gpt2': 1 unsupported feature: Range '/transformer/Range': input limit "
        "depends on the symbolic dim 'seq' (gradc has no run-time shapes; export with a fixed "
        "size for 'seq')")


def test_a_symbol_equals_itself():
    """Equal(Gather(Shape(x), 0), Gather(Shape(x), 0)) folds (true)."""
    nodes = [oh.make_node("Shape", ["x"], ["s"]), oh.make_node("Gather", ["s", "z"], ["n"]),
             oh.make_node("Equal", ["n", "n"], ["same"]),
             oh.make_node("Where", ["same", "x", "minus"], ["y"])]
    m = make(nodes, {"x": (F32, ["N", 2])}, {"y": F32},
             {"z": np.array(0, np.int64), "minus": np.array(-1.0, F32)})
    assert "equal" not in _ops(m)


# -- the folders' semantics: known values against onnxruntime --------------------------------

I = np.array([7, -7, 6, -6, 0, 5], np.int64)
J = np.array([2, 2, -4, -4, 3, -5], np.int64)
B1 = np.array([True, True, False, False])
B2 = np.array([True, False, True, False])


@pytest.mark.parametrize("op,arrays,attrs", [
    ("Div", [I, J], {}), ("Mod", [I, J], {}), ("Mod", [I, J], {"fmod": 1}),
    ("Mod", [I.astype(F32), J.astype(F32)], {"fmod": 1}),
    ("Add", [np.array([2 ** 62], np.int64), np.array([2 ** 62], np.int64)], {}),  # wraps
    ("Max", [I, J, np.full(6, 1, np.int64)], {}), ("Min", [I, J], {}),
    ("Less", [I, J], {}), ("LessOrEqual", [I, J], {}), ("Greater", [I, J], {}),
    ("GreaterOrEqual", [I, J], {}), ("Equal", [I, J], {}),
    ("Not", [B1], {}), ("And", [B1, B2], {}), ("Or", [B1, B2], {}), ("Xor", [B1, B2], {}),
    ("Where", [B1, np.arange(4), np.arange(4) * 10], {}),
    ("CastLike", [np.array([1.5, -2.5, 3.0], F32), np.array([0], np.int32)], {}),
    ("ReduceProd", [np.arange(1, 7, dtype=np.int64).reshape(2, 3), c64(1)], {"keepdims": 0}),
    ("Abs", [I], {}), ("Neg", [I], {}),
    ("Trilu", [np.arange(12, dtype=np.int64).reshape(3, 4), np.array(1, np.int64)],
     {"upper": 0}),
    ("Trilu", [np.arange(12, dtype=np.int64).reshape(3, 4)], {}),
    ("Range", [np.array(5, np.int64), np.array(-3, np.int64), np.array(-2, np.int64)], {}),
])
def test_folds_agree_with_onnxruntime(op, arrays, attrs):
    consts = [oh.make_node("Constant", [], [f"c{i}"], value=oh.make_tensor(
        f"v{i}", ELEM[a.dtype], a.shape, a.reshape(-1).tolist())) for i, a in enumerate(arrays)]
    node = oh.make_node(op, [f"c{i}" for i in range(len(arrays))], ["y"], **attrs)
    out = TP.BOOL if op in ("Less", "LessOrEqual", "Greater", "GreaterOrEqual", "Equal") else \
        ELEM[arrays[1 if op in ("CastLike", "Where") else 0].dtype]
    g = oh.make_graph(consts + [node], "t", [], [oh.make_tensor_value_info("y", out, None)])
    m = oh.make_model(g, opset_imports=[oh.make_opsetid("", 21)])
    m.ir_version = 10
    imported = gradc.from_onnx(m)
    assert [n.op for n in imported.nodes] == ["constant"]  # folded
    got = gradc.compile(imported, target="reference")()["y"]
    assert_bits(got, run_ort(m, {})["y"])


def test_integer_division_by_zero_is_refused():
    m = make([oh.make_node("Div", ["a", "b"], ["y"], name="d")], {}, {"y": np.int64},
             {"a": c64(1), "b": c64(0)})
    with pytest.raises(gradc.UnsupportedError, match="Div 'd': input B: integer Div by zero"):
        gradc.from_onnx(m)


# -- Trilu ----------------------------------------------------------------------------------

@pytest.mark.parametrize("upper", [0, 1])
@pytest.mark.parametrize("k", [-1, 0, 2, 9])
def test_trilu_of_a_computed_value_is_a_where_of_a_constant_mask(upper, k):
    m = make([oh.make_node("Neg", ["x"], ["nx"]),
              oh.make_node("Trilu", ["nx", "k"], ["y"], upper=upper)],
             {"x": (F32, ["N", 3, 4])}, {"y": F32}, {"k": np.array(k, np.int64)})
    x = distinct((2, 3, 4))
    x[0, 0, 0] = np.nan
    assert_bits(cross_check(m, {"x": x})["y"], run_ort(m, {"x": x})["y"])
    assert _ops(m) == ["neg", "constant", "constant", "where"]


def test_trilu_of_symbolic_last_dims_is_refused_naming_the_symbol():
    m = make([oh.make_node("Trilu", ["x"], ["y"], name="tri")], {"x": (F32, [2, "seq", 4])},
             {"y": F32})
    with pytest.raises(gradc.UnsupportedError, match="Trilu 'tri': input input depends on the "
                       "symbolic dim 'seq' .gradc has no run-time shapes"):
        gradc.from_onnx(m)


# -- expands to symbolic shapes ----------------------------------------------------------------

def test_constant_of_shape_of_a_composed_symbolic_shape():
    """ConstantOfShape([N, 8]) where no value is (N, 8): the like operand is carried by x."""
    value = oh.make_tensor("v", TP.FLOAT, [1], [0.5])
    nodes = [oh.make_node("Shape", ["x"], ["s"]), oh.make_node("Gather", ["s", "z"], ["n"]),
             oh.make_node("Unsqueeze", ["n", "ax"], ["n1"]),
             oh.make_node("Concat", ["n1", "eight"], ["shape"], axis=0),
             oh.make_node("ConstantOfShape", ["shape"], ["c"], value=value),
             oh.make_node("Mul", ["c", "w"], ["y"])]
    m = make(nodes, {"x": (F32, ["N", "M", 3]), "w": (F32, [8])}, {"y": F32},
             {"z": np.array(0, np.int64), "ax": c64(0), "eight": c64(8)})
    g = gradc.from_onnx(m)
    assert g.outputs[0].type.shape == ("N", 8)
    for n in (1, 3):
        feeds = {"x": distinct((n, 2, 3)), "w": distinct((8,))}
        got = gradc.compile(g, target="reference")(**feeds)["y"]
        assert_bits(got, run_ort(m, feeds)["y"])


def test_expand_to_two_symbols_from_two_values():
    nodes = [oh.make_node("Shape", ["a"], ["sa"]), oh.make_node("Shape", ["b"], ["sb"]),
             oh.make_node("Gather", ["sa", "z"], ["n"]), oh.make_node("Gather", ["sb", "z"], ["m"]),
             oh.make_node("Unsqueeze", ["n", "ax"], ["n1"]),
             oh.make_node("Unsqueeze", ["m", "ax"], ["m1"]),
             oh.make_node("Concat", ["m1", "two", "n1"], ["shape"], axis=0),
             oh.make_node("Expand", ["one", "shape"], ["y"])]
    m = make(nodes, {"a": (F32, ["N", 3]), "b": (F32, ["M"])}, {"y": F32},
             {"z": np.array(0, np.int64), "ax": c64(0), "two": c64(2),
              "one": np.array([1.5], F32)})
    g = gradc.from_onnx(m)
    assert g.outputs[0].type.shape == ("M", 2, "N")
    feeds = {"a": distinct((4, 3)), "b": distinct((2,))}
    assert_bits(gradc.compile(g, target="reference")(**feeds)["y"], run_ort(m, feeds)["y"])
