"""Harness ``onnx``: ONNX models built from the ops gradc imports, mutated, then imported.

Models come from ``onnx.helper`` (a chain of Relu, Clip, Add, Sub, Mul, Neg, Identity, Constant,
Reshape, Cast, ReduceSum, Slice, MaxPool, Resize, now and then an op gradc lacks, with attribute
values that are sometimes boundary values), from ``fuzz.onnx_training_models`` (the training ops
of SPEC-training.md §21: Conv ... SoftmaxCrossEntropyLoss, shape subgraphs, CNN and MLP chains,
each op only once gradc imports it), or from ``gradc.to_onnx`` of a generated graph. They
are mutated at the protobuf level (attribute values and types, dims, element types, initializer
contents, opset, op types, names, the embedded gradc IR) and at the byte level, then go through
``from_onnx`` and every stage of ``fuzz.pipeline``. An unmutated built model is also run by
onnxruntime and compared with gradc's reference target.

Payload: ``{"kind": "model", "model": bytes, "seed": int, "c": bool, "ort": bool}``, or
``{"kind": "export", "text": ..., "mseed": int, "count": int, ...}`` (see ``generate``).
"""

from __future__ import annotations

import math
import random
from typing import Any, Callable

import numpy as np
import onnx
from onnx import AttributeProto, TensorProto, helper, numpy_helper

import gradc
from gradc.errors import GradcError
from gradc.ir.parser import parse

from fuzz.common import Finding
from fuzz.graphgen import FLOAT_EDGES, INT_EDGES, generate_graph, random_array
from fuzz.minimize import ddmin
from fuzz.onnx_training_models import (MUTANT_ATTRS, MUTANT_OPS, TrainingModelGen,
                                       training_divergence)
from fuzz.onnx_transformer_models import MUTANT_ATTRS as TRANSFORMER_ATTRS
from fuzz.onnx_transformer_models import MUTANT_OPS as TRANSFORMER_OPS
from fuzz.onnx_transformer_models import TransformerModelGen, ort_divergence
from fuzz.pipeline import SUMMING, Stages, check_graph, close
from fuzz.textmut import TextMutator
from fuzz.tolerance import floor_for

ELEM_TYPES = (TensorProto.FLOAT, TensorProto.FLOAT, TensorProto.FLOAT, TensorProto.FLOAT16,
              TensorProto.DOUBLE, TensorProto.INT32, TensorProto.INT64, TensorProto.INT8,
              TensorProto.UINT8)
# Ops gradc does not import (SPEC-training §21 "Refused", and others it lacks).
UNSUPPORTED = ("LpPool", "MaxUnpool", "ConvInteger", "QLinearConv", "MatMulInteger", "Asinh",
               "Einsum", "InstanceNormalization")
OPSETS = (13, 13, 13, 17, 18, 19, 11, 10, 7, 21)
INT64_EDGES = tuple(v for v in INT_EDGES if -2 ** 63 <= v < 2 ** 63)
SMALL_WRONG = (-4, -2, 3, 4, 16, 23)  # axes and enum values just out of range


def _np(elem: int) -> np.dtype:
    return np.dtype(helper.tensor_dtype_to_np_dtype(elem))


class ModelGen:
    """Builds one model: a chain of supported ops on an input ``X``."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.edge = rng.choice((0.0, 0.05, 0.15))
        self.opset = rng.choice(OPSETS)
        self.elem: int = rng.choice(ELEM_TYPES)
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[onnx.TensorProto] = []
        self.k = 0

    def name(self, base: str) -> str:
        self.k += 1
        return f"{base}{self.k}"

    def int_(self, v: int) -> int:
        return self.rng.choice(INT64_EDGES) if self.rng.random() < self.edge else v

    def ints(self, vals: list[int]) -> list[int]:
        return [self.int_(v) for v in vals]

    def init(self, values: Any, dtype: Any) -> str:
        n = self.name("c")
        if np.dtype(dtype) == np.int64 and isinstance(values, list):
            values = [min(max(int(v), -2 ** 63), 2 ** 63 - 1) for v in values]
        arr = np.array(values, dtype=dtype)
        self.inits.append(numpy_helper.from_array(arr, n))
        return n

    def build(self) -> onnx.ModelProto:
        rng = self.rng
        rank = rng.choice((4, 4, 4, 2, 3, 1, 5))
        dims: list[Any] = [rng.randint(1, 5) for _ in range(rank)]
        if rng.random() < 0.3:
            dims[0] = "N"
        if rng.random() < self.edge:
            dims[rng.randrange(rank)] = rng.choice((0, -1, 2 ** 31, 2 ** 40, 2 ** 62, "", None))
        shape = [d if not isinstance(d, int) or 0 < d < 64 else 2 for d in dims]
        cur = "X"
        for _ in range(rng.choice((1, 1, 2, 3, 5))):
            try:
                cur, shape = self.step(cur, shape)
            except (ValueError, OverflowError, TypeError, MemoryError):
                continue  # edge values onnx.helper or NumPy cannot hold: skip the step
        outputs = [helper.make_tensor_value_info(cur, self.elem, None)]
        graph = helper.make_graph(
            self.nodes, rng.choice(("main", "g", "model")),
            [helper.make_tensor_value_info("X", self.elem, dims)], outputs, self.inits)
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", self.opset)])
        model.ir_version = rng.choice((7, 8, 9, 10)) if self.opset >= 13 else 7
        return model

    def step(self, x: str, shape: list[Any]) -> tuple[str, list[Any]]:
        rng = self.rng
        y = self.name("t")
        static = [d if isinstance(d, int) and d > 0 else 2 for d in shape]
        attrs: dict[str, Any] = {}
        r = rng.random()
        choice = rng.choice(("Relu", "Relu", "Neg", "Identity", "Clip", "Add", "Sub", "Mul",
                             "Constant", "Reshape", "Cast", "ReduceSum", "Slice", "Slice",
                             "MaxPool", "MaxPool", "Resize", "Resize"))
        if r < 0.04:
            self.nodes.append(helper.make_node(rng.choice(UNSUPPORTED), [x], [y]))
            return y, shape
        if rng.random() < 0.8 and ((choice == "MaxPool" and len(shape) not in (4, 5))
                                   or (choice == "Resize" and len(shape) > 4)):
            choice = "Relu"
        if choice in ("Relu", "Neg", "Identity"):
            self.nodes.append(helper.make_node(choice, [x], [y]))
            return y, shape
        if choice == "Clip":
            lo, hi = rng.choice(((0.0, 6.0), (-1.0, 1.0), (2.0, 1.0)))
            if rng.random() < self.edge:
                lo = rng.choice(FLOAT_EDGES)
            if self.opset < 11:
                self.nodes.append(helper.make_node("Clip", [x], [y], min=lo, max=hi))
            else:
                dt = _np(self.elem)
                with np.errstate(all="ignore"):
                    a, b = self.init(np.array(lo).astype(dt), dt), self.init(np.array(hi)
                                                                           .astype(dt), dt)
                ins = [x, a, b] if rng.random() < 0.8 else [x, "", b]
                self.nodes.append(helper.make_node("Clip", ins, [y]))
            return y, shape
        if choice in ("Add", "Sub", "Mul", "Constant"):
            if rng.random() < 0.3:
                other = x
            else:
                k = rng.randint(0, len(static))
                sub = static[k:]
                value = random_array(rng, sub, str(_np(self.elem)))
                if choice == "Constant":
                    other = self.name("k")
                    self.nodes.append(helper.make_node(
                        "Constant", [], [other], value=numpy_helper.from_array(value)))
                    choice = rng.choice(("Add", "Sub", "Mul"))
                else:
                    other = self.name("c")
                    self.inits.append(numpy_helper.from_array(value, other))
            pair = [x, other] if rng.random() < 0.7 else [other, x]
            self.nodes.append(helper.make_node(choice, pair, [y]))
            return y, shape
        if choice == "Reshape":
            total = math.prod(static)
            target = rng.choice(([-1], [total], [1, -1], [0, -1], list(reversed(static)),
                                 [-1, 1, 1]))
            target = self.ints(target)
            if self.opset < 5:
                self.nodes.append(helper.make_node("Reshape", [x], [y], shape=target))
            else:
                if rng.random() < 0.1 and self.opset >= 14:
                    attrs["allowzero"] = 1
                self.nodes.append(helper.make_node(
                    "Reshape", [x, self.init(target, np.int64)], [y], **attrs))
            return y, [total] if target == [-1] else [d if isinstance(d, int) and d > 0 else 1
                                                      for d in target]
        if choice == "Cast":
            to: int = rng.choice(ELEM_TYPES + (TensorProto.BOOL, TensorProto.STRING,
                                          TensorProto.BFLOAT16, TensorProto.UINT64, 0, 99))
            self.nodes.append(helper.make_node("Cast", [x], [y], to=to))
            if to in ELEM_TYPES:
                self.elem = to
            return y, shape
        if choice == "ReduceSum":
            raxes = sorted(rng.sample(range(len(shape)), rng.randint(0, len(shape))))
            raxes = self.ints([a - len(shape) if rng.random() < 0.2 else a for a in raxes])
            attrs["keepdims"] = keep = rng.choice((0, 1, 1))
            if self.opset < 13:
                if raxes:
                    attrs["axes"] = raxes
                self.nodes.append(helper.make_node("ReduceSum", [x], [y], **attrs))
            else:
                ins = [x, self.init(raxes, np.int64)] if raxes or rng.random() < 0.3 else [x]
                if rng.random() < 0.2:
                    attrs["noop_with_empty_axes"] = 1
                self.nodes.append(helper.make_node("ReduceSum", ins, [y], **attrs))
            return y, shape if keep else [d for i, d in enumerate(shape) if i not in raxes]
        if choice == "Slice":
            saxes = sorted(rng.sample(range(len(shape)), rng.randint(1, len(shape))))
            starts: list[int] = []
            ends: list[int] = []
            steps: list[int] = []
            for ax in saxes:
                n = static[ax]
                st = rng.choice((1, 1, 2, -1, -2))
                s0 = rng.randint(-n, n)
                e0 = rng.choice((rng.randint(-n, n), 2 ** 63 - 1, -2 ** 63))
                starts.append(self.int_(s0))
                ends.append(self.int_(e0))
                steps.append(self.int_(st))
            if self.opset < 10:
                self.nodes.append(helper.make_node("Slice", [x], [y], starts=starts, ends=ends,
                                                   axes=saxes))
            else:
                ins = [x, self.init(starts, np.int64), self.init(ends, np.int64)]
                if rng.random() < 0.8:
                    ins.append(self.init(saxes, np.int64))
                    if rng.random() < 0.8:
                        ins.append(self.init(steps, np.int64))
                self.nodes.append(helper.make_node("Slice", ins, [y]))
            return y, shape
        if choice == "MaxPool":
            nd = max(1, len(shape) - 2)
            kern = [rng.randint(1, 3) for _ in range(nd)]
            attrs["kernel_shape"] = self.ints(kern)
            if rng.random() < 0.7:
                attrs["strides"] = self.ints([rng.randint(1, 3) for _ in range(nd)])
            if rng.random() < 0.5:
                attrs["pads"] = self.ints([rng.randint(0, w - 1) for w in kern] * 2)
            if rng.random() < 0.3:
                attrs["dilations"] = self.ints([rng.randint(1, 2) for _ in range(nd)])
            if rng.random() < 0.3:
                attrs["ceil_mode"] = self.int_(1)
            if rng.random() < 0.2:
                attrs["auto_pad"] = rng.choice(("NOTSET", "VALID", "SAME_UPPER", "SAME_LOWER",
                                                "BOGUS"))
            if rng.random() < 0.1:
                attrs["storage_order"] = self.int_(rng.choice((0, 1)))
            outs = [y, self.name("idx")] if rng.random() < 0.2 else [y]
            self.nodes.append(helper.make_node("MaxPool", [x], outs, **attrs))
            return y, shape
        # Resize
        n = len(shape)
        mode = rng.choice(("nearest", "linear", "cubic", "nearest"))
        attrs["mode"] = mode
        if rng.random() < 0.6:
            attrs["coordinate_transformation_mode"] = rng.choice((
                "half_pixel", "pytorch_half_pixel", "asymmetric", "align_corners",
                "tf_half_pixel_for_nn", "tf_crop_and_resize", "half_pixel_symmetric"))
        if rng.random() < 0.4:
            attrs["nearest_mode"] = rng.choice(("round_prefer_floor", "round_prefer_ceil",
                                                "floor", "ceil"))
        if rng.random() < 0.05:
            attrs["exclude_outside"] = 1
        scales = [rng.choice((1.0, 2.0, 0.5, 1.5, 3.0)) if i >= n - 2 else 1.0 for i in range(n)]
        if rng.random() < self.edge:
            scales[rng.randrange(n)] = rng.choice(FLOAT_EDGES)
        roi = ""
        if attrs.get("coordinate_transformation_mode") == "tf_crop_and_resize":
            roi = self.init([0.0] * n + [1.0] * n, np.float32)
        if self.opset < 11:
            self.nodes.append(helper.make_node("Resize", [x, self.init(scales, np.float32)], [y],
                                               mode=mode))
        elif rng.random() < 0.6:
            self.nodes.append(helper.make_node(
                "Resize", [x, roi, self.init(scales, np.float32)], [y], **attrs))
        else:
            sizes = self.ints([max(1, int(d * s)) for d, s in zip(static, scales)])
            self.nodes.append(helper.make_node(
                "Resize", [x, roi, "", self.init(sizes, np.int64)], [y], **attrs))
        return y, shape


# -- mutations -----------------------------------------------------------------------------------
class ModelMutator:
    """Protobuf- and byte-level mutations of a serialized model."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng

    def mutate(self, data: bytes, count: int) -> bytes:
        for _ in range(count):
            if self.rng.random() < 0.07:
                data = self.bytes_level(data)
                continue
            m = onnx.ModelProto()
            try:
                m.ParseFromString(data)
            except Exception:  # bytes mutated before: mutate bytes again
                data = self.bytes_level(data)
                continue
            fn = self.rng.choice((self.attr, self.attr, self.attr, self.attr_type, self.del_attr,
                                  self.dim, self.dim, self.elem_type, self.initializer,
                                  self.initializer, self.opset, self.op_type, self.rename,
                                  self.delete_node, self.duplicate_node, self.io, self.embedded,
                                  self.embedded, self.arity, self.arity))
            try:
                fn(m)
                data = m.SerializeToString()
            except (ValueError, TypeError, IndexError, OverflowError):
                continue  # protobuf refused the value: try another mutation
        return data

    def bytes_level(self, data: bytes) -> bytes:
        b = bytearray(data)
        if not b:
            return bytes([self.rng.randrange(256)])
        r = self.rng.random()
        i = self.rng.randrange(len(b))
        if r < 0.4:
            b[i] ^= 1 << self.rng.randrange(8)
        elif r < 0.6:
            b[i:i] = bytes(self.rng.randrange(256) for _ in range(self.rng.randint(1, 8)))
        elif r < 0.8:
            del b[i:i + self.rng.randint(1, 16)]
        elif r < 0.9:
            return bytes(b[:i])
        else:
            j = self.rng.randrange(len(b))
            b[i:i] = b[j:j + 32]
        return bytes(b)

    def _node(self, m: onnx.ModelProto) -> onnx.NodeProto | None:
        return self.rng.choice(m.graph.node) if m.graph.node else None

    def attr(self, m: onnx.ModelProto) -> None:
        n = self._node(m)
        if n is None or not n.attribute:
            return
        a = self.rng.choice(n.attribute)
        if a.type == AttributeProto.INT:
            a.i = self.rng.choice(INT64_EDGES + SMALL_WRONG)
        elif a.type == AttributeProto.INTS:
            if a.ints and self.rng.random() < 0.7:
                a.ints[self.rng.randrange(len(a.ints))] = self.rng.choice(INT64_EDGES)
            elif a.ints and self.rng.random() < 0.5:
                del a.ints[-1]
            else:
                a.ints.append(self.rng.choice((0, 1, 2, -1)))
        elif a.type == AttributeProto.FLOAT:
            a.f = self.rng.choice(FLOAT_EDGES)
        elif a.type == AttributeProto.FLOATS and a.floats:
            a.floats[self.rng.randrange(len(a.floats))] = self.rng.choice(FLOAT_EDGES)
        elif a.type == AttributeProto.STRING:
            a.s = self.rng.choice((b"", b"\xff\xfe", b"NOTSET", b"nearest", b"linear",
                                   b"half_pixel", "é".encode(), b"x" * 1000, b"tanh", b"none",
                                   b"TANH"))
        elif a.type == AttributeProto.TENSOR:
            a.t.dims.append(self.rng.choice((0, 2, 2 ** 31)))

    def arity(self, m: onnx.ModelProto) -> None:
        """One input or output more or fewer (the ONNX schema's arity; ``""`` now and then)."""
        n = self._node(m)
        if n is None:
            return
        names = [i.name for i in m.graph.input] + [t.name for t in m.graph.initializer] + \
            [o for k in m.graph.node for o in k.output] + [""]
        r = self.rng.random()
        if r < 0.35 and n.input:
            del n.input[self.rng.randrange(len(n.input)) if self.rng.random() < 0.3 else -1]
        elif r < 0.75:
            for _ in range(self.rng.choice((1, 1, 2, 5))):
                n.input.append(self.rng.choice(names))
        elif r < 0.9:
            n.output.append(self.rng.choice(("", n.name + "_extra", "extra")))
        elif len(n.output) > 1:
            del n.output[-1]
        elif n.input:
            n.input[self.rng.randrange(len(n.input))] = ""

    def attr_type(self, m: onnx.ModelProto) -> None:
        n = self._node(m)
        if n is None or not n.attribute:
            return
        self.rng.choice(n.attribute).type = self.rng.choice((1, 2, 3, 4, 6, 7, 8, 0, 99))

    def del_attr(self, m: onnx.ModelProto) -> None:
        n = self._node(m)
        if n is None:
            return
        if n.attribute and self.rng.random() < 0.6:
            del n.attribute[self.rng.randrange(len(n.attribute))]
        else:
            name = self.rng.choice(("kernel_shape", "strides", "pads", "ceil_mode", "axes",
                                    "keepdims", "to", "mode", "auto_pad", "min", "allowzero",
                                    "value", "antialias", "storage_order", "dilations")
                                   + MUTANT_ATTRS + TRANSFORMER_ATTRS)
            n.attribute.append(helper.make_attribute(name, self.rng.choice(
                (1, 0, [1, 1], [2 ** 62, 1], 1.5, "x", [0, 0, 0, 0]))))

    def dim(self, m: onnx.ModelProto) -> None:
        vis = list(m.graph.input) + list(m.graph.output) + list(m.graph.value_info)
        vis = [v for v in vis if v.type.HasField("tensor_type")
               and v.type.tensor_type.HasField("shape")]
        if not vis:
            return
        shape = self.rng.choice(vis).type.tensor_type.shape
        if not shape.dim or self.rng.random() < 0.1:
            shape.dim.add().dim_value = self.rng.choice((1, 2))
            return
        d = shape.dim[self.rng.randrange(len(shape.dim))]
        r = self.rng.random()
        if r < 0.6:
            d.dim_value = self.rng.choice((0, -1, 1, 2 ** 24, 2 ** 31, 2 ** 32, 2 ** 40,
                                           2 ** 62, 2 ** 63 - 1, -2 ** 63))
        elif r < 0.85:
            d.dim_param = self.rng.choice(("N", "", "self", "ünï", "x y", "0", "inf", "M"))
        else:
            d.Clear()

    def elem_type(self, m: onnx.ModelProto) -> None:
        vis = list(m.graph.input) + list(m.graph.output)
        if vis:
            self.rng.choice(vis).type.tensor_type.elem_type = self.rng.randrange(0, 26)

    def initializer(self, m: onnx.ModelProto) -> None:
        if not m.graph.initializer:
            return
        t = self.rng.choice(m.graph.initializer)
        r = self.rng.random()
        if r < 0.25:
            t.data_type = self.rng.randrange(0, 26)
        elif r < 0.45:
            if t.dims and self.rng.random() < 0.5:
                t.dims[self.rng.randrange(len(t.dims))] = self.rng.choice((0, 2, 2 ** 31, -1,
                                                                           2 ** 62))
            else:
                t.dims.append(self.rng.choice((1, 2)))
        elif r < 0.7 and t.raw_data:
            raw = bytearray(t.raw_data)
            cut = self.rng.randrange(len(raw) + 1)
            t.raw_data = bytes(raw[:cut]) if self.rng.random() < 0.5 else bytes(raw) * 2
        elif r < 0.9 and t.data_type == TensorProto.INT64 and t.raw_data:
            a = numpy_helper.to_array(t).copy().reshape(-1)
            if a.size:
                a[self.rng.randrange(a.size)] = self.rng.choice(
                    (0, -1, 2 ** 62, 2 ** 63 - 1, -2 ** 63, 2 ** 31, 2 ** 40))
                t.raw_data = a.astype("<i8").tobytes()
        else:
            t.name = self.rng.choice(("", "X", t.name + "_", "self", "ünï"))

    def opset(self, m: onnx.ModelProto) -> None:
        if m.opset_import:
            m.opset_import[0].version = self.rng.choice((0, 1, 5, 6, 9, 10, 11, 12, 13, 18, 19,
                                                         22, 1000, 2 ** 62, -1))
        if self.rng.random() < 0.2:
            m.opset_import[0].domain = self.rng.choice(("com.microsoft", "ai.onnx", "x"))

    def op_type(self, m: onnx.ModelProto) -> None:
        n = self._node(m)
        if n is not None:
            n.op_type = self.rng.choice(("Relu", "Clip", "Slice", "MaxPool", "Resize", "Add",
                                         "Mul", "Reshape", "Cast", "ReduceSum", "Identity",
                                         "Constant", "Neg", "Sub", "relu", "")
                                        + MUTANT_OPS + TRANSFORMER_OPS)

    def rename(self, m: onnx.ModelProto) -> None:
        n = self._node(m)
        if n is None:
            return
        names = [i.name for i in m.graph.input] + [t.name for t in m.graph.initializer] + \
            [o for k in m.graph.node for o in k.output] + ["", "undefined", "ünï", "self"]
        if n.input and self.rng.random() < 0.6:
            n.input[self.rng.randrange(len(n.input))] = self.rng.choice(names)
        elif n.output:
            n.output[self.rng.randrange(len(n.output))] = self.rng.choice(names)

    def delete_node(self, m: onnx.ModelProto) -> None:
        if m.graph.node:
            del m.graph.node[self.rng.randrange(len(m.graph.node))]

    def duplicate_node(self, m: onnx.ModelProto) -> None:
        n = self._node(m)
        if n is not None:
            c = m.graph.node.add()
            c.CopyFrom(n)
            if self.rng.random() < 0.5:
                c.output[0] = c.output[0] + "_dup"

    def io(self, m: onnx.ModelProto) -> None:
        g = m.graph
        r = self.rng.random()
        if r < 0.3 and g.output:
            c = g.output.add()
            c.CopyFrom(g.output[0])
        elif r < 0.5 and g.input:
            c = g.input.add()
            c.CopyFrom(g.input[0])
            c.name = self.rng.choice((c.name, "Y", "self"))
        elif r < 0.7 and g.output:
            g.output[0].name = self.rng.choice([i.name for i in g.input] + ["nope"])
        elif g.input:
            g.input[0].type.tensor_type.ClearField("shape")

    def embedded(self, m: onnx.ModelProto) -> None:
        """Mutate the text IR ``to_onnx`` embeds, keeping its graph hash valid."""
        for p in m.metadata_props:
            if p.key == "gradc.ir":
                p.value = TextMutator(self.rng).mutate(p.value, self.rng.randint(1, 3)).encode(
                    "utf-8", "replace").decode("utf-8")
                return
        self.attr(m)


# -- the harness -------------------------------------------------------------------------------
def generate(rng: random.Random) -> dict[str, Any]:
    """A new model, mutated 0..3 times: built here, or a graph for ``to_onnx`` to export.

    An exported model is made in ``execute`` (``{"kind": "export", "text": ..., "mseed": s,
    "count": n}``: ``to_onnx(parse(text))`` mutated ``n`` times from seed ``s``), so that a
    crash of the exporter is an input's crash, reproducible and minimized like any other.
    """
    opts = {"seed": rng.getrandbits(32), "c": rng.random() < 0.15, "ort": False, "api": True}
    if rng.random() < 0.3:
        try:
            text = str(generate_graph(rng).graph)
            return {"kind": "export", "text": text, "mseed": rng.getrandbits(32),
                    "count": rng.choice((0, 1, 1, 2, 3)), **opts}
        except Exception:  # a graph that cannot be built or printed: build a model instead
            pass
    r = rng.random()
    gen = TrainingModelGen(rng) if r < 0.45 else TransformerModelGen(rng) if r < 0.75 else \
        ModelGen(rng)
    data = gen.build().SerializeToString()
    count = rng.choice((0, 0, 1, 1, 2, 3))
    opts["ort"] = count == 0
    data = ModelMutator(rng).mutate(data, count)
    return {"kind": "model", "model": data, **opts}


def model_bytes(payload: dict[str, Any]) -> bytes | None:
    """The model of a payload (exported and mutated for ``export``); None if refused."""
    if payload.get("kind") != "export":
        return payload["model"]
    try:
        data = gradc.to_onnx(parse(payload["text"])).SerializeToString()
    except GradcError:
        return None
    return ModelMutator(random.Random(payload["mseed"])).mutate(data, payload["count"])


def execute(payload: dict[str, Any]) -> str:
    """from_onnx, then every stage; unmutated models are also compared with onnxruntime."""
    data = model_bytes(payload)
    if data is None:
        return "refused:export"
    try:
        g = gradc.from_onnx(data)
    except GradcError:
        return "refused:import"
    st = Stages()
    status = check_graph(g, payload, st)
    if payload.get("ort") and st.refused is None:
        compare_onnxruntime(data, g, payload.get("seed", 0))
    return status


HUGE_ATTRIBUTE = 1 << 16  # windows, strides, pads past this: onnxruntime is not run on the model


def _known_divergence(data: bytes) -> bool:
    """Models where onnxruntime departs from the ONNX formula that gradc follows on purpose:
    linear Resize with tf_half_pixel_for_nn, whose scale-1 axes onnxruntime copies unchanged
    (SPEC.md §7.5; tests/test_onnx_import.py::test_resize_linear), and MaxPool with ceil_mode
    and an auto_pad other than NOTSET, where onnxruntime adds a window (SPEC.md §7.4;
    test_onnxruntime_disagreements_follow_spec); and a Transpose into a MatMul with a vector,
    which onnxruntime's optimizations get wrong (``_transposed_vector_matmul``)."""
    try:
        model = onnx.load_from_string(data)
    except Exception:  # not a model onnx reads: nothing to compare anyway
        return True
    if training_divergence(model) or ort_divergence(model) or _transposed_vector_matmul(model) \
            or _window_past_input(model):
        return True
    for node in model.graph.node:
        a = {x.name: onnx.helper.get_attribute_value(x) for x in node.attribute}
        ints = [v for x in node.attribute if x.type == onnx.AttributeProto.INTS for v in x.ints]
        if any(abs(v) > HUGE_ATTRIBUTE for v in ints):
            return True  # onnxruntime walks every tap of a 2**31 window: its own time, not ours
        if node.op_type == "MaxPool" and a.get("ceil_mode", 0) and \
                a.get("auto_pad", b"NOTSET") != b"NOTSET":
            return True
        if node.op_type == "Resize":
            if a.get("coordinate_transformation_mode") == b"tf_half_pixel_for_nn" and \
                    a.get("mode", b"nearest") != b"nearest":
                return True
    return False


def _window_past_input(model: onnx.ModelProto) -> bool:
    """A MaxPool or AveragePool whose window (dilated) is longer than its padded input on an
    axis: ONNX's output size is then ``(in + pads - window) / stride + 1`` with a division that
    truncates to 1, and onnxruntime 1.32's kernel reads that window's missing rows from memory
    past the input -- results that change from run to run (fuzz seed 9797: a 2x2 MaxPool over
    a 1x3 map, the loss 22-85 in onnxruntime against 1.96 in the reference)."""
    try:
        inferred = onnx.shape_inference.infer_shapes(model)
    except Exception:  # an invalid model: nothing to compare anyway
        return False
    shapes = {v.name: [d.dim_value if d.HasField("dim_value") else None
                       for d in v.type.tensor_type.shape.dim]
              for v in list(inferred.graph.input) + list(inferred.graph.value_info)}
    for node in model.graph.node:
        if node.op_type not in ("MaxPool", "AveragePool") or not node.input:
            continue
        a = {x.name: onnx.helper.get_attribute_value(x) for x in node.attribute}
        if a.get("auto_pad", b"NOTSET") not in (b"NOTSET", "NOTSET"):
            continue
        shape, kernel = shapes.get(node.input[0]), list(a.get("kernel_shape", []))
        if not shape or len(shape) != len(kernel) + 2:
            continue
        pads = list(a.get("pads", [0] * 2 * len(kernel)))
        dil = list(a.get("dilations", [1] * len(kernel)))
        for i, (n, k) in enumerate(zip(shape[2:], kernel)):
            if n is not None and (k - 1) * dil[i] + 1 > n + pads[i] + pads[i + len(kernel)]:
                return True
    return False


def _transposed_vector_matmul(model: onnx.ModelProto) -> bool:
    """A MatMul of a Transpose's result and a vector: onnxruntime 1.32's graph optimizations
    (ORT_ENABLE_ALL) fold the Transpose away there and multiply the untransposed matrix (fuzz
    seed 6262: ``Transpose(X[3,4]) @ w[3]`` gave ``X.reshape(4, 3) @ w``; ORT_ENABLE_BASIC
    and gradc give ``X.T @ w``)."""
    made = {o: n.op_type for n in model.graph.node for o in n.output}
    rank = {t.name: len(t.dims) for t in model.graph.initializer}
    try:
        inferred = onnx.shape_inference.infer_shapes(model)
        values = list(inferred.graph.value_info) + list(inferred.graph.input)
    except Exception:  # an invalid model: nothing onnxruntime runs either
        values = list(model.graph.input)
    for v in values:
        if v.type.tensor_type.HasField("shape"):
            rank.setdefault(v.name, len(v.type.tensor_type.shape.dim))
    for n in model.graph.node:
        if n.op_type == "MatMul" and len(n.input) == 2:
            a, b = n.input
            if (made.get(a) == "Transpose" and rank.get(b) == 1) or \
                    (made.get(b) == "Transpose" and rank.get(a) == 1):
                return True
    return False


def _nonfinite_inside(g: gradc.Graph, feeds: dict[str, np.ndarray],
                      bind: dict[str, int]) -> bool:
    """Whether the reference computes a NaN or an infinity anywhere inside the graph on
    ``feeds`` (a BatchNormalization fed a negative variance, a Log of a negative): from there
    on the two sides follow different NaN rules, whatever the outputs look like."""
    from gradc.ir.interpret import evaluate_node

    env: dict[int, np.ndarray] = {id(v): feeds[v.name] for v in g.inputs}
    env.update({id(p): feeds.get(p.name, p.value) for p in g.parameters})
    with np.errstate(all="ignore"):
        for n in g.nodes:
            outs = evaluate_node(n, [env[id(v)] for v in n.inputs], bind)
            for v, a in zip(n.outputs, outs):
                a = np.asarray(a)
                env[id(v)] = a
                if a.dtype.kind == "f" and not np.isfinite(a.astype(np.float64)).all():
                    return True
    return False


def compare_onnxruntime(data: bytes, g: gradc.Graph, seed: int) -> None:
    """onnxruntime on the original model against gradc's reference target on the import."""
    import onnxruntime as ort

    from fuzz.pipeline import feeds_for, symbols_of, total_elements

    rng = random.Random(seed)
    bind = {s: 2 for s in symbols_of(g)}
    if total_elements(g, bind) > 100_000 or _known_divergence(data):
        return
    if any(v.type.dtype.value == "float16" for v in g.values()) and \
            any(n.op in SUMMING for n in g.nodes):
        return  # onnxruntime drops float16 roundings (as check_graph's onnx rule): after a
        # sum or a normalization (a group's spread of a few float16 ulps) they show
    options = ort.SessionOptions()
    options.log_severity_level = 3  # its fusions' warnings on models it then refuses: noise
    try:
        sess = ort.InferenceSession(data, options, providers=["CPUExecutionProvider"])
    except Exception:  # onnxruntime refuses models gradc accepts (and the other way round)
        return
    feeds = feeds_for(g, bind, rng)
    for k in feeds:  # small finite values: NaN rules and integer overflow differ legitimately
        nrng = np.random.default_rng(rng.getrandbits(32))
        feeds[k] = (nrng.integers(-8, 9, feeds[k].shape) / 4.0).astype(feeds[k].dtype) \
            if feeds[k].dtype.kind == "f" else \
            nrng.integers(0, 5, feeds[k].shape).astype(feeds[k].dtype)
    try:
        ref = gradc.compile(g, target="reference", passes=None)(**feeds)
    except GradcError:
        return
    if _nonfinite_inside(g, feeds, bind):
        return  # NaN rules differ legitimately (gradc's relu(NaN) is +0, max pooling skips
        # NaN); onnxruntime then returns anything, finite garbage included
    names = [o.name for o in sess.get_outputs()]
    try:
        got = sess.run(names, feeds)
    except Exception:
        return
    # relative to at least the data's magnitude where terms are summed (a result that cancels
    # to about 0 carries the rounding of its terms: a layer norm then a product gave 0 in
    # onnxruntime and -5.9e-7 in the reference, seed 7171), and to a normalization's or
    # gelu's own bound
    floor = floor_for(g, feeds, bind)
    if any(n.op in SUMMING for n in g.nodes):
        floor = max(1.0, floor)
    for name, value in zip(names, got):
        if name not in ref or not isinstance(value, np.ndarray) or value.size == 0 \
                or value.dtype.kind != "f":
            continue  # gradc has no empty tensors (it clamps sizes where onnxruntime gives 0);
            # integer rounding and overflow rules are gradc's own (SPEC.md)
        with np.errstate(all="ignore"):
            finite = bool(np.isfinite(value.astype(np.float64)).all()
                          and np.isfinite(ref[name].astype(np.float64)).all())
        if finite and not close(value, ref[name], floor=floor):
            raise Finding("mismatch", f"onnxruntime-original:{g.nodes[-1].op if g.nodes else '-'}",
                          f"output {name!r}: onnxruntime on the original model and gradc's "
                          f"reference target differ beyond tolerance")


def reduce(payload: dict[str, Any], test: Callable[[Any], bool]) -> dict[str, Any]:
    """Fewer nodes, attributes, initializers, outputs, list entries; metadata dropped.

    An ``export`` input is reduced as text IR (and with fewer mutations) instead.
    """
    cur = dict(payload)
    for opt in ("c", "ort", "api"):
        if cur.get(opt) and test({**cur, opt: False}):
            cur[opt] = False
    if cur.get("kind") == "export":
        from fuzz.harnesses import ir

        if cur["count"] and test({**cur, "count": 0}):
            cur["count"] = 0
        return ir.reduce_text(cur, test)
    m = onnx.ModelProto()
    try:
        m.ParseFromString(cur["model"])
    except Exception:
        return cur

    def ok(model: onnx.ModelProto) -> bool:
        return test({**cur, "model": model.SerializeToString()})

    def shrink(field: Callable[[onnx.ModelProto], Any]) -> None:
        items = list(field(m))
        if len(items) < 2:
            return

        def with_items(sub: list[Any]) -> onnx.ModelProto:
            c = onnx.ModelProto()
            c.CopyFrom(m)
            f = field(c)
            del f[:]
            f.extend(sub)
            return c

        kept = ddmin(items, lambda sub: ok(with_items(sub)))
        if len(kept) < len(items):
            m.CopyFrom(with_items(kept))

    for f in (lambda x: x.graph.node, lambda x: x.graph.initializer, lambda x: x.graph.output,
              lambda x: x.graph.input, lambda x: x.metadata_props):
        shrink(f)
    if m.metadata_props:
        c = onnx.ModelProto()
        c.CopyFrom(m)
        del c.metadata_props[:]
        if ok(c):
            m.CopyFrom(c)
    for i in range(len(m.graph.node)):
        shrink(lambda x, i=i: x.graph.node[i].attribute)  # type: ignore[misc]
    return {**cur, "model": m.SerializeToString()}


def files(payload: dict[str, Any]) -> tuple[str, bytes | None, dict[str, Any]]:
    """The model as ``.onnx`` (an ``export`` input: its text as ``.ir``); options in JSON."""
    if payload.get("kind") == "export":
        rest = {k: v for k, v in payload.items() if k != "text"}
        return ".ir", payload["text"].encode("utf-8", "surrogatepass"), rest
    return ".onnx", payload["model"], {k: v for k, v in payload.items() if k != "model"}


def load(data: bytes | None, meta: dict[str, Any]) -> dict[str, Any]:
    """The payload of a stored case; a bare ``.onnx`` file gets default options."""
    if meta.get("kind") == "export":
        return {**meta, "text": (data or b"").decode("utf-8", "surrogatepass")}
    return {"seed": 0, "c": True, "ort": False, **meta, "kind": "model", "model": data or b""}
