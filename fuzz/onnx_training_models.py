"""ONNX models of the training-graph operators (SPEC-training.md §21) for the ``onnx`` harness.

``TrainingModelGen(rng).build()`` makes one small valid model (mostly): a chain of steps on a
float input (Conv, ConvTranspose, Gemm, MatMul, BatchNormalization in both modes, AveragePool,
the global pools, ReduceMean/Max/Min in their attribute and input forms, Concat, Split in every
opset form, Transpose, Pad with negative pads, Softmax/LogSoftmax, the unary and binary math,
comparisons and Where, Dropout, Flatten, Squeeze/Unsqueeze, the exporters' shape subgraphs
feeding Reshape/Expand/Resize), now and then started by a OneHot and ended by a loss, or a
fixed CNN or MLP training chain. Weights are initializers (parameters), graph inputs, or both.
A step is used only when gradc's importer has a converter for each op type it emits
(``CONVERTERS`` when the model is built), so the harness keeps working while converters land.
Attribute values are boundary values now and then (``edge``); the harness's mutators then make
invalid models of these.
"""

from __future__ import annotations

import random
from typing import Any, Callable

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from gradc.backends.onnx import importer  # noqa: F401  (imports every converter module)
from gradc.backends.onnx.import_node import CONVERTERS

from fuzz.graphgen import FLOAT_EDGES, INT_EDGES
from fuzz.onnx_training_steps import Dims, MovementSteps, Step, st

INT64_EDGES = tuple(v for v in INT_EDGES if -2 ** 63 <= v < 2 ** 63)
OPSETS = (10, 11, 12, 13, 13, 14, 15, 17, 18, 18, 19, 21, 22)
ELEMS = (TensorProto.FLOAT,) * 6 + (TensorProto.DOUBLE, TensorProto.FLOAT16)
# For the mutators: op types and attribute names of §21 to swap in or add.
MUTANT_OPS = ("Conv", "ConvTranspose", "Gemm", "MatMul", "BatchNormalization", "AveragePool",
              "GlobalAveragePool", "GlobalMaxPool", "ReduceMean", "ReduceMax", "ReduceMin",
              "Concat", "Split", "Transpose", "Pad", "Softmax", "LogSoftmax", "Sigmoid", "Tanh",
              "Exp", "Log", "Sqrt", "LeakyRelu", "Div", "Pow", "Max", "Min", "Greater", "Less",
              "Equal", "GreaterOrEqual", "LessOrEqual", "Where", "OneHot",
              "SoftmaxCrossEntropyLoss", "NegativeLogLikelihoodLoss", "Dropout", "Flatten",
              "Squeeze", "Unsqueeze", "Shape", "Gather", "ConstantOfShape", "Expand")
MUTANT_ATTRS = ("axis", "perm", "group", "epsilon", "momentum", "training_mode", "transA",
                "transB", "alpha", "beta", "num_outputs", "split", "count_include_pad",
                "reduction", "ignore_index", "output_padding", "output_shape", "spatial",
                "is_test", "noop_with_empty_axes", "start", "end", "seed", "ratio")


def available() -> frozenset[str]:
    """The ONNX op types gradc's importer converts now."""
    return frozenset(CONVERTERS)


class TrainingModelGen(MovementSteps):
    """Builds one model of §21's ops (see the module docstring); the data-movement, math and
    shape-subgraph steps are ``MovementSteps``'s."""

    def __init__(self, rng: random.Random, ops: frozenset[str] | None = None) -> None:
        self.rng = rng
        self.ops = available() if ops is None else ops
        self.edge = rng.choice((0.0, 0.0, 0.04, 0.12))
        self.opset = rng.choice(OPSETS)
        self.elem: int = rng.choice(ELEMS)
        self.dt = np.dtype(helper.tensor_dtype_to_np_dtype(self.elem))
        self.cur_elem = self.elem
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[onnx.TensorProto] = []
        self.inputs: list[onnx.ValueInfoProto] = []
        self.outputs: list[tuple[str, int, int]] = []  # extra outputs: name, elem, rank
        self.weight_mode = rng.choice(("init", "init", "input", "both", "mixed"))
        self.k = 0
        self.done = False  # a loss or a comparison ended the chain

    # -- pieces ---------------------------------------------------------------------------------
    def has(self, *ops: str) -> bool:
        """Whether every op type is imported by gradc now."""
        return all(o in self.ops for o in ops)

    def name(self, base: str) -> str:
        self.k += 1
        return f"{base}{self.k}"

    def int_(self, v: int) -> int:
        return self.rng.choice(INT64_EDGES) if self.rng.random() < self.edge else v

    def ints(self, vals: list[int]) -> list[int]:
        return [self.int_(v) for v in vals]

    def float_(self, v: float) -> float:
        return self.rng.choice(FLOAT_EDGES) if self.rng.random() < self.edge else v

    def node(self, op: str, ins: list[str], n_out: int = 1, **attrs: Any) -> list[str]:
        """Append a node; returns its output names."""
        outs = [self.name("t") for _ in range(n_out)]
        self.nodes.append(helper.make_node(op, ins, outs, **attrs))
        return outs

    def graph_input(self, dims: Dims, elem: int | None = None, base: str = "in") -> str:
        n = self.name(base)
        self.inputs.append(helper.make_tensor_value_info(n, self.elem if elem is None else elem,
                                                         dims))
        return n

    def array(self, shape: Dims, positive: bool = False) -> np.ndarray:
        nrng = np.random.default_rng(self.rng.getrandbits(32))
        a = nrng.integers(1 if positive else -8, 9, [st(d) for d in shape]) / 4.0
        return a.astype(self.dt)

    def weight(self, shape: Dims, positive: bool = False) -> str:
        """A float weight: an initializer (a parameter), a graph input, or both."""
        mode = self.weight_mode if self.weight_mode != "mixed" else \
            self.rng.choice(("init", "input", "both"))
        if mode == "input" or any(isinstance(d, str) for d in shape):
            return self.graph_input(shape, base="w")
        n = self.name("w")
        self.inits.append(numpy_helper.from_array(self.array(shape, positive), n))
        if mode == "both":
            self.inputs.append(helper.make_tensor_value_info(n, self.elem, shape))
        return n

    def const(self, values: Any, dtype: Any = np.int64) -> str:
        """A constant: an initializer mostly, a Constant node now and then."""
        if np.dtype(dtype) == np.int64 and isinstance(values, list):
            values = [min(max(int(v), -2 ** 63), 2 ** 63 - 1) for v in values]
        arr = np.array(values, dtype=dtype)
        if self.rng.random() < 0.15 and self.has("Constant"):
            return self.node("Constant", [], value=numpy_helper.from_array(arr))[0]
        n = self.name("c")
        self.inits.append(numpy_helper.from_array(arr, n))
        return n

    def axes_form(self, op: str, x: str, axes: list[int] | None, attr_before: int,
                  **attrs: Any) -> str:
        """``op`` with ``axes`` as an attribute (opset < ``attr_before``) or as input 1."""
        if axes is None:
            return self.node(op, [x], **attrs)[0]
        if self.opset < attr_before:
            return self.node(op, [x], axes=self.ints(axes), **attrs)[0]
        return self.node(op, [x, self.const(self.ints(axes))], **attrs)[0]

    def neg(self, axis: int, rank: int, p: float) -> int:
        """``axis``, or with probability ``p`` its negative form (ONNX allows it from opset 11)."""
        return axis - rank if self.opset >= 11 and self.rng.random() < p else axis

    def float_ok(self) -> bool:
        return self.cur_elem in (TensorProto.FLOAT, TensorProto.DOUBLE, TensorProto.FLOAT16)

    # -- steps: (x, dims) -> (y, dims), or None when the step does not apply --------------------
    def _window(self, n: int) -> tuple[int, int, int, int, int]:
        """(kernel, stride, dilation, pad start, pad end) that fit a spatial size ``n``."""
        k = self.rng.randint(1, min(3, n))
        d = self.rng.choice((1, 1, 2)) if (k - 1) * 2 + 1 <= n else 1
        s = self.rng.choice((1, 1, 2))
        pb, pe = (self.rng.randint(0, k - 1), self.rng.randint(0, k - 1)) \
            if self.rng.random() < 0.5 else (0, 0)
        return k, s, d, pb, pe

    def _windows(self, sp: list[int], dil: bool = True) -> tuple[dict[str, Any], list[int]]:
        """Conv/pool attributes for spatial sizes ``sp``; the kernel; output sizes in attrs."""
        ws = [self._window(n) for n in sp]
        if not dil:
            ws = [(k, s, 1, pb, pe) for k, s, _, pb, pe in ws]
        attrs: dict[str, Any] = {}
        if self.rng.random() < 0.7:
            attrs["strides"] = self.ints([w[1] for w in ws])
        else:
            ws = [(k, 1, d, pb, pe) for k, _, d, pb, pe in ws]
        if dil and any(w[2] > 1 for w in ws):
            attrs["dilations"] = self.ints([w[2] for w in ws])
        else:
            ws = [(k, s, 1, pb, pe) for k, s, _, pb, pe in ws]
        auto = self.rng.random() < 0.12
        if auto:
            attrs["auto_pad"] = self.rng.choice(("SAME_UPPER", "SAME_LOWER", "VALID"))
        elif any(w[3] or w[4] for w in ws) or self.rng.random() < 0.2:
            attrs["pads"] = self.ints([w[3] for w in ws] + [w[4] for w in ws])
        out = []
        for n, (k, s, d, pb, pe) in zip(sp, ws):
            ek = (k - 1) * d + 1
            if auto and attrs["auto_pad"] != "VALID":
                out.append(-(-n // s))
            elif auto:
                out.append((n - ek) // s + 1)
            else:
                out.append((n + pb + pe - ek) // s + 1)
        return {**attrs, "_out": out}, [w[0] for w in ws]

    def s_conv(self, x: str, dims: Dims) -> Step:
        r = len(dims)
        if not self.has("Conv") or not 3 <= r <= 5 or not isinstance(dims[1], int):
            return None
        c = dims[1]
        group = self.rng.choice([g for g in (1, 1, 1, 2, c) if c % g == 0])
        m = group * self.rng.randint(1, 2)
        attrs, k = self._windows([st(d) for d in dims[2:]])
        out = attrs.pop("_out")
        if group != 1 or self.rng.random() < 0.1:
            attrs["group"] = self.int_(group)
        if self.rng.random() < 0.3:
            attrs["kernel_shape"] = self.ints(k)
        ins = [x, self.weight([m, c // group, *k])]
        if self.rng.random() < 0.5:
            ins.append(self.weight([m]))
        return self.node("Conv", ins, **attrs)[0], [dims[0], m, *out]

    def s_conv_transpose(self, x: str, dims: Dims) -> Step:
        r = len(dims)
        if not self.has("ConvTranspose") or not 3 <= r <= 5 or not isinstance(dims[1], int):
            return None
        c = dims[1]
        group = self.rng.choice([g for g in (1, 1, 2, c) if c % g == 0])
        mg = self.rng.randint(1, 2)
        sp = [st(d) for d in dims[2:]]
        k = [self.rng.randint(1, 3) for _ in sp]
        s = [self.rng.choice((1, 2)) for _ in sp]
        op = [self.rng.randint(0, st - 1) if self.rng.random() < 0.3 else 0 for st in s]
        pads = [self.rng.randint(0, kk - 1) for kk in k] + [self.rng.randint(0, kk - 1)
                                                              for kk in k]
        attrs: dict[str, Any] = {"strides": self.ints(s)}
        if group != 1:
            attrs["group"] = self.int_(group)
        if any(op):
            attrs["output_padding"] = self.ints(op)
        full = [st * (n - 1) + o + kk for n, st, o, kk in zip(sp, s, op, k)]
        if self.rng.random() < 0.25:
            want = [max(1, f - self.rng.randint(0, 1)) for f in full]
            attrs["output_shape"] = self.ints(want)
            out = want
        else:
            if any(pads) or self.rng.random() < 0.3:
                attrs["pads"] = self.ints(pads)
            nd = len(sp)
            out = [f - pads[i] - pads[nd + i] for i, f in enumerate(full)]
            if min(out) < 1:
                return None
        ins = [x, self.weight([c, mg, *k])]
        if self.rng.random() < 0.4:
            ins.append(self.weight([mg * group]))
        return self.node("ConvTranspose", ins, **attrs)[0], [dims[0], mg * group, *out]

    def s_gemm(self, x: str, dims: Dims) -> Step:
        if not self.has("Gemm") or len(dims) != 2:
            return None
        ta = self.rng.random() < 0.25 and isinstance(dims[0], int)
        tb = self.rng.random() < 0.4
        m, kk = (dims[1], dims[0]) if ta else (dims[0], dims[1])
        if not isinstance(kk, int):
            return None
        n = self.rng.randint(1, 6)
        attrs: dict[str, Any] = {}
        if ta:
            attrs["transA"] = self.int_(1)
        if tb:
            attrs["transB"] = self.int_(1)
        if self.rng.random() < 0.25:
            attrs["alpha"] = self.float_(self.rng.choice((0.5, 2.0, -1.0)))
        if self.rng.random() < 0.25:
            attrs["beta"] = self.float_(self.rng.choice((0.0, 0.5, 2.0)))
        ins = [x, self.weight([n, kk] if tb else [kk, n])]
        if self.rng.random() < 0.7 or self.opset < 11:
            cs = self.rng.choice(([n], [n], [1, n], [], [1]) + (([m, n],) if
                                                                 isinstance(m, int) else ()))
            ins.append(self.weight(cs))
        return self.node("Gemm", ins, **attrs)[0], [m, n]

    def s_matmul(self, x: str, dims: Dims) -> Step:
        if not self.has("MatMul") or not dims or not isinstance(dims[-1], int):
            return None
        kk = dims[-1]
        r = self.rng.random()
        if r < 0.2:
            return self.node("MatMul", [x, self.weight([kk])])[0], dims[:-1]
        n = self.rng.randint(1, 4)
        if r < 0.35 and len(dims) >= 3:
            bd = [d if isinstance(d, int) and self.rng.random() < 0.5 else 1 for d in dims[-3:-2]]
            return self.node("MatMul", [x, self.weight([*bd, kk, n])])[0], [*dims[:-1], n]
        if r < 0.5 and len(dims) == 2 and isinstance(dims[0], int):
            p = self.rng.randint(1, 3)
            return self.node("MatMul", [self.weight([p, dims[0]]), x])[0], [p, dims[1]]
        return self.node("MatMul", [x, self.weight([kk, n])])[0], [*dims[:-1], n]

    def s_batch_norm(self, x: str, dims: Dims) -> Step:
        if not self.has("BatchNormalization") or len(dims) < 2 or not isinstance(dims[1], int):
            return None
        c = dims[1]
        train = self.opset >= 14 and self.rng.random() < 0.4
        ins = [x, self.weight([c]), self.weight([c])]
        ins += [self.weight([c]), self.weight([c], positive=True)]
        attrs: dict[str, Any] = {}
        if self.rng.random() < 0.3:
            attrs["epsilon"] = self.float_(self.rng.choice((1e-5, 1e-3, 0.1)))
        if self.rng.random() < 0.3:
            attrs["momentum"] = self.float_(self.rng.choice((0.9, 0.1, 0.0)))
        if train:
            attrs["training_mode"] = self.int_(1)
            outs = self.node("BatchNormalization", ins, 3, **attrs)  # ONNX wants all 3
            self.outputs += [(o, self.elem, 1) for o in outs[1:] if self.rng.random() < 0.8]
            return outs[0], dims
        if self.rng.random() < 0.1 and self.opset >= 14:
            attrs["training_mode"] = 0
        return self.node("BatchNormalization", ins, **attrs)[0], dims

    def s_average_pool(self, x: str, dims: Dims) -> Step:
        r = len(dims)
        if not self.has("AveragePool") or not (r in (4, 5) or (r == 3 and self.rng.random()
                                                                < 0.2)):
            return None
        attrs, k = self._windows([st(d) for d in dims[2:]], dil=self.opset >= 19)
        out = attrs.pop("_out")
        attrs["kernel_shape"] = self.ints(k)
        if self.rng.random() < 0.4:
            attrs["count_include_pad"] = self.int_(self.rng.choice((0, 1)))
        if self.opset >= 10 and self.rng.random() < 0.25:
            attrs["ceil_mode"] = 1  # the tracked size may be one short: later steps refuse
        return self.node("AveragePool", [x], **attrs)[0], [*dims[:2], *out]

    def s_global_pool(self, x: str, dims: Dims) -> Step:
        op = self.rng.choice(("GlobalAveragePool", "GlobalMaxPool"))
        if not self.has(op) or len(dims) < 3:
            return None
        return self.node(op, [x])[0], [*dims[:2]] + [1] * (len(dims) - 2)

    def s_reduce(self, x: str, dims: Dims) -> Step:
        op = self.rng.choice(("ReduceMean", "ReduceMax", "ReduceMin"))
        if not self.has(op) or not dims:
            return None
        r = len(dims)
        keep = self.rng.choice((0, 1, 1))
        attrs: dict[str, Any] = {} if keep == 1 and self.rng.random() < 0.5 else {"keepdims": keep}
        if self.rng.random() < 0.15:
            if self.opset >= 18 and self.rng.random() < 0.5:
                attrs["noop_with_empty_axes"] = 1
                return self.node(op, [x], **attrs)[0], dims
            return self.node(op, [x], **attrs)[0], [1] * r if keep else []
        axes = sorted(self.rng.sample(range(r), self.rng.randint(1, r)))
        y = self.axes_form(op, x, [self.neg(a, r, 0.3) for a in axes], 18,
                           **attrs)
        return y, [1 if i in axes else d for i, d in enumerate(dims)] if keep else \
            [d for i, d in enumerate(dims) if i not in axes]

    # -- sources and ends ----------------------------------------------------------------------
    def one_hot(self) -> tuple[str, Dims] | None:
        """A OneHot of integer (or float) indices: the chain's start."""
        if not self.has("OneHot") or self.opset < 9:
            return None
        batch = self._batch()
        idims: Dims = [batch] + [self.rng.randint(1, 3) for _ in range(self.rng.randint(0, 1))]
        elem = self.rng.choice((TensorProto.INT64, TensorProto.INT64, TensorProto.INT32,
                                TensorProto.FLOAT))
        idx = self.graph_input(idims, elem, base="idx")
        depth = self.rng.randint(1, 6)
        dt = self.rng.choice((np.int64, np.int32, np.float32))
        d = self.const(np.array(self.int_(depth) if dt != np.float32 else float(depth), dt)
                       .reshape(self.rng.choice(((), (1,)))), dt)
        vals = self.const(np.array([self.rng.choice((0.0, -1.0)), self.rng.choice((1.0, 3.0))],
                                   self.dt), self.dt)
        r = len(idims) + 1
        axis = self.rng.randint(-r, r - 1)
        attrs = {"axis": self.int_(axis)} if axis != -1 or self.rng.random() < 0.3 else {}
        y = self.node("OneHot", [idx, d, vals], **attrs)[0]
        out = list(idims)
        out.insert(axis % r, depth)
        return y, out

    def loss(self, x: str, dims: Dims) -> Step:
        """SoftmaxCrossEntropyLoss or NegativeLogLikelihoodLoss on (N, C, d...) scores."""
        op = self.rng.choice(("SoftmaxCrossEntropyLoss", "NegativeLogLikelihoodLoss"))
        if not self.has(op) or len(dims) < 2 or not isinstance(dims[1], int) or self.opset < 12:
            return None
        c = dims[1]
        ldims = [dims[0], *dims[2:]]
        if self.rng.random() < 0.8 or any(isinstance(d, str) for d in ldims):
            labels = self.graph_input(ldims, self.rng.choice((TensorProto.INT64,
                                                              TensorProto.INT32)), base="y")
        else:
            nrng = np.random.default_rng(self.rng.getrandbits(32))
            labels = self.const(nrng.integers(0, c, [st(d) for d in ldims]).astype(np.int64))
        if op == "NegativeLogLikelihoodLoss" and self.has("LogSoftmax"):
            x = self.node("LogSoftmax", [x], axis=1)[0]
        ins = [x, labels]
        if self.rng.random() < 0.3:
            ins.append(self.weight([c], positive=True))
        attrs: dict[str, Any] = {}
        if self.rng.random() < 0.7:
            attrs["reduction"] = self.rng.choice(("mean", "sum", "none"))
        if self.rng.random() < 0.3:
            attrs["ignore_index"] = self.int_(self.rng.randint(-1, c))
        n_out = 2 if op == "SoftmaxCrossEntropyLoss" and self.rng.random() < 0.4 else 1
        outs = self.node(op, ins, n_out, **attrs)
        self.outputs += [(o, self.elem, len(dims)) for o in outs[1:]]
        self.done = True
        red = attrs.get("reduction", "mean")
        return outs[0], ldims if red == "none" else []

    # -- models ---------------------------------------------------------------------------------
    def _batch(self) -> Any:
        return "N" if self.rng.random() < 0.3 else self.rng.randint(1, 3)

    STEPS = ("s_conv", "s_conv", "s_conv_transpose", "s_gemm", "s_matmul", "s_batch_norm",
             "s_average_pool", "s_global_pool", "s_reduce", "s_concat", "s_split", "s_split",
             "s_transpose", "s_pad", "s_softmax", "s_unary", "s_binary", "s_compare",
             "s_dropout", "s_flatten", "s_squeeze", "s_shape_reshape", "s_shape_expand",
             "s_shape_resize")
    CNN = ("s_conv", "s_batch_norm", "relu", "maxpool", "s_global_pool", "s_flatten", "s_gemm")
    MLP = ("s_flatten", "s_gemm", "relu", "s_dropout", "s_gemm", "s_softmax")

    def relu(self, x: str, dims: Dims) -> Step:
        return self.node("Relu", [x])[0], dims

    def maxpool(self, x: str, dims: Dims) -> Step:
        if len(dims) not in (4, 5):
            return None
        k = [min(2, st(d)) for d in dims[2:]]
        return self.node("MaxPool", [x], kernel_shape=k, strides=k)[0], \
            [*dims[:2], *[st(d) // kk for d, kk in zip(dims[2:], k)]]

    def build(self, recipe: str | None = None) -> onnx.ModelProto:
        """One model (see the module docstring); ``recipe``: chain, cnn, mlp or onehot."""
        rng = self.rng
        recipe = recipe or rng.choice(("chain", "chain", "chain", "chain", "cnn", "mlp",
                                       "onehot"))
        try:
            start = self.one_hot() if recipe == "onehot" else None
        except (ValueError, OverflowError, TypeError):
            start = None  # an edge depth NumPy cannot hold in the chosen dtype
        if start is None:
            rank = rng.choice((4, 4, 4, 3, 2, 5)) if recipe != "mlp" else rng.choice((2, 4))
            dims: Dims = [self._batch()] + [rng.randint(1, 4) for _ in range(rank - 1)]
            cur = self.graph_input(dims, base="X")
        else:
            cur, dims = start
        plan: list[str] = list(self.CNN if recipe == "cnn" else self.MLP if recipe == "mlp"
                               else [rng.choice(self.STEPS)
                                     for _ in range(rng.choice((1, 2, 3, 4)))])
        for name in plan:
            if self.done or not self.float_ok():
                break
            step: Callable[[str, Dims], Step] = getattr(self, name)
            for _ in range(1 if recipe in ("cnn", "mlp") else 4):
                try:
                    got = step(cur, dims)
                except (ValueError, OverflowError, TypeError):
                    got = None  # edge values onnx.helper or NumPy cannot hold: skip the step
                if got is not None:
                    cur, dims = got
                    break
                step = getattr(self, rng.choice(self.STEPS))
        if not self.nodes:  # every step refused the input: one op, so that the output is no input
            cur = self.node("Relu", [cur])[0]
        if not self.done and (recipe in ("cnn", "mlp") or rng.random() < 0.2):
            got = self.loss(cur, dims)
            if got is not None:
                cur, dims = got
        outs = [helper.make_tensor_value_info(cur, self.cur_elem, [None] * len(dims))]
        outs += [helper.make_tensor_value_info(n, e, [None] * r) for n, e, r in self.outputs]
        graph = helper.make_graph(self.nodes, rng.choice(("main", "torch_jit", "g")),
                                  self.inputs, outs, self.inits)
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", self.opset)])
        model.ir_version = 7 if self.opset <= 13 else 8 if self.opset <= 15 else \
            9 if self.opset <= 20 else 10
        _output_types(model)
        return model


def _output_types(model: onnx.ModelProto) -> None:
    """Give the outputs the types ONNX shape inference finds (the checker wants a shape)."""
    try:
        inferred = onnx.shape_inference.infer_shapes(model, data_prop=True)
    except Exception:  # an invalid model (edge values): outputs keep their bare types
        return
    types = {v.name: v.type for v in list(inferred.graph.value_info)
             + list(inferred.graph.output)}
    for out in model.graph.output:
        t = types.get(out.name)
        if t is not None and t.tensor_type.HasField("shape"):
            out.type.CopyFrom(t)


def training_divergence(model: onnx.ModelProto) -> bool:
    """Models whose onnxruntime results differ from gradc's on purpose (SPEC-training §21):
    a training-mode Dropout (random numbers of gradc's own generator, SPEC-training §20)."""
    for node in model.graph.node:
        if node.op_type == "Dropout" and len(node.input) > 2 and node.input[2]:
            return True
    return False


__all__ = ["TrainingModelGen", "available", "training_divergence", "MUTANT_OPS",
           "MUTANT_ATTRS"]
