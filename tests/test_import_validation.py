"""Every ONNX node the importer knows is held to its schema before any converter or fold reads it
(issue 25, item 6: ``Where`` with two inputs and ``LessOrEqual`` with one reached NumPy in
``import_math._fold``).

For every op with a converter or a folder (``CONVERTERS``, ``FOLDERS``): too few and too many
inputs and outputs, each attribute of the wrong kind, an unknown attribute, and constant inputs of
every dtype; each import ends in a clean ``VerifyError`` (malformed) or ``UnsupportedError`` and
never in another exception. The two cases of the issue are also stored for the fuzzer's replay
(``fuzz/regressions/onnx``).
"""

from __future__ import annotations

import random
from typing import Any

import numpy as np
import onnx
import onnx.defs
import pytest
from onnx import AttributeProto as AP
from onnx import TensorProto as TP
from onnx import helper as oh
from onnx import numpy_helper

import gradc
from gradc.backends.onnx.import_node import CONVERTERS
from gradc.backends.onnx.import_schema import UNBOUNDED, signature
from gradc.backends.onnx.import_shape import FOLDERS

OPSET = 21  # the models' opset, or the first opset of an op added later (RMSNormalization: 23)
KNOWN = sorted(set(CONVERTERS) | set(FOLDERS))
DTYPES = [np.int64, np.float32, np.bool_, np.int32, np.float16, np.uint8]
WRONG_KIND: dict[int, Any] = {  # an attribute value of another kind than the schema's
    AP.INT: 1.5, AP.FLOAT: "x", AP.STRING: 3, AP.INTS: [1.0, 2.0], AP.FLOATS: ["a"],
    AP.STRINGS: [1], AP.TENSOR: 2, AP.GRAPH: 1, AP.SPARSE_TENSOR: 1,
}


def opset_of(op: str) -> int:
    """OPSET, or the first opset that has ``op`` when it came later."""
    return OPSET if signature(op, OPSET) is not None else \
        next(v for v in range(OPSET + 1, 40) if signature(op, v) is not None)


def _model(op: str, n_inputs: int, n_outputs: int, attrs: dict[str, Any],
           arrays: list[np.ndarray] | None = None) -> onnx.ModelProto:
    """One node ``op`` reading Constant nodes (values known at import: the fold path)."""
    arrays = arrays or [np.array([2, 3], np.int64)] * n_inputs
    consts = [oh.make_node("Constant", [], [f"c{i}"], value=numpy_helper.from_array(a))
              for i, a in enumerate(arrays)]
    outs = [f"y{i}" for i in range(n_outputs)]
    node = oh.make_node(op, [f"c{i}" for i in range(len(arrays))], outs, name="n", **attrs)
    g = oh.make_graph(consts + [node], "v", [],
                      [oh.make_tensor_value_info(o, TP.UNDEFINED, None) for o in outs])
    m = oh.make_model(g, opset_imports=[oh.make_opsetid("", opset_of(op))])
    m.ir_version = 10 if opset_of(op) <= 21 else 11
    return m


def _imports_cleanly(model: onnx.ModelProto) -> BaseException | None:
    """None if from_onnx succeeds; the GradcError otherwise (any other exception fails)."""
    try:
        gradc.from_onnx(model)
    except gradc.GradcError as e:
        return e
    return None


def _inputs_within(sig) -> int:
    return max(sig.min_inputs, min(len(sig.inputs), sig.max_inputs))


@pytest.mark.parametrize("op", KNOWN)
def test_wrong_arity_is_a_verify_error(op):
    sig = signature(op, opset_of(op))
    ok_out = max(sig.min_outputs, 1)
    counts = []
    if sig.min_inputs > 0:
        counts.append((sig.min_inputs - 1, ok_out))
    if sig.max_inputs < UNBOUNDED:
        counts.append((sig.max_inputs + 1, ok_out))
    if sig.max_outputs < UNBOUNDED:
        counts.append((_inputs_within(sig), sig.max_outputs + 1))
    for n_in, n_out in counts:
        with pytest.raises(gradc.VerifyError, match=r"^[A-Za-z]+ 'n': (input|output)"):
            gradc.from_onnx(_model(op, n_in, n_out, {}))


@pytest.mark.parametrize("op", KNOWN)
def test_attributes_of_the_wrong_kind_or_unknown_are_verify_errors(op):
    sig = signature(op, opset_of(op))
    n_in, n_out = _inputs_within(sig), max(sig.min_outputs, 1)
    for name, (kind, _) in sig.attributes.items():
        with pytest.raises(gradc.VerifyError, match=f"'n': attribute {name}: expected"):
            gradc.from_onnx(_model(op, n_in, n_out, {name: WRONG_KIND[kind]}))
    with pytest.raises(gradc.VerifyError, match="'n': attribute no_such_thing: expected an "
                       "attribute of"):
        gradc.from_onnx(_model(op, n_in, n_out, {"no_such_thing": 1}))


def test_required_attributes_and_inputs_are_named():
    with pytest.raises(gradc.VerifyError, match="Cast 'n': attribute to: expected int "
                       r"\(a required attribute\), got none"):
        gradc.from_onnx(_model("Cast", 1, 1, {}))
    m = _model("Where", 3, 1, {})
    m.graph.node[-1].input[1] = ""
    with pytest.raises(gradc.VerifyError, match="Where 'n': input X: expected a value "
                       r"\(required input\), got none"):
        gradc.from_onnx(m)


@pytest.mark.parametrize("op", KNOWN)
def test_known_inputs_of_any_dtype_never_reach_numpy(op):
    """Constant inputs of every dtype and a few shapes: success or one GradcError."""
    sig = signature(op, opset_of(op))
    n_in, n_out = _inputs_within(sig), max(sig.min_outputs, 1)
    rng = random.Random(op)
    for _ in range(12):
        arrays = []
        for _ in range(n_in):
            dt = rng.choice(DTYPES)
            shape = rng.choice([(), (2,), (1, 2), (2, 2), (3,)])
            arrays.append(np.ones(shape, dt) if rng.random() < 0.5 else
                          np.arange(int(np.prod(shape)) or 1).astype(dt).reshape(shape))
        if not arrays:
            arrays = None
        _imports_cleanly(_model(op, n_in, n_out, {}, arrays))


def test_issue_cases_where_and_less_or_equal():
    """The fuzz campaign's inputs: a Where of two known inputs, a LessOrEqual of one."""
    with pytest.raises(gradc.VerifyError, match="Where 'n': input Y: expected a value"):
        gradc.from_onnx(_model("Where", 2, 1, {}, [np.array([True]), np.ones(2, np.int64)]))
    with pytest.raises(gradc.VerifyError, match="LessOrEqual 'n': input B: expected a value"):
        gradc.from_onnx(_model("LessOrEqual", 1, 1, {}, [np.ones(2, np.int64)]))


@pytest.mark.parametrize("op,arrays,what", [
    ("Where", [np.array([1, 0], np.int64), np.ones(2, np.int64), np.zeros(2, np.int64)],
     "input condition: expected a tensor of bool, got int64"),
    ("Add", [np.ones(2, np.int64), np.ones(2, np.int32)],
     "input B: expected the element type of input A (int64, type T), got int32"),
    ("LessOrEqual", [np.ones(2, np.int64), np.ones(2, np.float32)], "input B: expected"),
    ("Max", [np.ones(2, np.int64), np.ones(2, np.int64), np.ones(2, np.int32)],
     "input data_0[2]: expected the element type of input data_0[0]"),
    ("And", [np.ones(2, np.int64), np.ones(2, np.int64)], "input A: expected a tensor of bool"),
])
def test_known_inputs_of_the_wrong_dtype_are_named(op, arrays, what):
    with pytest.raises(gradc.VerifyError) as info:
        gradc.from_onnx(_model(op, len(arrays), 1, {}, arrays))
    assert str(info.value).startswith(f"{op} 'n': ") and what in str(info.value), info.value


def test_an_op_the_opset_does_not_have_is_named():
    m = _model("Trilu", 1, 1, {}, [np.ones((2, 2), np.float32)])
    m.opset_import[0].version = 13  # Trilu is opset 14
    with pytest.raises(gradc.VerifyError, match="Trilu 'n': op Trilu: expected an op of opset "
                       "13"):
        gradc.from_onnx(m)


def test_the_schema_of_the_models_opset_is_used():
    """Clip-6 has min/max attributes, Clip-11 inputs: each is valid in its own opset only."""
    m = _model("Clip", 1, 1, {"min": -1.0, "max": 1.0}, [np.ones(3, np.float32)])
    with pytest.raises(gradc.VerifyError, match="attribute (min|max): expected an attribute "
                       "of Clip-13"):
        gradc.from_onnx(m)
    m.opset_import[0].version = 6
    m.ir_version = 3
    gradc.from_onnx(m)


@pytest.mark.parametrize("op,attrs", [
    ("ConvTranspose", {"output_shape": [1, 3]}),  # fuzz 9999: W's spatial sizes read for pads
    ("ConvTranspose", {"auto_pad": "SAME_UPPER"}),
    ("Conv", {"auto_pad": "SAME_LOWER"}),
    ("Conv", {}),
])
def test_a_filter_of_another_rank_than_the_input_is_named(op, attrs):
    """W of rank 1 against X of rank 4: a VerifyError naming W before any pad is computed
    from W's spatial sizes (ConvTranspose's output_shape raised an IndexError there)."""
    arrays = [np.ones((1, 4, 1, 2), np.float32), np.ones((1,), np.float32)]
    with pytest.raises(gradc.VerifyError) as info:
        gradc.from_onnx(_model(op, 2, 1, attrs, arrays))
    assert "input W: expected rank 4" in str(info.value) and "got rank 1" in str(info.value), \
        info.value
