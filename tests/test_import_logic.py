"""The logic and selection converters (``import_logic``): And, Or, Xor, Not, IsInf, Abs, Equal
of bools, GatherElements as a two-way selection. ``LOGIC_CASES`` feeds tests/test_onnx_format.py
(every converter against onnxruntime); the tests here check the edges."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from onnx import helper as oh

import gradc
from helpers import assert_bits
from onnx_import_helpers import c64, cross_check, make, run_ort

F32 = np.float32
B = np.bool_
RNG = np.random.default_rng(5)


def _bits(shape: tuple) -> np.ndarray:
    return RNG.random(shape) < 0.5


def _logic(op: str) -> Any:
    def case():
        m = make([oh.make_node(op, ["a", "b"], ["y"])], {"a": (B, [2, 3]), "b": (B, [3])},
                 {"y": B})
        return m, {"a": _bits((2, 3)), "b": _bits((3,))}
    return case


def _not():
    m = make([oh.make_node("Not", ["a"], ["y"])], {"a": (B, [2, 3])}, {"y": B})
    return m, {"a": _bits((2, 3))}


SPECIALS = np.array([-np.inf, -2.5, -0.0, 0.0, 1.0, np.inf, np.nan, -1e-30], F32)


def _is_inf(**attrs: int) -> Any:
    def case():
        m = make([oh.make_node("IsInf", ["x"], ["y"], **attrs)], {"x": (F32, [8])}, {"y": B})
        return m, {"x": SPECIALS}
    return case


def _abs():
    m = make([oh.make_node("Abs", ["x"], ["y"])], {"x": (F32, [8])}, {"y": F32})
    return m, {"x": np.concatenate([SPECIALS[:6], np.array([3.5, -7.0], F32)])}


def _select():
    """gradc's own exact select: GatherElements over Concat(b, a) by Cast(c)."""
    nodes = [oh.make_node("Unsqueeze", ["a", "ax"], ["ua"]),
             oh.make_node("Unsqueeze", ["b", "ax"], ["ub"]),
             oh.make_node("Concat", ["ub", "ua"], ["data"], axis=0),
             oh.make_node("Cast", ["c"], ["ci"], to=7),
             oh.make_node("Unsqueeze", ["ci", "ax"], ["idx"]),
             oh.make_node("GatherElements", ["data", "idx"], ["g"], axis=0),
             oh.make_node("Squeeze", ["g", "ax"], ["y"])]
    m = make(nodes, {"c": (B, [2, 3]), "a": (F32, [2, 3]), "b": (F32, [2, 3])}, {"y": F32},
             {"ax": c64(0)})
    a = np.array([[-0.0, np.nan, 1], [2, -3, np.inf]], F32)
    return m, {"c": _bits((2, 3)), "a": a, "b": -a[::-1].copy()}


LOGIC_CASES: dict[str, tuple[Any, str]] = {
    "And": (_logic("And"), "where"),
    "Or": (_logic("Or"), "where"),
    "Xor": (_logic("Xor"), "where"),
    "Not": (_not, "where"),
    "IsInf": (_is_inf(), "equal"),
    "Abs": (_abs, "where"),
    "GatherElements": (_select, "where"),
}


@pytest.mark.parametrize("op", ["And", "Or", "Xor"])
def test_logic_truth_tables(op):
    m = make([oh.make_node(op, ["a", "b"], ["y"])], {"a": (B, [4]), "b": (B, [4])}, {"y": B})
    a, b = np.array([0, 0, 1, 1], B), np.array([0, 1, 0, 1], B)
    want = {"And": a & b, "Or": a | b, "Xor": a ^ b}[op]
    assert_bits(cross_check(m, {"a": a, "b": b})["y"], want)


def test_bool_equal_and_not_are_exact():
    m = make([oh.make_node("Equal", ["a", "b"], ["e"]), oh.make_node("Not", ["e"], ["y"])],
             {"a": (B, [4]), "b": (B, [4])}, {"y": B})
    a, b = np.array([0, 0, 1, 1], B), np.array([0, 1, 0, 1], B)
    assert cross_check(m, {"a": a, "b": b})["y"].tolist() == [False, True, True, False]


@pytest.mark.parametrize("pos,neg", [(1, 1), (1, 0), (0, 1), (0, 0)])
def test_is_inf_detects_what_is_asked(pos, neg):
    m, feeds = _is_inf(detect_positive=pos, detect_negative=neg)()
    got = cross_check(m, feeds)["y"]
    assert got.tolist() == [bool(neg), False, False, False, False, bool(pos), False, False]


@pytest.mark.parametrize("dtype", [np.int8, np.int32, np.uint8, np.float64, np.float16])
def test_abs_per_dtype(dtype):
    m = make([oh.make_node("Abs", ["x"], ["y"])], {"x": (dtype, [8])}, {"y": dtype})
    if np.dtype(dtype).kind == "f":
        x = np.array([-np.inf, -2.5, -0.0, 0.0, 1.0, np.inf, 3.5, -7], dtype)
    elif np.dtype(dtype).kind == "u":
        x = np.array([0, 1, 2, 127, 128, 200, 255, 7], dtype)
    else:
        x = np.array([-100, -3, 0, 5, 127, -1, 1, 2], dtype)
    got = cross_check(m, {"x": x})["y"]  # bit for bit with onnxruntime
    assert not np.signbit(got).any()  # -0.0 comes back +0.0


def test_abs_of_the_most_negative_integer_wraps():
    m = make([oh.make_node("Abs", ["x"], ["y"])], {"x": (np.int8, [2])}, {"y": np.int8})
    got = cross_check(m, {"x": np.array([-128, -127], np.int8)})["y"]
    assert got.tolist() == [-128, 127]


def test_select_copies_bits():
    m, feeds = _select()
    got = cross_check(m, feeds)["y"]
    want = np.where(feeds["c"], feeds["a"], feeds["b"])
    assert_bits(got, want)


def _gather_elements(data_shape: list, idx: np.ndarray, axis: int = 0, idx_input: bool = False):
    inputs = {"d": (F32, data_shape)}
    inits = {}
    if idx_input:
        inputs["i"] = (np.int64, list(idx.shape))
    else:
        inits["i"] = idx
    m = make([oh.make_node("GatherElements", ["d", "i"], ["y"], name="ge", axis=axis)], inputs,
             {"y": F32}, inits)
    return m


def test_constant_zero_one_indices_select():
    idx = np.array([[[0, 1, 1]], ], np.int64).reshape(1, 1, 3)
    m = _gather_elements([2, 1, 3], idx)
    d = np.arange(6, dtype=F32).reshape(2, 1, 3)
    assert_bits(cross_check(m, {"d": d})["y"], run_ort(m, {"d": d})["y"])


@pytest.mark.parametrize("build", [
    lambda: _gather_elements([3, 4], np.zeros((1, 4), np.int64)),  # three rows: a gather
    lambda: _gather_elements([2, 4], np.array([[0, 1, 2, 1]], np.int64)),  # index 2
    lambda: _gather_elements([2, 4], np.zeros((1, 4), np.int64), idx_input=True),  # computed
    lambda: _gather_elements([2, 4], np.zeros((2, 4), np.int64)),  # two rows of indices
])
def test_a_real_gather_elements_is_refused(build):
    with pytest.raises(gradc.UnsupportedError, match="GatherElements 'ge': op GatherElements "
                       "is supported only as a two-way selection"):
        gradc.from_onnx(build())


def test_logic_of_non_bools_is_refused():
    m = make([oh.make_node("And", ["a", "b"], ["y"], name="n")], {"a": (F32, [2]),
             "b": (F32, [2])}, {"y": B})
    with pytest.raises((gradc.UnsupportedError, gradc.VerifyError), match="'n'"):
        gradc.from_onnx(m)
