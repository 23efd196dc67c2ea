"""The ONNX format facts (backends/onnx/format.py) and the importer's converter table.

- The dtype table maps every gradc dtype to an ONNX element type and back, and agrees with
  onnx's own element type -> NumPy mapping; tensors round-trip through it.
- An exported model carries the opset, IR version, producer and the embedded-IR metadata that
  the importer reads back.
- Importer and exporter share format.py and never import each other, and neither imports the
  driver (the public API, CLI, ``gradc`` itself).
- Every ONNX op type the importer registers has an import case here, checked against
  onnxruntime; a converter registered without a case fails ``test_every_converter_has_a_case``.
"""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any, Callable

import numpy as np
import pytest

import gradc

onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")
from onnx import TensorProto as TP  # noqa: E402
from onnx import helper as oh  # noqa: E402

from gradc.backends.onnx.format import (  # noqa: E402
    DTYPES, ELEM_TYPES, IR_HASH_KEY, IR_KEY, IR_VERSION, OPSET, PRODUCER, array_to_tensor,
    dtype_of, graph_digest, producer_version, tensor_to_array,
)
from gradc.backends.onnx.import_node import CONVERTERS  # noqa: E402
from gradc.backends.onnx import importer  # noqa: E402,F401  (registers the converters)
from gradc.ir.types import DType  # noqa: E402
from onnx_import_helpers import c64, cross_check, distinct, make, resize_model, unary  # noqa: E402
from test_elementwise_math_onnx import MATH_CASES  # noqa: E402
from training_onnx_cases import dropout_case, nll_case, sce_case  # noqa: E402
from import_shape_cases import SHAPE_CASES  # noqa: E402
from test_import_logic import LOGIC_CASES  # noqa: E402
from import_fold_cases import FOLD_CASES  # noqa: E402
from movement_onnx_cases import MOVEMENT_CASES  # noqa: E402
from gemm_onnx_cases import GEMM_CASES  # noqa: E402
from reduce_onnx_cases import REDUCE_CASES  # noqa: E402
from test_batch_norm_onnx import BN_CASES  # noqa: E402
from activation_onnx_cases import ACTIVATION_CASES  # noqa: E402
from normalization_onnx_cases import NORM_CASES  # noqa: E402
from transformer_onnx_cases import TRANSFORMER_CASES  # noqa: E402

ONNX_DIR = Path(__file__).resolve().parents[1] / "backends" / "onnx"


# -- the dtype table ----------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", list(DType), ids=lambda d: d.value)
def test_dtype_table_round_trips(dtype):
    elem = ELEM_TYPES[dtype]
    assert dtype_of(elem) is dtype
    assert oh.tensor_dtype_to_np_dtype(elem) == dtype.numpy  # onnx's own table agrees
    a = np.array([[0, 1, 2], [3, 0, 1]]).astype(dtype.numpy)
    t = array_to_tensor(a, "t")
    assert t.data_type == elem and t.name == "t"
    back = tensor_to_array(t, "t")
    assert back.dtype == dtype.numpy and back.shape == a.shape
    assert back.tobytes() == a.tobytes()


def test_dtype_table_is_one_to_one_over_every_gradc_dtype():
    assert set(ELEM_TYPES) == set(DType)
    assert len(DTYPES) == len(ELEM_TYPES)
    assert all(ELEM_TYPES[d] == e for e, d in DTYPES.items())


@pytest.mark.parametrize("elem,name", [(TP.BFLOAT16, "BFLOAT16"), (TP.STRING, "STRING"),
                                       (TP.COMPLEX64, "COMPLEX64"), (999, "element type 999")])
def test_other_element_types_are_unsupported_by_name(elem, name):
    with pytest.raises(gradc.UnsupportedError, match=f"element type {name} is not supported"):
        dtype_of(elem)


# -- the model header and the embedded IR -------------------------------------------------------

def test_export_writes_the_format_facts_that_the_importer_reads():
    g = gradc.examples.example("forward")
    m = gradc.to_onnx(g)
    assert [(o.domain, o.version) for o in m.opset_import] == [("", OPSET)]
    assert m.ir_version == IR_VERSION
    assert (m.producer_name, m.producer_version) == (PRODUCER, producer_version())
    props = {p.key: p.value for p in m.metadata_props}
    assert props[IR_KEY] == str(g)
    assert props[IR_HASH_KEY] == graph_digest(m.graph)
    assert str(gradc.from_onnx(m)) == str(g)


# -- who imports whom ---------------------------------------------------------------------------

DRIVER_OK = {"errors", "ir", "passes", "backends"}  # the gradc.* packages below the driver
ALLOWED: set[tuple[str, str]] = set()  # (module, driver module) pairs allowed to cross


def _imports(path: Path) -> set[str]:
    """The modules a file imports (``from p import x`` as both p and p.x)."""
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            out.add(node.module)
            out.update(f"{node.module}.{a.name}" for a in node.names)
    return out


def _modules() -> dict[str, Path]:
    return {p.stem: p for p in sorted(ONNX_DIR.glob("*.py"))}


def _side(stem: str) -> str:
    if stem in ("__init__", "format"):
        return "shared"
    return "importer" if stem.startswith("import") else "exporter"


@pytest.mark.parametrize("stem", sorted(_modules()))
def test_importer_and_exporter_share_only_format(stem):
    """The importer and the exporter each import format.py and their own modules only."""
    side = _side(stem)
    allowed = set() if side == "shared" else {"format"} | {
        s for s in _modules() if _side(s) == side}
    for target in _imports(_modules()[stem]):
        parts = target.split(".")
        if parts[:3] == ["gradc", "backends", "onnx"] and len(parts) > 3:
            assert parts[3] in allowed, f"{stem} ({side}) imports {target}"


@pytest.mark.parametrize("stem", sorted(_modules()))
def test_onnx_modules_do_not_import_the_driver(stem):
    for target in _imports(_modules()[stem]):
        parts = target.split(".")
        if parts[0] != "gradc" or len(parts) > 1 and (stem, parts[1]) in ALLOWED:
            continue
        assert len(parts) > 1 and parts[1] in DRIVER_OK, f"{stem} imports {target}"


# -- every converter, against onnxruntime -------------------------------------------------------

F32 = np.float32
Case = Callable[[], tuple[Any, dict[str, np.ndarray]]]


def _binary(op: str) -> Case:
    def case():
        m = make([oh.make_node(op, ["a", "b"], ["y"])],
                 {"a": (F32, [2, 3]), "b": (F32, [3])}, {"y": F32})
        return m, {"a": distinct((2, 3)) / 8, "b": distinct((3,)) / 8}
    return case


def _constant():
    c = oh.make_tensor("c", TP.FLOAT, [3], [1.5, -2.0, 0.25])
    m = make([oh.make_node("Constant", [], ["c"], value=c), oh.make_node("Mul", ["x", "c"], ["y"])],
             {"x": (F32, [2, 3])}, {"y": F32})
    return m, {"x": distinct((2, 3))}


def _slice():
    inits = {"starts": c64(0, 4), "ends": c64(2, -9), "axes": c64(0, 1), "steps": c64(1, -2)}
    m = unary("Slice", [3, 5], extra=("starts", "ends", "axes", "steps"), inits=inits)
    return m, {"x": distinct((3, 5))}


# ONNX op type -> (a model using it and its feeds, the gradc op it must import as)
CASES: dict[str, tuple[Case, str]] = {
    "Relu": (lambda: (unary("Relu", [2, 3]), {"x": distinct((2, 3))}), "relu"),
    "Clip": (lambda: (unary("Clip", [2, 3], extra=("lo", "hi"),
                            inits={"lo": F32(-1.0), "hi": F32(1.5)}),
                      {"x": distinct((2, 3))}), "clip"),
    "Add": (_binary("Add"), "add"),
    "Sub": (_binary("Sub"), "sub"),
    "Mul": (_binary("Mul"), "mul"),
    "Neg": (lambda: (unary("Neg", [2, 3]), {"x": distinct((2, 3))}), "neg"),
    "Identity": (lambda: (unary("Identity", [2, 3]), {"x": distinct((2, 3))}), "identity"),
    "Constant": (_constant, "constant"),
    "Reshape": (lambda: (unary("Reshape", [2, 3], extra=("s",), inits={"s": c64(3, -1)}),
                         {"x": distinct((2, 3))}), "reshape"),
    "Cast": (lambda: (unary("Cast", [2, 3], {"to": TP.DOUBLE}, out_dtypes=[np.float64]),
                      {"x": distinct((2, 3))}), "cast"),
    "ReduceSum": (lambda: (unary("ReduceSum", [2, 3, 4], {"keepdims": 0}, ("axes",),
                                 {"axes": c64(1)}),
                           {"x": distinct((2, 3, 4)) / 4}), "reduce_sum"),
    "Slice": (_slice, "slice"),
    "MaxPool": (lambda: (unary("MaxPool", [1, 2, 4, 4], {"kernel_shape": [2, 2],
                                                         "strides": [2, 2]}),
                         {"x": distinct((1, 2, 4, 4))}), "max_pooling"),
    "Resize": (lambda: (resize_model([1, 1, 2, 3], [1, 1, 2, 1.5], None, mode="nearest"),
                        {"x": distinct((1, 1, 2, 3))}), "resample"),
    # -- math
    **MATH_CASES,  # tests/test_elementwise_math_onnx.py
    # -- reduce
    **REDUCE_CASES,
    # -- movement
    **MOVEMENT_CASES,
    # -- conv
    "Conv": (lambda: (make([oh.make_node("Conv", ["x", "w", "b"], ["y"], pads=[1, 0, 0, 1],
                                         strides=[2, 1], group=2)],
                           {"x": (F32, [1, 4, 5, 5]), "w": (F32, [2, 2, 3, 2]),
                            "b": (F32, [2])}, {"y": F32}),
                      {"x": distinct((1, 4, 5, 5)) / 4, "w": distinct((2, 2, 3, 2)) / 4,
                       "b": distinct((2,))}), "convolution"),
    "ConvTranspose": (lambda: (make([oh.make_node("ConvTranspose", ["x", "w", "b"], ["y"],
                                                  strides=[2, 2], output_padding=[1, 0],
                                                  pads=[1, 0, 0, 1])],
                                    {"x": (F32, [1, 2, 3, 3]), "w": (F32, [2, 3, 2, 2]),
                                     "b": (F32, [3])}, {"y": F32}),
                               {"x": distinct((1, 2, 3, 3)) / 4,
                                "w": distinct((2, 3, 2, 2)) / 4, "b": distinct((3,))}),
                      "convolution"),
    # -- gemm
    **GEMM_CASES,
    # -- batch_norm
    **BN_CASES,  # tests/test_batch_norm_onnx.py
    # -- training
    "Dropout": (dropout_case, "expand"),
    "NegativeLogLikelihoodLoss": (nll_case, "one_hot"),
    "SoftmaxCrossEntropyLoss": (sce_case, "log_softmax"),
    # -- parameters
    **SHAPE_CASES,
    # -- activation
    **ACTIVATION_CASES,  # tests/activation_onnx_cases.py
    # -- normalization, gather (SPEC-transformers §28.1)
    **NORM_CASES,
    # -- logic and selection (what gradc's own lowerings write)
    **LOGIC_CASES,
    # -- shape arithmetic, masks (tests/import_fold_cases.py)
    **FOLD_CASES,
    # -- transformers (SPEC-transformers §28)
    **TRANSFORMER_CASES,  # tests/transformer_onnx_cases.py
}


def test_every_converter_has_a_case():
    """A new converter needs a case in CASES (and a removed one takes its case along)."""
    assert sorted(CONVERTERS) == sorted(CASES)


@pytest.mark.parametrize("op_type", sorted(CONVERTERS))
def test_every_converter_matches_onnxruntime(op_type):
    if op_type not in CASES:
        pytest.fail(f"the importer registers {op_type} but CASES has no model for it")
    build, gradc_op = CASES[op_type]
    model, feeds = build()
    assert op_type in {n.op_type for n in model.graph.node}
    assert gradc_op in {n.op for n in gradc.from_onnx(model).nodes}
    cross_check(model, feeds)
